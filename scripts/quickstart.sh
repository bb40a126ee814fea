#!/usr/bin/env bash
# Fresh machine to a simulated Llama-2-70B iteration under ZeRO-Infinity NVMe offload:
# installs what is missing, builds, runs the quickstart scenario and writes a Perfetto timeline.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh --target tierflow
mkdir -p out
./build/cli/tierflow sim scenarios/quickstart.yaml --iterations 3 --trace out/quickstart-trace.json
