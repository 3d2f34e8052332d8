#!/usr/bin/env python3
"""Writes the layer goldens the tests read (test/golden/layer): for each
model, the attention module of Hugging Face transformers built from a small
config with random weights (hf_attention.py), run on random x. Each golden
is a directory of .npy files (f32, C order): x [B, T, d], the inputs of
the ABI model by name (w_q [d, h*dk] ..., biases, q_norm, k_norm),
positions [B, T] when the spec takes them, and the module's output out
[B, T, d]. A decode golden (kv_cache = contiguous) has stepI_x and
stepI_out for each step through transformers' DynamicCache and the cache
after the last (k_cache, v_cache [B, tokens, kv, dk]) in place of x and
out. goldens.mha (and goldens_decode.mha for the decode goldens) holds
the spec of each, named as its directory.

Needs a venv with torch and transformers (docs/performance.md, "Peers and
oracles"); CI only reads what this wrote:

  python3 bench/oracles/layer_goldens.py [--out test/golden/layer]
"""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_attention as hf  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Small shapes: each golden is a few hundred KiB at most.
GOLDENS = {
    "llama31": lambda: hf.llama(hf.LLAMA3_PARAMETERS, hf.LLAMA3_TEXT, d=128, h=8, kv=2),
    "llama31_positions": lambda: hf.llama(hf.LLAMA3_PARAMETERS, hf.LLAMA3_TEXT, d=64, h=4,
                                          kv=1, positions=hf.spread),
    "qwen2": lambda: hf.qwen2(d=112, h=7, kv=1),
    "qwen3": lambda: hf.qwen3(d=64, h=4, kv=2, head_dim=32),
    "olmo2": lambda: hf.olmo2(d=64, h=4, kv=4),
    "gpt_neox": lambda: hf.gpt_neox(d=64, h=4),
    "gptj": lambda: hf.gptj(d=64, h=4, rotary_dim=8),
    "gemma2_sliding": lambda: hf.gemma2(sliding=True, d=32),
    "gemma2_global": lambda: hf.gemma2(sliding=False, d=32),
}

B, T = 2, 13

# Decoder steps through the layer's KV cache (kv_cache = contiguous): a
# prefill, eight decode steps and a chunk of five, as transformers runs
# them with a DynamicCache. Each step's x and output, and the cache after
# the last step ([B, tokens, kv, dk], every row as the step that wrote it
# left it).
DECODE_GOLDENS = {
    "llama31_decode": GOLDENS["llama31"],
    "qwen2_decode": GOLDENS["qwen2"],
    "qwen3_decode": GOLDENS["qwen3"],
    "gpt_neox_decode": GOLDENS["gpt_neox"],
    "gptj_decode": GOLDENS["gptj"],
    "gemma2_sliding_decode": GOLDENS["gemma2_sliding"],
}
STEPS = [6] + [1] * 8 + [5]


def spec_text(name, flags):
    """The spec of a case's mhagen flags (`--qk-norm X` is `qk_norm = X`;
    a flag alone is a switch set to true)."""
    lines, i = [], 0
    while i < len(flags):
        field = flags[i][2:].replace("-", "_")
        if i + 1 < len(flags) and not flags[i + 1].startswith("--"):
            lines.append(f"  {field} = {flags[i + 1]}")
            i += 2
        else:
            lines.append(f"  {field} = true")
            i += 1
    return "spec %s {\n  op = layer\n%s\n}\n" % (name, "\n".join(lines))


def write_inputs(folder, case):
    os.makedirs(folder, exist_ok=True)
    for f in os.listdir(folder):
        os.remove(os.path.join(folder, f))
    for input_name, tensor in case.inputs.items():
        save(os.path.join(folder, input_name + ".npy"), tensor)


def decode_golden(folder, case):
    """The steps of STEPS through a DynamicCache; returns the largest output."""
    from transformers import DynamicCache
    write_inputs(folder, case)
    cache, start, largest = DynamicCache(), 0, 0.0
    for i, tokens in enumerate(STEPS):
        x = torch.randn(B, tokens, case.d) * 0.5
        with torch.no_grad():
            out = case.forward(x, cache=cache, start=start)
        save(os.path.join(folder, f"step{i}_x.npy"), x)
        save(os.path.join(folder, f"step{i}_out.npy"), out)
        start += tokens
        largest = max(largest, out.abs().max().item())
    layer = cache.layers[0]
    save(os.path.join(folder, "k_cache.npy"), layer.keys.transpose(1, 2))
    save(os.path.join(folder, "v_cache.npy"), layer.values.transpose(1, 2))
    return largest


def save(path, tensor):
    np.save(path, np.ascontiguousarray(tensor.detach().numpy().astype(np.float32)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "test/golden/layer"))
    args = ap.parse_args()
    import transformers
    specs = [f"# Written by bench/oracles/layer_goldens.py with transformers "
             f"{transformers.__version__} and torch {torch.__version__.split('+')[0]};\n"
             f"# regenerate them together with the .npy files, never by hand.\n"]
    for name, make in GOLDENS.items():
        torch.manual_seed(sum(map(ord, name)))
        case = make()
        x = torch.randn(B, T, case.d) * 0.5
        with torch.no_grad():
            out = case.forward(x)
        folder = os.path.join(args.out, name)
        write_inputs(folder, case)
        save(os.path.join(folder, "x.npy"), x)
        save(os.path.join(folder, "out.npy"), out)
        if case.runtime_positions:
            save(os.path.join(folder, "positions.npy"), case.positions(B, T).float())
        specs.append(spec_text(name, case.flags))
        print(f"{name:20s} out up to {out.abs().max().item():.3g}")
    decode_specs = specs[:1]
    for name, make in DECODE_GOLDENS.items():
        torch.manual_seed(sum(map(ord, name)))
        case = make()
        largest = decode_golden(os.path.join(args.out, name), case)
        decode_specs.append(spec_text(name, case.flags + ["--kv-cache", "contiguous"]))
        print(f"{name:22s} {len(STEPS)} steps, out up to {largest:.3g}")
    # Two files: the layer's cache is built by the Halide backend only.
    for file, texts in (("goldens.mha", specs), ("goldens_decode.mha", decode_specs)):
        with open(os.path.join(args.out, file), "w") as f:
            f.write("\n".join(texts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
