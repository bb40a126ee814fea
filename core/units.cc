#include "tierflow/core/units.h"

#include "tierflow/core/text.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace tierflow {
namespace {

struct Split {
  double number;
  std::string unit;
};

// Splits "6.8 GB/s" into 6.8 and "GB/s".
StatusOr<Split> SplitQuantity(std::string_view text, const char* kind) {
  size_t begin = 0;
  while (begin < text.size() && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  std::string s(text.substr(begin));
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  if (s.empty()) return InvalidArgument(std::string("empty ") + kind);
  char* end = nullptr;
  double number = std::strtod(s.c_str(), &end);
  if (end == s.c_str()) {
    return InvalidArgument(Quoted(s) + " is not a " + kind + " (expected a number and a unit)");
  }
  if (!std::isfinite(number)) return InvalidArgument(Quoted(s) + " is not a finite " + kind);
  std::string unit(end);
  size_t u = 0;
  while (u < unit.size() && std::isspace(static_cast<unsigned char>(unit[u]))) ++u;
  return Split{number, unit.substr(u)};
}

// Returns the multiplier of an SI or IEC prefix at the start of `unit`, and strips it.
bool TakePrefix(std::string* unit, double* multiplier) {
  static const struct {
    const char* prefix;
    double value;
  } kPrefixes[] = {{"Ki", 1024.0}, {"Mi", 1048576.0}, {"Gi", 1073741824.0},
                   {"Ti", 1099511627776.0}, {"Pi", 1125899906842624.0},
                   {"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"P", 1e15}};
  for (const auto& p : kPrefixes) {
    std::string_view pre(p.prefix);
    if (unit->size() > pre.size() && unit->compare(0, pre.size(), pre) == 0) {
      *multiplier = p.value;
      unit->erase(0, pre.size());
      return true;
    }
  }
  *multiplier = 1.0;
  return false;
}

}  // namespace

StatusOr<int64_t> ParseBytes(std::string_view text, bool allow_bare) {
  TF_ASSIGN_OR_RETURN(Split q, SplitQuantity(text, "size"));
  std::string unit = q.unit;
  double mult = 1.0;
  if (unit.empty()) {
    if (!allow_bare) {
      return InvalidArgument("size " + Quoted(text) + " has no unit (write e.g. '4096 B', '1 MiB', '80 GB')");
    }
  } else {
    TakePrefix(&unit, &mult);
    if (unit != "B" && unit != "bytes" && unit != "byte") {
      return InvalidArgument("size " + Quoted(text) + " has unit '" + q.unit + "' (accepted: B, kB, MB, GB, TB, KiB, MiB, GiB, TiB)");
    }
  }
  double bytes = q.number * mult;
  if (bytes < 0) return InvalidArgument("size " + Quoted(text) + " is negative (a size from 0 B to 9e18 B)");
  if (bytes > 9.0e18) return InvalidArgument("size " + Quoted(text) + " is above 9e18 B (a size from 0 B to 9e18 B)");
  return static_cast<int64_t>(std::llround(bytes));
}

StatusOr<double> ParseBandwidth(std::string_view text) {
  TF_ASSIGN_OR_RETURN(Split q, SplitQuantity(text, "bandwidth"));
  std::string unit = q.unit;
  double mult = 1.0;
  TakePrefix(&unit, &mult);
  if (unit != "B/s") {
    return InvalidArgument("bandwidth " + Quoted(text) + " needs a unit per second (accepted: B/s, MB/s, GB/s, GiB/s, ...)");
  }
  if (q.number <= 0) return InvalidArgument("bandwidth " + Quoted(text) + " must be positive");
  return q.number * mult;
}

StatusOr<double> ParseDuration(std::string_view text) {
  TF_ASSIGN_OR_RETURN(Split q, SplitQuantity(text, "duration"));
  static const struct {
    const char* unit;
    double seconds;
  } kUnits[] = {{"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1.0}, {"min", 60.0}, {"h", 3600.0}};
  for (const auto& u : kUnits) {
    if (q.unit == u.unit) {
      if (q.number < 0) return InvalidArgument("duration " + Quoted(text) + " is negative");
      return q.number * u.seconds;
    }
  }
  return InvalidArgument("duration " + Quoted(text) + " needs a unit (accepted: ns, us, ms, s, min, h)");
}

StatusOr<double> ParseFlopRate(std::string_view text) {
  TF_ASSIGN_OR_RETURN(Split q, SplitQuantity(text, "compute rate"));
  std::string unit = q.unit;
  double mult = 1.0;
  TakePrefix(&unit, &mult);
  if (unit != "FLOP/s" && unit != "FLOPS") {
    return InvalidArgument("compute rate " + Quoted(text) + " needs a unit (accepted: FLOP/s, GFLOP/s, TFLOP/s, PFLOP/s)");
  }
  if (q.number <= 0) return InvalidArgument("compute rate " + Quoted(text) + " must be positive");
  return q.number * mult;
}

namespace {
std::string Scaled(double value, const char* const* units, int n, double base) {
  int i = 0;
  double v = value;
  while (i + 1 < n && std::fabs(v) >= base) {
    v /= base;
    ++i;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f %s", v, units[i]);
  return buf;
}
}  // namespace

std::string FormatBytes(double bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  return Scaled(bytes, kUnits, 6, 1024.0);
}

std::string FormatBandwidth(double bytes_per_s) {
  static const char* const kUnits[] = {"B/s", "kB/s", "MB/s", "GB/s", "TB/s"};
  return Scaled(bytes_per_s, kUnits, 5, 1000.0);
}

std::string FormatCount(double count) {
  static const char* const kUnits[] = {"", "K", "M", "B", "T"};
  std::string out = Scaled(count, kUnits, 5, 1000.0);
  if (!out.empty() && out.back() == ' ') out.pop_back();  // no unit: "510.82", not "510.82 "
  return out;
}

std::string FormatDuration(double s) {
  char buf[64];
  double a = std::fabs(s);
  if (a == 0) std::snprintf(buf, sizeof(buf), "0 s");
  else if (a < 1e-6) std::snprintf(buf, sizeof(buf), "%.1f ns", s * 1e9);
  else if (a < 1e-3) std::snprintf(buf, sizeof(buf), "%.1f us", s * 1e6);
  else if (a < 1.0) std::snprintf(buf, sizeof(buf), "%.1f ms", s * 1e3);
  else std::snprintf(buf, sizeof(buf), "%.3f s", s);
  return buf;
}

}  // namespace tierflow
