#!/usr/bin/env bash
# Fetches, as Debian packages (.deb, not installed), what tests/gpu/run.sh needs to build the real
# executor on a GPU machine that has only the CUDA toolkit, CMake and ninja: the headers and
# libraries of tierflow's required dependencies, without SimGrid (the executor does not need it).
# Run it where apt works (this project's development host); carry DIR to the GPU machine.
#
# With --runtime, only the shared libraries that a build made here loads (libfmt, yaml-cpp,
# liburing): for carrying a build made on this host (build-gpu, configured as tests/gpu/run.sh
# does) so that no time on the GPU machine goes to compiling.
#
# Usage: tests/gpu/pack-deps.sh [--runtime] DIR
set -euo pipefail
runtime=0
if [ "${1:-}" = --runtime ]; then runtime=1; shift; fi
dir=${1:?usage: tests/gpu/pack-deps.sh [--runtime] DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
packages=(nlohmann-json3-dev libcli11-dev libboost1.74-dev libfmt-dev libfmt9 libyaml-cpp-dev libyaml-cpp0.7
  libgtest-dev libgmock-dev liburing-dev liburing2 libeigen3-dev pkgconf-bin libpkgconf3)
if [ $runtime = 1 ]; then packages=(libfmt9 libyaml-cpp0.7 liburing2); fi
# A private apt state, so that no root and no change to the system's lists are needed.
state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
mkdir -p "$state/lists/partial" "$state/cache/partial"
apt_opts=(-o Dir::State::Lists="$state/lists" -o Dir::Cache="$state/cache" -o Debug::NoLocking=1)
apt-get "${apt_opts[@]}" update -qq
(cd "$dir" && apt-get "${apt_opts[@]}" download "${packages[@]}")
du -sh "$dir"
ls "$dir"
