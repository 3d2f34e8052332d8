#!/usr/bin/env bash
# README command 1: installs what is missing, builds, and runs mhagen on its
# default spec (d 4096, h 32, kv 8, causal, f32, host target).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
BUILD_DIR="${MHAGEN_BUILD_DIR:-build}"
"$BUILD_DIR/tools/mhagen/mhagen" explain "$@"
