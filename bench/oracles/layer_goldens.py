#!/usr/bin/env python3
"""Writes the layer goldens the tests read (test/golden/layer): for each
model, the attention module of Hugging Face transformers built from a small
config with random weights (hf_attention.py), run on random x. Each golden
is a directory of .npy files (f32, C order): x [B, T, d], the inputs of
the ABI model by name (w_q [d, h*dk] ..., biases, q_norm, k_norm),
positions [B, T] when the spec takes them, and the module's output out
[B, T, d]; goldens.mha holds the spec of each, named as its directory.

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
        os.makedirs(folder, exist_ok=True)
        for f in os.listdir(folder):
            os.remove(os.path.join(folder, f))
        save(os.path.join(folder, "x.npy"), x)
        save(os.path.join(folder, "out.npy"), out)
        for input_name, tensor in case.inputs.items():
            save(os.path.join(folder, input_name + ".npy"), tensor)
        if case.runtime_positions:
            save(os.path.join(folder, "positions.npy"), case.positions(B, T).float())
        specs.append(spec_text(name, case.flags))
        print(f"{name:20s} out up to {out.abs().max().item():.3g}")
    with open(os.path.join(args.out, "goldens.mha"), "w") as f:
        f.write("\n".join(specs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
