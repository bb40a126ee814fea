// The fit reports as text (calibrate.h): what every build has, with or without the fits' Eigen.
#include <fmt/format.h>

#include <cmath>

#include "report_format.h"
#include "tierflow/calibrate/calibrate.h"
#include "tierflow/core/units.h"

namespace tierflow::calibrate {
namespace internal {

std::string Percent(double fraction) {
  if (!std::isfinite(fraction)) return "unbounded";
  const double p = fraction * 100;
  return p < 10 ? fmt::format("{:.1f} %", p) : fmt::format("{:.0f} %", p);
}

std::string Short(double v) { return fmt::format("{:.3g}", v); }

namespace {
std::string Compact(double v, const char* const* units, int n, double base) {
  int i = 0;
  while (i + 1 < n && std::fabs(v) >= base) {
    v /= base;
    ++i;
  }
  return fmt::format("{:.3g}{}{}", v, *units[i] ? " " : "", units[i]);
}
}  // namespace

std::string CompactBytes(double bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  return Compact(bytes, kUnits, 5, 1024.0);
}

std::string CompactCount(double count) {
  static const char* const kUnits[] = {"", "k", "M", "G", "T", "P"};
  return Compact(count, kUnits, 6, 1000.0);
}

}  // namespace internal

std::string_view FitOutcomeName(FitOutcome outcome) {
  switch (outcome) {
    case FitOutcome::kFitted:
      return "fitted";
    case FitOutcome::kRefused:
      return "refused";
    case FitOutcome::kNoData:
      return "no data";
  }
  return "?";
}

std::vector<const FitReport*> RefusedFits(const Calibration& calibration) {
  std::vector<const FitReport*> out;
  for (const FitReport& f : calibration.fits) {
    if (f.outcome == FitOutcome::kRefused) out.push_back(&f);
  }
  return out;
}

std::string FormatParameter(const FitParameter& p) {
  if (p.unit == "B/s") return FormatBandwidth(p.value);
  if (p.unit == "s") return FormatDuration(p.value);
  if (p.unit.empty()) return fmt::format("{:.3g}", p.value);
  return fmt::format("{:.3g} {}", p.value, p.unit);
}

std::string FitSummary(const FitReport& r) {
  std::string s = fmt::format("{:<20} {:<8}", r.model, FitOutcomeName(r.outcome));
  if (r.outcome == FitOutcome::kNoData) return s + " (base kept)";
  std::vector<std::string> params;
  for (const FitParameter& p : r.params) {
    params.push_back(fmt::format("{}{} {} ±{}", p.name, p.written ? "" : "*", FormatParameter(p),
                                 internal::Percent(p.rel_std_error)));
  }
  s += fmt::format(" {}; {} samples, rms {}, max {}", fmt::join(params, ", "), r.samples,
                   internal::Percent(r.rms_rel_residual), internal::Percent(r.max_rel_residual));
  if (!r.data_range.empty()) s += "; " + r.data_range;
  if (r.outcome == FitOutcome::kRefused) s += " -- " + r.reason;
  if (!r.note.empty()) s += " -- " + r.note;
  return s;
}

}  // namespace tierflow::calibrate
