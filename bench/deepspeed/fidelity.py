#!/usr/bin/env python3
"""zero-infinity against DeepSpeed itself: the bytes each moves to and from the disk.

For a scenario and a list of knob settings, each setting:
  1. `tierflow plan SCENARIO --set ...`: the zero-infinity schedule; its read and write tasks'
     bytes are what tierflow moves per iteration (sim and run move exactly these);
  2. `tierflow deepspeed export` of that schedule: the same knobs as a DeepSpeed config;
  3. DeepSpeed ZeRO-3 with both offloads on NVMe (its CPU accelerator, one rank over gloo) trains
     the scenario's model (Hugging Face LlamaForCausalLM built from tierflow's shapes) for
     ITERATIONS iterations on the corpus, counting every byte its swappers hand to the aio handle
     (deepspeed.runtime.swap_tensor.utils.swap_in_tensors / swap_out_tensors, wrapped), and the
     process's block I/O (/proc/self/io) as a cross-check.
With --losses, the first setting also compares the loss curves: DeepSpeed's initial weights (the
Hugging Face model as built, saved to safetensors) are tierflow's too (`tierflow run --init`), and
DeepSpeed trains on tierflow's batches (its TokenLoader: windows of SEQ + 1 byte tokens, shuffled
by splitmix64 with the data seed, replayed here) with tierflow's AdamW (betas 0.9 and 0.95, eps
1e-8, no weight decay); DeepSpeed runs once in fp32 and once in bf16 (the exported config's,
bf16 parameters as tierflow's), and each curve is set against tierflow's run of the plan.
Steady state: the iterations but the first two (DeepSpeed creates Adam's moments at the first
step, so its first swap-in reads the master weights only) and the last. The table gives the
bytes read and written per iteration by each, and tierflow's error against DeepSpeed; and
DeepSpeed's iteration time with its three calls (forward, backward, step: its timers' phases)
beside `tierflow sim`'s prediction of the plan and its phases cut the same way (timer_phases),
on the scenario's hardware or a calibrated --profile.

  fidelity.py --tierflow build/cli/tierflow --scenario scenarios/tiny-cpu.yaml --dir DIR
              [--setting NAME:key=value,key=value ...] [--iterations 6] [--json FILE]
Run through bench/deepspeed/run.sh, which makes the virtual environment (bench/train_peers.sh's).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import train_peers  # noqa: E402  (the model, the corpus batches and the loss, shared with that bench)

DEFAULT_SETTINGS = ["defaults:", "no-param-offload:offload_param=none", "small-sub-groups:sub_group_size=100000",
                    "optimizer-buffers-8:optimizer_buffer_count=8", "params-on-nvme:max_in_cpu=0",
                    "params-on-nvme-no-reuse:max_in_cpu=0,max_reuse_distance=0"]


def proc_io():
    io = {}
    with open("/proc/self/io") as f:
        for line in f:
            k, v = line.split(":")
            io[k.strip()] = int(v)
    return io


def tierflow_batches(seq, iterations, batch=1, seed=1):
    """tierflow's TokenLoader (real/train/dataset.cc) replayed: the corpus's bytes as tokens, cut
    into (n - 1) // seq windows whose order a splitmix64-driven Fisher-Yates shuffles per epoch."""
    import torch
    tokens = open(train_peers.CORPUS, "rb").read()
    windows = (len(tokens) - 1) // seq
    mask = (1 << 64) - 1
    order, epoch, cursor = [], 0, 0

    def shuffle(epoch):
        order = list(range(windows))
        state = (seed ^ ((0x9e3779b97f4a7c15 * (epoch + 1)) & mask)) & mask
        for i in range(windows, 1, -1):
            state = (state + 0x9e3779b97f4a7c15) & mask
            z = state
            z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & mask
            z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & mask
            z ^= z >> 31
            j = z % i
            order[i - 1], order[j] = order[j], order[i - 1]
        return order

    order = shuffle(0)
    for _ in range(iterations):
        if cursor + batch > windows:
            epoch += 1
            order, cursor = shuffle(epoch), 0
        rows = [order[cursor + r] * seq for r in range(batch)]
        cursor += batch
        x = torch.tensor([list(tokens[s:s + seq]) for s in rows], dtype=torch.long)
        y = torch.tensor([list(tokens[s + 1:s + seq + 1]) for s in rows], dtype=torch.long)
        yield x, y


def worker(args):
    """One DeepSpeed run: per iteration its time, loss and the bytes its swappers read and wrote."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    for k, v in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"),
                 ("MASTER_PORT", str(29500 + os.getpid() % 1000))):
        os.environ.setdefault(k, v)
    import torch
    import deepspeed
    moved = {"read": 0, "write": 0}

    def counted(fn, op):
        def wrapper(handle, buffers, paths):
            for b in buffers:
                moved[op] += b.numel() * b.element_size()
            return fn(handle, buffers, paths)
        return wrapper

    # Every module that imported the two functions by name gets the counting ones.
    import importlib
    for name in ("utils", "async_swapper", "optimizer_utils", "partitioned_optimizer_swapper",
                 "partitioned_param_swapper", "pipelined_optimizer_swapper"):
        mod = importlib.import_module("deepspeed.runtime.swap_tensor." + name)
        if hasattr(mod, "swap_in_tensors"):
            mod.swap_in_tensors = counted(mod.swap_in_tensors, "read")
        if hasattr(mod, "swap_out_tensors"):
            mod.swap_out_tensors = counted(mod.swap_out_tensors, "write")
    model = json.loads(args.model_json)
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    config = json.load(open(args.ds_config))
    # tierflow's AdamW (real/train/include/tierflow/real/train_config.h).
    config["optimizer"] = {"type": "AdamW", "params": {"lr": args.lr, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.0}}
    config["steps_per_print"] = 1 << 30
    if args.precision == "fp32":  # PyTorch's bf16 products have no fast path on a CPU without AVX-512 BF16 or AMX
        config["bf16"] = {"enabled": False}
    deepspeed.init_distributed(dist_backend="gloo")
    net = train_peers.hf_model(model, args.checkpointing)
    if args.init_out:  # the weights DeepSpeed starts from, for tierflow run --init
        from safetensors.torch import save_file
        save_file({k: v.detach().float().contiguous() for k, v in net.state_dict().items()}, args.init_out)
    engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=config)
    # The step's parts, timed around the ZeRO-3 optimizer's own methods (stage3.py step(): per
    # sub-group the states' swap-in, Adam, the fp16 parameters put back, the states' swap-out);
    # the rest of the step (its norm and overflow check, partitioning, bookkeeping) is step_s less them.
    parts = {}

    def timed(fn, part):
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                parts[part] = parts.get(part, 0.0) + time.perf_counter() - t
        return wrapper

    for method, part in (("_optimizer_states_and_gradient_swap_in", "swap_in_s"), ("_optimizer_step", "adam_s"),
                         ("_reassign_or_swap_out_partitioned_parameters", "params_out_s"),
                         ("_optimizer_states_and_gradient_swap_out", "swap_out_s")):
        if hasattr(engine.optimizer, method):
            setattr(engine.optimizer, method, timed(getattr(engine.optimizer, method), part))
    rows = []
    profiler = None
    if args.python_profile:  # where DeepSpeed's own time goes: its steady iterations under cProfile
        import cProfile
        profiler = cProfile.Profile()
    for i, (inputs, targets) in enumerate(tierflow_batches(args.seq, args.iterations)):
        if profiler and i == 2:
            profiler.enable()
        # Its engine's three calls, one after the other: the phases as its own timers cut them.
        parts.clear()
        before, io0, t0 = dict(moved), proc_io(), time.perf_counter()
        loss = train_peers.loss_of(engine, inputs, targets)
        t1 = time.perf_counter()
        engine.backward(loss)
        t2 = time.perf_counter()
        engine.step()
        t3 = time.perf_counter()
        io1 = proc_io()
        rows.append({"s": t3 - t0, "forward_s": t1 - t0, "backward_s": t2 - t1, "step_s": t3 - t2,
                     "loss": float(loss), "read": moved["read"] - before["read"],
                     "write": moved["write"] - before["write"], "io_read": io1["read_bytes"] - io0["read_bytes"],
                     "io_write": io1["write_bytes"] - io0["write_bytes"], "step_parts": dict(parts)})
    if profiler:
        profiler.disable()
        profiler.dump_stats(args.python_profile)
    print(json.dumps(rows))


def schedule_bytes(path):
    """Bytes of the schedule's read and write tasks: what one iteration moves."""
    doc = json.load(open(path))
    out = {"read": 0, "write": 0}
    for t in doc["tasks"]:
        if t.get("op") in out:
            out[t["op"]] += int(t.get("bytes", 0))
    return out


def run_deepspeed(args, model, seq, checkpointing, ds_config, name, precision="fp32", init_out=None):
    cmd = [sys.executable, __file__, "--worker", "--model-json", json.dumps(model), "--seq", str(seq), "--iterations",
           str(args.iterations), "--threads", str(args.threads), "--lr", str(args.lr), "--checkpointing",
           str(int(checkpointing)), "--ds-config", ds_config, "--precision", precision]
    if init_out:
        cmd += ["--init-out", init_out]
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS=str(args.threads))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"DeepSpeed ({name}, {precision}) failed: " + proc.stderr.strip().splitlines()[-1])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def compare_losses(args, model, seq, checkpointing, r):
    """DeepSpeed in fp32 and in bf16 from the same weights and batches as `tierflow run` of the plan."""
    work = os.path.join(args.dir, r["setting"])
    init = os.path.join(work, "init.safetensors")
    curves = {}
    for precision in ("fp32", "bf16"):
        rows = run_deepspeed(args, model, seq, checkpointing, os.path.join(work, "ds_config.json"), r["setting"], precision,
                             init if precision == "fp32" else None)
        curves["deepspeed-" + precision] = [x["loss"] for x in rows]
    disks = os.path.join(work, "tierflow-disks")
    os.makedirs(disks, exist_ok=True)
    out = subprocess.run([args.tierflow, "run", os.path.join(work, "plan.json"), "--disk-root", disks, "-n", str(args.iterations),
                          "--threads", str(args.threads), "--lr", str(args.lr), "--data", train_peers.CORPUS, "--init", init,
                          "--json"], check=True, capture_output=True, text=True).stdout
    curves["tierflow"] = json.loads(out)["loss"]
    for k in ("deepspeed-fp32", "deepspeed-bf16"):
        worst = max(abs(a - b) / abs(b) for a, b in zip(curves["tierflow"], curves[k]))
        print(f"loss {k:<15} " + " ".join(f"{x:.5f}" for x in curves[k]) + f"   worst relative difference to tierflow {worst:.2e}")
    print(f"loss {'tierflow':<15} " + " ".join(f"{x:.5f}" for x in curves["tierflow"]))
    return curves


def run_setting(args, model, seq, checkpointing, name, sets):
    work = os.path.join(args.dir, name)
    os.makedirs(os.path.join(work, "nvme"), exist_ok=True)
    plan = os.path.join(work, "plan.json")
    set_args = [a for kv in sets for a in ("--set", "policy." + kv)]
    planned = subprocess.run([args.tierflow, "plan", args.scenario, "-o", plan] + set_args, capture_output=True, text=True)
    ds_config = os.path.join(work, "ds_config.json")
    if planned.returncode != 0:
        # tierflow refuses what DeepSpeed cannot run (parameters kept across the turn that its swap
        # buffers cannot hold), and so does the export. DeepSpeed is given the config anyway, so that
        # the two refusals stand side by side: the export at reuse distance 0, the distance put back.
        refusal = planned.stderr.strip().splitlines()[-1]
        distance = int(float(dict(kv.split("=", 1) for kv in sets).get("max_reuse_distance", "1e9")))
        exported = subprocess.run([args.tierflow, "deepspeed", "export", args.scenario, "--nvme-path", os.path.join(work, "nvme"),
                                   "-o", ds_config] + set_args + ["--set", "policy.max_reuse_distance=0"], capture_output=True, text=True)
        if exported.returncode != 0:  # refused for another reason: there is no config to give DeepSpeed
            raise RuntimeError(refusal)
        with open(ds_config) as f:
            config = json.load(f)
        config["zero_optimization"]["stage3_max_reuse_distance"] = distance
        with open(ds_config, "w") as f:
            json.dump(config, f, indent=2)
        try:
            run_deepspeed(args, model, seq, checkpointing, ds_config, name, args.precision)
        except RuntimeError as e:
            raise RuntimeError(f"{refusal}\n{'':<22} and {e}") from None
        raise RuntimeError(f"{refusal}\n{'':<22} but DeepSpeed ran")
    subprocess.run([args.tierflow, "deepspeed", "export", plan, "--nvme-path", os.path.join(work, "nvme"), "-o", ds_config],
                   check=True, capture_output=True)
    sim_iterations = 4
    sim_cmd = [args.tierflow, "sim", plan, "-n", str(sim_iterations), "--json"] + (["--profile", args.profile] if args.profile else [])
    sim = json.loads(subprocess.run(sim_cmd, check=True, capture_output=True, text=True).stdout)
    rows = run_deepspeed(args, model, seq, checkpointing, ds_config, name, args.precision)
    steady = rows[2:-1] or rows[-1:]
    ds = {k: statistics.mean(r[k] for r in steady)
          for k in ("read", "write", "io_read", "io_write", "s", "forward_s", "backward_s", "step_s")}
    ds["step_parts"] = {k: statistics.mean(r["step_parts"].get(k, 0.0) for r in steady)
                        for k in ("swap_in_s", "adam_s", "params_out_s", "swap_out_s")}
    # sim's critical path per iteration by op (over its iterations), beside the step's parts.
    critical = {op: s / sim_iterations for op, s in (sim.get("critical_path_s") or {}).items()}
    return {"setting": name, "sets": sets, "tierflow": schedule_bytes(plan), "deepspeed": ds, "iterations": rows,
            "sim_iteration_s": sim.get("iteration_s"), "sim_timer_phases": sim.get("timer_phases"),
            "sim_critical_path_s": critical}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model-json", help=argparse.SUPPRESS)
    ap.add_argument("--ds-config", help=argparse.SUPPRESS)
    ap.add_argument("--seq", type=int, default=128, help=argparse.SUPPRESS)
    ap.add_argument("--checkpointing", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16"),
                    help="DeepSpeed's precision for the bytes and time of each setting: fp32 (the default; fp32 "
                         "activations, tierflow's CPU arithmetic) or bf16 (the exported config's, bf16 parameters and "
                         "gradients as the plan's; fast on a CPU with AVX-512 BF16 or AMX)")
    ap.add_argument("--init-out", help=argparse.SUPPRESS)
    ap.add_argument("--python-profile", help=argparse.SUPPRESS)
    ap.add_argument("--losses", action="store_true", help="also compare the loss curves (the first setting)")
    ap.add_argument("--profile", help="a calibrated hardware profile for tierflow sim's prediction of the iteration")
    ap.add_argument("--tierflow", default=os.path.join(train_peers.ROOT, "build", "cli", "tierflow"))
    ap.add_argument("--scenario", default=os.path.join(train_peers.ROOT, "scenarios", "tiny-cpu.yaml"))
    ap.add_argument("--dir", required=False, help="scratch directory (DeepSpeed's nvme_path lies in it)")
    ap.add_argument("--setting", action="append", help="NAME:key=value,key=value (policy knobs); repeatable")
    ap.add_argument("--iterations", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--json", help="write every setting's figures here")
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if not args.dir:
        raise SystemExit("fidelity: --dir is required")
    if args.precision == "bf16" and not cpu_has_bf16():
        print("fidelity: this CPU has neither AVX-512 BF16 nor AMX, so PyTorch's bf16 products take its slow path "
              "(DeepSpeed's backward on small-cpu: 39 s in bf16 against 1.7 s in fp32 on a 2-vCPU AMD EPYC); "
              "its iteration time is not comparable with tierflow's prediction: use --precision fp32", file=sys.stderr)
    model, seq, checkpointing = train_peers.model_of(args.tierflow, args.scenario)
    results = []
    for spec in args.setting or DEFAULT_SETTINGS:
        name, _, kvs = spec.partition(":")
        sets = [kv for kv in kvs.split(",") if kv]
        try:
            r = run_setting(args, model, seq, checkpointing, name, sets)
        except RuntimeError as e:  # DeepSpeed refusing a configuration is a result too
            print(f"{name:<22} {e}", flush=True)
            results.append({"setting": name, "sets": sets, "error": str(e)})
            continue
        if args.losses and not results:
            r["losses"] = compare_losses(args, model, seq, checkpointing, r)
        results.append(r)
        tf, ds = r["tierflow"], r["deepspeed"]
        print(f"{name:<22} read  tierflow {tf['read'] / 1e6:9.2f} MB  DeepSpeed {ds['read'] / 1e6:9.2f} MB"
              f" (block I/O {ds['io_read'] / 1e6:9.2f})  error {err(tf['read'], ds['read'])}", flush=True)
        print(f"{'':<22} write tierflow {tf['write'] / 1e6:9.2f} MB  DeepSpeed {ds['write'] / 1e6:9.2f} MB"
              f" (block I/O {ds['io_write'] / 1e6:9.2f})  error {err(tf['write'], ds['write'])}", flush=True)
        tp = r.get("sim_timer_phases") or {}
        print(f"{'':<22} time  DeepSpeed {ds['s']:.3f} s (forward {ds['forward_s']:.3f}, backward {ds['backward_s']:.3f},"
              f" step {ds['step_s']:.3f})  tierflow sim {r['sim_iteration_s']:.3f} s (forward {tp.get('forward_s', 0):.3f},"
              f" backward {tp.get('backward_s', 0):.3f}, step {tp.get('step_s', 0):.3f})  error {err(r['sim_iteration_s'], ds['s'])}",
              flush=True)
        sp, cp = ds["step_parts"], r.get("sim_critical_path_s") or {}
        print(f"{'':<22} step  DeepSpeed swap-in {sp['swap_in_s']:.3f}, Adam {sp['adam_s']:.3f}, params out "
              f"{sp['params_out_s']:.3f}, swap-out {sp['swap_out_s']:.3f}, rest {ds['step_s'] - sum(sp.values()):.3f} s"
              f"  tierflow sim critical path: read {cp.get('read', 0):.3f}, optimizer {cp.get('optimizer', 0):.3f},"
              f" convert {cp.get('convert', 0):.3f}, write {cp.get('write', 0):.3f} s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"scenario": args.scenario, "results": results}, f, indent=1)


def cpu_has_bf16():
    """Whether this x86 CPU has a bf16 fast path for PyTorch's CPU kernels (AVX-512 BF16 or AMX)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return True  # unknown: say nothing
    return "avx512_bf16" in flags or "amx_bf16" in flags


def err(ours, theirs):
    if theirs == 0:
        return "exact" if ours == 0 else "n/a (DeepSpeed moves none)"
    return f"{100.0 * (ours - theirs) / theirs:+.2f} %"


if __name__ == "__main__":
    sys.exit(main())
