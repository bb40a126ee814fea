// Fits of the host side: GPU copies (pinned and pageable), CPU memory bandwidth, Adam and
// conversions, and the collectives' ring alpha-beta.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "calibrate_internal.h"
#include "tierflow/core/units.h"
#include "tierflow/models/perf.h"

namespace tierflow::calibrate::internal {
namespace {

struct TimedBytes {
  double bytes = 0;
  double seconds = 0;
  int32_t threads = 0;
};

void AddIf(std::vector<std::string>* reasons, std::string r) {
  if (!r.empty()) reasons->push_back(std::move(r));
}

FitOptions Options(const CalibrateOptions& o) {
  FitOptions fo;
  fo.min_residual_sd = o.min_residual_sd;
  return fo;
}

// ---- copies ----

struct CopyFit {
  bool fitted = false;
  double latency = 0, bw = 0;
};

// `dir` names the fitted parameter (dir_bw); `op` the records' op, `kind` which of them.
CopyFit FitPinned(const std::string& model, const std::string& dir, const std::string& op, const std::string& kind,
                  const std::vector<TimedBytes>& obs, const CalibrateOptions& o, std::vector<FitReport>* reports) {
  if (obs.empty()) {
    reports->push_back(NoData(model, "probe " + op + " records " + kind + " and run " + op +
                                         " copies that overlap no other " + op + " copy"));
    return {};
  }
  FitReport rep;
  rep.model = model;
  rep.samples = static_cast<int64_t>(obs.size());
  std::vector<double> sizes;
  double fastest = 0;
  for (const TimedBytes& t : obs) {
    sizes.push_back(t.bytes);
    fastest = std::max(fastest, t.bytes / t.seconds);
  }
  const auto [lo, hi] = std::minmax_element(sizes.begin(), sizes.end());
  rep.data_range = RangeText(*lo, *hi, CompactBytes);
  std::vector<std::string> reasons;
  AddIf(&reasons, TooFewSamples(rep.samples, 2, o));
  AddIf(&reasons,
        SpanRule(sizes, "copy size", "latency and bandwidth cannot be told apart; add copies of other sizes", o));
  if (!reasons.empty()) {
    Conclude(&rep, reasons);
    reports->push_back(rep);
    return {};
  }
  const auto n = static_cast<Eigen::Index>(obs.size());
  Eigen::MatrixXd x(n, 2);
  Eigen::VectorXd y(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    x(i, 0) = 1;
    x(i, 1) = obs[static_cast<size_t>(i)].bytes;
    y(i) = obs[static_cast<size_t>(i)].seconds;
  }
  auto fit = FitLinearRelative(x, y, Options(o));
  if (!fit.ok()) {
    Conclude(&rep, {"the fit failed: " + fit.status().message()});
    reports->push_back(rep);
    return {};
  }
  double latency = fit->params(0), per_byte = fit->params(1);
  // Why the latency is held at 0 and the bandwidth refitted alone, if it is: a least-squares
  // latency below 0 (small copies run faster per byte than large ones: they stay in cache), or
  // one the data do not determine, whose interval of two standard errors holds 0, and which moves
  // the predictions by more than the noise (a latency that does not, ImmaterialNote, is kept).
  // The copies' bandwidth is then still what they show; the base's, in the profile instead, was
  // 1.7-2.4x off on this VM (calibration runs 53-55: h2d_bw 8.5-12 GB/s ±7-10 %, latency
  // 180-210 ns ±63-75 %, the base 5 GB/s and 1 us).
  std::string held;
  if (latency < 0) {
    held = fmt::format("latency fitted negative ({})", FormatDuration(latency));
  } else if (fit->rel_std_errors(0) > o.max_rel_std_error) {
    const double upper = latency * (1 + fit->rel_std_errors(0));
    // Over the data, the latency moves a prediction by at most upper / (the shortest copy).
    double largest = 0;
    for (const TimedBytes& t : obs) largest = std::max(largest, upper / (latency + t.bytes * per_byte));
    rep.note = ImmaterialNote("latency", fit->rel_std_errors(0), FormatDuration(upper), largest, fit->rms_rel_residual, o);
    const bool zero_within_two_se = fit->rel_std_errors(0) >= 0.5;  // 2 x (relative error) x latency >= latency
    if (rep.note.empty() && zero_within_two_se) {
      held = fmt::format("latency {} ±{} not determined, 0 within two standard errors", FormatDuration(latency),
                         Percent(fit->rel_std_errors(0)));
    } else if (rep.note.empty()) {
      AddIf(&reasons, DeterminedRule("latency", fit->rel_std_errors(0), "add copies of a few KiB", o));
    }
  }
  if (!held.empty()) {
    auto bound = FitLinearRelative(x.col(1), y, Options(o));
    if (!bound.ok()) {
      Conclude(&rep, {"the fit with latency held at 0 failed: " + bound.status().message()});
      reports->push_back(rep);
      return {};
    }
    rep.note = held + "; held at 0, the bandwidth refitted alone";
    fit = std::move(bound);
    latency = 0;
    per_byte = fit->params(0);
    SetDiagnostics(*fit, &rep);
    rep.params = {{dir + "_bw", per_byte > 0 ? 1.0 / per_byte : 0, fit->rel_std_errors(0), "B/s", true},
                  {"latency", 0.0, 0.0, "s", true}};
    AddIf(&reasons, DeterminedRule(dir + "_bw", fit->rel_std_errors(0), "add copies of 64 MiB and more", o));
  } else {
    SetDiagnostics(*fit, &rep);
    rep.params = {{dir + "_bw", per_byte > 0 ? 1.0 / per_byte : 0, fit->rel_std_errors(1), "B/s", true},
                  {"latency", latency, fit->rel_std_errors(0), "s", true}};
    AddIf(&reasons, DeterminedRule(dir + "_bw", fit->rel_std_errors(1), "add copies of 64 MiB and more", o));
    if (fit->rel_std_errors(0) <= o.max_rel_std_error) {
      AddIf(&reasons, ConditionRule(fit->condition_number, false, "add copies of other sizes", o));
    }
  }
  const double bw = per_byte > 0 ? 1.0 / per_byte : 0;
  if (per_byte <= 0) reasons.push_back(dir + "_bw is not positive: copy time does not grow with size");
  if (bw > o.max_bw_over_fastest * fastest) {
    reasons.push_back(
        fmt::format("{}_bw {} extrapolates beyond the data (more than {:.2f}x the fastest observed {}): add "
                    "copies of 64 MiB and more",
                    dir, FormatBandwidth(bw), o.max_bw_over_fastest, FormatBandwidth(fastest)));
  }
  CopyFit out;
  out.fitted = Conclude(&rep, reasons);
  out.latency = latency;
  out.bw = bw;
  reports->push_back(rep);
  return out;
}

// ---- CPU rate fits: t = work / min(threads_eff * rate, limit) ----

// Fits the per-core rate of `obs` (work units, seconds, threads) under the memory limit
// `limit` (work units per second). Returns the rate when fitted.
std::optional<double> FitPerCoreRate(const std::string& param, const std::string& unit,
                                     const std::vector<TimedBytes>& obs, double work_per_byte, double limit,
                                     int32_t cores, const CalibrateOptions& o, FitReport* rep) {
  rep->samples = static_cast<int64_t>(obs.size());
  auto useful = [&](int32_t threads) { return static_cast<double>(std::clamp(threads, 1, std::max(cores, 1))); };
  double wmin = 0, wmax = 0;
  int32_t tmin = 0, tmax = 0;
  std::vector<double> implied;
  double fastest = 0;  // the most work per second any sample did
  for (size_t i = 0; i < obs.size(); ++i) {
    const double w = obs[i].bytes * work_per_byte;
    wmin = i ? std::min(wmin, w) : w;
    wmax = i ? std::max(wmax, w) : w;
    tmin = i ? std::min(tmin, obs[i].threads) : obs[i].threads;
    tmax = i ? std::max(tmax, obs[i].threads) : obs[i].threads;
    fastest = std::max(fastest, w / obs[i].seconds);
    implied.push_back(w / obs[i].seconds / useful(obs[i].threads));
  }
  rep->data_range = fmt::format("{} {}, threads {}", unit == "B/s" ? "bytes" : "elements",
                                RangeText(wmin, wmax, unit == "B/s" ? CompactBytes : CompactCount),
                                RangeText(tmin, tmax, [](double v) { return fmt::format("{:.0f}", v); }));
  std::vector<std::string> reasons;
  AddIf(&reasons, TooFewSamples(rep->samples, 1, o));
  if (!reasons.empty()) {
    Conclude(rep, reasons);
    return std::nullopt;
  }
  const auto n = static_cast<Eigen::Index>(obs.size());
  Eigen::VectorXd y(n), init(1);
  for (Eigen::Index i = 0; i < n; ++i) y(i) = obs[static_cast<size_t>(i)].seconds;
  // The median implied per-core rate is at most the true one (memory-bound samples imply less),
  // so the start leaves some samples compute-bound and the gradient nonzero.
  init(0) = Median(implied);
  auto predict = [&](double rate, size_t i) {
    return obs[i].bytes * work_per_byte / std::min(useful(obs[i].threads) * rate, limit);
  };
  auto fit = FitPositiveLM([&](const Eigen::VectorXd& p, int i) { return predict(p(0), static_cast<size_t>(i)); }, y,
                           init, Options(o));
  if (!fit.ok()) {
    Conclude(rep, {"the fit failed: " + fit.status().message()});
    return std::nullopt;
  }
  SetDiagnostics(*fit, rep);
  const double rate = fit->params(0);
  rep->params = {{param, rate, fit->rel_std_errors(0), unit, true}};
  int64_t compute_bound = 0;
  for (const TimedBytes& t : obs) compute_bound += useful(t.threads) * rate < limit ? 1 : 0;
  // The local standard error says nothing at the kink of the min(): a fit that lands where the
  // compute limit just meets the memory limit has a finite curvature below and none above. So
  // ask whether a rate higher by the allowed error would change any prediction by more than the
  // noise (three times the rms relative residual): if not, the data do not bound it from above.
  const double higher = rate * (1 + o.max_rel_std_error);
  double largest_change = 0;
  for (size_t i = 0; i < obs.size(); ++i) {
    largest_change = std::max(largest_change, std::fabs(predict(higher, i) / predict(rate, i) - 1));
  }
  const double noise = 3 * std::max(fit->rms_rel_residual, o.min_residual_sd);
  // The least rate at which the fewest-thread samples are memory-bound, and how far it moves
  // the predictions: a rate that is compute-bound at one thread (a noisy probe, whose noise
  // hides the 50 % step above) must not jump to the memory limit.
  const double least = std::max(rate, limit / useful(tmin));
  double change_at_least = 0;
  for (size_t i = 0; i < obs.size(); ++i) {
    change_at_least = std::max(change_at_least, std::fabs(predict(least, i) / predict(rate, i) - 1));
  }
  // Memory-bound samples move what the memory does: where none comes within the noise of the
  // limit, the limit is not what holds them back (a cast that a second thread hardly speeds up,
  // run 53 in docs/calibration.md: 8.7 and 9.4 GB/s against 32.8), and the fitted rate stands.
  const bool reaches_limit = fastest * (1 + noise) >= limit;
  if (reaches_limit && (compute_bound == 0 || (largest_change <= noise && change_at_least <= noise))) {
    // The data bound the rate from below only: every rate at which the fewest-thread sample is
    // still memory-bound predicts every sample alike. Write that least rate, so the profile
    // reproduces the data at 1..tmax threads and is, if anything, pessimistic below tmin.
    rep->params = {{param, least, fit->rel_std_errors(0), unit, true}};
    if (!Conclude(rep, reasons)) return std::nullopt;
    rep->note = fmt::format("a lower bound: every sample is memory-bound ({} samples; a {} higher {} fits as well), "
                            "so {} is the least rate that reproduces them; runs with fewer threads would bound it",
                            obs.size(), Percent(o.max_rel_std_error), param, FormatParameter(rep->params[0]));
    return least;
  }
  AddIf(&reasons, DeterminedRule(param, fit->rel_std_errors(0), "add runs with fewer threads", o));
  if (!Conclude(rep, reasons)) return std::nullopt;
  if (compute_bound < rep->samples) {
    rep->note = fmt::format("{} of {} samples memory-bound", rep->samples - compute_bound, rep->samples);
  }
  return rate;
}

}  // namespace

void FitCopies(const Context& c) {
  const CalibrateOptions& o = c.options;
  // [0] h2d, [1] d2h, [2] d2h narrowing fp32 gradients to bf16 (records with `narrows`: pinned).
  std::vector<TimedBytes> pinned[3], pageable[2];
  std::vector<const TraceRecord*> run[2];  // by direction: any two copies of one direction contend
  int64_t empty = 0;
  const auto group = [](const TraceRecord& r) { return r.op == Op::kH2D ? 0 : r.narrows ? 2 : 1; };
  for (const TraceRecord* r : c.records) {
    if (r->op != Op::kH2D && r->op != Op::kD2H) continue;
    const int d = r->op == Op::kH2D ? 0 : 1;
    if (IsRunRecord(*r)) {
      run[d].push_back(r);
      continue;
    }
    if (r->bytes <= 0 || r->duration_s() <= 0) {
      ++empty;
      continue;
    }
    const TimedBytes t{static_cast<double>(r->bytes), r->duration_s(), r->threads};
    if (!r->narrows && StartsWith(r->task, "probe.copy.pageable")) {
      pageable[d].push_back(t);
    } else {
      pinned[group(*r)].push_back(t);
    }
  }
  int64_t contended = 0;
  for (int d = 0; d < 2; ++d) {
    const std::vector<bool> alone = Uncontended(run[d]);
    for (size_t i = 0; i < run[d].size(); ++i) {
      const TraceRecord& r = *run[d][i];
      if (!alone[i]) {
        ++contended;
      } else if (r.bytes <= 0 || r.duration_s() <= 0) {
        ++empty;
      } else {
        pinned[group(r)].push_back({static_cast<double>(r.bytes), r.duration_s(), r.threads});
      }
    }
  }
  if (contended > 0)
    c.notes->push_back(
        fmt::format("left out {} run copies that overlapped another copy of the same direction", contended));
  if (empty > 0) c.notes->push_back(fmt::format("left out {} copy records without bytes or duration", empty));

  models::PcieSpec& pcie = c.profile->node.pcie;
  const CopyFit h2d = FitPinned("pcie.h2d", "h2d", "h2d", "(not probe.copy.pageable*)", pinned[0], o, c.reports);
  const size_t h2d_index = c.reports->size() - 1;
  const CopyFit d2h = FitPinned("pcie.d2h", "d2h", "d2h", "(not probe.copy.pageable*, not narrowing)", pinned[1], o, c.reports);
  const size_t d2h_index = c.reports->size() - 1;
  if (h2d.fitted) pcie.h2d_bw_bytes_per_s = h2d.bw;
  if (d2h.fitted) pcie.d2h_bw_bytes_per_s = d2h.bw;
  // The spec has one latency per link: the mean of the fitted directions'.
  if (h2d.fitted && d2h.fitted) {
    pcie.latency_s = 0.5 * (h2d.latency + d2h.latency);
    const std::string note =
        fmt::format("pcie.latency = mean of h2d and d2h latencies = {}", FormatDuration(pcie.latency_s));
    for (const size_t i : {h2d_index, d2h_index}) {
      std::string& n = (*c.reports)[i].note;  // after the fit's own note (a latency held at 0)
      n = n.empty() ? note : n + "; " + note;
    }
  } else if (h2d.fitted || d2h.fitted) {
    pcie.latency_s = h2d.fitted ? h2d.latency : d2h.latency;
  }
  // The narrowing d2h: its own rate (the link's one latency stays the copies').
  const CopyFit narrowing = FitPinned("pcie.d2h_bf16", "d2h_bf16", "d2h", "that narrow to bf16 (narrows)", pinned[2], o, c.reports);
  if (narrowing.fitted) pcie.d2h_bf16_bw_bytes_per_s = narrowing.bw;

  // Pageable: t = latency_dir + bytes / (bw_dir * factor), over directions with a pinned fit.
  const std::string model = "pcie.pageable";
  if (pageable[0].empty() && pageable[1].empty()) {
    c.reports->push_back(NoData(model, "probe.copy.pageable* records"));
    return;
  }
  const CopyFit* fits[2] = {&h2d, &d2h};
  std::vector<TimedBytes> obs;
  std::vector<int> dir;
  for (int d = 0; d < 2; ++d) {
    if (!fits[d]->fitted) continue;
    for (const TimedBytes& t : pageable[d]) {
      obs.push_back(t);
      dir.push_back(d);
    }
  }
  if (obs.empty()) {
    c.reports->push_back(RefusedReport(
        model,
        "needs a fitted pinned bandwidth in the pageable copies' direction (pageable_factor is relative to it)"));
    return;
  }
  FitReport rep;
  rep.model = model;
  rep.samples = static_cast<int64_t>(obs.size());
  std::vector<double> sizes, guesses;
  for (size_t i = 0; i < obs.size(); ++i) {
    sizes.push_back(obs[i].bytes);
    const CopyFit& f = *fits[dir[i]];
    const double transfer = obs[i].seconds - f.latency;
    if (transfer > 0) guesses.push_back(obs[i].bytes / f.bw / transfer);
  }
  const auto [lo, hi] = std::minmax_element(sizes.begin(), sizes.end());
  rep.data_range = RangeText(*lo, *hi, CompactBytes);
  std::vector<std::string> reasons;
  AddIf(&reasons, TooFewSamples(rep.samples, 1, o));
  if (!reasons.empty()) {
    Conclude(&rep, reasons);
    c.reports->push_back(rep);
    return;
  }
  const auto n = static_cast<Eigen::Index>(obs.size());
  Eigen::VectorXd y(n), init(1);
  for (Eigen::Index i = 0; i < n; ++i) y(i) = obs[static_cast<size_t>(i)].seconds;
  init(0) = guesses.empty() ? 0.5 : std::max(Median(guesses), 1e-3);
  auto fit = FitPositiveLM(
      [&](const Eigen::VectorXd& p, int i) {
        const CopyFit& f = *fits[dir[static_cast<size_t>(i)]];
        return f.latency + obs[static_cast<size_t>(i)].bytes / (f.bw * p(0));
      },
      y, init, Options(o));
  if (!fit.ok()) {
    Conclude(&rep, {"the fit failed: " + fit.status().message()});
    c.reports->push_back(rep);
    return;
  }
  SetDiagnostics(*fit, &rep);
  double factor = fit->params(0);
  if (factor > 1) {
    rep.note = fmt::format("clamped to 1 from {:.3f} (pageable copies ran as fast as pinned ones)", factor);
    factor = 1;
  }
  rep.params = {{"pageable_factor", factor, fit->rel_std_errors(0), "", true}};
  AddIf(&reasons,
        DeterminedRule("pageable_factor", fit->rel_std_errors(0), "add pageable copies of 64 MiB and more", o));
  if (Conclude(&rep, reasons)) pcie.pageable_factor = factor;
  c.reports->push_back(rep);
}

void FitDispatch(const Context& c) {
  const CalibrateOptions& o = c.options;
  std::vector<double> micros;
  for (const TraceRecord* r : c.records) {
    if (r->task == "probe.dispatch" && r->source == "probe" && r->duration_s() > 0) micros.push_back(r->duration_s() * 1e6);
  }
  const std::string model = "cpu.dispatch";
  if (micros.empty()) {
    c.reports->push_back(NoData(model, "probe.dispatch records (tierflow probe dispatch)"));
    return;
  }
  // The mean, which is what a run of many tasks adds up; the wake-ups are bimodal here (a few
  // microseconds when the other thread had not slept yet, tens when it had), so a median would
  // pick one mode. The slowest and fastest 5 % are left out: one preempted hand-over is not a
  // task's cost.
  std::sort(micros.begin(), micros.end());
  const size_t trim = micros.size() / 20;
  const std::vector<double> kept(micros.begin() + static_cast<std::ptrdiff_t>(trim), micros.end() - static_cast<std::ptrdiff_t>(trim));
  const double n = static_cast<double>(kept.size());
  double sum = 0, sum_sq = 0, worst = 0;
  for (double x : kept) sum += x;
  const double mean = sum / n;
  for (double x : kept) {  // the model at the mean against each hand-over, as MedianOf's residuals
    sum_sq += (mean - x) / x * ((mean - x) / x);
    worst = std::max(worst, std::fabs((mean - x) / x));
  }
  FitReport rep;
  rep.model = model;
  rep.samples = static_cast<int64_t>(kept.size());
  rep.rms_rel_residual = std::sqrt(sum_sq / n);
  rep.max_rel_residual = worst;
  rep.condition_number = 1;
  rep.data_range = fmt::format("hand-overs {}", RangeText(kept.front(), kept.back(), [](double x) { return fmt::format("{:.1f} us", x); }));
  if (trim > 0) rep.note = fmt::format("the trimmed mean: the {} fastest and {} slowest of {} left out", trim, trim, micros.size());
  // The mean's standard error, floored as every fit's is (MedianOf).
  double var = 0;
  for (double x : kept) var += (x - mean) * (x - mean);
  const double sd = n > 1 ? std::sqrt(var / (n - 1)) : 0;
  const double rel_se = std::max(sd / std::sqrt(n) / mean, o.min_residual_sd / std::sqrt(n));
  const double overhead = mean * 1e-6;
  rep.params = {{"task_overhead", overhead, rel_se, "s", true}};
  std::vector<std::string> reasons;
  AddIf(&reasons, TooFewSamples(rep.samples, 1, o));
  AddIf(&reasons, DeterminedRule("task_overhead", rel_se, "add repetitions", o));
  if (Conclude(&rep, reasons)) c.profile->node.cpu.task_overhead_s = overhead;
  c.reports->push_back(rep);
}

namespace {

// The fastest memory traffic of Adam's samples at their largest element count: per thread count
// the median time, models::kAdamBytesPerElement bytes an element; 0 without samples. Adam reads
// and writes the bytes the memory probe's update loop does, so the memory moves at least this
// much. Smaller counts may sit partly in the last-level cache (calibration run 54: 2.1 M elements
// moved 51.5 GB/s on two threads, 16.8 M moved 40.1, as the memory probe did).
struct Traffic {
  double bytes_per_s = 0;
  int64_t elements = 0;
  int32_t threads = 0;
};
Traffic FastestAdamTraffic(const std::vector<TimedBytes>& adam) {
  std::map<std::pair<double, int32_t>, std::vector<double>> at;
  for (const TimedBytes& t : adam) at[{t.bytes, t.threads}].push_back(t.seconds);
  Traffic best;
  for (auto& [key, seconds] : at) {
    if (key.first != at.rbegin()->first.first) continue;  // the largest count: the map's last keys
    const double elements = key.first / 4;
    const double rate = elements * models::kAdamBytesPerElement / Median(std::move(seconds));
    if (rate > best.bytes_per_s) best = {rate, static_cast<int64_t>(elements), key.second};
  }
  return best;
}

// The note of a memory_bw raised from `from` to Adam's traffic `t`.
std::string RaisedNote(const std::string& from, const Traffic& t) {
  return fmt::format("memory_bw raised from {} to {}, Adam's fastest traffic ({} elements, {} thread{}): Adam moves the "
                     "bytes the update loop does and cannot outrun the memory",
                     from, FormatBandwidth(t.bytes_per_s), CompactCount(static_cast<double>(t.elements)), t.threads,
                     t.threads == 1 ? "" : "s");
}

}  // namespace

void FitCpu(const Context& c) {
  const CalibrateOptions& o = c.options;
  models::CpuSpec& cpu = c.profile->node.cpu;
  std::vector<TimedBytes> memory, adam, convert;
  int64_t empty = 0;
  for (const TraceRecord* r : c.records) {
    if (IsGpuUpdate(*r)) continue;  // the GPU's (FitGpuUpdate)
    const bool is_memory = StartsWith(r->task, "probe.memory");
    if (r->op == Op::kConvert || r->op == Op::kOptimizer || is_memory) {
      if (r->bytes <= 0 || r->duration_s() <= 0) {
        ++empty;
        continue;
      }
    }
    const TimedBytes t{static_cast<double>(r->bytes), r->duration_s(), r->threads};
    if (is_memory) {
      if (r->op == Op::kConvert) memory.push_back(t);
    } else if (r->op == Op::kOptimizer) {
      adam.push_back(t);
    } else if (r->op == Op::kConvert) {
      convert.push_back(t);
    }
  }
  if (empty > 0)
    c.notes->push_back(fmt::format("left out {} optimizer/convert records without bytes or duration", empty));

  // Memory bandwidth: a constant, bytes / time, over the samples at the highest thread count,
  // raised to Adam's fastest traffic where that is faster beyond the probe's noise (the probe's
  // loop, not the memory, then set the pace: on one 2-vCPU VM it moved 15 GB/s where Adam moved
  // 40).
  const Traffic adam_traffic = FastestAdamTraffic(adam);
  bool memory_fitted = false;
  if (memory.empty()) {
    c.reports->push_back(NoData("cpu.memory", "probe.memory* records (op convert)"));
  } else {
    FitReport rep;
    rep.model = "cpu.memory";
    int32_t top = 0;
    for (const TimedBytes& t : memory) top = std::max(top, t.threads);
    std::vector<TimedBytes> at_top;
    for (const TimedBytes& t : memory) {
      if (t.threads == top) at_top.push_back(t);
    }
    rep.samples = static_cast<int64_t>(at_top.size());
    std::vector<double> rates;
    for (const TimedBytes& t : at_top) rates.push_back(t.bytes / t.seconds);
    const auto [lo, hi] = std::minmax_element(rates.begin(), rates.end());
    rep.data_range =
        fmt::format("threads {}; {} (spread)", top, RangeText(*lo, *hi, [](double v) { return FormatBandwidth(v); }));
    if (at_top.size() < memory.size()) {
      rep.note = fmt::format("{} samples at fewer threads not used", memory.size() - at_top.size());
    }
    std::vector<std::string> reasons;
    AddIf(&reasons, TooFewSamples(rep.samples, 1, o));
    double bw = 0;
    if (reasons.empty()) {
      const auto n = static_cast<Eigen::Index>(at_top.size());
      Eigen::MatrixXd x(n, 1);
      Eigen::VectorXd y(n);
      for (Eigen::Index i = 0; i < n; ++i) {
        x(i, 0) = at_top[static_cast<size_t>(i)].bytes;
        y(i) = at_top[static_cast<size_t>(i)].seconds;
      }
      auto fit = FitLinearRelative(x, y, Options(o));
      if (!fit.ok()) {
        reasons.push_back("the fit failed: " + fit.status().message());
      } else {
        SetDiagnostics(*fit, &rep);
        bw = fit->params(0) > 0 ? 1.0 / fit->params(0) : 0;
        rep.params = {{"memory_bw", bw, fit->rel_std_errors(0), "B/s", true}};
        AddIf(&reasons, DeterminedRule("memory_bw", fit->rel_std_errors(0), "repeat the memory probe", o));
        if (bw <= 0) reasons.push_back("memory_bw is not positive");
      }
    }
    if (Conclude(&rep, reasons)) {
      memory_fitted = true;
      cpu.memory_bw_bytes_per_s = bw;
      // Beyond the probe's noise (three times its rms residual, as the fits here judge a change).
      if (adam_traffic.bytes_per_s > bw * (1 + 3 * std::max(rep.rms_rel_residual, o.min_residual_sd))) {
        rep.params[0].value = adam_traffic.bytes_per_s;
        rep.note += (rep.note.empty() ? "" : "; ") + RaisedNote(FormatBandwidth(bw), adam_traffic);
        cpu.memory_bw_bytes_per_s = adam_traffic.bytes_per_s;
      }
    }
    c.reports->push_back(rep);
  }
  if (!memory_fitted && adam_traffic.bytes_per_s > cpu.memory_bw_bytes_per_s * (1 + 3 * o.min_residual_sd)) {
    c.notes->push_back("cpu.memory: " + RaisedNote("the base's " + FormatBandwidth(cpu.memory_bw_bytes_per_s), adam_traffic));
    cpu.memory_bw_bytes_per_s = adam_traffic.bytes_per_s;
  }

  // Adam and conversions use the memory bandwidth just fitted (or the base's).
  if (adam.empty()) {
    c.reports->push_back(NoData("cpu.adam", "optimizer records (bytes = 4 x elements, threads)"));
  } else {
    FitReport rep;
    rep.model = "cpu.adam";
    auto rate = FitPerCoreRate("adam_rate_per_core", "elements/s", adam, 0.25,
                               cpu.memory_bw_bytes_per_s / models::kAdamBytesPerElement, cpu.cores, o, &rep);
    if (rate) cpu.adam_elements_per_s_per_core = *rate;
    c.reports->push_back(rep);
  }
  if (convert.empty()) {
    c.reports->push_back(NoData("cpu.convert", "convert records other than probe.memory*"));
  } else {
    FitReport rep;
    rep.model = "cpu.convert";
    auto rate =
        FitPerCoreRate("convert_bw_per_core", "B/s", convert, 1.0, cpu.memory_bw_bytes_per_s, cpu.cores, o, &rep);
    if (rate) cpu.convert_bytes_per_s_per_core = *rate;
    c.reports->push_back(rep);
  }
}

void FitCollectives(const Context& c) {
  const CalibrateOptions& o = c.options;
  struct Obs {
    Op op;
    double bytes, seconds;
    int32_t ranks;
  };
  std::vector<Obs> obs;
  std::vector<double> local_rates;  // one rank's collectives: GB/s of the library's local copy
  double local_min = 0, local_max = 0;
  int64_t empty = 0;
  for (const TraceRecord* r : c.records) {
    if (!IsCollectiveOp(r->op)) continue;
    if (r->threads < 1 || r->bytes <= 0 || r->duration_s() <= 0) {
      ++empty;
      continue;
    }
    if (r->threads == 1) {  // threads carries the rank count
      const double b = static_cast<double>(r->bytes);
      local_min = local_rates.empty() ? b : std::min(local_min, b);
      local_max = local_rates.empty() ? b : std::max(local_max, b);
      local_rates.push_back(b / r->duration_s() / 1e9);  // GB/s, as the report's spread prints it
      continue;
    }
    obs.push_back({r->op, static_cast<double>(r->bytes), r->duration_s(), r->threads});
  }
  if (empty > 0) c.notes->push_back(fmt::format("left out {} collective records with no rank count, bytes or duration", empty));
  // One rank: the median rate of its collectives' local copies (interconnect.local_bw).
  if (local_rates.empty()) {
    c.reports->push_back(NoData("interconnect.local", "allgather/reducescatter/allreduce records with threads = ranks = 1"));
  } else {
    FitReport rep;
    rep.model = "interconnect.local";
    rep.samples = static_cast<int64_t>(local_rates.size());
    rep.data_range = "one rank; " + RangeText(local_min, local_max, CompactBytes);
    double rel_se = 0;
    const double bw = MedianFit(local_rates, o, "GB/s", &rep, &rel_se) * 1e9;
    rep.params = {{"local_bw", bw, rel_se, "B/s", true}};
    std::vector<std::string> reasons;
    AddIf(&reasons, TooFewSamples(rep.samples, 1, o));
    AddIf(&reasons, DeterminedRule("local_bw", rel_se, "add one-rank collectives of other sizes", o));
    if (Conclude(&rep, reasons)) c.profile->node.interconnect.local_bw_bytes_per_s = bw;
    c.reports->push_back(rep);
  }
  const std::string model = "interconnect";
  if (obs.empty()) {
    c.reports->push_back(NoData(model, "allgather/reducescatter/allreduce records with threads = ranks >= 2"));
    return;
  }
  FitReport rep;
  rep.model = model;
  rep.samples = static_cast<int64_t>(obs.size());
  // t = k (n-1) alpha + k (n-1)/n bytes / busbw, k = 2 for all-reduce.
  const auto n = static_cast<Eigen::Index>(obs.size());
  Eigen::MatrixXd x(n, 2);
  Eigen::VectorXd y(n);
  std::vector<double> per_step, sizes;
  double fastest = 0, bmin = 0, bmax = 0;
  int32_t rmin = 0, rmax = 0;
  bool kinds[3] = {false, false, false};
  for (Eigen::Index i = 0; i < n; ++i) {
    const Obs& v = obs[static_cast<size_t>(i)];
    const double k = v.op == Op::kAllReduce ? 2.0 : 1.0;
    const double steps = v.ranks - 1.0;
    x(i, 0) = k * steps;
    x(i, 1) = k * steps / v.ranks * v.bytes;
    y(i) = v.seconds;
    per_step.push_back(v.bytes / v.ranks);  // the ratio of the two columns: what separates alpha from busbw
    fastest = std::max(fastest, x(i, 1) / v.seconds);
    bmin = i ? std::min(bmin, v.bytes) : v.bytes;
    bmax = i ? std::max(bmax, v.bytes) : v.bytes;
    rmin = i ? std::min(rmin, v.ranks) : v.ranks;
    rmax = i ? std::max(rmax, v.ranks) : v.ranks;
    kinds[v.op == Op::kAllGather ? 0 : v.op == Op::kReduceScatter ? 1 : 2] = true;
  }
  std::vector<std::string> names;
  if (kinds[0]) names.push_back("allgather");
  if (kinds[1]) names.push_back("reducescatter");
  if (kinds[2]) names.push_back("allreduce");
  rep.data_range = fmt::format("{}; {}, ranks {}", fmt::join(names, ", "), RangeText(bmin, bmax, CompactBytes),
                               RangeText(rmin, rmax, [](double v) { return fmt::format("{:.0f}", v); }));
  std::vector<std::string> reasons;
  AddIf(&reasons, TooFewSamples(rep.samples, 2, o));
  AddIf(&reasons,
        SpanRule(per_step, "bytes per rank", "alpha and busbw cannot be told apart; add messages of other sizes", o));
  if (!reasons.empty()) {
    Conclude(&rep, reasons);
    c.reports->push_back(rep);
    return;
  }
  auto fit = FitLinearRelative(x, y, Options(o));
  if (!fit.ok()) {
    Conclude(&rep, {"the fit failed: " + fit.status().message()});
    c.reports->push_back(rep);
    return;
  }
  SetDiagnostics(*fit, &rep);
  const double alpha = fit->params(0), per_byte = fit->params(1);
  const double busbw = per_byte > 0 ? 1.0 / per_byte : 0;
  rep.params = {{"bus_bw", busbw, fit->rel_std_errors(1), "B/s", true},
                {"latency", alpha, fit->rel_std_errors(0), "s", true}};
  AddIf(&reasons, DeterminedRule("bus_bw", fit->rel_std_errors(1), "add messages of 64 MiB and more", o));
  AddIf(&reasons, DeterminedRule("latency", fit->rel_std_errors(0), "add messages of a few KiB", o));
  if (reasons.empty()) AddIf(&reasons, ConditionRule(fit->condition_number, false, "add messages of other sizes", o));
  if (per_byte <= 0) reasons.push_back("bus_bw is not positive: collective time does not grow with size");
  if (alpha < 0 && fit->rel_std_errors(0) <= o.max_rel_std_error) {
    reasons.push_back(fmt::format("latency fitted negative ({})", FormatDuration(alpha)));
  }
  if (busbw > o.max_bw_over_fastest * fastest) {
    reasons.push_back(
        fmt::format("bus_bw {} extrapolates beyond the data (more than {:.2f}x the fastest observed busbw {}): "
                    "add messages of 64 MiB and more",
                    FormatBandwidth(busbw), o.max_bw_over_fastest, FormatBandwidth(fastest)));
  }
  if (Conclude(&rep, reasons)) {
    c.profile->node.interconnect.bus_bw_bytes_per_s = busbw;
    c.profile->node.interconnect.latency_s = alpha;
  }
  c.reports->push_back(rep);
}

}  // namespace tierflow::calibrate::internal
