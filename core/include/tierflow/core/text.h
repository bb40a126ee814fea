// Checks every text input gets at the door, before a parser sees it (a scenario, a hardware or
// sweep file, a name given on the command line): it is UTF-8, so that every report and JSON
// output can hold it.
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "tierflow/core/status.h"

namespace tierflow {

// OK when `text` is well-formed UTF-8 (no overlong forms, surrogates or code points above
// U+10FFFF); else InvalidArgument "<what>: byte <offset> (0x..) is not UTF-8".
Status CheckUtf8(std::string_view text, const std::string& what);

}  // namespace tierflow
