// `tierflow probe`: measure this machine for `tierflow calibrate` (docs/calibration.md).
//   probe disk --dir D [--dir D2 ...]   request size x queue depth x op x devices, nccl-tests style
//   probe copy | compute [SCENARIO] | optimizer | memory | dispatch   the host-side probes
//   probe io-cpu --dir D [SCENARIO]     compute alone and beside disk streams (the I/O path's CPU)
//   probe all --dir D [--dir D2 ...] -o DIR [--scenario S]   every probe, bounded, one file each
//   [mpirun -np N] probe collective   all-gather, reduce-scatter, all-reduce by size, nccl-tests style
// --compute cuda (copy, compute, all) measures gpu0 on GPU 0, as `run --compute cuda` uses it:
// the GPU's copies (ProbeGpuCopies) and its layer steps, in the same record conventions.
// Each writes trace records (--trace FILE, or DIR/<probe>.jsonl for `all`). The disk probe writes
// only one file inside each given directory and removes it.
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
#include "tierflow/real/host_probes.h"
#include "tierflow/real/io_memory.h"
#include "tierflow/real/storage.h"
#ifdef TIERFLOW_HAVE_GPU_PROBES
#include "tierflow/real/cuda_compute.h"
#include "tierflow/real/gpu_probes.h"
#endif

namespace tierflow::cli {
namespace {

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
StatusOr<int32_t> ParseInt(const std::string& s) {
  TF_ASSIGN_OR_RETURN(const int64_t v, ParseInteger(s, "a count", 1, INT32_MAX));
  return static_cast<int32_t>(v);
}

struct ProbeArgs {
  std::vector<std::string> dirs;
  std::string sizes = "4KiB,64KiB,1MiB,16MiB";
  std::string qds = "1,8,32,128";
  std::string ops = "read,write,mix";
  std::string streams = "1:1,2:2,4:4";
  std::string devices;
  std::string file_size = "1GiB";
  double duration_s = 1.0;
  double warmup_s = 0.25;
  int reps = 3;
  int passes = 1;
  bool random = false;
  bool json = false;
  std::string backend = "auto";
  std::string trace;
};

Status RunProbeDisk(const ProbeArgs& a) {
  // Its files are this probe's alone.
  TF_ASSIGN_OR_RETURN(const auto locks, LockDirs(a.dirs, "--dir", false, {{"--trace", a.trace, PathUse::kWrites}}));
  real::DiskProbeOptions o;
  o.dirs = a.dirs;
  auto bytes = [](const std::string& s) { return ParseBytes(s, true); };
  auto word = [](const std::string& s) { return StatusOr<std::string>(s); };
  TF_ASSIGN_OR_RETURN(o.block_bytes, ParseList<int64_t>(a.sizes, bytes));
  TF_ASSIGN_OR_RETURN(o.queue_depths, ParseList<int32_t>(a.qds, ParseInt));
  TF_ASSIGN_OR_RETURN(o.ops, ParseList<std::string>(a.ops, word));
  // READERS:WRITERS, each a count >= 0 (0:2 is writers alone); the probe checks the sum.
  auto pair = [](const std::string& s) -> StatusOr<std::pair<int32_t, int32_t>> {
    const Status bad = InvalidArgument("--streams: '" + s + "' is not READERS:WRITERS (e.g. 2:2)");
    const size_t colon = s.find(':');
    if (colon == std::string::npos) return bad;
    int32_t readers = 0, writers = 0;
    const char* end = s.data() + s.size();
    const auto r = std::from_chars(s.data(), s.data() + colon, readers);
    const auto w = std::from_chars(s.data() + colon + 1, end, writers);
    if (r.ec != std::errc() || r.ptr != s.data() + colon || w.ec != std::errc() || w.ptr != end) return bad;
    return std::make_pair(readers, writers);
  };
  using StreamPair = std::pair<int32_t, int32_t>;
  TF_ASSIGN_OR_RETURN(o.streams, ParseList<StreamPair>(a.streams, pair));
  if (!a.devices.empty()) {
    TF_ASSIGN_OR_RETURN(o.device_counts, ParseList<int32_t>(a.devices, ParseInt));
  }
  TF_ASSIGN_OR_RETURN(o.file_bytes, ParseBytes(a.file_size, true));
  o.duration_s = a.duration_s;
  o.warmup_s = a.warmup_s;
  o.repetitions = a.reps;
  o.passes = a.passes;
  o.random = a.random;
  o.backend = a.backend;
  TF_RETURN_IF_ERROR(real::CheckDiskProbeOptions(o));  // before the table's header, not after it
  if (!a.json) {
    std::printf("# tierflow probe disk: %zu dir(s), file %s each, %s offsets, warm-up %.2f s, %d x %.2f s per point%s\n",
                o.dirs.size(), FormatBytes(static_cast<double>(o.file_bytes)).c_str(), o.random ? "random" : "sequential",
                o.warmup_s, o.repetitions, o.duration_s,
                (o.passes > 1 ? " in each of " + std::to_string(o.passes) + " passes over the points" : std::string()).c_str());
    std::printf("# GB/s = bytes completed / window (median of all windows; min, max); latency = completion - submission\n");
    std::fputs(real::FormatDiskProbeTable({}, true).c_str(), stdout);
    std::fflush(stdout);
  }
  std::vector<TraceRecord> trace;
  // One pass: each row as it is measured. Several: the rows in sweep order at the end (the last
  // pass may run backwards), the bar counting every pass of every point meanwhile.
  Progress progress("probing", static_cast<double>(real::DiskProbePoints(o) * o.passes));
  double done = 0;
  auto results = real::RunDiskProbe(o, a.trace.empty() ? nullptr : &trace, [&](const real::DiskProbeResult& r, bool final) {
    if (final && o.passes == 1 && !a.json) {
      std::fputs(real::FormatDiskProbeTable({r}, false).c_str(), stdout);
      std::fflush(stdout);
    }
    progress.Update(++done);
  });
  progress.Finish();
  TF_RETURN_IF_ERROR(results.status());
  if (!a.trace.empty()) TF_RETURN_IF_ERROR(WriteTraceFile(a.trace, trace));
  if (a.json) {
    nlohmann::json j;
    j["backend"] = results->empty() ? "" : results->front().backend;
    j["dirs"] = o.dirs;
    nlohmann::json list = nlohmann::json::array();
    for (auto& r : *results) {
      nlohmann::json point = {{"op", r.op}, {"block_bytes", r.block_bytes}, {"queue_depth", r.queue_depth}, {"devices", r.devices},
                              {"bytes_per_s", r.bytes_per_s}, {"bytes_per_s_min", r.bytes_per_s_min},
                              {"bytes_per_s_max", r.bytes_per_s_max}, {"iops", r.iops}, {"p50_latency_s", r.p50_latency_s},
                              {"p99_latency_s", r.p99_latency_s}, {"wrong", r.wrong}, {"sync_s", r.sync_s}};
      if (r.op == "rw") {
        point["readers"] = r.readers;
        point["writers"] = r.writers;
        point["read_bytes_per_s"] = r.read_bytes_per_s;
        point["write_bytes_per_s"] = r.write_bytes_per_s;
      }
      list.push_back(point);
    }
    j["results"] = list;
    std::printf("%s\n", j.dump(1).c_str());
  } else {
    if (o.passes > 1) std::fputs(real::FormatDiskProbeTable(*results, false).c_str(), stdout);
    int64_t wrong = 0;
    for (auto& r : *results) wrong += r.wrong;
    std::printf("# backend %s; %zu points; #wrong total %lld\n", results->empty() ? "-" : results->front().backend.c_str(),
                results->size(), static_cast<long long>(wrong));
  }
  return Status::Ok();
}

// ---- host probes -----------------------------------------------------------------------------

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
const real::IoCpuProbeOptions::Stream kSplitStream{"split", 1 << 20, 8};

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
  for (int64_t s : ProbedSequences(base.training.sequence_length)) {
    TF_ASSIGN_OR_RETURN(ComputeShape shape, ComputeShapeOf(base, s, threads));
    TF_ASSIGN_OR_RETURN(std::vector<TraceRecord> r, real::ProbeCompute(shape.config, shape.costs, shape.label, o));
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

enum class HostProbe { kCopy, kCompute, kOptimizer, kMemory, kDispatch, kIoCpu };

// The copies of gpu0 on GPU 0 (--compute cuda): cudaMemcpyAsync on the copy streams, from pinned
// memory (as the executor's page-locked blocks) and pageable memory.
StatusOr<std::vector<TraceRecord>> ProbeGpuCopies(const std::vector<int64_t>& sizes, const real::HostProbeOptions& o) {
  if (o.compute != "cuda") return InvalidArgument("compute device " + Quoted(o.compute) + " (known: cpu, cuda)");
#ifdef TIERFLOW_HAVE_GPU_PROBES
  auto ctx = real::cuda::Context::Open(0);
  if (!ctx.ok()) return Status(ctx.status().code(), "compute device 'cuda': " + ctx.status().message());
  real::GpuProbeOptions g;
  g.repetitions = o.repetitions;
  g.progress = o.progress;
  return real::ProbeGpuCopies(**ctx, sizes, g);
#else
  (void)sizes;
  return Unavailable("compute device 'cuda': this build has no GPU probes (build with the CUDA toolkit and NCCL)");
#endif
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

// ---- probe collective ------------------------------------------------------------------------

struct CollectiveArgs {
  std::string backend = "auto";
  std::string sizes = "4KiB,16KiB,64KiB,256KiB,1MiB,4MiB,16MiB,64MiB";
  std::string ops = "allgather,reducescatter,allreduce";
  int reps = 5;
  std::string trace;
  bool json = false;
};

Status RunProbeCollective(const CollectiveArgs& a) {
  real::CollectiveProbeOptions o;
  auto bytes = [](const std::string& s) { return ParseBytes(s, true); };
  TF_ASSIGN_OR_RETURN(o.sizes, ParseList<int64_t>(a.sizes, bytes));
  o.ops.clear();
  std::stringstream ops(a.ops);
  for (std::string name; std::getline(ops, name, ',');) {
    const std::optional<Op> op = OpFromName(name);
    if (!op || !IsCollectiveOp(*op)) return InvalidArgument("--ops: '" + name + "' is not a collective (allgather, reducescatter, allreduce)");
    o.ops.push_back(*op);
  }
  o.repetitions = a.reps;
  const std::string backend = a.backend == "auto" ? AutoCollectiveBackend() : a.backend;
  TF_ASSIGN_OR_RETURN(std::unique_ptr<real::Collective> c, real::OpenCollective(backend));
  const bool printer = c->rank() == 0;  // every rank measures; rank 0 reports
  if (printer && !a.json) {
    std::printf("# probe collective: %d rank(s) over %s, fp32, %d repetition(s) after a warm-up; time = the slowest rank's, median\n",
                c->ranks(), std::string(c->backend()).c_str(), a.reps);
    std::printf("%12s %12s %6s %-14s %11s %11s %11s %7s\n", "size", "count", "type", "op", "time", "algbw", "busbw", "#wrong");
  }
  TF_ASSIGN_OR_RETURN(real::CollectiveProbeResult result, real::ProbeCollectives(*c, o));
  if (!printer) return Status::Ok();
  int64_t wrong = 0;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const real::CollectiveProbeRow& r : result.rows) {
    wrong += r.wrong;
    if (a.json) {
      rows.push_back({{"op", OpName(r.op)}, {"bytes", r.bytes}, {"count", r.count}, {"ranks", r.ranks}, {"time_s", r.time_s},
                      {"algbw_bytes_per_s", r.algbw}, {"busbw_bytes_per_s", r.busbw}, {"wrong", r.wrong}});
      continue;
    }
    std::printf("%12lld %12lld %6s %-14s %11s %11s %11s %7lld\n", static_cast<long long>(r.bytes), static_cast<long long>(r.count), "float",
                std::string(OpName(r.op)).c_str(), FormatDuration(r.time_s).c_str(), FormatBandwidth(r.algbw).c_str(),
                FormatBandwidth(r.busbw).c_str(), static_cast<long long>(r.wrong));
  }
  if (a.json) {
    nlohmann::ordered_json j;
    j["backend"] = c->backend();
    j["ranks"] = c->ranks();
    j["rows"] = rows;
    std::printf("%s\n", j.dump(2).c_str());
  }
  if (!a.trace.empty()) {
    TF_RETURN_IF_ERROR(WriteTraceFile(a.trace, result.records));
    if (!a.json) std::printf("probe collective: %zu records -> %s\n", result.records.size(), a.trace.c_str());
  }
  if (wrong > 0) return DataLoss("probe collective: " + std::to_string(wrong) + " element(s) came out wrong (the #wrong column)");
  return Status::Ok();
}

// ---- probe all ---------------------------------------------------------------------------------

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

Status RunProbeAll(const AllArgs& a) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // Everything is checked before anything is measured (or created).
  if (a.host.compute != "cpu" && a.host.compute != "cuda") {
    return InvalidArgument("compute device " + Quoted(a.host.compute) + " (known: cpu, cuda)");
  }
  for (const std::string& dir : a.dirs) {
    if (!fs::is_directory(dir, ec)) return InvalidArgument("--dir '" + dir + "': not a directory");
  }
  TF_ASSIGN_OR_RETURN(const auto locks,
                      LockDirs(a.dirs, "--dir", false, {{"-o", a.out, PathUse::kWritesIn}, {"--scenario", a.host.scenario, PathUse::kReads}}));
  real::DiskProbeOptions d;
  d.dirs = a.dirs;
  auto bytes = [](const std::string& s) { return ParseBytes(s, true); };
  TF_ASSIGN_OR_RETURN(d.block_bytes, ParseList<int64_t>(a.disk_sizes, bytes));
  TF_ASSIGN_OR_RETURN(d.queue_depths, ParseList<int32_t>(a.disk_qds, ParseInt));
  d.file_bytes = int64_t{512} << 20;
  d.duration_s = a.disk_duration_s;
  d.warmup_s = 0.1;
  d.repetitions = a.disk_reps;
  d.passes = a.disk_passes;
  d.backend = a.backend;
  TF_ASSIGN_OR_RETURN(policies::Scenario compute_scenario, ComputeScenario(a.host.scenario, a.host.sets));

  // With several directories, a read and a write window of all at once (1 MiB, depth 8): whether
  // they are one device (calibrate sets same_device_as) or several.
  real::DiskProbeOptions joint = d;
  joint.block_bytes = {int64_t{1} << 20};
  joint.queue_depths = {8};
  joint.ops = {"read", "write"};
  joint.device_counts = {static_cast<int32_t>(a.dirs.size())};
  joint.keep_files = true;
  d.keep_files = true;  // each directory's file is filled once and serves all of its steps
  real::DiskProbeOptions rw = d;
  rw.ops = {"rw"};
  rw.block_bytes = {int64_t{1} << 20};
  rw.queue_depths = {8};
  rw.streams = {{1, 1}, {2, 2}, {4, 4}};
  const bool several = a.dirs.size() > 1;
  TF_RETURN_IF_ERROR(real::CheckDiskProbeOptions(d).WithContext("probe all"));
  fs::create_directories(a.out, ec);
  if (ec) return InvalidArgument("-o '" + a.out + "': cannot create the directory (" + ec.message() + ")");

  // The measuring steps: each directory alone, one operation at a time (as the fits need: one
  // device's model per device; its records are named after its place in --dir order, nvme0,
  // nvme1, ..., as `run --disk` numbers them), all directories at once, and the host probes.
  struct Step {
    std::string file;   // records go to OUT/<file>.jsonl
    std::string label;  // printed as it ends
    std::function<StatusOr<std::vector<TraceRecord>>(const real::HostProbeOptions&)> run;
  };
  HostArgs host = a.host;
  std::vector<Step> steps;
  // Directory i alone under `options` (one op), its records named nvme<i>.
  auto one_dir = [&](size_t i, real::DiskProbeOptions options) {
    options.dirs = {a.dirs[i]};
    options.device_counts = {1};
    return [&, i, options](const real::HostProbeOptions& o) -> StatusOr<std::vector<TraceRecord>> {
      std::vector<TraceRecord> trace;
      TF_RETURN_IF_ERROR(real::RunDiskProbe(options, &trace, [&](const real::DiskProbeResult&, bool) {
                           if (o.progress) o.progress("disk point");
                         }).status().WithContext("--dir '" + a.dirs[i] + "'"));
      for (TraceRecord& r : trace) r.resource = "nvme" + std::to_string(i) + r.resource.substr(r.resource.find('.'));
      return trace;
    };
  };
  for (size_t i = 0; i < a.dirs.size(); ++i) {
    for (const std::string& op : d.ops) {
      real::DiskProbeOptions one = d;
      one.ops = {op};
      steps.push_back({"disk", "disk nvme" + std::to_string(i) + " " + op, one_dir(i, one)});
    }
    // Reader and writer streams at once (1 MiB, each stream depth 8): the mixed efficiency per
    // stream count (calibrate's nvmeD.mixed_streams).
    steps.push_back({"disk", "disk nvme" + std::to_string(i) + " rw", one_dir(i, rw)});
  }
  if (several) {  // devices numbered in --dir order, as above
    steps.push_back({"disk", "disk all at once", [&](const real::HostProbeOptions& o) -> StatusOr<std::vector<TraceRecord>> {
                       std::vector<TraceRecord> trace;
                       TF_RETURN_IF_ERROR(real::RunDiskProbe(joint, &trace, [&](const real::DiskProbeResult&, bool) {
                                            if (o.progress) o.progress("disk point (all directories at once)");
                                          }).status().WithContext("all --dir at once"));
                       return trace;
                     }});
  }
  steps.push_back({"copy", "copy", [&](const real::HostProbeOptions& o) { return RunHostProbe(HostProbe::kCopy, host, o); }});
  steps.push_back({"optimizer", "optimizer", [&](const real::HostProbeOptions& o) { return RunHostProbe(HostProbe::kOptimizer, host, o); }});
  steps.push_back({"memory", "memory", [&](const real::HostProbeOptions& o) { return RunHostProbe(HostProbe::kMemory, host, o); }});
  steps.push_back({"dispatch", "dispatch", [&](const real::HostProbeOptions& o) { return RunHostProbe(HostProbe::kDispatch, host, o); }});
  // The I/O path's load on the cores, on the first directory's disk (with two, also a reader on
  // the first beside a writer on the second): compute alone and beside each stream, windows three
  // disk repetitions long, two rounds at most (an emulated GPU only: its compute is what shares
  // the cores with the I/O path).
  const bool io_cpu = host.compute == "cpu";
  host.io.dir = a.dirs.front();
  if (a.dirs.size() > 1) {
    host.io.split_dir = a.dirs[1];
    host.io.streams.push_back(kSplitStream);
  }
  host.io.backend = a.backend;
  host.io.window_s = std::max(0.2, 3 * a.disk_duration_s);
  const int32_t io_cpu_rounds = std::min(host.reps, 2);
  const double io_cpu_points = io_cpu ? static_cast<double>(io_cpu_rounds) * static_cast<double>(host.io.streams.size()) : 0.0;
  // Its read and write streams run alone for a window too (real::ProbeIoCpu).
  const auto io_alone = std::count_if(host.io.streams.begin(), host.io.streams.end(),
                                      [](const real::IoCpuProbeOptions::Stream& s) { return s.op == "read" || s.op == "write"; });
  const double io_cpu_s = io_cpu ? io_cpu_points * (2 * host.io.window_s + 0.2) +
                                       static_cast<double>(io_cpu_rounds * io_alone) * (host.io.window_s + 0.1)
                                 : 0.0;
  if (io_cpu) {
    steps.push_back({"io_cpu", "io-cpu", [&](const real::HostProbeOptions& o) {
                       real::HostProbeOptions rounds = o;
                       rounds.repetitions = io_cpu_rounds;
                       return RunHostProbe(HostProbe::kIoCpu, host, rounds);
                     }});
  }

  // Compute is sampled all along, not in one go: one repetition of every probed shape before the
  // first step and after each (14 with two directories). On a shared VM the speed of a
  // two-thread layer halves and comes back in spells of seconds to minutes (measured here: one
  // probe at 26 GFLOP/s and the next, 90 s later, at 13), so a probe taken in one go measures
  // the spell it fell in; samples spread over the whole probe measure the machine's mix, which
  // is what the runs that follow see on average. Calibrate pools them into each point's trimmed
  // mean.
  const int32_t slices = static_cast<int32_t>(steps.size()) + 1;
  auto compute_slice = [&](int32_t slice) {
    return [&, slice](const real::HostProbeOptions& o) -> StatusOr<std::vector<TraceRecord>> {
      real::HostProbeOptions one = o;
      one.repetitions = 1;
      TF_ASSIGN_OR_RETURN(std::vector<TraceRecord> r, ProbeComputeOf(compute_scenario, one, host.threads));
      for (TraceRecord& x : r) x.iteration = slice;
      return r;
    };
  };
  {
    std::vector<Step> with_compute;
    for (int32_t k = 0; k < slices; ++k) {
      with_compute.push_back({"compute", fmt::format("compute {} of {}", k + 1, slices), compute_slice(k)});
      if (k < static_cast<int32_t>(steps.size())) with_compute.push_back(std::move(steps[static_cast<size_t>(k)]));
    }
    steps = std::move(with_compute);
  }

  // Each pass over a point is one step of progress: each directory alone for each op and for
  // the stream pairs, then all at once.
  real::DiskProbeOptions one = d;
  one.dirs = {a.dirs.front()};
  one.device_counts = {1};
  real::DiskProbeOptions one_rw = rw;
  one_rw.dirs = one.dirs;
  one_rw.device_counts = {1};
  const double disk_points =
      static_cast<double>((real::DiskProbePoints(one) + real::DiskProbePoints(one_rw)) * static_cast<int64_t>(a.dirs.size()) +
                          (several ? real::DiskProbePoints(joint) : 0)) *
      d.passes;
  std::printf("# tierflow probe all: %zu disk dir(s); gpu0 on %s; compute on %s (batch %lld, sequence %lld and shorter); "
              "records -> %s/\n",
              a.dirs.size(), a.host.compute == "cpu" ? "the CPU (emulated)" : "GPU 0 (cuda)", compute_scenario.model.name.c_str(),
              static_cast<long long>(compute_scenario.training.micro_batch_size),
              static_cast<long long>(compute_scenario.training.sequence_length), a.out.c_str());
  std::printf("# disk: %.0f measurements (points x passes) of %.1f s each, one directory at a time%s (about %.0f s, and the syncs after the points that wrote); the host probes take about "
              "%.0f s, compute sampled %d times in between\n",
              disk_points, d.warmup_s + d.repetitions * d.duration_s, several ? ", then all at once" : "",
              disk_points * (d.warmup_s + d.repetitions * d.duration_s + 0.02), 20 + io_cpu_s,
              slices);
  // The fits and the simulator share a device fairly between streams; a scheduler that does not
  // is worth knowing before the profile is trusted for schedules that overlap streams on one disk.
  for (size_t i = 0; i < a.dirs.size(); ++i) {
    const std::string note = real::IoSchedulerNote("nvme" + std::to_string(i), a.dirs[i]);
    if (!note.empty()) std::printf("# %s\n", note.c_str());
  }
  if (const std::string note = real::HugePageNote(real::TransparentHugePageMode()); !note.empty()) std::printf("# %s\n", note.c_str());
  std::fflush(stdout);

  // Progress in points: disk points, then each host probe's reports (host_probes.h: one per copy
  // size and kind, per compute repetition with its warm-up and shape, per optimizer count and
  // thread count, per memory thread count).
  TF_ASSIGN_OR_RETURN(std::vector<int64_t> copy_sizes, ParseList<int64_t>(host.sizes, bytes));
  TF_ASSIGN_OR_RETURN(std::vector<int64_t> counts, ParseList<int64_t>(host.elements, bytes));
  const double threads = host.threads > 0 ? host.threads : std::max(1u, std::thread::hardware_concurrency());
  // A compute slice reports a warm-up and a repetition per probed sequence length.
  const double compute_points =
      slices * 2.0 * static_cast<double>(ProbedSequences(compute_scenario.training.sequence_length).size());
  const double host_points = 2.0 * static_cast<double>(copy_sizes.size()) + compute_points +
                             static_cast<double>(counts.size()) * threads + threads + 1 + io_cpu_points;
  Progress progress("probing", disk_points + host_points);
  double done = 0;
  const double t0 = real::MonotonicSeconds();
  // Each record file is written again as each of its steps ends, so a probe stopped part-way (a
  // time limit, a failed step) leaves what it measured; an earlier probe's files in OUT go first,
  // so that what OUT holds is this probe's alone.
  std::map<std::string, std::vector<TraceRecord>> files;
  auto path_of = [&](const std::string& name) { return (fs::path(a.out) / (name + ".jsonl")).string(); };
  for (const Step& step : steps) fs::remove(path_of(step.file), ec);
  Status status = Status::Ok();
  for (Step& step : steps) {
    real::HostProbeOptions o = HostOptions(host, &progress, &done);
    const double start = real::MonotonicSeconds();
    auto records = step.run(o);
    progress.Update(done);
    if (!records.ok()) {
      status = Status(records.status().code(), "probe all: " + step.label + ": " + records.status().message() +
                                                   (files.empty() ? " (no record file written)"
                                                                  : " (the steps before it are in " + a.out + ": an incomplete probe)"));
      break;
    }
    progress.Finish();
    std::printf("  %-20s %6zu records  %6.1f s\n", step.label.c_str(), records->size(), real::MonotonicSeconds() - start);
    std::fflush(stdout);
    std::vector<TraceRecord>& all = files[step.file];
    all.insert(all.end(), std::make_move_iterator(records->begin()), std::make_move_iterator(records->end()));
    status = WriteTraceFile(path_of(step.file), all);
    if (!status.ok()) break;
  }
  progress.Finish();
  for (const std::string& dir : a.dirs) fs::remove(real::ProbeFilePath(dir), ec);  // kept between the steps
  TF_RETURN_IF_ERROR(status);
  for (const auto& [name, records] : files) {
    std::printf("  %-10s %6zu records -> %s\n", name.c_str(), records.size(), path_of(name).c_str());
  }
  std::printf("  %-10s skipped: measure it across ranks with `mpirun -np N tierflow probe collective --trace %s/collective.jsonl`\n",
              "collective", a.out.c_str());
  std::printf("# done in %.1f s; next: tierflow calibrate %s -o profile.yaml\n", real::MonotonicSeconds() - t0, a.out.c_str());
  return Status::Ok();
}

Command MakeProbe(CLI::App& parent) {
  CLI::App* probe = parent.add_subcommand("probe", "Measure this machine for calibration (disk, copies, compute, optimizer, memory)");
  probe->require_subcommand(1);
  CLI::App* disk = probe->add_subcommand("disk", "Sweep request size x queue depth x op x devices on directories");
  auto* a = Keep<ProbeArgs>();
  disk->add_option("--dir", a->dirs, "A directory on the device to probe (repeat for several devices)")->required();
  disk->add_option("--sizes", a->sizes, "Request sizes, comma-separated (4KiB..16MiB)");
  disk->add_option("--qd", a->qds, "Queue depths, comma-separated (1..128)");
  disk->add_option("--ops", a->ops, "Operations: read, write, mix (70% read / 30% write), rw (reader and writer streams at once)");
  disk->add_option("--streams", a->streams, "For op rw: READERS:WRITERS stream counts, comma-separated (each stream --qd deep; default 1:1,2:2,4:4)");
  disk->add_option("--devices", a->devices, "How many of the directories at once, comma-separated (default: 1 and all)");
  disk->add_option("--file-size", a->file_size, "Size of the probe file in each directory");
  AddNumber(disk, "--duration", &a->duration_s, "Seconds per repetition", 0.001, 86400.0);
  AddNumber(disk, "--warmup", &a->warmup_s, "Warm-up seconds per point", 0.0, 86400.0);
  AddNumber(disk, "--reps", &a->reps, "Repetitions per point and pass", 1, 1000000);
  AddNumber(disk, "--passes", &a->passes, "Passes over all points, every other one backwards: a point is the median of its windows from all passes", 1, 1000);
  disk->add_flag("--random", a->random, "Random block offsets (default: sequential)");
  disk->add_option("--backend", a->backend, "Storage back-end: auto, uring, posix");
  disk->add_flag("--json", a->json, "Print JSON instead of the table");
  disk->add_option("--trace", a->trace, "Write trace records (JSON Lines) for calibration");

  // The host probes: one subcommand each, all writing records with --trace.
  auto* h = Keep<HostArgs>();
  auto* which = Keep<HostProbe>();
  auto host = [&](const char* name, const char* help, HostProbe w) {
    CLI::App* app = probe->add_subcommand(name, help);
    AddNumber(app, "--reps", &h->reps, "Measured repetitions per point (after one warm-up)", 1, 1000000);
    AddNumber(app, "--threads", &h->threads, "Most threads to use (0: every core)", 0, 1024);
    app->add_option("--trace", h->trace, "Write trace records (JSON Lines) for calibration");
    if (w == HostProbe::kCopy || w == HostProbe::kCompute) {
      app->add_option("--compute", h->compute, "gpu0's device, as `run --compute`: cpu (emulated in host memory) or cuda (GPU 0)");
    }
    app->callback([which, w] { *which = w; });
    return app;
  };
  host("copy", "gpu0's copies (h2d, d2h), pinned and pageable, by size", HostProbe::kCopy)
      ->add_option("--sizes", h->sizes, "Copy sizes, comma-separated");
  CLI::App* compute = host("compute", "Each layer's forward and backward at the scenario's shape (and shorter sequences)", HostProbe::kCompute);
  compute->add_option("input", h->scenario, "SCENARIO or SCHEDULE whose model and shape to probe (default: tiny at sequence 128)");
  AddSetOption(compute, &h->sets);
  host("optimizer", "CPU AdamW and the fp32->bf16 cast by element count and thread count", HostProbe::kOptimizer)
      ->add_option("--elements", h->elements, "Element counts, comma-separated");
  host("memory", "Streaming memory bandwidth (an in-place update, as the optimizer does) by thread count", HostProbe::kMemory)
      ->add_option("--bytes", h->memory, "Bytes of each of the four arrays");
  host("dispatch", "The executor's hand-over of a task to a worker thread and back (two thread wake-ups)", HostProbe::kDispatch);
  CLI::App* io_cpu = host("io-cpu", "Compute on every core alone and beside disk streams and hand-overs: what the I/O path and the executor's hand-overs take from the cores, and what the compute takes from the streams",
                          HostProbe::kIoCpu);
  io_cpu->add_option("--dir", h->io_dirs,
                     "A directory on the disk whose streams to run; a second (another disk entry, its own ring) for the split stream")
      ->required();
  io_cpu->add_option("input", h->scenario, "SCENARIO or SCHEDULE whose model and shape to compute (default: tiny at sequence 128)");
  AddNumber(io_cpu, "--window", &h->io.window_s, "Seconds of each window: compute alone, a read or write stream alone, then the two at once", 0.001, 86400.0);
  io_cpu->add_option("--backend", h->io.backend, "Storage back-end: auto, uring, posix");
  io_cpu->add_option("--streams", h->io_streams, "Streams, comma-separated: OP:BLOCK:DEPTH disk streams (OP read, write, rw: a reader and a writer at once, or split: a reader on the first --dir and a writer on the second at once), or dispatch (a chain of the executor's hand-overs, each after an idle gap; default read and write at 16KiB:1, 256KiB:4, 1MiB:8, rw at 16KiB:1 and 1MiB:8, dispatch, and with two --dir split at 1MiB:8)");
  AddSetOption(io_cpu, &h->sets);

  CLI::App* coll = probe->add_subcommand("collective", "All-gather, reduce-scatter and all-reduce by message size across the ranks (run under mpirun)");
  auto* ca = Keep<CollectiveArgs>();
  coll->add_option("--backend", ca->backend, "Collective back-end: auto (mpi under mpirun, else local), local, mpi");
  coll->add_option("--sizes", ca->sizes, "Message sizes, comma-separated (nccl-tests' size: the gathered size of an all-gather)");
  coll->add_option("--ops", ca->ops, "Collectives, comma-separated: allgather, reducescatter, allreduce");
  AddNumber(coll, "--reps", &ca->reps, "Measured repetitions per point (after one warm-up)", 1, 1000000);
  coll->add_option("--trace", ca->trace, "Write trace records (JSON Lines) for calibration (rank 0)");
  coll->add_flag("--json", ca->json, "Print JSON instead of the table");

  CLI::App* all = probe->add_subcommand("all", "Every probe in a bounded time, one records file each, for tierflow calibrate");
  auto* al = Keep<AllArgs>();
  all->add_option("--dir", al->dirs, "A directory on each disk the runs will use, in --disk order")->required();
  all->add_option("-o,--out", al->out, "Directory for the records (disk.jsonl, copy.jsonl, ...)")->required();
  all->add_option("--scenario", al->host.scenario, "SCENARIO or SCHEDULE whose model and shape the compute probe runs (default: tiny, sequence 128)");
  AddSetOption(all, &al->host.sets);
  all->add_option("--disk-sizes", al->disk_sizes, "Disk request sizes, comma-separated");
  all->add_option("--disk-qd", al->disk_qds, "Disk queue depths, comma-separated");
  AddNumber(all, "--disk-duration", &al->disk_duration_s, "Seconds per disk repetition", 0.001, 86400.0);
  AddNumber(all, "--disk-passes", &al->disk_passes, "Passes over the disk points, every other one backwards (each a warm-up and one repetition): a point's windows come from moments a pass apart", 1, 1000);
  AddNumber(all, "--reps", &al->host.reps, "Repetitions of the host probes", 1, 1000000);
  all->add_option("--compute", al->host.compute, "gpu0's device for the copy and compute probes: cpu or cuda (GPU 0)");
  all->add_option("--backend", al->backend, "Storage back-end: auto, uring, posix");

  return Command{probe, [a, h, which, al, ca, disk, all, coll] {
                   if (disk->parsed()) return RunProbeDisk(*a);
                   if (coll->parsed()) return RunProbeCollective(*ca);
                   if (all->parsed()) return RunProbeAll(*al);
                   std::vector<CommandPath> paths = {{"--trace", h->trace, PathUse::kWrites}, {"input", h->scenario, PathUse::kReads}};
                   for (const std::string& d : h->io_dirs) paths.push_back({"--dir", d, PathUse::kWritesIn});
                   TF_RETURN_IF_ERROR(CheckCommandPaths(paths));
                   double done = 0;
                   real::HostProbeOptions o = HostOptions(*h, nullptr, &done);
                   auto records = RunHostProbe(*which, *h, o);
                   TF_RETURN_IF_ERROR(records.status());
                   return WriteRecords(h->trace, *records, "probe");
                 }};
}

TIERFLOW_COMMAND(MakeProbe);

}  // namespace
}  // namespace tierflow::cli
