// Checks every text input gets at the door, before a parser sees it (a scenario, a hardware or
// sweep file, a name given on the command line): it is UTF-8, so that every report and JSON
// output can hold it; and the one rule for every number a user writes (a YAML field, a --set or
// policy knob, a flag, a JSON field): it is finite and in its range, and its error names the
// range and echoes at most a few dozen characters of what was written.
//
// Thread safety: pure functions.
#pragma once

#include <charconv>
#include <concepts>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "tierflow/core/status.h"

namespace tierflow {

// OK when `text` is well-formed UTF-8 (no overlong forms, surrogates or code points above
// U+10FFFF); else InvalidArgument "<what>: byte <offset> (0x..) is not UTF-8".
Status CheckUtf8(std::string_view text, const std::string& what);

// `text` in single quotes, cut to its first 40 characters and "... (N characters)" when longer:
// what an error echoes of a user's value (a 100,000-digit --set value is not an error line).
std::string Quoted(std::string_view text);

// `names` separated by ", ": the list an error gives of what is known ("known: a, b, c").
std::string JoinNames(const std::vector<std::string>& names);

// One piece of StrCat: a string as it is, or an integer in decimal (written into the piece).
// Made only in StrCat's argument list: it may point into itself, so it is never copied.
class StrPiece {
 public:
  StrPiece(std::string_view s) : view_(s) {}  // NOLINT(google-explicit-constructor): a piece
  StrPiece(const std::string& s) : view_(s) {}  // NOLINT(google-explicit-constructor)
  StrPiece(const char* s) : view_(s) {}         // NOLINT(google-explicit-constructor)
  template <std::integral T>
    requires(!std::same_as<T, char> && !std::same_as<T, bool>)
  StrPiece(T v) {  // NOLINT(google-explicit-constructor)
    const auto r = std::to_chars(digits_, digits_ + sizeof digits_, v);
    view_ = {digits_, static_cast<size_t>(r.ptr - digits_)};
  }
  StrPiece(const StrPiece&) = delete;
  StrPiece& operator=(const StrPiece&) = delete;
  std::string_view view() const { return view_; }

 private:
  char digits_[24];
  std::string_view view_;
};

// The pieces one after the other, in one allocation: StrCat({"read.", name, ".r", rank}). What
// the planner names its tasks, buffers and tensors with, tens of thousands a plan (a chain of
// operator+ allocated a string per '+').
std::string StrCat(std::initializer_list<StrPiece> pieces);

// An integer in [lo, hi]: decimal digits with an optional sign, or a number in another form that
// is exactly an integer ("1e6", "2.0"); surrounding spaces are ignored. InvalidArgument naming
// `what` otherwise: "<what>: 'x' is not an integer", or, for a number past either end (2^64,
// 1e308 and -1 alike), "<what>: '1e20' is above 1048576 (an integer from 1 to 1048576)".
StatusOr<int64_t> ParseInteger(std::string_view text, std::string_view what, int64_t lo, int64_t hi);

// A finite number in [lo, hi] (NaN and infinities are not numbers here), as ParseInteger.
StatusOr<double> ParseReal(std::string_view text, std::string_view what, double lo, double hi);

}  // namespace tierflow
