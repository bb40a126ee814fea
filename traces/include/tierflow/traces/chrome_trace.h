// Export of trace records as Chrome trace event JSON, the format Perfetto (ui.perfetto.dev) and
// chrome://tracing open. docs/trace-format.md ("Chrome / Perfetto export") describes the layout:
//
//   {"traceEvents":[...], "displayTimeUnit":"ms"}
//   - a process (pid) per (source, device), named "<device> (<source>)" by process_name
//     metadata, so sim and real records written into one file sit side by side;
//   - a track (tid) per resource inside its device's process, named by thread_name metadata;
//     instances overlapping on one queue go to extra lanes ("nvme0.read #2", ...) so that the
//     events of each track nest, as Perfetto requires;
//   - a complete event (ph "X", ts and dur in microseconds) per record: name = task id,
//     cat = op, args = iteration, layer, phase, bytes, flops, source, and gb_per_s for
//     transfers (read, write, h2d, d2h, collectives);
//   - records without a resource (alloc, free, barrier) on an "instant" track of a "schedule"
//     process per source, as instant events (ph "i") when they take no time;
//   - with a schedule, a counter track (ph "C") per pool in its device's process: bytes held,
//     reconstructed from the records as in occupancy.h, separately for each source.
//
// Output is streamed, so memory stays proportional to the records, not to the JSON text.
// Thread safety: pure functions (WriteChromeTrace writes only `path`).
#pragma once

#include <string>
#include <vector>

#include "tierflow/core/schedule.h"
#include "tierflow/core/status.h"
#include "tierflow/core/trace_record.h"

namespace tierflow::traces {

struct ChromeTraceOptions {
  bool pool_counters = true;  // emit pool occupancy counters (only when a schedule is given)
  bool instant_ops = true;    // emit records that have no resource
};

// Writes the trace to `path` (truncating it). `schedule` may be null: then devices are taken
// from resource names ("gpu0.compute" -> "gpu0") and no counters are written.
Status WriteChromeTrace(const std::string& path, const std::vector<TraceRecord>& records,
                        const Schedule* schedule, const ChromeTraceOptions& options = {});

// The same JSON as one string (for tests and small traces).
std::string ChromeTraceToString(const std::vector<TraceRecord>& records, const Schedule* schedule,
                                const ChromeTraceOptions& options = {});

}  // namespace tierflow::traces
