#!/usr/bin/env bash
# Times a 1,000-run sweep of Llama-2-70B variations (scenarios/sweeps/llama70b-1000.yaml) with
# -j JOBS worker processes (default 2) and prints the wall time; the target is <= 30 s on a
# 2-core machine (issue 59; it was < 300 s before). Usage: bench/sweep_1000.sh [JOBS] [BUILD_DIR]   (BUILD_DIR default: build)
# Output goes to a temporary directory (CSV, PNG), removed afterwards unless KEEP=1.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
jobs=${1:-2}
build=${2:-$root/build}
tierflow="$build/cli/tierflow"
[ -x "$tierflow" ] || { echo "sweep_1000: $tierflow not built (ninja -C $build tierflow)" >&2; exit 1; }
out=$(mktemp -d)
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$out"' EXIT
echo "sweep_1000: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), -j $jobs"
start=$(date +%s.%N)
"$tierflow" sweep "$root/scenarios/sweeps/llama70b-1000.yaml" -j "$jobs" -o "$out/llama70b-1000.csv" --top 5
end=$(date +%s.%N)
wall=$(echo "$end - $start" | bc -l)
rows=$(($(wc -l < "$out/llama70b-1000.csv") - 1))
printf 'sweep_1000: %d rows in %.1f s wall (%.2f runs/s) with -j %s; target <= 30 s: %s\n' "$rows" "$wall" \
  "$(echo "$rows / $wall" | bc -l)" "$jobs" "$( (( $(echo "$wall <= 30" | bc -l) )) && echo PASS || echo FAIL)"
[ "${KEEP:-0}" = 1 ] && echo "sweep_1000: kept $out"
exit 0
