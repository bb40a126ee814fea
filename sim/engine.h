// Private to sim/: one SimGrid simulation of a planned schedule, in the current process.
// SimGrid 3.32 allows one meaningful engine per process (see simulator.h), so RunEngine() is
// called once per process: in a forked child, or once in-process.
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

// Runs `iterations` iterations; `extra_config` items ("key:value") are passed to SimGrid after
// ours. Returns the dispatcher's kDeadlock Status when the schedule
// stops making progress, kInternal for a SimGrid failure (its exceptions do not escape).
Status RunEngine(const Schedule& schedule, const models::HardwareSpec& hw, const Plan& plan,
                 int64_t iterations, bool want_progress, const std::vector<std::string>& extra_config,
                 RunSink* sink, RunStats* stats);

}  // namespace tierflow::sim::internal
