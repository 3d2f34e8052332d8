#!/usr/bin/env bash
# The Python environment of the peers and oracles (bench only, never CI):
# torch from PyPI, and the packages given as arguments (openvino,
# transformers). ../shared/NOTES.md says why these exact packages. Prints
# the environment's folder.
# MHAGEN_PEERS_VENV: the environment (default .venv-peers, git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${MHAGEN_PEERS_VENV:-.venv-peers}"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import torch' 2>/dev/null; then
  python3 -m venv "$VENV" >&2
  # torch's wheel pins CUDA packages it does not need on the CPU: install it
  # without them, then the pure-Python dependencies and the four libraries
  # libtorch links against.
  "$VENV/bin/pip" install -q --no-deps torch >&2
  "$VENV/bin/pip" install -q filelock typing-extensions sympy networkx jinja2 \
    fsspec numpy "setuptools>=77.0.3" >&2
  "$VENV/bin/pip" install -q --no-deps nvidia-cusparselt-cu13 \
    nvidia-nvshmem-cu13 nvidia-cufile nvidia-nccl-cu13 >&2
fi
for package in "$@"; do
  if ! "$VENV/bin/python" -c "import $package" 2>/dev/null; then
    "$VENV/bin/pip" install -q "$package" >&2
  fi
done
echo "$VENV"
