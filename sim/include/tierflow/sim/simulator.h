// The SimGrid executor: runs a schedule on a simulated node built from a HardwareSpec and returns
// one trace record per task instance. docs/simulator.md describes the platform, how each op
// becomes a SimGrid activity, the contention models and what is not modelled.
//
// The dispatcher (core/) decides when each instance starts, exactly as in the real executor;
// sim creates one SimGrid activity for it at that moment and reports its completion back.
// SimGrid itself never appears in this header: only sim/ sees it.
//
// Isolation: SimGrid 3.32 keeps engine state in process globals (the simulated clock is never
// reset, configuration is frozen after the first engine, activity signals are static), so a
// second engine in one process starts at the first one's end time with the first one's callbacks
// still connected. By default each Simulate() therefore runs in a forked child process that
// sends its results back through a pipe; repeated calls in one process give identical results.
//
// Thread safety: Simulate() may be called from any thread, but forks: call it while no other
// thread holds a lock the child might need (the child only runs SimGrid and writes to a pipe).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tierflow/core/schedule.h"
#include "tierflow/core/status.h"
#include "tierflow/core/trace_record.h"
#include "tierflow/models/hardware.h"

namespace tierflow::sim {

struct SimProgress {
  int64_t instances_completed = 0;
  int64_t instances_total = 0;
  double simulated_s = 0;  // simulated clock at the report
};

enum class SimIsolation {
  kFork,       // run in a forked child process (default; any number of calls per process)
  kInProcess,  // run in this process: at most one call per process lifetime (for profiling)
};

struct SimOptions {
  int64_t iterations = 1;
  bool record_trace = true;  // fill SimResult::records
  // Called in the calling thread for each instance as it completes, in completion order, with or
  // without records: for a caller that needs less than a TraceRecord per instance (the sweep's
  // phase spans), and then sets record_trace = false.
  std::function<void(int32_t task, int64_t iteration, double start_s, double end_s)> on_complete;
  // The caller had schedule.Validate() return Ok on this very schedule, unchanged since
  // (policies::Plan validates what it builds): Simulate does not check it a second time. An
  // invalid schedule given so breaks the dispatcher's requirements: leave it false otherwise.
  bool schedule_validated = false;
  // Called in the calling thread about every 1% of instances and once at the end.
  std::function<void(const SimProgress&)> progress;
  SimIsolation isolation = SimIsolation::kFork;
  // Extra SimGrid configuration items ("network/optim:Full"), applied after sim's own
  // (network/model:CM02, network/crosstraffic:0, network/TCP-gamma:0). For experiments only:
  // changing the network model breaks the exactness docs/simulator.md promises.
  std::vector<std::string> simgrid_config;
};

struct SimResult {
  std::vector<TraceRecord> records;      // one per instance, source "sim", in completion order
  double makespan_s = 0;                 // simulated end of the last instance
  std::vector<int64_t> pool_peak_bytes;  // per schedule pool, from the dispatcher
  int64_t tasks_simulated = 0;           // instances completed (tasks x iterations)
  int64_t activities = 0;                // SimGrid activities created (instant ops, and execs and copies timed alone, create none)
  double wall_s = 0;                     // host time the simulation took, fork and transfer included
  double cpu_s = 0;                      // CPU time of the simulating process (one thread), user + system
  // Calls of a disk's sharing callback in which SimGrid's count of flows on the disk differed
  // from sim's own read/write counts (a diagnostic for the contention model; expected 0).
  int64_t disk_sharing_mismatches = 0;
};

// Ok when this process can simulate: the first call opens the SimGrid engine, which is loaded
// only by the commands that simulate (docs/simulator.md "Start-up"). Unavailable, saying why, in
// a build without SimGrid or when its module cannot be loaded; Simulate returns the same.
Status SimulatorAvailable();

// Runs `options.iterations` iterations of `schedule` on `hw`.
// Requires nothing of the schedule: it is validated here (an invalid one returns Validate()'s
// Status) unless options.schedule_validated says the caller has.
// Schedule devices map to the hardware by name: gpu0..gpu{N-1}, host, nvme0.. (node.nvme[i]),
// remote0.. (node.remote[i]) and net; any other name, or an index out of range, is an
// InvalidArgument naming the device, as is an op on a device that cannot run it (a read on a
// GPU) or a bandwidth the op needs that the hardware leaves at 0. A schedule that cannot make
// progress returns the dispatcher's kDeadlock Status. SimGrid failures become kInternal.
StatusOr<SimResult> Simulate(const Schedule& schedule, const models::HardwareSpec& hw,
                             const SimOptions& options);

}  // namespace tierflow::sim
