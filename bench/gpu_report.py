#!/usr/bin/env python3
"""The GPU issue's measurements, from what tests/gpu/run.sh leaves in OUT (no GPU needed to read them).

  GEMM-heavy steps vs cuBLAS   a decoder layer's step (probe.compute.*, through the run's compute
                               device) against cuBLAS alone on that layer's projections
                               (probe.gpu.linear_*: cublasGemmEx), both FLOP rates at the same shape
                               (tierflow-gpu-probe --seq = the scenario's sequence); a backward
                               step also recomputes its forward, which its FLOPs (the schedule's)
                               leave out
  copies vs pinned bandwidth   the 1B run's h2d and d2h tasks (the offloaded run's, else the tuned
                               run's): each one's rate (bytes / duration)
                               against the probed pinned copy rate at its bytes (interpolated in
                               log(size) between the probed sizes); the median of those ratios, and the tasks' median rate; the
                               same of each copy's GPU-side span (device_start_s..device_end_s:
                               what the copy engine took, as the probe times it with events), and
                               the median host time around it (the task's dispatch, launch and
                               completion: duration minus span), before the span and after it
  iteration vs lower bound     the 1B run's steady-state iteration time against its resource lower
                               bound: per iteration, the busiest of nvme (reads and writes at the
                               probed best rates, not overlapping), PCIe (h2d, d2h at the probed
                               pinned rates) and GPU compute (every layer step at its probed time)
  MFU                          3 x the forward FLOPs of an iteration / (iteration time x peak), for
                               the offloaded run and the in-GPU-memory run (--in-memory), each at
                               its steady-state iteration time (docs/trace-format.md)
  attention                    the fused attention kernels' rates (probe.gpu.attention_*, FLOPs in
                               FlashAttention's causal convention) at each probed sequence
                               (OUT/probes and OUT/probes-s<SEQ>)
  tuned vs prediction          the TUNED schedule's steady-state iteration (tuned-1b.records.jsonl)
                               against the simulator's on the calibrated profile
                               (OUT/tuned-prediction.json: `tierflow sim --json`'s iteration_s);
                               the same of the run with the update on the GPU (gpuopt-1b.records.jsonl,
                               OUT/gpuopt-prediction.json), and each one's MFU
  pytorch in GPU memory        bench/gpu_torch_peer.py's steady-state iteration (OUT/torch-1b*.json)
                               and its MFU with the tierflow runs' FLOP count, the ceiling

Usage: bench/gpu_report.py OUT [--peak FLOP/s] [--json]
The peak defaults to the GPU's dense bf16 rate in OUT/base.yaml (`peak_flops`, from its
datasheet: tests/gpu/run.sh's write_base, the one table of them). Every figure says which files it came from; a missing input leaves its figure
out with the reason.
"""
import argparse
import json
import math
import os
import re
import statistics
import sys
from collections import defaultdict

UNITS = {"FLOP/s": 1.0, "GFLOP/s": 1e9, "TFLOP/s": 1e12, "PFLOP/s": 1e15}


def records(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def dur(r):
    return r["end_s"] - r["start_s"]


def median_by(rs, key):
    groups = defaultdict(list)
    for r in rs:
        groups[key(r)].append(r)
    return {k: (v[0], statistics.median(dur(r) for r in v)) for k, v in groups.items()}


def longest_sequence(steps):
    """The longest sequence among compute-probe task names (probe.compute.<model>.b<B>.s<S>), or None."""
    seqs = [int(m.group(1)) for m in (re.search(r"\.s(\d+)$", r["task"]) for r in steps) if m]
    return max(seqs) if seqs else None


def gemm_vs_cublas(out, phase):
    ops = records(os.path.join(out, "probes", "ops.jsonl"))
    compute = records(os.path.join(out, "calib", "compute.jsonl"))
    if ops is None or compute is None:
        return None, "needs probes/ops.jsonl and calib/compute.jsonl"
    prefix = "probe.gpu.linear_fwd." if phase == "forward" else "probe.gpu.linear_bwd."
    gemms = median_by([r for r in ops if r["task"].startswith(prefix) and not r["task"].endswith("lm_head")],
                      lambda r: r["task"])
    if not gemms:
        return None, f"no {prefix}* records"
    cublas = sum(r["flops"] for r, _ in gemms.values()) / sum(t for _, t in gemms.values())
    # The decoder layers (not the embedding or the head) at the longest probed sequence.
    steps = [r for r in compute if r["phase"] == phase and r["task"].startswith("probe.compute.")]
    seq = longest_sequence(steps)
    if seq is None:
        return None, "no probe.compute.<model>.b<B>.s<S> records"
    layers = [r["layer"] for r in steps]
    first, last = min(layers), max(layers)
    decoder = [r for r in steps if r["task"].endswith(f".s{seq}") and first < r["layer"] < last]
    per_layer = median_by(decoder, lambda r: r["layer"])
    rate = sum(r["flops"] for r, _ in per_layer.values()) / sum(t for _, t in per_layer.values())
    return {"step_tflops": rate / 1e12, "cublas_tflops": cublas / 1e12, "ratio": rate / cublas, "seq": seq}, None


def pinned_rates(out):
    """{op: {bytes: median rate}} of the pinned copy probe."""
    copies = records(os.path.join(out, "calib", "copy.jsonl")) or records(os.path.join(out, "probes", "copies.jsonl"))
    if copies is None:
        return None
    rate = defaultdict(dict)
    for (op, size), (_, t) in median_by([r for r in copies if r["task"] == "probe.copy.pinned"],
                                        lambda r: (r["op"], r["bytes"])).items():
        rate[op][size] = size / t
    return rate or None


def at_size(rates, size):
    """The probed rate at `size`: between two probed sizes, interpolated in log(size); beyond
    them, the nearest's."""
    sizes = sorted(rates)
    if size <= sizes[0]:
        return rates[sizes[0]]
    if size >= sizes[-1]:
        return rates[sizes[-1]]
    hi = next(s for s in sizes if s >= size)
    lo = max(s for s in sizes if s <= size)
    if hi == lo:
        return rates[lo]
    w = math.log(size / lo) / math.log(hi / lo)
    return rates[lo] + w * (rates[hi] - rates[lo])


def iteration_times(rs):
    """The steady-state mean iteration time of docs/trace-format.md (traces::SteadyIterations):
    the mean period end(i) - end(i - 1) over all iterations but the first and, from three on, the
    last; end - start of a single one."""
    ends, starts = defaultdict(float), {}
    for r in rs:
        ends[r["iteration"]] = max(ends[r["iteration"]], r["end_s"])
        starts[r["iteration"]] = min(starts.get(r["iteration"], r["start_s"]), r["start_s"])
    its = sorted(ends)
    if not its:
        return None
    if len(its) == 1:
        return ends[its[0]] - starts[its[0]]
    first, end = 1, len(its) - 1 if len(its) >= 3 else len(its)
    return (ends[its[end - 1]] - ends[its[first - 1]]) / (end - first)


def disk_rates(out):
    disk = records(os.path.join(out, "calib", "disk.jsonl"))
    if disk is None:
        return None
    best = {}
    for r in disk:
        if r.get("threads", 1) != 1 or r["task"] not in ("probe.disk.read", "probe.disk.write") or dur(r) <= 0:
            continue
        op = r["op"]
        best[op] = max(best.get(op, 0), r["bytes"] / dur(r))
    return best


def compute_times(out):
    compute = records(os.path.join(out, "calib", "compute.jsonl"))
    if compute is None:
        return None
    steps = [r for r in compute if r["task"].startswith("probe.compute.")]
    seq = longest_sequence(steps)
    if seq is None:
        return None
    per = median_by([r for r in steps if r["task"].endswith(f".s{seq}")], lambda r: (r["layer"], r["phase"]))
    return sum(t for _, t in per.values())


def peak_of(out, given):
    if given:
        return given, "--peak"
    base = os.path.join(out, "base.yaml")
    if not os.path.exists(base):
        return None, "no OUT/base.yaml (tests/gpu/run.sh writes it for the GPUs it knows; give --peak)"
    text = open(base).read()
    m = re.search(r"^\s*peak_flops:\s*([0-9.eE+]+)\s*(\S+)", text, re.M)
    name = re.search(r"^\s*gpu:\s*\n\s*name:\s*(.+)$", text, re.M)
    if not m or m.group(2) not in UNITS:
        return None, "OUT/base.yaml has no peak_flops in FLOP/s, GFLOP/s, TFLOP/s or PFLOP/s (give --peak)"
    return float(m.group(1)) * UNITS[m.group(2)], name.group(1).strip() if name else "base.yaml"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--peak", type=float, help="the GPU's dense bf16 FLOP/s")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    report, missing = {}, {}
    for phase in ("forward", "backward"):
        fig, why = gemm_vs_cublas(a.out, phase)
        (report if fig else missing)[f"gemm_steps_vs_cublas_{phase}"] = fig or why

    for probes in sorted(d for d in os.listdir(a.out) if d == "probes" or d.startswith("probes-s")):
        ops = records(os.path.join(a.out, probes, "ops.jsonl")) or []
        for (task, _), (r, t) in median_by([r for r in ops if r["task"].startswith("probe.gpu.attention_")],
                                           lambda r: (r["task"], r["bytes"])).items():
            report[f"{task[len('probe.gpu.'):]}_{probes}"] = {"tflop_s": r["flops"] / t / 1e12, "ms": t * 1e3,
                                                             "from": f"{probes}/ops.jsonl"}

    # The TUNED schedule's run and the run with every optimizer state on the GPU (gpuopt), each
    # against the simulator's prediction of it where OUT/<name>-prediction.json holds one.
    tuned = records(os.path.join(a.out, "tuned-1b.records.jsonl"))
    gpuopt = records(os.path.join(a.out, "gpuopt-1b.records.jsonl"))
    predicted_runs = (("tuned", tuned), ("gpuopt", gpuopt))
    for name, rs in predicted_runs:
        prediction = os.path.join(a.out, f"{name}-prediction.json")
        if rs and os.path.exists(prediction):
            measured, predicted = iteration_times(rs), json.load(open(prediction))["iteration_s"]
            report[f"{name}_vs_prediction"] = {"iteration_s": measured, "predicted_s": predicted,
                                               "error": (measured - predicted) / predicted}
        elif os.path.exists(os.path.join(a.out, f"{name}-1b.log")):
            missing[f"{name}_vs_prediction"] = f"needs {name}-1b.records.jsonl and {name}-prediction.json"

    # MFU: 3 x the forward FLOPs of an iteration of the 1B schedule that ran (its last iteration's
    # compute records), the same count for every run of the same training.
    run = records(os.path.join(a.out, "finetune-1b.records.jsonl"))
    peak, device = peak_of(a.out, a.peak)
    fwd_run = run or tuned or gpuopt
    if fwd_run:
        last = max(r["iteration"] for r in fwd_run)
        fwd = sum(r["flops"] for r in fwd_run if r["iteration"] == last and r["op"] == "compute" and r["phase"] == "forward")
        for name in sorted(f for f in os.listdir(a.out) if f.startswith("torch-1b") and f.endswith(".json")):
            t = json.load(open(os.path.join(a.out, name)))
            fig = {"iteration_s": t["iteration_s"], "first_loss": t["losses"][0], "last_loss": t["losses"][-1],
                   "peak_gpu_gib": t["peak_gpu_bytes"] / 2**30}
            if peak:
                fig["mfu"] = 3 * fwd / (t["iteration_s"] * peak)
            report[name[:-len(".json")].replace("-", "_")] = fig
        log = os.path.join(a.out, "inmemory-1b.log")
        m = re.search(r"iteration time +([0-9.]+) (ms|s) \(steady state\)", open(log).read()) if os.path.exists(log) else None
        if peak and m:
            t = float(m.group(1)) * (1e-3 if m.group(2) == "ms" else 1)
            report["mfu_in_memory"] = {"mfu": 3 * fwd / (t * peak), "iteration_s": t, "peak": peak}
        for name, rs in predicted_runs:
            if peak and rs:
                t = iteration_times(rs)
                report[f"mfu_{name}"] = {"mfu": 3 * fwd / (t * peak), "iteration_s": t}
    pinned = pinned_rates(a.out)
    copied, copied_from = (run, "finetune-1b") if run else (tuned, "tuned-1b")  # the offloaded run's copies, else the tuned run's
    if copied is None or pinned is None:
        missing["copies_vs_pinned"] = "needs finetune-1b.records.jsonl (or tuned-1b's) and the pinned copy probe"
    else:
        for op in ("h2d", "d2h"):
            rs = [r for r in copied if r["op"] == op and dur(r) > 0 and r["bytes"] > 0]
            if rs and op in pinned:
                task = statistics.median(r["bytes"] / dur(r) for r in rs)
                ratio = statistics.median(r["bytes"] / dur(r) / at_size(pinned[op], r["bytes"]) for r in rs)
                fig = {"ratio": ratio, "task_gb_s": task / 1e9, "from": copied_from,
                       "median_task_bytes": statistics.median(r["bytes"] for r in rs),
                       "pinned_gb_s_largest": pinned[op][max(pinned[op])] / 1e9, "tasks": len(rs)}
                spans = [r for r in rs if r.get("device_end_s", 0) > r.get("device_start_s", 0) > 0]
                if spans:
                    span = lambda r: r["device_end_s"] - r["device_start_s"]
                    fig["gpu_span_ratio"] = statistics.median(r["bytes"] / span(r) / at_size(pinned[op], r["bytes"]) for r in spans)
                    fig["gpu_span_gb_s"] = statistics.median(r["bytes"] / span(r) for r in spans) / 1e9
                    fig["host_overhead_us"] = statistics.median(dur(r) - span(r) for r in spans) * 1e6
                    # The host's part before the GPU's span (hand-over, launch) and after it (wake-up, completion).
                    fig["host_before_us"] = statistics.median(r["device_start_s"] - r["start_s"] for r in spans) * 1e6
                    fig["host_after_us"] = statistics.median(r["end_s"] - r["device_end_s"] for r in spans) * 1e6
                report[f"copies_vs_pinned_{op}"] = fig

    if run is not None:
        iteration = iteration_times(run)
        its = sorted({r["iteration"] for r in run})
        one = [r for r in run if r["iteration"] == its[-1]]
        nvme = defaultdict(lambda: defaultdict(int))
        for r in one:
            if r["op"] in ("read", "write"):
                nvme[r["resource"].split(".")[0]][r["op"]] += r["bytes"]
        disk, compute = disk_rates(a.out), compute_times(a.out)
        bound = {}
        if disk:
            for dev, b in nvme.items():
                bound[dev] = sum(b[op] / disk[op] for op in b if op in disk)
        if pinned:  # every copy at the probed pinned rate of its size
            bound["pcie"] = sum(r["bytes"] / at_size(pinned[r["op"]], r["bytes"]) for r in one
                                if r["op"] in ("h2d", "d2h") and r["bytes"] > 0 and r["op"] in pinned)
        if compute:
            bound["gpu0.compute"] = compute
        if bound:
            lb = max(bound.values())
            report["iteration_vs_lower_bound"] = {"iteration_s": iteration, "lower_bound_s": lb, "ratio": iteration / lb,
                                                  "bound_by": max(bound, key=bound.get),
                                                  "resources_s": dict(bound)}
        else:
            missing["iteration_vs_lower_bound"] = "needs calib/disk.jsonl, the pinned copy probe or probe.compute records"
        if peak:
            report["mfu_offloaded"] = {"mfu": 3 * fwd / (iteration * peak), "iteration_s": iteration, "peak": peak,
                                       "device": device}
        else:
            missing["mfu"] = device
    else:
        missing["iteration_vs_lower_bound"] = missing["mfu"] = "needs finetune-1b.records.jsonl"

    if a.json:
        print(json.dumps({"figures": report, "missing": missing}, indent=1))
        return 0
    for name, fig in report.items():
        shown = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in fig.items()
                          if not isinstance(v, dict))
        print(f"{name:<34} {shown}")
    for name, why in missing.items():
        print(f"{name:<34} not measured: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
