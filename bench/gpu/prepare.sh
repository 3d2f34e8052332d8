#!/usr/bin/env bash
# Run HERE (no GPU needed): builds mhagen, generates the CUDA kernels of
# bench/gpu/kernels.mha (Halide) and bench/gpu/tensor_core.mha (the cuda
# backend) into build/gpu-bench/, with the runner and the runtime. Then call
# the device tool with:
#   carry:   build/gpu-bench  (kernels, runner and runtime, < 30 MiB)
#   command: bash bench/gpu/run_h200.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR="${MHAGEN_BUILD_DIR:-build}"
bash scripts/build.sh mhagen mhagen-run-kernel mhagen_runtime
out="$BUILD_DIR/gpu-bench"
rm -rf "$out" && mkdir -p "$out/lib" "$out/sass"
"$BUILD_DIR/tools/mhagen/mhagen" bench/gpu/kernels.mha -o "$out" --shared \
  --lib-name gpu_bench --emit ptx
"$BUILD_DIR/tools/mhagen/mhagen" bench/gpu/tensor_core.mha -o "$out/tc" \
  --shared --lib-name gpu_tensor_core --emit fatbin,ptxas
mv "$out"/tc/*.fatbin "$out/sass/"
cp "$BUILD_DIR/tools/mhagen-run-kernel/mhagen-run-kernel" "$out/"
cp -L "$BUILD_DIR/runtime/libmhagen_runtime.so.1" "$out/lib/"
# The runtime reads kernel libraries with libelf, which the GPU machine's
# image may lack (it is not Debian): it travels too.
cp -L "$(ldconfig -p | awk '/libelf.so.1 /{print $NF; exit}')" "$out/lib/"
patchelf --set-rpath '$ORIGIN/lib' "$out/mhagen-run-kernel" 2>/dev/null ||
  echo "(patchelf missing: run_h200.sh sets LD_LIBRARY_PATH instead)"
du -sh "$out"
