#!/usr/bin/env bash
# Runs the benchmark binary on this machine and writes the raw results to
# bench/results/<class>/<date>.json (bench/results_dir.sh); then
# python3 bench/make_results.py writes bench/RESULTS.md from the newest.
#   bench/run_benchmarks.sh [benchmark flags, e.g. --benchmark_filter=S2]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${MHAGEN_BUILD_DIR:-build}"
cmake --build "$BUILD_DIR" --target mhagen_bench kernels_bench \
  kernels_bench_inplace
results="$(bash bench/results_dir.sh)"
out="$results/$(date +%Y%m%d-%H%M%S).json"
"$BUILD_DIR/bench/mhagen_bench" "$BUILD_DIR/bench/kernels/bench/libbench.so" \
  "$BUILD_DIR/bench/kernels/bench_inplace/libbench_inplace.so" \
  --benchmark_out="$out" --benchmark_out_format=json \
  --benchmark_counters_tabular=true "$@"
echo "raw results: $out"
