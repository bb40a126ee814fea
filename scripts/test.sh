#!/usr/bin/env bash
# Builds everything and runs every test this machine supports (ctest; hardware that is missing
# makes its tests skip with a message). Extra arguments go to ctest, e.g. -L unit.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/timing.sh
timed setup ./scripts/setup.sh
timed build ./scripts/build.sh
cd "${BUILD_DIR:-build}"
timed test ctest --output-on-failure -j "$(nproc)" "$@"
