#!/usr/bin/env bash
# The real executor's overhead on the tiny model. Three ways to run the same training:
#   reference   `run --in-memory`: the math as a plain loop, no schedule, nothing moved;
#   plain loop  `run --plain-loop`: the schedule's tasks (reads, copies, computes, updates, writes)
#               one at a time in topological order, no dispatcher, no threads;
#   executor    `run`: the same tasks under the dispatcher, work on per-resource threads and io_uring.
# Each on the store in RAM (--storage memory) and on a disk directory. Prints the median of the
# steady-state iteration times of REPEATS runs, the executor's ratio to the plain loop of the same
# ops, and the share of wall time its dispatch thread was busy.
#   bench/run_overhead.sh [ITERATIONS=20] [REPEATS=3] [DISK_DIR=a temporary directory]
set -euo pipefail
cd "$(dirname "$0")/.."
tf=./build/cli/tierflow
n=${1:-20}
repeats=${2:-3}
disk=${3:-$(mktemp -d)}
scenario=scenarios/tiny-cpu.yaml
median() { python3 -c "import statistics,sys; print(statistics.median(float(x) for x in sys.stdin.read().split()))"; }
field() { python3 -c "import json,sys; r=json.load(sys.stdin); print($1)"; }

declare -A t busy
for ((i = 0; i < repeats; i++)); do
  t[ref]+="$($tf run $scenario --in-memory -n "$n" --json | field "r['iteration_s']") "
  for store in memory auto; do
    for mode in plain exec; do
      flag=$([ $mode = plain ] && echo --plain-loop || true)
      out=$($tf run $scenario --disk "$disk" --storage $store $flag -n "$n" --json)
      t[$mode.$store]+="$(echo "$out" | field "r['iteration_s']") "
      busy[$mode.$store]+="$(echo "$out" | field "r.get('dispatch_busy_s', 0) / r['wall_s']") "
    done
  done
done
ms() { echo "$1" | median | python3 -c "import sys; print('%8.1f ms' % (1000 * float(sys.stdin.read())))"; }
ratio() { python3 -c "import statistics; a=[float(x) for x in '$1'.split()]; b=[float(x) for x in '$2'.split()]; print('%.3f' % (statistics.median(a) / statistics.median(b)))"; }
printf 'tiny-cpu, %d iterations, median of %d runs of the steady-state iteration time\n' "$n" "$repeats"
printf '  reference loop, in memory          %s\n' "$(ms "${t[ref]}")"
for store in memory auto; do
  label=$([ $store = memory ] && echo "store in RAM" || echo "disk, $disk")
  printf '  %s:\n' "$label"
  printf '    plain loop of the schedule ops   %s\n' "$(ms "${t[plain.$store]}")"
  printf '    executor (dispatcher, threads)   %s   executor / plain loop = %s   dispatch thread busy %.1f %%\n' \
    "$(ms "${t[exec.$store]}")" "$(ratio "${t[exec.$store]}" "${t[plain.$store]}")" \
    "$(echo "${busy[exec.$store]}" | median | python3 -c "import sys; print(100 * float(sys.stdin.read()))")"
done
