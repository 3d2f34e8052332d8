#!/usr/bin/env bash
# The Python peers (torch 2.x SDPA and flex_attention, OpenVINO's SDPA,
# transformers' LlamaAttention as a decoder step) beside
# bench/run_benchmarks.sh, for the same run: installs torch and transformers
# from PyPI into a virtual environment (bench only, never CI;
# ../shared/NOTES.md says why these exact packages) and writes
# bench/results/<class>/<date>-peers.jsonl (bench/results_dir.sh).
#   bench/run_peers.sh [shape names, e.g. Decode SpecDecode]
# MHAGEN_PEERS_VENV: the environment (default .venv-peers, git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="$(bash bench/peers_venv.sh openvino transformers)"
results="$(bash bench/results_dir.sh)"
out="$results/$(date +%Y%m%d-%H%M%S)-peers.jsonl"
{
  "$VENV/bin/python" bench/peers/torch_sdpa.py "$@"
  "$VENV/bin/python" bench/peers/openvino_sdpa.py "$@"
  "$VENV/bin/python" bench/peers/torch_modifiers.py "$@"
  "$VENV/bin/python" bench/peers/torch_layer_decode.py "$@"
} | tee "$out"
echo "raw results: $out"
