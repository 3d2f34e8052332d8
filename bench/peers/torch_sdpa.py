"""torch 2.x scaled_dot_product_attention on the CPU, the peer most users of
mhagen would pick instead (issues 13 and 15). Times the shapes of
bench/AttentionBench.cpp with enable_gqa=True (torch's fused CPU flash
kernel), at 1 and 2 threads, f32 and bf16, and prints one JSON object per
measurement (min/median/max ms over rounds, K/V GB/s for decode shapes).

Masks follow mhagen's rule (docs/design.md §2): causal is aligned
bottom-right when T_q < T_kv, which torch's is_causal=True is not (it is
top-left), so those shapes pass torch.nn.attention.bias.causal_lower_right.
Run by bench/run_peers.sh; bench only, never CI.
"""
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

# name: (B, T_q, T_kv, h, kv, dk, causal)
SHAPES = {
    "S1": (1, 512, 512, 32, 8, 128, True),
    "S2": (1, 2048, 2048, 32, 8, 128, True),
    "S3": (4, 512, 512, 12, 12, 64, False),
    "Decode": (1, 1, 4096, 32, 8, 128, True),
    "BatchDecode": (16, 1, 4096, 32, 8, 128, True),
    "SpecDecode": (1, 4, 4096, 32, 8, 128, True),
    "ChunkPrefill": (1, 512, 8192, 32, 8, 128, True),
}
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def visible_pairs(tq, tkv, causal):
    if not causal:
        return tq * tkv
    off = tkv - tq
    return sum(min(tkv, i + off + 1) for i in range(tq))


def measure(fn, min_seconds=1.0, rounds=7):
    fn()
    fn()  # warm-up: allocator, thread pool
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-6)
    reps = max(1, int(min_seconds / rounds / one))
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        times.append((time.perf_counter() - t0) / reps * 1e3)
    return times


def emit(peer, shape, dtype, threads, times, flops, kv_bytes):
    """Prints one JSON record: `peer` (name, version) plus the shape, the
    dtype, min/median/max ms over rounds, GFLOP/s and K/V GB/s at the
    median. Shared by every peer script."""
    med = statistics.median(times)
    rec = dict(peer)
    rec.update({
        "shape": shape,
        "dtype": dtype,
        "threads": threads,
        "min_ms": round(min(times), 4),
        "median_ms": round(med, 4),
        "max_ms": round(max(times), 4),
        "gflops": round(flops / med / 1e6, 2),
        "kv_gbps": round(kv_bytes / med / 1e6, 2),
    })
    print(json.dumps(rec), flush=True)


def main(argv):
    only = set(argv[1:])
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for name, (B, tq, tkv, h, kv, dk, causal) in SHAPES.items():
            if only and name not in only:
                continue
            for dname, dt in DTYPES.items():
                if name in ("S2", "ChunkPrefill") and dname == "bf16" and threads == 1:
                    continue  # minutes per point; the 2-thread figure is enough
                g = torch.Generator().manual_seed(1)
                q = torch.randn(B, h, tq, dk, generator=g).to(dt)
                k = torch.randn(B, kv, tkv, dk, generator=g).to(dt)
                v = torch.randn(B, kv, tkv, dk, generator=g).to(dt)
                mask = None
                is_causal = False
                if causal and tq == tkv:
                    is_causal = True
                elif causal and tq > 1:
                    mask = causal_lower_right(tq, tkv)
                # (T_q = 1 with bottom-right causal sees every key.)

                def run():
                    F.scaled_dot_product_attention(
                        q, k, v, attn_mask=mask, is_causal=is_causal, enable_gqa=True
                    )

                with torch.no_grad():
                    times = measure(run)
                kv_bytes = 2 * B * tkv * kv * dk * q.element_size()
                emit({"peer": "torch_sdpa", "torch": torch.__version__},
                     name, dname, threads, times,
                     4.0 * B * h * dk * visible_pairs(tq, tkv, causal), kv_bytes)

if __name__ == "__main__":
    main(sys.argv)
