// Comparison of two runs of one schedule, task instance by task instance: sim against real,
// or one real run against another. Records are matched on (iteration, task, rank): a record of
// no rank (sim's of a collective, which stands for every rank's) is compared with each rank's
// record of that instance. Trace `a` is the reference: every relative error is (b - a) / a. docs/trace-format.md ("Comparison") defines
// each figure.
//
// Cost: O(n) hashing plus a partial sort for the worst tasks.
// Thread safety: pure functions over values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tierflow/core/ops.h"
#include "tierflow/core/trace_record.h"

namespace tierflow::traces {

// Matched instances of one op (the op as trace a records it).
struct OpComparison {
  Op op = Op::kCompute;
  int64_t count = 0;
  double a_sum_s = 0;  // sum of matched durations in a
  double b_sum_s = 0;
  double rel_error = 0;           // (b_sum_s - a_sum_s) / a_sum_s
  double mean_abs_rel_error = 0;  // mean over instances with a nonzero a duration of |(b - a) / a|
};

struct IterationComparison {
  int64_t iteration = 0;
  double a_time_s = 0;  // iteration time (first start to last end) over all of a's records
  double b_time_s = 0;
  double rel_error = 0;
};

struct TaskDifference {
  int64_t iteration = 0;
  std::string task;
  Op op = Op::kCompute;
  std::string resource;  // as trace a records it
  double a_duration_s = 0;
  double b_duration_s = 0;
  double abs_error_s = 0;  // |b - a|
  double rel_error = 0;    // (b - a) / a
};

struct TraceComparison {
  int64_t a_records = 0;
  int64_t b_records = 0;
  int64_t matched = 0;
  int64_t a_unmatched = 0;  // instances of a that b lacks (duplicates in a count here too)
  int64_t b_unmatched = 0;
  std::vector<std::string> a_unmatched_examples;  // "iteration 3 task 'x'", at most a few
  std::vector<std::string> b_unmatched_examples;
  int64_t op_mismatches = 0;  // matched instances whose op differs between a and b
  std::vector<OpComparison> ops;  // ops with matches, in Op order
  std::vector<IterationComparison> iterations;  // iterations present in both, in order
  // Steady-state mean iteration time of each trace (same formula as the summary's).
  double a_mean_iteration_s = 0;
  double b_mean_iteration_s = 0;
  double mean_iteration_rel_error = 0;
  std::vector<TaskDifference> worst;  // largest abs_error_s first
};

struct CompareOptions {
  int32_t worst_count = 10;     // how many worst tasks to keep
  int32_t example_count = 5;    // how many unmatched instances to name per side
};

TraceComparison Compare(const std::vector<TraceRecord>& a, const std::vector<TraceRecord>& b,
                        const CompareOptions& options = {});

// The real executor runs a layer's whole forward (or backward) when the layer's last compute
// task of that phase runs; the layer's other compute tasks take next to nothing. Compare compute
// per layer, then: this merges the compute records of each (source, iteration, layer, phase) into
// one record, task "compute.<phase>.layer<L>", starting at the first one's start and lasting the
// sum of their durations, with their FLOPs, bytes and `tasks` (TaskCount) summed, so that
// calibrate charges the model's per-task overhead as often as the schedule does. Other records
// pass unchanged; the order is that of each group's first record.
std::vector<TraceRecord> GroupComputeByLayer(const std::vector<TraceRecord>& records);

// The schedule tasks a record stands for: its `tasks`, at least one.
inline int32_t TaskCount(const TraceRecord& r) { return r.tasks > 0 ? r.tasks : 1; }

// (value - reference) / reference; 0 when both are 0, +infinity when only the reference is 0.
double RelativeError(double reference, double value);

// `tierflow validate`'s judgement of the simulator: the real runs of one schedule (each run's
// records, whole) against the simulator's records of it. Real is the reference: every error is
// (sim - real) / real. The run of median steady-state iteration time is compared (a shared
// machine slows whole runs by bursts of other load): its iteration times from every record as
// recorded (`whole`), its op classes and worst tasks with compute grouped per layer and phase
// (`grouped`, which carries `whole`'s iteration figures). Requires at least one run.
struct SimValidation {
  std::vector<double> real_iteration_s;  // each run's steady-state mean iteration time, in run order
  size_t median = 0;                     // the run compared
  TraceComparison whole;
  TraceComparison grouped;
};
SimValidation ValidateAgainstRuns(const std::vector<const std::vector<TraceRecord>*>& real_runs,
                                  const std::vector<TraceRecord>& sim, const CompareOptions& options = {});

// Tables (per op, per iteration, worst tasks, unmatched counts).
std::string ComparisonToText(const TraceComparison& comparison);
// One JSON object with the fields above (non-finite numbers as null).
std::string ComparisonToJson(const TraceComparison& comparison);

}  // namespace tierflow::traces
