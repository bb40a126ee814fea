// The collective probe: what nccl-tests measures, over tierflow's own collective back-ends
// (collective.h) — for each operation and message size, the time of a collective (the slowest
// rank's, the median over repetitions), algbw, busbw and the elements that came out wrong — and
// the trace records `tierflow calibrate` fits the interconnect's ring alpha-beta from
// (docs/calibration.md). Every rank calls it with the same options; every rank gets the result.
// Thread safety: one call at a time per Collective (as the Collective itself).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tierflow/core/ops.h"
#include "tierflow/core/status.h"
#include "tierflow/core/trace_record.h"
#include "tierflow/real/collective.h"

namespace tierflow::real {

struct CollectiveProbeOptions {
  // Message sizes in bytes, as nccl-tests counts them (and schedules' collective tasks): the
  // gathered size of an all-gather, the input of a reduce-scatter, the buffer of an all-reduce.
  // Each is cut to whole fp32 elements, a multiple of the rank count.
  std::vector<int64_t> sizes;
  std::vector<Op> ops = {Op::kAllGather, Op::kReduceScatter, Op::kAllReduce};
  int repetitions = 5;  // measured, after one warm-up
  std::function<void(const std::string&)> progress;  // after each point, on every rank
  // For a collective on GPU memory (Collective::device_memory(): nccl): where the buffers it
  // measures on are made, and how they are filled and read back (outside the timed calls).
  DeviceMemory* memory = nullptr;
};

struct CollectiveProbeRow {
  Op op = Op::kAllReduce;
  int64_t bytes = 0;    // the message, as `sizes`
  int64_t count = 0;    // fp32 elements of it
  int32_t ranks = 1;
  double time_s = 0;    // median over the repetitions of the slowest rank's time
  double algbw = 0;     // bytes / time_s
  double busbw = 0;     // algbw x (n-1)/n, x 2(n-1)/n for all-reduce (nccl-tests' bus bandwidth)
  int64_t wrong = 0;    // elements different from the expected result, over ranks and repetitions
};

struct CollectiveProbeResult {
  std::vector<CollectiveProbeRow> rows;
  // One per measured repetition (source "probe", resource "dp.comm", threads = the rank count),
  // spanning the slowest rank's time.
  std::vector<TraceRecord> records;
};

// InvalidArgument for no sizes, a size below 4 bytes per rank, fewer than one repetition, an op
// that is not a collective, or a collective on GPU memory without options.memory; a back-end's
// error otherwise.
StatusOr<CollectiveProbeResult> ProbeCollectives(Collective& collective, const CollectiveProbeOptions& options);

// nccl-tests' bus bandwidth factor of `op` over `ranks` ranks.
double BusBandwidthFactor(Op op, int32_t ranks);

}  // namespace tierflow::real
