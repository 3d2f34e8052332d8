"""torch's scaled_dot_product_attention on the device-run shapes, one line
of JSON per (shape, dtype, backend): each of torch's flash, cuDNN and
memory-efficient backends that runs the shape, timed with CUDA events at
one warm call and at steady state (median). Run by bench/gpu/run_h200.sh
on the GPU machine; prints to stdout and appends to argv[1]."""
import json
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# name, B, Tq, Tkv, h, kv, dk, mask ("causal", "none", ("window", W))
SHAPES = [
    ("S1", 1, 512, 512, 32, 8, 128, "causal"),
    ("S2", 1, 2048, 2048, 32, 8, 128, "causal"),
    ("B8T4096", 8, 4096, 4096, 32, 8, 128, "causal"),
    ("S3", 4, 512, 512, 12, 12, 64, "none"),
    ("gemma_window", 1, 8192, 8192, 16, 8, 256, ("window", 4096)),
    ("decode", 16, 1, 8192, 32, 8, 128, "none"),  # T_q 1 sees every key
]
BACKENDS = [("flash", SDPBackend.FLASH_ATTENTION),
            ("cudnn", SDPBackend.CUDNN_ATTENTION),
            ("efficient", SDPBackend.EFFICIENT_ATTENTION)]


def visible_pairs(Tq, Tkv, mask):
    off = Tkv - Tq
    if mask == "none":
        return Tq * Tkv
    W = mask[1] if isinstance(mask, tuple) else None
    n = 0
    for i in range(Tq):
        p = i + off
        n += min(p + 1, W) if W else p + 1
    return n


def timed(fn, reps):
    fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record(); fn(); end.record(); torch.cuda.synchronize()
    warm = start.elapsed_time(end)
    ms = []
    for _ in range(reps):
        start.record(); fn(); end.record(); torch.cuda.synchronize()
        ms.append(start.elapsed_time(end))
    return warm, statistics.median(ms)


def main(out):
    dev = torch.cuda.get_device_name()
    for name, B, Tq, Tkv, h, kv, dk, mask in SHAPES:
        for dt in (torch.float16, torch.bfloat16):
            q = torch.randn(B, h, Tq, dk, device="cuda", dtype=dt)
            k = torch.randn(B, kv, Tkv, dk, device="cuda", dtype=dt)
            v = torch.randn(B, kv, Tkv, dk, device="cuda", dtype=dt)
            causal = mask == "causal" and Tq == Tkv
            attn_mask = None
            if isinstance(mask, tuple):  # sliding window, bottom-right
                i = torch.arange(Tq, device="cuda")[:, None] + (Tkv - Tq)
                j = torch.arange(Tkv, device="cuda")[None, :]
                attn_mask = (j <= i) & (j > i - mask[1])
            pairs = visible_pairs(Tq, Tkv, mask)
            flops = 4.0 * B * h * pairs * dk
            kv_bytes = 2.0 * B * Tkv * kv * dk * q.element_size()
            for bname, backend in BACKENDS:
                rec = dict(peer="torch", backend=bname, shape=name,
                           dtype=str(dt).replace("torch.", ""), device=dev,
                           torch=torch.__version__)
                try:
                    with sdpa_kernel(backend):
                        def fn():
                            return F.scaled_dot_product_attention(
                                q, k, v, attn_mask=attn_mask, is_causal=causal,
                                enable_gqa=kv != h)
                        warm, ms = timed(fn, 20 if B * Tq < 20000 else 5)
                    rec.update(warm_call_ms=warm, median_ms=ms,
                               tflops_useful=flops / ms / 1e9,
                               kv_gbps=kv_bytes / ms / 1e6)
                except Exception as e:  # this backend does not run the shape
                    rec["error"] = str(e).splitlines()[0][:160]
                line = json.dumps(rec)
                print(line, flush=True)
                open(out, "a").write(line + "\n")
            del q, k, v
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1])
