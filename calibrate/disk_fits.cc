// NVMe fits: one stream per device and direction (Little's law with a saturating peak, fitted by
// Levenberg-Marquardt on relative residuals), then the mixed efficiency of reads and writes
// sharing the device (median of observed aggregate / harmonic mix of the fitted streams).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "calibrate_internal.h"
#include "tierflow/core/units.h"
#include "tierflow/models/perf.h"

namespace tierflow::calibrate::internal {

MedianStats MedianOf(const std::vector<double>& v, const CalibrateOptions& o) {
  MedianStats m;
  m.median = Median(v);
  const double n = static_cast<double>(v.size());
  double mean = 0, var = 0;
  for (double e : v) mean += e / n;
  for (double e : v) {
    const double rel = (m.median - e) / e;  // the model at the median against this window
    m.sum_sq_rel += rel * rel;
    m.worst_rel = std::max(m.worst_rel, std::fabs(rel));
    var += (e - mean) * (e - mean);
  }
  const double sd = n > 1 ? std::sqrt(var / (n - 1)) : 0;
  m.rel_se = std::max(1.2533 * sd / std::sqrt(n) / m.median, o.min_residual_sd / std::sqrt(n));
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  m.lo = *lo;
  m.hi = *hi;
  return m;
}

double MedianFit(const std::vector<double>& v, const CalibrateOptions& o, const std::string& what, FitReport* rep,
                 double* rel_se) {
  const MedianStats m = MedianOf(v, o);
  rep->rms_rel_residual = std::sqrt(m.sum_sq_rel / static_cast<double>(v.size()));
  rep->max_rel_residual = m.worst_rel;
  rep->condition_number = 1;
  *rel_se = m.rel_se;
  rep->data_range += fmt::format("; {} {} (spread)", what, RangeText(m.lo, m.hi, [](double x) { return fmt::format("{:.3f}", x); }));
  return m.median;
}

namespace {

// One observation of one stream: a steady-state bandwidth (probe window, fio job), or the
// duration of one run task of `bytes`.
struct StreamObs {
  int64_t block = 0;
  int32_t qd = 0;
  int64_t bytes = 0;
  double observed = 0;  // bytes/s, or seconds when `duration`
  bool duration = false;
  double ImpliedBw() const { return duration ? static_cast<double>(bytes) / observed : observed; }
};

// Reads and writes that shared one device for one window.
struct MixedObs {
  int64_t block = 0;
  int32_t qd = 0;         // in flight on the device; a probe.disk.rw window: per stream
  double read_bytes = 0;  // or bytes/s (fio); only ratios and the aggregate rate matter
  double write_bytes = 0;
  double seconds = 1;
  int32_t streams = 0;    // a probe.disk.rw window: its reader + writer streams; else 0
};

// One window of the disk probe that drove several devices at once (one op, one shape).
struct JointWindow {
  bool write = false;
  int64_t block = 0;
  int32_t qd = 0;
  double seconds = 0;
  std::map<int32_t, double> bytes;  // per device
};

// Whether this calibration fitted device `d`'s stream in that direction (its report says so).
bool FittedDirection(int32_t d, bool write, const Context& c) {
  const std::string model = "nvme" + std::to_string(d) + (write ? ".write" : ".read");
  for (const FitReport& r : *c.reports) {
    if (r.model == model) return r.outcome == FitOutcome::kFitted;
  }
  return false;
}

struct DeviceData {
  std::vector<StreamObs> read, write;
  std::vector<MixedObs> mixed;
  std::vector<MixedObs> by_streams;  // probe.disk.rw windows
};

double StreamBandwidth(double peak, double latency, double iops, int64_t block, int32_t qd) {
  models::NvmeSpec d;
  d.read_bw_bytes_per_s = peak;
  d.read_latency_s = latency;
  d.read_iops = iops;
  return models::DiskReadBandwidth(d, block, qd);  // the same Little's law as DiskWriteBandwidth
}

// iops 0: no limit.
double Predict(double peak, double latency, double iops, const StreamObs& o) {
  const double bw = StreamBandwidth(peak, latency, iops, o.block, o.qd);
  return o.duration ? latency + static_cast<double>(o.bytes) / bw : bw;
}

std::string StreamRange(const std::vector<StreamObs>& obs) {
  int64_t bmin = obs[0].block, bmax = bmin;
  int32_t qmin = obs[0].qd, qmax = qmin;
  int64_t tasks = 0;
  for (const StreamObs& o : obs) {
    bmin = std::min(bmin, o.block);
    bmax = std::max(bmax, o.block);
    qmin = std::min(qmin, o.qd);
    qmax = std::max(qmax, o.qd);
    tasks += o.duration ? 1 : 0;
  }
  std::string s = "block " + RangeText(static_cast<double>(bmin), static_cast<double>(bmax), CompactBytes) + ", qd " +
                  RangeText(qmin, qmax, [](double v) { return fmt::format("{:.0f}", v); });
  if (tasks > 0) s += fmt::format(" ({} run tasks)", tasks);
  return s;
}

// Fits (peak, latency) of one direction, and an IOPS limit where the data show one (else 0);
// writes them and returns true when fitted.
bool FitStream(const std::string& model, const std::string& dir, const std::vector<StreamObs>& obs,
               const CalibrateOptions& o, double* peak_out, double* latency_out, double* iops_out,
               std::vector<FitReport>* reports) {
  if (obs.empty()) {
    reports->push_back(NoData(model, "threads=1 probe.disk." + dir + " records, fio " + dir + " jobs, or run " + dir +
                                         "s that overlap no other I/O on the device"));
    return false;
  }
  FitReport rep;
  rep.model = model;
  rep.samples = static_cast<int64_t>(obs.size());
  rep.data_range = StreamRange(obs);
  const std::string bw_name = dir + "_bw", lat_name = dir + "_latency";
  const std::string too_few = TooFewSamples(rep.samples, 2, o);
  if (!too_few.empty()) {
    Conclude(&rep, {too_few});
    reports->push_back(rep);
    return false;
  }
  double fastest = 0;
  for (const StreamObs& s : obs) fastest = std::max(fastest, s.ImpliedBw());
  // Start at the fastest observation for the peak, and at the latency that the slower
  // bandwidth windows imply through Little's law at that peak.
  std::vector<double> lat_guesses;
  for (const StreamObs& s : obs) {
    if (s.duration || s.observed > 0.8 * fastest) continue;
    const double b = static_cast<double>(s.block);
    const double lat = s.qd * b / s.observed - b / fastest;
    if (lat > 0) lat_guesses.push_back(lat);
  }
  Eigen::VectorXd y(static_cast<Eigen::Index>(obs.size()));
  for (size_t i = 0; i < obs.size(); ++i) y(static_cast<Eigen::Index>(i)) = obs[i].observed;
  FitOptions fo;
  fo.min_residual_sd = o.min_residual_sd;
  // The min() of Little's law has local optima: a noisy window at high depth implies a long
  // latency, and from there a fit can settle with the low-depth windows far off. So start from
  // the median and the smallest implied latency and from nearly none, and keep the best.
  std::vector<double> starts = {1e-6};
  if (!lat_guesses.empty()) {
    starts.push_back(Median(lat_guesses));
    starts.push_back(*std::min_element(lat_guesses.begin(), lat_guesses.end()));
  } else {
    starts.push_back(50e-6);
  }
  StatusOr<FitResult> fit = InvalidArgument("no start");
  for (double start : starts) {
    Eigen::VectorXd init(2);
    init << fastest, start;
    auto tried = FitPositiveLM(
        [&](const Eigen::VectorXd& p, int i) { return Predict(p(0), p(1), 0, obs[static_cast<size_t>(i)]); }, y, init,
        fo);
    // Keep the best success; while none has succeeded, the latest failure (for the message).
    if (!fit.ok() || (tried.ok() && tried->rms_rel_residual < fit->rms_rel_residual)) fit = std::move(tried);
  }
  if (!fit.ok()) {
    Conclude(&rep, {"the fit failed: " + fit.status().message()});
    reports->push_back(rep);
    return false;
  }
  // An IOPS limit: small requests at depth are capped by a per-request cost whatever the depth
  // (this VM's disk: 4 KiB reads 0.11 GB/s at depth 1, 0.33 at 8, 0.59 at 32, where Little's law
  // with one latency says 0.9 at 8). Tried on top of the two-parameter fit; kept when it takes
  // the rms residual down by a fifth and is itself determined.
  double iops = 0;
  if (fit->rms_rel_residual > 0) {
    double top = 0;
    for (const StreamObs& s : obs) top = std::max(top, s.ImpliedBw() / static_cast<double>(s.block));
    Eigen::VectorXd init(3);
    init << fit->params(0), std::max(fit->params(1), 1e-6), 1.1 * top;
    auto tried = FitPositiveLM(
        [&](const Eigen::VectorXd& p, int i) { return Predict(p(0), p(1), p(2), obs[static_cast<size_t>(i)]); }, y,
        init, fo);
    if (tried.ok() && tried->rms_rel_residual < 0.8 * fit->rms_rel_residual &&
        tried->rel_std_errors(2) <= o.max_rel_std_error) {
      iops = tried->params(2);
      fit = std::move(tried);
    }
  }
  SetDiagnostics(*fit, &rep);
  const double peak = fit->params(0), latency = fit->params(1);
  rep.params = {{bw_name, peak, fit->rel_std_errors(0), "B/s", true},
                {lat_name, latency, fit->rel_std_errors(1), "s", true}};
  if (iops > 0) rep.params.push_back({dir + "_iops", iops, fit->rel_std_errors(2), "requests/s", true});
  std::vector<std::string> reasons;
  auto add = [&](std::string r) {
    if (!r.empty()) reasons.push_back(std::move(r));
  };
  add(DeterminedRule(bw_name, fit->rel_std_errors(0), "add large blocks at high queue depths", o));
  if (fit->rel_std_errors(1) > o.max_rel_std_error) {
    // A throttled virtual disk is flat in queue depth: its latency may be undetermined yet not
    // matter over the data.
    const double upper = latency * (1 + fit->rel_std_errors(1));
    double largest = 0;
    for (const StreamObs& s : obs) {
      const double at = Predict(peak, latency, iops, s);
      largest = std::max(
          {largest, std::fabs(Predict(peak, 0, iops, s) / at - 1), std::fabs(Predict(peak, upper, iops, s) / at - 1)});
    }
    rep.note = ImmaterialNote(lat_name, fit->rel_std_errors(1), FormatDuration(upper), largest, fit->rms_rel_residual, o);
    if (rep.note.empty()) add(DeterminedRule(lat_name, fit->rel_std_errors(1), "add small blocks at queue depths 1..4", o));
  }
  // An undetermined parameter says more than the condition number that goes with it.
  if (reasons.empty() && rep.note.empty()) {
    add(ConditionRule(fit->condition_number, true,
                      "add small blocks at queue depths 1..4 and large blocks at high depth", o));
  }
  if (peak > o.max_disk_peak_over_fastest * fastest) {
    add(fmt::format(
        "{} {} extrapolates beyond the data (more than {:.2f}x the fastest observed {}): add large blocks at "
        "high queue depths",
        bw_name, FormatBandwidth(peak), o.max_disk_peak_over_fastest, FormatBandwidth(fastest)));
  }
  const bool ok = Conclude(&rep, reasons);
  if (ok) {
    *peak_out = peak;
    *latency_out = latency;
    *iops_out = iops;
  }
  reports->push_back(rep);
  return ok;
}

// The steady-state windows of one direction (probe, fio), one point per (block, depth): the
// median of its windows. Run tasks (durations) are left out: they are whole transfers, not a
// stream's sustained rate. One stream cannot outrun its device, so the device's peak (`peak`,
// its capacity when streams share it, and the cap on every stream) is raised to the fastest
// point where the fit left it below: a fit through noisy windows lands among them, not above.
void KeepMeasured(const std::string& model, const std::vector<StreamObs>& obs, std::vector<models::MeasuredBandwidth>* out,
                  double* peak, const Context& c) {
  std::map<std::pair<int64_t, int32_t>, std::vector<double>> at;
  for (const StreamObs& o : obs) {
    if (!o.duration) at[{o.block, o.qd}].push_back(o.observed);
  }
  out->clear();
  for (auto& [key, v] : at) out->push_back({key.first, key.second, Median(std::move(v))});
  if (out->empty()) return;
  const std::string dir = model.substr(model.find('.') + 1);
  c.notes->push_back(fmt::format("{}: {} measured points kept beside the fit ({}_bw_by_request): the model takes them "
                                 "where they surround a stream's block and depth",
                                 model, out->size(), dir));
  const auto fastest = std::max_element(out->begin(), out->end(), [](const auto& a, const auto& b) {
    return a.bytes_per_s < b.bytes_per_s;
  });
  if (fastest->bytes_per_s <= *peak) return;
  const std::string raised =
      fmt::format("{}_bw raised from the fit's {} to the fastest measured point's {} ({}x{}): one stream cannot outrun the "
                  "device",
                  dir, FormatBandwidth(*peak), FormatBandwidth(fastest->bytes_per_s),
                  CompactBytes(static_cast<double>(fastest->block_bytes)), fastest->queue_depth);
  *peak = fastest->bytes_per_s;
  for (FitReport& r : *c.reports) {
    if (r.model != model) continue;
    for (FitParameter& p : r.params) {
      if (p.name == dir + "_bw") p.value = *peak;
    }
    r.note = r.note.empty() ? raised : r.note + "; " + raised;
  }
}

// efficiency = observed aggregate x (r / R' + w / W'), R' and W' the fitted streams at the
// window's request size and the requests it kept in flight on the device.
double MixedWindowEfficiency(const models::NvmeSpec& disk, const MixedObs& m) {
  const double total = m.read_bytes + m.write_bytes;
  const double r = m.read_bytes / total, w = m.write_bytes / total;
  const double aggregate = total / m.seconds;
  const int32_t inflight = m.qd * std::max(m.streams, 1);
  const double read_bw = models::DiskReadBandwidth(disk, m.block, inflight);
  const double write_bw = models::DiskWriteBandwidth(disk, m.block, inflight);
  return aggregate * (r / read_bw + w / write_bw);
}

void FitMixed(const std::string& model, const std::string& device, const std::vector<MixedObs>& obs,
              bool streams_fitted, const CalibrateOptions& o, models::NvmeSpec* disk, std::vector<FitReport>* reports) {
  if (obs.empty()) {
    reports->push_back(NoData(model, "threads=1 probe.disk.mix windows or fio rw/randrw jobs"));
    return;
  }
  FitReport rep;
  rep.model = model;
  rep.samples = static_cast<int64_t>(obs.size());
  int64_t bmin = obs[0].block, bmax = bmin;
  int32_t qmin = obs[0].qd, qmax = qmin;
  std::vector<double> fraction;
  for (const MixedObs& m : obs) {
    fraction.push_back(m.read_bytes / (m.read_bytes + m.write_bytes));
    bmin = std::min(bmin, m.block);
    bmax = std::max(bmax, m.block);
    qmin = std::min(qmin, m.qd);
    qmax = std::max(qmax, m.qd);
  }
  const auto [fmin, fmax] = std::minmax_element(fraction.begin(), fraction.end());
  rep.data_range = fmt::format("block {}, qd {}, read fraction {}",
                               RangeText(static_cast<double>(bmin), static_cast<double>(bmax), CompactBytes),
                               RangeText(qmin, qmax, [](double v) { return fmt::format("{:.0f}", v); }),
                               RangeText(*fmin, *fmax, [](double v) { return fmt::format("{:.2f}", v); }));
  if (!streams_fitted) {
    Conclude(&rep, {fmt::format("needs fitted {0}.read and {0}.write (the harmonic mix is relative to them)", device)});
    reports->push_back(rep);
    return;
  }
  std::vector<double> eff;
  for (const MixedObs& m : obs) eff.push_back(MixedWindowEfficiency(*disk, m));
  double rel_se = 0;
  const double median = MedianFit(eff, o, "efficiency", &rep, &rel_se);
  double value = median;
  if (median > 1) {
    value = 1;
    rep.note = fmt::format(
        "clamped to 1 from the median {:.3f} (the mix ran faster than the harmonic mix of the fitted "
        "streams)",
        median);
  }
  rep.params = {{"mixed_efficiency", value, rel_se, "", true}};
  std::vector<std::string> reasons;
  const std::string too_few = TooFewSamples(rep.samples, 1, o);
  if (!too_few.empty()) reasons.push_back(too_few);
  const std::string spread = DeterminedRule("mixed_efficiency", rel_se, "repeat the mixed windows", o);
  if (!spread.empty()) reasons.push_back(spread);
  if (Conclude(&rep, reasons)) disk->mixed_efficiency = value;
  reports->push_back(rep);
}

// The mixed efficiency per stream count, from probe.disk.rw windows (readers and writers at
// once): per count, the median of the windows' efficiencies (clamped to 1), as FitMixed; a count
// whose median is undetermined is left out, and the fit needs one determined count at least.
void FitMixedByStreams(const std::string& model, const std::string& device, const std::vector<MixedObs>& obs,
                       bool streams_fitted, const CalibrateOptions& o, models::NvmeSpec* disk,
                       std::vector<FitReport>* reports) {
  if (obs.empty()) {
    reports->push_back(NoData(model, "probe.disk.rw windows (probe disk --ops rw --streams R:W,...)"));
    return;
  }
  FitReport rep;
  rep.model = model;
  rep.samples = static_cast<int64_t>(obs.size());
  std::map<int32_t, std::vector<double>> by_count;
  for (const MixedObs& m : obs) {
    if (streams_fitted) by_count[m.streams].push_back(MixedWindowEfficiency(*disk, m));
  }
  int32_t smin = obs[0].streams, smax = smin;
  for (const MixedObs& m : obs) {
    smin = std::min(smin, m.streams);
    smax = std::max(smax, m.streams);
  }
  rep.data_range = fmt::format("streams {}", RangeText(smin, smax, [](double v) { return fmt::format("{:.0f}", v); }));
  if (!streams_fitted) {
    Conclude(&rep, {fmt::format("needs fitted {0}.read and {0}.write (the harmonic mix is relative to them)", device)});
    reports->push_back(rep);
    return;
  }
  std::vector<std::pair<int32_t, double>> points;
  std::vector<std::string> left_out, clamped;
  double ss = 0, worst = 0;
  for (const auto& [count, eff] : by_count) {
    const MedianStats m = MedianOf(eff, o);
    ss += m.sum_sq_rel;
    worst = std::max(worst, m.worst_rel);
    const double median = m.median;
    // One window has no spread to judge its median by.
    const double rel_se = eff.size() > 1 ? m.rel_se : 1.0;
    const std::string name = fmt::format("streams {}", count);
    if (eff.size() < 2 || !DeterminedRule(name, rel_se, "", o).empty()) {
      left_out.push_back(fmt::format("{} ({} window{}, relative standard error {:.2f})", count, eff.size(),
                                     eff.size() == 1 ? "" : "s", rel_se));
      continue;
    }
    const double value = std::min(median, 1.0);
    if (median > 1) clamped.push_back(fmt::format("{} ({:.3f})", count, median));
    rep.params.push_back({name, value, rel_se, "", true});
    points.emplace_back(count, value);
  }
  rep.rms_rel_residual = std::sqrt(ss / static_cast<double>(obs.size()));
  rep.max_rel_residual = worst;
  rep.condition_number = 1;
  std::string note;
  if (!left_out.empty()) note += "left out stream counts without a determined median: " + fmt::format("{}", fmt::join(left_out, ", "));
  if (!clamped.empty()) note += std::string(note.empty() ? "" : "; ") + "clamped to 1: " + fmt::format("{}", fmt::join(clamped, ", "));
  rep.note = note;
  std::vector<std::string> reasons;
  if (points.empty()) reasons.push_back("no stream count has two windows or more with a determined median: repeat the rw windows (--reps)");
  if (Conclude(&rep, reasons)) disk->mixed_efficiency_by_streams = points;
  reports->push_back(rep);
}

// Decides, for each later device that was driven together with an earlier one, whether the two
// are one device (same_device_as): the aggregate of both at once against the faster alone, at
// the window's block size and depth on the fitted curves. At most kSharedBelow times one alone:
// one device; at least kApartAbove: two; in between, or fits missing: refused. A shared VM disk
// is noisy (one virtual disk gave 1.39 here), hence the wide band.
void FitSharedDevices(const std::map<std::tuple<int, int64_t, double, double>, JointWindow>& joint, const Context& c) {
  constexpr double kSharedBelow = 1.5, kApartAbove = 1.75;
  std::map<std::pair<int32_t, int32_t>, std::vector<double>> ratios;  // (earlier, later) -> per window
  auto& nvme = c.profile->node.nvme;
  std::set<int32_t> unfitted;
  for (const auto& entry : joint) {
    const auto& w = entry.second;  // a name, not a structured binding: clang 14 cannot capture one
    for (auto a = w.bytes.begin(); a != w.bytes.end(); ++a) {
      for (auto b = std::next(a); b != w.bytes.end(); ++b) {
        const int32_t i = a->first, j = b->first;
        if (j >= static_cast<int32_t>(nvme.size())) continue;  // refused by the stream fits
        if (!FittedDirection(i, w.write, c) || !FittedDirection(j, w.write, c)) {
          unfitted.insert(j);
          continue;
        }
        auto alone = [&](int32_t d) {
          const models::NvmeSpec& s = nvme[static_cast<size_t>(d)];
          return w.write ? models::DiskWriteBandwidth(s, w.block, w.qd) : models::DiskReadBandwidth(s, w.block, w.qd);
        };
        ratios[{i, j}].push_back((a->second + b->second) / w.seconds / std::max(alone(i), alone(j)));
      }
    }
  }
  for (int32_t j : unfitted) {
    bool decided = false;
    for (const auto& [pair, r] : ratios) decided |= pair.second == j;
    if (!decided) {
      c.reports->push_back(RefusedReport(
          "nvme" + std::to_string(j) + ".device",
          "needs the stream fits of both devices driven together (whether they share one compares with them)"));
    }
  }
  std::set<int32_t> done;
  for (const auto& [pair, r] : ratios) {
    const auto [i, j] = pair;
    if (done.count(j)) continue;  // decided against an earlier device
    FitReport rep;
    rep.model = "nvme" + std::to_string(j) + ".device";
    rep.samples = static_cast<int64_t>(r.size());
    rep.data_range = fmt::format("nvme{} and nvme{} at once", i, j);
    double rel_se = 0;
    const double ratio = MedianFit(r, c.options, "together / the faster alone", &rep, &rel_se);
    rep.params = {{"together_over_alone_nvme" + std::to_string(i), ratio, rel_se, "", false}};
    const int32_t root = nvme[static_cast<size_t>(i)].same_device_as >= 0 ? nvme[static_cast<size_t>(i)].same_device_as : i;
    if (ratio <= kSharedBelow) {
      Conclude(&rep, {});
      rep.note = fmt::format("one device: nvme{} and nvme{} together get {:.2f}x of one alone; same_device_as: nvme{}",
                             i, j, ratio, root);
      nvme[static_cast<size_t>(j)].same_device_as = root;
      done.insert(j);
    } else if (ratio >= kApartAbove) {
      Conclude(&rep, {});
      rep.note = fmt::format("separate devices: nvme{} and nvme{} together get {:.2f}x of one alone", i, j, ratio);
      if (nvme[static_cast<size_t>(j)].same_device_as == i) nvme[static_cast<size_t>(j)].same_device_as = -1;
    } else {
      Conclude(&rep, {fmt::format("nvme{} and nvme{} together get {:.2f}x of one alone, between {:.1f}x (one device) "
                                  "and {:.1f}x (two): repeat the probe of both at once",
                                  i, j, ratio, kSharedBelow, kApartAbove)});
    }
    c.reports->push_back(rep);
  }
}

}  // namespace

void FitDisks(const Context& c) {
  std::map<int32_t, DeviceData> data;
  std::map<int32_t, std::vector<const TraceRecord*>> run_io;
  // (device, iteration, start, end) -> the window's reads and writes.
  std::map<std::tuple<int32_t, int64_t, double, double>, MixedObs> windows;
  // (op, iteration, start, end) -> per device: a window that drove several devices at once.
  std::map<std::tuple<int, int64_t, double, double>, JointWindow> joint;
  int64_t multi_device = 0, unusable = 0;
  for (const TraceRecord* r : c.records) {
    if (r->op != Op::kRead && r->op != Op::kWrite) continue;
    const std::optional<int32_t> dev = NvmeDevice(r->resource);
    if (!dev) continue;
    const bool is_read = r->op == Op::kRead;
    if (IsRunRecord(*r)) {
      run_io[*dev].push_back(r);
      continue;
    }
    const bool stream = r->task == "probe.disk.read" || r->task == "probe.disk.write";
    const bool rw = r->task == "probe.disk.rw";
    const bool mix = r->task == "probe.disk.mix" || rw;
    if (!stream && !mix) continue;
    if (r->threads > 1) {
      // Several devices driven at once: not the single-device model, but whether they share one.
      if (stream && r->bytes >= 0 && r->duration_s() > 0 && r->block_bytes > 0 && r->queue_depth > 0) {
        JointWindow& w = joint[{static_cast<int>(r->op), r->iteration, r->start_s, r->end_s}];
        w.write = !is_read;
        w.block = r->block_bytes;
        w.qd = r->queue_depth;
        w.seconds = r->duration_s();
        w.bytes[*dev] += static_cast<double>(r->bytes);
      } else {
        ++multi_device;
      }
      continue;
    }
    if (r->bytes <= 0 || r->duration_s() <= 0 || r->block_bytes <= 0 || r->queue_depth <= 0) {
      ++unusable;
      continue;
    }
    if (stream) {
      StreamObs o{r->block_bytes, r->queue_depth, r->bytes, static_cast<double>(r->bytes) / r->duration_s(), false};
      (is_read ? data[*dev].read : data[*dev].write).push_back(o);
    } else {
      MixedObs& m = windows[{*dev, r->iteration, r->start_s, r->end_s}];
      m.block = r->block_bytes;
      m.qd = r->queue_depth;
      m.seconds = r->duration_s();
      if (rw) m.streams += std::max(r->tasks, 1);  // the read record's readers, the write record's writers
      (is_read ? m.read_bytes : m.write_bytes) += static_cast<double>(r->bytes);
    }
  }
  for (const auto& [key, m] : windows) {
    if (m.read_bytes > 0 && m.write_bytes > 0) (m.streams > 0 ? data[std::get<0>(key)].by_streams : data[std::get<0>(key)].mixed).push_back(m);
  }
  int64_t contended = 0;
  for (auto& [dev, group] : run_io) {
    const std::vector<bool> alone = Uncontended(group);
    for (size_t i = 0; i < group.size(); ++i) {
      const TraceRecord& r = *group[i];
      if (!alone[i]) {
        ++contended;
        continue;
      }
      if (r.bytes <= 0 || r.duration_s() <= 0 || r.block_bytes <= 0 || r.queue_depth <= 0) {
        ++unusable;
        continue;
      }
      StreamObs o{r.block_bytes, r.queue_depth, r.bytes, r.duration_s(), true};
      (r.op == Op::kRead ? data[dev].read : data[dev].write).push_back(o);
    }
  }
  for (const DiskSample& s : c.disk_samples) {
    if (s.block_bytes <= 0 || s.queue_depth <= 0) {
      ++unusable;
      continue;
    }
    if (s.kind == DiskSample::Kind::kRead && s.read_bytes_per_s > 0) {
      data[s.device].read.push_back({s.block_bytes, s.queue_depth, 0, s.read_bytes_per_s, false});
    } else if (s.kind == DiskSample::Kind::kWrite && s.write_bytes_per_s > 0) {
      data[s.device].write.push_back({s.block_bytes, s.queue_depth, 0, s.write_bytes_per_s, false});
    } else if (s.kind == DiskSample::Kind::kMixed && s.read_bytes_per_s > 0 && s.write_bytes_per_s > 0) {
      data[s.device].mixed.push_back({s.block_bytes, s.queue_depth, s.read_bytes_per_s, s.write_bytes_per_s, 1.0});
    } else {
      ++unusable;
    }
  }
  if (multi_device > 0) {
    c.notes->push_back(fmt::format(
        "left out {} disk records of several devices at once that are not probe.disk.read/write windows", multi_device));
  }
  if (contended > 0) {
    c.notes->push_back(
        fmt::format("left out {} run reads/writes that overlapped other I/O on the same device", contended));
  }
  if (unusable > 0) {
    c.notes->push_back(fmt::format(
        "left out {} disk records or samples without bytes, duration, block size or queue depth", unusable));
  }

  const auto disks = static_cast<int32_t>(c.profile->node.nvme.size());
  int32_t last = disks - 1;
  if (!data.empty()) last = std::max(last, data.rbegin()->first);
  for (int32_t d = 0; d <= last; ++d) {
    const std::string device = "nvme" + std::to_string(d);
    const DeviceData& dd = data[d];
    if (d >= disks) {
      const std::string why =
          fmt::format("the base hardware has {} NVMe device{} (nvme0..nvme{}): give a --base with {}", disks,
                      disks == 1 ? "" : "s", disks - 1, device);
      if (!dd.read.empty()) c.reports->push_back(RefusedReport(device + ".read", why));
      if (!dd.write.empty()) c.reports->push_back(RefusedReport(device + ".write", why));
      if (!dd.mixed.empty()) c.reports->push_back(RefusedReport(device + ".mixed", why));
      continue;
    }
    models::NvmeSpec& disk = c.profile->node.nvme[static_cast<size_t>(d)];
    const bool read_ok = FitStream(device + ".read", "read", dd.read, c.options, &disk.read_bw_bytes_per_s,
                                   &disk.read_latency_s, &disk.read_iops, c.reports);
    const bool write_ok = FitStream(device + ".write", "write", dd.write, c.options, &disk.write_bw_bytes_per_s,
                                    &disk.write_latency_s, &disk.write_iops, c.reports);
    // Beside each fit, what was measured: the model takes it where it surrounds a stream (before
    // the mixed fits, whose efficiency is against the streams alone).
    if (read_ok) KeepMeasured(device + ".read", dd.read, &disk.read_bw_by_request, &disk.read_bw_bytes_per_s, c);
    if (write_ok) KeepMeasured(device + ".write", dd.write, &disk.write_bw_by_request, &disk.write_bw_bytes_per_s, c);
    FitMixed(device + ".mixed", device, dd.mixed, read_ok && write_ok, c.options, &disk, c.reports);
    if (!dd.by_streams.empty()) {
      FitMixedByStreams(device + ".mixed_streams", device, dd.by_streams, read_ok && write_ok, c.options, &disk, c.reports);
    }
  }
  FitSharedDevices(joint, c);
}

}  // namespace tierflow::calibrate::internal
