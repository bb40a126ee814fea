// Fetching parameter units (blocks.h): each unit's partition read into a pinned slot, or found in
// host or GPU memory, copied to the GPU and gathered, as each offloading system does it.
#pragma once

#include "schedule_builder.h"

namespace tierflow::policies {

// The resource a rank's I/O for one parameter unit (or one sub-group) runs on: how a policy
// places data over several disks or tiers. Empty = the per-rank default.
using PlacedResource = std::function<int32_t(int32_t rank, int32_t index)>;

// How a pass (forward or backward of one micro-step) fetches its parameter units.
struct FetchOptions {
  Phase phase = Phase::kForward;
  std::string tag;                    // unique per pass: "f0", "b0", ...
  std::vector<int32_t> slot_pool;     // per rank: pinned pool the partitions are read into
  PlacedResource slot_pool_of;        // per (rank, unit), overriding slot_pool: MemAscend's class pools
  int64_t slot_bytes = 0;             // 0 = exact partition size (exact-size pools)
  std::vector<int32_t> read_resource; // per rank
  int64_t block_bytes = 0;
  int32_t queue_depth = 0;
  // DeepSpeed's coupling: the all-gather of unit i waits for the reads of units i..i+k-1 (all
  // outstanding reads on the handle). 1 = decoupled (waits only for its own reads).
  int32_t coupled_reads = 1;
  std::vector<int32_t> carried_to;    // tasks of the previous iteration every read waits for
  // Reads are prioritised in trace order across passes, so that a later pass's read-ahead never
  // takes a pinned slot that an earlier pass still waits for.
  int32_t priority_base = 0;
  // Multi-disk placement of parameter partitions: overrides read_resource when set.
  PlacedResource read_resource_of;
  // Partitions kept on the GPU (DeepSpeed without offload_param): no read, no h2d; the
  // all-gather reads the rank's resident partition.
  bool params_on_gpu = false;
  // Per rank: the pool the gathered parameters are allocated in; empty = the GPU's HBM pool.
  // Fuyou's prefetch window is such a pool: its capacity bounds how far fetches run ahead.
  std::vector<int32_t> gather_pool;
  // > 0 (TrainingPasses): each pinned pool is a ring of this many slots. The k-th read into a
  // pool, in fetch order over every pass, waits for the all-gather that frees the slot of read
  // k - slot_ring (the first reads of an iteration: those of the previous iteration's last), so
  // at most slot_ring partitions are staged in a pool at once. A pool of slot_ring x its largest
  // partition then always admits the next read, whatever order the disks finish in; without the
  // ring, the reads of one disk can fill it with later units while the unit the in-order
  // all-gathers need next still waits on another disk (a deadlock). Must be >= coupled_reads.
  int32_t slot_ring = 0;
  // Per unit (empty = none): the partition is kept in host memory, never on a disk (DeepSpeed's
  // offload_param.max_in_cpu, and its swap minimum). No read and no slot: the h2d copies it from
  // host_param_buffer[rank], the rank's persistent flat bf16 buffer (docs/schedule-format.md).
  std::vector<bool> in_host;
  std::vector<int32_t> host_param_buffer;  // per rank
  bool InHost(int32_t unit) const { return !in_host.empty() && in_host[static_cast<size_t>(unit)]; }
};

struct FetchedUnit {
  int32_t unit = 0;
  std::vector<int32_t> param_tensor;       // per rank: the param16 partition at its home
  int32_t allgather = kNoIndex;            // the task after which the full unit is on every GPU
  std::vector<int32_t> gathered_buffer;    // per rank, in the GPU pool; the layer's last compute frees it
  std::vector<int32_t> reads;              // per rank (empty when kept in host memory)
  // Per rank: the task that allocates the gathered buffer (the h2d; the all-gather when the
  // partition stays on the GPU). In fetch order, these are the GPU pool's admissions.
  std::vector<int32_t> admit;
};

// Where rank r's bf16 partition of unit u lives: the GPU for resident units and
// params_on_gpu, the host for units kept there (FetchOptions::in_host), else the device of its
// read resource.
int32_t ParamHome(ScheduleBuilder& b, const ModelPlan& plan, const FetchOptions& o, int32_t rank, int32_t unit);

// Emits read -> h2d per rank and one all-gather per unit, in `order` (indices into plan.units),
// skipping GPU-resident units. The h2d allocates the gathered buffer it copies into, the
// all-gather frees the pinned slots; successive all-gathers are issued in order (DeepSpeed's fetch
// coordinator), and so are each rank's h2d copies, which are therefore admitted to the GPU pool in
// fetch order (never a later unit's buffer ahead of one the next compute needs). last_h2d (per
// rank) carries that order from pass to pass.
std::vector<FetchedUnit> FetchUnits(ScheduleBuilder& b, const ModelPlan& plan, const std::vector<int32_t>& order,
                                    const FetchOptions& o, std::vector<int32_t>* last_h2d);

}  // namespace tierflow::policies
