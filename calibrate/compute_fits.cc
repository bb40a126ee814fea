// Compute fits: the roofline t = max(F / (peak * eff_phase), B / hbm_bw) + tasks * overhead over
// probe samples and per-layer sums of run records, as ONE linear least-squares fit in which each
// sample is either compute-bound (a column per phase: F) or memory-bound (a column: B), and all
// share the per-task overhead (a column: the schedule tasks the sample stands for). Which side of the roofline a sample sits on depends on the
// fit, so the classification is iterated until it stops changing. Reports: "compute" (the
// shared overhead, hbm_bw, and the combined efficiency) and "compute.forward"/"compute.backward"
// (each phase's efficiency, from the same fit).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <tuple>

#include "calibrate_internal.h"
#include "tierflow/core/units.h"
#include "tierflow/models/perf.h"
#include "tierflow/traces/compare.h"

namespace tierflow::calibrate::internal {
namespace {

struct Sample {
  Phase phase = Phase::kOther;
  double flops = 0, bytes = 0, seconds = 0;
  double tasks = 1;  // schedule compute tasks the sample stands for (traces::TaskCount): the overhead's regressor
};

enum class Role { kCompute, kMemory, kFixed };  // which term of the roofline it measures

constexpr std::array<Phase, 4> kPhases = {Phase::kForward, Phase::kBackward, Phase::kStep, Phase::kOther};

struct Solution {
  FitResult fit;
  std::array<int, 4> phase_col{-1, -1, -1, -1};  // column of each phase's slope 1/(peak eff)
  int memory_col = -1;                           // column of 1/hbm_bw
  int overhead_col = -1;                         // -1 when the overhead was held fixed
  double fixed_overhead = 0;
  int Cols() const { return static_cast<int>(fit.params.size()); }
};

// Least squares of the relative residuals for the given roles. The overhead is per task: its
// column holds each sample's task count. With `fixed_overhead` (per task) set it is not fitted:
// the samples' times less their tasks' overhead are.
StatusOr<Solution> Solve(const std::vector<Sample>& s, const std::vector<Role>& role,
                         std::optional<double> fixed_overhead, const FitOptions& fo) {
  Solution sol;
  int cols = 0;
  for (size_t p = 0; p < kPhases.size(); ++p) {
    for (size_t i = 0; i < s.size(); ++i) {
      if (role[i] == Role::kCompute && s[i].phase == kPhases[p]) {
        sol.phase_col[p] = cols++;
        break;
      }
    }
  }
  if (std::find(role.begin(), role.end(), Role::kMemory) != role.end()) sol.memory_col = cols++;
  if (!fixed_overhead) sol.overhead_col = cols++;
  sol.fixed_overhead = fixed_overhead.value_or(0);
  if (cols == 0) return InvalidArgument("no parameter to fit");
  const auto n = static_cast<Eigen::Index>(s.size());
  Eigen::MatrixXd x = Eigen::MatrixXd::Zero(n, cols);
  Eigen::VectorXd t(n), y(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    const Sample& v = s[static_cast<size_t>(i)];
    const Role r = role[static_cast<size_t>(i)];
    if (r == Role::kCompute) x(i, sol.phase_col[static_cast<size_t>(v.phase)]) = v.flops;
    if (r == Role::kMemory) x(i, sol.memory_col) = v.bytes;
    if (sol.overhead_col >= 0) x(i, sol.overhead_col) = v.tasks;
    t(i) = v.seconds;
    y(i) = v.seconds - sol.fixed_overhead * v.tasks;
    if (y(i) <= 0) {
      return FailedPrecondition(fmt::format("a sample took {} (less than the fixed overhead of its {} tasks, {} each)",
                                            FormatDuration(v.seconds), v.tasks, FormatDuration(sol.fixed_overhead)));
    }
  }
  // Weights 1/t^2: residuals relative to the measured time even when the overhead is held fixed.
  TF_ASSIGN_OR_RETURN(sol.fit, FitLinear(x, y, t.cwiseProduct(t).cwiseInverse(), fo));
  Eigen::VectorXd predicted = x * sol.fit.params;
  for (Eigen::Index i = 0; i < n; ++i) predicted(i) += sol.fixed_overhead * s[static_cast<size_t>(i)].tasks;
  sol.fit.rel_residuals = (predicted - t).cwiseQuotient(t);
  sol.fit.rms_rel_residual = std::sqrt(sol.fit.rel_residuals.squaredNorm() / static_cast<double>(n));
  sol.fit.max_rel_residual = sol.fit.rel_residuals.cwiseAbs().maxCoeff();
  return sol;
}

// Iterates fit and classification: a sample with FLOPs is compute-bound when F / (peak eff)
// >= B / hbm_bw at the current estimates. hbm_bw comes from the data only (the flop-less
// samples): without them every sample with FLOPs is taken as compute-bound, since a base's
// guess at hbm_bw could otherwise flip the samples back and forth.
StatusOr<Solution> SolveRoofline(const std::vector<Sample>& s, std::vector<Role>* role, std::optional<double> fixed,
                                 const models::GpuSpec& base_gpu, const FitOptions& fo) {
  std::array<double, 4> slope{};
  for (size_t p = 0; p < kPhases.size(); ++p)
    slope[p] = 1.0 / (base_gpu.peak_flops * models::ComputeEfficiency(base_gpu, kPhases[p]));
  StatusOr<Solution> sol = InvalidArgument("no iteration");
  for (int iter = 0; iter < 20; ++iter) {
    sol = Solve(s, *role, fixed, fo);
    if (!sol.ok() || sol->memory_col < 0) return sol;
    for (size_t p = 0; p < kPhases.size(); ++p) {
      if (sol->phase_col[p] >= 0) slope[p] = sol->fit.params(sol->phase_col[p]);
    }
    const double per_byte = sol->fit.params(sol->memory_col);
    bool changed = false;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i].flops <= 0) continue;
      const Role r =
          s[i].flops * slope[static_cast<size_t>(s[i].phase)] >= s[i].bytes * per_byte ? Role::kCompute : Role::kMemory;
      if (r != (*role)[i]) {
        (*role)[i] = r;
        changed = true;
      }
    }
    if (!changed) break;
  }
  return sol;
}

std::string PhaseModel(Phase p) { return "compute." + std::string(PhaseName(p)); }

// An efficiency above 1 says the base's peak is below what the device did; by less than two
// standard errors it says nothing the noise does not (a CPU's clock boosting past its nominal
// one, a fit of few sizes): it is held at 1, and `held` says so (for the report's note, if the
// fit is taken). The refusal's reason, or empty.
std::string AboveThePeak(const std::string& key, double eff, double rel_se, double peak, std::string* held) {
  if (!(eff > 1)) return {};
  if (eff - 1 < 2 * eff * rel_se) {
    *held = fmt::format("{} {:.3f} ±{} held at 1: above the base's peak_flops ({:.4g} FLOP/s) by less than two "
                        "standard errors",
                        key, eff, Percent(rel_se), peak);
    return {};
  }
  return fmt::format("{} {:.3f} ±{} > 1: the base's peak_flops ({:.4g} FLOP/s) is below what was measured; give a "
                     "base with the device's real peak",
                     key, eff, Percent(rel_se), peak);
}

}  // namespace

void FitCompute(const Context& c) {
  const models::GpuSpec& base_gpu = c.base.node.gpu;
  const CalibrateOptions& o = c.options;
  std::vector<Sample> samples;
  std::vector<TraceRecord> run;  // grouped per layer below
  int64_t other_probes = 0, empty = 0;
  for (const TraceRecord* r : c.records) {
    if (r->op != Op::kCompute) continue;
    if (IsRunRecord(*r)) {
      run.push_back(*r);
      continue;
    }
    if (StartsWith(r->task, "probe.io_cpu.")) continue;  // FitIoCpu's
    if (!StartsWith(r->task, "probe.compute")) {
      ++other_probes;
      continue;
    }
    if (r->duration_s() <= 0) {
      ++empty;
      continue;
    }
    samples.push_back({r->phase, r->flops, static_cast<double>(r->bytes), r->duration_s(),
                       static_cast<double>(traces::TaskCount(*r))});
  }
  // A run charges a whole layer's time to its last compute task: one sample per (iteration,
  // layer, phase), as validate compares them, standing for the tasks it sums.
  for (const TraceRecord& g : traces::GroupComputeByLayer(run)) {
    if (g.duration_s() <= 0) {
      ++empty;
      continue;
    }
    samples.push_back({g.phase, g.flops, static_cast<double>(g.bytes), g.duration_s(),
                       static_cast<double>(traces::TaskCount(g))});
  }
  if (other_probes > 0)
    c.notes->push_back(fmt::format("left out {} probe compute records whose task is not probe.compute*", other_probes));
  if (empty > 0) c.notes->push_back(fmt::format("left out {} compute samples that took no time", empty));

  const std::string feeds = "probe.compute* records, or run compute records summed per (iteration, layer, phase)";
  if (samples.empty()) {
    c.reports->push_back(NoData("compute", feeds));
    c.reports->push_back(NoData("compute.forward", feeds + " of phase forward"));
    c.reports->push_back(NoData("compute.backward", feeds + " of phase backward"));
    return;
  }
  FitOptions fo;
  fo.min_residual_sd = o.min_residual_sd;
  std::vector<Role> role(samples.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    role[i] = samples[i].flops > 0 ? Role::kCompute : samples[i].bytes > 0 ? Role::kMemory : Role::kFixed;
  }
  FitReport rep;
  rep.model = "compute";
  rep.samples = static_cast<int64_t>(samples.size());
  {
    double fmin = 0, fmax = 0;
    bool any = false;
    std::vector<std::string> phases;
    int64_t flopless = 0;
    for (const Sample& s : samples) {
      if (s.flops <= 0) {
        ++flopless;
        continue;
      }
      fmin = any ? std::min(fmin, s.flops) : s.flops;
      fmax = any ? std::max(fmax, s.flops) : s.flops;
      any = true;
      const std::string name(PhaseName(s.phase));
      if (std::find(phases.begin(), phases.end(), name) == phases.end()) phases.push_back(name);
    }
    rep.data_range =
        any ? fmt::format("FLOP {} ({})", RangeText(fmin, fmax, CompactCount), fmt::join(phases, ", ")) : "";
    if (flopless > 0) rep.data_range += fmt::format("{}{} flop-less", any ? "; " : "", flopless);
  }
  // The phase reports share this fit's overhead: when it is refused, they are too.
  auto refuse_all = [&](const std::vector<std::string>& reasons) {
    Conclude(&rep, reasons);
    c.reports->push_back(rep);
    for (Phase p : {Phase::kForward, Phase::kBackward}) {
      const bool any =
          std::any_of(samples.begin(), samples.end(), [&](const Sample& v) { return v.phase == p && v.flops > 0; });
      c.reports->push_back(
          any ? RefusedReport(PhaseModel(p), "shares the overhead of the fit 'compute', which was refused")
              : NoData(PhaseModel(p), feeds + " of phase " + std::string(PhaseName(p))));
    }
  };

  StatusOr<Solution> sol = SolveRoofline(samples, &role, std::nullopt, base_gpu, fo);
  if (!sol.ok()) {
    refuse_all({"the fit failed: " + sol.status().message()});
    return;
  }
  // An hbm_bw the data do not determine (a few small flop-less samples, noisy) would take the
  // efficiencies down with it: the flop-less samples are left out and hbm_bw kept from the
  // base, and every sample with FLOPs counts as compute-bound, as when there are none.
  std::string hbm_note;
  if (sol->memory_col >= 0 && sol->fit.rel_std_errors(sol->memory_col) > o.max_rel_std_error &&
      std::any_of(samples.begin(), samples.end(), [](const Sample& v) { return v.flops > 0; })) {
    const double rse = sol->fit.rel_std_errors(sol->memory_col);
    const size_t before = samples.size();
    std::erase_if(samples, [](const Sample& v) { return v.flops <= 0; });
    role.assign(samples.size(), Role::kCompute);
    hbm_note = fmt::format(
        "hbm_bw not determined by the data (relative standard error {}): {} flop-less samples left out and hbm_bw "
        "kept from the base ({})",
        Percent(rse), before - samples.size(), FormatBandwidth(base_gpu.hbm_bw_bytes_per_s));
    rep.samples = static_cast<int64_t>(samples.size());
    sol = SolveRoofline(samples, &role, std::nullopt, base_gpu, fo);
    if (!sol.ok()) {
      refuse_all({"the fit without the flop-less samples failed: " + sol.status().message()});
      return;
    }
  }
  {
    const std::string too_few = TooFewSamples(rep.samples, sol->Cols(), o);
    if (!too_few.empty()) {
      refuse_all({too_few});
      return;
    }
  }
  // Overhead and rates separate only if some regressor varies (or some sample is pure overhead).
  {
    double best = 0;
    std::vector<std::string> spans;
    for (size_t p = 0; p < kPhases.size(); ++p) {
      if (sol->phase_col[p] < 0) continue;
      std::vector<double> f;
      for (size_t i = 0; i < samples.size(); ++i) {
        if (role[i] == Role::kCompute && samples[i].phase == kPhases[p]) f.push_back(samples[i].flops);
      }
      best = std::max(best, SpanOf(f));
      spans.push_back(fmt::format("{} {:.2f}x", PhaseName(kPhases[p]), SpanOf(f)));
    }
    if (sol->memory_col >= 0) {
      std::vector<double> b;
      for (size_t i = 0; i < samples.size(); ++i) {
        if (role[i] == Role::kMemory) b.push_back(samples[i].bytes);
      }
      best = std::max(best, SpanOf(b));
      spans.push_back(fmt::format("memory-bound bytes {:.2f}x", SpanOf(b)));
    }
    const bool fixed_rows = std::find(role.begin(), role.end(), Role::kFixed) != role.end();
    if (best < o.min_regressor_span && !fixed_rows) {
      refuse_all(
          {fmt::format("all compute samples within a {:.2f}x FLOP range ({}; the rule asks {:.2f}x): the "
                       "overhead/efficiency split is undetermined; add layers of other sizes",
                       best, fmt::join(spans, ", "), o.min_regressor_span)});
      return;
    }
  }
  // An overhead the data do not determine (typically negligible next to the samples) is held
  // at the base's, so that the efficiencies can still be fitted.
  bool overhead_fitted = true;
  {
    const double rse = sol->fit.rel_std_errors(sol->overhead_col);
    if (rse > o.max_rel_std_error) {
      StatusOr<Solution> held = SolveRoofline(samples, &role, base_gpu.kernel_overhead_s, base_gpu, fo);
      if (!held.ok()) {
        refuse_all({fmt::format("{} (and holding the overhead at the base's failed: {})",
                                DeterminedRule("kernel_overhead", rse, "add smaller layers", o),
                                held.status().message())});
        return;
      }
      rep.note = fmt::format(
          "overhead not determined by the data (relative standard error {}): held at the base's "
          "kernel_overhead {} per task",
          Percent(rse), FormatDuration(base_gpu.kernel_overhead_s));
      sol = std::move(held);
      overhead_fitted = false;
    }
  }
  if (!hbm_note.empty()) rep.note = rep.note.empty() ? hbm_note : hbm_note + "; " + rep.note;
  const Solution& s = *sol;
  SetDiagnostics(s.fit, &rep);
  std::vector<std::string> reasons;
  auto add = [&](std::string r) {
    if (!r.empty()) reasons.push_back(std::move(r));
  };
  const double peak = base_gpu.peak_flops;
  // Combined efficiency: the one that gives these samples the same total compute time,
  // sum F / (peak * sum a_phase F); its variance by the delta method.
  double total_f = 0, total_time = 0;
  Eigen::VectorXd grad = Eigen::VectorXd::Zero(s.Cols());
  for (size_t p = 0; p < kPhases.size(); ++p) {
    if (s.phase_col[p] < 0) continue;
    double f = 0;
    for (size_t i = 0; i < samples.size(); ++i) {
      if (role[i] == Role::kCompute && samples[i].phase == kPhases[p]) f += samples[i].flops;
    }
    total_f += f;
    total_time += s.fit.params(s.phase_col[p]) * f;
    grad(s.phase_col[p]) = f;
  }
  std::vector<FitParameter> params;
  if (total_f > 0) {
    const double eff = total_f / (peak * total_time);
    const double var = grad.dot(s.fit.covariance * grad);
    const double rse = std::isfinite(var) && total_time > 0 ? std::sqrt(std::max(var, 0.0)) / total_time
                                                            : std::numeric_limits<double>::infinity();
    params.push_back({"compute_efficiency", eff, rse, "", true});
    if (total_time <= 0) add("compute_efficiency is not positive: the roofline does not describe these samples");
  }
  for (size_t p = 0; p < kPhases.size(); ++p) {
    if (s.phase_col[p] < 0) continue;
    const double a = s.fit.params(s.phase_col[p]);
    add(DeterminedRule(std::string(PhaseName(kPhases[p])) + " efficiency", s.fit.rel_std_errors(s.phase_col[p]),
                       "add samples of other sizes", o));
    if (a <= 0)
      add(fmt::format("{} efficiency is not positive: the roofline does not describe these samples",
                      PhaseName(kPhases[p])));
  }
  double overhead = s.fixed_overhead, overhead_rse = 0;
  if (overhead_fitted) {
    overhead = s.fit.params(s.overhead_col);
    overhead_rse = s.fit.rel_std_errors(s.overhead_col);
    if (overhead < 0) {
      add(fmt::format("kernel_overhead fitted negative ({} per task): the roofline does not describe these samples",
                      FormatDuration(overhead)));
    }
  }
  // Held at the base's, the overhead is not a fitted number: reported, not written.
  params.push_back({"kernel_overhead", overhead, overhead_rse, "s", overhead_fitted});
  double hbm = 0;
  if (s.memory_col >= 0) {
    const double h = s.fit.params(s.memory_col);
    hbm = h > 0 ? 1.0 / h : 0;
    params.push_back({"hbm_bw", hbm, s.fit.rel_std_errors(s.memory_col), "B/s", true});
    add(DeterminedRule("hbm_bw", s.fit.rel_std_errors(s.memory_col), "add flop-less samples of other sizes", o));
    if (h <= 0) add("hbm_bw is not positive: the roofline does not describe these samples");
  } else if (hbm_note.empty()) {
    rep.note += fmt::format("{}hbm_bw kept from the base ({}): no memory-bound (flop-less) samples",
                            rep.note.empty() ? "" : "; ", FormatBandwidth(base_gpu.hbm_bw_bytes_per_s));
  }
  if (reasons.empty())
    add(ConditionRule(s.fit.condition_number, false, "add samples of other sizes in every phase", o));
  rep.params = params;
  std::string held;
  if (!params.empty() && params[0].name == "compute_efficiency") {
    const std::string above = AboveThePeak("compute_efficiency", params[0].value, params[0].rel_std_error, peak, &held);
    if (!above.empty()) add(above);
  }
  const bool fitted = Conclude(&rep, reasons);
  if (fitted && !held.empty()) rep.note += (rep.note.empty() ? "" : "; ") + held;
  if (fitted) {
    models::GpuSpec& gpu = c.profile->node.gpu;
    if (total_f > 0) gpu.compute_efficiency = std::min(params[0].value, 1.0);  // held at 1 (AboveThePeak)
    if (overhead_fitted) gpu.kernel_overhead_s = overhead;
    if (s.memory_col >= 0) gpu.hbm_bw_bytes_per_s = hbm;
  }
  c.reports->push_back(rep);

  // Per-phase reports: the slope of the phase's column in the same fit.
  for (Phase phase : {Phase::kForward, Phase::kBackward}) {
    const std::string model = PhaseModel(phase);
    const int col = s.phase_col[static_cast<size_t>(phase)];
    if (col < 0) {
      c.reports->push_back(NoData(model, feeds + " of phase " + std::string(PhaseName(phase)) + ", compute-bound"));
      continue;
    }
    if (!fitted) {
      c.reports->push_back(RefusedReport(model, "shares the overhead of the fit 'compute', which was refused"));
      continue;
    }
    FitReport pr;
    pr.model = model;
    pr.condition_number = s.fit.condition_number;
    double ss = 0, worst = 0, fmin = 0, fmax = 0;
    for (size_t i = 0; i < samples.size(); ++i) {
      if (role[i] != Role::kCompute || samples[i].phase != phase) continue;
      const double rr = s.fit.rel_residuals(static_cast<Eigen::Index>(i));
      ss += rr * rr;
      worst = std::max(worst, std::fabs(rr));
      fmin = pr.samples ? std::min(fmin, samples[i].flops) : samples[i].flops;
      fmax = pr.samples ? std::max(fmax, samples[i].flops) : samples[i].flops;
      ++pr.samples;
    }
    pr.rms_rel_residual = std::sqrt(ss / static_cast<double>(pr.samples));
    pr.max_rel_residual = worst;
    pr.data_range = "FLOP " + RangeText(fmin, fmax, CompactCount);
    const double a = s.fit.params(col);
    const double eff = 1.0 / (peak * a);
    const std::string key = std::string(PhaseName(phase)) + "_efficiency";
    pr.params = {{key, eff, s.fit.rel_std_errors(col), "", true},
                 {"kernel_overhead", overhead, overhead_rse, "s", false}};
    std::vector<std::string> why;
    const std::string few = TooFewSamples(pr.samples, 1, o);
    if (!few.empty()) why.push_back(few);
    const std::string det = DeterminedRule(key, s.fit.rel_std_errors(col), "add samples of other sizes", o);
    if (!det.empty()) why.push_back(det);
    std::string phase_held;
    if (a <= 0) {
      why.push_back(key + " is not positive: the roofline does not describe these samples");
    } else {
      const std::string above = AboveThePeak(key, eff, s.fit.rel_std_errors(col), peak, &phase_held);
      if (!above.empty()) why.push_back(above);
    }
    if (Conclude(&pr, why)) {
      (phase == Phase::kForward ? c.profile->node.gpu.forward_efficiency : c.profile->node.gpu.backward_efficiency) =
          std::min(eff, 1.0);
      if (!phase_held.empty()) pr.note += (pr.note.empty() ? "" : "; ") + phase_held;
    }
    c.reports->push_back(pr);
  }
}

// The update on the GPU (docs/performance-models.md "GPU Adam"): the bytes per second it
// streams, kGpuAdamBytesPerElement per element, the median over the records of the largest update
// (the kernel overhead matters least there), timed on the GPU where a span was recorded.
void FitGpuUpdate(const Context& c) {
  std::map<int64_t, std::vector<double>> seconds;  // by bytes (4 per element)
  for (const TraceRecord* r : c.records) {
    if (!IsGpuUpdate(*r) || r->bytes <= 0) continue;
    const double t = r->device_end_s > r->device_start_s ? r->device_end_s - r->device_start_s : r->duration_s();
    if (t > 0) seconds[r->bytes].push_back(t);
  }
  if (seconds.empty()) {
    c.reports->push_back(NoData("gpu.adam", "optimizer records on a GPU's compute resource (probe compute: probe.gpu_adam)"));
    return;
  }
  const int64_t largest = seconds.rbegin()->first;
  const double elements = static_cast<double>(largest) / 4;
  std::vector<double> rates;
  for (double t : seconds.rbegin()->second) rates.push_back(elements * models::kGpuAdamBytesPerElement / t / 1e9);  // GB/s
  FitReport rep;
  rep.model = "gpu.adam";
  rep.samples = static_cast<int64_t>(rates.size());
  rep.data_range = CompactCount(elements) + " elements";
  size_t smaller = 0;
  for (const auto& [b, ts] : seconds) smaller += b == largest ? 0 : ts.size();
  if (smaller > 0) rep.note = fmt::format("{} records of smaller updates not used", smaller);
  double rel_se = 0;
  const double bw = MedianFit(rates, c.options, "GB/s", &rep, &rel_se) * 1e9;
  rep.params = {{"adam_bw", bw, rel_se, "B/s", true}};
  std::vector<std::string> reasons;
  for (std::string r : {TooFewSamples(rep.samples, 1, c.options), DeterminedRule("adam_bw", rel_se, "repeat the compute probe", c.options)}) {
    if (!r.empty()) reasons.push_back(std::move(r));
  }
  if (c.profile->node.gpu.shares_host_cores) {
    rep.note += std::string(rep.note.empty() ? "" : "; ") + "the GPU is emulated on the host's cores, where sim times its update as the CPU's AdamW (cpu.adam)";
  }
  if (Conclude(&rep, reasons)) c.profile->node.gpu.adam_bw_bytes_per_s = bw;
  c.reports->push_back(rep);
}

}  // namespace tierflow::calibrate::internal
