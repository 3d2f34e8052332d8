#!/usr/bin/env bash
# Installs missing packages, configures (Ninja, Release) and builds
# everything into ./build (or $MHAGEN_BUILD_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
BUILD_DIR="${MHAGEN_BUILD_DIR:-build}"
JOBS="${MHAGEN_JOBS:-$(nproc)}"
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$BUILD_DIR" -j "$JOBS"
