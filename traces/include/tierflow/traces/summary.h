// The summary of one run's trace records: iteration times, phase breakdown, busy, utilization
// and exposed time per resource, peak bytes per pool, and the critical path. Every figure is
// defined, with its formula, in docs/trace-format.md ("Summary"); this header only names them.
//
// Records must come from one run (one `source`); a summary of mixed sources says so in its
// notes. Cost: one sort of the records by start time plus linear sweeps, O(n log n) overall.
//
// Thread safety: pure functions over values.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tierflow/core/ops.h"
#include "tierflow/core/schedule.h"
#include "tierflow/core/trace_record.h"

namespace tierflow::traces {

// Where one phase of one iteration ran.
struct PhaseSpan {
  bool present = false;  // false when the iteration has no record of this phase
  double start_s = 0;    // first start among the phase's records
  double end_s = 0;      // last end among them
  double span_s = 0;     // end_s - start_s
  double busy_s = 0;     // length of the union of the phase's record intervals (all resources)
};

struct IterationSummary {
  int64_t iteration = 0;
  int64_t records = 0;
  double start_s = 0;  // first start among the iteration's records
  double end_s = 0;    // last end among them
  double time_s = 0;   // end_s - start_s
  double period_s = 0; // end_s - end_s of the previous iteration found; 0 for the first
  std::array<PhaseSpan, kPhaseCount> phases;  // indexed by static_cast<int>(Phase)
  const PhaseSpan& phase(Phase p) const { return phases[static_cast<int>(p)]; }
  // The phases as DeepSpeed's engine times them (docs/trace-format.md "Phases"): back to back,
  // summing to time_s. Rank 0's GPU work cuts the iteration: a forward segment ends with its last
  // forward compute, a backward one with its last backward compute, reduce-scatter, gradient
  // copy or conversion (DeepSpeed's hooks run them inside its backward call); the time to each segment's end goes to its phase, the rest of the iteration to the
  // step. Indexed like `phases`.
  std::array<double, kPhaseCount> timer_s{};
  // Per phase: the busy time of its records (every resource and rank) outside its own timer's
  // segments, the overlap with other phases that the back-to-back timers hide.
  std::array<double, kPhaseCount> overlap_s{};
};

struct ResourceSummary {
  std::string name;
  std::string device;
  bool is_compute = false;  // at least one of its records has op compute
  int64_t records = 0;
  int64_t bytes = 0;
  double request_s = 0;     // sum of record durations (exceeds busy_s when requests overlap)
  double busy_s = 0;        // length of the union of its record intervals
  double utilization = 0;   // busy_s / TraceSummary::span_s
  double exposed_s = 0;     // busy while no compute resource is busy (0 for compute resources)
  double bytes_per_s = 0;   // bytes / busy_s; 0 when busy_s is 0
};

struct PoolSummary {
  std::string name;
  std::string device;
  int64_t capacity_bytes = 0;
  int64_t persistent_bytes = 0;
  int64_t peak_bytes = 0;
  double peak_time_s = 0;
};

// How a critical-path step's start was bounded.
enum class CriticalReason : uint8_t {
  kFirst,     // the chain starts here: no dep and no earlier instance on its resource
  kDep,       // by a dep (same-iteration or carried) that ended last
  kResource,  // by the instance before it on the same resource (a resource wait)
};
std::string_view CriticalReasonName(CriticalReason reason);

struct CriticalStep {
  int64_t iteration = 0;
  std::string task;
  Op op = Op::kCompute;
  std::string resource;
  double start_s = 0;
  double end_s = 0;
  CriticalReason reason = CriticalReason::kFirst;
  // start_s minus the end of the step before it (0 for the first): time the start waited for
  // something the trace does not show (a pool, the iteration window, the executor).
  double gap_s = 0;
};

struct CriticalPath {
  bool available = false;
  std::string explanation;          // why it is unavailable, when it is
  std::vector<CriticalStep> steps;  // in time order; steps.front().reason == kFirst
  std::array<double, kOpCount> time_by_op_s{};  // summed step durations, indexed by Op
  double length_s = 0;  // steps.back().end_s - steps.front().start_s
  double gap_s = 0;     // sum of the steps' gap_s
};

struct TraceSummary {
  int64_t records = 0;
  std::vector<std::string> sources;  // distinct record sources, sorted
  double start_s = 0;                // first start over all records
  double end_s = 0;                  // last end over all records
  double span_s = 0;                 // end_s - start_s: the denominator of utilization
  std::vector<IterationSummary> iterations;  // sorted by iteration number
  double mean_iteration_s = 0;       // steady-state mean iteration time
  double compute_busy_s = 0;         // union over every compute resource
  double exposed_s = 0;              // any non-compute resource busy while no compute is
  std::vector<ResourceSummary> resources;  // schedule order when a schedule is given, then by name
  std::vector<PoolSummary> pools;    // empty without a schedule
  CriticalPath critical_path;
  std::vector<std::string> notes;    // anything that makes a figure less than exact
};

// Which of `count` iterations (in iteration order) the steady state is measured over, as indices
// [first, end) (docs/trace-format.md): every one with a single iteration; all but the first (the
// warm-up) with two; from three on, all but the first and the last too (nothing follows the
// last, so what it deferred — a write-back overlapping the next forward — drains alone and its
// period is short). The steady-state mean iteration time is the mean period end(i) - end(i - 1)
// over i in [first, end), or end - start of the one iteration; phase means average over the same
// iterations. Everything that reports a steady-state figure (summaries, comparisons, `sim`,
// sweeps, tune) goes through this.
struct SteadyRange {
  size_t first = 0;
  size_t end = 0;
};
SteadyRange SteadyIterations(size_t count);
// That mean from when each iteration ended (`end_s`, in iteration order) and when the first
// began: for a run that has no records (`tierflow run --in-memory`); 0 with no iteration.
double SteadyIterationTime(const std::vector<double>& end_s, double first_start_s);

// `schedule` may be null: then pools are empty and the critical path is unavailable (its
// explanation says why). Records naming tasks the schedule lacks are left out of pools and
// of the critical path, and counted in a note.
TraceSummary Summarize(const std::vector<TraceRecord>& records, const Schedule* schedule);

// A readable report: tables of iterations, phases, resources, pools and the critical path (the
// path's time per op in full, its steps only the latest few).
std::string SummaryToText(const TraceSummary& summary);
// The same figures as one JSON object (field names as in this header, durations in seconds,
// sizes in bytes; non-finite numbers as null).
std::string SummaryToJson(const TraceSummary& summary);

}  // namespace tierflow::traces
