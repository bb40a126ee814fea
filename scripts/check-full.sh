#!/usr/bin/env bash
# Every check CI leaves out for time, at full size: the whole suite under ASan + UBSan (the slow
# tests and ASAN_ALL's cases too), each fuzzer for SECONDS (default 600), and the TSan suites with
# TSAN_ALL's long cases. A change to the executor, storage or collectives runs this before it is
# called done (docs/testing.md). It takes hours on two cores, and ends with a table of its steps.
# Usage: scripts/check-full.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
source scripts/timing.sh
timed_table check-full
ASAN_ALL=1 ./scripts/sanitize.sh asan
./scripts/fuzz.sh "$seconds"
TSAN_ALL=1 ./scripts/sanitize.sh tsan
