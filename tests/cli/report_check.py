#!/usr/bin/env python3
"""tierflow sim's report against its own trace records (docs/trace-format.md, "Report").

Recomputes from the records what the report's per_iteration rows say (each resource's busy time,
the union of its records' intervals, over the steady-state iterations, per iteration; each rank's
copies folded into one row with mean, min and max), and checks the setting and throughput keys
against the scenario. Exits non-zero naming the first figure that differs.
"""
import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ITERATIONS = 5  # SteadyIterations(5): the second to the fourth


def fold(name):
    parts = []
    for p in name.split("."):
        if re.fullmatch(r"gpu\d+", p):
            p = "gpu*"
        elif re.fullmatch(r"r\d+", p):
            p = "r*"
        parts.append(p)
    return ".".join(parts)


def union_length(intervals):
    total, end = 0.0, None
    start = None
    for s, e in sorted(intervals):
        if end is None or s > end:
            if end is not None:
                total += end - start
            start, end = s, e
        else:
            end = max(end, e)
    if end is not None:
        total += end - start
    return total


def close(a, b):
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b)) + 1e-12


def fail(message):
    print("report_check: " + message, file=sys.stderr)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tierflow", required=True)
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    records_path = work / "records.jsonl"
    run = subprocess.run([a.tierflow, "sim", a.scenario, "-n", str(ITERATIONS), "--json", "--records", str(records_path)],
                         capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        fail("sim failed: " + run.stderr)
    report = json.loads(run.stdout)
    records = [json.loads(line) for line in records_path.read_text().splitlines() if line.strip()]

    iterations = sorted({r["iteration"] for r in records})
    if len(iterations) != ITERATIONS:
        fail(f"expected {ITERATIONS} iterations in the records, found {len(iterations)}")
    steady = set(iterations[1:ITERATIONS - 1])
    per_resource = {}
    for r in records:
        if r["resource"] and r["iteration"] in steady:
            per_resource.setdefault(r["resource"], []).append((r["start_s"], r["end_s"]))
    rows = {}
    for name, intervals in per_resource.items():
        busy = union_length(intervals) / len(steady)
        rows.setdefault(fold(name), []).append(busy)
    got = {row["resource"]: row for row in report["per_iteration"]}
    if not set(rows) <= set(got):
        fail(f"rows {sorted(got)} lack some of the records' {sorted(rows)}")
    for name in set(got) - set(rows):  # a schedule's resource with no record in these iterations
        if got[name]["busy_s"] != 0:
            fail(f"{name}: busy {got[name]['busy_s']} without a record in the steady-state iterations")
    folded = 0
    for name, busy in rows.items():
        row = got[name]
        if row["count"] != len(busy):
            fail(f"{name}: count {row['count']}, the records have {len(busy)} resources")
        for key, want in (("busy_s", sum(busy) / len(busy)), ("busy_min_s", min(busy)), ("busy_max_s", max(busy))):
            if not close(row[key], want):
                fail(f"{name}: {key} {row[key]!r}, the records give {want!r}")
        folded += len(busy) > 1
    if folded == 0:
        fail("no row folds several ranks: the scenario should have several")

    setting, throughput = report["setting"], report["throughput"]
    batch = setting["micro_batch"] * setting["accumulation"] * setting["ranks"]
    if setting["global_batch"] != batch:
        fail(f"global_batch {setting['global_batch']} is not micro-batch x accumulation x ranks = {batch}")
    it = report["iteration_s"]
    if not close(throughput["samples_per_s"], batch / it):
        fail(f"samples_per_s {throughput['samples_per_s']} is not {batch} / {it}")
    if not close(throughput["tokens_per_s"], batch * setting["sequence_length"] / it):
        fail("tokens_per_s is not samples_per_s x sequence_length")
    if not 0 < throughput["mfu"] < 1:
        fail(f"mfu {throughput['mfu']} is not a fraction")

    text = subprocess.run([a.tierflow, "sim", a.scenario, "-n", str(ITERATIONS)], capture_output=True, text=True, timeout=300)
    if text.returncode != 0:
        fail("sim (text) failed: " + text.stderr)
    for want in ("gpu*.compute x%d" % setting["ranks"], "global batch %d sequences" % batch, "tokens/s", "MFU"):
        if want not in text.stdout:
            fail(f"the text report lacks {want!r}:\n{text.stdout}")
    print(f"report_check: {len(rows)} rows ({folded} folded over ranks) match the records")


if __name__ == "__main__":
    main()
