#!/usr/bin/env python3
"""Hostile input, as a new user makes it by accident or on purpose: every case runs the tierflow
binary on bad input and asserts what issue "Reliability" asks of each
  - the exit code (1 or 2: an error, never a crash, a signal or 0);
  - one clear error: stderr has a `tierflow ...: error:` line naming the thing and the rule (the
    case's regex), is at most 4 KiB (no echo of a huge input), and shows no crash text (an uncaught
    exception, an assertion, a sanitizer);
  - no hang (a time limit per case);
  - no lost data: no file of the case's directory changed, appeared or vanished unless the case
    names it as an allowed output, and no temporary file is left behind.
The cases are in cases.py, grouped by verb; each runs in a directory of its own.

  run_hostile.py --tierflow BIN --source DIR [--work DIR] [--group G] [--only NAME] [--list]
"""
import argparse
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cases as case_table  # noqa: E402

CRASH_TEXT = re.compile(r"terminate called|what\(\):|Assertion .* failed|Segmentation fault|AddressSanitizer|"
                        r"UndefinedBehaviorSanitizer|runtime error:|core dumped|Check failed|CHECK\(|bad_alloc")


def snapshot(root):
    """relative path -> sha256 of every file under root (links: their target)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            if os.path.islink(path):
                out[rel] = "link:" + os.readlink(path)
                continue
            h = hashlib.sha256()
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            out[rel] = h.hexdigest()
    return out


class Fixtures:
    """Valid inputs made once (a tiny schedule, its sim records), for cases that damage a copy."""

    def __init__(self, tierflow, source, work):
        self.tierflow, self.source, self.dir = tierflow, source, os.path.join(work, "fixtures")
        self.made = {}

    def path(self, name):
        if name not in self.made:
            os.makedirs(self.dir, exist_ok=True)
            out = os.path.join(self.dir, name)
            recipe = case_table.FIXTURES[name]
            args = [a.replace("{S}", self.source).replace("{out}", out).replace("{fx}", self.dir) for a in shlex.split(recipe)]
            p = subprocess.run([self.tierflow] + args, cwd=self.dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, errors="replace", timeout=300)
            if p.returncode != 0 or not os.path.exists(out):
                raise RuntimeError(f"fixture {name}: tierflow {recipe} failed:\n{p.stdout[-2000:]}")
            self.made[name] = out
        return self.made[name]

    def text(self, name):
        with open(self.path(name), encoding="utf-8") as f:
            return f.read()


def run_case(c, tierflow, source, work, fixtures):
    d = os.path.join(work, c.group, c.name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for rel, content in c.files.items():
        if callable(content):
            content = content(fixtures)
        path = os.path.join(d, rel)
        if rel.endswith("/"):
            os.makedirs(path, exist_ok=True)
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if isinstance(content, str):
            content = content.replace("{S}", source)
        with open(path, "wb") as f:
            f.write(content if isinstance(content, bytes) else content.encode("utf-8"))
    for rel in c.dirs:
        os.makedirs(os.path.join(d, rel), exist_ok=True)
    if c.setup:
        c.setup(d, fixtures)
    before = snapshot(d)
    args = [a.replace("{S}", source).replace("{fx}", fixtures.dir) for a in shlex.split(c.args)]
    if "{fx}" in c.args:
        for name in case_table.FIXTURES:  # the fixtures a case names are made before it runs
            if "{fx}/" + name in c.args:
                fixtures.path(name)
    try:
        p = subprocess.run([tierflow] + args, cwd=d, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=c.timeout)
    except subprocess.TimeoutExpired:
        return [f"hung: no exit within {c.timeout} s"], ""
    err = p.stderr.decode("utf-8", errors="replace")
    problems = []
    if p.returncode < 0 or p.returncode > 2:
        problems.append(f"crashed: exit status {p.returncode}")
    elif p.returncode == 0:
        problems.append("accepted: exit status 0")
    elif p.returncode not in (c.rc if isinstance(c.rc, tuple) else (c.rc,)):
        problems.append(f"exit status {p.returncode}, expected {c.rc}")
    if CRASH_TEXT.search(err):
        problems.append("crash text on stderr")
    if p.returncode != 0 and not re.search(r"^tierflow[\w ]*: error: ", err, re.M):
        problems.append("no 'tierflow ...: error:' line")
    if len(p.stderr) > 4096:
        problems.append(f"stderr is {len(p.stderr)} bytes (> 4 KiB)")
    if not re.search(c.err, err, re.S):
        problems.append(f"stderr does not match {c.err!r}")
    after = snapshot(d)
    allowed = set(c.outputs)
    for rel in sorted(set(before) | set(after)):
        if any(rel == a or rel.startswith(a.rstrip("/") + "/") for a in allowed):
            continue
        if rel not in after:
            problems.append(f"{rel} was removed")
        elif rel not in before:
            problems.append(f"{rel} appeared")
        elif before[rel] != after[rel]:
            problems.append(f"{rel} changed")
    for rel in after:
        if re.search(r"\.tmp|\.partial|~$", os.path.basename(rel)):
            problems.append(f"temporary file {rel} left behind")
    return problems, err


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tierflow", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--work")
    ap.add_argument("--group", help="run this group (verb) only")
    ap.add_argument("--only", help="run the case of this name only")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the case directories")
    ap.add_argument("--check-groups", help="fail unless these (space-separated) are exactly the groups of cases.py")
    args = ap.parse_args()
    if args.check_groups is not None:
        have, listed = {c.group for c in case_table.CASES}, set(args.check_groups.split())
        if have != listed:
            print(f"run_hostile: groups of cases.py without a ctest: {sorted(have - listed)}; ctests without cases: {sorted(listed - have)}")
            return 1
        print(f"run_hostile: {len(have)} groups, {len(case_table.CASES)} cases, each group a ctest")
        return 0
    tierflow, source = os.path.abspath(args.tierflow), os.path.abspath(args.source)
    work = os.path.abspath(args.work) if args.work else tempfile.mkdtemp(prefix="tierflow-hostile-")
    if args.group:
        os.makedirs(work, exist_ok=True)
        work = tempfile.mkdtemp(prefix=args.group + "-", dir=work)
    selected = [c for c in case_table.CASES
                if (not args.group or c.group == args.group) and (not args.only or c.name == args.only)]
    names = [c.group + "/" + c.name for c in case_table.CASES]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        print(f"run_hostile: duplicate case names: {', '.join(sorted(dup))}")
        return 2
    if not selected:
        print(f"run_hostile: no case selected (groups: {', '.join(sorted({c.group for c in case_table.CASES}))})")
        return 2
    if args.list:
        for c in selected:
            print(f"{c.group}/{c.name}: tierflow {c.args}")
        print(f"{len(selected)} cases")
        return 0
    fixtures = Fixtures(tierflow, source, work)
    failed = []
    for c in selected:
        problems, err = run_case(c, tierflow, source, work, fixtures)
        first = next((l for l in err.split("\n") if "error:" in l), err.strip().split("\n")[0] if err.strip() else "")
        if problems:
            failed.append(c.group + "/" + c.name)
            args = c.args if len(c.args) <= 400 else c.args[:400] + f"... ({len(c.args)} characters)"
            print(f"FAIL {c.group}/{c.name}: tierflow {args}\n     " + "\n     ".join(problems))
            print("     | " + "\n     | ".join(err.rstrip().split("\n")[-8:])[:3000])
        else:
            print(f"ok   {c.group}/{c.name}: {first[:200]}")
    print(f"run_hostile: {len(selected)} cases, {len(failed)} failed" + (f": {', '.join(failed)}" if failed else ""))
    if not failed and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
