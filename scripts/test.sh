#!/usr/bin/env bash
# README command 2: installs what is missing, builds, and runs every test
# (GoogleTest suites, lit/FileCheck, numerical kernel tests, the downstream
# CMake consumer) through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
BUILD_DIR="${MHAGEN_BUILD_DIR:-build}"
JOBS="${MHAGEN_JOBS:-$(nproc)}"
cd "$BUILD_DIR"
ctest --output-on-failure -j "$JOBS"
