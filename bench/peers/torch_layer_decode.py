"""transformers' LlamaAttention as a decoder step, the peer of mhagen's
cached layer (bench cases LayerDecode and LayerBatchDecode): the module a
user of transformers runs, with a StaticCache, through torch's SDPA and
under torch.compile, at the Llama-3-8B shape (d 4096, h 32, kv 8, dk 128)
with random weights (no download).

- LayerDecode: B 1, one token after 4095 cached ones.
- LayerBatchDecode: B 16, one token each after the lengths mhagen's bench
  draws from [512, 4096]; a static cache holds 4096 rows per sequence and
  masks the rows past each one's length, so it reads all of them (the
  record gives the bytes it reads).

Prints one JSON object per measurement (bench/peers/torch_sdpa.py's
format; kv_gbps counts weights plus the K/V rows it reads). Run by
bench/run_peers.sh; bench only, never CI.
"""
import sys

import torch
import transformers
from transformers import LlamaConfig, StaticCache
from transformers.models.llama.modeling_llama import (LlamaAttention,
                                                      LlamaRotaryEmbedding)

from torch_sdpa import emit, measure

D, H, KV, DK, CACHE = 4096, 32, 8, 128, 4096
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def batch_lengths(B):
    """Cache lengths (the new token included): 4096 for one sequence, a
    spread over [512, 4096] for a batch, as the bench draws them."""
    if B == 1:
        return [CACHE]
    g = torch.Generator().manual_seed(3)
    return torch.randint(512, CACHE + 1, (B,), generator=g).tolist()


def decode_step(dtype, B, compiled):
    cfg = LlamaConfig(hidden_size=D, num_attention_heads=H, num_key_value_heads=KV,
                      head_dim=DK, max_position_embeddings=2 * CACHE,
                      rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
                      attn_implementation="sdpa", num_hidden_layers=1)
    attn = LlamaAttention(cfg, layer_idx=0).to(dtype).eval()
    rotary = LlamaRotaryEmbedding(cfg)
    cache = StaticCache(config=cfg, max_cache_len=CACHE)
    lengths = batch_lengths(B)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(B, 1, D, generator=g).to(dtype)
    with torch.no_grad():
        # Fill the cache: one update of CACHE - 1 random rows per sequence.
        k0 = torch.randn(B, KV, CACHE - 1, DK, generator=g).to(dtype)
        cache.update(k0, torch.randn_like(k0), 0)
    layer = cache.layers[0]
    # Each sequence's new token sits at its length - 1 (the position of the
    # rotary embedding); the static cache writes every row at CACHE - 1 and
    # the mask hides the rows from each length - 1 to CACHE - 2.
    pos = torch.tensor(lengths)[:, None] - 1
    cos_sin = rotary(x, pos)
    keys = torch.arange(CACHE)[None, :]
    visible = (keys < (torch.tensor(lengths)[:, None] - 1)) | (keys == CACHE - 1)
    mask = torch.where(visible, 0.0, float("-inf")).to(dtype)[:, None, None, :]

    def step(x):
        layer.cumulative_length.fill_(CACHE - 1)
        return attn(x, position_embeddings=cos_sin, attention_mask=mask, cache=cache)[0]

    run = torch.compile(step) if compiled else step
    weight_bytes = 2 * D * (H * DK + KV * DK) * x.element_size()
    kv_bytes = 2 * B * CACHE * KV * DK * x.element_size()
    with torch.no_grad():
        times = measure(lambda: run(x))
    return times, weight_bytes + kv_bytes


def main(argv):
    only = set(argv[1:])
    shapes = {"LayerDecode": 1, "LayerBatchDecode": 16}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for name, B in shapes.items():
            if only and name not in only:
                continue
            for dname, dt in DTYPES.items():
                for compiled in (False, True):
                    times, bytes_read = decode_step(dt, B, compiled)
                    peer = {"peer": "torch_llama_attention_static_cache" +
                            ("_compile" if compiled else "_sdpa"),
                            "torch": torch.__version__,
                            "transformers": transformers.__version__}
                    flops = 2.0 * B * D * 2 * (H * DK + KV * DK)
                    emit(peer, name, dname, threads, times, flops, bytes_read)


if __name__ == "__main__":
    main(sys.argv)
