#!/usr/bin/env bash
# tierflow's aggregated checkpoint against torch.save, TorchSnapshot, DeepSpeed and fio's
# sequential rate, on the same tensors (bench/checkpoint_peers.py; docs/checkpoint-study.md has the
# figures). Makes its own virtual environment with PyTorch, TorchSnapshot and DeepSpeed from PyPI
# in .cache/bench-venv (a few GB; a benchmark's peers only, never a dependency of tierflow or its
# tests) and needs fio and a built tierflow (scripts/build.sh).
#   bench/checkpoint_peers.sh [DIR=a scratch directory under .cache] [REPS=5] [RANKS=2] [MODEL=bench/models/ckpt-330m.yaml]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.cache/checkpoint-peers}
reps=${2:-5}
ranks=${3:-2}
model=${4:-bench/models/ckpt-330m.yaml}
venv=.cache/bench-venv
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import torch, torchsnapshot, numpy, deepspeed' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --progress-bar off torch torchsnapshot-nightly numpy deepspeed
fi
command -v fio >/dev/null || { echo "checkpoint_peers.sh: fio is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
mkdir -p "$dir"
trap 'rm -rf "$dir"/peers-*' EXIT
PYTHONWARNINGS=ignore "$venv/bin/python" bench/checkpoint_peers.py --tierflow ./build/cli/tierflow --dir "$dir" --model "$model" \
  --ranks "$ranks" --reps "$reps" --json "$dir/peers.json"
