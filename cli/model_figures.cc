// The report's figures that come from the scenario's model and hardware (model_figures.h).
#include "model_figures.h"

#include <algorithm>

#include <fmt/format.h>

#include "tierflow/core/units.h"
#include "tierflow/models/perf.h"

namespace tierflow::cli {

RunSetting SettingOf(const policies::Scenario& scenario) {
  RunSetting r;
  r.model = scenario.model.name;
  r.hardware = scenario.hardware.node.name;
  r.calibrated = scenario.hardware.node.source.rfind("tierflow calibrate", 0) == 0;
  r.nodes = scenario.hardware.nodes;
  const models::TrainingSetup& t = scenario.training;
  r.sequence_length = t.sequence_length;
  r.micro_batch = t.micro_batch_size;
  r.accumulation = t.gradient_accumulation_steps;
  r.ranks = std::max(1, t.data_parallel);
  const models::Flops f = models::ModelFlops(scenario.model, t.micro_batch_size, t.sequence_length, t.activation_checkpointing);
  r.flops_per_iteration = (f.forward + f.backward) * static_cast<double>(r.accumulation * r.ranks);
  r.peak_flops_per_gpu = scenario.hardware.node.gpu.peak_flops;
  return r;
}

nlohmann::ordered_json StorageBoundJson(const models::StorageBound& bound) {
  nlohmann::ordered_json j;
  j["seconds"] = bound.seconds;
  j["busiest"] = bound.busiest;
  j["devices"] = nlohmann::ordered_json::array();
  for (const models::StorageLoad& l : bound.devices) {
    j["devices"].push_back({{"device", l.device}, {"read_bytes", l.read_bytes}, {"write_bytes", l.write_bytes},
                            {"seconds", l.seconds}});
  }
  return j;
}

std::string StorageBoundText(const models::StorageBound& bound, double iteration_s) {
  if (bound.busiest.empty()) return "";
  std::string out = "\nstorage lower bound " + FormatDuration(bound.seconds) + " per iteration (" + bound.busiest +
                    " at its peak rates, reads and writes not overlapping";
  if (iteration_s > 0) out += fmt::format("; the iteration is {:.2f}x that", iteration_s / bound.seconds);
  out += ")\n";
  for (const models::StorageLoad& l : bound.devices) {
    out += fmt::format("  {:<10} {:>12} read {:>12} written {:>12}\n", l.device,
                       FormatBytes(static_cast<double>(l.read_bytes)), FormatBytes(static_cast<double>(l.write_bytes)),
                       FormatDuration(l.seconds));
  }
  return out;
}

nlohmann::ordered_json MemoryFitJson(const models::MemoryFit& fit) {
  nlohmann::ordered_json j;
  j["fits"] = fit.fits();
  j["host_peak_bytes"] = fit.host_peak_bytes;
  j["host_bytes"] = fit.host_bytes;
  j["host"] = fit.host_node;
  j["gpu_peak_bytes"] = fit.gpu_peak_bytes;
  j["gpu_bytes"] = fit.gpu_bytes;
  j["gpu_pool"] = fit.gpu_pool;
  if (!fit.fits()) j["problem"] = fit.Problem();
  return j;
}

std::string BufferedIoNote(int64_t direct_io_bytes, int64_t buffered_io_bytes, const std::vector<std::string>& buffered_disks) {
  if (buffered_io_bytes <= 0) return "";
  const double total = static_cast<double>(direct_io_bytes + buffered_io_bytes);
  std::string out = fmt::format(
      "note: {} of the tasks' disk I/O ({:.1f} %) went through the page cache, not O_DIRECT: a disk whose tensors are "
      "not all aligned as its file system needs (or without O_DIRECT) is read and written buffered throughout, as the "
      "two do not mix safely on one file; those bytes may run at memory speed\n",
      FormatBytes(static_cast<double>(buffered_io_bytes)), 100.0 * static_cast<double>(buffered_io_bytes) / total);
  for (const std::string& why : buffered_disks) out += "  " + why + "\n";
  return out;
}

}  // namespace tierflow::cli
