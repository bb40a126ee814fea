#!/usr/bin/env bash
# Installs tierflow's build dependencies from Debian packages, skipping what is already there.
# Open MPI (multi-rank runs and their tests) is installed; CUDA and NCCL come with the CUDA
# toolkit and are never installed here: CMake detects them.
set -euo pipefail
packages=(cmake ninja-build g++ pkg-config
  libsimgrid-dev libboost-graph-dev libeigen3-dev nlohmann-json3-dev libyaml-cpp-dev
  libcli11-dev libfmt-dev liburing-dev libgtest-dev libgmock-dev libbenchmark-dev fio
  libopenmpi-dev openmpi-bin  # real/collective's mpi back-end
  libprotobuf-dev protobuf-compiler  # `tierflow trace chakra`: Chakra execution traces
  gnuplot-nox  # `tierflow sweep --plot` (pngcairo terminal)
  python3      # tests/docs/run_examples.py: the README and docs examples, run as written
  clang libclang-rt-dev lld)  # scripts/sanitize.sh, scripts/fuzz.sh: the clang sanitizer builds, libFuzzer, lld
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi
echo "setup: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
