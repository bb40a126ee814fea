// Private to sim/: one SimGrid simulation of a planned schedule, in the current process.
// SimGrid 3.32 allows one meaningful engine per process (see simulator.h), so the engine is run
// once per process: in a forked child, or once in-process.
//
// The engine is the only code that links SimGrid, and SimGrid (with the ns-3 libraries it
// needs) takes about 60 ms to map and relocate: a process that linked it paid that before main,
// whatever the command. So engine.cc is built as a module (core/module.h),
// `libtierflow_simgrid.so`, which LoadEngine() (engine_module.cc) opens on its first call;
// Simulate() calls it before it forks, so that every child starts with SimGrid mapped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/plan.h"
#include "tierflow/core/schedule.h"
#include "tierflow/core/status.h"
#include "tierflow/models/hardware.h"
#include "tierflow/sim/simulator.h"

namespace tierflow::sim::internal {

// Receives results as the simulation produces them.
class RunSink {
 public:
  virtual ~RunSink() = default;
  virtual void OnComplete(int32_t task, int64_t iteration, double start_s, double end_s) = 0;
  virtual void OnProgress(const SimProgress& progress) = 0;
};

struct RunStats {
  double makespan_s = 0;
  std::vector<int64_t> pool_peak_bytes;
  int64_t completed = 0;
  int64_t activities = 0;
  int64_t disk_sharing_mismatches = 0;
};

// The engine: runs `iterations` iterations; `extra_config` items ("key:value") are passed to
// SimGrid after ours. Returns the dispatcher's kDeadlock Status when the schedule stops making
// progress, kInternal for a SimGrid failure (its exceptions do not escape).
using RunEngineFn = Status (*)(const Schedule& schedule, const models::HardwareSpec& hw, const Plan& plan,
                               int64_t iterations, bool want_progress, const std::vector<std::string>& extra_config,
                               RunSink* sink, RunStats* stats);

// The engine, from its module, opened on the first call (core/module.h): Unavailable naming the
// module and the loader's reason when it cannot be opened (a build without SimGrid has none).
// Simulate() calls it before it forks and hands the function to the child, which so never takes
// the module registry's lock (another thread may have held it at the fork).
StatusOr<RunEngineFn> LoadEngine();

// What the module exports, by C name so that the loader finds it with dlsym: its RunEngineFn.
inline constexpr const char* kEngineModule = "libtierflow_simgrid.so";
inline constexpr const char* kEngineEntry = "tierflow_sim_run_engine";

}  // namespace tierflow::sim::internal
