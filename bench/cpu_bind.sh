#!/usr/bin/env bash
# The CPU pool's placement (docs/executor.md "The CPU threads"): tiny-cpu under three schedules,
# each run with the pool's workers left to the scheduler (TIERFLOW_CPU_BIND=0) and bound (the
# default), ROUNDS rounds taking the two in turn (a shared machine drifts between spells). Prints,
# per run, the medians over the steady iterations (the first two and the last left out) of each
# iteration's forward and backward compute, Adam and conversion time, and the iteration time;
# the weights' SHA-256 of every run must be one (placement never changes the math).
#   bench/cpu_bind.sh DIR0 DIR1 [ROUNDS=3] [ITERATIONS=8]
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: $0 DIR0 DIR1 [ROUNDS] [ITERATIONS]" >&2; exit 2; }
tf=./build/cli/tierflow
d0=$1
d1=$2
rounds=${3:-3}
n=${4:-8}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
names=(zi-16k-qd1 zi ioc-split)
sets=("--set policy.block_size=16KiB --set policy.queue_depth=1" ""
      "--set policy.name=ioc --set policy.disk_layout=split")
disks=("--disk $d0" "--disk $d0" "--disk $d0 --disk $d1")
for r in $(seq 1 "$rounds"); do
  for bind in 0 1; do
    for i in "${!names[@]}"; do
      echo "# ${names[$i]}, bind $bind (round $r of $rounds)" >&2
      # shellcheck disable=SC2086  # the sets and disks are word lists
      TIERFLOW_CPU_BIND=$bind $tf run scenarios/tiny-cpu.yaml ${sets[$i]} ${disks[$i]} -n "$n" \
        --records "$out/${names[$i]}.b$bind.r$r.jsonl" --json > "$out/${names[$i]}.b$bind.r$r.json"
    done
  done
done
python3 - "$out" "$rounds" "$n" "${names[@]}" <<'PY'
import json, statistics, sys
out, rounds, n, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
print(f"{'schedule':<12} {'placement':<9} {'round':>5} {'forward':>8} {'backward':>9} {'adam':>6} {'convert':>8} {'iteration':>10}  (ms)")
hashes = set()
for name in names:
    for bind in (0, 1):
        for r in range(1, rounds + 1):
            recs = [json.loads(l) for l in open(f"{out}/{name}.b{bind}.r{r}.jsonl")]
            run = json.load(open(f"{out}/{name}.b{bind}.r{r}.json"))
            hashes.add(run["weights_sha256"])
            def med(pick):
                return 1e3 * statistics.median(
                    sum(x["end_s"] - x["start_s"] for x in recs if x["iteration"] == it and pick(x))
                    for it in range(2, n - 1))
            fwd = med(lambda x: x["op"] == "compute" and x["phase"] == "forward")
            bwd = med(lambda x: x["op"] == "compute" and x["phase"] == "backward")
            adam = med(lambda x: x["op"] == "optimizer")
            conv = med(lambda x: x["op"] == "convert")
            print(f"{name:<12} {'bound' if bind else 'unbound':<9} {r:>5} {fwd:>8.1f} {bwd:>9.1f} {adam:>6.1f} {conv:>8.1f} "
                  f"{1e3 * run['iteration_s']:>10.1f}")
print(f"weights: {len(hashes)} distinct SHA-256 over every run" + ("" if len(hashes) == 1 else "  MISMATCH"))
sys.exit(0 if len(hashes) == 1 else 1)
PY
