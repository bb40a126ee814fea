#!/usr/bin/env python3
"""tierflow's aggregated checkpoint against the checkpoint engines people use, on the same tensors.

Run by bench/checkpoint_peers.sh (which makes the virtual environment with PyTorch and
TorchSnapshot); never a runtime or CI dependency of tierflow. For each repetition, in an order
that rotates, every engine writes and then reads back the same tensor set: each rank's ZeRO-3
shards of a model (`tierflow checkpoint tensors`: bf16 parameters, fp32 master, Adam m and v):

  tierflow      `tierflow checkpoint bench --strategy aggregated --reps 1`: one process saves every
                rank (aggregated files, O_DIRECT through io_uring), fsyncs, commits its manifest;
                the load verifies every tensor's CRC-32C
  torch.save    one process per rank, each `torch.save` of its dict of tensors to its own file,
                then fsync and rename; the load is `torch.load`
  torchsnapshot one process per rank in a gloo process group, `Snapshot.take` of each rank's
                state (its own entries), then fsync of every file it wrote; the load is
                `Snapshot.restore` into the rank's tensors
  deepspeed     one process per rank (gloo, DeepSpeed's CPU accelerator), a ZeRO-3 engine (bf16, Adam)
                over parameters of the set's shapes after one step, `save_checkpoint` then fsync of
                its files; the load is `load_checkpoint` into the engine, its fp32 partitions and
                Adam moments zeroed first and compared after. DeepSpeed writes the fp32 master and
                moments (12 of the set's 14 bytes a parameter; it rebuilds bf16 from the master):
                its rate counts the bytes of its files
  fio           the ceiling: a sequential O_DIRECT write (then read) of the same bytes, one file
                per rank, io_uring, 8 MiB requests, queue depth 16, fsync at the end

Every write time includes making the data durable (fsync), as tierflow's does; every read starts
with the files dropped from the page cache (posix_fadvise DONTNEED, after an fsync), and every
peer's read-back is compared byte for byte with what it wrote (outside the timing; tierflow's
CRC check is inside its). Bandwidth = payload bytes / seconds, median over the repetitions.
"""
import argparse
import json
import multiprocessing as mp
import os
import shutil
import statistics
import subprocess
import sys
import time


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def fsync_tree(path):
    """fsyncs every file under path (or path itself) and the directories."""
    if os.path.isfile(path):
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        return
    for root, dirs, files in os.walk(path):
        for f in files:
            fd = os.open(os.path.join(root, f), os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        fd = os.open(root, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)


def drop_cache(path):
    """Evicts path's files from the page cache (clean pages only: fsync first)."""
    paths = [path] if os.path.isfile(path) else [os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs]
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def make_tensors(torch, entries, rank):
    """The rank's tensors, filled from a seeded generator (the same bytes every repetition)."""
    g = torch.Generator().manual_seed(1234 + rank)
    out = {}
    for e in entries:
        if e["rank"] != rank:
            continue
        dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}.get(e["dtype"], torch.uint8)
        n = e["size_bytes"] // torch.tensor([], dtype=dtype).element_size()
        if dtype == torch.uint8:
            out[e["name"]] = torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g)
        else:
            out[e["name"]] = torch.randn(n, generator=g, dtype=torch.float32).to(dtype)
    return out


def rank_worker(engine, rank, ranks, entries, root, barrier, results, port):
    import torch

    torch.set_num_threads(1)
    tensors = make_tensors(torch, entries, rank)
    payload = sum(t.numel() * t.element_size() for t in tensors.values())
    if engine == "torchsnapshot":
        import torch.distributed as dist
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=ranks)
        from torchsnapshot import Snapshot, StateDict
    path = os.path.join(root, f"torch_save.rank{rank}.pt") if engine == "torch.save" else os.path.join(root, "snapshot")
    # Write.
    barrier.wait()
    t0 = time.perf_counter()
    if engine == "torch.save":
        torch.save(tensors, path + ".tmp")
        fsync_tree(path + ".tmp")
        os.rename(path + ".tmp", path)
        fd = os.open(root, os.O_RDONLY)  # the rename, durable (the other ranks' files are theirs to sync)
        os.fsync(fd)
        os.close(fd)
    else:
        Snapshot.take(path=path, app_state={"model": StateDict(**tensors)}, replicated=[])
        fsync_tree(path)
    write_s = time.perf_counter() - t0
    barrier.wait()
    drop_cache(path)
    barrier.wait()
    # Read.
    t0 = time.perf_counter()
    if engine == "torch.save":
        back = torch.load(path)
    else:
        back = {k: torch.empty_like(v) for k, v in tensors.items()}
        state = StateDict(**back)
        Snapshot(path=path).restore(app_state={"model": state})
        back = dict(state.items())
    read_s = time.perf_counter() - t0
    wrong = sum(1 for k, v in tensors.items() if k not in back or not torch.equal(back[k].view(torch.uint8), v.view(torch.uint8)))
    barrier.wait()
    results.put({"rank": rank, "write_s": write_s, "read_s": read_s, "bytes": payload, "wrong": wrong, "t_end": time.time()})
    if engine == "torchsnapshot":
        import torch.distributed as dist
        dist.destroy_process_group()


def deepspeed_worker(rank, ranks, entries, root, barrier, results, port):
    import torch
    import deepspeed

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(ranks), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(ranks))
    deepspeed.init_distributed(dist_backend="gloo", verbose=False)
    # One parameter per model tensor, its elements the sum of its bf16 shards over the ranks: ZeRO-3
    # partitions it into the same ceil(n / ranks) pieces.
    numel = {}
    for e in entries:
        if e["name"].endswith(".bf16"):
            base = e["name"][: e["name"].rindex(".r")]
            numel[base] = numel.get(base, 0) + e["size_bytes"] // 2
    g = torch.Generator().manual_seed(1234)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(n, generator=g)) for n in numel.values()])

        def forward(self):
            return sum((q.float() * q.float()).sum() for q in self.p)

    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "zero_optimization": {"stage": 3},
              "bf16": {"enabled": True}, "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}}}
    model = Model()
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    engine.backward(engine())
    engine.step()  # the Adam moments exist from here on
    opt = engine.optimizer

    def states():
        flat = list(opt.fp32_partitioned_groups_flat)
        out = [t for t in flat]
        for t in flat:
            st = opt.optimizer.state.get(t, {})
            out += [st[k] for k in ("exp_avg", "exp_avg_sq") if k in st]
        return out

    before = [t.detach().clone() for t in states()]
    if len(before) < 3:
        raise RuntimeError(f"deepspeed: expected fp32 partitions and both Adam moments, found {len(before)} tensors")
    path = os.path.join(root, "ds")
    barrier.wait()
    t0 = time.perf_counter()
    engine.save_checkpoint(path, tag="bench")
    fsync_tree(path)
    write_s = time.perf_counter() - t0
    payload = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(os.path.join(path, "bench")) for f in fs
                  if f"zero_pp_rank_{rank}_" in f)
    barrier.wait()
    drop_cache(path)
    with torch.no_grad():
        for t in states():
            t.zero_()
    barrier.wait()
    t0 = time.perf_counter()
    engine.load_checkpoint(path, tag="bench")
    read_s = time.perf_counter() - t0
    after = states()
    wrong = sum(1 for a, b in zip(before, after) if not torch.equal(a, b)) + abs(len(before) - len(after))
    barrier.wait()
    results.put({"rank": rank, "write_s": write_s, "read_s": read_s, "bytes": payload, "wrong": wrong})


def run_python_engine(engine, ranks, entries, root, port):
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(ranks), ctx.Queue()
    if engine == "deepspeed":
        procs = [ctx.Process(target=deepspeed_worker, args=(r, ranks, entries, root, barrier, results, port)) for r in range(ranks)]
    else:
        procs = [ctx.Process(target=rank_worker, args=(engine, r, ranks, entries, root, barrier, results, port)) for r in range(ranks)]
    for p in procs:
        p.start()
    got = [results.get(timeout=3600) for _ in procs]
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"{engine} rank process exited {p.exitcode}")
    shutil.rmtree(root, ignore_errors=True)
    payload = sum(g["bytes"] for g in got)
    # Ranks start together (a barrier): the slowest rank's time is the checkpoint's.
    return {"bytes": payload, "write_s": max(g["write_s"] for g in got), "read_s": max(g["read_s"] for g in got),
            "wrong": sum(g["wrong"] for g in got)}


def run_tierflow(tierflow, model, ranks, root, extra):
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    cmd = [tierflow, "checkpoint", "bench", "--dir", root, "--model", model, "--ranks", str(ranks), "--strategy", "aggregated",
           "--reps", "1", "--json"] + extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    r = json.loads(out)[0]
    shutil.rmtree(root, ignore_errors=True)
    return {"bytes": r["bytes"], "write_s": r["bytes"] / r["write_bytes_per_s"], "read_s": r["bytes"] / r["read_bytes_per_s"],
            "wrong": 0, "direct": r["direct"], "backend": r["backend"]}


def run_fio(ranks, per_rank_bytes, root):
    """fio's sequential O_DIRECT write, then read, of a file per rank (the reference rate; also
    checkpoint_matrix.py's). O_DIRECT reads need no page cache dropped."""
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    out = {}
    for rw in ("write", "read"):
        cmd = ["fio", "--output-format=json", "--group_reporting", "--ioengine=io_uring", "--direct=1", "--bs=8M",
               "--iodepth=16", f"--numjobs={ranks}", f"--size={per_rank_bytes}", f"--directory={root}", "--name=ckpt",
               f"--rw={rw}", "--fallocate=none"]
        if rw == "write":
            cmd.append("--end_fsync=1")
        j = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        job = j["jobs"][0][rw]
        out[rw + "_s"] = job["io_bytes"] / (job["bw_bytes"] if job["bw_bytes"] else 1)
        out["bytes"] = job["io_bytes"]
    shutil.rmtree(root, ignore_errors=True)
    return {"bytes": out["bytes"], "write_s": out["write_s"], "read_s": out["read_s"], "wrong": 0}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tierflow", required=True, help="the tierflow binary")
    ap.add_argument("--dir", required=True, help="a scratch directory on the disk to measure")
    ap.add_argument("--model", required=True, help="YAML model whose per-rank shards are saved")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--engines", default="tierflow,torch.save,torchsnapshot,deepspeed,fio")
    ap.add_argument("--json", help="write every measurement and the summary here")
    a = ap.parse_args()
    entries = json.loads(subprocess.run([a.tierflow, "checkpoint", "tensors", "--model", a.model, "--ranks", str(a.ranks), "--json"],
                                        check=True, capture_output=True, text=True).stdout)
    total = sum(e["size_bytes"] for e in entries)
    log(f"# {len(entries)} tensors, {total / 1e9:.2f} GB over {a.ranks} ranks; {a.reps} repetitions, engines rotating")
    engines = a.engines.split(",")
    runs = {e: [] for e in engines}
    for rep in range(a.reps):
        order = engines[rep % len(engines):] + engines[:rep % len(engines)]
        for i, e in enumerate(order):
            root = os.path.join(a.dir, "peers-" + e.replace(".", "_"))
            if e == "tierflow":
                r = run_tierflow(a.tierflow, a.model, a.ranks, root, [])
            elif e == "fio":
                r = run_fio(a.ranks, -(-total // a.ranks), root)
            else:
                r = run_python_engine(e, a.ranks, entries, root, 29500 + rep * 10 + i)
            runs[e].append(r)
            log(f"rep {rep} {e:14s} write {r['bytes'] / r['write_s'] / 1e9:6.3f} GB/s  read {r['bytes'] / r['read_s'] / 1e9:6.3f} GB/s"
                f"  wrong {r['wrong']}")
    summary = {}
    for e, rs in runs.items():
        summary[e] = {"write_GBps": statistics.median(r["bytes"] / r["write_s"] / 1e9 for r in rs),
                      "read_GBps": statistics.median(r["bytes"] / r["read_s"] / 1e9 for r in rs),
                      "wrong": sum(r["wrong"] for r in rs), "bytes": rs[0]["bytes"], "reps": len(rs)}
    print(f"| engine | write GB/s | read GB/s | tierflow ÷ engine, write | tierflow ÷ engine, read | wrong |")
    print(f"|---|---|---|---|---|---|")
    tf = summary.get("tierflow")
    for e, s in summary.items():
        rw = f"{tf['write_GBps'] / s['write_GBps']:.2f}" if tf else "-"
        rr = f"{tf['read_GBps'] / s['read_GBps']:.2f}" if tf else "-"
        print(f"| {e} | {s['write_GBps']:.3f} | {s['read_GBps']:.3f} | {rw} | {rr} | {s['wrong']} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"tensors": len(entries), "bytes": total, "ranks": a.ranks, "summary": summary, "runs": runs}, f, indent=1)
    return 1 if any(s["wrong"] for s in summary.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
