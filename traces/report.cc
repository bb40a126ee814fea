// Text and JSON renderings of summaries and comparisons.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tierflow/core/units.h"
#include "tierflow/traces/compare.h"
#include "tierflow/traces/summary.h"

namespace tierflow::traces {
namespace {

using Json = nlohmann::ordered_json;

// A plain text table: first column left-aligned, the others right-aligned.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void Row(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string Render() const {
    std::vector<size_t> width(header_.size(), 0);
    auto measure = [&](const std::vector<std::string>& r) {
      for (size_t c = 0; c < r.size() && c < width.size(); ++c) width[c] = std::max(width[c], r[c].size());
    };
    measure(header_);
    for (const auto& r : rows_) measure(r);
    std::string out;
    auto line = [&](const std::vector<std::string>& r) {
      std::string l = "  ";
      for (size_t c = 0; c < width.size(); ++c) {
        const std::string cell = c < r.size() ? r[c] : "";
        if (c == 0) l += fmt::format("{:<{}}", cell, width[c]);
        else l += fmt::format("  {:>{}}", cell, width[c]);
      }
      while (!l.empty() && l.back() == ' ') l.pop_back();
      out += l + "\n";
    };
    line(header_);
    for (const auto& r : rows_) line(r);
    return out;
  }

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

std::string Percent(double fraction) {
  if (!std::isfinite(fraction)) return "n/a";
  return fmt::format("{:.1f} %", fraction * 100.0);
}
std::string SignedPercent(double fraction) {
  if (!std::isfinite(fraction)) return "n/a";
  return fmt::format("{:+.2f} %", fraction * 100.0);
}
std::string Dur(double s) { return FormatDuration(s); }

Json PhaseJson(const PhaseSpan& p) {
  Json j;
  j["present"] = p.present;
  j["start_s"] = p.start_s;
  j["end_s"] = p.end_s;
  j["span_s"] = p.span_s;
  j["busy_s"] = p.busy_s;
  return j;
}

}  // namespace

std::string SummaryToText(const TraceSummary& s) {
  std::string out;
  std::string sources;
  for (const auto& x : s.sources) sources += (sources.empty() ? "" : ", ") + (x.empty() ? "\"\"" : x);
  out += fmt::format("trace: {} records from {}, span {} ({} .. {})\n", s.records,
                     sources.empty() ? "-" : sources, Dur(s.span_s), Dur(s.start_s), Dur(s.end_s));
  out += fmt::format("iterations: {}, steady-state mean iteration time {}\n", s.iterations.size(),
                     Dur(s.mean_iteration_s));
  out += fmt::format("compute busy {} ({}), exposed non-compute time {} ({})\n\n", Dur(s.compute_busy_s),
                     Percent(s.span_s > 0 ? s.compute_busy_s / s.span_s : 0), Dur(s.exposed_s),
                     Percent(s.span_s > 0 ? s.exposed_s / s.span_s : 0));
  if (!s.iterations.empty()) {
    Table t({"iteration", "time", "period", "forward", "backward", "step", "fwd busy", "bwd busy", "step busy"});
    auto span = [](const PhaseSpan& p) { return p.present ? Dur(p.span_s) : std::string("-"); };
    auto busy = [](const PhaseSpan& p) { return p.present ? Dur(p.busy_s) : std::string("-"); };
    for (const auto& it : s.iterations) {
      t.Row({std::to_string(it.iteration), Dur(it.time_s), it.period_s > 0 ? Dur(it.period_s) : "-",
             span(it.phase(Phase::kForward)), span(it.phase(Phase::kBackward)), span(it.phase(Phase::kStep)),
             busy(it.phase(Phase::kForward)), busy(it.phase(Phase::kBackward)), busy(it.phase(Phase::kStep))});
    }
    out += "per iteration (time = first start to last end; period = end minus previous end):\n" + t.Render() + "\n";
  }
  if (!s.resources.empty()) {
    Table t({"resource", "device", "records", "bytes", "busy", "util", "exposed", "achieved"});
    for (const auto& r : s.resources) {
      t.Row({r.name + (r.is_compute ? " *" : ""), r.device, std::to_string(r.records),
             r.bytes ? FormatBytes(static_cast<double>(r.bytes)) : "-", Dur(r.busy_s), Percent(r.utilization),
             r.is_compute ? "-" : Dur(r.exposed_s), r.bytes && r.busy_s > 0 ? FormatBandwidth(r.bytes_per_s) : "-"});
    }
    out += "per resource (* = compute; util = busy / span; exposed = busy while no compute is busy):\n" +
           t.Render() + "\n";
  }
  if (!s.pools.empty()) {
    Table t({"pool", "device", "capacity", "persistent", "peak", "peak/cap", "peak at"});
    for (const auto& p : s.pools) {
      t.Row({p.name, p.device, FormatBytes(static_cast<double>(p.capacity_bytes)),
             FormatBytes(static_cast<double>(p.persistent_bytes)), FormatBytes(static_cast<double>(p.peak_bytes)),
             Percent(p.capacity_bytes > 0 ? static_cast<double>(p.peak_bytes) / static_cast<double>(p.capacity_bytes) : 0),
             Dur(p.peak_time_s)});
    }
    out += "per pool (reconstructed from the records):\n" + t.Render() + "\n";
  }
  const CriticalPath& cp = s.critical_path;
  if (!cp.available) {
    out += "critical path: unavailable: " + cp.explanation + "\n";
  } else {
    out += fmt::format("critical path: {} steps over {}, of which waiting (gaps) {}\n", cp.steps.size(),
                       Dur(cp.length_s), Dur(cp.gap_s));
    Table t({"op", "time on path", "share"});
    for (int o = 0; o < kOpCount; ++o) {
      if (cp.time_by_op_s[o] <= 0) continue;
      t.Row({std::string(OpName(static_cast<Op>(o))), Dur(cp.time_by_op_s[o]),
             Percent(cp.length_s > 0 ? cp.time_by_op_s[o] / cp.length_s : 0)});
    }
    out += t.Render();
    constexpr size_t kShown = 20;
    size_t first = cp.steps.size() > kShown ? cp.steps.size() - kShown : 0;
    Table steps({"iteration", "task", "op", "resource", "start", "duration", "reason", "gap"});
    for (size_t k = first; k < cp.steps.size(); ++k) {
      const CriticalStep& st = cp.steps[k];
      steps.Row({std::to_string(st.iteration), st.task, std::string(OpName(st.op)),
                 st.resource.empty() ? "-" : st.resource, Dur(st.start_s), Dur(st.end_s - st.start_s),
                 std::string(CriticalReasonName(st.reason)), st.gap_s > 0 ? Dur(st.gap_s) : "-"});
    }
    out += first > 0 ? fmt::format("last {} steps (of {}; --json lists all):\n", kShown, cp.steps.size())
                     : std::string("steps:\n");
    out += steps.Render();
  }
  for (const auto& note : s.notes) out += "note: " + note + "\n";
  return out;
}

std::string SummaryToJson(const TraceSummary& s) {
  Json j;
  j["records"] = s.records;
  j["sources"] = s.sources;
  j["start_s"] = s.start_s;
  j["end_s"] = s.end_s;
  j["span_s"] = s.span_s;
  j["mean_iteration_s"] = s.mean_iteration_s;
  j["compute_busy_s"] = s.compute_busy_s;
  j["exposed_s"] = s.exposed_s;
  Json its = Json::array();
  for (const auto& it : s.iterations) {
    Json x;
    x["iteration"] = it.iteration;
    x["records"] = it.records;
    x["start_s"] = it.start_s;
    x["end_s"] = it.end_s;
    x["time_s"] = it.time_s;
    x["period_s"] = it.period_s;
    x["forward_s"] = it.phase(Phase::kForward).span_s;
    x["backward_s"] = it.phase(Phase::kBackward).span_s;
    x["step_s"] = it.phase(Phase::kStep).span_s;
    Json phases;
    for (int p = 0; p < kPhaseCount; ++p) phases[std::string(PhaseName(static_cast<Phase>(p)))] = PhaseJson(it.phases[p]);
    x["phases"] = phases;
    its.push_back(x);
  }
  j["iterations"] = its;
  Json res = Json::array();
  for (const auto& r : s.resources) {
    res.push_back({{"name", r.name}, {"device", r.device}, {"is_compute", r.is_compute}, {"records", r.records},
                   {"bytes", r.bytes}, {"request_s", r.request_s}, {"busy_s", r.busy_s},
                   {"utilization", r.utilization}, {"exposed_s", r.exposed_s}, {"bytes_per_s", r.bytes_per_s}});
  }
  j["resources"] = res;
  Json pools = Json::array();
  for (const auto& p : s.pools) {
    pools.push_back({{"name", p.name}, {"device", p.device}, {"capacity_bytes", p.capacity_bytes},
                     {"persistent_bytes", p.persistent_bytes}, {"peak_bytes", p.peak_bytes},
                     {"peak_time_s", p.peak_time_s}});
  }
  j["pools"] = pools;
  const CriticalPath& cp = s.critical_path;
  Json path;
  path["available"] = cp.available;
  path["explanation"] = cp.explanation;
  path["length_s"] = cp.length_s;
  path["gap_s"] = cp.gap_s;
  Json by_op = Json::object();
  for (int o = 0; o < kOpCount; ++o) {
    if (cp.time_by_op_s[o] > 0) by_op[std::string(OpName(static_cast<Op>(o)))] = cp.time_by_op_s[o];
  }
  path["time_by_op_s"] = by_op;
  Json steps = Json::array();
  for (const auto& st : cp.steps) {
    steps.push_back({{"iteration", st.iteration}, {"task", st.task}, {"op", std::string(OpName(st.op))},
                     {"resource", st.resource}, {"start_s", st.start_s}, {"end_s", st.end_s},
                     {"reason", std::string(CriticalReasonName(st.reason))}, {"gap_s", st.gap_s}});
  }
  path["steps"] = steps;
  j["critical_path"] = path;
  j["notes"] = s.notes;
  return j.dump(2);
}

std::string ComparisonToText(const TraceComparison& c) {
  std::string out = fmt::format(
      "a: {} records, b: {} records; matched {} on (iteration, task, rank); unmatched: {} in a, {} in b\n",
      c.a_records, c.b_records, c.matched, c.a_unmatched, c.b_unmatched);
  out += fmt::format("steady-state mean iteration time: a {}, b {}, error {}  (error = (b - a) / a)\n\n",
                     Dur(c.a_mean_iteration_s), Dur(c.b_mean_iteration_s), SignedPercent(c.mean_iteration_rel_error));
  if (!c.ops.empty()) {
    Table t({"op", "count", "a total", "b total", "error", "mean |task error|"});
    for (const auto& o : c.ops) {
      t.Row({std::string(OpName(o.op)), std::to_string(o.count), Dur(o.a_sum_s), Dur(o.b_sum_s),
             SignedPercent(o.rel_error), Percent(o.mean_abs_rel_error)});
    }
    out += "per op (matched instances):\n" + t.Render() + "\n";
  }
  if (!c.iterations.empty()) {
    Table t({"iteration", "a time", "b time", "error"});
    for (const auto& it : c.iterations) {
      t.Row({std::to_string(it.iteration), Dur(it.a_time_s), Dur(it.b_time_s), SignedPercent(it.rel_error)});
    }
    out += "per iteration (first start to last end):\n" + t.Render() + "\n";
  }
  if (!c.worst.empty()) {
    Table t({"iteration", "task", "op", "resource", "a", "b", "|b - a|", "error"});
    for (const auto& w : c.worst) {
      t.Row({std::to_string(w.iteration), w.task, std::string(OpName(w.op)), w.resource.empty() ? "-" : w.resource,
             Dur(w.a_duration_s), Dur(w.b_duration_s), Dur(w.abs_error_s), SignedPercent(w.rel_error)});
    }
    out += "worst tasks by absolute error:\n" + t.Render();
  }
  if (c.op_mismatches > 0) out += fmt::format("note: {} matched instances have a different op in a and b\n", c.op_mismatches);
  for (const auto& e : c.a_unmatched_examples) out += "only in a: " + e + "\n";
  for (const auto& e : c.b_unmatched_examples) out += "only in b: " + e + "\n";
  return out;
}

std::string ComparisonToJson(const TraceComparison& c) {
  Json j;
  j["a_records"] = c.a_records;
  j["b_records"] = c.b_records;
  j["matched"] = c.matched;
  j["a_unmatched"] = c.a_unmatched;
  j["b_unmatched"] = c.b_unmatched;
  j["a_unmatched_examples"] = c.a_unmatched_examples;
  j["b_unmatched_examples"] = c.b_unmatched_examples;
  j["op_mismatches"] = c.op_mismatches;
  j["a_mean_iteration_s"] = c.a_mean_iteration_s;
  j["b_mean_iteration_s"] = c.b_mean_iteration_s;
  j["mean_iteration_rel_error"] = c.mean_iteration_rel_error;
  Json ops = Json::array();
  for (const auto& o : c.ops) {
    ops.push_back({{"op", std::string(OpName(o.op))}, {"count", o.count}, {"a_sum_s", o.a_sum_s},
                   {"b_sum_s", o.b_sum_s}, {"rel_error", o.rel_error}, {"mean_abs_rel_error", o.mean_abs_rel_error}});
  }
  j["ops"] = ops;
  Json its = Json::array();
  for (const auto& it : c.iterations) {
    its.push_back({{"iteration", it.iteration}, {"a_time_s", it.a_time_s}, {"b_time_s", it.b_time_s},
                   {"rel_error", it.rel_error}});
  }
  j["iterations"] = its;
  Json worst = Json::array();
  for (const auto& w : c.worst) {
    worst.push_back({{"iteration", w.iteration}, {"task", w.task}, {"op", std::string(OpName(w.op))},
                     {"resource", w.resource}, {"a_duration_s", w.a_duration_s}, {"b_duration_s", w.b_duration_s},
                     {"abs_error_s", w.abs_error_s}, {"rel_error", w.rel_error}});
  }
  j["worst"] = worst;
  return j.dump(2);
}

}  // namespace tierflow::traces
