#!/usr/bin/env bash
# Runs the libFuzzer targets of tests/fuzz (the scenario, schedule, trace, checkpoint-manifest,
# safetensors and token-file parsers), built with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer in the ASan build (build-asan/, scripts/sanitize.sh, which configures
# it once for both), each for SECONDS (default 60) from its seed corpus, as many at once as there
# are cores. A crash, a leak, a sanitizer report, a hang (an input over 20 s) or a broken property
# fails the target: its input is left in build-asan/fuzz/crashes/TARGET/, to add to
# tests/fuzz/corpus/TARGET/ once fixed (every build replays that corpus as ctest fuzz.replay.*).
# New inputs the fuzzers find accumulate in build-asan/fuzz/corpus/TARGET/ across runs.
# Usage: scripts/fuzz.sh [SECONDS [TARGET ...]]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/timing.sh
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(scenario schedule trace manifest safetensors tokens)
root=$(pwd)
export LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0"
timed fuzz.build ./scripts/sanitize.sh build asan --target "${targets[@]/%/_fuzzer}"
dir=build-asan

run_one() {  # TARGET: runs it, prints one line, returns its status
  local t=$1 dir=$2 seconds=$3
  mkdir -p "$dir/fuzz/corpus/$t" "$dir/fuzz/crashes/$t" "$dir/fuzz/logs"
  local log="$dir/fuzz/logs/$t.log" rc=0
  UBSAN_OPTIONS=print_stacktrace=1 "$dir/tests/fuzz/${t}_fuzzer" -max_total_time="$seconds" -timeout=20 \
    -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$dir/fuzz/crashes/$t/" \
    "$dir/fuzz/corpus/$t" "tests/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  local runs
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [ "$rc" -eq 0 ]; then
    echo "fuzz: $t: ${runs:-?} executions in ${seconds} s, clean (corpus $(ls "$dir/fuzz/corpus/$t" | wc -l) inputs)"
  else
    echo "fuzz: $t: FAILED after ${runs:-?} executions (exit $rc); input in $dir/fuzz/crashes/$t/, log $log:"
    grep -m1 -A30 -E "^==[0-9]+== ?ERROR|runtime error|fuzz property violated|terminate called|ALARM|out-of-memory|deadly signal" "$log" || tail -30 "$log"
  fi
  return "$rc"
}
export -f run_one
timed fuzz.run xargs -P "$(nproc)" -I{} bash -c 'run_one "$@"' _ {} "$dir" "$seconds" < <(printf '%s\n' "${targets[@]}")
