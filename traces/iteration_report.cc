#include "tierflow/traces/iteration_report.h"

#include <algorithm>
#include <map>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

#include "tierflow/core/units.h"
#include "tierflow/traces/summary.h"
#include "interval_math.h"

namespace tierflow::traces {
namespace {

// A resource's or pool's name with its rank's GPU and rank index as '*' (gpu3.compute as
// gpu*.compute, host.pinned.opt.r2 as host.pinned.opt.r*): the rows the report folds.
std::string FoldRanks(const std::string& name) {
  std::string out;
  size_t at = 0;
  while (at <= name.size()) {
    size_t end = name.find('.', at);
    if (end == std::string::npos) end = name.size();
    const std::string part = name.substr(at, end - at);
    auto numbered = [&](const char* prefix) {
      const size_t n = std::strlen(prefix);
      return part.size() > n && part.compare(0, n, prefix) == 0 && part.find_first_not_of("0123456789", n) == std::string::npos;
    };
    out += numbered("gpu") ? "gpu*" : numbered("r") ? "r*" : part;
    if (end < name.size()) out += '.';
    at = end + 1;
  }
  return out;
}

// The union of `spans` (sorted in place): its disjoint intervals, and their length in *length.
std::vector<internal::Interval> Union(std::vector<std::pair<double, double>>& spans, double* length) {
  std::sort(spans.begin(), spans.end());
  internal::IntervalUnion u;
  for (const auto& [a, b] : spans) u.Add(a, b);
  std::vector<internal::Interval> merged = u.Finish();
  if (length != nullptr) *length = u.length_s();
  return merged;
}

// Per iteration over the steady-state iterations, each rank's copies of a resource as one row:
// the summary's figures (docs/trace-format.md, "Summary") over those iterations' records alone —
// busy the union of a resource's intervals, exposed its busy time outside every compute
// resource's, utilization over the records' span — divided by their count.
nlohmann::ordered_json PerIteration(const std::vector<TraceRecord>& records, const TraceSummary& summary,
                                    const SteadyRange& steady) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  const size_t n = steady.end - steady.first;
  if (n == 0) return rows;
  std::vector<int64_t> kept;
  for (size_t i = steady.first; i < steady.end; ++i) kept.push_back(summary.iterations[i].iteration);
  std::sort(kept.begin(), kept.end());
  struct Busy {
    std::vector<std::pair<double, double>> spans;
    int64_t bytes = 0;
    bool compute = false;
  };
  std::map<std::string, Busy> by_resource;
  std::vector<std::pair<double, double>> compute;
  double first = 0, last = 0;
  bool any = false;
  for (const TraceRecord& r : records) {
    if (r.resource.empty() || !std::binary_search(kept.begin(), kept.end(), r.iteration)) continue;
    Busy& b = by_resource[r.resource];
    b.spans.emplace_back(r.start_s, r.end_s);
    b.bytes += r.bytes;
    b.compute = b.compute || r.op == Op::kCompute;
    if (r.op == Op::kCompute) compute.emplace_back(r.start_s, r.end_s);
    first = any ? std::min(first, r.start_s) : r.start_s;
    last = any ? std::max(last, r.end_s) : r.end_s;
    any = true;
  }
  const std::vector<internal::Interval> compute_merged = Union(compute, nullptr);
  struct Row {
    int64_t count = 0;
    double busy = 0, busy_min = 0, busy_max = 0, utilization = 0, exposed = 0, bytes = 0;
  };
  std::vector<std::pair<std::string, Row>> folded;  // in name order of their first member
  const double per = 1.0 / static_cast<double>(n);
  for (auto& [name, b] : by_resource) {
    double busy = 0;
    const std::vector<internal::Interval> merged = Union(b.spans, &busy);
    const double exposed = b.compute ? 0.0 : busy - internal::IntersectionLength(merged, compute_merged);
    const std::string key = FoldRanks(name);
    auto it = std::find_if(folded.begin(), folded.end(), [&](const auto& f) { return f.first == key; });
    if (it == folded.end()) it = folded.insert(folded.end(), {key, Row{0, 0, busy * per, busy * per, 0, 0, 0}});
    Row& row = it->second;
    ++row.count;
    row.busy += busy * per;
    row.busy_min = std::min(row.busy_min, busy * per);
    row.busy_max = std::max(row.busy_max, busy * per);
    row.utilization += last > first ? busy / (last - first) : 0.0;
    row.exposed += exposed * per;
    row.bytes += static_cast<double>(b.bytes) * per;
  }
  for (const auto& [name, row] : folded) {
    const double c = static_cast<double>(row.count);
    rows.push_back({{"resource", name}, {"count", row.count}, {"busy_s", row.busy / c}, {"busy_min_s", row.busy_min},
                    {"busy_max_s", row.busy_max}, {"utilization", row.utilization / c}, {"exposed_s", row.exposed / c},
                    {"bytes_per_s", row.busy > 0 ? row.bytes / row.busy : 0.0}});
  }
  return rows;
}

}  // namespace

nlohmann::ordered_json BuildReport(const Schedule& schedule, const std::vector<TraceRecord>& records,
                                   const RunFacts& facts) {
  const TraceSummary summary = Summarize(records, &schedule);
  nlohmann::ordered_json j;
  j["scenario"] = facts.scenario;
  j["policy"] = facts.policy;
  j["iterations"] = facts.iterations;
  if (facts.summarised_iterations > 0) j["summarised_iterations"] = facts.summarised_iterations;
  const RunSetting& set = facts.setting;
  if (set.ranks > 0) {
    j["setting"] = {{"model", set.model},
                    {"hardware", set.hardware},
                    {"calibrated", set.calibrated},
                    {"nodes", set.nodes},
                    {"sequence_length", set.sequence_length},
                    {"micro_batch", set.micro_batch},
                    {"accumulation", set.accumulation},
                    {"ranks", set.ranks},
                    {"global_batch", set.global_batch()}};
    const double it = summary.mean_iteration_s;
    const double samples = it > 0 ? static_cast<double>(set.global_batch()) / it : 0.0;
    const double per_gpu = it > 0 ? set.flops_per_iteration / it / static_cast<double>(set.ranks) : 0.0;
    j["throughput"] = {{"tokens_per_s", samples * static_cast<double>(set.sequence_length)},
                       {"samples_per_s", samples},
                       {"model_tflops_per_gpu", per_gpu / 1e12},
                       {"mfu", set.peak_flops_per_gpu > 0 ? per_gpu / set.peak_flops_per_gpu : 0.0},
                       {"peak_flops_per_gpu", set.peak_flops_per_gpu}};
  }
  j["iteration_s"] = summary.mean_iteration_s;
  std::vector<double> per_iteration;
  for (const auto& it : summary.iterations) per_iteration.push_back(it.time_s);
  j["iterations_s"] = per_iteration;
  // Phases: mean span over the steady-state iterations, those whose periods make iteration_s.
  const SteadyRange steady = SteadyIterations(summary.iterations.size());
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
      const IterationSummary& it = summary.iterations[i];
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
  j["per_iteration"] = PerIteration(records, summary, steady);
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
  const std::vector<std::string> notes = PlanNotes(schedule);
  if (!notes.empty()) j["plan_notes"] = notes;
  return j;
}

std::vector<std::string> PlanNotes(const Schedule& schedule) {
  std::vector<std::string> notes;
  for (const auto& [key, value] : schedule.meta) {
    if (key.rfind("note.", 0) == 0) notes.push_back(value);
  }
  return notes;
}

std::string ReportToText(const Schedule& schedule, const nlohmann::ordered_json& r) {
  std::string out;
  char line[512];
  auto add = [&](const char* fmt, auto... args) {
    std::snprintf(line, sizeof(line), fmt, args...);
    out += line;
  };
  add("%s  (policy %s, %lld iterations)\n", r["scenario"].get<std::string>().c_str(),
      r["policy"].get<std::string>().c_str(), static_cast<long long>(r["iterations"].get<int64_t>()));
  if (r.contains("setting")) {
    const auto& st = r["setting"];
    const int64_t batch = st["global_batch"].get<int64_t>();
    add("%s on %s (%s), %d node%s x %lld ranks\nsequence %lld, micro-batch %lld, accumulation %lld: global batch %lld sequences (%s tokens)\n",
        st["model"].get<std::string>().c_str(), st["hardware"].get<std::string>().c_str(),
        st["calibrated"].get<bool>() ? "calibrated by tierflow calibrate"
                                     : "not calibrated: a preset's datasheet figures and assumptions, or a hand-written profile",
        st["nodes"].get<int>(), st["nodes"].get<int>() == 1 ? "" : "s", static_cast<long long>(st["ranks"].get<int64_t>() / std::max(1, st["nodes"].get<int>())),
        static_cast<long long>(st["sequence_length"].get<int64_t>()), static_cast<long long>(st["micro_batch"].get<int64_t>()),
        static_cast<long long>(st["accumulation"].get<int64_t>()), static_cast<long long>(batch),
        FormatCount(static_cast<double>(batch * st["sequence_length"].get<int64_t>())).c_str());
  }
  const double it = r["iteration_s"].get<double>();
  if (r.contains("summarised_iterations")) {
    add("\niteration time   %s (steady state of the last %lld iterations)\n", FormatDuration(it).c_str(),
        static_cast<long long>(r["summarised_iterations"].get<int64_t>()));
  } else {
    add("\niteration time   %s (steady state)\n", FormatDuration(it).c_str());
  }
  if (r.contains("throughput")) {
    const auto& tp = r["throughput"];
    // MFU is against the hardware's GPU peak: none where the caller knows no peak of the device
    // that ran (RunSetting), and none above it (a profile that is not this machine's).
    const double mfu = tp["mfu"].get<double>(), peak = tp.value("peak_flops_per_gpu", 0.0);
    const std::string mfu_text =
        peak <= 0  ? std::string("MFU - (no GPU peak of the device that ran)")
        : mfu <= 1 ? fmt::format("MFU {:.1f} %", 100 * mfu)
                   : fmt::format("MFU - (above the hardware's GPU peak of {} TFLOP/s: not this machine's profile)", FormatCount(peak / 1e12));
    add("throughput       %s tokens/s, %.3g samples/s; %.1f model TFLOP/s per GPU, %s\n",
        FormatCount(tp["tokens_per_s"].get<double>()).c_str(), tp["samples_per_s"].get<double>(),
        tp["model_tflops_per_gpu"].get<double>(), mfu_text.c_str());
  }
  // The timers' cut adds up to the iteration; the spans overlap where prefetch, write-back and the
  // update run beside another phase.
  const auto& ph = r["phases"];
  const auto& tp = r["timer_phases"];
  const auto& ov = r["phase_overlap"];
  add("  %-10s %12s %7s %12s %12s\n", "phase", "time", "share", "span", "beside");
  for (const char* k : {"forward_s", "backward_s", "step_s"}) {
    const double v = tp[k].get<double>();
    add("  %-10s %12s %6.1f%% %12s %12s\n", std::string(k, std::strlen(k) - 2).c_str(), FormatDuration(v).c_str(),
        it > 0 ? 100 * v / it : 0.0, FormatDuration(ph[k].get<double>()).c_str(), FormatDuration(ov[k].get<double>()).c_str());
  }
  add("  (time: cut back to back as DeepSpeed's timers cut it, adding up to the iteration; span: the phase's first start to its "
      "last end; beside: its work outside its own time, which the spans overlap by)\n");
  // Resources per iteration, each rank's copies folded into one row, busiest first.
  std::vector<nlohmann::ordered_json> res(r["per_iteration"].begin(), r["per_iteration"].end());
  std::stable_sort(res.begin(), res.end(), [](const auto& a, const auto& b) {
    return a["utilization"].template get<double>() > b["utilization"].template get<double>();
  });
  add("\n%-32s %12s %23s %8s %12s %12s\n", "resource (per iteration)", "busy", "min - max", "util", "exposed", "rate");
  for (const auto& e : res) {
    const int64_t count = e["count"].get<int64_t>();
    const std::string name = e["resource"].get<std::string>() + (count > 1 ? " x" + std::to_string(count) : "");
    const double lo = e["busy_min_s"].get<double>(), hi = e["busy_max_s"].get<double>();
    const std::string range = count > 1 && hi > lo ? FormatDuration(lo) + " - " + FormatDuration(hi) : "";
    const double bps = e["bytes_per_s"].get<double>();
    add("%-32s %12s %23s %7.1f%% %12s %12s\n", name.c_str(), FormatDuration(e["busy_s"].get<double>()).c_str(), range.c_str(),
        100 * e["utilization"].get<double>(), FormatDuration(e["exposed_s"].get<double>()).c_str(), bps > 0 ? FormatBandwidth(bps).c_str() : "-");
  }
  // Pools, folded the same way: the largest peak of the row's pools.
  struct PoolRow {
    int64_t count = 0;
    double peak = 0, capacity = 0;
  };
  std::vector<std::pair<std::string, PoolRow>> pools;
  for (const PoolSpec& p : schedule.pools()) {
    if (!r["peak_bytes"].contains(p.name)) continue;
    const std::string name = FoldRanks(p.name);
    auto f = std::find_if(pools.begin(), pools.end(), [&](const auto& e) { return e.first == name; });
    if (f == pools.end()) f = pools.insert(pools.end(), {name, PoolRow{}});
    ++f->second.count;
    f->second.peak = std::max(f->second.peak, static_cast<double>(r["peak_bytes"][p.name].get<int64_t>()));
    f->second.capacity = std::max(f->second.capacity, static_cast<double>(p.capacity_bytes));
  }
  add("\n%-32s %14s %14s %8s\n", "pool (largest of a row)", "peak", "capacity", "used");
  for (const auto& [name, row] : pools) {
    const std::string label = name + (row.count > 1 ? " x" + std::to_string(row.count) : "");
    add("%-32s %14s %14s %7.1f%%\n", label.c_str(), FormatBytes(row.peak).c_str(), FormatBytes(row.capacity).c_str(),
        row.capacity > 0 ? 100 * row.peak / row.capacity : 0.0);
  }
  if (!r["critical_path_s"].empty()) {
    add("\ncritical path by op:");
    for (auto e = r["critical_path_s"].begin(); e != r["critical_path_s"].end(); ++e) {
      add("  %s %s", e.key().c_str(), FormatDuration(e.value().get<double>()).c_str());
    }
    add("\n");
  }
  if (r.contains("plan_notes")) {
    for (const auto& n : r["plan_notes"]) out += "\nnote: " + n.get<std::string>() + "\n";
  }
  return out;
}

}  // namespace tierflow::traces
