// `tierflow probe disk --dir D [--dir D2 ...]`: sweeps request size × queue depth × op ×
// concurrent devices on the storage back-end and prints an nccl-tests-style table (or --json);
// --trace writes the calibration records. Writes only one file inside each given directory and
// removes it.
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "command.h"
#include "tierflow/core/units.h"
#include "tierflow/real/disk_probe.h"

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

StatusOr<int32_t> ParseInt(const std::string& s) {
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  if (end == s.c_str() || *end != '\0' || v <= 0) return InvalidArgument("expected a positive integer, got '" + s + "'");
  return static_cast<int32_t>(v);
}

struct ProbeArgs {
  std::vector<std::string> dirs;
  std::string sizes = "4KiB,64KiB,1MiB,16MiB";
  std::string qds = "1,8,32,128";
  std::string ops = "read,write,mix";
  std::string devices;
  std::string file_size = "1GiB";
  double duration_s = 1.0;
  double warmup_s = 0.25;
  int reps = 3;
  bool random = false;
  bool json = false;
  std::string backend = "auto";
  std::string trace;
};

Status RunProbeDisk(const ProbeArgs& a) {
  real::DiskProbeOptions o;
  o.dirs = a.dirs;
  auto bytes = [](const std::string& s) { return ParseBytes(s, true); };
  auto word = [](const std::string& s) { return StatusOr<std::string>(s); };
  TF_ASSIGN_OR_RETURN(o.block_bytes, ParseList<int64_t>(a.sizes, bytes));
  TF_ASSIGN_OR_RETURN(o.queue_depths, ParseList<int32_t>(a.qds, ParseInt));
  TF_ASSIGN_OR_RETURN(o.ops, ParseList<std::string>(a.ops, word));
  if (!a.devices.empty()) {
    TF_ASSIGN_OR_RETURN(o.device_counts, ParseList<int32_t>(a.devices, ParseInt));
  }
  TF_ASSIGN_OR_RETURN(o.file_bytes, ParseBytes(a.file_size, true));
  o.duration_s = a.duration_s;
  o.warmup_s = a.warmup_s;
  o.repetitions = a.reps;
  o.random = a.random;
  o.backend = a.backend;
  if (!a.json) {
    std::printf("# tierflow probe disk: %zu dir(s), file %s each, %s offsets, warm-up %.2f s, %d x %.2f s per point\n",
                o.dirs.size(), FormatBytes(static_cast<double>(o.file_bytes)).c_str(), o.random ? "random" : "sequential",
                o.warmup_s, o.repetitions, o.duration_s);
    std::printf("# GB/s = bytes completed / window (median of repetitions; min, max); latency = completion - submission\n");
    std::fputs(real::FormatDiskProbeTable({}, true).c_str(), stdout);
    std::fflush(stdout);
  }
  std::vector<TraceRecord> trace;
  auto results = real::RunDiskProbe(o, a.trace.empty() ? nullptr : &trace, [&](const real::DiskProbeResult& r) {
    if (!a.json) {
      std::fputs(real::FormatDiskProbeTable({r}, false).c_str(), stdout);
      std::fflush(stdout);
    }
  });
  TF_RETURN_IF_ERROR(results.status());
  if (!a.trace.empty()) TF_RETURN_IF_ERROR(WriteTraceFile(a.trace, trace));
  if (a.json) {
    nlohmann::json j;
    j["backend"] = results->empty() ? "" : results->front().backend;
    j["dirs"] = o.dirs;
    nlohmann::json list = nlohmann::json::array();
    for (auto& r : *results) {
      list.push_back({{"op", r.op}, {"block_bytes", r.block_bytes}, {"queue_depth", r.queue_depth}, {"devices", r.devices},
                      {"bytes_per_s", r.bytes_per_s}, {"bytes_per_s_min", r.bytes_per_s_min},
                      {"bytes_per_s_max", r.bytes_per_s_max}, {"iops", r.iops}, {"p50_latency_s", r.p50_latency_s},
                      {"p99_latency_s", r.p99_latency_s}, {"wrong", r.wrong}});
    }
    j["results"] = list;
    std::printf("%s\n", j.dump(1).c_str());
  } else {
    int64_t wrong = 0;
    for (auto& r : *results) wrong += r.wrong;
    std::printf("# backend %s; %zu points; #wrong total %lld\n", results->empty() ? "-" : results->front().backend.c_str(),
                results->size(), static_cast<long long>(wrong));
  }
  return Status::Ok();
}

Command MakeProbe(CLI::App& parent) {
  CLI::App* probe = parent.add_subcommand("probe", "Measure the hardware (disk) for calibration");
  probe->require_subcommand(1);
  CLI::App* disk = probe->add_subcommand("disk", "Sweep request size x queue depth x op x devices on directories");
  auto* a = Keep<ProbeArgs>();
  disk->add_option("--dir", a->dirs, "A directory on the device to probe (repeat for several devices)")->required();
  disk->add_option("--sizes", a->sizes, "Request sizes, comma-separated (4KiB..16MiB)");
  disk->add_option("--qd", a->qds, "Queue depths, comma-separated (1..128)");
  disk->add_option("--ops", a->ops, "Operations: read, write, mix (70% read / 30% write)");
  disk->add_option("--devices", a->devices, "How many of the directories at once, comma-separated (default: 1 and all)");
  disk->add_option("--file-size", a->file_size, "Size of the probe file in each directory");
  disk->add_option("--duration", a->duration_s, "Seconds per repetition");
  disk->add_option("--warmup", a->warmup_s, "Warm-up seconds per point");
  disk->add_option("--reps", a->reps, "Repetitions per point");
  disk->add_flag("--random", a->random, "Random block offsets (default: sequential)");
  disk->add_option("--backend", a->backend, "Storage back-end: auto, uring, posix");
  disk->add_flag("--json", a->json, "Print JSON instead of the table");
  disk->add_option("--trace", a->trace, "Write trace records (JSON Lines) for calibration");
  return Command{probe, [a] { return RunProbeDisk(*a); }};
}

TIERFLOW_COMMAND(MakeProbe);

}  // namespace
}  // namespace tierflow::cli
