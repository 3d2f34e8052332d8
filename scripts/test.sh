#!/usr/bin/env bash
# README command 2: installs what is missing, builds, and runs every test
# (GoogleTest suites, lit/FileCheck, numerical kernel tests, the downstream
# CMake consumer) through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
bash scripts/build.sh
BUILD_DIR="${MHAGEN_BUILD_DIR:-build}"
JOBS="${MHAGEN_JOBS:-$(nproc)}"
cd "$BUILD_DIR"
ctest --output-on-failure -j "$JOBS"
# On a machine with AVX-512 the kernel tests run a second time as an
# AVX2-only machine would see them (MHAGEN_CPU_CLASS, runtime.h): kernels
# for targets the class lacks are skipped with the reason, the avx2 kernels
# run, so the AVX2 path and the skip logic are checked on every CI machine.
if grep -qw avx512f /proc/cpuinfo; then
  echo "== the kernel tests again, presenting this machine as AVX2-only =="
  MHAGEN_CPU_CLASS=avx2 ctest --output-on-failure -j "$JOBS" \
    -L kernels -R 'numeric_(targets|mlir_targets|edge_cases|sdpa_f32)$'
  MHAGEN_CPU_CLASS=avx2 ctest --output-on-failure -R '^runtime_library$'
fi
# The sanitized build: ASan + UBSan + leak detection over the unit, runtime,
# tuning, property and CLI tests and a numerical subset, then each fuzz
# target for a bounded time (scripts/sanitize.sh says what it covers).
cd "$ROOT"
bash scripts/sanitize.sh
