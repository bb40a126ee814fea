#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (the scenario, schedule, trace, checkpoint-manifest,
# safetensors and token-file parsers) with clang, AddressSanitizer and UndefinedBehaviorSanitizer
# into build-fuzz/, and runs each for SECONDS (default 60) from its seed corpus, as many at once as
# there are cores. A crash, a leak, a sanitizer report, a hang (an input over 20 s) or a broken
# property fails the target: its input is left in build-fuzz/crashes/TARGET/, to add to
# tests/fuzz/corpus/TARGET/ once fixed (the normal build replays that corpus as ctest fuzz.replay.*).
# New inputs the fuzzers find accumulate in build-fuzz/corpus/TARGET/ across runs.
# Usage: scripts/fuzz.sh [SECONDS [TARGET ...]]   Environment: FUZZ_BUILD_DIR (default build-fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
dir=${FUZZ_BUILD_DIR:-build-fuzz}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(scenario schedule trace manifest safetensors tokens)
if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ not found (scripts/setup.sh installs clang and libclang-rt-dev)" >&2
  exit 1
fi
sanitize="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
if [ ! -f "$dir/build.ninja" ]; then
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_CXX_FLAGS="$sanitize -fsanitize=fuzzer-no-link" -DCMAKE_C_FLAGS="$sanitize" \
    -DCMAKE_EXE_LINKER_FLAGS="$sanitize" \
    -DTIERFLOW_FUZZ=ON -DTIERFLOW_BUILD_TESTS=OFF -DTIERFLOW_BUILD_BENCH=OFF \
    -DTIERFLOW_SIMGRID=OFF -DTIERFLOW_CUDA=OFF >/dev/null
fi
cmake --build "$dir" -j "${FUZZ_JOBS:-$(nproc)}" --target "${targets[@]/%/_fuzzer}"

run_one() {  # TARGET: runs it, prints one line, returns its status
  local t=$1 dir=$2 seconds=$3
  mkdir -p "$dir/corpus/$t" "$dir/crashes/$t" "$dir/logs"
  local log="$dir/logs/$t.log" rc=0
  UBSAN_OPTIONS=print_stacktrace=1 "$dir/tests/fuzz/${t}_fuzzer" -max_total_time="$seconds" -timeout=20 \
    -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$dir/crashes/$t/" \
    "$dir/corpus/$t" "tests/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  local runs
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [ "$rc" -eq 0 ]; then
    echo "fuzz: $t: ${runs:-?} executions in ${seconds} s, clean (corpus $(ls "$dir/corpus/$t" | wc -l) inputs)"
  else
    echo "fuzz: $t: FAILED after ${runs:-?} executions (exit $rc); input in $dir/crashes/$t/, log $log:"
    grep -m1 -A30 -E "^==[0-9]+== ?ERROR|runtime error|fuzz property violated|terminate called|ALARM|out-of-memory|deadly signal" "$log" || tail -30 "$log"
  fi
  return "$rc"
}
export -f run_one
printf '%s\n' "${targets[@]}" | xargs -P "$(nproc)" -I{} bash -c 'run_one "$@"' _ {} "$dir" "$seconds"
