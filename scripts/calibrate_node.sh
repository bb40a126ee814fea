#!/usr/bin/env bash
# Calibrate this node and check the profile on runs it never saw (docs/calibration.md):
#   1. tierflow probe all     every probe, records into OUT/probes/
#   2. tierflow calibrate     fits the profile OUT/profile.yaml from those records only
#   3. tierflow validate      each schedule below for real and on sim with the profile, in
#                             three rounds that take the schedules in turn (a shared machine
#                             drifts between fast and slow spells over minutes: interleaved, each
#                             schedule sees the same mix), compared at its median round
# then prints the prediction error per schedule and per op class, whether sim orders the
# schedules as the real runs do (each pair that the real runs tell apart: every run of one faster
# than every run of the other), and the time all of it took.
#   scripts/calibrate_node.sh DIR0 DIR1 [OUT=a temporary directory] [ITERATIONS=8]
# DIR0 and DIR1 are directories on the disks the runs use (nvme0, nvme1); the base hardware is
# the scenario's (cpu-host). The schedules: tiny-cpu under zero-infinity with DeepSpeed's
# defaults (one disk), with small synchronous requests (16 KiB at depth 1, one disk), ioc split
# over two disks, and ioc striping sub-groups of 1e6 elements over two disks.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: $0 DIR0 DIR1 [OUT] [ITERATIONS]" >&2; exit 2; }
tf=./build/cli/tierflow
d0=$1
d1=$2
out=${3:-$(mktemp -d)}
n=${4:-8}
scenario=scenarios/tiny-cpu.yaml
mkdir -p "$out"
start=$(date +%s.%N)

$tf probe all --dir "$d0" --dir "$d1" --scenario $scenario -o "$out/probes"
# A fit the data do not determine is refused: the profile keeps the base's value for it, and the
# table and the lines under it say which and why.
$tf calibrate "$out/probes" --base cpu-host -o "$out/profile.yaml" --allow-refused

names=(zi-1disk zi-1disk-16k-qd1 ioc-split-2disk ioc-stripe-2disk)
sets=("" "--set policy.block_size=16KiB --set policy.queue_depth=1"
      "--set policy.name=ioc --set policy.disk_layout=split"
      "--set policy.name=ioc --set policy.sub_group_size=1000000")
disks=("--disk $d0" "--disk $d0" "--disk $d0 --disk $d1" "--disk $d0 --disk $d1")
rounds=3
for r in $(seq 1 $rounds); do
  for i in "${!names[@]}"; do
    echo "# validate ${names[$i]} (round $r of $rounds)" >&2
    trace=()
    [ "$r" = 1 ] && trace=(--trace "$out/${names[$i]}.trace.json")
    # shellcheck disable=SC2086  # the sets and disks are word lists
    $tf validate $scenario ${sets[$i]} --profile "$out/profile.yaml" ${disks[$i]} -n "$n" --repeats 1 --json \
      "${trace[@]}" > "$out/${names[$i]}.r$r.json"
  done
done
end=$(date +%s.%N)

python3 - "$out" "$(python3 -c "print($end - $start)")" "$rounds" "${names[@]}" <<'PY'
import json, sys
out, elapsed, rounds, names = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
rows = []
for name in names:
    runs = sorted((json.load(open(f"{out}/{name}.r{r}.json")) for r in range(1, rounds + 1)),
                  key=lambda j: j["real_iteration_s"])
    j = runs[len(runs) // 2]  # the median round: its run, its per-op comparison
    ops = {o["op"]: o for o in j["comparison"]["ops"]}
    rows.append((name, j["real_iteration_s"], j["sim_iteration_s"], j["iteration_error"], ops,
                 [x["real_iteration_s"] for x in runs]))
print(f"\n{'schedule':<20} {'real':>10} {'sim':>10} {'error':>8}   real runs (ms)      per op class: error of the summed time")
for name, real, sim, err, ops, runs in rows:
    per_op = "  ".join(f"{op} {100 * o['rel_error']:+.0f}%" for op, o in ops.items()
                       if o.get("rel_error") is not None and o["a_sum_s"] > 1e-3)
    spread = "/".join(f"{1e3 * x:.0f}" for x in runs)
    print(f"{name:<20} {1e3 * real:>8.1f}ms {1e3 * sim:>8.1f}ms {100 * err:>+7.2f}%   {spread:<18}  {per_op}")
order_real = [r[0] for r in sorted(rows, key=lambda r: r[1])]
order_sim = [r[0] for r in sorted(rows, key=lambda r: r[2])]
print("\nfastest to slowest, real (median run):", " < ".join(order_real))
print("fastest to slowest, sim:              ", " < ".join(order_sim))
# A pair is ordered by the real runs when every run of one is faster than every run of the other;
# closer than that, the run-to-run spread of this machine decides, and so the pair is a tie.
told, agree, ties = 0, 0, []
for i in range(len(rows)):
    for k in range(i + 1, len(rows)):
        a, b = rows[i], rows[k]
        if max(a[5]) < min(b[5]) or max(b[5]) < min(a[5]):
            told += 1
            same = (a[1] < b[1]) == (a[2] < b[2])
            agree += same
            if not same:
                print(f"  ORDER DIFFERS: {a[0]} vs {b[0]}")
        else:
            ties.append(f"{a[0]}~{b[0]}")
print(f"pairs the real runs tell apart: {told}; sim orders {agree} of them the same way"
      + (f"; ties within the run-to-run spread: {', '.join(ties)}" if ties else ""))
print(f"worst |error| {100 * max(abs(r[3]) for r in rows):.2f}%; calibration and validation took {elapsed:.0f} s")
PY
