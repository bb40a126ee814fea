#!/usr/bin/env bash
# The GPU check of tierflow, for a bare GPU machine (CUDA toolkit, CMake and ninja; nothing
# fetched): unpacks the dependencies that tests/gpu/pack-deps.sh fetched, builds the real
# executor and the CUDA back-end without SimGrid, then runs
#   tests     the GPU tests (ctest -L gpu: every op against the CPU reference, the Llama steps
#             against the CPU model, NCCL, the executor on the GPU) and the kernels' math on the CPU
#   probes    tierflow-gpu-probe (copies, each op of a Llama-3.2-1B layer, NCCL: OUT/probes) and
#             `tierflow probe collective` over the nccl back-end against NCCL's own sums
#             (OUT/collective-nccl.json, OUT/collective-nccl-native.json), then
#             `tierflow probe all --compute cuda` on DISK with the 1B scenario (OUT/calib) and
#             `tierflow calibrate` of it into OUT/profile.yaml (over OUT/base.yaml, this machine's
#             shape: write_base below)
#   gpuprobe  only tierflow-gpu-probe and probe collective of the probes step, the nccl back-end's
#             records calibrated (OUT/collective/profile.yaml), and the executor's hand-overs after
#             an idle gap (probe io-cpu --streams dispatch: OUT/dispatch.jsonl); no disk calibration
#   compute   only the layer steps of the 1B scenario through the compute device (`tierflow probe
#             compute --compute cuda`: OUT/calib/compute.jsonl, what the probes step's `probe all`
#             also writes), for the figure of the steps against cuBLAS without the disk probes
#   peers     PyTorch training the 1B shape in GPU memory (bench/gpu_torch_peer.py, fused AdamW, SDPA),
#             with and without recomputing each layer (OUT/torch-1b-ckpt.json, OUT/torch-1b.json)
#   finetune  offloaded fine-tunes with gpu0 on the GPU (`tierflow run --compute cuda`): the tiny
#             model, and Llama-3.2-1B's shape (untied) through a 4 GiB GPU pool with its records
#             (OUT/finetune-1b.records.jsonl) and schedule (OUT/finetune-1b.schedule.json), and the
#             same 1B training with everything in GPU memory (--in-memory), whose weights must
#             have the same sha256; and (RUNS_1B "gpuopt", on by default) the 1B training planned
#             by tierflow with every sub-group's optimizer states on the GPU, updated there
#             (policy.gpu_sub_groups all, offload_param none, the card's whole memory as the GPU
#             pool, sub-groups of 1e8, the update overlapped: OUT/gpuopt-1b.*), whose weights must
#             be the in-memory run's too; the runs planned by tierflow get --disk-root (their
#             schedules, planned on cpu-host's node, name nvme0 and nvme1)
# and prints a short table last (of every step whose logs are in OUT), then the issue's figures
# (bench/gpu_report.py: GEMM-heavy steps against cuBLAS, copies against the pinned probe, the 1B
# run against its resource lower bound, MFU offloaded and in GPU memory). Back on a machine with
# SimGrid, the simulator's prediction of the 1B run on the GPU's profile:
#   tierflow sim OUT/finetune-1b.schedule.json --profile OUT/profile.yaml -n 4 --records sim.jsonl   (-n ITERS_1B)
#   tierflow trace compare sim.jsonl OUT/finetune-1b.records.jsonl
#
# Usage: tests/gpu/run.sh DEPS OUT   (DEPS holds the .deb files; paths relative to where it is called)
# Environment: STEPS (default "build tests probes finetune"; the build is kept, so the steps can
# be separate calls, and a step that finds no build makes one; without "build", a build-gpu made
# elsewhere and carried here is used as it is), ITERS_1B (iterations of each 1B run, default 4;
# the steady state the figures take leaves out the first and, from three on, the last), TUNED (a tuned schedule of the 1B training,
# from `tierflow tune`, that the finetune step runs too: its weights must be the in-memory run's),
# TUNED_PREDICTION (`tierflow sim TUNED --json` on the GPU's profile, copied to OUT for the report),
# RUNS_1B (which 1B runs the finetune step makes, default "offloaded inmemory gpuopt"; TUNED adds "tuned"),
# PROBE_SEQS (the sequences tierflow-gpu-probe runs at, default 1024: the first into OUT/probes, each
# other into OUT/probes-s<SEQ>),
# CUDA_ARCH (default 90), JOBS
# (default nproc), DISK (the directory the probes' and fine-tunes' files go in, default OUT; the
# 1B run needs about 25 GB there), BUNDLE (a file to pack OUT into, .tar.gz, for copying the
# results off the machine in one piece).
set -uo pipefail
deps=${1:?usage: tests/gpu/run.sh DEPS OUT}
out=${2:?usage: tests/gpu/run.sh DEPS OUT}
deps=$(cd "$deps" && pwd) || { echo "no directory $1"; exit 1; }
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 1
if [ -n "${BUNDLE:-}" ]; then
  bundle_dir=$(cd "$(dirname "$BUNDLE")" && pwd) || { echo "BUNDLE: no directory $(dirname "$BUNDLE")"; exit 1; }
  BUNDLE=$bundle_dir/$(basename "$BUNDLE")
  case $BUNDLE in "$out"/*) echo "BUNDLE: $BUNDLE is inside OUT, which it packs"; exit 1 ;; esac
fi
if [ -n "${DISK:-}" ]; then
  DISK=$(mkdir -p "$DISK" && cd "$DISK" && pwd) || { echo "DISK: cannot make the directory"; exit 1; }
fi
if [ -n "${TUNED:-}" ]; then
  [ -f "$TUNED" ] || { echo "TUNED: no file $TUNED"; exit 1; }
  TUNED=$(cd "$(dirname "$TUNED")" && pwd)/$(basename "$TUNED")
fi
if [ -n "${TUNED_PREDICTION:-}" ]; then
  cp "$TUNED_PREDICTION" "$out/tuned-prediction.json" || { echo "TUNED_PREDICTION: cannot copy $TUNED_PREDICTION"; exit 1; }
fi
runs_1b=" ${RUNS_1B:-offloaded inmemory gpuopt} ${TUNED:+tuned} "
run_1b() { [[ $runs_1b == *" $1 "* ]]; }
cd "$(dirname "$0")/../.." || exit 1
prefix=/tmp/tierflow-deps
build=build-gpu
jobs=${JOBS:-$(nproc)}
steps=" ${STEPS:-build tests probes finetune} "
step() { [[ $steps == *" $1 "* ]]; }
log() { printf '== %s\n' "$*"; }
tf=$build/cli/tierflow
disk=${DISK:-$out}
# A build made on another host and carried here (STEPS without "build"; tests/gpu/pack-deps.sh
# --runtime packs the libraries it loads): its ctest files and tests name the source directory
# it was configured in, so that path is made to lead here where nothing is there.
if ! step build && [ -f "$build/CMakeCache.txt" ]; then
  home=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
  if [ -n "$home" ] && [ "$home" != "$(pwd -P)" ] && [ ! -e "$home" ]; then
    if mkdir -p "$(dirname "$home")" && ln -s "$(pwd -P)" "$home"; then
      log "carried build: $home leads here"
    else
      log "carried build: cannot make $home (its source directory) lead here: its tests will not find their files"
    fi
  fi
fi
# What the figures depend on, kept with them: the kernel (io_uring and O_DIRECT may be missing or
# emulated, as under a sandboxing kernel), the GPU and driver, the compilers, and the file system
# the runs' stores go to.
{
  echo "kernel: $(uname -r); cores: $(nproc); memory: $(free -g 2>/dev/null | awk '/^Mem:/ {print $2 " GiB"}')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: none"
  (nvcc --version 2>/dev/null | tail -1) || echo "nvcc: none"
  echo "c++: $(c++ --version 2>/dev/null | head -1)"
  df -hT "$disk" 2>/dev/null | tail -1
} >"$out/machine.txt" 2>&1
log "machine"; cat "$out/machine.txt"
# Llama-3.2-1B's shape through cpu-host's 4 GiB GPU pool (scenarios/llama3.2-1b-offload.yaml),
# planned for this machine's cores, so that the optimizer and conversions run on the threads the
# schedule gives them (sim's prediction assumes that count; the executor gives at most every core).
model_1b=(scenarios/llama3.2-1b-offload.yaml --set hardware.node.cpu.cores="$(nproc)")

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
if step build || [ ! -d "$prefix/usr" ]; then
  log "unpacking $(ls "$deps"/*.deb | wc -l) packages into $prefix"
  mkdir -p "$prefix"
  for f in "$deps"/*.deb; do unpack "$f" || { echo "cannot unpack $f"; exit 1; }; done
fi
libdir=$prefix/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# The packed .pc files say prefix=/usr: pkg-config reads them alone, under the unpacked tree, and
# keeps the flags it would drop as the system's own (else liburing's headers are not found).
export PKG_CONFIG_LIBDIR=$libdir/pkgconfig PKG_CONFIG_SYSROOT_DIR=$prefix
export PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1

# NCCL: the toolkit's, else the one Python's nvidia-nccl wheel carries.
nccl_args=()
if ! ls /usr/local/cuda/include/nccl.h >/dev/null 2>&1; then
  # The wheel's nvidia.nccl is a namespace package (no __init__.py, no __file__): its __path__.
  nccl_dir=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
  if [ -n "$nccl_dir" ] && [ -f "$nccl_dir/include/nccl.h" ]; then
    nccl_args=(-DNCCL_INCLUDE_DIR="$nccl_dir/include" -DNCCL_LIBRARY="$(ls "$nccl_dir"/lib/libnccl.so* | head -1)")
    export LD_LIBRARY_PATH=$nccl_dir/lib:$LD_LIBRARY_PATH
  fi
fi

# pkg-config finds liburing: the machine's, else the packed pkgconf.
pkg_args=()
if ! command -v pkg-config >/dev/null && [ -x "$prefix/usr/bin/pkgconf" ]; then
  pkg_args=(-DPKG_CONFIG_EXECUTABLE="$prefix/usr/bin/pkgconf")
fi

if step build || [ ! -x "$tf" ]; then
  log "configuring $build (no SimGrid, CUDA architecture ${CUDA_ARCH:-90})"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix/usr" \
    -DTIERFLOW_SIMGRID=OFF -DTIERFLOW_CUDA=ON -DTIERFLOW_NCCL=ON -DTIERFLOW_MPI=OFF -DTIERFLOW_BUILD_BENCH=OFF \
    -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" "${nccl_args[@]}" "${pkg_args[@]}" >"$out/configure.log" 2>&1 \
    || { tail -30 "$out/configure.log"; exit 1; }
  grep -E 'tierflow: ' "$out/configure.log"
  log "building"
  cmake --build "$build" -j "$jobs" --target tierflow tierflow-gpu-probe real_cuda_test real_nccl_test train_cuda_test \
    real_cuda_math_test exec_executor_test exec_host_probes_test \
    >"$out/build.log" 2>&1 || { grep -E 'error|Error' "$out/build.log" | head -30; exit 1; }
fi
rc=0

if step tests; then
  log "GPU tests"
  ctest --test-dir "$build" -L gpu --output-on-failure -V >"$out/gpu-tests.log" 2>&1 &&
    ctest --test-dir "$build" -R 'CudaExecutor|TheComputeDevice|ComputeOnTheGpu' --output-on-failure -V \
      >>"$out/gpu-tests.log" 2>&1
  echo $? >"$out/gpu-tests.rc"
  "$build/tests/real/real_cuda_math_test" >"$out/math-tests.log" 2>&1
  echo $? >"$out/math-tests.rc"
  grep -E 'worst element|cross-entropy:|loss: gpu|gradient: worst|Passed|Failed|Skipped' "$out/gpu-tests.log" | sed 's/^[0-9]*: //' | head -60
fi

# The calibration's base: this machine's shape (its GPUs, their memory and datasheet rates, its
# cores, memory and the disk the probes ran on), which calibrate keeps where it fits nothing
# (the node's shape, peak_flops, capacities); the rates are assumptions the probes replace.
# A GPU not in the table below: h100x8-pcie5's shape, as before.
write_base() {
  local name mib count peak hbm_bw mem_kib disk_bytes
  name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
  count=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
  case $name in  # dense bf16 and HBM bandwidth, by the vendor's datasheets
    *H200*) peak="989 TFLOP/s" hbm_bw="4.8 TB/s" ;;
    *H100*PCIe*) peak="756 TFLOP/s" hbm_bw="2.0 TB/s" ;;
    *H100*) peak="989 TFLOP/s" hbm_bw="3.35 TB/s" ;;
    *A100*) peak="312 TFLOP/s" hbm_bw="2.0 TB/s" ;;
    *) echo h100x8-pcie5; return ;;
  esac
  mem_kib=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
  disk_bytes=$(df -B1 --output=avail "$disk" 2>/dev/null | tail -1 | tr -d ' ')
  [[ $disk_bytes =~ ^[0-9]+$ ]] || disk_bytes=$((64 << 30))  # df said nothing: 64 GiB, an assumption
  cat >"$out/base.yaml" <<YAML
# This machine as tests/gpu/run.sh read it (nvidia-smi, nproc, /proc/meminfo, df), the base of its
# calibration: the rates are assumptions that the probes replace.
nodes: 1
node:
  name: lent-$(echo "$name" | tr -c 'A-Za-z0-9\n' - | tr 'A-Z' 'a-z' | sed 's/-*$//')
  source: tests/gpu/run.sh on $(uname -r); the GPU's peak_flops and hbm_bw from its datasheet
  gpu_count: $count
  gpu:
    name: $name
    hbm: $mib MiB
    peak_flops: $peak
    hbm_bw: $hbm_bw
    compute_efficiency: 0.45
    kernel_overhead: 15 us
  pcie:
    h2d_bw: 50 GB/s
    d2h_bw: 50 GB/s
    pageable_factor: 0.4
    latency: 10 us
    root_complex_bw: 200 GB/s
  cpu:
    cores: $(nproc)
    host_memory: $mem_kib KiB
    memory_bw: 100 GB/s
    adam_rate_per_core: 200 M elements/s
    convert_bw_per_core: 6 GB/s
  interconnect:
    kind: pcie
    bus_bw: 25 GB/s
    latency: 10 us
  nvme:
    - name: the probes' disk ($(df --output=source "$disk" 2>/dev/null | tail -1), $(df --output=fstype "$disk" 2>/dev/null | tail -1))
      capacity: $disk_bytes B
      read_bw: 2 GB/s
      write_bw: 2 GB/s
      read_latency: 100 us
      write_latency: 100 us
      mixed_efficiency: 0.85
  remote: []
  nic_bw: 50 GB/s
  nic_latency: 5 us
YAML
  echo "$out/base.yaml"
}

if step probes || step gpuprobe; then
  base=$(write_base)
  log "GPU probes (calibration base: $base)"
  probe_rc=0
  first_seq=
  for seq in ${PROBE_SEQS:-1024}; do
    dir=probes-s$seq json=probes-s$seq.json
    [ -z "$first_seq" ] && first_seq=$seq dir=probes json=probes.json
    "$build/real/probes/tierflow-gpu-probe" --out "$out/$dir" --seq "$seq" --json >"$out/$json" 2>"$out/$dir.err" || probe_rc=1
    tail -3 "$out/$dir.err"
  done
  echo $probe_rc >"$out/probes.rc"
  # The nccl back-end's collectives (sums in rank order, as runs make them) against NCCL's own
  # sums, the same sizes: one rank on GPU 0 here (the machine has no mpirun), so what the
  # rank-order kernel adds to a collective that moves nothing.
  for backend in nccl nccl-native; do
    trace=()
    [ $backend = nccl ] && mkdir -p "$out/collective" && trace=(--trace "$out/collective/collective.jsonl")
    "$tf" probe collective --backend $backend --sizes 1MiB,4MiB,16MiB,64MiB,128MiB --reps 10 --json "${trace[@]}" \
      >"$out/collective-$backend.json" 2>"$out/collective-$backend.err"
    echo $? >"$out/collective-$backend.rc"
    tail -2 "$out/collective-$backend.err"
  done
  # calibrate fits the nccl back-end's records: with one rank, the GPU's own copy
  # (interconnect.local); across ranks, the interconnect.
  if [ "$(cat "$out/collective-nccl.rc")" = 0 ]; then
    "$tf" calibrate "$out/collective" --base "$base" --allow-refused -o "$out/collective/profile.yaml" >"$out/collective-calibrate.log" 2>&1
    echo $? >"$out/collective-calibrate.rc"
    grep -E '^interconnect|refused' "$out/collective-calibrate.log"
  fi
  # The executor's hand-overs after an idle gap (probe io-cpu's dispatch stream): what an h2d waits
  # before its copy starts, apart from the copy (docs/gpu-results.md, "Copies").
  mkdir -p "$disk/disk0"
  "$tf" probe io-cpu --dir "$disk/disk0" --streams dispatch --trace "$out/dispatch.jsonl" >"$out/dispatch.log" 2>&1
  echo $? >"$out/dispatch.rc"
  tail -4 "$out/dispatch.log"
fi
if step probes; then
  log "calibration probes (tierflow probe all --compute cuda) and the profile"
  mkdir -p "$disk/disk0"
  "$tf" probe all --compute cuda --dir "$disk/disk0" -o "$out/calib" --scenario "${model_1b[@]}" >"$out/calib.log" 2>&1 &&
    "$tf" calibrate "$out/calib" --base "$base" --allow-refused -o "$out/profile.yaml" >"$out/calibrate.log" 2>&1
  echo $? >"$out/calib.rc"
  tail -5 "$out/calib.log"
  tail -25 "$out/calibrate.log"
fi

if step compute; then
  log "the 1B scenario's layer steps on the GPU (tierflow probe compute --compute cuda)"
  mkdir -p "$out/calib"
  "$tf" probe compute --compute cuda "${model_1b[@]}" --trace "$out/calib/compute.jsonl" >"$out/compute.log" 2>&1
  echo $? >"$out/compute.rc"
  tail -5 "$out/compute.log"
fi

if step peers; then
  log "PyTorch in GPU memory (bench/gpu_torch_peer.py)"
  for ckpt in --checkpointing ""; do
    name=torch-1b${ckpt:+-ckpt}
    PYTHONUNBUFFERED=1 python3 bench/gpu_torch_peer.py $ckpt --iterations 6 --json "$out/$name.json" >"$out/$name.log" 2>&1
    echo $? >"$out/$name.rc"
    tail -1 "$out/$name.log"
  done
fi

iters_1b=${ITERS_1B:-4}
if step finetune; then
  log "offloaded fine-tunes on the GPU (--compute cuda; parameters, gradients and optimizer states on disk)"
  mkdir -p "$disk/disk0" "$disk/disk1" "$disk/root"
  "$tf" run scenarios/tiny-cpu.yaml --compute cuda --disk "$disk/disk0" -n 20 >"$out/finetune.log" 2>&1
  echo $? >"$out/finetune.rc"
  tail -4 "$out/finetune.log"
  rm -f "$disk/disk0/tierflow-run.store"
  # Nothing of an earlier call into the same OUT may stand in for this one's 1B runs.
  rm -f "$out"/finetune-1b.* "$out"/inmemory-1b.* "$out"/tuned-1b.* "$out"/gpuopt-1b.* "$out/plan-1b.log"
  if "$tf" plan "${model_1b[@]}" -o "$out/finetune-1b.schedule.json" >"$out/plan-1b.log" 2>&1; then
    # In GPU memory first: it is the shorter, and the offloaded runs' weights are checked against it.
    if run_1b inmemory; then
      "$tf" run "$out/finetune-1b.schedule.json" --compute cuda --in-memory -n "$iters_1b" >"$out/inmemory-1b.log" 2>&1
      echo $? >"$out/inmemory-1b.rc"
      tail -3 "$out/inmemory-1b.log"
    fi
    if run_1b offloaded; then
      "$tf" run "$out/finetune-1b.schedule.json" --compute cuda --disk "$disk/disk1" -n "$iters_1b" \
        --records "$out/finetune-1b.records.jsonl" >"$out/finetune-1b.log" 2>&1
      echo $? >"$out/finetune-1b.rc"
      tail -4 "$out/finetune-1b.log"
      rm -f "$disk/disk1/tierflow-run.store"
    fi
    # The update on the GPU: every sub-group's states there (issue 56), the same weights.
    if run_1b gpuopt; then
      # tune's choice on the card's whole memory (docs/gpu-results.md): sub-groups of 1e8, the
      # update overlapped; zero-infinity's buffer_size is no tierflow knob.
      "$tf" plan "${model_1b[@]}" --set policy.name=tierflow --set policy.buffer_size=null --set policy.offload_param=none \
        --set policy.gpu_sub_groups=all --set policy.sub_group_size=1e8 --set policy.overlap_optimizer=true \
        --set hardware.node.gpu.hbm="$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1) MiB" \
        -o "$out/gpuopt-1b.schedule.json" >"$out/gpuopt-1b.log" 2>&1 &&
        "$tf" run "$out/gpuopt-1b.schedule.json" --compute cuda --disk-root "$disk/root" -n "$iters_1b" \
          --records "$out/gpuopt-1b.records.jsonl" >>"$out/gpuopt-1b.log" 2>&1
      echo $? >"$out/gpuopt-1b.rc"
      tail -4 "$out/gpuopt-1b.log"
      rm -f "$disk/disk1/tierflow-run.store"
    fi
    # A tuned schedule of the same training (`tierflow tune`, made where there is SimGrid): the
    # same weights, in the time its prediction says.
    if [ -n "${TUNED:-}" ] && run_1b tuned; then
      "$tf" run "$TUNED" --compute cuda --disk-root "$disk/root" -n "$iters_1b" --records "$out/tuned-1b.records.jsonl" \
        >"$out/tuned-1b.log" 2>&1
      echo $? >"$out/tuned-1b.rc"
      tail -4 "$out/tuned-1b.log"
      rm -f "$disk/disk1/tierflow-run.store"
    fi
  else
    tee "$out/finetune-1b.log" <"$out/plan-1b.log"
    echo 1 >"$out/finetune-1b.rc"
  fi
fi

log "summary"
python3 - "$out" <<'PY' || rc=1
import json, re, sys, os
out = sys.argv[1]
def read(name):
    p = os.path.join(out, name)
    return open(p).read() if os.path.exists(p) else None
def rc(name):
    t = read(name + ".rc")
    return None if t is None else int(t.strip() or 1)
def status(name):
    r = rc(name)
    return "not run" if r is None else "pass" if r == 0 else f"FAIL (rc {r})"
failed = any(rc(n) not in (None, 0) for n in ("gpu-tests", "math-tests", "probes", "collective-nccl", "collective-nccl-native", "collective-calibrate", "dispatch", "calib", "compute", "torch-1b", "torch-1b-ckpt",
                                              "finetune", "finetune-1b", "inmemory-1b", "tuned-1b", "gpuopt-1b"))
rows = []
log = read("gpu-tests.log")
if log is not None:
    worst = [float(x) for x in re.findall(r"worst element .*\(([0-9.e+-]+|inf) of the largest", log)]
    # Each skipped test by name: the test of several GPUs skips on one, every test skips with no GPU.
    skipped = sorted(set(re.findall(r"Test +#\d+: (\S+) \.*\*\*\*Skipped", log)))
    rows += [("GPU tests (ctest -L gpu, the executor on the GPU)", status("gpu-tests") + (f", {len(skipped)} skipped: {', '.join(skipped)}" if skipped else "")),
             ("kernel math on the CPU", status("math-tests")),
             ("worst op error vs fp32 reference", f"{max(worst):.2e} of the largest value" if worst else "-")]
if rc("probes") is not None:
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
        rows.append(("GPU probes", f'{status("probes")}: {e}'))
coll = {}
for backend in ("nccl", "nccl-native"):
    if rc("collective-" + backend) == 0:
        coll[backend] = {(r["op"], r["bytes"]): r["time_s"] for r in json.load(open(os.path.join(out, f"collective-{backend}.json")))["rows"]}
    elif rc("collective-" + backend) is not None:
        rows.append((f"probe collective --backend {backend}", status("collective-" + backend)))
if len(coll) == 2:
    for key in sorted(coll["nccl"]):
        if key[1] == max(k[1] for k in coll["nccl"]) and key in coll["nccl-native"]:
            rows.append((f"{key[0]} {key[1] >> 20} MiB, rank-order sum vs NCCL's own (1 rank)",
                         f'{coll["nccl"][key] * 1e3:.3f} ms vs {coll["nccl-native"][key] * 1e3:.3f} ms'))
if rc("calib") is not None:
    rows.append(("probe all --compute cuda + calibrate", status("calib") + (" -> profile.yaml" if rc("calib") == 0 else "")))
if rc("compute") is not None:
    rows.append(("probe compute --compute cuda (1B layer steps)", status("compute")))
for name in ("torch-1b-ckpt", "torch-1b"):
    if rc(name) is not None:
        t = json.load(open(os.path.join(out, name + ".json"))) if rc(name) == 0 else None
        rows.append((f"PyTorch in GPU memory ({name})", status(name) + (f", loss {t['losses'][0]:.4f} -> {t['losses'][-1]:.4f}, "
                     f"{t['iteration_s'] * 1e3:.1f} ms per iteration" if t else "")))
shas = {}
for name, log_name in (("tiny, GPU compute, offloaded", "finetune"), ("Llama-3.2-1B shape, GPU compute, offloaded", "finetune-1b"),
                       ("the same, everything in GPU memory", "inmemory-1b"), ("the same, the TUNED schedule, offloaded", "tuned-1b"),
                       ("the same, optimizer states on the GPU, updated there", "gpuopt-1b")):
    ft = read(log_name + ".log")
    if ft is None:
        continue
    losses = re.findall(r"loss[ =:]+([0-9.]+)", ft)
    times = re.findall(r"ran [0-9]+ iterations in ([^;]+);", ft)
    sha = re.findall(r"weights sha256 ([0-9a-f]+)", ft)
    memory = re.findall(r"gpu0 memory: ([^,]+) at peak, ([^ ]+ [^ ]+) reserved", ft)
    paged = re.findall(r"note: (\S+ \S+) of the tasks' disk I/O \(([0-9.]+) %\) went through the page cache", ft)
    if sha:
        shas[log_name] = sha[-1]
    rows.append((name, status(log_name) + (f", loss {losses[0]} -> {losses[-1]}" if losses else "") + (f", {times[0]}" if times else "") +
                 (f", gpu0 memory {memory[-1][0]} peak ({memory[-1][1]} reserved)" if memory else "") +
                 (f", {paged[-1][0]} ({paged[-1][1]} %) of its disk I/O through the page cache" if paged else "")))
for run, label in (("finetune-1b", "1B weights offloaded vs in GPU memory"), ("tuned-1b", "1B weights, TUNED schedule vs in GPU memory"),
                   ("gpuopt-1b", "1B weights, update on the GPU vs in GPU memory")):
    if run in shas and "inmemory-1b" in shas:
        same = shas[run] == shas["inmemory-1b"]
        failed = failed or not same
        rows.append((label, "bit-identical (sha256 " + shas[run][:16] + "...)" if same else "DIFFER"))
w = max(len(a) for a, _ in rows) if rows else 0
for a, b in rows:
    print(f"{a:<{w}}  {b}")
sys.exit(1 if failed else 0)
PY
if [ -f "$out/finetune-1b.records.jsonl" ] || [ -f "$out/tuned-1b.records.jsonl" ] || [ -f "$out/probes/ops.jsonl" ]; then
  log "figures (bench/gpu_report.py)"
  python3 bench/gpu_report.py "$out" | tee "$out/figures.txt"
  python3 bench/gpu_report.py "$out" --json >"$out/figures.json"
fi
if [ -n "${BUNDLE:-}" ]; then
  tar -czf "$BUNDLE" --exclude=disk0 --exclude=disk1 -C "$(dirname "$out")" "$(basename "$out")" &&
    log "packed $out into $BUNDLE ($(du -h "$BUNDLE" | cut -f1))"
fi
exit $rc
