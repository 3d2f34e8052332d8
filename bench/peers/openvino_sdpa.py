"""OpenVINO's CPU ScaledDotProductAttention, the fastest peer measured on S3.
Times the attention-core shapes of
bench/AttentionBench.cpp at 1 and 2 threads, f32 (and bf16 inside the
plugin where the CPU has it), and prints one JSON object per measurement in
the format of bench/peers/torch_sdpa.py.

Two graphs per GQA shape, because OpenVINO's CPU plugin fuses only a 4-D
SDPA (../shared/NOTES.md):
  * "openvino_sdpa": the grouped form a user writes, Q [B, kv, h/kv, T, dk]
    against K/V [B, kv, 1, T_kv, dk] (broadcast over the group). The plugin
    may split it back into MatMul + Softmax; that is what a user gets.
  * "openvino_sdpa_kv_repeated": a 4-D SDPA whose K/V inputs were repeated
    to h heads *before* the call (outside the timed region). It reads h/kv
    times the K/V bytes, but shows the fused kernel's speed on the shape.
MHA shapes (kv = h) have only the 4-D graph.

Masks follow mhagen's rule (docs/design.md §2): causal is aligned
bottom-right when T_q < T_kv; OpenVINO's causal flag is top-left, so those
shapes pass an explicit additive float mask. Run by bench/run_peers.sh;
bench only, never CI.
"""
import sys

import numpy as np
import torch
from torch.nn.attention.bias import causal_lower_right
import openvino as ov
import openvino.opset13 as ops

from torch_sdpa import SHAPES, emit, measure, visible_pairs


def bottom_right_mask(tq, tkv):
    i = np.arange(tq)[:, None]
    j = np.arange(tkv)[None, :]
    return np.where(j <= i + (tkv - tq), 0.0, -np.inf).astype(np.float32)


def build(B, tq, tkv, h, kv, dk, causal, grouped):
    et = ov.Type.f32
    if grouped:
        qs, kvs = [B, kv, h // kv, tq, dk], [B, kv, 1, tkv, dk]
    else:
        qs, kvs = [B, h, tq, dk], [B, h, tkv, dk]
    q = ops.parameter(qs, et, name="q")
    k = ops.parameter(kvs, et, name="k")
    v = ops.parameter(kvs, et, name="v")
    params = [q, k, v]
    if causal and tq == tkv:
        node = ops.scaled_dot_product_attention(q, k, v, causal=True)
    elif causal and tq > 1:
        m = ops.parameter([tq, tkv], ov.Type.f32, name="mask")
        params.append(m)
        node = ops.scaled_dot_product_attention(q, k, v, m)
    else:  # no mask, or T_q = 1 bottom-right causal (every key visible)
        node = ops.scaled_dot_product_attention(q, k, v)
    return ov.Model([node], params), qs, kvs


def check(req, inputs, B, h, tq, tkv, dk, causal, dname):
    """Refuses to time a graph whose output disagrees with torch's SDPA on
    the same inputs (mask alignment, GQA head order): max |err| within
    1e-4 (f32) or 5e-2 (bf16 inside the plugin)."""
    req.infer()
    got = torch.from_numpy(np.array(req.get_output_tensor(0).data)).reshape(B, h, tq, dk)
    q = torch.from_numpy(inputs[0]).reshape(B, h, tq, dk)
    k = torch.from_numpy(inputs[1]).reshape(B, -1, tkv, dk)
    v = torch.from_numpy(inputs[2]).reshape(B, -1, tkv, dk)
    # The mask from torch's own bottom-right rule, not the one fed to the graph.
    mask = causal_lower_right(tq, tkv) if causal and tq != tkv else None
    want = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=causal and tq == tkv, enable_gqa=True)
    err = (got - want).abs().max().item()
    if not err <= (1e-4 if dname == "f32" else 5e-2):
        raise SystemExit(f"openvino_sdpa: output differs from torch by {err}")


def main(argv):
    only = set(argv[1:])
    core = ov.Core()
    caps = core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    # bf16 the OpenVINO way: f32 tensors at the boundary, bf16 inside the
    # plugin (INFERENCE_PRECISION_HINT), where the CPU has native bf16.
    dtypes = ["f32"] + (["bf16"] if "BF16" in caps else [])
    for threads in (1, 2):
        for name, (B, tq, tkv, h, kv, dk, causal) in SHAPES.items():
            if only and name not in only:
                continue
            for dname in dtypes:
                if name in ("S2", "ChunkPrefill") and dname == "bf16" and threads == 1:
                    continue  # minutes per point; the 2-thread figure is enough
                for grouped in ([True, False] if kv < h else [False]):
                    model, qs, kvs = build(B, tq, tkv, h, kv, dk, causal, grouped)
                    config = {
                        "INFERENCE_NUM_THREADS": threads,
                        "INFERENCE_PRECISION_HINT": "bf16" if dname == "bf16" else "f32",
                        "PERFORMANCE_HINT": "LATENCY",
                    }
                    compiled = core.compile_model(model, "CPU", config)
                    req = compiled.create_infer_request()
                    rng = np.random.default_rng(1)
                    if grouped or kv == h:
                        k = rng.standard_normal(kvs, dtype=np.float32)
                        v = rng.standard_normal(kvs, dtype=np.float32)
                    else:
                        k = np.repeat(
                            rng.standard_normal([B, kv, tkv, dk], dtype=np.float32),
                            h // kv, axis=1)
                        v = np.repeat(
                            rng.standard_normal([B, kv, tkv, dk], dtype=np.float32),
                            h // kv, axis=1)
                    inputs = [rng.standard_normal(qs, dtype=np.float32), k, v]
                    if len(compiled.inputs) == 4:
                        inputs.append(bottom_right_mask(tq, tkv))
                    for i, x in enumerate(inputs):
                        req.set_input_tensor(i, ov.Tensor(x))

                    check(req, inputs, B, h, tq, tkv, dk, causal, dname)
                    times = measure(req.infer)
                    peer = ("openvino_sdpa" if grouped or kv == h
                            else "openvino_sdpa_kv_repeated")
                    emit({"peer": peer, "openvino": ov.__version__},
                         name, dname, threads, times,
                         4.0 * B * h * dk * visible_pairs(tq, tkv, causal),
                         2 * B * tkv * kv * dk * 4)  # f32 at the boundary

if __name__ == "__main__":
    main(sys.argv)
