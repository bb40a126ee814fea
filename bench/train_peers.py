#!/usr/bin/env python3
"""tierflow's training against PyTorch and DeepSpeed on the same host, model and data.

Systems (each a fresh process per run; rounds interleave them A B C A B C ...):
  pytorch      Hugging Face LlamaForCausalLM in fp32, torch.optim.AdamW, everything in memory;
               each decoder layer recomputed in the backward when the scenario checkpoints
               activations (training.activation_checkpointing), as every system here then does
  pytorch-no-ckpt  the same without recomputation, whatever the scenario says (PyTorch at its
               fastest, with every layer's activations kept)
  deepspeed    the same model under DeepSpeed ZeRO-3 with both offloads on NVMe (its CPU
               accelerator; the config is `tierflow deepspeed export` of the scenario's
               zero-infinity plan, so both run the same knobs, bf16 included)
  deepspeed-fp32  the same with bf16 off: PyTorch's bf16 matrix products have no fast path on a
               CPU without AVX-512 BF16 or AMX, so on such a host this is DeepSpeed at its fastest
  in-memory    tierflow run --in-memory (the reference loop, no schedule)
  zero-infinity  tierflow run with the scenario's zero-infinity schedule
  tuned        tierflow run with the schedule `tierflow tune` found for the scenario
  overlapped   tierflow run with the tierflow policy keeping the optimizer states on the disk: the
               update overlapped with backward, the states read ahead, the bf16 parameters in
               (emulated) GPU memory, one disk, the scenario's sub_group_size (an SSD-offloaded
               schedule for a CPU-only host, where `tuned` keeps every state in memory)

Each run trains ITERATIONS iterations of one micro-batch of SEQ byte tokens of the corpus and
reports its steady-state iteration time as tierflow's iteration_s defines it (docs/trace-format.md:
the mean of the iterations that are neither the first nor the last); the table gives each system's median over rounds and its ratio to
the first system named in --ratio-to. PyTorch and DeepSpeed take their own initial weights and
batches (the same shapes, the same corpus): their loss curves are printed beside tierflow's to
show that each trains the model, not to match them bit for bit.

With in-memory in the systems, each offloaded tierflow run is set against its resource lower
bound: the busier of the CPU (the in-memory run of the same round: the same math on the same
cores, no I/O) and the disk (the bytes the run's records read and write per steady-state
iteration, reads and writes not overlapping, each at the best rate the disk showed: the best
sequential rate `tierflow probe disk` measures in the run's directory just before and just after
it, or any of the run's own tasks of 16 MiB or more, whichever is higher). This host's disk moves
by 4x over minutes, hence the probes around every run.

  train_peers.py --tierflow build/cli/tierflow --scenario scenarios/tiny-cpu.yaml --dir DIR
                 [--iterations 8] [--rounds 3] [--threads 2] [--systems a,b,...] [--json FILE]
Run through bench/train_peers.sh, which makes the virtual environment.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CORPUS = os.path.join(ROOT, "data", "corpus", "kjv-genesis.txt")


def model_of(tierflow, scenario):
    """The scenario's model as tierflow resolves it (its preset with the scenario's overrides:
    `tierflow model --file` of the scenario's model section), its sequence length and whether it
    checkpoints activations."""
    import yaml
    doc = yaml.safe_load(open(scenario))
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(doc["model"], f)
    try:
        out = subprocess.run([tierflow, "model", "--file", f.name, "--json"], check=True, capture_output=True,
                             text=True).stdout
    finally:
        os.unlink(f.name)
    training = doc.get("training", {})
    return (json.loads(out), int(training.get("sequence_length", 128)),
            bool(training.get("activation_checkpointing", False)))


# ---------------------------------------------------------------- workers (one run each) ------


def batches(seq, iterations, seed):
    """Random windows of seq + 1 bytes of the corpus: (inputs, targets) per iteration."""
    import torch
    data = torch.frombuffer(bytearray(open(CORPUS, "rb").read()), dtype=torch.uint8).long()
    g = torch.Generator().manual_seed(seed)
    for _ in range(iterations):
        start = int(torch.randint(0, data.numel() - seq - 1, (1,), generator=g))
        window = data[start:start + seq + 1]
        yield window[:-1].unsqueeze(0), window[1:].unsqueeze(0)


def hf_model(model, checkpointing, attention="eager", rope_theta=10000.0):
    """Hugging Face's Llama of `model`'s shape (tierflow's names: hidden, ffn, layers, heads,
    kv_heads, vocab, max_seq, tied_embeddings), in training mode. bench/gpu_torch_peer.py builds
    its GPU peer with it too (attention="sdpa")."""
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(hidden_size=model["hidden"], intermediate_size=model["ffn"],
                         num_hidden_layers=model["layers"], num_attention_heads=model["heads"],
                         num_key_value_heads=model["kv_heads"], vocab_size=model["vocab"],
                         max_position_embeddings=model["max_seq"], rms_norm_eps=1e-5,
                         rope_theta=rope_theta, tie_word_embeddings=model["tied_embeddings"],
                         attention_bias=False, mlp_bias=False, hidden_act="silu")
    config._attn_implementation = attention
    net = LlamaForCausalLM(config)
    if checkpointing:  # as the scenario trains: each decoder layer's forward recomputed in the backward
        net.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    net.train()
    return net


def loss_of(net, inputs, targets):
    import torch
    logits = net(input_ids=inputs).logits
    return torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))


def worker_pytorch(args, model):
    import torch
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    net = hf_model(model, args.checkpointing and args.system != "pytorch-no-ckpt")
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    times, losses = [], []
    for inputs, targets in batches(args.seq, args.iterations, 0):
        t0 = time.perf_counter()
        loss = loss_of(net, inputs, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
        losses.append(float(loss))
    return times, losses


def worker_deepspeed(args, model):
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    for k, v in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"),
                 ("MASTER_PORT", str(29500 + os.getpid() % 1000))):
        os.environ.setdefault(k, v)
    import torch
    import deepspeed
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    config = json.load(open(args.ds_config))
    config["optimizer"] = {"type": "AdamW", "params": {"lr": args.lr, "betas": [0.9, 0.999], "eps": 1e-8,
                                                        "weight_decay": 0.0}}
    config["steps_per_print"] = 1 << 30
    config["wall_clock_breakdown"] = False
    if args.system == "deepspeed-fp32":
        config["bf16"] = {"enabled": False}
    deepspeed.init_distributed(dist_backend="gloo")
    # Built whole and partitioned by initialize(): zero.Init's patched tensor constructors trip
    # torch 2.15's dynamo polyfills (a signature mismatch), and the bench's models fit in memory.
    net = hf_model(model, args.checkpointing)
    engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=config)
    times, losses = [], []
    for inputs, targets in batches(args.seq, args.iterations, 0):
        t0 = time.perf_counter()
        loss = loss_of(engine, inputs, targets)
        engine.backward(loss)
        engine.step()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss))
    return times, losses


def worker(args):
    model = json.loads(args.model_json)
    times, losses = (worker_pytorch if args.system.startswith("pytorch") else worker_deepspeed)(args, model)
    steady = times[1:-1] if len(times) >= 3 else times  # tierflow's steady state: not the first, not the last
    print(json.dumps({"iteration_s": statistics.mean(steady), "times": times, "loss": losses}))


# ---------------------------------------------------------------- driver ----------------------


def disk_peaks(args, disk):
    """The disk's best sequential read and write rates now (bytes/s), by `tierflow probe disk` in
    the run's own directory: 1 and 4 MiB requests at queue depths 8 and 32, the best of each op."""
    out = subprocess.run([args.tierflow, "probe", "disk", "--dir", disk, "--sizes", "1MiB,4MiB", "--qd", "8,32",
                          "--ops", "read,write", "--devices", "1", "--file-size", "1GiB", "--duration", "1",
                          "--warmup", "0.2", "--reps", "1", "--json"], check=True, capture_output=True, text=True).stdout
    best = {}
    for r in json.loads(out)["results"]:
        best[r["op"]] = max(best.get(r["op"], 0.0), r["bytes_per_s"])
    return best


def disk_bytes(records, iterations):
    """Bytes read and written per steady-state iteration (neither the first nor the last), over
    every disk directory of the run (they lie on one device in this bench), and the best rate
    any of the run's read and write tasks of 16 MiB or more reached."""
    per, best = {}, {"read": 0.0, "write": 0.0}
    with open(records) as f:
        for line in f:
            r = json.loads(line)
            if r.get("op") in ("read", "write"):
                it = per.setdefault(r["iteration"], {"read": 0, "write": 0})
                it[r["op"]] += r.get("bytes", 0)
                took = r["end_s"] - r["start_s"]
                if r.get("bytes", 0) >= 16 << 20 and took > 0:
                    best[r["op"]] = max(best[r["op"]], r["bytes"] / took)
    steady = [per.get(i, {"read": 0, "write": 0}) for i in range(1, iterations - 1)] or list(per.values())
    return {op: statistics.mean(x[op] for x in steady) if steady else 0 for op in ("read", "write")}, best


def overlapped_policy(scenario):
    """The `overlapped` system's policy section: tierflow with the states on one disk, the update
    overlapped with backward and the states read ahead, at the scenario's sub_group_size."""
    import yaml
    policy = yaml.safe_load(open(scenario)).get("policy", {})
    knobs = {"name": "tierflow", "overlap_optimizer": "true", "read_ahead": "true", "offload_param": "none",
             "disks": "1"}
    if "sub_group_size" in policy:
        knobs["sub_group_size"] = str(policy["sub_group_size"])
    return "policy={" + ", ".join(f"{k}: {v}" for k, v in knobs.items()) + "}"


def run_tierflow(args, system, target, disk):
    cmd = [args.tierflow, "run", target, "-n", str(args.iterations), "--threads", str(args.threads),
           "--lr", str(args.lr), "--data", CORPUS, "--json"]
    records = os.path.join(disk, "records.jsonl")
    if system == "overlapped":
        cmd += ["--set", overlapped_policy(args.scenario)]
    if system == "in-memory":
        cmd.append("--in-memory")
    else:
        cmd += ["--disk-root", os.path.join(disk, "run"), "--records", records]
        os.makedirs(os.path.join(disk, "run"), exist_ok=True)
    peaks = disk_peaks(args, disk) if system != "in-memory" else None
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    res = {"iteration_s": r["iteration_s"], "loss": r["loss"]}
    if peaks is not None:
        after = disk_peaks(args, disk)
        moved, seen = disk_bytes(records, args.iterations)
        peaks = {op: max(peaks.get(op, 0.0), after.get(op, 0.0), seen[op]) for op in ("read", "write")}
        res["disk_bytes"] = moved
        res["disk_peak_bytes_per_s"] = peaks
        # Reads and writes not overlapping, each at the best rate this disk showed around and in
        # the run: the probes just before and after it, and its own tasks.
        res["disk_bound_s"] = sum(moved[op] / peaks[op] for op in ("read", "write") if moved[op] > 0)
    return res


def run_python(args, system, model, ds_config):
    cmd = [sys.executable, __file__, "--worker", system, "--model-json", json.dumps(model), "--seq", str(args.seq),
           "--iterations", str(args.iterations), "--threads", str(args.threads), "--lr", str(args.lr),
           "--checkpointing", str(int(args.checkpointing))]
    if ds_config:
        cmd += ["--ds-config", ds_config]
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS=str(args.threads))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"train_peers: {system} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", choices=["pytorch", "pytorch-no-ckpt", "deepspeed", "deepspeed-fp32"], help=argparse.SUPPRESS)
    ap.add_argument("--model-json", help=argparse.SUPPRESS)
    ap.add_argument("--ds-config", help=argparse.SUPPRESS)
    ap.add_argument("--seq", type=int, default=128, help=argparse.SUPPRESS)
    ap.add_argument("--checkpointing", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--tierflow", default=os.path.join(ROOT, "build", "cli", "tierflow"))
    ap.add_argument("--scenario", default=os.path.join(ROOT, "scenarios", "tiny-cpu.yaml"))
    ap.add_argument("--dir", help="scratch directory for the disks (default: a temporary one)")
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--systems", default="pytorch,pytorch-no-ckpt,deepspeed,deepspeed-fp32,in-memory,zero-infinity,tuned,overlapped")
    ap.add_argument("--ratio-to", default="deepspeed,deepspeed-fp32,pytorch")
    ap.add_argument("--json", help="write every run's figures here")
    args = ap.parse_args()
    if args.worker:
        args.system = args.worker
        return worker(args)

    systems = args.systems.split(",")
    known = ("pytorch", "pytorch-no-ckpt", "deepspeed", "deepspeed-fp32", "in-memory", "zero-infinity", "tuned",
             "overlapped")
    for s in systems:
        if s not in known:
            raise SystemExit(f"train_peers: --systems: unknown system '{s}' (known: {', '.join(known)})")
    work = args.dir or tempfile.mkdtemp(prefix="tierflow-peers-")
    os.makedirs(work, exist_ok=True)
    model, args.seq, args.checkpointing = model_of(args.tierflow, args.scenario)
    ds_config = None
    if "deepspeed" in systems or "deepspeed-fp32" in systems:
        nvme = os.path.join(work, "deepspeed-nvme")
        os.makedirs(nvme, exist_ok=True)
        ds_config = os.path.join(work, "ds_config.json")
        subprocess.run([args.tierflow, "deepspeed", "export", args.scenario, "--nvme-path", nvme, "-o", ds_config],
                       check=True, capture_output=True)
    tuned = None
    if "tuned" in systems:
        tuned = os.path.join(work, "tuned.json")
        print(f"tuning {args.scenario} ...", flush=True)
        subprocess.run([args.tierflow, "tune", args.scenario, "-o", tuned], check=True, capture_output=True)
    runs = {s: [] for s in systems}
    for r in range(args.rounds):
        for s in systems:
            disk = os.path.join(work, "disks-" + s)
            os.makedirs(disk, exist_ok=True)
            if s in ("pytorch", "pytorch-no-ckpt", "deepspeed", "deepspeed-fp32"):
                res = run_python(args, s, model, ds_config)
            else:
                res = run_tierflow(args, s, tuned if s == "tuned" else args.scenario, disk)
            runs[s].append(res)
            print(f"round {r + 1}/{args.rounds}  {s:<14} {1000 * res['iteration_s']:9.1f} ms/iteration", flush=True)
    med = {s: statistics.median(x["iteration_s"] for x in runs[s]) for s in systems}
    # Each offloaded run's resource lower bound: the busier of the CPU (the in-memory run of the same
    # round: the same math with no I/O on the same cores) and the disk (its bytes at the probed peaks).
    bounds = {}
    if "in-memory" in systems:
        for s in ("zero-infinity", "tuned", "overlapped"):
            if s not in systems:
                continue
            ratios = []
            for run, ref in zip(runs[s], runs["in-memory"]):
                run["cpu_bound_s"] = ref["iteration_s"]
                run["bound_s"] = max(ref["iteration_s"], run.get("disk_bound_s", 0.0))
                ratios.append(run["iteration_s"] / run["bound_s"])
            bounds[s] = statistics.median(ratios)
    refs = [s for s in args.ratio_to.split(",") if s in med]
    name = os.path.basename(args.scenario)
    print(f"\n{name}: {args.iterations} iterations, median over {args.rounds} interleaved rounds, "
          f"{args.threads} threads")
    print(f"{'system':<16}{'ms/iteration':>14}" + "".join(f"{'vs ' + r:>16}" for r in refs)
          + "   loss first -> last")
    for s in systems:
        loss = runs[s][0]["loss"] or []
        curve = f"{loss[0]:.3f} -> {loss[-1]:.3f}" if isinstance(loss, list) and loss else ""
        print(f"{s:<16}{1000 * med[s]:>14.1f}" + "".join(f"{med[s] / med[r]:>15.3f}x" for r in refs) + f"   {curve}")
    for s, ratio in bounds.items():
        last = runs[s][-1]
        moved = last.get("disk_bytes", {"read": 0, "write": 0})
        print(f"{s}: {ratio:.2f}x its resource lower bound (median over rounds; last round: cpu "
              f"{1000 * last['cpu_bound_s']:.1f} ms, disk {1000 * last.get('disk_bound_s', 0.0):.1f} ms for "
              f"{moved['read'] / 1e6:.0f} MB read + {moved['write'] / 1e6:.0f} MB written per iteration)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"scenario": args.scenario, "iterations": args.iterations, "threads": args.threads,
                       "median_s": med, "bound_ratio": bounds, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
