// Pool occupancy reconstructed from trace records: how many bytes each pool of a schedule held
// over time, without the executor having to log it.
//
// Rule (docs/trace-format.md, "Pool occupancy"): persistent buffers count from time 0 (or from
// the earliest record, if that is earlier); a record's task allocates its `allocs` at the
// record's start_s and frees its `frees` at its end_s. Occupancy is sampled after every change
// at one timestamp has been applied, so a buffer freed at t and another allocated at t never
// count together, and an alloc and free at the same instant leave no trace.
//
// Records must come from one run (one source); records whose task is not in the schedule are
// counted in `unmatched_records` and otherwise ignored.
//
// Thread safety: pure function.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tierflow/core/schedule.h"
#include "tierflow/core/trace_record.h"

namespace tierflow::traces {

struct OccupancySample {
  double time_s = 0;
  int64_t bytes = 0;  // held after every change at time_s
  bool operator==(const OccupancySample&) const = default;
};

struct PoolOccupancy {
  int32_t pool = kNoIndex;  // index into schedule.pools()
  std::string name;
  int64_t capacity_bytes = 0;
  int64_t persistent_bytes = 0;
  int64_t peak_bytes = 0;   // maximum over the samples (>= persistent_bytes)
  double peak_time_s = 0;   // first time the peak was reached
  // One sample per timestamp at which this pool changed, in time order, starting with the
  // persistent bytes at time 0. Empty unless asked for.
  std::vector<OccupancySample> samples;
};

struct OccupancyResult {
  std::vector<PoolOccupancy> pools;  // one per schedule pool, in schedule order
  int64_t unmatched_records = 0;     // records naming a task the schedule lacks
};

// O(n log n) in the number of alloc/free events. `keep_samples` = false keeps only the peaks.
OccupancyResult ReconstructPoolOccupancy(const std::vector<TraceRecord>& records,
                                         const Schedule& schedule, bool keep_samples);

}  // namespace tierflow::traces
