#!/usr/bin/env bash
# Fresh machine to a simulated Llama-2-70B iteration under ZeRO-Infinity NVMe offload:
# installs what is missing, builds, installs tierflow (cmake --install), runs the quickstart
# scenario and writes a Perfetto timeline.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh --target tierflow
mkdir -p out
# tierflow on PATH with its shipped data (TIERFLOW_PREFIX, default ~/.local; /usr/local for root
# with TIERFLOW_PREFIX=/usr/local): it runs from any directory.
prefix=${TIERFLOW_PREFIX:-$HOME/.local}
cmake --install build --prefix "$prefix" >/dev/null
echo "installed $prefix/bin/tierflow (data under $prefix/share/tierflow)"
case ":$PATH:" in
  *":$prefix/bin:"*) ;;
  *) echo "note: $prefix/bin is not on PATH: export PATH=\"$prefix/bin:\$PATH\"" ;;
esac
"$prefix/bin/tierflow" sim scenarios/quickstart.yaml --iterations 3 --trace out/quickstart-trace.json
