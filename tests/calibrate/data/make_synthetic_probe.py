#!/usr/bin/env python3
"""Writes synthetic_probe.jsonl: probe records of a made-up CPU host (the formulas of
docs/performance-models.md, known parameters below, deterministic +-2 % noise), for the CLI test
of `tierflow calibrate` against the cpu-host preset. Rerun it only to change the data:

    python3 tests/calibrate/data/make_synthetic_probe.py > tests/calibrate/data/synthetic_probe.jsonl
"""
import json

# The "true" host. cpu-host's fixed numbers: peak 160 GFLOP/s, 2 cores.
PEAK = 160e9
FWD_EFF, BWD_EFF, OVERHEAD, HBM = 0.12, 0.10, 50e-6, 8e9
READ_BW, READ_LAT, WRITE_BW, WRITE_LAT = 1.5e9, 120e-6, 0.9e9, 60e-6
H2D, D2H, COPY_LAT = 6e9, 5.5e9, 2e-6
MEMORY_BW, ADAM_PER_CORE, CONVERT_PER_CORE, CORES = 9e9, 120e6, 1.5e9, 2

state = 0x7469657266


def noise():
    """Uniform factor in [0.98, 1.02] from a 64-bit LCG."""
    global state
    state = (state * 6364136223846793005 + 1442695040888963407) % 2**64
    return 1 + 0.02 * (2 * (state >> 11) / 2**53 - 1)


t = 0.0
out = []


def record(task, op, resource, nbytes, seconds, phase="other", flops=0.0, block=0, qd=0, threads=0, iteration=0):
    global t
    r = {"iteration": iteration, "task": task, "op": op, "resource": resource, "layer": -1, "phase": phase,
         "bytes": int(nbytes), "flops": float(flops), "start_s": round(t, 9), "end_s": round(t + seconds, 9),
         "source": "probe"}
    if block:
        r["block_bytes"] = block
    if qd:
        r["queue_depth"] = qd
    if threads:
        r["threads"] = threads
    out.append(r)
    t += seconds + 1e-3


def littles(peak, lat, block, qd):
    return min(peak, qd * block / (lat + block / peak))


for op, peak, lat in (("read", READ_BW, READ_LAT), ("write", WRITE_BW, WRITE_LAT)):
    for block in (4096, 65536, 1 << 20, 4 << 20):
        for qd in (1, 4, 16):
            bw = littles(peak, lat, block, qd)
            record("probe.disk." + op, op, "nvme0." + op, bw * 1.0 * noise(), 1.0, block=block, qd=qd, threads=1)

for size in (4096, 65536, 1 << 20, 16 << 20, 64 << 20, 256 << 20):
    record("probe.copy.h2d", "h2d", "gpu0.h2d", size, (COPY_LAT + size / H2D) * noise())
    record("probe.copy.d2h", "d2h", "gpu0.d2h", size, (COPY_LAT + size / D2H) * noise())

flops = 1e6
while flops <= 1.1e10:
    for phase, eff, mult in (("forward", FWD_EFF, 1), ("backward", BWD_EFF, 2)):
        f = flops * mult
        seconds = max(f / (PEAK * eff), f / 20 / HBM) + OVERHEAD
        record("probe.compute.layer", "compute", "gpu0.compute", f / 20, seconds * noise(), phase=phase, flops=f)
    flops *= 10 ** 0.5
for size in (1 << 20, 8 << 20, 64 << 20):
    record("probe.compute.copy", "compute", "gpu0.compute", size, (size / HBM + OVERHEAD) * noise())

for size in (256 << 20, 512 << 20, 1 << 30):
    record("probe.memory.copy", "convert", "cpu.convert", size, size / MEMORY_BW * noise(), threads=CORES)
for elements in (1 << 20, 8 << 20, 32 << 20):
    for threads in (1, 2):
        rate = min(threads * ADAM_PER_CORE, MEMORY_BW / 28)
        record("probe.optimizer", "optimizer", "cpu.optimizer", 4 * elements, elements / rate * noise(), threads=threads)
for size in (16 << 20, 64 << 20, 256 << 20):
    for threads in (1, 2):
        rate = min(threads * CONVERT_PER_CORE, MEMORY_BW)
        record("probe.convert.bf16", "convert", "cpu.convert", size, size / rate * noise(), threads=threads)

for r in out:
    print(json.dumps(r, separators=(",", ":")))
