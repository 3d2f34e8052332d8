"""Hugging Face transformers attention modules as mhagen sees them.

Each case builds one model's attention module from a small config with
random weights (no download) and gives what an mhagen layer kernel needs to
compute the same thing: the spec's CLI flags, the call's inputs in the
ABI's layout (W [in, out] row-major, biases, QK-norm gains) and the token
positions, and the module's own forward on x [B, T, d] with the mask that
transformers' masking_utils defines for it. Shared by the oracle
(layer_transformers.py) and the golden writer (layer_goldens.py).
"""
import torch

from transformers import masking_utils


def consecutive(B, T):
    return torch.arange(T)[None].expand(B, -1)


def spread(B, T):
    """Positions with gaps (a chunk after cached tokens, then jumps): the
    scores see them only through their differences."""
    g = torch.Generator().manual_seed(7)
    return 1000 + torch.cumsum(torch.randint(1, 5, (B, T), generator=g), dim=1)


def additive_mask(mask_function, T, start=0):
    """[1, 1, T, start + T]: 0 where transformers' mask function lets query
    q (at position start + q, after `start` cached tokens) see key k, -inf
    elsewhere."""
    q = torch.arange(start, start + T)[:, None]
    k = torch.arange(start + T)[None, :]
    visible = mask_function(0, 0, q, k)
    return torch.where(visible, 0.0, float("-inf"))[None, None]


class Case:
    """One module: flags for `mhagen`, inputs by ABI name, positions(B, T),
    and forward(x, cache=None, start=0) -> the module's attention output;
    with a transformers Cache holding `start` tokens, the call's tokens sit
    at positions start.. and their K/V join the cache."""

    def __init__(self, flags, inputs, forward, positions=consecutive):
        self.flags = flags
        self.inputs = inputs
        self.forward = forward
        self.positions = positions

    @property
    def d(self):
        return self.inputs["w_q"].shape[0]

    @property
    def runtime_positions(self):
        return "--positions" in self.flags


def _rms_gains(attn):
    """Random gains for a module's q_norm and k_norm (ones would hide a
    swapped or missing weight)."""
    gains = {}
    for name in ("q_norm", "k_norm"):
        norm = getattr(attn, name, None)
        if norm is not None:
            torch.nn.init.uniform_(norm.weight, 0.5, 1.5)
            gains[name] = norm.weight.detach()
    return gains


def _linear_inputs(projections, with_bias):
    """W [in, out] (and b) for q, k, v, o from nn.Linear modules."""
    inputs = {}
    for name, lin in zip("qkvo", projections):
        inputs["w_" + name] = lin.weight.detach().T
        if with_bias:
            b = lin.bias
            inputs["b_" + name] = (b.detach() if b is not None
                                   else torch.zeros(lin.weight.shape[0]))
    return inputs


def _randomize_biases(module):
    for lin in module.modules():
        if isinstance(lin, torch.nn.Linear) and lin.bias is not None:
            torch.nn.init.uniform_(lin.bias, -0.5, 0.5)


def module_case(attn, rotary, projections, flags, positions=consecutive,
                mask_function=masking_utils.causal_mask_function,
                with_bias=False, inputs=None):
    """A module with q_proj/k_proj/v_proj/o_proj-style projections and a
    forward(hidden_states, position_embeddings=, attention_mask=)."""
    attn.eval()
    if with_bias:
        _randomize_biases(attn)
    gains = _rms_gains(attn)
    if inputs is None:
        inputs = _linear_inputs(projections, with_bias)
    inputs.update(gains)

    def forward(x, cache=None, start=0):
        pos = positions(x.shape[0], x.shape[1]) + start
        return attn(x, position_embeddings=rotary(x, pos), cache=cache,
                    attention_mask=additive_mask(mask_function, x.shape[1], start))[0]

    return Case(flags, inputs, forward, positions)


def _shape_flags(d, h, kv, dk=None, mask="causal"):
    flags = ["--d", str(d), "--h", str(h), "--kv", str(kv), "--mask", mask]
    if dk is not None:
        flags += ["--dk", str(dk)]
    return flags


LLAMA3_PARAMETERS = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 64}
LLAMA3_TEXT = ("half(theta = 500000, scaling = llama3(factor = 8, low_freq_factor = 1, "
               "high_freq_factor = 4, original_max_position_embeddings = 64))")


def llama(rope_parameters, rope_text, d=256, h=4, kv=2, max_positions=4096,
          positions=consecutive):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding
    cfg = LlamaConfig(hidden_size=d, num_attention_heads=h, num_key_value_heads=kv,
                      rope_parameters=rope_parameters, max_position_embeddings=max_positions,
                      attn_implementation="eager")
    attn = LlamaAttention(cfg, layer_idx=0)
    flags = _shape_flags(d, h, kv) + ["--rope", rope_text]
    if positions is not consecutive:
        flags += ["--positions", "runtime"]
    return module_case(attn, LlamaRotaryEmbedding(cfg),
                       [attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj], flags, positions)


def qwen2(d=224, h=7, kv=1):
    """q/k/v biases (o_proj has none: its bias is passed as zeros) and a
    GQA group of 7."""
    from transformers import Qwen2Config
    from transformers.models.qwen2.modeling_qwen2 import Qwen2Attention, Qwen2RotaryEmbedding
    cfg = Qwen2Config(hidden_size=d, num_attention_heads=h, num_key_value_heads=kv,
                      rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                      attn_implementation="eager")
    attn = Qwen2Attention(cfg, layer_idx=0)
    return module_case(attn, Qwen2RotaryEmbedding(cfg),
                       [attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj],
                       _shape_flags(d, h, kv) + ["--bias",
                                                 "--rope", "half(theta = 1000000)"],
                       with_bias=True)


def qwen3(d=256, h=8, kv=2, head_dim=64):
    from transformers import Qwen3Config
    from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention, Qwen3RotaryEmbedding
    cfg = Qwen3Config(hidden_size=d, num_attention_heads=h, num_key_value_heads=kv,
                      head_dim=head_dim, rms_norm_eps=1e-6,
                      rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                      attn_implementation="eager")
    attn = Qwen3Attention(cfg, layer_idx=0)
    return module_case(attn, Qwen3RotaryEmbedding(cfg),
                       [attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj],
                       _shape_flags(d, h, kv, dk=head_dim) +
                       ["--qk-norm", "head(eps = 1e-6)", "--rope", "half(theta = 1000000)"])


def olmo2(d=256, h=4, kv=4):
    from transformers import Olmo2Config
    from transformers.models.olmo2.modeling_olmo2 import Olmo2Attention, Olmo2RotaryEmbedding
    cfg = Olmo2Config(hidden_size=d, num_attention_heads=h, num_key_value_heads=kv,
                      rms_norm_eps=1e-6,
                      rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
                      attn_implementation="eager")
    attn = Olmo2Attention(cfg, layer_idx=0)
    return module_case(attn, Olmo2RotaryEmbedding(cfg),
                       [attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj],
                       _shape_flags(d, h, kv) + ["--qk-norm", "projection(eps = 1e-6)",
                                                 "--rope", "half(theta = 500000)"])


def gptj(d=256, h=4, rotary_dim=32):
    from transformers import GPTJConfig
    from transformers.models.gptj.modeling_gptj import GPTJAttention, GPTJRotaryEmbedding
    cfg = GPTJConfig(n_embd=d, n_head=h, rotary_dim=rotary_dim, attn_implementation="eager")
    attn = GPTJAttention(cfg, layer_idx=0)
    return module_case(attn, GPTJRotaryEmbedding(cfg),
                       [attn.q_proj, attn.k_proj, attn.v_proj, attn.out_proj],
                       _shape_flags(d, h, h) +
                       ["--rope", f"interleaved(theta = 10000, dim = {rotary_dim})"])


def gpt_neox(d=128, h=4, rotary_pct=0.25):
    """Partial rotary (25 %), half-split, biases on all four projections;
    q, k and v come from one fused projection whose rows are grouped per
    head as [q | k | v], split here into the ABI's three."""
    from transformers import GPTNeoXConfig
    from transformers.models.gpt_neox.modeling_gpt_neox import (GPTNeoXAttention,
                                                                GPTNeoXRotaryEmbedding)
    cfg = GPTNeoXConfig(hidden_size=d, num_attention_heads=h, attention_bias=True,
                        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                         "partial_rotary_factor": rotary_pct},
                        attn_implementation="eager")
    attn = GPTNeoXAttention(cfg, layer_idx=0)
    attn.eval()
    _randomize_biases(attn)
    dk = d // h
    w = attn.query_key_value.weight.detach().view(h, 3, dk, d)
    b = attn.query_key_value.bias.detach().view(h, 3, dk)
    inputs = {}
    for i, name in enumerate("qkv"):
        inputs["w_" + name] = w[:, i].reshape(h * dk, d).T
        inputs["b_" + name] = b[:, i].reshape(h * dk)
    inputs["w_o"] = attn.dense.weight.detach().T
    inputs["b_o"] = attn.dense.bias.detach()
    rotary = GPTNeoXRotaryEmbedding(cfg)

    def forward(x, cache=None, start=0):
        pos = consecutive(x.shape[0], x.shape[1]) + start
        mask = additive_mask(masking_utils.causal_mask_function, x.shape[1], start)
        return attn(x, attention_mask=mask, layer_past=cache,
                    position_embeddings=rotary(x, pos))[0]

    flags = _shape_flags(d, h, h) + ["--bias", "--rope",
                                     f"half(theta = 10000, dim = {int(dk * rotary_pct)})"]
    return Case(flags, inputs, forward)


def gemma2(sliding, d=128, h=2, kv=1, head_dim=256, window=5, query_pre_attn_scalar=144):
    """Softcap 50, the scale 1/sqrt(query_pre_attn_scalar), head width 256,
    and (on a sliding layer) the window of `window` keys. W_q and W_k are
    scaled up so the scores reach about 100 and the cap bends them (V, and
    so the outputs, stay O(1))."""
    from transformers import Gemma2Config
    from transformers.models.gemma2.modeling_gemma2 import Gemma2Attention, Gemma2RotaryEmbedding
    cfg = Gemma2Config(hidden_size=d, num_attention_heads=h, num_key_value_heads=kv,
                       head_dim=head_dim, query_pre_attn_scalar=query_pre_attn_scalar,
                       attn_logit_softcapping=50.0, sliding_window=window,
                       num_hidden_layers=2,
                       layer_types=["sliding_attention", "full_attention"],
                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                       attn_implementation="eager")
    layer = 0 if sliding else 1
    attn = Gemma2Attention(cfg, layer_idx=layer)
    with torch.no_grad():
        attn.q_proj.weight.mul_(16)
        attn.k_proj.weight.mul_(16)
    mask_function = (masking_utils.sliding_window_causal_mask_function(window) if sliding
                     else masking_utils.causal_mask_function)
    mask = f"window({window})" if sliding else "causal"
    flags = _shape_flags(d, h, kv, dk=head_dim, mask=mask) + [
        "--scale", repr(query_pre_attn_scalar ** -0.5), "--softcap", "50",
        "--rope", "half(theta = 10000)"]
    return module_case(attn, Gemma2RotaryEmbedding(cfg),
                       [attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj], flags,
                       mask_function=mask_function)
