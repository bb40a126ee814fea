#!/usr/bin/env python3
"""Runs every command example of the README and docs/ as a new user would, and checks the output
that the docs show.

What runs (docs/README.md "Examples"):
  ```sh       every line is a command (a trailing backslash continues it; `# ...` is a comment);
              an assignment (`tf=./build/cli/tierflow`) holds for the rest of its file.
  ```console  lines starting with `$ ` are commands; the lines after one, up to the next, are its
              output: each shown line (but `...` and what follows `  # `) must be a line of the real
              output, up to spaces.
  other blocks (```text synopses, yaml, json, formulas) are not run.

Each file's commands run in order, in one scratch directory per file that holds links to the
checkout's scenarios/, tests/, bench/, scripts/ and to the build directory as build/, with the
built `tierflow` first on PATH. The table RULES below is everything the test changes in a command,
each with its reason (a user's disk paths, fewer iterations); a rule that matches no example fails
the test, so the table cannot go stale.

  run_examples.py --source DIR --build DIR [--work DIR] [--only FILE] [--keep] [--no-mpi] [--list]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

# (pattern, replacement or None to skip, reason). Applied in order to every command; a skip ends
# the matching.
RULES = [
    (r"^\./scripts/(quickstart|test)\.sh\b.*", None,
     "builds the tree and runs every test: CI runs scripts/test.sh itself (.ci/run), a test cannot"),
    (r"/mnt/nvme(\d)", r"disks/nvme\1",
     "the example's disks are the user's; the test's are scratch directories"),
    (r"^(\$tf probe disk --dir \S+ --dir \S+)$", r"\1 --duration 0.05 --warmup 0.01 --reps 1 --file-size 64MiB",
     "the full sweep (96 points, 3 repetitions of 1 s) takes 5 minutes here: one short repetition each"),
    (r"^(\$tf probe all --dir \S+ --dir \S+ -o \S+)$", r"\1 --disk-duration 0.05 --disk-sizes 4KiB,1MiB --disk-qd 1,16 --reps 1",
     "every probe at full length takes 2 minutes here: fewer and shorter disk points, one repetition (49 s; 68 s with two)"),
    (r"^mpirun -np \d+ (\$tf|tierflow) probe collective --backend nccl\b.*", None,
     "NCCL needs a GPU per rank: tests/gpu/run.sh runs probe collective over it on a GPU machine"),
    (r"^(mpirun -np \d+ (\$tf|tierflow) probe collective --trace \S+)$", r"\1 --sizes 4KiB,64KiB,1MiB,16MiB --reps 2",
     "the full sweep (8 sizes up to 64 MiB, 5 repetitions) takes 23 s with 4 ranks on 2 cores: 4 sizes up to 16 MiB, 2 repetitions (2 s)"),
    (r"^(\$tf checkpoint bench --dir \S+)$", r"\1 --reps 1",
     "3 repetitions of every strategy take 30 s here: one shows the same table"),
    (r"(\brun scenarios/tiny-cpu\.yaml .*)-n 200\b", r"\1-n 3",
     "200 iterations of real training: 3 show the same"),
    (r"^(\$tf sweep scenarios/sweeps/llama70b-1000\.yaml .*)", r"\1 --shard 1/50",
     "1,000 simulations take 3 minutes: one fiftieth of them (bench/sweep_1000.sh times them all)"),
    (r"^bench/sweep_1000\.sh\b.*", None,
     "a 3-minute benchmark of the sweep above, which runs (a fiftieth of it) in this test"),
    (r"^(bench/run_overhead\.sh)$", r"\1 2 1",
     "the overhead benchmark with 2 iterations and 1 repeat instead of 20 and 3"),
    (r"^bench/checkpoint_peers\.sh\b.*", None,
     "installs PyTorch, TorchSnapshot and DeepSpeed (several GB) into a venv of its own: a benchmark's peers, never a test's dependency"),
    (r"^bench/train_peers\.sh\b.*", None,
     "installs PyTorch, DeepSpeed and transformers (several GB) into a venv of its own and trains with each for minutes: a benchmark's peers, never a test's dependency"),
    (r"^bench/hf_roundtrip\.sh\b.*", None,
     "installs PyTorch and transformers (several GB) into a venv of its own: a benchmark's reference, never a test's dependency (CI checks each family's golden outputs instead)"),
    (r"^bench/deepspeed/run\.sh\b.*", None,
     "installs PyTorch, DeepSpeed and transformers into bench/train_peers.sh's venv and trains with DeepSpeed for minutes per knob setting: a benchmark's peer, never a test's dependency"),
    (r"^bench/deepspeed/torch_compute_probe\.py\b.*", None,
     "runs in bench/train_peers.sh's venv (PyTorch and transformers, several GB): a benchmark's peer, never a test's dependency"),
    (r"^python3 bench/checkpoint_matrix\.py\b.*", None,
     "13 configurations x 3 repetitions of a 1.2 GB checkpoint and fio: a benchmark of minutes (its flags are tested by the CLI tests)"),
    (r"^(\./build/bench/\w+_bench)$", r"\1 --benchmark_list_tests=true",
     "Google Benchmark programs are measured by hand: the test checks each is built and lists its benchmarks"),
    (r"^((\$tf|tierflow) tune scenarios/quickstart\.yaml)((?!.*--policy).*)$", r"\1 --rounds 1\3",
     "a full search of the quickstart takes minutes per example: one coordinate-descent round "
     "(the full search is the test cli.tune_quickstart_at_the_hardware_budget)"),
]

SCRATCH_LINKS = ["scenarios", "tests", "bench", "scripts", "docs", "data"]
SCRATCH_DIRS = ["out", "runs", "traces", "disks/nvme0", "disks/nvme1"]


class Example:
    def __init__(self, path, line, command, expected=None):
        self.path = path          # the document, relative to the source root
        self.line = line          # line number of the command
        self.command = command    # as written (continuations joined)
        self.expected = expected  # console output lines shown, or None


def logical_lines(lines, first_line):
    """(line number, text) of each command of an sh block, continuations joined."""
    out, pending, start = [], "", None
    for i, raw in enumerate(lines):
        if start is None:
            start = first_line + i
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        text = (pending + raw).strip()
        pending = ""
        text = re.sub(r"\s+#\s.*$", "", text)  # a trailing comment (none of ours quotes " #")
        if text and not text.startswith("#"):
            out.append((start, text))
        start = None
    return out


def extract(source, relpath):
    """The examples of one markdown file, in order."""
    examples = []
    lines = open(os.path.join(source, relpath), encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        kind, start = m.group(1), i + 1
        end = start
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        body = lines[start:end]
        if kind == "sh":
            for line, text in logical_lines(body, start + 1):
                examples.append(Example(relpath, line, text))
        elif kind == "console":
            j = 0
            while j < len(body):
                if not body[j].startswith("$ "):
                    j += 1
                    continue
                line, text = start + 1 + j, body[j][2:]
                while text.rstrip().endswith("\\") and j + 1 < len(body):
                    j += 1
                    text = text.rstrip()[:-1] + " " + body[j].strip()
                j += 1
                shown = []
                while j < len(body) and not body[j].startswith("$ "):
                    shown.append(body[j])
                    j += 1
                examples.append(Example(relpath, line, text.strip(), shown))
        i = end + 1
    return examples


def documents(source):
    docs = sorted(f for f in os.listdir(os.path.join(source, "docs")) if f.endswith(".md"))
    return ["README.md"] + ["docs/" + f for f in docs]


def rewrite(command, used):
    """The command to run (None to skip) and the reasons of the rules applied."""
    reasons = []
    for k, (pattern, replacement, reason) in enumerate(RULES):
        if not re.search(pattern, command):
            continue
        used.add(k)
        reasons.append(reason)
        if replacement is None:
            return None, reasons
        command = re.sub(pattern, replacement, command)
    return command, reasons


def normalise(line):
    return " ".join(line.split())


def check_shown(expected, output):
    """The shown output lines missing from the real output."""
    real = {normalise(l) for l in output.split("\n")}
    missing = []
    for shown in expected:
        text = shown.split("  # ")[0]
        if "..." in text or "…" in text or not text.strip():
            continue
        if normalise(text) not in real:
            missing.append(text.strip())
    return missing


def scratch_dir(work, source, build, relpath):
    d = os.path.join(work, re.sub(r"[^\w.-]", "_", relpath))
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "bin"))
    for name in SCRATCH_LINKS:
        os.symlink(os.path.join(source, name), os.path.join(d, name))
    os.symlink(build, os.path.join(d, "build"))
    os.symlink(os.path.join(build, "cli", "tierflow"), os.path.join(d, "bin", "tierflow"))
    for name in SCRATCH_DIRS:
        os.makedirs(os.path.join(d, name))
    return d


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", required=True, help="the checkout (README.md, docs/)")
    ap.add_argument("--build", required=True, help="the build directory (cli/tierflow)")
    ap.add_argument("--work", help="scratch directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep each document's scratch directory (default: removed when it passes)")
    ap.add_argument("--no-mpi", action="store_true", help="this build has no MPI: mpirun examples skip")
    ap.add_argument("--only", help="run the examples of this document only (e.g. docs/tuning.md)")
    ap.add_argument("--list", action="store_true", help="print the commands as they would run, run nothing")
    args = ap.parse_args()
    source, build = os.path.abspath(args.source), os.path.abspath(args.build)
    if not os.access(os.path.join(build, "cli", "tierflow"), os.X_OK):
        print(f"run_examples: {build}/cli/tierflow is not built", file=sys.stderr)
        return 2
    work = os.path.abspath(args.work) if args.work else tempfile.mkdtemp(prefix="tierflow-docs-")
    no_mpi = ("this build has no MPI (apt-get install libopenmpi-dev openmpi-bin, then rebuild)" if args.no_mpi
              else None if shutil.which("mpirun") else "mpirun is not installed (apt-get install openmpi-bin)")

    # A build configured without benchmarks (TIERFLOW_BUILD_BENCH=OFF: the sanitizer builds) has
    # none to list; any other build must have every one.
    cache = os.path.join(build, "CMakeCache.txt")
    benches_built = not (os.path.exists(cache) and re.search(r"^TIERFLOW_BUILD_BENCH:BOOL=OFF$", open(cache).read(), re.M))

    env = dict(os.environ)
    # mpirun as root (containers, CI) and with more ranks than cores.
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", PRTE_MCA_rmaps_default_mapping_policy=":oversubscribe")

    used, failures, ran, skipped = set(), [], 0, 0
    docs = documents(source)
    if args.only and args.only not in docs:
        print(f"run_examples: --only {args.only}: not one of {', '.join(docs)}", file=sys.stderr)
        return 2
    for relpath in docs:
        examples = extract(source, relpath)
        if args.only and relpath != args.only:
            for ex in examples:  # still mark the rules, so --only does not report them stale
                rewrite(ex.command, used)
            continue
        if not examples:
            continue
        cwd = None if args.list else scratch_dir(work, source, build, relpath)
        if cwd:
            env["PATH"] = os.path.join(cwd, "bin") + os.pathsep + os.environ.get("PATH", "")
        assignments = []
        failed_before = len(failures)
        for ex in examples:
            where = f"{ex.path}:{ex.line}"
            if re.fullmatch(r"\w+=\S+", ex.command):
                assignments.append(ex.command)
                continue
            command, reasons = rewrite(ex.command, used)
            if command is None:
                skipped += 1
                print(f"SKIP {where}: {ex.command}\n     ({'; '.join(reasons)})")
                continue
            if re.match(r"^mpirun\b", command) and no_mpi:
                skipped += 1
                print(f"SKIP {where}: {ex.command}\n     ({no_mpi})")
                continue
            if re.match(r"^\./build/bench/", command) and not benches_built:
                skipped += 1
                print(f"SKIP {where}: {ex.command}\n     (this build has no benchmarks: TIERFLOW_BUILD_BENCH=OFF, as in the sanitizer builds)")
                continue
            shown = command if command == ex.command else f"{command}\n     (from: {ex.command}; {'; '.join(reasons)})"
            if args.list:
                print(f"{where}: {shown}")
                continue
            script = "set -eo pipefail\n" + "\n".join(assignments + [command])
            start = time.monotonic()
            run_env = env
            if re.match(r"^mpirun\b", command) and "ASAN_OPTIONS" in env:
                # Under scripts/sanitize.sh: Open MPI's run-time keeps allocations of components it
                # unloads at exit (tests/real/CMakeLists.txt says the same for the mpirun tests).
                run_env = dict(env, ASAN_OPTIONS=env["ASAN_OPTIONS"] + ":detect_leaks=0")
            p = subprocess.run(["bash", "-c", script], cwd=cwd, env=run_env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
            seconds = time.monotonic() - start
            ran += 1
            problem = f"exit status {p.returncode}" if p.returncode != 0 else None
            if problem is None and ex.expected is not None:
                missing = check_shown(ex.expected, p.stdout)
                if missing:
                    problem = "output shown in the docs but not printed: " + " | ".join(missing)
            status = "FAIL" if problem else "ok  "
            print(f"{status} {where} ({seconds:.1f} s): {shown}")
            if problem:
                tail = "\n".join(p.stdout.rstrip().split("\n")[-15:])
                print(f"     {problem}\n" + "\n".join("     | " + l for l in tail.split("\n")))
                failures.append(where)
        if cwd and len(failures) == failed_before and not args.keep:
            shutil.rmtree(cwd, ignore_errors=True)
    stale = [RULES[k][0] for k in range(len(RULES)) if k not in used]
    for pattern in stale:
        print(f"STALE rule {pattern!r}: it matches no example; remove it")
    if not args.list:
        print(f"run_examples: {ran} ran, {skipped} skipped, {len(failures)} failed"
              + (f" ({', '.join(failures)})" if failures else ""))
    if not args.work and not args.list and not failures and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    elif failures:
        print(f"run_examples: the failed documents' scratch directories are kept under {work}")
    return 1 if failures or stale else 0


if __name__ == "__main__":
    sys.exit(main())
