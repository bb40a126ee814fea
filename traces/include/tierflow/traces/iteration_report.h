// The iteration report shared by `tierflow sim` and `tierflow run`: the same keys whichever
// executor produced the trace records, so that scripts and `tierflow validate` read both alike.
//
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tierflow/core/schedule.h"
#include "tierflow/core/trace_record.h"

namespace tierflow::traces {

// What was trained, on what: the report's header and the throughput figures (the CLI fills it
// from a scenario); ranks 0 (the default) leaves both out.
struct RunSetting {
  std::string model;        // the model's name
  std::string hardware;     // the node's name
  bool calibrated = false;  // the hardware is a `tierflow calibrate` profile (its source says so)
  int32_t nodes = 1;
  int64_t sequence_length = 0;
  int64_t micro_batch = 0;    // sequences per rank per micro-step
  int64_t accumulation = 0;   // micro-steps per iteration
  int64_t ranks = 0;
  // Model FLOPs of one iteration over every rank: forward and backward, without the
  // recomputation of activation checkpointing (what MFU counts).
  double flops_per_iteration = 0;
  double peak_flops_per_gpu = 0;  // gpu.peak_flops; 0 where it is not the device that ran (no MFU)
  int64_t global_batch() const { return micro_batch * accumulation * ranks; }
};

struct RunFacts {  // what the executor knows beyond the records
  std::string scenario;
  std::string policy;
  int64_t iterations = 0;
  std::vector<int64_t> pool_peak_bytes;  // per schedule pool, exact (from the dispatcher)
  int64_t tasks = 0;                     // instances executed
  double wall_s = 0;
  std::string tasks_key = "tasks_simulated";
  // > 0: the records are those of the last this many iterations only (a long real run keeps no
  // more), and the report says so (summarised_iterations).
  int64_t summarised_iterations = 0;
  RunSetting setting;
};

// Keys (docs/trace-format.md, "Report"): setting {model, hardware, calibrated, nodes,
// sequence_length, micro_batch, accumulation, ranks, global_batch} and throughput
// {tokens_per_s, samples_per_s, model_tflops_per_gpu, mfu, peak_flops_per_gpu} when RunFacts has
// a setting (the text prints no MFU above 1: a device faster than the hardware's peak);
// iteration_s (steady-state mean), iterations_s, phases {forward_s, backward_s, step_s}
// (steady-state mean span of each phase; they overlap), timer_phases (the same cut back to back,
// as DeepSpeed's timers: they add up to the iteration), phase_overlap; resources {name: {busy_s,
// utilization, exposed_s, bytes_per_s}} over the whole run; per_iteration [{resource, count,
// busy_s, busy_min_s, busy_max_s, utilization, exposed_s, bytes_per_s}]: the same over the
// steady-state iterations, per iteration, each rank's copies of a resource folded into one row
// (gpu3.compute and gpu0.compute as gpu*.compute, cpu.r2 as cpu.r*; mean, min and max);
// peak_bytes {pool: bytes}; critical_path_s {op: seconds}; <tasks_key>, wall_s, and
// summarised_iterations when RunFacts has it.
// What the planner says of its schedule for the user to read (its meta entries "note.*": a
// schedule that moves no bytes to disk says why), in plan's and sim's and run's reports.
std::vector<std::string> PlanNotes(const Schedule& schedule);

nlohmann::ordered_json BuildReport(const Schedule& schedule, const std::vector<TraceRecord>& records,
                                   const RunFacts& facts);
// The same report as readable tables: the setting and throughput, the phases as the timers cut
// them (adding up) with their spans, resources per iteration folded over ranks, pools folded
// likewise, the critical path.
std::string ReportToText(const Schedule& schedule, const nlohmann::ordered_json& report);

}  // namespace tierflow::traces
