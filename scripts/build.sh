#!/usr/bin/env bash
# Configures (once) and builds tierflow into build/ with one job per core.
# Environment: BUILD_DIR (default build), TIERFLOW_WERROR (ON in CI), BUILD_TYPE (RelWithDebInfo).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
werror=${TIERFLOW_WERROR:-OFF}
[ "${CI:-}" = "true" ] && werror=ON
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
    -DTIERFLOW_WERROR="$werror"
fi
cmake --build "$build_dir" -j "$(nproc)" "$@"
