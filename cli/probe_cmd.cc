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

#include "probe.h"

namespace tierflow::cli {
namespace {

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
  TF_ASSIGN_OR_RETURN(o.block_bytes, probe::ParseList<int64_t>(a.sizes, bytes));
  TF_ASSIGN_OR_RETURN(o.queue_depths, probe::ParseList<int32_t>(a.qds, probe::ParseInt));
  TF_ASSIGN_OR_RETURN(o.ops, probe::ParseList<std::string>(a.ops, word));
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
  TF_ASSIGN_OR_RETURN(o.streams, probe::ParseList<StreamPair>(a.streams, pair));
  if (!a.devices.empty()) {
    TF_ASSIGN_OR_RETURN(o.device_counts, probe::ParseList<int32_t>(a.devices, probe::ParseInt));
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
  TF_ASSIGN_OR_RETURN(o.sizes, probe::ParseList<int64_t>(a.sizes, bytes));
  o.ops.clear();
  std::stringstream ops(a.ops);
  for (std::string name; std::getline(ops, name, ',');) {
    const std::optional<Op> op = OpFromName(name);
    if (!op || !IsCollectiveOp(*op)) return InvalidArgument("--ops: '" + name + "' is not a collective (allgather, reducescatter, allreduce)");
    o.ops.push_back(*op);
  }
  o.repetitions = a.reps;
  const std::string backend = a.backend == "auto" ? AutoCollectiveBackend() : a.backend;
  // nccl: on the GPU of each rank's place on its machine, bootstrapped through the ranks' own
  // back-end (mpi under mpirun), its buffers in that GPU's memory.
  const bool nccl = backend == "nccl" || backend == "nccl-native";
  if (!nccl && backend != "local" && backend != "mpi") {
    return InvalidArgument("--backend '" + backend + "' (auto, local, mpi, nccl, nccl-native; this build has " + real::CollectiveBackends() +
                           (real::HaveNccl() ? ", nccl" : "") + ")");
  }
  TF_ASSIGN_OR_RETURN(std::unique_ptr<real::Collective> c, real::OpenCollective(nccl ? AutoCollectiveBackend() : backend));
  std::unique_ptr<real::DeviceMemory> memory;
  if (nccl) {
    TF_ASSIGN_OR_RETURN(c, real::OpenNcclCollective(*c, real::kTheLocalRanksGpu, backend == "nccl-native"));
    TF_ASSIGN_OR_RETURN(memory, real::OpenDeviceMemory(*c));
    o.memory = memory.get();
  }
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
  auto* h = Keep<probe::HostArgs>();
  auto* which = Keep<probe::HostProbe>();
  auto host = [&](const char* name, const char* help, probe::HostProbe w) {
    CLI::App* app = probe->add_subcommand(name, help);
    AddNumber(app, "--reps", &h->reps, "Measured repetitions per point (after one warm-up)", 1, 1000000);
    AddNumber(app, "--threads", &h->threads, "Most threads to use (0: every core)", 0, 1024);
    app->add_option("--trace", h->trace, "Write trace records (JSON Lines) for calibration");
    if (w == probe::HostProbe::kCopy || w == probe::HostProbe::kCompute) {
      app->add_option("--compute", h->compute, "gpu0's device, as `run --compute`: cpu (emulated in host memory) or cuda (GPU 0)");
    }
    app->callback([which, w] { *which = w; });
    return app;
  };
  host("copy", "gpu0's copies (h2d, d2h), pinned and pageable, by size", probe::HostProbe::kCopy)
      ->add_option("--sizes", h->sizes, "Copy sizes, comma-separated");
  CLI::App* compute = host("compute", "Each layer's forward and backward at the scenario's shape (and shorter sequences)", probe::HostProbe::kCompute);
  compute->add_option("input", h->scenario, "SCENARIO or SCHEDULE whose model and shape to probe (default: tiny at sequence 128)");
  AddSetOption(compute, &h->sets);
  host("optimizer", "CPU AdamW and the fp32->bf16 cast by element count and thread count", probe::HostProbe::kOptimizer)
      ->add_option("--elements", h->elements, "Element counts, comma-separated");
  host("memory", "Streaming memory bandwidth (an in-place update, as the optimizer does) by thread count", probe::HostProbe::kMemory)
      ->add_option("--bytes", h->memory, "Bytes of each of the four arrays");
  host("dispatch", "The executor's hand-over of a task to a worker thread and back (two thread wake-ups)", probe::HostProbe::kDispatch);
  CLI::App* io_cpu = host("io-cpu", "Compute on every core alone and beside disk streams and hand-overs: what the I/O path and the executor's hand-overs take from the cores, and what the compute takes from the streams",
                          probe::HostProbe::kIoCpu);
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
  coll->add_option("--backend", ca->backend,
                   "Collective back-end: auto (mpi under mpirun, else local), local, mpi, nccl (GPU memory, sums in rank order as runs "
                   "make them), nccl-native (NCCL's own sums: what the rank order costs)");
  coll->add_option("--sizes", ca->sizes, "Message sizes, comma-separated (nccl-tests' size: the gathered size of an all-gather)");
  coll->add_option("--ops", ca->ops, "Collectives, comma-separated: allgather, reducescatter, allreduce");
  AddNumber(coll, "--reps", &ca->reps, "Measured repetitions per point (after one warm-up)", 1, 1000000);
  coll->add_option("--trace", ca->trace, "Write trace records (JSON Lines) for calibration (rank 0)");
  coll->add_flag("--json", ca->json, "Print JSON instead of the table");

  CLI::App* all = probe->add_subcommand("all", "Every probe in a bounded time, one records file each, for tierflow calibrate");
  auto* al = Keep<probe::AllArgs>();
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
                   if (all->parsed()) return probe::RunProbeAll(*al);
                   std::vector<CommandPath> paths = {{"--trace", h->trace, PathUse::kWrites}, {"input", h->scenario, PathUse::kReads}};
                   for (const std::string& d : h->io_dirs) paths.push_back({"--dir", d, PathUse::kWritesIn});
                   TF_RETURN_IF_ERROR(CheckCommandPaths(paths));
                   double done = 0;
                   real::HostProbeOptions o = probe::HostOptions(*h, nullptr, &done);
                   auto records = probe::RunHostProbe(*which, *h, o);
                   TF_RETURN_IF_ERROR(records.status());
                   return probe::WriteRecords(h->trace, *records, "probe");
                 }};
}

TIERFLOW_COMMAND(MakeProbe);

}  // namespace
}  // namespace tierflow::cli
