// An offloading design: the decisions in which the systems of the literature differ, as one
// value, and the generator that turns a scenario and a design into a schedule from the shared
// blocks. Each policy file (ioc.cc, mlp_offload.cc, ...) reads its knobs, fills a design and
// calls PlanDesign; zero-infinity keeps its own generator (it pins DeepSpeed's exact schedule).
//
// Thread safety: values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "blocks.h"
#include "tierflow/core/schedule.h"
#include "tierflow/policies/scenario.h"

namespace tierflow::policies {

struct OffloadDesign {
  std::string policy;  // the name written in the schedule's meta

  // Parameters. On NVMe: read per rank into pinned slots, copied to the GPU, all-gathered.
  bool params_on_nvme = true;
  int64_t slot_elements = 0;       // every slot this size (DeepSpeed); 0 = exact partition sizes
  int32_t param_buffers = 5;       // slots per rank (per class with class_pools)
  bool class_pools = false;        // MemAscend: one pinned pool per tensor-shape class
  int32_t coupled_reads = 1;       // 1 = a gather waits only for its own reads (IOC)
  int64_t gpu_window_bytes = 0;    // > 0: gathered parameters live in a GPU window pool (Fuyou)
  bool pin_rounding = false;       // pinned blocks rounded up to powers of two (PyTorch)

  // Devices. Parameters (and fp16 write-back) round-robin over param_disks, optimizer states
  // and flushed gradients over opt_disks, rotated by rank so that ranks use different disks.
  std::vector<int32_t> param_disks{0};
  std::vector<int32_t> opt_disks{0};
  int32_t remote_ratio = 0;        // > 0: sub-group i on remote0 when i % remote_ratio == 0 (MLP-Offload)
  bool tier_locks = false;         // one reader and one writer per tier across ranks (concurrency-1 resources)
  bool shared_rw_queue = false;    // optimizer reads and writes of a disk on one device-wide queue (IOC)

  // Gradients and the update.
  GradientPath gradient_path = GradientPath::kFlushToNvme;
  bool grad_partition_buffer = false;  // DeepSpeed's bf16 grad_partitions_flat_buffer (PassOptions)
  bool global_norm_first = true;   // false: each sub-group updated as soon as its gradients are final
  bool descending_order = false;   // update the last sub-groups first (their gradients are final first)
  bool pipeline_read = false;
  bool pipeline_write = false;
  bool read_ahead_states = false;  // states read as soon as pinned memory admits (SweepOptions::read_ahead)
  bool isolate_reads_first = false;
  bool semi_async_writes = false;
  int32_t cached_per_path = 0;     // the last sub-groups of each path stay in host memory
  // The first gpu_sub_groups of each rank's update order keep their optimizer states on the GPU
  // and are updated there (SweepOptions::on_gpu; kAllSubGroups: every one); cached_per_path
  // counts among the others. Their bf16 parameters are refreshed in place on the GPU, or sent
  // to their disk whole (not with p16_chunk_elements).
  int32_t gpu_sub_groups = 0;
  bool write_cached = false;
  int32_t optimizer_buffers = 4;   // pinned buffers of the largest sub-group's states + gradient, per rank
  bool overflow_temporaries = false;
  // fp16 write-back: 0 = one exact-size buffer per sub-group; > 0 = DeepSpeed's chunks of this
  // many elements through one slot, each written and waited for (the step order of DeepSpeed:
  // the next sub-group's Adam and this one's state write wait for the fp16 write).
  int64_t p16_chunk_elements = 0;
  // false: the next iteration's parameter reads wait only for the fp16 write-back of their own
  // sub-groups (delayed / semi-asynchronous write-back) instead of the whole step.
  bool blocking_step = true;

  int64_t sub_group_size = 1000000000;
  int64_t persistence_threshold = 100000;
  int64_t block_bytes = 1 << 20;
  int32_t queue_depth = 8;
  int32_t cpu_threads = 0;         // 0 = cores / ranks
};

inline constexpr int32_t kAllSubGroups = INT32_MAX;

StatusOr<Schedule> PlanDesign(const Scenario& s, const OffloadDesign& d);

// The knobs every design-based policy shares, with DeepSpeed's names: sub_group_size,
// param_persistence_threshold, block_size, queue_depth, cpu_threads, buffer_count,
// optimizer_buffer_count; and gpu_sub_groups (a count or "all"). Defaults are the design's
// current values.
Status ReadCommonKnobs(Knobs& knobs, OffloadDesign* d);

// Disk indices first .. first+count-1 (at least one).
std::vector<int32_t> DiskRange(int32_t first, int32_t count);

// Places parameters and optimizer state over the first `disks` devices: "split" gives disk 0 to
// parameters and the rest to optimizer state (reads and writes of the update kept apart from
// the parameter stream), an error with fewer than two; "stripe" stripes both over all.
Status PlaceOnDisks(const std::string& layout, int32_t disks, OffloadDesign* d);

}  // namespace tierflow::policies
