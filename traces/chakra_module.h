// Private to traces/: the Chakra writer is a module (core/module.h), `libtierflow_chakra.so`,
// so that only `tierflow trace chakra` loads protobuf. chakra.cc is the module; chakra_module.cc
// is WriteChakraTraces, which opens it.
#pragma once

#include <string>
#include <vector>

#include "tierflow/traces/chakra.h"

namespace tierflow::traces::internal {

using WriteChakraFn = StatusOr<std::vector<ChakraFile>> (*)(const Schedule&, const IterationTimes&, const std::string&,
                                                            const ChakraOptions&);
inline constexpr const char* kChakraModule = "libtierflow_chakra.so";
inline constexpr const char* kChakraEntry = "tierflow_chakra_writer";

}  // namespace tierflow::traces::internal
