#include "tierflow/core/text.h"

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

namespace tierflow {

std::string StrCat(std::initializer_list<StrPiece> pieces) {
  size_t size = 0;
  for (const StrPiece& p : pieces) size += p.view().size();
  // Sized once, then each piece copied in place: append() paid a capacity check and a call a
  // piece, most of the cost of a name of a few short pieces.
  std::string out(size, '\0');
  char* at = out.data();
  for (const StrPiece& p : pieces) {
    const std::string_view v = p.view();
    if (v.empty()) continue;  // a default string_view's data() is null, which memcpy may not take
    std::memcpy(at, v.data(), v.size());
    at += v.size();
  }
  return out;
}

Status CheckUtf8(std::string_view text, const std::string& what) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    size_t len = 0;
    uint32_t cp = 0, min = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07, min = 0x10000;
    }
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) {
      ok = (s[i + k] & 0xC0) == 0x80;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    ok = ok && cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (!ok) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02X", c);
      return InvalidArgument(what + ": byte " + std::to_string(i) + " (" + hex + ") is not UTF-8");
    }
    i += len;
  }
  return Status::Ok();
}

namespace {

constexpr size_t kEchoed = 40;

std::string_view TrimSpaces(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string Number(double v) {
  char buf[32];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {  // 1000, not 1e+03
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  // The shortest form that reads back: "0.10000000000000001" is "0.1".
  for (int digits = 1; digits < 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) return buf;
  }
  return s;
}

// Whether `s` is "[+-]digits" (the form strtoll reads whole).
bool IsDigits(std::string_view s) {
  size_t i = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
  if (i == s.size()) return false;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
  }
  return true;
}

// strtod over the whole of `s`: false when something other than a number is there. Hex floats,
// "nan" and "inf" read as numbers here and are refused by the callers' finiteness rule.
bool ReadDouble(std::string_view s, double* v) {
  if (s.empty()) return false;
  std::string t(s);
  // YAML's own spellings: .inf, -.inf, .nan (and .Inf, .NAN, ...).
  const size_t dot = (t[0] == '+' || t[0] == '-') ? 1 : 0;
  if (t.size() > dot + 1 && t[dot] == '.' && (t[dot + 1] == 'i' || t[dot + 1] == 'I' || t[dot + 1] == 'n' || t[dot + 1] == 'N')) {
    t.erase(dot, 1);
  }
  char* end = nullptr;
  errno = 0;
  *v = std::strtod(t.c_str(), &end);
  return end == t.c_str() + t.size();
}

Status OutOfRange(std::string_view text, std::string_view what, bool above, const std::string& bound, const std::string& range) {
  return InvalidArgument(std::string(what) + ": " + Quoted(text) + (above ? " is above " : " is below ") + bound + " (" + range + ")");
}

// The range an error states: "an integer from 1 to 1048576", "an integer of at least 0", "a
// number from 0 to 1".
std::string IntegerRange(int64_t lo, int64_t hi) {
  if (hi == std::numeric_limits<int64_t>::max() && lo != std::numeric_limits<int64_t>::min()) return "an integer of at least " + std::to_string(lo);
  return "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
}

std::string RealRange(double lo, double hi) {
  if (hi == std::numeric_limits<double>::max()) return "a number of at least " + Number(lo);
  if (lo == std::numeric_limits<double>::lowest()) return "a number of at most " + Number(hi);
  return "a number from " + Number(lo) + " to " + Number(hi);
}

}  // namespace

std::string Quoted(std::string_view text) {
  if (text.size() <= kEchoed) return "'" + std::string(text) + "'";
  size_t cut = kEchoed;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 character
  size_t characters = 0;
  for (const char c : text) characters += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return "'" + std::string(text.substr(0, cut)) + "...' (" + std::to_string(characters) + " characters)";
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

StatusOr<int64_t> ParseInteger(std::string_view text, std::string_view what, int64_t lo, int64_t hi) {
  const std::string_view t = TrimSpaces(text);
  const std::string range = IntegerRange(lo, hi);
  if (IsDigits(t)) {
    const std::string s(t);
    errno = 0;
    const long long v = std::strtoll(s.c_str(), nullptr, 10);  // ERANGE: past int64, on the side of its sign
    if (v > hi || (errno == ERANGE && t[0] != '-')) return OutOfRange(text, what, true, std::to_string(hi), range);
    if (v < lo || errno == ERANGE) return OutOfRange(text, what, false, std::to_string(lo), range);
    return static_cast<int64_t>(v);
  }
  double v = 0;
  if (!ReadDouble(t, &v) || std::isnan(v)) return InvalidArgument(std::string(what) + ": " + Quoted(text) + " is not an integer (" + range + ")");
  // 2^63 is the first double past int64 (and every double at or above 2^53 is an integer).
  if (v >= 9223372036854775808.0) return OutOfRange(text, what, true, std::to_string(hi), range);
  if (v < -9223372036854775808.0) return OutOfRange(text, what, false, std::to_string(lo), range);
  if (v != std::floor(v)) return InvalidArgument(std::string(what) + ": " + Quoted(text) + " is not an integer (" + range + ")");
  const auto i = static_cast<int64_t>(v);
  if (i > hi) return OutOfRange(text, what, true, std::to_string(hi), range);
  if (i < lo) return OutOfRange(text, what, false, std::to_string(lo), range);
  return i;
}

StatusOr<double> ParseReal(std::string_view text, std::string_view what, double lo, double hi) {
  const std::string_view t = TrimSpaces(text);
  const std::string range = RealRange(lo, hi);
  double v = 0;
  if (!ReadDouble(t, &v) || std::isnan(v)) return InvalidArgument(std::string(what) + ": " + Quoted(text) + " is not a number (" + range + ")");
  if (v > hi) return OutOfRange(text, what, true, Number(hi), range);
  if (v < lo) return OutOfRange(text, what, false, Number(lo), range);
  return v;
}

}  // namespace tierflow
