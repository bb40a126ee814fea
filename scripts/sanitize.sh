#!/usr/bin/env bash
# The test suite under the sanitizers, each in its own build directory:
#   asan: everything built with clang's AddressSanitizer and UndefinedBehaviorSanitizer
#         (build-asan/), and every test run there; any report fails its test. The same build
#         holds the libFuzzer targets (TIERFLOW_FUZZ: the parsers' code carries libFuzzer's
#         coverage), which scripts/fuzz.sh runs: one build where there were two.
#   tsan: the executor's, its host probes' and the storage back-ends' suites (with checkpoints and directory locks)
#         built with clang's ThreadSanitizer (build-tsan/), and run there.
# Usage: scripts/sanitize.sh [asan|tsan|all] [ctest args...]   (default all; e.g. `asan -LE slow`)
#        scripts/sanitize.sh build asan|tsan [cmake --build args...]   (configure and build only)
# A test that runs past 15 minutes (a hang) fails. CUDA is left out of both (nothing here can run
# it, and nvcc code is not instrumented). Both builds precompile the standard and third-party
# headers (TIERFLOW_PCH, cmake/TierflowPch.cmake); the plain build does not, so that a file that
# forgets an #include still fails there. ASAN_ALL=1 and TSAN_ALL=1 add the long cases (below);
# scripts/check-full.sh runs both with the fuzzers for longer.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/timing.sh
which=${1:-all}
shift || true
root=$(pwd)
export LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/sanitizers/tsan.supp"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=0"
# Open MPI's own run-time, not ours, under a sanitizer: its shared-memory transport and its
# progress threads are not instrumented; the collective tests use TCP between ranks.
export OMPI_MCA_btl="self,tcp"

asan_flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
tsan_flags="-fsanitize=thread -fno-omit-frame-pointer"
# lld links the large instrumented test programs several times faster than ld.bfd.
linker=""
if command -v ld.lld >/dev/null; then linker="-fuse-ld=lld"; fi

configure() {  # KIND: configures build-KIND once, with clang (gcc 12 took 2-3x as long to
  # compile each file with ASan + UBSan, 1.6x with TSan)
  local kind=$1 dir=build-$1 flags extra=()
  if ! command -v clang++ >/dev/null; then
    echo "sanitize: clang++ not found (scripts/setup.sh installs clang and libclang-rt-dev)" >&2
    exit 1
  fi
  if [ "$kind" = asan ]; then
    flags=$asan_flags
    extra=(-DTIERFLOW_FUZZ=ON)
  else
    flags=$tsan_flags
  fi
  # A tree an older version of this script configured (gcc, an ASan build without the fuzzers,
  # no precompiled headers) cannot be switched in place: it is made anew.
  if [ -f "$dir/CMakeCache.txt" ] && { ! grep -q "^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++" "$dir/CMakeCache.txt" ||
       ! grep -q "^TIERFLOW_PCH:BOOL=ON" "$dir/CMakeCache.txt" ||
       { [ "$kind" = asan ] && ! grep -q "^TIERFLOW_FUZZ:BOOL=ON" "$dir/CMakeCache.txt"; }; }; then
    echo "sanitize: $dir was configured by an older scripts/sanitize.sh (not clang, no fuzzers or no precompiled headers): making it anew" >&2
    rm -rf "$dir"
  fi
  if [ ! -f "$dir/build.ninja" ]; then
    # -g1: line tables for the reports' stacks, without the full debug info that makes these
    # builds (every file instrumented) take most of CI's time.
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTIERFLOW_WERROR=OFF \
      -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
      -DTIERFLOW_CUDA=OFF -DTIERFLOW_BUILD_BENCH=OFF -DTIERFLOW_SLOW_TIMEOUT=5400 -DTIERFLOW_PCH=ON "${extra[@]}" \
      -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" \
      -DCMAKE_EXE_LINKER_FLAGS="$flags $linker" -DCMAKE_SHARED_LINKER_FLAGS="$flags $linker" >/dev/null
  fi
}

# The suites TSan builds and runs: the executor (dispatch thread, per-resource workers, CPU
# threads, the I/O window), its host probes (the hand-over chain, compute beside a disk stream's
# thread) and storage (io_uring and posix completions, checkpoints, directory locks).
tsan_suites="exec_executor_test exec_io_window_test exec_block_cache_test exec_host_probes_test real_storage_test real_checkpoint_test real_dir_lock_test"

if [ "$which" = build ]; then
  kind=${1:?usage: scripts/sanitize.sh build asan|tsan [cmake --build args...]}
  shift
  configure "$kind"
  exec cmake --build "build-$kind" -j "$(nproc)" "$@"
fi
if [ "$which" = asan ] || [ "$which" = all ]; then
  configure asan
  timed asan.build cmake --build build-asan -j "$(nproc)"
  # Every tunable knob's every value through the executor takes 8 minutes under ASan:
  # ASAN_ALL=1 runs it too; by default the random knob combinations drive the same paths.
  askip=(-E "^exec_policy_property_test[.]EverySchedule[.]EachTunableKnobValueRunsOrIsRefusedAtPlanTime\$")
  if [ "${ASAN_ALL:-0}" = 1 ]; then askip=(); fi
  (cd build-asan && timed asan.test ctest --output-on-failure --timeout 900 -j "$(nproc)" "${askip[@]}" "$@")
fi
if [ "$which" = tsan ] || [ "$which" = all ]; then
  configure tsan
  timed tsan.build cmake --build build-tsan -j "$(nproc)" --target $tsan_suites
  # The executor tests that train for seconds run ~40x slower under TSan (minutes each, an hour in
  # all): TSAN_ALL=1 runs them too; by default the others drive the same threads through every
  # kind of task, failure and checkpoint.
  long="ADamagedCheckpointMetaIsRefusedNamingTheField|AModelOf4KiBTensorsIsReadAndWrittenAllDirect|ANonFiniteStateIsNeverCheckpointed"
  long+="|AResumedRunEndsWhereAnUninterruptedOneDoes|AccumulationUnderDynamicLossScalingEqualsNone"
  long+="|CachedStatesOverlapAndGpuResidentParametersReproduceTheInMemoryWeights|DataParallelReferenceAveragesOneBatchPerRank"
  long+="|EveryPolicyWithItsOwnDefaultsReproducesTheInMemoryWeights|GpuMemoryIsBoundedByTheSchedulesGpuPool"
  long+="|GradientAccumulationReproducesTheInMemoryWeights|GradientClippingMatchesTheReferenceAndChangesTraining"
  long+="|TiedEmbeddingsReproduceTheInMemoryWeights|WeightsAreBitIdenticalWhateverTheSchedule"
  # Several ranks: the first case (two zero-infinity ranks: the collective thread, the local
  # collectives, the shared store) runs; the other policies and four ranks take the same paths.
  ranks="ioc_2|mlp_offload_2|zero_infinity_clipped_2|zero_infinity_4|zero_infinity_tied_2|mlp_offload_tied_2"
  # With them, a test may take up to an hour (TiedEmbeddings... took 18 min, two at a time).
  # (ctest names a parameterised case "NAME  # GetParam() = ...": the case ends at a space.)
  skip=(-E "^exec_executor_test[.]Executor([.]($long)\$|/Ranks[.]TrainToTheDataParallelReference/($ranks)( |\$))")
  timeout=900
  if [ "${TSAN_ALL:-0}" = 1 ]; then skip=(); timeout=3600; fi
  (cd build-tsan && timed tsan.test ctest --output-on-failure --timeout "$timeout" -j "$(nproc)" -R "^($(echo $tsan_suites | tr ' ' '|'))[.]" "${skip[@]}" "$@")
fi
