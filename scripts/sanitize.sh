#!/usr/bin/env bash
# The sanitized run (part of scripts/test.sh, so of CI): mhagen's own code
# built with clang, AddressSanitizer + UndefinedBehaviorSanitizer
# (MHAGEN_SANITIZE), leak detection on. Runs the unit, spec, runtime,
# tuning, property and CLI/lit tests, a small numerical subset, every fuzz
# corpus, then each libFuzzer target for a bounded time
# ($MHAGEN_FUZZ_SECONDS, default 15 s each). The MLIR backend, the
# benchmarks and the downstream CMake consumer are left out here: MLIR's
# static LLVM is not instrumented and costs minutes to link per tool, and
# the consumer is built by another compiler on purpose (the main run covers
# all three). Of the lit tests it runs those of the CLI, spec errors and
# explain, where input reaches mhagen's own code; the IR tests of halide/
# and tune/, and the neon, PTX and SASS generation tests, spend their time in
# Halide and LLVM, which are not instrumented, and the main run has them.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
BUILD_DIR="${MHAGEN_ASAN_BUILD_DIR:-build-asan}"
JOBS="${MHAGEN_JOBS:-$(nproc)}"
FUZZ_SECONDS="${MHAGEN_FUZZ_SECONDS:-15}"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=0"
export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# The test kernels come from the main build's mhagen when there is one
# (cmake/MhagenTestKernels.cmake says why).
MAIN_MHAGEN="$PWD/${MHAGEN_BUILD_DIR:-build}/tools/mhagen/mhagen"
generator=()
if [ -x "$MAIN_MHAGEN" ]; then
  generator=(-DMHAGEN_TEST_GENERATOR="$MAIN_MHAGEN")
fi
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  CC=clang-19 CXX=clang++-19 cmake -S . -B "$BUILD_DIR" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMHAGEN_SANITIZE=ON \
    -DMHAGEN_ENABLE_MLIR=OFF -DMHAGEN_BUILD_BENCH=OFF "${generator[@]}"
fi
cmake --build "$BUILD_DIR" -j "$JOBS"
(cd "$BUILD_DIR" &&
  LIT_FILTER_OUT='^mhagen :: ((halide|tune)/|cli/neon-target|gpu/(ptx|sass))' \
    ctest --output-on-failure -j "$JOBS" -E '^downstream$')
MHAGEN_FUZZ_SEED="${MHAGEN_FUZZ_SEED:-1}" bash scripts/fuzz.sh "$FUZZ_SECONDS"
