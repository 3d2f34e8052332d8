#!/usr/bin/env python3
"""The layer against Hugging Face transformers (an oracle, not CI).

Builds each model's attention module from a small config with random
weights (no download): rotary positions (Llama with each scaling, GPT-J)
and QK-norm (Qwen3 per head, OLMo 2 over the projection), runs it on random x with a causal mask, and runs the
mhagen layer kernel of the matching spec on the same x and weights through
the runtime's C API (ctypes). Prints the largest difference per case; exits
1 when one is past --tol. Needs a venv with torch and transformers
(the venv of docs/performance.md, "Peers and oracles"):

  python3 bench/oracles/layer_transformers.py --build build
"""
import argparse
import ctypes
import os
import re
import subprocess
import sys
import tempfile

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def abi_version():
    text = open(os.path.join(ROOT, "runtime/include/mhagen/abi.h")).read()
    return int(re.search(r"#define MHAGEN_ABI_VERSION (\d+)", text).group(1))


P = ctypes.c_void_p
I64 = ctypes.c_int64


class CallArgs(ctypes.Structure):
    """mhagen_call_args (runtime/include/mhagen/abi.h), field by field."""
    _fields_ = [("abi_version", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("batch", I64), ("t_q", I64), ("t_kv", I64),
                ("q", P), ("k", P), ("v", P),
                ("q_token_stride", I64), ("k_token_stride", I64), ("v_token_stride", I64),
                ("q_batch_stride", I64), ("k_batch_stride", I64), ("v_batch_stride", I64),
                ("x", P), ("w_q", P), ("w_k", P), ("w_v", P), ("w_o", P),
                ("b_q", P), ("b_k", P), ("b_v", P), ("b_o", P),
                ("out", P), ("out_token_stride", I64), ("out_batch_stride", I64),
                ("kv_lens", P), ("device_pointers", ctypes.c_int32), ("reserved0", ctypes.c_int32),
                ("k_scale", P), ("v_scale", P),
                ("k_scale_token_stride", I64), ("v_scale_token_stride", I64),
                ("k_scale_batch_stride", I64), ("v_scale_batch_stride", I64),
                ("sinks", P), ("alibi_slopes", P), ("lse", P), ("scale", P),
                ("block_table", P), ("num_blocks", I64), ("q_offsets", P),
                ("q_norm", P), ("k_norm", P), ("positions", P)]


def run_mhagen(build, spec_flags, x, weights, biases, norms, positions):
    """The layer kernel of `spec_flags` on x [B, T, d]; weights W[in, out]."""
    runtime = ctypes.CDLL(os.path.join(build, "runtime/libmhagen_runtime.so"),
                          mode=ctypes.RTLD_GLOBAL)
    runtime.mhagen_last_error.restype = ctypes.c_char_p
    runtime.mhagen_library_kernel.restype = P
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([os.path.join(build, "tools/mhagen/mhagen"), *spec_flags,
                        "--target", "avx2", "-o", out, "--shared", "--lib-name", "oracle"],
                       check=True, stdout=subprocess.DEVNULL)
        lib = P()
        if runtime.mhagen_load_library(os.path.join(out, "liboracle.so").encode(),
                                       ctypes.byref(lib)) != 0:
            sys.exit(runtime.mhagen_last_error().decode())
        kernel = P(runtime.mhagen_library_kernel(lib, 0))
        B, T, d = x.shape
        y = torch.zeros(B, T, d, dtype=torch.float32)
        keep = [x.contiguous()] + [w.contiguous() for w in weights] + \
               [b.contiguous() for b in biases] + [n.contiguous() for n in norms]
        a = CallArgs()
        a.abi_version = abi_version()
        a.batch, a.t_q, a.t_kv = B, T, T
        a.x = keep[0].data_ptr()
        a.w_q, a.w_k, a.w_v, a.w_o = (w.data_ptr() for w in keep[1:5])
        if biases:
            a.b_q, a.b_k, a.b_v, a.b_o = (b.data_ptr() for b in keep[5:9])
        if norms:
            a.q_norm, a.k_norm = (n.data_ptr() for n in keep[-2:])
        if "--positions" in spec_flags:
            pos = positions(B, T).to(torch.int32).contiguous()
            keep.append(pos)
            a.positions = pos.data_ptr()
        a.out = y.data_ptr()
        if runtime.mhagen_call(kernel, ctypes.byref(a)) != 0:
            sys.exit(runtime.mhagen_last_error().decode())
    return y


def causal(T):
    return torch.full((T, T), float("-inf")).triu(1)[None, None]


def consecutive(B, T):
    return torch.arange(T)[None].expand(B, -1)


def spread(B, T):
    """Positions with gaps (a chunk after cached tokens, then jumps): the
    scores see them only through their differences."""
    g = torch.Generator().manual_seed(7)
    return 1000 + torch.cumsum(torch.randint(1, 5, (B, T), generator=g), dim=1)


def module_case(attn, rotary, out_proj, flags, positions=consecutive):
    """An attention module with its rotary embedding, as (forward, W, b,
    norms, positions, flags); a module with q_norm and k_norm gets random
    gains. `positions(B, T)` places the tokens (--positions runtime passes
    them to mhagen)."""
    attn.eval()
    norms = []
    if hasattr(attn, "q_norm"):
        for norm in (attn.q_norm, attn.k_norm):
            torch.nn.init.uniform_(norm.weight, 0.5, 1.5)
            norms.append(norm.weight.detach())

    def forward(x):
        pos = positions(x.shape[0], x.shape[1])
        return attn(x, position_embeddings=rotary(x, pos),
                    attention_mask=causal(x.shape[1]))[0]

    weights = [attn.q_proj.weight.T, attn.k_proj.weight.T, attn.v_proj.weight.T,
               out_proj.weight.T]
    return forward, weights, [], norms, positions, flags


def llama_case(rope_parameters, rope_text, d=256, h=4, kv=2, max_positions=4096,
               positions=consecutive):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding
    cfg = LlamaConfig(hidden_size=d, num_attention_heads=h, num_key_value_heads=kv,
                      rope_parameters=rope_parameters, max_position_embeddings=max_positions,
                      attn_implementation="eager")
    attn = LlamaAttention(cfg, layer_idx=0)
    flags = ["--d", str(d), "--h", str(h), "--kv", str(kv), "--mask", "causal",
             "--rope", rope_text]
    if positions is not consecutive:
        flags += ["--positions", "runtime"]
    return module_case(attn, LlamaRotaryEmbedding(cfg), attn.o_proj, flags, positions)


def gptj_case(d=256, h=4, rotary_dim=32):
    from transformers import GPTJConfig
    from transformers.models.gptj.modeling_gptj import GPTJAttention, GPTJRotaryEmbedding
    cfg = GPTJConfig(n_embd=d, n_head=h, rotary_dim=rotary_dim, attn_implementation="eager")
    attn = GPTJAttention(cfg, layer_idx=0)
    return module_case(attn, GPTJRotaryEmbedding(cfg), attn.out_proj,
                       ["--d", str(d), "--h", str(h), "--mask", "causal",
                        "--rope", f"interleaved(theta = 10000, dim = {rotary_dim})"])


def qwen3_case(d=256, h=8, kv=2, head_dim=64):
    from transformers import Qwen3Config
    from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention, Qwen3RotaryEmbedding
    cfg = Qwen3Config(hidden_size=d, num_attention_heads=h, num_key_value_heads=kv,
                      head_dim=head_dim, rms_norm_eps=1e-6,
                      rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                      attn_implementation="eager")
    attn = Qwen3Attention(cfg, layer_idx=0)
    return module_case(attn, Qwen3RotaryEmbedding(cfg), attn.o_proj,
                       ["--d", str(d), "--h", str(h), "--kv", str(kv), "--dk", str(head_dim),
                        "--mask", "causal", "--qk-norm", "head(eps = 1e-6)",
                        "--rope", "half(theta = 1000000)"])


def olmo2_case(d=256, h=4, kv=4):
    from transformers import Olmo2Config
    from transformers.models.olmo2.modeling_olmo2 import Olmo2Attention, Olmo2RotaryEmbedding
    cfg = Olmo2Config(hidden_size=d, num_attention_heads=h, num_key_value_heads=kv,
                      rms_norm_eps=1e-6,
                      rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
                      attn_implementation="eager")
    attn = Olmo2Attention(cfg, layer_idx=0)
    return module_case(attn, Olmo2RotaryEmbedding(cfg), attn.o_proj,
                       ["--d", str(d), "--h", str(h), "--kv", str(kv), "--mask", "causal",
                        "--qk-norm", "projection(eps = 1e-6)",
                        "--rope", "half(theta = 500000)"])


CASES = {
    "llama2 (default)": lambda: llama_case(
        {"rope_type": "default", "rope_theta": 10000.0}, "half(theta = 10000)"),
    "linear x4": lambda: llama_case(
        {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
        "half(theta = 10000, scaling = linear(factor = 4))"),
    "llama 3.1 (llama3)": lambda: llama_case(
        {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
         "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
        "half(theta = 500000, scaling = llama3(factor = 8, low_freq_factor = 1, "
        "high_freq_factor = 4, original_max_position_embeddings = 64))"),
    "qwen (yarn)": lambda: llama_case(
        {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
         "original_max_position_embeddings": 256},
        "half(theta = 1000000, scaling = yarn(factor = 4, "
        "original_max_position_embeddings = 256))", max_positions=1024),
    "llama 3.1, runtime positions": lambda: llama_case(
        {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
         "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
        "half(theta = 500000, scaling = llama3(factor = 8, low_freq_factor = 1, "
        "high_freq_factor = 4, original_max_position_embeddings = 64))",
        positions=spread),
    "gpt-j (interleaved, 32 of 64)": lambda: gptj_case(),
    "qwen3 (qk_norm head)": lambda: qwen3_case(),
    "olmo2 (qk_norm projection)": lambda: olmo2_case(),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--T", type=int, default=300)
    ap.add_argument("--tol", type=float, default=1e-4)
    args = ap.parse_args()
    torch.manual_seed(0)
    worst = 0.0
    for name, make in CASES.items():
        forward, weights, biases, norms, positions, flags = make()
        x = torch.randn(2, args.T, int(flags[1])) * 0.5
        with torch.no_grad():
            want = forward(x)
            got = run_mhagen(args.build, flags, x, [w.detach() for w in weights], biases,
                             norms, positions)
        diff = (got - want).abs().max().item()
        scale = want.abs().max().item()
        worst = max(worst, diff)
        print(f"{name:32s} T {args.T}: max |mhagen - transformers| {diff:.3g} (outputs up to {scale:.3g})")
    return 0 if worst <= args.tol else 1


if __name__ == "__main__":
    sys.exit(main())
