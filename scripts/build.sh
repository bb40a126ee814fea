#!/usr/bin/env bash
# Configures (once) and builds tierflow into build/ with one job per core.
# Environment: BUILD_DIR (default build), TIERFLOW_WERROR (ON in CI), BUILD_TYPE (RelWithDebInfo).
# In CI the build keeps line tables only (-g1, as the sanitizer builds): full debug info made
# each file a third slower to compile, and nothing in CI reads it. CI has no GPU: its CUDA build
# is there to show that the kernels compile, so it makes Hopper's (sm_90) machine code alone,
# not the five targets of a release (cmake/TierflowDeps.cmake), a fifth of the nvcc time.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
werror=${TIERFLOW_WERROR:-OFF}
flags=()
if [ "${CI:-}" = "true" ]; then
  werror=ON
  flags=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"
    -DCMAKE_CUDA_ARCHITECTURES=90-real)
fi
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
    -DTIERFLOW_WERROR="$werror" "${flags[@]}"
fi
cmake --build "$build_dir" -j "$(nproc)" "$@"
