#!/usr/bin/env bash
# Run-to-run spread and thread scaling: runs the
# benchmark binary RUNS times as separate processes (default 5; a fresh
# process each time, so allocator state, page placement and thread start-up
# vary as they do for a user), then prints, per case, the min / median / max
# of the per-run medians, max/min, and the 1 -> 2 thread speedup.
#   bench/run_spread.sh [benchmark filter regex]   (default: S1|S2|S3 f32)
# MHAGEN_SPREAD_RUNS: runs (default 5). Extra environment (e.g.
# MHAGEN_SCRATCH_CACHE=0) passes through to the benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${MHAGEN_BUILD_DIR:-build}"
cmake --build "$BUILD_DIR" --target mhagen_bench kernels_bench \
  kernels_bench_inplace
RUNS="${MHAGEN_SPREAD_RUNS:-5}"
FILTER="${1:-^S[123]_f32/(mhagen|mhagen_mlir|onednn_unfused)/}"
results="$(bash bench/results_dir.sh)"
stamp="$(date +%Y%m%d-%H%M%S)"
files=()
for r in $(seq 1 "$RUNS"); do
  out="$results/${stamp}-spread-${r}.json"
  "$BUILD_DIR/bench/mhagen_bench" "$BUILD_DIR/bench/kernels/bench/libbench.so" \
    --benchmark_filter="$FILTER" --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true \
    --benchmark_out="$out" --benchmark_out_format=json >/dev/null
  files+=("$out")
done
python3 bench/spread_summary.py "${files[@]}" | tee "$results/${stamp}-spread.md"
