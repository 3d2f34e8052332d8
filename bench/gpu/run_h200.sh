#!/usr/bin/env bash
# Run ON THE GPU MACHINE (device tool; H100 or H200), after
# bench/gpu/prepare.sh here. In one run of a few minutes:
#  1. the SASS of every tensor-core image holds HMMA (sm_80/sm_90) or
#     HGMMA and UTMALDG (sm_90a) (cuobjdump);
#  2. every tensor-core kernel (bench/gpu/tensor_core.mha) on the issue's
#     shapes, each checked against the f64 reference on sampled rows and
#     timed on device-resident tensors (one warm call, then the median);
#     a few small edge-case calls (T = 1, T not a multiple of a tile,
#     padding);
#  3. the Halide CUDA kernels on S1 (the portable fallback, for scale);
#  4. torch's SDPA backends on the same shapes (bench/gpu/torch_sdpa.py).
# Results: $OUT/gpu_results.jsonl (one JSON line per run) and the log.
set -uo pipefail
cd "$(dirname "$0")/../.."
dir="${MHAGEN_BUILD_DIR:-build}/gpu-bench"
export LD_LIBRARY_PATH="$dir/lib:${LD_LIBRARY_PATH:-}"
run="$dir/mhagen-run-kernel"
out="${OUT:-/tmp}/gpu_results.jsonl"
: > "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
ldd "$run" | grep "not found" && echo "missing libraries for the runner"

echo "== SASS: tensor-core instructions per image"
for f in "$dir"/sass/*.fatbin; do
  sass=$(cuobjdump --dump-sass "$f" 2>&1)
  printf "%-70s HMMA %s HGMMA %s UTMALDG %s\n" "$(basename "$f")" \
    "$(grep -c ' HMMA' <<< "$sass")" "$(grep -c HGMMA <<< "$sass")" \
    "$(grep -c UTMALDG <<< "$sass")"
done

bench() { # library kernel B T Tkv reps
  local lib=$1 k=$2 B=$3 T=$4 Tkv=$5 reps=$6
  timeout 240 "$run" "$lib" "$k" --B "$B" --T "$T" --Tkv "$Tkv" \
    --reps "$reps" > /tmp/one.json 2> /tmp/one.err
  python3 - "$k" "$B" "$T" "$Tkv" /tmp/one.json /tmp/one.err "$out" <<'PY'
import json, sys
k, B, T, Tkv, path, err, out = sys.argv[1:8]
try:
    r = json.load(open(path))
except Exception as e:
    print(f"{k:16s} B{B} T{T} Tkv{Tkv}: no result ({e}): {open(err).read()[-300:]}")
    sys.exit(0)
if "error" in r:
    print(f"{k:16s} B{B} T{T} Tkv{Tkv}: ERROR {r['error']}"); sys.exit(0)
r.update(kernel=k, peer="mhagen")
open(out, "a").write(json.dumps(r) + "\n")
print(f"{k:16s} B{B:>2} T{T:>5} Tkv{Tkv:>5}: warm {r.get('warm_call_ms', 0):8.3f} ms  "
      f"median {r['median_ms']:8.3f} ms ({r.get('timed_on', 'host')})  "
      f"{r['gflops_useful']/1e3:7.2f} TFLOP/s useful  max|err| {r['max_abs_err']:.2e}  "
      f"{'OK' if r['within_tolerance'] else 'WRONG'}")
PY
}

tc="$dir/tc/libgpu_tensor_core.so"
# tc_: mma.sync (cuda_sm80); h_: wgmma with TMA (cuda_sm90a).
for p in tc h; do
  echo "== $p kernels (cuda backend)"
  for d in f16 bf16; do
    bench "$tc" ${p}_gqa_$d 1 512 512 50       # S1
    bench "$tc" ${p}_gqa_$d 1 2048 2048 20     # S2
    bench "$tc" ${p}_gqa_$d 8 4096 4096 5      # B8 T4096
    bench "$tc" ${p}_mha_$d 4 512 512 50       # S3
    bench "$tc" ${p}_win_$d 1 8192 8192 5      # Gemma-2-like
    bench "$tc" ${p}_gqa_$d 16 1 8192 50       # decode, split keys
  done
done
echo "== edge cases"
for p in tc h; do
  bench "$tc" ${p}_gqa_f16 2 1 1 3
  bench "$tc" ${p}_gqa_bf16 3 77 77 3
  bench "$tc" ${p}_pad_lse_f16 4 100 300 3
  bench "$tc" ${p}_kv1_bf16 2 333 333 3
  bench "$tc" ${p}_kv1_bf16 2 1 5000 3
  bench "$tc" ${p}_gqa_bf16 2 40 1000 3
done

echo "== Halide CUDA kernels (fallback), S1"
for k in gpu_gqa_f16 gpu_gqa_bf16; do
  bench "$dir/libgpu_bench.so" $k 1 512 512 5
done

echo "== torch SDPA"
if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  timeout 300 python3 bench/gpu/torch_sdpa.py "$out"
else
  echo "torch with CUDA is not importable here: no torch SDPA comparison"
fi
echo "results: $out"
