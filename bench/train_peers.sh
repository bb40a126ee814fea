#!/usr/bin/env bash
# tierflow's training against PyTorch in memory and DeepSpeed ZeRO-3 with NVMe offload on the same
# host, model and corpus, interleaved, medians and ratios (bench/train_peers.py; the figures are
# in docs/executor.md "Speed"). Makes its own virtual environment with PyTorch, DeepSpeed and
# Hugging Face transformers from PyPI in .cache/bench-venv (a few GB; a benchmark's peers only,
# never a dependency of tierflow or its tests) and needs a built tierflow (scripts/build.sh).
#   bench/train_peers.sh [SCENARIO=scenarios/tiny-cpu.yaml] [ROUNDS=3] [ITERATIONS=8] [extra train_peers.py flags]
set -euo pipefail
cd "$(dirname "$0")/.."
scenario=${1:-scenarios/tiny-cpu.yaml}
rounds=${2:-3}
iterations=${3:-8}
shift $(( $# < 3 ? $# : 3 ))
venv=.cache/bench-venv
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import torch, deepspeed, transformers, yaml' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --progress-bar off torch torchsnapshot-nightly numpy deepspeed transformers safetensors pyyaml
fi
if [ ! -e /usr/include/libaio.h ]; then
  echo "train_peers.sh: DeepSpeed's NVMe offload (its async_io op) needs libaio-dev: apt-get install libaio-dev" >&2
  exit 1
fi
mkdir -p .cache/train-peers
"$venv/bin/python" bench/train_peers.py --tierflow ./build/cli/tierflow --scenario "$scenario" --rounds "$rounds" \
  --iterations "$iterations" --dir .cache/train-peers "$@"
