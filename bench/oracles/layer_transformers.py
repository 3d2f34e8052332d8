#!/usr/bin/env python3
"""The layer against Hugging Face transformers (an oracle, not CI).

Builds each model's attention module from a small config with random
weights (no download, hf_attention.py): rotary positions (Llama with each
scaling, GPT-J, GPT-NeoX), biases (Qwen2, GPT-NeoX), QK-norm (Qwen3 per
head, OLMo 2 over the projection) and Gemma 2's softcap, scale and window;
runs it on random x at a longer T than the goldens, and runs the mhagen
layer kernel of the matching spec on the same x and weights through the
runtime's C API (ctypes). Prints the largest difference per case; exits
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_attention as hf  # noqa: E402

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


def run_mhagen(build, case, x):
    """The layer kernel of the case's flags on x [B, T, d], its inputs
    (W [in, out], biases, QK-norm gains) passed by their ABI names."""
    runtime = ctypes.CDLL(os.path.join(build, "runtime/libmhagen_runtime.so"),
                          mode=ctypes.RTLD_GLOBAL)
    runtime.mhagen_last_error.restype = ctypes.c_char_p
    runtime.mhagen_library_kernel.restype = P
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([os.path.join(build, "tools/mhagen/mhagen"), *case.flags,
                        "--target", "avx2", "-o", out, "--shared", "--lib-name", "oracle"],
                       check=True, stdout=subprocess.DEVNULL)
        lib = P()
        if runtime.mhagen_load_library(os.path.join(out, "liboracle.so").encode(),
                                       ctypes.byref(lib)) != 0:
            sys.exit(runtime.mhagen_last_error().decode())
        kernel = P(runtime.mhagen_library_kernel(lib, 0))
        B, T, d = x.shape
        y = torch.zeros(B, T, d, dtype=torch.float32)
        keep = {"x": x.contiguous()}
        keep.update({name: t.detach().contiguous() for name, t in case.inputs.items()})
        if case.runtime_positions:
            keep["positions"] = case.positions(B, T).to(torch.int32).contiguous()
        a = CallArgs()
        a.abi_version = abi_version()
        a.batch, a.t_q, a.t_kv = B, T, T
        for name, tensor in keep.items():
            setattr(a, name, tensor.data_ptr())
        a.out = y.data_ptr()
        if runtime.mhagen_call(kernel, ctypes.byref(a)) != 0:
            sys.exit(runtime.mhagen_last_error().decode())
    return y


CASES = {
    "llama2 (default)": lambda: hf.llama(
        {"rope_type": "default", "rope_theta": 10000.0}, "half(theta = 10000)"),
    "linear x4": lambda: hf.llama(
        {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
        "half(theta = 10000, scaling = linear(factor = 4))"),
    "llama 3.1 (llama3)": lambda: hf.llama(hf.LLAMA3_PARAMETERS, hf.LLAMA3_TEXT),
    "qwen (yarn)": lambda: hf.llama(
        {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
         "original_max_position_embeddings": 256},
        "half(theta = 1000000, scaling = yarn(factor = 4, "
        "original_max_position_embeddings = 256))", max_positions=1024),
    "llama 3.1, runtime positions": lambda: hf.llama(
        hf.LLAMA3_PARAMETERS, hf.LLAMA3_TEXT, positions=hf.spread),
    "qwen2 (biases, GQA 7)": lambda: hf.qwen2(),
    "gpt-j (interleaved, 32 of 64)": lambda: hf.gptj(),
    "gpt-neox (half, 25 %, biases)": lambda: hf.gpt_neox(),
    "qwen3 (qk_norm head)": lambda: hf.qwen3(),
    "olmo2 (qk_norm projection)": lambda: hf.olmo2(),
    "gemma2 (sliding, softcap)": lambda: hf.gemma2(sliding=True, d=256, window=64),
    "gemma2 (global, softcap)": lambda: hf.gemma2(sliding=False, d=256),
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
        case = make()
        x = torch.randn(2, args.T, case.d) * 0.5
        with torch.no_grad():
            want = case.forward(x)
            got = run_mhagen(args.build, case, x)
        diff = (got - want).abs().max().item()
        scale = want.abs().max().item()
        worst = max(worst, diff)
        print(f"{name:32s} T {args.T}: max |mhagen - transformers| {diff:.3g} (outputs up to {scale:.3g})")
    return 0 if worst <= args.tol else 1


if __name__ == "__main__":
    sys.exit(main())
