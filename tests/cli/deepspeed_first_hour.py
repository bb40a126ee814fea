#!/usr/bin/env python3
"""A DeepSpeed user's first hour, as the user types it (docs/deepspeed.md, "From your config to
a tuned config"): a Hugging Face-style ds_config.json with "auto" values and DeepSpeed's default
buffer_count 5, which DeepSpeed's parameter swapper cannot run on Llama-2-7B.

  1. `deepspeed import` takes it as written, fills each "auto" as the Trainer would, and names the
     buffer problem with its fix (`--json`: runs false, problem);
  2. `tune` repairs the baseline along the knob the problem names and finishes;
  3. `deepspeed export --base` gives back the user's file with only the tuned keys changed:
     compared here key by key with the original, "auto" values included.
Exits non-zero naming the first thing that differs.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path


def fail(message):
    print("deepspeed_first_hour: " + message, file=sys.stderr)
    sys.exit(1)


def tierflow(binary, *args):
    run = subprocess.run([binary, *args], capture_output=True, text=True, timeout=900)
    if run.returncode != 0:
        fail(f"tierflow {' '.join(args)} failed ({run.returncode}):\n{run.stdout}{run.stderr}")
    return run.stdout


def leaves(j, path=""):
    if isinstance(j, dict):
        out = {}
        for k, v in j.items():
            out.update(leaves(v, f"{path}.{k}" if path else k))
        return out
    return {path: j}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tierflow", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    scenario, tuned, out = work / "mine.yaml", work / "mine.tuned.json", work / "ds_config.tuned.json"

    imported = json.loads(tierflow(a.tierflow, "deepspeed", "import", a.config, "--model", "meta-llama/Llama-2-7b-hf",
                                   "--hardware", "a100x4-1nvme", "-o", str(scenario), "--json"))
    if imported["runs"] or "Raise policy.buffer_count to at least" not in imported.get("problem", ""):
        fail(f"import should name the swap buffers and their fix: {imported.get('problem')!r}")
    notes = "\n".join(imported["notes"])
    for want in ("auto: bf16.enabled = true", "auto: train_micro_batch_size_per_gpu = 8", "training.sequence_length 4096"):
        if want not in notes:
            fail(f"import's notes lack {want!r}:\n{notes}")

    report = json.loads(tierflow(a.tierflow, "tune", str(scenario), "--policy", "zero-infinity", "--rounds", "1", "-j", "2",
                                 "-o", str(tuned), "--json"))
    repaired = report.get("baseline_repaired")
    if not repaired or not any(r["knob"] == "policy.buffer_count" and r["from"] == "5" for r in repaired["repairs"]):
        fail(f"tune should repair policy.buffer_count from 5: {repaired!r}")
    if not report["best_s"] <= report["baseline_s"]:
        fail(f"the best ({report['best_s']} s) is slower than the repaired baseline ({report['baseline_s']} s)")

    exported = json.loads(tierflow(a.tierflow, "deepspeed", "export", str(tuned), "--base", a.config, "-o", str(out), "--json"))
    before = leaves(json.loads(Path(a.config).read_text()))
    after = leaves(json.loads(out.read_text()))
    changed = {line.split(":")[0] for line in exported["changed"]}
    if "zero_optimization.offload_param.buffer_count" not in changed:
        fail(f"export should change the swap buffers: {exported['changed']}")
    for path, value in before.items():
        if path not in after:
            fail(f"{path} is gone from the exported config")
        if path not in changed and after[path] != value:
            fail(f"{path}: {value!r} became {after[path]!r}, and export did not list it")
    for path in changed:
        if not (path.startswith("zero_optimization.") or path.startswith("aio.")):
            fail(f"export changed {path}, which tune does not tune")
        if path in before and after[path] == before[path]:
            fail(f"{path} is listed as changed and is not")
    for path in set(after) - set(before):
        if path not in changed:
            fail(f"{path} was added and not listed")
    print(f"deepspeed_first_hour: imported with the problem named; repaired {repaired['repairs']}; "
          f"{report['speedup']:.2f}x; exported with {len(changed)} keys changed, {len(before) - len(changed & set(before))} kept as written")


if __name__ == "__main__":
    main()
