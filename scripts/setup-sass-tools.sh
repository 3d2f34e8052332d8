#!/usr/bin/env bash
# cuobjdump and nvdisasm, with which the cuda backend's lit tests read the
# tensor-core instructions in the SASS nvcc writes (test/lit/gpu/sass.test):
# the CUDA toolkit's when it has them, else NVIDIA's wheels from PyPI in a
# venv under .tools/cuda-sass (linked into .tools/cuda-sass/bin). Best
# effort: without them (offline), that one test is reported unsupported.
set -uo pipefail
cd "$(dirname "$0")/.."
DIR=.tools/cuda-sass
VERSION=13.5.37
if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  exit 0 # no cuda backend kernels to read
fi
if command -v cuobjdump >/dev/null || [ -x /usr/local/cuda/bin/cuobjdump ] ||
  [ -x "$DIR/bin/cuobjdump" ]; then
  exit 0
fi
echo "setup-sass-tools: cuobjdump and nvdisasm $VERSION from PyPI into $DIR"
if ! python3 -m venv "$DIR/venv" ||
  ! "$DIR/venv/bin/pip" install -q "nvidia-cuda-cuobjdump==$VERSION" \
    "nvidia-cuda-nvdisasm==$VERSION"; then
  echo "setup-sass-tools: not installed; the SASS lit test will be unsupported"
  exit 0
fi
mkdir -p "$DIR/bin"
for tool in cuobjdump nvdisasm; do
  found=$(find "$DIR/venv" -name "$tool" -type f | head -1)
  [ -n "$found" ] && ln -sf "$PWD/$found" "$DIR/bin/$tool"
done
exit 0
