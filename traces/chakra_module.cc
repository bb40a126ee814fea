// WriteChakraTraces (chakra.h): the writer of the Chakra module (chakra_module.h), opened on use.
#include "chakra_module.h"
#include "tierflow/core/module.h"

namespace tierflow::traces {

StatusOr<std::vector<ChakraFile>> WriteChakraTraces(const Schedule& schedule, const IterationTimes& times,
                                                    const std::string& dir, const ChakraOptions& options) {
  TF_ASSIGN_OR_RETURN(void* entry, OpenModuleEntry(internal::kChakraModule, internal::kChakraEntry,
                                                   "Chakra traces are written by this module, which a build without protobuf does not have "
                                                   "(apt-get install libprotobuf-dev protobuf-compiler, then rebuild)"));
  return reinterpret_cast<internal::WriteChakraFn (*)()>(entry)()(schedule, times, dir, options);
}

}  // namespace tierflow::traces
