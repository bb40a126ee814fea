// LoadEngine() (engine.h): the SimGrid engine, opened from its module (core/module.h).
#include "sim/engine.h"
#include "tierflow/core/module.h"

namespace tierflow::sim::internal {

StatusOr<RunEngineFn> LoadEngine() {
  TF_ASSIGN_OR_RETURN(void* entry, OpenModuleEntry(kEngineModule, kEngineEntry,
                                                   "the simulator runs in this module, which a build without SimGrid does not have "
                                                   "(apt-get install libsimgrid-dev, then rebuild)"));
  return reinterpret_cast<RunEngineFn (*)()>(entry)();
}

}  // namespace tierflow::sim::internal
