#include "tierflow/calibrate/calibrate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <tuple>

#include "calibrate_internal.h"
#include "tierflow/core/units.h"

namespace tierflow::calibrate {
namespace internal {

std::optional<int32_t> NvmeDevice(std::string_view resource) {
  if (!StartsWith(resource, "nvme")) return std::nullopt;
  size_t i = 4;
  int64_t d = 0;
  while (i < resource.size() && resource[i] >= '0' && resource[i] <= '9') {
    d = d * 10 + (resource[i] - '0');
    if (d > 1 << 20) return std::nullopt;
    ++i;
  }
  if (i == 4 || i >= resource.size() || resource[i] != '.') return std::nullopt;
  return static_cast<int32_t>(d);
}

std::vector<bool> Uncontended(const std::vector<const TraceRecord*>& group) {
  std::vector<size_t> order(group.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (group[a]->start_s != group[b]->start_s) return group[a]->start_s < group[b]->start_s;
    return group[a]->end_s < group[b]->end_s;
  });
  // In start order, a record overlaps another iff it starts before an earlier one ended, or the
  // next one starts before it ends (every later record starts no earlier than the next).
  std::vector<bool> alone(group.size(), true);
  double max_end = -std::numeric_limits<double>::infinity();
  for (size_t k = 0; k < order.size(); ++k) {
    const TraceRecord& r = *group[order[k]];
    if (r.start_s < max_end) alone[order[k]] = false;
    if (k + 1 < order.size() && group[order[k + 1]]->start_s < r.end_s) alone[order[k]] = false;
    max_end = std::max(max_end, r.end_s);
  }
  return alone;
}

std::string TooFewSamples(int64_t samples, int params, const CalibrateOptions& o) {
  const int64_t need = params + o.extra_samples;
  if (samples >= need) return "";
  return fmt::format("too few samples ({} < {}: {} parameter{} + {})", samples, need, params, params == 1 ? "" : "s",
                     o.extra_samples);
}

double SpanOf(const std::vector<double>& values) {
  if (values.empty()) return 1.0;
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  return *lo > 0 ? *hi / *lo : std::numeric_limits<double>::infinity();
}

std::string SpanRule(const std::vector<double>& values, const std::string& what, const std::string& consequence,
                     const CalibrateOptions& o) {
  const double span = SpanOf(values);
  if (span >= o.min_regressor_span) return "";
  return fmt::format("all samples within {:.2f}x of one {} (the rule asks {:.2f}x): {}", span, what,
                     o.min_regressor_span, consequence);
}

std::string ConditionRule(double condition, bool levenberg_marquardt, const std::string& hint,
                          const CalibrateOptions& o) {
  const double limit = levenberg_marquardt ? o.max_condition * o.max_condition : o.max_condition;
  if (condition <= limit) return "";
  return fmt::format("ill-conditioned ({} {:.2g} > {:.2g}): the parameters trade off against each other; {}",
                     levenberg_marquardt ? "condition number of J^T J" : "condition number", condition, limit, hint);
}

std::string DeterminedRule(const std::string& param, double rel_std_error, const std::string& hint,
                           const CalibrateOptions& o) {
  if (rel_std_error <= o.max_rel_std_error) return "";
  return fmt::format("{} is not determined by the data (relative standard error {} > {}): {}", param,
                     Percent(rel_std_error), Percent(o.max_rel_std_error), hint);
}

std::string ImmaterialNote(const std::string& param, double rel_std_error, const std::string& upper, double largest_change,
                           double rms_rel_residual, const CalibrateOptions& o) {
  const double noise = 3 * std::max(rms_rel_residual, o.min_residual_sd);
  if (largest_change > noise) return "";
  return fmt::format("{} not determined (relative standard error {}) but immaterial over the data: from 0 to {} no "
                     "prediction moves by more than {} (3x the rms residual)",
                     param, Percent(rel_std_error), upper, Percent(noise));
}

void SetDiagnostics(const FitResult& fit, FitReport* report) {
  report->rms_rel_residual = fit.rms_rel_residual;
  report->max_rel_residual = fit.max_rel_residual;
  report->condition_number = fit.condition_number;
}

bool Conclude(FitReport* report, const std::vector<std::string>& reasons) {
  if (reasons.empty()) {
    report->outcome = FitOutcome::kFitted;
    return true;
  }
  report->outcome = FitOutcome::kRefused;
  std::string text = report->model + ": ";
  for (size_t i = 0; i < reasons.size(); ++i) text += (i ? "; " : "") + reasons[i];
  report->reason = text;
  return false;
}

FitReport NoData(const std::string& model, const std::string& what_feeds_it) {
  FitReport r;
  r.model = model;
  r.outcome = FitOutcome::kNoData;
  r.reason = model + ": no data (fed by " + what_feeds_it + "); the base's values stay";
  return r;
}

FitReport RefusedReport(const std::string& model, const std::string& reason) {
  FitReport r;
  r.model = model;
  Conclude(&r, {reason});
  return r;
}

std::vector<TraceRecord> AveragePerPoint(std::vector<const TraceRecord*>* records) {
  // A point: everything that names what was measured, not how long it took. A disk window's
  // bytes are its result, so they are not part of its key; mixed windows stay whole (their read
  // and write records are fitted as pairs), as do memory records, the hand-over's (its fit
  // trims and averages them itself: FitDispatch) and the I/O path's (FitIoCpu pairs each compute
  // step with the stream window it ran in).
  using Key =
      std::tuple<std::string, int, std::string, int64_t, int64_t, int32_t, int32_t, int32_t, int, double, int32_t, bool>;
  std::map<Key, std::vector<const TraceRecord*>> points;
  std::vector<const TraceRecord*> kept;
  for (const TraceRecord* r : *records) {
    const bool window = r->task.rfind("probe.disk.", 0) == 0;
    // The memory fit and the GPU update's are themselves medians over repetitions (their spread
    // is what they report). Windows of several devices at once stay whole too (their records are
    // read as one window).
    if (r->source != "probe" || r->task == "probe.disk.mix" || r->task == "probe.disk.rw" || r->task.rfind("probe.memory", 0) == 0 ||
        r->task == "probe.gpu_adam" ||
        r->task == "probe.dispatch" || r->task.rfind("probe.io_cpu.", 0) == 0 || (window && r->threads > 1)) {
      kept.push_back(r);
      continue;
    }
    points[{r->task, static_cast<int>(r->op), r->resource, window ? 0 : r->bytes, r->block_bytes, r->queue_depth,
            r->threads, r->layer, static_cast<int>(r->phase), r->flops, r->tasks, r->narrows}]
        .push_back(r);
  }
  // The pooled mean (mean bytes over mean duration), which is what a run summing many such
  // operations sees: on a shared machine the repetitions can be bimodal (a vCPU taken away for a
  // while), and a median would pick one mode. From five repetitions on, the fastest and the
  // slowest are left out, so one burst of other load does not move the point.
  std::vector<TraceRecord> out;
  for (auto& [key, rs] : points) {
    auto rate = [](const TraceRecord* r) { return static_cast<double>(r->bytes) / std::max(r->duration_s(), 1e-12); };
    std::sort(rs.begin(), rs.end(), [&](const TraceRecord* a, const TraceRecord* b) {
      return a->bytes == b->bytes ? a->duration_s() < b->duration_s() : rate(a) > rate(b);
    });
    const size_t trim = rs.size() >= 5 ? 1 : 0;
    double bytes = 0, seconds = 0;
    for (size_t i = trim; i + trim < rs.size(); ++i) {
      bytes += static_cast<double>(rs[i]->bytes);
      seconds += rs[i]->duration_s();
    }
    const double n = static_cast<double>(rs.size() - 2 * trim);
    TraceRecord r = *rs[rs.size() / 2];
    r.bytes = static_cast<int64_t>(std::llround(bytes / n));
    r.end_s = r.start_s + seconds / n;
    out.push_back(std::move(r));
  }
  *records = std::move(kept);
  return out;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace internal

StatusOr<Calibration> Calibrate(const std::vector<TraceRecord>& records, const std::vector<DiskSample>& disk_samples,
                                const models::HardwareSpec& base, const CalibrateOptions& options) {
  Status valid = models::ValidateHardware(base);
  if (!valid.ok()) return valid.WithContext("calibrate: the base hardware");
  Calibration out;
  out.profile = base;
  std::vector<const TraceRecord*> measured;
  int64_t sim = 0;
  for (const TraceRecord& r : records) {
    if (r.source == "sim") {
      ++sim;  // a simulation's records would only fit the simulator back to its own inputs
      continue;
    }
    // The hand-over probes' records are timed barriers.
    if (IsInstantOp(r.op) && r.task != "probe.dispatch" && r.task != "probe.io_cpu.dispatch") continue;
    measured.push_back(&r);
  }
  if (sim > 0) out.notes.push_back(fmt::format("ignored {} sim records (calibration fits measurements)", sim));
  // Probes repeat each point; a shared machine slows some repetitions by a burst of other load
  // (seconds at a time, up to 2x here). Each point is fitted at the trimmed mean of its
  // repetitions (AveragePerPoint), so that the fits see the machine as a run does, not a burst.
  const size_t measured_records = measured.size();
  std::vector<TraceRecord> averages;
  if (options.average_per_point) {
    const size_t before = measured.size();
    averages = internal::AveragePerPoint(&measured);
    for (const TraceRecord& r : averages) measured.push_back(&r);
    if (measured.size() < before) {
      out.notes.push_back(fmt::format("{} probe records reduced to the trimmed mean of each of {} points",
                                      before - measured.size() + averages.size(), averages.size()));
    }
  }
  internal::Context c{measured, disk_samples, options, &out.profile, base, &out.fits, &out.notes};
  internal::FitDisks(c);
  internal::FitCopies(c);
  internal::FitCompute(c);
  internal::FitGpuUpdate(c);
  internal::FitCpu(c);
  internal::FitDispatch(c);
  internal::FitIoCpu(c);
  internal::FitCollectives(c);

  std::vector<std::string> fitted;
  for (const FitReport& f : out.fits) {
    if (f.outcome == FitOutcome::kFitted) fitted.push_back(f.model);
  }
  std::string source = fmt::format("tierflow calibrate from {} trace records", measured_records);
  if (!disk_samples.empty()) source += fmt::format(" and {} fio samples", disk_samples.size());
  source += fmt::format(" over base '{}'; fitted: {}", base.node.name,
                        fitted.empty() ? "none" : fmt::format("{}", fmt::join(fitted, ", ")));
  source += "; every other number is the base's";
  out.profile.node.source = source;
  Status profile_ok = models::ValidateHardware(out.profile);
  if (!profile_ok.ok()) return Internal("calibrate produced a profile that does not validate: " + profile_ok.message());
  return out;
}

}  // namespace tierflow::calibrate
