#!/usr/bin/env bash
# The Python peers (torch 2.x SDPA and flex_attention, OpenVINO's SDPA) beside bench/run_benchmarks.sh, for the
# same run: installs torch from PyPI into a virtual environment (bench only,
# never CI; ../shared/NOTES.md says why these exact packages) and writes
# bench/results/<class>/<date>-peers.jsonl (bench/results_dir.sh).
#   bench/run_peers.sh [shape names, e.g. Decode SpecDecode]
# MHAGEN_PEERS_VENV: the environment (default .venv-peers, git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${MHAGEN_PEERS_VENV:-.venv-peers}"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import torch' 2>/dev/null; then
  python3 -m venv "$VENV"
  # torch's wheel pins CUDA packages it does not need on the CPU: install it
  # without them, then the pure-Python dependencies and the four libraries
  # libtorch links against.
  "$VENV/bin/pip" install -q --no-deps torch
  "$VENV/bin/pip" install -q filelock typing-extensions sympy networkx jinja2 \
    fsspec numpy "setuptools>=77.0.3"
  "$VENV/bin/pip" install -q --no-deps nvidia-cusparselt-cu13 \
    nvidia-nvshmem-cu13 nvidia-cufile nvidia-nccl-cu13
fi
if ! "$VENV/bin/python" -c 'import openvino' 2>/dev/null; then
  "$VENV/bin/pip" install -q openvino
fi
results="$(bash bench/results_dir.sh)"
out="$results/$(date +%Y%m%d-%H%M%S)-peers.jsonl"
{
  "$VENV/bin/python" bench/peers/torch_sdpa.py "$@"
  "$VENV/bin/python" bench/peers/openvino_sdpa.py "$@"
  "$VENV/bin/python" bench/peers/torch_modifiers.py "$@"
} | tee "$out"
echo "raw results: $out"
