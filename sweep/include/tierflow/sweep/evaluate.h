// Evaluating scenario variations: plan + simulate + the figures a sweep row or the tuner needs,
// for many variations at once in parallel worker processes.
//
// A variation is a base scenario (YAML text) plus `--set`-style overrides. Each one runs in its
// own forked process that loads, plans and simulates it (SimGrid in-process: the worker is fresh)
// and sends back only the figures, never the trace records; a crash or a SimGrid failure in one
// variation cannot take the caller down. A variation that cannot be planned, deadlocks, or
// exceeds a memory budget is an Evaluation with feasible == false and the reason, never an error
// of the batch.
//
// Figures follow the `tierflow sim` report (docs/trace-format.md "Summary"): iteration_s is the
// steady-state mean iteration time (the first iteration's span when only one is simulated), phase
// times are the mean span of each phase over the steady-state iterations.
//
// Thread safety: EvaluateAll() forks; call it while no other thread of the process holds a lock a
// child could need (the driver verbs and the tests are single-threaded). With kThreads its own
// threads plan while others fork (glibc's malloc is fork-safe; the forked child only runs
// SimGrid). The calling process must never have run SimGrid in-process itself.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tierflow/core/status.h"
#include "tierflow/models/hardware.h"

namespace tierflow::sweep {

// Limits on the peaks of a simulated run; 0 = no limit.
struct MemoryBudget {
  int64_t host_bytes = 0;  // sum of the peaks of the pools on device `host` (pinned memory)
  int64_t gpu_bytes = 0;   // the largest peak among the pools on GPU devices
};
// "host=200 GiB,gpu=70GiB" (either part may be absent; units required).
StatusOr<MemoryBudget> ParseMemoryBudget(const std::string& text);
// What the machine has: each GPU's memory, and pinned host memory up to each node's DRAM less
// its reserve (cpu.host_reserve), summed over the nodes.
MemoryBudget HardwareMemoryBudget(const models::HardwareSpec& hw);
std::string MemoryBudgetToString(const MemoryBudget& budget);

struct Variation {
  std::vector<std::string> overrides;  // "key.path=value", applied in order to the base
};

struct Evaluation {
  // Planned, simulated, within the machine's memory (models::CheckMemoryFit) and the budget.
  bool feasible = false;
  // Planned and simulated: its figures are those of the simulation, whether or not it fits.
  bool simulated = false;
  std::string reason;  // why not, when !feasible: the plan's, the simulator's, the machine's or the budget's message
  std::string policy;  // the policy the variation planned with ("" when it could not be loaded)
  double iteration_s = 0;
  double forward_s = 0;
  double backward_s = 0;
  double step_s = 0;
  int64_t host_peak_bytes = 0;  // sum of host pools' peaks
  int64_t gpu_peak_bytes = 0;   // max of GPU pools' peaks
  std::vector<std::pair<std::string, int64_t>> pool_peak_bytes;  // per schedule pool, schedule order
  int64_t tasks = 0;            // task instances simulated
  // Host time in the worker (not deterministic; never written to a sweep CSV).
  double plan_s = 0;
  double sim_s = 0;
  double wall_s = 0;            // the worker's whole life, fork to result
};

enum class Parallelism {
  // A forked worker process per variation loads, plans and simulates it (SimGrid in-process) and
  // sends back the figures only. The default: measured fastest (docs/sweep-format.md, "Speed").
  kWorkerProcesses,
  // `jobs` threads in this process load and plan; each Simulate() forks its own child, which
  // sends every trace record back.
  kThreads,
};

struct EvaluateOptions {
  int64_t iterations = 1;  // iterations simulated per variation (>= 1)
  int jobs = 1;            // worker processes at once (>= 1)
  MemoryBudget budget;     // a run whose peaks exceed it is infeasible
  Parallelism parallelism = Parallelism::kWorkerProcesses;
  // Called in the calling thread after each variation completes (done counts completed ones;
  // `completed` is the one that just did).
  std::function<void(int64_t done, int64_t total, const Evaluation& completed)> progress;
};

// Evaluates every variation of `base_yaml` (origin names it in messages: a path or "inline").
// Returns one Evaluation per variation, in the order given, whatever `jobs` is. Fails only when
// the workers cannot be started (fork or pipe errors) or options are out of range.
StatusOr<std::vector<Evaluation>> EvaluateAll(const std::string& base_yaml, const std::string& origin,
                                              const std::vector<Variation>& variations,
                                              const EvaluateOptions& options);

// The same for one variation, in a worker process.
StatusOr<Evaluation> EvaluateOne(const std::string& base_yaml, const std::string& origin, const Variation& variation,
                                 const EvaluateOptions& options);

}  // namespace tierflow::sweep
