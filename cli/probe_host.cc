// The host probes of `tierflow probe` (probe.h): copy, compute, optimizer, memory, dispatch,
// io-cpu, each measured by real/'s probes and written as trace records.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <map>
#include <tuple>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command.h"
#include "inputs.h"
#include "tierflow/core/files.h"
#include "tierflow/core/text.h"
#include "tierflow/core/units.h"
#include "tierflow/policies/policy.h"
#include "tierflow/real/collective_probe.h"
#include "tierflow/real/disk_probe.h"
#include "tierflow/real/gpu_copy_probe.h"
#include "tierflow/real/host_probes.h"
#include "tierflow/real/io_memory.h"
#include "tierflow/real/storage.h"

#include "probe.h"

namespace tierflow::cli::probe {

// "read:16KiB:1,write:1MiB:8,dispatch" -> the streams of `probe io-cpu`.
StatusOr<std::vector<real::IoCpuProbeOptions::Stream>> ParseIoStreams(const std::string& text) {
  std::vector<real::IoCpuProbeOptions::Stream> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item == "dispatch") {  // the executor's hand-overs: no block or depth
      out.push_back({item, 0, 0});
      continue;
    }
    const size_t a = item.find(':'), b = a == std::string::npos ? a : item.find(':', a + 1);
    if (b == std::string::npos) return InvalidArgument("--streams: '" + item + "' is not OP:BLOCK:DEPTH (read:1MiB:8)");
    real::IoCpuProbeOptions::Stream s;
    s.op = item.substr(0, a);
    TF_ASSIGN_OR_RETURN(s.block_bytes, ParseBytes(item.substr(a + 1, b - a - 1), true));
    TF_ASSIGN_OR_RETURN(s.queue_depth, ParseInt(item.substr(b + 1)));
    out.push_back(s);
  }
  return out;
}

// The model the compute probe runs when no scenario is given: the tiny test model at its whole
// context, as scenarios/tiny-cpu.yaml trains it.
constexpr const char* kDefaultComputeScenario = R"(name: probe-compute
model: {preset: tiny}
hardware: {preset: cpu-host}
training: {micro_batch_size: 1, sequence_length: 128, gradient_accumulation_steps: 1,
           activation_checkpointing: true, data_parallel: 1}
)";

StatusOr<policies::Scenario> ComputeScenario(const std::string& path, const std::vector<std::string>& sets) {
  if (path.empty()) return policies::LoadScenarioText(kDefaultComputeScenario, sets, "the default compute-probe scenario");
  TF_ASSIGN_OR_RETURN(PlannedInput in, LoadPlannedInput(path, sets));
  return in.scenario;
}

// The sequence lengths the compute probe runs: the scenario's, a half and a quarter of it, so
// that the fit sees a range of FLOPs per layer (the overhead and the rate come apart).
std::vector<int64_t> ProbedSequences(int64_t seq) {
  std::vector<int64_t> out;
  for (int64_t s : {seq / 4, seq / 2, seq}) {
    if (s >= 1) out.push_back(s);
  }
  return out;
}

// The compute probe's model at sequence `seq`: its training configuration and what the schedule
// charges each layer.
struct ComputeShape {
  real::TrainConfig config;
  std::vector<real::LayerCost> costs;
  std::string label;
};
StatusOr<ComputeShape> ComputeShapeOf(const policies::Scenario& base, int64_t seq, int threads) {
  policies::Scenario sc = base;
  sc.training.sequence_length = seq;
  sc.training.data_parallel = 1;
  TF_ASSIGN_OR_RETURN(std::vector<policies::LayerCompute> costs, policies::LayerComputeCosts(sc));
  ComputeShape shape;
  for (const auto& c : costs) shape.costs.push_back({c.forward_flops, c.backward_flops, c.forward_bytes, c.backward_bytes, c.tasks});
  shape.config.spec.config = sc.model;
  shape.config.batch = sc.training.micro_batch_size;
  shape.config.seq = seq;
  shape.config.threads = threads;
  shape.label = sc.model.name + ".b" + std::to_string(shape.config.batch) + ".s" + std::to_string(seq);
  return shape;
}

StatusOr<std::vector<TraceRecord>> ProbeComputeOf(const policies::Scenario& base, const real::HostProbeOptions& o, int threads) {
  std::vector<TraceRecord> out;
  real::HostProbeOptions each = o;
  for (int64_t s : ProbedSequences(base.training.sequence_length)) {
    TF_ASSIGN_OR_RETURN(ComputeShape shape, ComputeShapeOf(base, s, threads));
    TF_ASSIGN_OR_RETURN(std::vector<TraceRecord> r, real::ProbeCompute(shape.config, shape.costs, shape.label, each));
    each.gpu_update = false;  // the device's AdamW does not depend on the sequence: timed with the first
    out.insert(out.end(), r.begin(), r.end());
  }
  return out;
}

// Compute at the scenario's own shape, alone and beside disk streams on `dir` (real::ProbeIoCpu).
StatusOr<std::vector<TraceRecord>> ProbeIoCpuOf(const policies::Scenario& base, const real::HostProbeOptions& o, int threads,
                                                const real::IoCpuProbeOptions& io) {
  if (o.compute != "cpu") {
    return InvalidArgument("probe io-cpu measures the I/O path's load on the cores that compute: --compute cpu only");
  }
  TF_ASSIGN_OR_RETURN(ComputeShape shape, ComputeShapeOf(base, base.training.sequence_length, threads));
  return real::ProbeIoCpu(shape.config, shape.costs, io, o);
}

// One line per measured point (records with the same task, op, size, threads, layer and phase):
// repetitions, median time, and the median rate (FLOP/s for compute, bytes/s otherwise).
void PrintPointTable(const std::vector<TraceRecord>& records) {
  std::map<std::tuple<std::string, int, int64_t, int32_t, int32_t, int>, std::vector<const TraceRecord*>> points;
  for (const TraceRecord& r : records) {
    points[{r.task, static_cast<int>(r.op), r.bytes, r.threads, r.layer, static_cast<int>(r.phase)}].push_back(&r);
  }
  std::printf("%-34s %-9s %-8s %10s %7s %5s %11s %14s\n", "task", "op", "phase", "bytes", "threads", "reps", "median", "rate");
  for (auto& [key, rs] : points) {
    std::vector<double> t;
    for (const TraceRecord* r : rs) t.push_back(r->duration_s());
    std::sort(t.begin(), t.end());
    const double med = t[t.size() / 2];
    const TraceRecord& r = *rs.front();
    std::string task = r.task;
    if (r.layer >= 0) task += " L" + std::to_string(r.layer);
    const std::string rate = r.op == Op::kCompute ? fmt::format("{:.2f} GFLOP/s", med > 0 ? r.flops / med / 1e9 : 0.0)
                                                  : FormatBandwidth(med > 0 ? static_cast<double>(r.bytes) / med : 0.0);
    std::printf("%-34s %-9s %-8s %10s %7d %5zu %11s %14s\n", task.c_str(), std::string(OpName(r.op)).c_str(),
                std::string(PhaseName(r.phase)).c_str(), FormatBytes(static_cast<double>(r.bytes)).c_str(), r.threads, rs.size(),
                FormatDuration(med).c_str(), rate.c_str());
  }
}

Status WriteRecords(const std::string& path, const std::vector<TraceRecord>& records, const std::string& what) {
  PrintPointTable(records);
  if (path.empty()) {
    std::printf("%s: %zu records measured (give --trace FILE to keep them for tierflow calibrate)\n", what.c_str(), records.size());
    return Status::Ok();
  }
  TF_RETURN_IF_ERROR(WriteTraceFile(path, records));
  std::printf("%s: %zu records -> %s\n", what.c_str(), records.size(), path.c_str());
  return Status::Ok();
}

real::HostProbeOptions HostOptions(const HostArgs& a, Progress* progress, double* done) {
  real::HostProbeOptions o;
  o.repetitions = a.reps;
  o.max_threads = a.threads;
  o.compute = a.compute;
  o.progress = [progress, done](const std::string&) {
    if (progress != nullptr) progress->Update(++*done);
  };
  return o;
}


// The copies of gpu0 on GPU 0 (--compute cuda): cudaMemcpyAsync on the copy streams, from pinned
// memory (as the executor's page-locked blocks) and pageable memory.
StatusOr<std::vector<TraceRecord>> ProbeGpuCopies(const std::vector<int64_t>& sizes, const real::HostProbeOptions& o) {
  if (o.compute != "cuda") return InvalidArgument("compute device " + Quoted(o.compute) + " (known: cpu, cuda)");
  return real::ProbeGpuZeroCopies(sizes, o.repetitions, o.progress);
}

StatusOr<std::vector<TraceRecord>> RunHostProbe(HostProbe which, const HostArgs& a, const real::HostProbeOptions& o) {
  auto bytes = [](const std::string& s) { return ParseBytes(s, true); };
  switch (which) {
    case HostProbe::kCopy: {
      TF_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, ParseList<int64_t>(a.sizes, bytes));
      if (a.compute == "cpu") return real::ProbeCopies(sizes, o);
      return ProbeGpuCopies(sizes, o);
    }
    case HostProbe::kCompute: {
      TF_ASSIGN_OR_RETURN(policies::Scenario sc, ComputeScenario(a.scenario, a.sets));
      return ProbeComputeOf(sc, o, a.threads);
    }
    case HostProbe::kOptimizer: {
      TF_ASSIGN_OR_RETURN(std::vector<int64_t> counts, ParseList<int64_t>(a.elements, bytes));
      return real::ProbeOptimizer(counts, o);
    }
    case HostProbe::kMemory: {
      TF_ASSIGN_OR_RETURN(int64_t b, ParseBytes(a.memory, true));
      return real::ProbeMemory(b, o);
    }
    case HostProbe::kDispatch: return real::ProbeDispatch(o);
    case HostProbe::kIoCpu: {
      TF_ASSIGN_OR_RETURN(policies::Scenario sc, ComputeScenario(a.scenario, a.sets));
      real::IoCpuProbeOptions io = a.io;
      if (!a.io_dirs.empty()) {
        if (a.io_dirs.size() > 2) return InvalidArgument("probe io-cpu: --dir at most twice (the second is the writer's of stream split)");
        io.dir = a.io_dirs[0];
        if (a.io_dirs.size() > 1) io.split_dir = a.io_dirs[1];
      }
      if (!a.io_streams.empty()) {
        TF_ASSIGN_OR_RETURN(io.streams, ParseIoStreams(a.io_streams));
      } else if (!io.split_dir.empty()) {
        io.streams.push_back(kSplitStream);
      }
      return ProbeIoCpuOf(sc, o, a.threads, io);
    }
  }
  return Internal("unknown host probe");
}

}  // namespace tierflow::cli::probe
