// `tierflow hardware`: lists the hardware presets, or shows one (or a YAML profile given with
// --file) as a table, as YAML (`--yaml`: a preset's text with its source comments) or as JSON.
#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "command.h"
#include "inputs.h"
#include "tierflow/core/units.h"
#include "tierflow/models/hardware.h"
#include "tierflow/models/perf.h"

namespace tierflow::cli {
namespace {

struct HardwareOptions {
  std::string preset;
  std::string file;
  bool json = false;
  bool yaml = false;
  bool list = false;
};

nlohmann::json ToJson(const models::HardwareSpec& hw) {
  const models::NodeSpec& n = hw.node;
  const auto io_points = [](const std::vector<models::IoCpuPoint>& points) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& p : points) a.push_back({{"block_bytes", p.block_bytes}, {"queue_depth", p.queue_depth}, {"cores", p.cores}});
    return a;
  };
  const auto kept_points = [](const std::vector<models::IoRateKept>& points) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& p : points) a.push_back({{"block_bytes", p.block_bytes}, {"queue_depth", p.queue_depth}, {"kept", p.kept}});
    return a;
  };
  nlohmann::json j;
  j["nodes"] = hw.nodes;
  j["node"] = {{"name", n.name},
               {"source", n.source},
               {"gpu_count", n.gpu_count},
               {"gpu",
                {{"name", n.gpu.name},
                 {"hbm_bytes", n.gpu.hbm_bytes},
                 {"peak_flops", n.gpu.peak_flops},
                 {"hbm_bw_bytes_per_s", n.gpu.hbm_bw_bytes_per_s},
                 {"compute_efficiency", n.gpu.compute_efficiency},
                 {"forward_efficiency", models::ComputeEfficiency(n.gpu, Phase::kForward)},
                 {"backward_efficiency", models::ComputeEfficiency(n.gpu, Phase::kBackward)},
                 {"kernel_overhead_s", n.gpu.kernel_overhead_s},
                 {"shares_host_cores", n.gpu.shares_host_cores}}},
               {"pcie",
                {{"h2d_bw_bytes_per_s", n.pcie.h2d_bw_bytes_per_s},
                 {"d2h_bw_bytes_per_s", n.pcie.d2h_bw_bytes_per_s},
                 {"d2h_bf16_bw_bytes_per_s", n.pcie.d2h_bf16_bw_bytes_per_s},
                 {"pageable_factor", n.pcie.pageable_factor},
                 {"latency_s", n.pcie.latency_s},
                 {"root_complex_bw_bytes_per_s", n.pcie.root_complex_bw_bytes_per_s}}},
               {"cpu",
                {{"cores", n.cpu.cores},
                 {"host_memory_bytes", n.cpu.host_memory_bytes},
                 {"memory_bw_bytes_per_s", n.cpu.memory_bw_bytes_per_s},
                 {"adam_elements_per_s_per_core", n.cpu.adam_elements_per_s_per_core},
                 {"convert_bytes_per_s_per_core", n.cpu.convert_bytes_per_s_per_core},
                 {"task_overhead_s", n.cpu.task_overhead_s},
                 {"task_overhead_cpu_s", n.cpu.task_overhead_cpu_s},
                 {"io_read_cores", io_points(n.cpu.io_read_cores)},
                 {"io_write_cores", io_points(n.cpu.io_write_cores)},
                 {"io_read_beside_compute", kept_points(n.cpu.io_read_beside_compute)},
                 {"io_write_beside_compute", kept_points(n.cpu.io_write_beside_compute)}}},
               {"interconnect",
                {{"kind", n.interconnect.kind},
                 {"bus_bw_bytes_per_s", n.interconnect.bus_bw_bytes_per_s},
                 {"latency_s", n.interconnect.latency_s}}},
               {"nic_bw_bytes_per_s", n.nic_bw_bytes_per_s}};
  nlohmann::json disks = nlohmann::json::array();
  const auto measured = [](const std::vector<models::MeasuredBandwidth>& points) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& m : points) a.push_back({{"block_bytes", m.block_bytes}, {"queue_depth", m.queue_depth}, {"bytes_per_s", m.bytes_per_s}});
    return a;
  };
  for (const auto& d : n.nvme) {
    disks.push_back({{"name", d.name},
                     {"capacity_bytes", d.capacity_bytes},
                     {"read_bw_bytes_per_s", d.read_bw_bytes_per_s},
                     {"write_bw_bytes_per_s", d.write_bw_bytes_per_s},
                     {"read_latency_s", d.read_latency_s},
                     {"write_latency_s", d.write_latency_s},
                     {"mixed_efficiency", d.mixed_efficiency},
                     {"read_bw_by_request", measured(d.read_bw_by_request)},
                     {"write_bw_by_request", measured(d.write_bw_by_request)}});
  }
  j["node"]["nvme"] = disks;
  nlohmann::json remote = nlohmann::json::array();
  for (const auto& t : n.remote) {
    remote.push_back({{"name", t.name},
                      {"read_bw_bytes_per_s", t.read_bw_bytes_per_s},
                      {"write_bw_bytes_per_s", t.write_bw_bytes_per_s},
                      {"latency_s", t.latency_s}});
  }
  j["node"]["remote"] = remote;
  return j;
}

void PrintTable(const models::HardwareSpec& hw) {
  const models::NodeSpec& n = hw.node;
  fmt::print("hardware {}  ({} node{})\n  source: {}\n\n", n.name, hw.nodes,
             hw.nodes == 1 ? "" : "s", n.source);
  fmt::print(
      "  gpu         {} x {}: {} HBM, {:.1f} TFLOP/s peak x {:.2f} efficiency, {} HBM, "
      "{} per task{}\n",
      n.gpu_count, n.gpu.name, FormatBytes(static_cast<double>(n.gpu.hbm_bytes)),
      n.gpu.peak_flops / 1e12, n.gpu.compute_efficiency, FormatBandwidth(n.gpu.hbm_bw_bytes_per_s),
      FormatDuration(n.gpu.kernel_overhead_s), n.gpu.shares_host_cores ? ", on the host's cores" : "");
  fmt::print(
      "  pcie        h2d {}, d2h {} pinned{} (pageable x {:.2f}), latency {}, root complex "
      "{}\n",
      FormatBandwidth(n.pcie.h2d_bw_bytes_per_s), FormatBandwidth(n.pcie.d2h_bw_bytes_per_s),
      n.pcie.d2h_bf16_bw_bytes_per_s > 0
          ? fmt::format(", {} narrowing to bf16", FormatBandwidth(n.pcie.d2h_bf16_bw_bytes_per_s))
          : std::string(),
      n.pcie.pageable_factor, FormatDuration(n.pcie.latency_s),
      FormatBandwidth(n.pcie.root_complex_bw_bytes_per_s));
  fmt::print(
      "  cpu         {} cores, {} host memory at {}, Adam {:.3g} elements/s/core, convert "
      "{}/core{}\n",
      n.cpu.cores, FormatBytes(static_cast<double>(n.cpu.host_memory_bytes)),
      FormatBandwidth(n.cpu.memory_bw_bytes_per_s), n.cpu.adam_elements_per_s_per_core,
      FormatBandwidth(n.cpu.convert_bytes_per_s_per_core),
      n.cpu.task_overhead_s > 0
          ? fmt::format(", {} per task handed to a worker{}", FormatDuration(n.cpu.task_overhead_s),
                        n.cpu.task_overhead_cpu_s > 0 ? fmt::format(" ({} of core-time)", FormatDuration(n.cpu.task_overhead_cpu_s))
                                                      : std::string())
          : std::string());
  // A line of stream classes and their figures (`value`: the field of each point), if any.
  const auto per_class = [](const std::string& line, const auto& points, auto value) {
    if (points.empty()) return;
    std::string text;
    for (const auto& p : points) {
      text += fmt::format("{}{} x{} {:.2f}", text.empty() ? "" : ", ", FormatBytes(static_cast<double>(p.block_bytes)), p.queue_depth, p.*value);
    }
    fmt::print("  {}: {}\n", line, text);
  };
  per_class("io cpu      cores a read stream keeps busy", n.cpu.io_read_cores, &models::IoCpuPoint::cores);
  per_class("io cpu      cores a write stream keeps busy", n.cpu.io_write_cores, &models::IoCpuPoint::cores);
  per_class("io beside   the rate a read stream keeps while compute holds every core", n.cpu.io_read_beside_compute, &models::IoRateKept::kept);
  per_class("io beside   the rate a write stream keeps while compute holds every core", n.cpu.io_write_beside_compute, &models::IoRateKept::kept);
  fmt::print("  collective  {} busbw {}, alpha {}\n", n.interconnect.kind,
             FormatBandwidth(n.interconnect.bus_bw_bytes_per_s),
             FormatDuration(n.interconnect.latency_s));
  if (n.nic_bw_bytes_per_s > 0)
    fmt::print("  nic         {}\n", FormatBandwidth(n.nic_bw_bytes_per_s));
  fmt::print("\n  {:<3} {:<30} {:>10} {:>11} {:>11} {:>9} {:>9} {:>5} {:>14}  {:>14}\n", "#", "nvme",
             "capacity", "read", "write", "r lat", "w lat", "mix", "read 1MiB qd8",
             "read 4KiB qd32");
  // A request column from the disk's measured points, not the fit, is marked.
  bool any_measured = false;
  const auto read_at = [&](const models::NvmeSpec& d, int64_t block, int32_t depth) {
    const bool measured = models::DiskStreamMeasured(d, /*write=*/false, block, depth);
    any_measured = any_measured || measured;
    return FormatBandwidth(models::DiskReadBandwidth(d, block, depth)) + (measured ? "*" : " ");
  };
  for (size_t i = 0; i < n.nvme.size(); ++i) {
    const auto& d = n.nvme[i];
    std::string line = fmt::format("  {:<3} {:<30} {:>10} {:>11} {:>11} {:>9} {:>9} {:>5.2f} {:>15} {:>15}", i,
                                   d.name, FormatBytes(static_cast<double>(d.capacity_bytes)),
                                   FormatBandwidth(d.read_bw_bytes_per_s), FormatBandwidth(d.write_bw_bytes_per_s),
                                   FormatDuration(d.read_latency_s), FormatDuration(d.write_latency_s),
                                   d.mixed_efficiency, read_at(d, 1 << 20, 8), read_at(d, 4096, 32));
    line.erase(line.find_last_not_of(' ') + 1);
    fmt::print("{}\n", line);
  }
  if (any_measured) fmt::print("  * from the disk's measured points (read_bw_by_request), not the fit\n");
  for (size_t i = 0; i < n.remote.size(); ++i) {
    const auto& t = n.remote[i];
    fmt::print("  remote {:<24} read {}, write {}, latency {}\n", t.name,
               FormatBandwidth(t.read_bw_bytes_per_s), FormatBandwidth(t.write_bw_bytes_per_s),
               FormatDuration(t.latency_s));
  }
}

Status Run(const HardwareOptions& o) {
  if (o.json && o.yaml) return InvalidArgument("give --json or --yaml, not both");
  if (o.list && (!o.preset.empty() || !o.file.empty())) return InvalidArgument("--list lists the presets: give it alone");
  if (o.preset.empty() && o.file.empty()) {
    if (o.json) {
      nlohmann::json arr = nlohmann::json::array();
      for (const auto& name : models::HardwarePresetNames()) arr.push_back(name);
      fmt::print("{}\n", arr.dump(2));
      return Status::Ok();
    }
    fmt::print("{:<18} {:>5} {:<16} {:>10} {:>5}  {}\n", "preset", "gpus", "gpu", "hbm", "nvme",
               "source");
    for (const auto& name : models::HardwarePresetNames()) {
      TF_ASSIGN_OR_RETURN(models::HardwareSpec hw, models::HardwarePreset(name));
      fmt::print("{:<18} {:>5} {:<16} {:>10} {:>5}  {}\n", name, hw.node.gpu_count,
                 hw.node.gpu.name, FormatBytes(static_cast<double>(hw.node.gpu.hbm_bytes)),
                 hw.node.nvme.size(), hw.node.source);
    }
    return Status::Ok();
  }
  if (!o.preset.empty() && !o.file.empty())
    return InvalidArgument("give a preset or --file, not both");
  models::HardwareSpec hw;
  if (!o.file.empty()) {
    TF_ASSIGN_OR_RETURN(hw, LoadHardwareFile(o.file));
  } else {
    TF_ASSIGN_OR_RETURN(hw, models::HardwarePreset(o.preset));
    if (o.yaml) {
      TF_ASSIGN_OR_RETURN(std::string text, models::HardwarePresetYaml(o.preset));
      fmt::print("{}", text);
      return Status::Ok();
    }
  }
  if (o.yaml) {
    fmt::print("{}", models::HardwareToYaml(hw));
  } else if (o.json) {
    fmt::print("{}\n", ToJson(hw).dump(2));
  } else {
    PrintTable(hw);
  }
  return Status::Ok();
}

Command MakeHardwareCommand(CLI::App& parent) {
  HardwareOptions* o = Keep<HardwareOptions>();
  CLI::App* app = parent.add_subcommand(
      "hardware", "List hardware presets, or show one (or a YAML profile) with its numbers");
  app->add_option("preset", o->preset, "preset name (omit, or --list, to list them)");
  app->add_flag("--list", o->list, "list the presets (as `tierflow model --list`)");
  app->add_option("--file", o->file, "YAML hardware description or calibrated profile");
  app->add_flag("--json", o->json, "print JSON (base units: bytes, seconds, bytes/s, FLOP/s)");
  app->add_flag("--yaml", o->yaml, "print YAML (a preset's text with its source comments)");
  return Command{app, [o] { return Run(*o); }};
}

TIERFLOW_COMMAND(MakeHardwareCommand);

}  // namespace
}  // namespace tierflow::cli
