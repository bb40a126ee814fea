#!/usr/bin/env bash
# A long run's memory: runs the tiny model ITERATIONS iterations on a disk directory (the records
# streamed to a file, as --records does) and samples the process's resident set every second. Prints
# RSS at the end of warm-up (WARMUP iterations) and at each quarter of the rest, and the growth per
# iteration after warm-up, which a run that holds flat memory keeps near zero.
#   bench/run_rss.sh [ITERATIONS=2000] [WARMUP=100] [DISK_DIR=a temporary directory]
set -euo pipefail
cd "$(dirname "$0")/.."
tf=./build/cli/tierflow
n=${1:-2000}
warmup=${2:-100}
disk=${3:-$(mktemp -d)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
$tf run scenarios/tiny-cpu.yaml -n "$n" --disk-root "$disk" --records "$work/records.jsonl" >"$work/out.txt" &
pid=$!
# One sample a second: the iterations printed so far, and VmRSS in KiB.
while kill -0 "$pid" 2>/dev/null; do
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
  done_its=$(grep -c '^iteration' "$work/out.txt" || true)
  [ -n "$rss" ] && echo "$done_its $rss" >>"$work/rss.txt"
  sleep 1
done
wait "$pid"
python3 - "$work/rss.txt" "$n" "$warmup" "$(wc -l <"$work/records.jsonl")" <<'PY'
import sys
samples = [tuple(map(int, l.split())) for l in open(sys.argv[1])]
n, warmup, records = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def at(it):  # the last sample taken at or before `it` iterations
    return max((s for s in samples if s[0] <= it), default=samples[0])
base = at(warmup)
print(f"{n} iterations, {records} records streamed, {len(samples)} samples of VmRSS")
for q in (0, 0.25, 0.5, 0.75, 1.0):
    it = min(n - 1, warmup + int(q * (n - warmup)))
    s = at(it)
    print(f"  after {s[0]:5d} iterations: RSS {s[1] / 1024:8.1f} MiB")
# While training: the samples up to the last iteration printed (the run frees its buffers after).
running = [s for s in samples if warmup <= s[0] < n]
last = at(n - 1)
growth = (last[1] - base[1]) / max(1, last[0] - base[0])
print(f"growth after warm-up: {growth:.2f} KiB per iteration ({(last[1] - base[1]) / 1024:.1f} MiB over {last[0] - base[0]} iterations); "
      f"largest RSS while training after warm-up {max(s[1] for s in running) / 1024:.1f} MiB")
PY
