// Formatting for the fits' reasons, ranges and summaries (calibrate_internal.h, fit_report.cc):
// no Eigen, so that a build without the fits formats reports as one with them.
#pragma once

#include <string>

namespace tierflow::calibrate::internal {

std::string Percent(double fraction);    // "3.4 %", "unbounded"
std::string Short(double v);             // "%.3g"
std::string CompactBytes(double bytes);  // "64 KiB", "1.5 GiB"
std::string CompactCount(double count);  // "1.2 G", "350 M", "12 k"
// "lo..hi" with `format`, or one value when lo == hi.
template <typename F>
std::string RangeText(double lo, double hi, F format) {
  return lo == hi ? format(lo) : format(lo) + ".." + format(hi);
}

}  // namespace tierflow::calibrate::internal
