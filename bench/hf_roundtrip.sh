#!/usr/bin/env bash
# A Hugging Face model of each family through tierflow and back (bench/hf_roundtrip.py): made and
# finally loaded by transformers, fine-tuned, evaluated and saved by tierflow; the held-out losses
# must agree within 1e-4. Makes its own virtual environment with PyTorch, transformers and
# safetensors from PyPI in .cache/hf-venv (a benchmark's reference only, never a dependency of
# tierflow or its tests) and needs a built tierflow (scripts/build.sh).
#   bench/hf_roundtrip.sh [extra hf_roundtrip.py flags, e.g. --families llama3,mistral --json out/hf.json]
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.cache/hf-venv
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import torch, transformers, safetensors' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --progress-bar off torch transformers safetensors
fi
mkdir -p .cache/hf-roundtrip
"$venv/bin/python" bench/hf_roundtrip.py --tierflow ./build/cli/tierflow --dir .cache/hf-roundtrip "$@"
