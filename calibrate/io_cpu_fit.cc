// What the I/O path and the executor's hand-overs take from the cores (`cpu.io_read_cores`,
// `cpu.io_write_cores`, `cpu.task_overhead_cpu`), and what compute on every core takes from a
// disk stream (`cpu.io_read_beside_compute`, `cpu.io_write_beside_compute`), from `probe io-cpu`:
// compute on every core alone and beside one disk stream, or a chain of the executor's
// hand-overs, at a time, and each disk stream alone (docs/calibration.md).
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "calibrate_internal.h"
#include "tierflow/core/units.h"
#include "tierflow/models/perf.h"

namespace tierflow::calibrate::internal {
namespace {

// A window whose compute lost nothing, or gained (noise), counts as this load: MedianOf's
// residuals are relative.
constexpr double kMinCores = 1e-3;

using StreamClass = std::pair<int64_t, int32_t>;  // block bytes, depth

// Per stream class, the median of its values as one measured point, within [floor, ceiling]:
// report `model`, one parameter `key.BxD` per class; the points go to `table` when concluded. A
// class measured once has no spread to judge; it is written as measured, as every probe point
// kept beside a fit is (read_bw_by_request). `range` gives the values' range: "{} .. {}".
template <typename Point>
void FitPerClass(const Context& c, const std::string& model, const std::string& key, const char* unit,
                 const std::map<StreamClass, std::vector<double>>& classes, double floor, double ceiling,
                 const std::string& note, const std::string& range, std::vector<Point>* table) {
  FitReport rep;
  rep.model = model;
  rep.condition_number = 1;
  rep.note = note;
  std::vector<Point> points;
  double sum_sq = 0, worst = 0, lo = 0, hi = 0;
  for (const auto& [cls, values] : classes) {
    const MedianStats m = MedianOf(values, c.options);
    sum_sq += m.sum_sq_rel;
    worst = std::max(worst, m.worst_rel);
    lo = rep.samples == 0 ? m.lo : std::min(lo, m.lo);
    hi = rep.samples == 0 ? m.hi : std::max(hi, m.hi);
    rep.samples += static_cast<int64_t>(values.size());
    const double value = std::clamp(m.median, floor, ceiling);
    points.push_back({cls.first, cls.second, value});
    rep.params.push_back({fmt::format("{}.{}x{}", key, cls.first, cls.second), value, m.rel_se, unit, true});
  }
  rep.rms_rel_residual = std::sqrt(sum_sq / static_cast<double>(rep.samples));
  rep.max_rel_residual = worst;
  rep.data_range = fmt::format("{} stream classes; ", points.size()) + fmt::format(fmt::runtime(range), lo, hi);
  if (Conclude(&rep, {})) *table = std::move(points);
  c.reports->push_back(rep);
}

// Each class's load: the median over its windows, at most the node's cores.
void FitDirection(const Context& c, bool write, const std::map<StreamClass, std::vector<double>>& classes, const std::string& note) {
  const std::string dir = write ? "write" : "read";
  const std::string model = "cpu.io_" + dir;
  if (classes.empty()) {
    c.reports->push_back(NoData(model, "probe.io_cpu." + dir + " windows with probe.io_cpu.alone and .beside compute (tierflow probe io-cpu)"));
    return;
  }
  models::CpuSpec& cpu = c.profile->node.cpu;
  FitPerClass(c, model, "io_" + dir + "_cores", "cores", classes, 0.0, static_cast<double>(cpu.cores), note,
              "compute lost {:.2f}..{:.2f} cores", write ? &cpu.io_write_cores : &cpu.io_read_cores);
}

// The core-seconds of one hand-over: the load beside the chain over its hand-overs per second,
// the median over the windows.
void FitHandOvers(const Context& c, const std::vector<double>& per_hand_over, const std::string& note) {
  const std::string model = "cpu.dispatch_load";
  if (per_hand_over.empty()) {
    c.reports->push_back(NoData(model, "probe.io_cpu.dispatch windows with probe.io_cpu.alone and .beside compute (tierflow probe io-cpu)"));
    return;
  }
  FitReport rep;
  rep.model = model;
  rep.samples = static_cast<int64_t>(per_hand_over.size());
  rep.note = note;
  rep.data_range = "hand-overs, each after an idle gap";
  double rel_se = 0;
  const double seconds = MedianFit(per_hand_over, c.options, "core-seconds per hand-over", &rep, &rel_se);
  rep.params = {{"task_overhead_cpu", seconds, rel_se, "s", true}};
  // A parameter, as the hand-over's time is: written only when the windows agree on it (probe
  // all's two rounds give two windows, so no minimum count beyond them).
  std::vector<std::string> reasons;
  const std::string undetermined = DeterminedRule("task_overhead_cpu", rel_se, "add rounds (--reps)", c.options);
  if (!undetermined.empty()) reasons.push_back(undetermined);
  if (Conclude(&rep, reasons)) c.profile->node.cpu.task_overhead_cpu_s = seconds;
  c.reports->push_back(rep);
}

// The share of its rate alone a stream keeps beside compute on every core, per class: each
// round's window beside over its window alone (probe io-cpu runs them one after the other), the
// median over the rounds, at most 1.
void FitBesideCompute(const Context& c, bool write, const std::map<StreamClass, std::vector<double>>& classes) {
  const std::string dir = write ? "write" : "read";
  const std::string model = "cpu.io_" + dir + "_beside_compute";
  if (classes.empty()) {
    c.reports->push_back(NoData(model, "probe.io_cpu." + dir + " windows with probe.io_cpu." + dir + "_alone windows of the same round (tierflow probe io-cpu)"));
    return;
  }
  models::CpuSpec& cpu = c.profile->node.cpu;
  FitPerClass(c, model, "io_" + dir + "_beside_compute", "", classes, 0.0, 1.0,
              "the rate a stream keeps while compute holds every core, over its rate alone", "kept {:.2f}..{:.2f} of the rate alone",
              write ? &cpu.io_write_beside_compute : &cpu.io_read_beside_compute);
}

// A window of a read and a write stream of one class at once (probe io-cpu's stream "rw", or
// "split": the two on two disk entries): the cores the compute lost beside it and each stream's
// rate.
struct MixWindow {
  double load = 0;
  double read_bw = 0, write_bw = 0;
};

// The rules the simulator combines the I/O paths of streams by, checked against the windows of a
// reader and a writer of one class at once, from that class's figures just fitted (cpu.io_read
// and cpu.io_write must both have been), each as the simulator runs it (models::IoPathCores):
// through one ring (`split` false: together the largest class figure among them,
// models::IoPathScale) or each through its own (`split`: the two figures added). Nothing is
// written; the residuals are the rule's errors.
void CheckIoPathMix(const Context& c, const std::map<StreamClass, std::vector<MixWindow>>& mixes, bool split) {
  const std::string model = split ? "cpu.io_split" : "cpu.io_rw";
  const std::string stream = split ? "split" : "rw";
  if (mixes.empty()) {
    c.reports->push_back(NoData(model, "probe.io_cpu." + stream + " windows with probe.io_cpu.alone and .beside compute (tierflow probe io-cpu" +
                                           (split ? " with two --dir)" : ")")));
    return;
  }
  for (const char* figures : {"cpu.io_read", "cpu.io_write"}) {
    const auto fit = std::find_if(c.reports->begin(), c.reports->end(), [&](const FitReport& r) { return r.model == figures; });
    if (fit == c.reports->end() || fit->outcome != FitOutcome::kFitted) {
      c.reports->push_back(RefusedReport(model, fmt::format("checks the figures of {}, which was not fitted", figures)));
      return;
    }
  }
  FitReport rep;
  rep.model = model;
  rep.condition_number = 1;
  rep.note = split ? "a check of the rule by which two rings' streams load the cores together (their figures added); nothing written"
                    : "a check of the rule by which one ring's streams load the cores together (the busiest class's figure); nothing written";
  const models::CpuSpec& cpu = c.profile->node.cpu;
  double sum_sq = 0, worst = 0, lo = 0, hi = 0, rate_lo = 0, rate_hi = 0;
  std::vector<std::string> unchecked;
  for (const auto& mix : mixes) {
    // Names, not a structured binding: a lambda below captures cls, which clang 14 cannot do to a binding.
    const StreamClass& cls = mix.first;
    const std::vector<MixWindow>& windows = mix.second;
    const std::vector<double> cores = {models::IoPathCores(cpu, false, cls.first, cls.second),
                                       models::IoPathCores(cpu, true, cls.first, cls.second)};
    if (!(cores[0] > 0) || !(cores[1] > 0)) {
      unchecked.push_back(fmt::format("{}x{}", cls.first, cls.second));
      continue;
    }
    const double rule = split ? cores[0] + cores[1] : models::IoPathScale(cores) * (cores[0] + cores[1]);
    // Its standard error: each figure's, as its fit reported it (0 when the class was not
    // measured alone, its figure a neighbour's): the larger one's, or that of the sum.
    const auto figure_rse = [&](bool write) {
      const std::string figure = fmt::format("io_{}_cores.{}x{}", write ? "write" : "read", cls.first, cls.second);
      for (const FitReport& r : *c.reports) {
        if (r.model != (write ? "cpu.io_write" : "cpu.io_read")) continue;
        for (const FitParameter& param : r.params) {
          if (param.name == figure) return param.rel_std_error;
        }
      }
      return 0.0;
    };
    const double rule_rse = split ? std::hypot(cores[0] * figure_rse(false), cores[1] * figure_rse(true)) / rule
                                  : figure_rse(cores[1] > cores[0]);
    std::vector<double> loads;
    for (const MixWindow& w : windows) {
      const double rel = (rule - w.load) / w.load;
      sum_sq += rel * rel;
      worst = std::max(worst, std::fabs(rel));
      loads.push_back(w.load);
      const double rate = w.read_bw + w.write_bw;
      lo = rep.samples == 0 ? w.load : std::min(lo, w.load);
      hi = rep.samples == 0 ? w.load : std::max(hi, w.load);
      rate_lo = rep.samples == 0 ? rate : std::min(rate_lo, rate);
      rate_hi = rep.samples == 0 ? rate : std::max(rate_hi, rate);
      ++rep.samples;
    }
    const MedianStats m = MedianOf(loads, c.options);
    rep.params.push_back({fmt::format("io_{}_cores.{}x{}", stream, cls.first, cls.second), m.median, m.rel_se, "cores", false});
    rep.params.push_back({fmt::format("rule.{}x{}", cls.first, cls.second), rule, rule_rse, "cores", false});
  }
  if (rep.samples == 0) {
    c.reports->push_back(RefusedReport(model, fmt::format("no {} window's class has both a read and a write figure (stream classes {})",
                                                          stream, fmt::join(unchecked, ", "))));
    return;
  }
  if (!unchecked.empty()) rep.note += fmt::format("; classes without a read and a write figure left out: {}", fmt::join(unchecked, ", "));
  rep.rms_rel_residual = std::sqrt(sum_sq / static_cast<double>(rep.samples));
  rep.max_rel_residual = worst;
  rep.data_range = fmt::format("{} stream classes, a reader and a writer at once{}, {} together; compute lost {:.2f}..{:.2f} cores",
                               rep.params.size() / 2, split ? " on two disk entries" : "", RangeText(rate_lo, rate_hi, FormatBandwidth), lo, hi);
  Conclude(&rep, {});
  c.reports->push_back(rep);
}

}  // namespace

void FitIoCpu(const Context& c) {
  // Each compute step's time alone: the median of its alone records (same layer and phase).
  std::map<std::pair<int32_t, int>, std::vector<double>> alone;
  std::vector<const TraceRecord*> beside, windows, streams_alone;
  int32_t threads = -1;
  bool mixed_threads = false;
  for (const TraceRecord* r : c.records) {
    if (IsRunRecord(*r) || !StartsWith(r->task, "probe.io_cpu.")) continue;
    if (r->op == Op::kCompute && r->duration_s() > 0) {
      if (threads >= 0 && r->threads != threads) mixed_threads = true;
      threads = r->threads;
      if (r->task == "probe.io_cpu.alone") alone[{r->layer, static_cast<int>(r->phase)}].push_back(r->duration_s());
      if (r->task == "probe.io_cpu.beside") beside.push_back(r);
    } else if ((r->op == Op::kRead || r->op == Op::kWrite) && r->duration_s() > 0 && r->block_bytes > 0 && r->queue_depth > 0) {
      (r->task == "probe.io_cpu.read_alone" || r->task == "probe.io_cpu.write_alone" ? streams_alone : windows).push_back(r);
    } else if (r->task == "probe.io_cpu.dispatch" && r->duration_s() > 0 && r->tasks > 0) {
      windows.push_back(r);
    }
  }
  const int32_t cores = c.profile->node.cpu.cores;
  if (!windows.empty() && (mixed_threads || threads != cores)) {
    const std::string why = mixed_threads ? "the compute beside the streams ran on different thread counts"
                                          : fmt::format("the compute beside the streams ran on {} threads, the node has {} cores: "
                                                        "the load is measured by compute on every core",
                                                        threads, cores);
    for (const char* model : {"cpu.io_read", "cpu.io_write", "cpu.dispatch_load", "cpu.io_rw", "cpu.io_split",
                              "cpu.io_read_beside_compute", "cpu.io_write_beside_compute"}) {
      c.reports->push_back(RefusedReport(model, why));
    }
    return;
  }
  std::map<std::pair<int32_t, int>, double> reference;
  for (auto& [key, v] : alone) reference[key] = Median(v);
  // The compute steps wholly inside a window: their time alone over their time beside it.
  // Compute on every core gets cores - f of them beside a path that keeps f busy. None when no
  // step lies inside.
  int64_t empty = 0;
  const auto window_load = [&](const TraceRecord& w) -> std::optional<double> {
    double alone_s = 0, beside_s = 0;
    for (const TraceRecord* r : beside) {
      if (r->start_s < w.start_s || r->end_s > w.end_s) continue;
      auto it = reference.find({r->layer, static_cast<int>(r->phase)});
      if (it == reference.end()) continue;
      alone_s += it->second;
      beside_s += r->duration_s();
    }
    if (!(beside_s > 0)) {
      ++empty;
      return std::nullopt;
    }
    return std::max(kMinCores, cores * (1 - alone_s / beside_s));
  };
  std::map<StreamClass, std::vector<double>> by_dir[2];
  std::vector<double> per_hand_over;
  // A reader-and-writer window is two records, one per op, of one iteration and start: [0] one
  // ring's, [1] two rings'.
  std::map<std::pair<int32_t, double>, std::vector<const TraceRecord*>> rw_windows[2];
  for (const TraceRecord* w : windows) {
    if (w->task == "probe.io_cpu.rw" || w->task == "probe.io_cpu.split") {
      rw_windows[w->task == "probe.io_cpu.split" ? 1 : 0][{w->iteration, w->start_s}].push_back(w);
      continue;
    }
    const std::optional<double> load = window_load(*w);
    if (!load) continue;
    if (w->op == Op::kBarrier) {
      per_hand_over.push_back(*load * w->duration_s() / w->tasks);
    } else {
      by_dir[w->op == Op::kWrite ? 1 : 0][{w->block_bytes, w->queue_depth}].push_back(*load);
    }
  }
  // Each read or write window's rate over its stream's rate alone in the same round.
  std::map<std::tuple<int32_t, bool, int64_t, int32_t>, double> rate_alone;
  for (const TraceRecord* r : streams_alone) rate_alone[{r->iteration, r->op == Op::kWrite, r->block_bytes, r->queue_depth}] = r->bytes / r->duration_s();
  std::map<StreamClass, std::vector<double>> kept[2];
  for (const TraceRecord* w : windows) {
    if (w->task != "probe.io_cpu.read" && w->task != "probe.io_cpu.write") continue;
    const bool write = w->op == Op::kWrite;
    const auto it = rate_alone.find({w->iteration, write, w->block_bytes, w->queue_depth});
    if (it == rate_alone.end() || !(it->second > 0)) continue;
    kept[write ? 1 : 0][{w->block_bytes, w->queue_depth}].push_back(w->bytes / w->duration_s() / it->second);
  }
  std::map<StreamClass, std::vector<MixWindow>> mixes[2];
  for (int split = 0; split < 2; ++split) {
    for (const auto& [key, records] : rw_windows[split]) {
      const std::optional<double> load = window_load(*records.front());
      if (!load) continue;
      MixWindow m{*load, 0, 0};
      for (const TraceRecord* r : records) (r->op == Op::kWrite ? m.write_bw : m.read_bw) = r->bytes / r->duration_s();
      mixes[split][{records.front()->block_bytes, records.front()->queue_depth}].push_back(m);
    }
  }
  const std::string note = empty > 0 ? fmt::format("{} windows with no compute step inside left out", empty) : std::string();
  FitDirection(c, false, by_dir[0], note);
  FitDirection(c, true, by_dir[1], note);
  FitBesideCompute(c, false, kept[0]);
  FitBesideCompute(c, true, kept[1]);
  FitHandOvers(c, per_hand_over, note);
  CheckIoPathMix(c, mixes[0], false);
  CheckIoPathMix(c, mixes[1], true);
}

}  // namespace tierflow::calibrate::internal
