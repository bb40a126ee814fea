// Calibration: fits the parameters of the performance models (models/perf.h) from trace records
// of probes and real runs (any mix) and from fio measurements, into a hardware profile that the
// simulator loads. Each model gets a FitReport saying whether it was fitted, refused (and why,
// naming the model and the rule) or had no data, with its parameters, residuals and data range.
// A refused fit writes nothing: the base hardware's values stay. docs/calibration.md gives
// every formula, which records feed which fit, and the refusal rules with their defaults.
//
// Thread safety: pure functions over values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tierflow/core/status.h"
#include "tierflow/core/trace_record.h"
#include "tierflow/models/hardware.h"

namespace tierflow::calibrate {

// One steady-state measurement of one stream on one device, from outside the trace records
// (fio). kMixed: reads and writes ran together on the device (both rates given).
struct DiskSample {
  enum class Kind { kRead, kWrite, kMixed };
  int32_t device = 0;  // nvme<device>
  Kind kind = Kind::kRead;
  int64_t block_bytes = 0;
  int32_t queue_depth = 0;  // requests in flight on the device
  double read_bytes_per_s = 0;
  double write_bytes_per_s = 0;
  std::string origin;  // for messages: "fio file 'x.json' job 'read-1m'"
};

// The refusal rules (docs/calibration.md, "Refusals"). Defaults are the documented ones.
struct CalibrateOptions {
  // Condition number of the column-scaled design (linear fits); Levenberg-Marquardt fits
  // compare cond(J^T J) with its square.
  double max_condition = 1e6;
  // A parameter whose standard error exceeds this fraction of its value is not determined.
  double max_rel_std_error = 0.5;
  // A fitted disk peak above this multiple of the fastest observed bandwidth extrapolates.
  double max_disk_peak_over_fastest = 1.25;
  // A fitted copy or collective bandwidth above this multiple of the fastest observed.
  double max_bw_over_fastest = 2.0;
  // The regressor (FLOPs, bytes) must span at least this ratio (largest / smallest) for a
  // fixed cost (latency, overhead) to be told apart from a rate.
  double min_regressor_span = 1.5;
  // A fit needs at least (parameters + extra_samples) samples.
  int extra_samples = 2;
  // Floor of the residual standard deviation (relative), see fit.h.
  double min_residual_sd = 1e-3;
  // Fit each probe point at the trimmed mean of its repetitions (see Calibrate).
  bool average_per_point = true;
};

enum class FitOutcome { kFitted, kRefused, kNoData };
std::string_view FitOutcomeName(FitOutcome outcome);  // "fitted", "refused", "no data"

struct FitParameter {
  std::string name;          // the hardware key it sets ("read_bw") or what it reports ("overhead_per_sample")
  double value = 0;          // base units: B/s, s, elements/s, or a fraction
  double rel_std_error = 0;  // standard error / value
  std::string unit;          // "B/s", "s", "elements/s", "" for a fraction
  bool written = true;       // false: reported only, not a field of the profile
};

struct FitReport {
  std::string model;  // "nvme0.read", "pcie.h2d", "compute.forward", "cpu.adam", ...
  FitOutcome outcome = FitOutcome::kNoData;
  std::string reason;                // refused or no data: one line naming the model and the rule
  std::string note;                  // fitted: values kept from the base, clamps, spread
  std::vector<FitParameter> params;  // also for refused fits (what the data gave; not written)
  int64_t samples = 0;
  double rms_rel_residual = 0;
  double max_rel_residual = 0;
  double condition_number = 0;
  std::string data_range;  // "block 64 KiB..4 MiB, qd 1..32"
};

struct Calibration {
  models::HardwareSpec profile;  // the base with every fitted model's parameters written
  std::vector<FitReport> fits;
  std::vector<std::string> notes;  // records left out and why ("ignored 120 sim records")
};

// Fits every model the records and samples feed (docs/calibration.md, "Record conventions").
// `base` supplies every unfitted field (and peak_flops, cores, which are never fitted); it must
// validate. Errors only for a base that does not validate or a profile that would not (an
// internal bug); refusals are reports, not errors.
StatusOr<Calibration> Calibrate(const std::vector<TraceRecord>& records, const std::vector<DiskSample>& disk_samples,
                                const models::HardwareSpec& base, const CalibrateOptions& options = {});

// The refused fits, in report order.
std::vector<const FitReport*> RefusedFits(const Calibration& calibration);
// One line: "nvme0.read  fitted  read_bw 1.23 GB/s ±2.1 %, read_latency 85.2 us ±4.0 %; 24 samples,
// rms 1.2 %, max 3.4 %; block 4 KiB..16 MiB, qd 1..128" (refused: the reason instead).
std::string FitSummary(const FitReport& report);
// A parameter's value with its unit, for tables ("1.23 GB/s", "85.2 us", "1.2e+08 elements/s", "0.853").
std::string FormatParameter(const FitParameter& param);

}  // namespace tierflow::calibrate
