#!/usr/bin/env bash
# The oracles (bench only, never CI): mhagen's layer kernels against the
# attention modules of Hugging Face transformers on the same inputs and
# weights (bench/oracles/*.py), in the peers' environment.
#   bench/run_oracles.sh [--build DIR] [--T N]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="$(bash bench/peers_venv.sh transformers)"
"$VENV/bin/python" bench/oracles/layer_transformers.py "$@"
