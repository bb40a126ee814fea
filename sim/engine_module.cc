// RunEngine() and LoadEngine() (engine.h): the SimGrid engine, opened from its module
// (core/module.h) on first use.
#include "sim/engine.h"
#include "tierflow/core/module.h"

namespace tierflow::sim::internal {
namespace {

StatusOr<RunEngineFn> Engine() {
  TF_ASSIGN_OR_RETURN(void* entry, OpenModuleEntry(kEngineModule, kEngineEntry,
                                                   "the simulator runs in this module, which a build without SimGrid does not have "
                                                   "(apt-get install libsimgrid-dev, then rebuild)"));
  return reinterpret_cast<RunEngineFn (*)()>(entry)();
}

}  // namespace

Status LoadEngine() { return Engine().status(); }

Status RunEngine(const Schedule& schedule, const models::HardwareSpec& hw, const Plan& plan,
                 int64_t iterations, bool want_progress, const std::vector<std::string>& extra_config,
                 RunSink* sink, RunStats* stats) {
  TF_ASSIGN_OR_RETURN(RunEngineFn run, Engine());
  return run(schedule, hw, plan, iterations, want_progress, extra_config, sink, stats);
}

}  // namespace tierflow::sim::internal
