// The iteration report shared by `tierflow sim` and `tierflow run`: the same keys whichever
// executor produced the trace records, so that scripts and `tierflow validate` read both alike.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tierflow/core/schedule.h"
#include "tierflow/core/trace_record.h"
#include "tierflow/models/perf.h"

namespace tierflow::cli {

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
};

// Keys: iteration_s (steady-state mean), iterations_s, phases {forward_s, backward_s, step_s}
// (steady-state mean span of each phase), resources {name: {busy_s, utilization, exposed_s,
// bytes_per_s}}, peak_bytes {pool: bytes}, critical_path_s {op: seconds}, <tasks_key>, wall_s, and
// summarised_iterations when RunFacts has it.
nlohmann::ordered_json BuildReport(const Schedule& schedule, const std::vector<TraceRecord>& records,
                                   const RunFacts& facts);
// The same report as readable tables.
std::string ReportToText(const Schedule& schedule, const nlohmann::ordered_json& report);

// models::StorageLowerBound as {seconds, busiest, devices: [{device, read_bytes, write_bytes,
// seconds}]}, and as one paragraph set against `iteration_s` (empty text without storage I/O).
nlohmann::ordered_json StorageBoundJson(const models::StorageBound& bound);
std::string StorageBoundText(const models::StorageBound& bound, double iteration_s);

// The note a real run's disk bytes through the page cache get (run, validate): how many, and each
// buffered disk with why (RunResult::buffered_disks); empty when every byte went O_DIRECT.
std::string BufferedIoNote(int64_t direct_io_bytes, int64_t buffered_io_bytes, const std::vector<std::string>& buffered_disks);

}  // namespace tierflow::cli
