#!/usr/bin/env bash
# The AArch64 (neon) subset: cross-builds the runtime, the reference and the
# numerical test driver for AArch64 (test/cross), cross-generates its
# kernels with the host build's mhagen (both backends), and runs them under
# qemu-aarch64 against the reference. Needs the host build (scripts/build.sh)
# and the packages scripts/setup-deps.sh installs.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
absolute() { case "$1" in /*) echo "$1" ;; *) echo "$ROOT/$1" ;; esac; }
HOST_BUILD="$(absolute "${MHAGEN_BUILD_DIR:-build}")"
CROSS_BUILD="$(absolute "${MHAGEN_CROSS_BUILD_DIR:-build-aarch64}")"
JOBS="${MHAGEN_JOBS:-$(nproc)}"

# LLVM's libomp for arm64 (the MLIR kernels' parallel loops): Debian's
# libomp5-19 cannot be installed beside the amd64 one (both own
# /usr/lib/llvm-19/lib), so its package is unpacked into the build folder.
DEPS="$CROSS_BUILD/deps"
OMP="$DEPS/usr/lib/aarch64-linux-gnu/libomp.so.5"
if [ ! -f "$OMP" ]; then
  mkdir -p "$DEPS"
  (cd "$DEPS" && apt-get download libomp5-19:arm64)
  dpkg-deb -x "$DEPS"/libomp5-19_*_arm64.deb "$DEPS"
fi

cmake -S test/cross -B "$CROSS_BUILD" -G Ninja \
  -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/toolchains/aarch64-linux-gnu.cmake" \
  -DMHAGEN_HOST_BUILD_DIR="$HOST_BUILD" \
  -DMHAGEN_CROSS_OPENMP_LIBRARY="$OMP"
cmake --build "$CROSS_BUILD" -j "$JOBS"
ctest --test-dir "$CROSS_BUILD" --output-on-failure -j "$JOBS"
