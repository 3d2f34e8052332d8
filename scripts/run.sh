#!/usr/bin/env bash
# README command 1: installs what is missing, builds mhagen and the runtime
# (nothing else: the test kernels and benchmarks are command 2's), then
# generates the kernel for mhagen's default spec (a Llama-3-8B-like layer: d 4096, h 32,
# kv 8, causal, f32, host target) into ./out, runs it once on seeded random
# data against the f64 reference, and prints its time and max error.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh mhagen mhagen_runtime
BUILD_DIR="${MHAGEN_BUILD_DIR:-build}"
MHAGEN="$BUILD_DIR/tools/mhagen/mhagen"
LLAMA3_8B=(--d 4096 --h 32 --kv 8 --mask causal)
"$MHAGEN" explain "${LLAMA3_8B[@]}" --T 512
"$MHAGEN" run "${LLAMA3_8B[@]}" --T 512 --keep out "$@"
