#!/usr/bin/env bash
# zero-infinity's disk traffic against DeepSpeed's own on the same scenario and knobs
# (bench/deepspeed/fidelity.py; the figures are in docs/policies.md "Checked against DeepSpeed").
# Uses bench/train_peers.sh's virtual environment (.cache/bench-venv: PyTorch, DeepSpeed and
# transformers from PyPI, a benchmark's peers only, never a dependency of tierflow or its tests),
# making it if missing, and a built tierflow (scripts/build.sh). DeepSpeed JIT-builds its
# async_io and cpu_adam ops on first use (about 11 minutes on 2 cores, once).
#   bench/deepspeed/run.sh [SCENARIO=scenarios/tiny-cpu.yaml] [extra fidelity.py flags: --setting NAME:k=v,...]
set -euo pipefail
cd "$(dirname "$0")/../.."
scenario=${1:-scenarios/tiny-cpu.yaml}
shift $(( $# < 1 ? $# : 1 ))
venv=.cache/bench-venv
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import torch, deepspeed, transformers, yaml' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --progress-bar off torch numpy deepspeed transformers safetensors pyyaml
fi
if [ ! -e /usr/include/libaio.h ]; then
  echo "bench/deepspeed/run.sh: DeepSpeed's NVMe offload (its async_io op) needs libaio-dev: apt-get install libaio-dev" >&2
  exit 1
fi
dir=.cache/deepspeed-fidelity/$(basename "$scenario" .yaml)
mkdir -p "$dir"
"$venv/bin/python" bench/deepspeed/fidelity.py --tierflow ./build/cli/tierflow --scenario "$scenario" --dir "$dir" \
  --json "$dir/fidelity.json" "$@"
