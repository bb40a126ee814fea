// Shared by the storage and checkpoint benchmarks: a scratch directory (from --dir= or
// TIERFLOW_BENCH_DIR, else a fresh one under the working directory, removed at exit) and fio,
// run on the same directory with the same request size, queue depth, O_DIRECT and io_uring.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tierflow::bench {

inline std::string& BenchDir() {
  static std::string dir;
  return dir;
}

// Consumes --dir=PATH from argv; creates a scratch directory when none is given.
inline void SetUpBenchDir(int* argc, char** argv, bool* owned) {
  std::string dir;
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--dir=", 0) == 0) dir = a.substr(6);
    else argv[out++] = argv[i];
  }
  *argc = out;
  if (dir.empty() && std::getenv("TIERFLOW_BENCH_DIR") != nullptr) dir = std::getenv("TIERFLOW_BENCH_DIR");
  *owned = dir.empty();
  if (dir.empty()) {
    std::string tmpl = (std::filesystem::current_path() / "tierflow-bench-XXXXXX").string();
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) != nullptr) dir = buf.data();
  }
  BenchDir() = dir;
}

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Runs fio once; returns its bandwidth in bytes/s for `rw` (read, write), or -1 when fio fails.
// `extra` is appended to the command line (e.g. "--end_fsync=1"). --fallocate=none: fio's default
// preallocation leaves unwritten extents, and io_uring's O_DIRECT writes into those are punted to
// one worker per inode (about 1.3 GB/s where the same file with written extents takes 2-3 GB/s), an
// unfair reference for our files, whose extents are written.
inline double RunFio(const std::string& rw, int64_t block_bytes, int queue_depth, int64_t size_bytes,
                     double runtime_s, const std::string& extra = "") {
  std::string cmd = "fio --name=tierflow-bench --directory=" + BenchDir() + " --filename=fio-bench.dat --rw=" + rw +
                    " --bs=" + std::to_string(block_bytes) + " --iodepth=" + std::to_string(queue_depth) +
                    " --size=" + std::to_string(size_bytes) + " --direct=1 --fallocate=none --ioengine=io_uring --output-format=json";
  if (runtime_s > 0) cmd += " --time_based --runtime=" + std::to_string(runtime_s) + "s";
  cmd += " " + extra + " 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int rc = ::pclose(p);
  if (rc != 0) return -1;
  auto j = nlohmann::json::parse(out.substr(std::min(out.find('{'), out.size())), nullptr, false);
  if (j.is_discarded()) return -1;
  std::string key = rw.find("read") != std::string::npos ? "read" : "write";
  try {
    return j.at("jobs").at(0).at(key).at("bw_bytes").get<double>();
  } catch (...) {
    return -1;
  }
}

inline void RemoveFioFile() {
  std::error_code ec;
  std::filesystem::remove(BenchDir() + "/fio-bench.dat", ec);
}

// The main() of a storage benchmark: sets up (or takes) the bench directory, runs the
// registered benchmarks, and removes the directory if it made it.
inline int RunBenchmarksInBenchDir(int argc, char** argv) {
  bool owned = false;
  SetUpBenchDir(&argc, argv, &owned);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (owned) std::filesystem::remove_all(BenchDir());
  return 0;
}

}  // namespace tierflow::bench
