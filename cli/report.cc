#include "report.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

#include "tierflow/core/units.h"
#include "tierflow/traces/summary.h"

namespace tierflow::cli {

nlohmann::ordered_json BuildReport(const Schedule& schedule, const std::vector<TraceRecord>& records,
                                   const RunFacts& facts) {
  const traces::TraceSummary summary = traces::Summarize(records, &schedule);
  nlohmann::ordered_json j;
  j["scenario"] = facts.scenario;
  j["policy"] = facts.policy;
  j["iterations"] = facts.iterations;
  if (facts.summarised_iterations > 0) j["summarised_iterations"] = facts.summarised_iterations;
  j["iteration_s"] = summary.mean_iteration_s;
  std::vector<double> per_iteration;
  for (const auto& it : summary.iterations) per_iteration.push_back(it.time_s);
  j["iterations_s"] = per_iteration;
  // Phases: mean span over the steady-state iterations, those whose periods make iteration_s.
  const traces::SteadyRange steady = traces::SteadyIterations(summary.iterations.size());
  const char* keys[] = {"forward_s", "backward_s", "step_s"};
  const Phase phases[] = {Phase::kForward, Phase::kBackward, Phase::kStep};
  // Each also as DeepSpeed's timers cut it (back to back) and the overlap those hide, over the
  // same iterations.
  nlohmann::ordered_json pj, tj, oj;
  for (int p = 0; p < 3; ++p) {
    const int k = static_cast<int>(phases[p]);
    double span = 0, timer = 0, overlap = 0;
    size_t present = 0;
    for (size_t i = steady.first; i < steady.end; ++i) {
      const traces::IterationSummary& it = summary.iterations[i];
      if (it.phases[k].present) {
        span += it.phases[k].span_s;
        ++present;
      }
      timer += it.timer_s[k];
      overlap += it.overlap_s[k];
    }
    const double n = static_cast<double>(steady.end - steady.first);
    pj[keys[p]] = present ? span / static_cast<double>(present) : 0.0;
    tj[keys[p]] = n > 0 ? timer / n : 0.0;
    oj[keys[p]] = n > 0 ? overlap / n : 0.0;
  }
  j["phases"] = pj;
  j["timer_phases"] = tj;
  j["phase_overlap"] = oj;
  nlohmann::ordered_json rj = nlohmann::ordered_json::object();
  for (const auto& r : summary.resources) {
    nlohmann::ordered_json e;
    e["busy_s"] = r.busy_s;
    e["utilization"] = r.utilization;
    e["exposed_s"] = r.exposed_s;
    e["bytes_per_s"] = r.bytes_per_s;
    rj[r.name] = e;
  }
  j["resources"] = rj;
  nlohmann::ordered_json peaks = nlohmann::ordered_json::object();
  for (size_t p = 0; p < schedule.pools().size() && p < facts.pool_peak_bytes.size(); ++p) {
    peaks[schedule.pools()[p].name] = facts.pool_peak_bytes[p];
  }
  j["peak_bytes"] = peaks;
  nlohmann::ordered_json cp = nlohmann::ordered_json::object();
  for (int op = 0; op < kOpCount; ++op) {
    if (summary.critical_path.time_by_op_s[op] > 0) cp[std::string(OpName(static_cast<Op>(op)))] = summary.critical_path.time_by_op_s[op];
  }
  j["critical_path_s"] = cp;
  j["exposed_s"] = summary.exposed_s;
  j[facts.tasks_key] = facts.tasks;
  j["wall_s"] = facts.wall_s;
  j["tasks_per_s"] = facts.wall_s > 0 ? static_cast<double>(facts.tasks) / facts.wall_s : 0.0;
  return j;
}

std::string ReportToText(const Schedule& schedule, const nlohmann::ordered_json& r) {
  std::string out;
  char line[256];
  auto add = [&](const char* fmt, auto... args) {
    std::snprintf(line, sizeof(line), fmt, args...);
    out += line;
  };
  add("%s  (policy %s, %lld iterations)\n", r["scenario"].get<std::string>().c_str(),
      r["policy"].get<std::string>().c_str(), static_cast<long long>(r["iterations"].get<int64_t>()));
  const double it = r["iteration_s"].get<double>();
  if (r.contains("summarised_iterations")) {
    add("\niteration time   %s (steady state of the last %lld iterations)\n", FormatDuration(it).c_str(),
        static_cast<long long>(r["summarised_iterations"].get<int64_t>()));
  } else {
    add("\niteration time   %s (steady state)\n", FormatDuration(it).c_str());
  }
  const auto& ph = r["phases"];
  for (const char* k : {"forward_s", "backward_s", "step_s"}) {
    const double v = ph[k].get<double>();
    add("  %-14s %12s  %5.1f%%\n", std::string(k, std::strlen(k) - 2).c_str(), FormatDuration(v).c_str(),
        it > 0 ? 100 * v / it : 0.0);
  }
  if (r.contains("timer_phases")) {
    const auto& tp = r["timer_phases"];
    const auto& ov = r["phase_overlap"];
    add("  as DeepSpeed's timers cut them: forward %s, backward %s, step %s (overlap they hide: %s, %s, %s)\n",
        FormatDuration(tp["forward_s"].get<double>()).c_str(), FormatDuration(tp["backward_s"].get<double>()).c_str(),
        FormatDuration(tp["step_s"].get<double>()).c_str(), FormatDuration(ov["forward_s"].get<double>()).c_str(),
        FormatDuration(ov["backward_s"].get<double>()).c_str(), FormatDuration(ov["step_s"].get<double>()).c_str());
  }
  // Resources, busiest first.
  std::vector<std::pair<std::string, nlohmann::ordered_json>> res;
  for (auto e = r["resources"].begin(); e != r["resources"].end(); ++e) res.emplace_back(e.key(), e.value());
  std::stable_sort(res.begin(), res.end(), [](const auto& a, const auto& b) {
    return a.second["utilization"].template get<double>() > b.second["utilization"].template get<double>();
  });
  add("\n%-28s %12s %8s %12s %12s\n", "resource", "busy", "util", "exposed", "rate");
  for (const auto& [name, e] : res) {
    const double bps = e["bytes_per_s"].get<double>();
    add("%-28s %12s %7.1f%% %12s %12s\n", name.c_str(), FormatDuration(e["busy_s"].get<double>()).c_str(),
        100 * e["utilization"].get<double>(), FormatDuration(e["exposed_s"].get<double>()).c_str(),
        bps > 0 ? FormatBandwidth(bps).c_str() : "-");
  }
  add("\n%-28s %14s %14s %8s\n", "pool", "peak", "capacity", "used");
  for (const PoolSpec& p : schedule.pools()) {
    if (!r["peak_bytes"].contains(p.name)) continue;
    const double peak = static_cast<double>(r["peak_bytes"][p.name].get<int64_t>());
    add("%-28s %14s %14s %7.1f%%\n", p.name.c_str(), FormatBytes(peak).c_str(),
        FormatBytes(static_cast<double>(p.capacity_bytes)).c_str(),
        p.capacity_bytes ? 100 * peak / static_cast<double>(p.capacity_bytes) : 0.0);
  }
  if (!r["critical_path_s"].empty()) {
    add("\ncritical path by op:");
    for (auto e = r["critical_path_s"].begin(); e != r["critical_path_s"].end(); ++e) {
      add("  %s %s", e.key().c_str(), FormatDuration(e.value().get<double>()).c_str());
    }
    add("\n");
  }
  return out;
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
