#!/usr/bin/env bash
# The GPU check of tierflow, for a bare GPU machine (CUDA toolkit, CMake and ninja; nothing
# fetched): unpacks the dependencies that tests/gpu/pack-deps.sh fetched, builds the real
# executor and the CUDA back-end without SimGrid, then runs
#   1. the GPU tests (ctest -L gpu: every op against the CPU reference, the Llama steps against
#      the CPU model, NCCL) and the kernels' math on the CPU,
#   2. the GPU probes (tierflow-gpu-probe: copies, each op of a Llama-3.2-1B layer, NCCL), whose
#      trace records land in OUT/probes for `tierflow calibrate`,
#   3. offloaded fine-tunes with gpu0 on the GPU (`tierflow run --compute cuda`): the tiny model,
#      and Llama-3.2-1B's shape (untied), their states in disk directories under DISK,
# and prints a short table last.
#
# Usage: tests/gpu/run.sh DEPS OUT   (from the repository root; DEPS holds the .deb files)
# Environment: CUDA_ARCH (default 90), JOBS (default nproc), DISK (the directory the fine-tunes'
# stores go in, default OUT; the 1B run needs about 25 GB there).
set -uo pipefail
deps=${1:?usage: tests/gpu/run.sh DEPS OUT}
out=${2:?usage: tests/gpu/run.sh DEPS OUT}
cd "$(dirname "$0")/../.."
mkdir -p "$out"
out=$(cd "$out" && pwd)
prefix=/tmp/tierflow-deps
build=build-gpu
jobs=${JOBS:-$(nproc)}
log() { printf '== %s\n' "$*"; }

# dpkg -x where there is dpkg; otherwise the .deb's data member by hand (ar + tar).
unpack() {
  if command -v dpkg >/dev/null; then
    dpkg -x "$1" "$prefix"
  else
    local tmp
    tmp=$(mktemp -d)
    (cd "$tmp" && ar x "$1" && tar -xf data.tar.* -C "$prefix")
    rm -rf "$tmp"
  fi
}
log "unpacking $(ls "$deps"/*.deb | wc -l) packages into $prefix"
mkdir -p "$prefix"
for f in "$deps"/*.deb; do unpack "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" || { echo "cannot unpack $f"; exit 1; }; done
libdir=$prefix/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PKG_CONFIG_PATH=$libdir/pkgconfig

# NCCL: the toolkit's, else the one Python's nvidia-nccl wheel carries.
nccl_args=()
if ! ls /usr/local/cuda/include/nccl.h >/dev/null 2>&1; then
  nccl_dir=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null || true)
  if [ -n "$nccl_dir" ] && [ -f "$nccl_dir/include/nccl.h" ]; then
    nccl_args=(-DNCCL_INCLUDE_DIR="$nccl_dir/include" -DNCCL_LIBRARY="$(ls "$nccl_dir"/lib/libnccl.so* | head -1)")
    export LD_LIBRARY_PATH=$nccl_dir/lib:$LD_LIBRARY_PATH
  fi
fi

log "configuring $build (no SimGrid, CUDA architecture ${CUDA_ARCH:-90})"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix/usr" \
  -DTIERFLOW_SIMGRID=OFF -DTIERFLOW_CUDA=ON -DTIERFLOW_NCCL=ON -DTIERFLOW_MPI=OFF -DTIERFLOW_BUILD_BENCH=OFF \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" "${nccl_args[@]}" >"$out/configure.log" 2>&1 \
  || { tail -30 "$out/configure.log"; exit 1; }
log "building"
cmake --build "$build" -j "$jobs" --target tierflow tierflow-gpu-probe real_cuda_test real_nccl_test train_cuda_test \
  real_cuda_math_test exec_executor_test \
  >"$out/build.log" 2>&1 || { grep -E 'error|Error' "$out/build.log" | head -30; exit 1; }

log "GPU tests"
ctest --test-dir "$build" -L gpu --output-on-failure -V >"$out/gpu-tests.log" 2>&1 &&
  ctest --test-dir "$build" -R 'CudaExecutor|TheComputeDevice' --output-on-failure -V >>"$out/gpu-tests.log" 2>&1
tests_rc=$?
"$build/tests/real/real_cuda_math_test" >"$out/math-tests.log" 2>&1
math_rc=$?
grep -E 'worst element|cross-entropy:|loss: gpu|gradient: worst|Passed|Failed|Skipped' "$out/gpu-tests.log" | sed 's/^[0-9]*: //' | head -60

log "GPU probes"
"$build/real/probes/tierflow-gpu-probe" --out "$out/probes" --json >"$out/probes.json" 2>"$out/probes.err"
probe_rc=$?
[ $probe_rc -eq 0 ] || tail -5 "$out/probes.err"

log "offloaded fine-tunes on the GPU (--compute cuda; parameters, gradients and optimizer states on disk)"
disk=${DISK:-$out}
mkdir -p "$disk/disk0" "$disk/disk1"
"$build/cli/tierflow" run scenarios/tiny-cpu.yaml --compute cuda --disk "$disk/disk0" -n 20 >"$out/finetune.log" 2>&1
run_rc=$?
tail -4 "$out/finetune.log"
rm -f "$disk/disk0/tierflow-run.store"
# Llama-3.2-1B's shape (untied, as the executor needs), zero-infinity through a 4 GiB GPU pool.
"$build/cli/tierflow" run scenarios/tiny-cpu.yaml --set model.preset=llama3.2-1b --set model.tied_embeddings=false \
  --set training.sequence_length=1024 --set policy.buffer_size=300000000 --compute cuda --disk "$disk/disk1" -n 4 \
  >"$out/finetune-1b.log" 2>&1
run1b_rc=$?
tail -4 "$out/finetune-1b.log"
rm -f "$disk/disk1/tierflow-run.store"

log "summary"
python3 - "$out" "$tests_rc" "$math_rc" "$probe_rc" "$run_rc" "$run1b_rc" <<'PY'
import json, re, sys, os
out, tests_rc, math_rc, probe_rc, run_rc, run1b_rc = sys.argv[1], *map(int, sys.argv[2:])
log = open(os.path.join(out, "gpu-tests.log")).read()
worst = [float(x) for x in re.findall(r"worst element .*\(([0-9.e+-]+|inf) of the largest", log)]
skipped = log.count("***Skipped")
rows = [("GPU tests (ctest -L gpu)", ("pass" if tests_rc == 0 else f"FAIL (rc {tests_rc})") +
         (f", {skipped} SKIPPED (no usable GPU?)" if skipped else "")),
        ("kernel math on the CPU", "pass" if math_rc == 0 else f"FAIL (rc {math_rc})"),
        ("worst op error vs fp32 reference", f"{max(worst):.2e} of the largest value" if worst else "-")]
try:
    p = json.load(open(os.path.join(out, "probes.json")))
    rows.append(("device", p["device"]))
    for r in p.get("copies", []):
        if r["bytes"] == max(x["bytes"] for x in p["copies"]):
            rows.append((f'{r["task"]} {r["op"]} {r["bytes"] >> 20} MiB', f'{r["gb_per_s"]:.1f} GB/s'))
    for r in p.get("ops", []):
        if r["task"].startswith("probe.gpu.linear_fwd.gate") or r["task"].startswith("probe.gpu.attention"):
            rows.append((r["task"], f'{r.get("tflop_per_s", 0):.1f} TFLOP/s, {r["median_s"] * 1e3:.3f} ms'))
    for r in p.get("nccl", []):
        if r["bytes"] == max(x["bytes"] for x in p["nccl"]):
            rows.append((f'{r["task"]} {r["bytes"] >> 20} MiB', f'{r["gb_per_s"]:.1f} GB/s'))
except Exception as e:
    rows.append(("GPU probes", f"FAIL (rc {probe_rc}): {e}"))
for name, log_name, rc in (("tiny, GPU compute, offloaded", "finetune.log", run_rc),
                           ("Llama-3.2-1B shape, GPU compute, offloaded", "finetune-1b.log", run1b_rc)):
    ft = open(os.path.join(out, log_name)).read()
    losses = re.findall(r"loss[ =:]+([0-9.]+)", ft)
    times = re.findall(r"ran [0-9]+ iterations in ([^;]+);", ft)
    rows.append((name, ("pass" if rc == 0 else f"FAIL (rc {rc})") +
                 (f", loss {losses[0]} -> {losses[-1]}" if losses else "") + (f", {times[0]}" if times else "")))
w = max(len(a) for a, _ in rows)
for a, b in rows:
    print(f"{a:<{w}}  {b}")
PY
[ $tests_rc -eq 0 ] && [ $math_rc -eq 0 ] && [ $probe_rc -eq 0 ] && [ $run_rc -eq 0 ] && [ $run1b_rc -eq 0 ]
