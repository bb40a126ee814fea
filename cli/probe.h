// `tierflow probe`'s shared pieces (probe_cmd.cc the verb, probe_host.cc the host probes,
// probe_all.cc the campaign of `probe all`).
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "command.h"
#include "inputs.h"
#include "tierflow/core/trace_record.h"
#include "tierflow/core/units.h"
#include "tierflow/policies/scenario.h"
#include "tierflow/real/host_probes.h"

namespace tierflow::cli::probe {

template <typename T, typename F>
StatusOr<std::vector<T>> ParseList(const std::string& text, F parse) {
  std::vector<T> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    TF_ASSIGN_OR_RETURN(T v, parse(item));
    out.push_back(v);
  }
  return out;
}

// A count in a comma-separated list (a queue depth, a device count): core's one rule.
inline StatusOr<int32_t> ParseInt(const std::string& s) {
  TF_ASSIGN_OR_RETURN(const int64_t v, ParseInteger(s, "a count", 1, INT32_MAX));
  return static_cast<int32_t>(v);
}

struct HostArgs {
  std::string sizes = "4KiB,16KiB,64KiB,256KiB,1MiB,4MiB,16MiB,64MiB";
  std::string elements = "1048576,2097152,4194304,8388608,16777216";
  std::string memory = "128MiB";
  std::string scenario;
  std::vector<std::string> sets;
  int reps = 5;
  int threads = 0;
  std::string compute = "cpu";  // gpu0's device: the copy and compute probes measure it
  std::string trace;
  real::IoCpuProbeOptions io;   // io-cpu: the directories, back-end and window
  std::vector<std::string> io_dirs;  // io-cpu: --dir, once or twice (the second: split's writer)
  std::string io_streams;       // io-cpu: OP:BLOCK:DEPTH,... (empty: IoCpuProbeOptions' own)
};

// With two directories, `probe io-cpu` and `probe all` add a reader on the first and a writer on
// the second at once, each through its own ring (the executor's one ring per disk entry), at
// DeepSpeed's default request class: the simulator adds the loads of different rings.
inline const real::IoCpuProbeOptions::Stream kSplitStream{"split", 1 << 20, 8};

enum class HostProbe { kCopy, kCompute, kOptimizer, kMemory, kDispatch, kIoCpu };

// The compute probe's scenario: SCENARIO or SCHEDULE at `path` with `sets`, or the tiny model at
// sequence 128.
StatusOr<policies::Scenario> ComputeScenario(const std::string& path, const std::vector<std::string>& sets);
// The sequence lengths the compute probe runs: the scenario's, a half and a quarter of it.
std::vector<int64_t> ProbedSequences(int64_t seq);
// The compute probe over every probed sequence of `base`.
StatusOr<std::vector<TraceRecord>> ProbeComputeOf(const policies::Scenario& base, const real::HostProbeOptions& o, int threads);
// Prints the points measured, then writes them to `path` (or says how to keep them).
Status WriteRecords(const std::string& path, const std::vector<TraceRecord>& records, const std::string& what);
// The host probes' options from the verb's; each report a step of `progress` (optional).
real::HostProbeOptions HostOptions(const HostArgs& a, Progress* progress, double* done);
StatusOr<std::vector<TraceRecord>> RunHostProbe(HostProbe which, const HostArgs& a, const real::HostProbeOptions& o);

struct AllArgs {
  std::vector<std::string> dirs;
  std::string out;
  HostArgs host;
  std::string disk_sizes = "4KiB,16KiB,64KiB,1MiB,4MiB";
  std::string disk_qds = "1,2,8,32";
  double disk_duration_s = 0.3;
  int disk_reps = 1;
  int disk_passes = 2;
  std::string backend = "auto";
};

// `probe all`: every probe in a bounded time, one records file each (probe_all.cc).
Status RunProbeAll(const AllArgs& a);

}  // namespace tierflow::cli::probe
