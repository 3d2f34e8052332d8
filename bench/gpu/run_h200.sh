#!/usr/bin/env bash
# Run ON THE GPU MACHINE (device tool), after bench/gpu/prepare.sh here.
# Runs the CUDA kernels on S1-S3 and B8 T4096 (f32, f16, bf16), each checked
# against the f64 reference on sampled rows, and prints TFLOP/s; adds
# torch's scaled_dot_product_attention (FlashAttention) figures when torch
# is importable there. Whole run: a few minutes.
set -uo pipefail
cd "$(dirname "$0")/../.."
dir="${MHAGEN_BUILD_DIR:-build}/gpu-bench"
export LD_LIBRARY_PATH="$dir/lib:${LD_LIBRARY_PATH:-}"
run="$dir/mhagen-run-kernel"
lib="$dir/libgpu_bench.so"
out="${OUT:-/tmp}/gpu_results.jsonl"
: > "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
ldd "$run" | grep "not found" && echo "missing libraries for the runner"

bench() { # kernel B T reps
  local k=$1 B=$2 T=$3 reps=$4
  timeout 300 "$run" "$lib" "$k" --B "$B" --T "$T" --reps "$reps" \
    > /tmp/one.json 2> /tmp/one.err
  python3 - "$k" "$B" "$T" /tmp/one.json "$out" <<'PY'
import json, sys
k, B, T, path, out = sys.argv[1:6]
try:
    r = json.load(open(path))
except Exception as e:
    print(f"{k:14s} B{B} T{T}: no result ({e})"); sys.exit(0)
if "error" in r:
    print(f"{k:14s} B{B} T{T}: ERROR {r['error']}"); sys.exit(0)
r.update(kernel=k)
open(out, "a").write(json.dumps(r) + "\n")
print(f"{k:14s} B{B:>2} T{T:>5}: {r['median_ms']:9.3f} ms  "
      f"{r['gflops_useful']/1e3:7.2f} TFLOP/s useful  "
      f"{r['gflops_nominal']/1e3:7.2f} nominal  max|err| {r['max_abs_err']:.2e}  "
      f"{'OK' if r['within_tolerance'] else 'WRONG'}")
PY
}

for k in gpu_gqa_f32 gpu_gqa_f16 gpu_gqa_bf16; do
  bench $k 1 512 20     # S1
  bench $k 1 2048 10    # S2
  bench $k 8 4096 5     # large
done
for k in gpu_mha_f32 gpu_mha_f16; do
  bench $k 4 512 20     # S3
done

if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  python3 - <<'PY'
import time, torch
import torch.nn.functional as F
def sdpa(B, T, h, kv, dk, causal, dtype):
    q = torch.randn(B, h, T, dk, device="cuda", dtype=dtype)
    k = torch.randn(B, kv, T, dk, device="cuda", dtype=dtype)
    v = torch.randn(B, kv, T, dk, device="cuda", dtype=dtype)
    if kv != h:
        k = k.repeat_interleave(h // kv, 1); v = v.repeat_interleave(h // kv, 1)
    for _ in range(3): F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.cuda.synchronize(); t = time.perf_counter(); n = 20
    for _ in range(n): F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.cuda.synchronize(); ms = (time.perf_counter() - t) / n * 1e3
    flops = 4 * B * h * T * T * dk * (0.5 if causal else 1.0)
    print(f"torch sdpa B{B} T{T} h{h} kv{kv} {dtype}: {ms:.3f} ms, {flops/ms/1e9:.1f} TFLOP/s useful")
for dt in (torch.float16, torch.bfloat16):
    sdpa(1, 512, 32, 8, 128, True, dt); sdpa(1, 2048, 32, 8, 128, True, dt)
    sdpa(8, 4096, 32, 8, 128, True, dt); sdpa(4, 512, 12, 12, 64, False, dt)
PY
else
  echo "torch with CUDA is not importable here: no torch SDPA comparison"
fi
echo "results: $out"
