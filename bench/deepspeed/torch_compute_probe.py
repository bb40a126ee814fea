#!/usr/bin/env python3
"""The compute of a scenario's model as PyTorch runs it, as trace records `tierflow calibrate` fits.

`tierflow probe compute` times tierflow's own CPU kernels; DeepSpeed drives PyTorch's. To predict
DeepSpeed's iteration, the profile's compute side must be PyTorch's: this script times the Hugging
Face LlamaForCausalLM of the scenario (built as bench/train_peers.py builds it: fp32, each decoder
layer recomputed in the backward when the scenario checkpoints activations) for one forward and
one backward of the whole model at each sequence length tierflow's compute probe uses, and writes
one record per pass in the records' format: the FLOPs, bytes and task count are those of
tierflow's own probe records of the same pass summed over its layers (what the simulator charges
the schedule's compute tasks), the time is PyTorch's. Its records replace `probe all`'s
compute.jsonl; the disk, copy, optimizer and memory records stay tierflow's. Plain PyTorch's
kernels can beat the `cpu-host` preset's peak_flops (calibrate refused an efficiency of 1.35 on
the 2-core host, naming peak_flops): calibrate such records with a --base that states the CPU's
real peak.

With --deepspeed the passes run under a DeepSpeed ZeRO-3 engine of one rank with nothing
offloaded (its CPU accelerator, gloo), in --precision (fp32, or bf16 as the exported config):
the compute as DeepSpeed runs it, its module hooks and its own linear autograd function
included. The backward is the engine's backward less its epilogue (the gradient bucket's
reduce-scatter and partitioning, which the plan's reduce-scatter, d2h and write tasks carry).

With --collectives FILE it also times DeepSpeed's one-rank gradient reduce-scatter as DeepSpeed
calls it (deepspeed.runtime.comm.coalesced_collectives.reduce_scatter_coalesced over gloo, world
size 1, on a list of bf16 tensors of the sizes of the model's weights, 16 MiB to 256 MiB in all):
one record per call, op reducescatter, threads = ranks = 1, from which calibrate fits
interconnect.local_bw (the copy a one-rank collective still makes).

  torch_compute_probe.py --tierflow build/cli/tierflow --scenario scenarios/small-cpu.yaml
                         --out DIR/compute.jsonl [--deepspeed [--precision bf16]]
                         [--collectives DIR/collective.jsonl] [--reps 3] [--threads 2]
Run with the bench's virtual environment (bench/train_peers.sh makes it).
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import train_peers  # noqa: E402


def tierflow_passes(tierflow, scenario, threads, max_seq=None):
    """tierflow's compute probe of the scenario (up to sequence max_seq when given): per (sequence
    length, phase) the sums of its layer records' flops, bytes and tasks."""
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "compute.jsonl")
        sets = ["--set", f"training.sequence_length={max_seq}", "--set", f"model.max_seq={max_seq}"] if max_seq else []
        subprocess.run([tierflow, "probe", "compute", scenario, "--reps", "1", "--threads", str(threads), "--trace", trace]
                       + sets, check=True, capture_output=True)
        sums = collections.defaultdict(lambda: {"flops": 0.0, "bytes": 0, "tasks": 0, "layers": set()})
        for line in open(trace):
            r = json.loads(line)
            if r["iteration"] != 0:
                continue
            seq = int(r["task"].rsplit(".s", 1)[1])
            s = sums[(seq, r["phase"])]
            if r["layer"] in s["layers"]:
                continue
            s["layers"].add(r["layer"])
            s["flops"] += r["flops"]
            s["bytes"] += r["bytes"]
            s["tasks"] += r.get("tasks", 1) or 1
    return sums


def one_rank_deepspeed():
    """DeepSpeed on its CPU accelerator as one rank over gloo (as fidelity.py runs it)."""
    for k, v in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"),
                 ("MASTER_PORT", str(29500 + os.getpid() % 1000))):
        os.environ.setdefault(k, v)
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed
    deepspeed.init_distributed(dist_backend="gloo")
    return deepspeed


def deepspeed_engine(net, precision):
    """A ZeRO-3 engine of one rank with nothing offloaded: the passes with DeepSpeed's hooks, and
    a timer around its backward's epilogue (stage3.py independent_gradient_partition_epilogue)."""
    deepspeed = one_rank_deepspeed()
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "steps_per_print": 1 << 30,
              "zero_optimization": {"stage": 3}, "bf16": {"enabled": precision == "bf16"},
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-6}}}
    engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=config)
    epilogue = {"s": 0.0}
    inner = engine.optimizer.independent_gradient_partition_epilogue

    def timed():
        t = time.perf_counter()
        try:
            return inner()
        finally:
            epilogue["s"] += time.perf_counter() - t
    engine.optimizer.independent_gradient_partition_epilogue = timed
    return engine, epilogue


def collective_records(model, reps):
    """DeepSpeed's reduce-scatter of one rank (gloo) over buckets of the model's weight shapes."""
    import torch
    one_rank_deepspeed()
    from deepspeed.runtime.comm.coalesced_collectives import reduce_scatter_coalesced
    h, f, kv = model["hidden"], model["ffn"], model["kv_heads"] * model["head_dim"]
    shapes = [(h, h), (kv, h), (kv, h), (h, h)] + [(f, h)] * 3  # one decoder layer's weights: q, k, v, o, the MLP
    records = []
    for mib in (16, 64, 256):
        tensors, total = [], 0
        while total < mib << 20:
            shape = shapes[len(tensors) % len(shapes)]
            tensors.append(torch.randn(shape, dtype=torch.bfloat16))
            total += tensors[-1].numel() * 2
        for rep in range(-1, reps):
            t0 = time.perf_counter()
            reduce_scatter_coalesced(tensors, None)
            t1 = time.perf_counter()
            if rep < 0:
                continue
            records.append({"iteration": rep, "task": f"probe.collective.torch.rs{mib}MiB", "op": "reducescatter",
                            "resource": "dp.comm", "layer": -1, "phase": "backward", "bytes": total, "flops": 0,
                            "start_s": t0, "end_s": t1, "source": "probe", "threads": 1, "tasks": len(tensors)})
            print(f"reduce-scatter of one rank, {total / 2**20:.0f} MiB in {len(tensors)} tensors: {1000 * (t1 - t0):.1f} ms",
                  flush=True)
    return records


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tierflow", default=os.path.join(os.path.dirname(HERE), "..", "build", "cli", "tierflow"))
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--out", required=True, help="trace records (JSON Lines) to write")
    ap.add_argument("--deepspeed", action="store_true", help="the passes under a DeepSpeed ZeRO-3 engine (nothing offloaded)")
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16"), help="with --deepspeed: the engine's precision")
    ap.add_argument("--collectives", help="also time DeepSpeed's one-rank reduce-scatter; records (JSON Lines) here")
    ap.add_argument("--max-seq", type=int, help="also probe this sequence length and its two halvings (more points for the fit)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    import torch
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model, _, checkpointing = train_peers.model_of(args.tierflow, args.scenario)
    passes = tierflow_passes(args.tierflow, args.scenario, args.threads)
    if args.max_seq:  # the probe's three longer sequences too (it halves the longest twice)
        passes.update(tierflow_passes(args.tierflow, args.scenario, args.threads, args.max_seq))
        model["max_seq"] = max(model["max_seq"], args.max_seq)
    net = train_peers.hf_model(model, checkpointing)
    engine, epilogue = deepspeed_engine(net, args.precision) if args.deepspeed else (None, None)
    kind = f"deepspeed.{args.precision}" if args.deepspeed else "torch"
    records = []
    for seq in sorted({s for s, _ in passes}):
        inputs = torch.randint(0, model["vocab"], (1, seq))
        targets = torch.randint(0, model["vocab"], (1, seq))
        for rep in range(-1, args.reps):  # rep -1 warms up
            t0 = time.perf_counter()
            loss = train_peers.loss_of(engine or net, inputs, targets)
            t1 = time.perf_counter()
            if engine:
                epilogue["s"] = 0.0
                engine.backward(loss)
                t2 = time.perf_counter() - epilogue["s"]  # the epilogue is the plan's reduce-scatter and copies
                engine.step()
            else:
                loss.backward()
                t2 = time.perf_counter()
                net.zero_grad(set_to_none=True)
            if rep < 0:
                continue
            for phase, start, end in (("forward", t0, t1), ("backward", t1, t2)):
                s = passes[(seq, phase)]
                records.append({"iteration": rep, "task": f"probe.compute.{kind}.b1.s{seq}", "op": "compute",
                                "resource": "gpu0.compute", "layer": -1, "phase": phase, "bytes": s["bytes"],
                                "flops": s["flops"], "start_s": start, "end_s": end, "source": "probe",
                                "threads": args.threads, "tasks": s["tasks"]})
            print(f"s{seq} rep {rep}: forward {1000 * (t1 - t0):.1f} ms, backward {1000 * (t2 - t1):.1f} ms", flush=True)
    with open(args.out, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    print(f"{len(records)} records -> {args.out}")
    if args.collectives:
        coll = collective_records(model, args.reps)
        with open(args.collectives, "w") as f:
            for r in coll:
                f.write(json.dumps(r) + "\n")
        print(f"{len(coll)} records -> {args.collectives}")


if __name__ == "__main__":
    sys.exit(main())
