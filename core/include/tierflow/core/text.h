// Checks every text input gets at the door, before a parser sees it (a scenario, a hardware or
// sweep file, a name given on the command line): it is UTF-8, so that every report and JSON
// output can hold it; and the one rule for every number a user writes (a YAML field, a --set or
// policy knob, a flag, a JSON field): it is finite and in its range, and its error names the
// range and echoes at most a few dozen characters of what was written.
//
// Thread safety: pure functions.
#pragma once

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

// An integer in [lo, hi]: decimal digits with an optional sign, or a number in another form that
// is exactly an integer ("1e6", "2.0"); surrounding spaces are ignored. InvalidArgument naming
// `what` otherwise: "<what>: 'x' is not an integer", or, for a number past either end (2^64,
// 1e308 and -1 alike), "<what>: '1e20' is above 1048576 (an integer from 1 to 1048576)".
StatusOr<int64_t> ParseInteger(std::string_view text, std::string_view what, int64_t lo, int64_t hi);

// A finite number in [lo, hi] (NaN and infinities are not numbers here), as ParseInteger.
StatusOr<double> ParseReal(std::string_view text, std::string_view what, double lo, double hi);

}  // namespace tierflow
