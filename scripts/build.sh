#!/usr/bin/env bash
# Installs missing packages, configures (Ninja, Release) and builds into
# ./build (or $MHAGEN_BUILD_DIR): the targets named as arguments, or
# everything (tests and benchmarks included) when none are named.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
bash scripts/setup-sass-tools.sh
BUILD_DIR="${MHAGEN_BUILD_DIR:-build}"
JOBS="${MHAGEN_JOBS:-$(nproc)}"
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j "$JOBS" "${targets[@]}"
