#!/usr/bin/env python3
"""Two runs racing on one --disk/--checkpoint pair (issue 60): started at the same moment, a fresh
run and a --resume of it, in both orders, --trials times each. Exactly one of the two runs; the
other's only error line names the process that holds the directories; the winner's weights are
those of an undisturbed run.

  race_check.py --tierflow BIN --scenario tiny-cpu.yaml --work DIR [--trials 20] [-n 6]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

HOLDER = re.compile(r"^tierflow run: error: failed precondition: --disk '[^']*' \(nvme0\): in use by another tierflow process "
                    r"\(pid \d+\); one run, checkpoint or probe at a time may write a directory")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tierflow", required=True)
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("-n", type=int, default=6)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)

    def command(d, resume):
        os.makedirs(d + "/disk", exist_ok=True)
        c = [a.tierflow, "run", a.scenario, "--disk", d + "/disk", "--checkpoint", d + "/ck", "--checkpoint-every", "2",
             "-n", str(a.n), "--json"]
        return c + (["--resume"] if resume else [])

    reference = subprocess.run(command(a.work + "/undisturbed", False), capture_output=True, text=True)
    if reference.returncode != 0:
        sys.exit("the undisturbed run failed: " + reference.stderr)
    weights = json.loads(reference.stdout)["weights_sha256"]
    failures = []
    outcomes = {"fresh": 0, "resume": 0}
    for order in (("fresh", "resume"), ("resume", "fresh")):
        for trial in range(a.trials):
            d = f"{a.work}/{order[0]}-first-{trial}"
            runs = [subprocess.Popen(command(d, kind == "resume"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                    for kind in order]
            done = [(p.wait(timeout=300), *p.communicate()) for p in runs]
            where = f"{order[0]} first, trial {trial}:"
            won = [i for i, r in enumerate(done) if r[0] == 0]
            if len(won) != 1:
                failures.append(f"{where} exit statuses {[r[0] for r in done]}: " + " | ".join(r[2].strip()[-300:] for r in done))
                continue
            outcomes[order[won[0]]] += 1
            rc, _, err = done[1 - won[0]]
            lines = err.strip().split("\n")
            if rc != 1 or len(lines) != 1 or not HOLDER.match(lines[0]):
                failures.append(f"{where} the loser (exit {rc}) said: " + " | ".join(lines)[-400:])
            got = json.loads(done[won[0]][1])["weights_sha256"]
            if got != weights:
                failures.append(f"{where} the winner's weights {got[:16]} are not the undisturbed run's {weights[:16]}")
            shutil.rmtree(d, ignore_errors=True)
    print(f"{2 * a.trials} races: the fresh run won {outcomes['fresh']}, the resume {outcomes['resume']}; "
          f"{len(failures)} failed")
    for f in failures:
        print("  " + f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
