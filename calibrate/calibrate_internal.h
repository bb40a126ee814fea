// Private to calibrate/: what the fits of each area (disks, copies, compute, CPU, collectives)
// share: the refusal rules, report filling, and small formatting helpers.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tierflow/calibrate/calibrate.h"
#include "tierflow/calibrate/fit.h"
#include "report_format.h"

namespace tierflow::calibrate::internal {

// What every area's fit reads and writes.
struct Context {
  const std::vector<const TraceRecord*>& records;  // measurements (sim records already left out)
  const std::vector<DiskSample>& disk_samples;
  const CalibrateOptions& options;
  models::HardwareSpec* profile;  // starts as the base; fitted parameters are written into it
  const models::HardwareSpec& base;
  std::vector<FitReport>* reports;
  std::vector<std::string>* notes;
};

void FitDisks(const Context& c);
void FitCopies(const Context& c);
void FitCompute(const Context& c);
void FitGpuUpdate(const Context& c);  // AdamW on the GPU (gpu.adam_bw)
void FitCpu(const Context& c);  // memory first, then Adam and conversions
void FitDispatch(const Context& c);  // the executor's hand-over of a task (cpu.task_overhead)
void FitIoCpu(const Context& c);     // the I/O path's load on the cores (cpu.io_read, cpu.io_write)
void FitCollectives(const Context& c);

// An optimizer record of an update on a GPU (its resource a GPU's compute: "gpu0.compute",
// "node1.gpu3.compute"), not the host's.
inline bool IsGpuUpdate(const TraceRecord& r) {
  return r.op == Op::kOptimizer && r.resource.find("gpu") != std::string::npos && r.resource.size() >= 8 &&
         r.resource.compare(r.resource.size() - 8, 8, ".compute") == 0;
}
// True for a run's record (not a probe's; sim records never reach the fits).
inline bool IsRunRecord(const TraceRecord& r) { return r.source != "probe"; }
inline bool StartsWith(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }
// "nvme3.read" or "nvme3.r0.param" -> 3; anything else -> nullopt.
std::optional<int32_t> NvmeDevice(std::string_view resource);
// For each record of `group`: true when its [start, end) overlaps no other record of the group.
std::vector<bool> Uncontended(const std::vector<const TraceRecord*>& group);

// ---- rules: each returns "" when satisfied, else the rule's text (without the model name) ----
std::string TooFewSamples(int64_t samples, int params, const CalibrateOptions& o);
// largest / smallest of `values` (> 0) below the minimum span: "all samples within 1.20x of one FLOP count".
std::string SpanRule(const std::vector<double>& values, const std::string& what, const std::string& consequence,
                     const CalibrateOptions& o);
double SpanOf(const std::vector<double>& values);
std::string ConditionRule(double condition, bool levenberg_marquardt, const std::string& hint,
                          const CalibrateOptions& o);
std::string DeterminedRule(const std::string& param, double rel_std_error, const std::string& hint,
                           const CalibrateOptions& o);

// Copies the fit's diagnostics (residuals, condition) into the report.
void SetDiagnostics(const FitResult& fit, FitReport* report);
// Marks the report refused when `reasons` is not empty ("model: reason; reason"), fitted otherwise.
// Returns true when fitted.
bool Conclude(FitReport* report, const std::vector<std::string>& reasons);
FitReport NoData(const std::string& model, const std::string& what_feeds_it);

// A median taken as a fit: the model at the median against each sample, and the median's
// relative standard error (1.2533 sd / sqrt(n) / median, at least min_residual_sd / sqrt(n)).
struct MedianStats {
  double median = 0, rel_se = 0;
  double sum_sq_rel = 0, worst_rel = 0;  // of (median - e) / e over the samples
  double lo = 0, hi = 0;
};
MedianStats MedianOf(const std::vector<double>& v, const CalibrateOptions& o);
// A median over windows taken as a one-parameter fit: writes each window's residual against it
// (rms, max) and the spread of `what` into `rep`; returns the median and, in `rel_se`, its relative
// standard error (sqrt(pi/2) times that of the mean, normal errors; floored like every fit's).
double MedianFit(const std::vector<double>& v, const CalibrateOptions& o, const std::string& what, FitReport* rep,
                 double* rel_se);
FitReport RefusedReport(const std::string& model, const std::string& reason);

double Median(std::vector<double> v);
// A fixed cost (a latency) that the data leave undetermined may still not matter: when no
// prediction over the data moves by more than the noise (three times the rms relative residual)
// as the cost goes from 0 to its fitted value plus a standard error (`upper`), the fitted value
// is as good as any there. Returns the note saying so, or "" when the cost matters (refuse).
std::string ImmaterialNote(const std::string& param, double rel_std_error, const std::string& upper, double largest_change,
                           double rms_rel_residual, const CalibrateOptions& o);
// Replaces the probe records of each measured point (same task, op, resource, size, request,
// threads, layer, phase, FLOPs) by one record at their pooled, trimmed mean (mean bytes over
// mean duration; from five repetitions on without the fastest and the slowest), returned;
// `records` keeps the rest (run records, mixed disk windows, memory records).
std::vector<TraceRecord> AveragePerPoint(std::vector<const TraceRecord*>* records);

}  // namespace tierflow::calibrate::internal
