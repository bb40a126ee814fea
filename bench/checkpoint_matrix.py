#!/usr/bin/env python3
"""The checkpoint study's matrix on this host (docs/checkpoint-study.md).

Each row is `tierflow checkpoint bench` with one choice changed from the baseline (aggregated files,
small tensors coalesced into staging-sized requests, tensors 4 KiB-aligned, O_DIRECT, io_uring,
8 MiB requests, queue depth 16): aggregation off (file per tensor), no coalescing, packed tensors,
the page cache, POSIX I/O, request sizes, queue depths. The tensor set is the study's kind: per
rank, many small tensors of unaligned sizes and a few large ones (the default set), several ranks.
fio's sequential O_DIRECT write and read of the same bytes is the ceiling. Repetitions are
interleaved (every row once, then again), medians reported; `correct` is whether every load
verified every tensor's CRC-32C.

  bench/checkpoint_matrix.py [--dir DIR] [--reps 3] [--ranks 2] [--json FILE]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

from checkpoint_peers import run_fio

BASE = ["--strategy", "aggregated"]
ROWS = [
    ("baseline: aggregated, coalesced, 4 KiB-aligned, O_DIRECT, io_uring, 8 MiB x qd 16", []),
    ("aggregation off: a buffered file per tensor (torch.save-like)", ["--strategy", "file-per-tensor"]),
    ("no coalescing: a request per tensor, O_DIRECT", ["--no-coalesce"]),
    ("no coalescing, unaligned (packed), page cache", ["--no-coalesce", "--align", "1", "--buffered"]),
    ("tensors packed (64 B alignment), coalesced, O_DIRECT", ["--align", "64"]),
    ("page cache instead of O_DIRECT", ["--buffered"]),
    ("POSIX (pwrite/pread threads) instead of io_uring", ["--backend", "posix"]),
    ("POSIX and page cache", ["--backend", "posix", "--buffered"]),
    ("requests of 1 MiB", ["--request-size", "1MiB"]),
    ("requests of 128 KiB", ["--request-size", "128KiB"]),
    ("queue depth 1", ["--qd", "1"]),
    ("queue depth 4", ["--qd", "4"]),
    ("queue depth 64", ["--qd", "64"]),
]


def bench(tf, d, ranks, extra):
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    args = BASE + extra
    if "--strategy" in extra:
        args = extra
    cmd = [tf, "checkpoint", "bench", "--dir", d, "--ranks", str(ranks), "--reps", "1", "--json"] + args
    p = subprocess.run(cmd, capture_output=True, text=True)
    shutil.rmtree(d, ignore_errors=True)
    if p.returncode != 0:
        return {"error": p.stderr.strip()}
    return json.loads(p.stdout)[0]


def fio(d, ranks, per_rank):
    r = run_fio(ranks, per_rank, d)
    return {"write": r["bytes"] / r["write_s"], "read": r["bytes"] / r["read_s"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tierflow", default="build/cli/tierflow")
    ap.add_argument("--dir", default=".cache/checkpoint-matrix")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    d = os.path.join(a.dir, "m")
    sizes = json.loads(subprocess.run([a.tierflow, "checkpoint", "tensors", "--ranks", str(a.ranks), "--json"], check=True,
                                      capture_output=True, text=True).stdout)
    total = sum(e["size_bytes"] for e in sizes)
    print(f"# {len(sizes)} tensors, {total / 1e9:.2f} GB over {a.ranks} ranks; {a.reps} interleaved repetitions", file=sys.stderr)
    got = {i: [] for i in range(len(ROWS))}
    ceil = []
    for rep in range(a.reps):
        ceil.append(fio(d, a.ranks, -(-total // a.ranks)))
        for i, (name, extra) in enumerate(ROWS):
            r = bench(a.tierflow, d, a.ranks, extra)
            got[i].append(r)
            msg = r.get("error") or f"write {r['write_bytes_per_s'] / 1e9:.3f} read {r['read_bytes_per_s'] / 1e9:.3f} GB/s"
            print(f"rep {rep} row {i}: {msg}", file=sys.stderr, flush=True)
    fw = statistics.median(c["write"] for c in ceil)
    fr = statistics.median(c["read"] for c in ceil)
    print(f"| configuration | write GB/s | read GB/s | write ÷ fio | read ÷ fio | requests | direct | correct |")
    print(f"|---|---|---|---|---|---|---|---|")
    print(f"| fio sequential, O_DIRECT, io_uring, 8 MiB x qd 16 (reference) | {fw / 1e9:.3f} | {fr / 1e9:.3f} | 1.00 | 1.00 | - | yes | - |")
    summary = []
    for i, (name, extra) in enumerate(ROWS):
        rs = got[i]
        if any("error" in r for r in rs):
            print(f"| {name} | - | - | - | - | - | - | error: {rs[0].get('error', '')[:80]} |")
            continue
        w = statistics.median(r["write_bytes_per_s"] for r in rs)
        rd = statistics.median(r["read_bytes_per_s"] for r in rs)
        summary.append({"row": name, "flags": extra, "write_bytes_per_s": w, "read_bytes_per_s": rd, "runs": rs})
        print(f"| {name} | {w / 1e9:.3f} | {rd / 1e9:.3f} | {w / fw:.2f} | {rd / fr:.2f} | {rs[0].get('requests', '-')} | "
              f"{'yes' if rs[0]['direct'] else 'no'} | yes |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"tensors": len(sizes), "bytes": total, "ranks": a.ranks, "fio": ceil, "rows": summary}, f, indent=1)


if __name__ == "__main__":
    main()
