// The step (blocks.h): the global gradient check, then the optimizer swept over each rank's
// sub-groups — states in, Adam on the CPU, bf16 parameters out, states back — and the resident
// parameters made whole again.
#pragma once

#include "gpu_update.h"
#include "passes.h"

namespace tierflow::policies {

// The overflow check and global gradient norm over each rank's gradients after `deps[r]`, then
// one all-reduce of the norm; returns the all-reduce. `host_bytes_per_element` is what the check
// reads per gradient element (4 for fp32 gradients).
// `temporaries` (per rank, optional): a buffer the check allocates and frees (DeepSpeed's
// unfused isinf/isnan over the flat gradient creates full-size temporaries).
int32_t GradientNorm(ScheduleBuilder& b, const ModelPlan& plan, const std::vector<std::vector<int32_t>>& deps,
                     int32_t threads, int64_t host_bytes_per_element = 4,
                     const std::vector<int32_t>& temporaries = {});

// The unfused overflow check's temporaries: bytes per gradient element. DeepSpeed's stage 3
// (`DeepSpeedZeroOptimizer_Stage3.has_overflow`, run for fp16 only) masks the rank's flat
// gradient partition, in host memory when the optimizer is offloaded, with `torch.isinf(...)
// .any()` and then `torch.isnan(...).any()`: two statements, so one bool mask of one byte per
// element is alive at a time.
inline constexpr int64_t kOverflowTemporaryBytesPerElement = 1;
// Refuses DeepSpeed's unfused check (asked for by `knob`) outside fp16 training, where
// DeepSpeed runs none.
Status UnfusedOverflowCheckNeedsFp16(const Scenario& s, const std::string& knob);

// Per sub-group, the grad_ready tasks of the units overlapping it: its gradients are final when
// they have completed (what an optimizer overlapped with backward waits for).
std::vector<std::vector<int32_t>> SubGroupGradientDeps(const ModelPlan& plan, const std::vector<int32_t>& grad_ready);

// How updated fp16 parameters leave the optimizer.
enum class ParamUpdatePath {
  kChunkedBlocking,  // DeepSpeed: fp32->fp16 in chunks through parameter slots, each written and waited for
  kWrite,            // one exact-size buffer per sub-group, written to the parameter store
  kToGpu,            // one exact-size buffer per sub-group, copied to the GPU's resident partition
};

// The optimizer over one rank's sub-groups: swap in states (and gradients), Adam on the CPU,
// fp16 parameters out, swap out states. DeepSpeed's serial and pipelined swappers, IOC's
// isolated pipeline, MLP-Offload's placement and caching, and the overlapped optimizers of
// HiTrain and Fuyou are all options of this one block.
struct SweepOptions {
  int32_t rank = 0;
  std::vector<int32_t> order;             // sub-group indices, in update order
  bool pipeline_read = false;             // read the next sub-group while this one computes
  bool pipeline_write = false;            // the next sub-group does not wait for this one's write
  // Read/write isolation: writes yield to reads (priority after every read of the sweep), and
  // the update is pipelined both ways.
  bool isolate_reads_first = false;
  // Semi-asynchronous write-back: the step does not wait for state writes; instead the next
  // iteration's read of the same sub-group carries a dep on it.
  bool semi_async_writes = false;
  std::vector<int32_t> read_resource;     // per sub-group
  std::vector<int32_t> write_resource;    // per sub-group
  std::vector<bool> cached;               // per sub-group: states stay in host memory, never read
  // Per sub-group (empty = none): its states live on the GPU, in a persistent buffer of gpu_pool,
  // and are updated there (Adam on the GPU's compute resource): its gradient, brought to host
  // memory as for any other, is copied to a buffer of gpu_pool for the update (the bf16
  // gradients of host_grad_buffer as they are, which the update widens; fp32 where they are kept
  // in fp32 or read from NVMe), which
  // refreshes its bf16 parameters kept on the GPU in place (ParamUpdatePath::kToGpu, resident
  // units) and, with kWrite, leaves the others in a buffer of gpu_pool, whence a d2h takes them to
  // a buffer of param_pool and a write to their disk. No state is read or written back.
  // (kChunkedBlocking and parameters kept in host memory: not with on_gpu.)
  std::vector<bool> on_gpu;
  int32_t gpu_pool = kNoIndex;
  bool write_cached = false;              // cached sub-groups are still written back
  int32_t cache_pool = kNoIndex;          // where cached states live (persistent buffers)
  int32_t opt_pool = kNoIndex;            // pinned buffers of states and gradients in flight
  bool grads_on_nvme = true;              // read.grad from the sub-group's read resource
  int32_t host_grad_buffer = kNoIndex;    // else: convert.grad bf16 -> fp32 from this buffer (on_gpu: h2d.grad of it)
  // Per sub-group (empty = none): its fp32 gradients are in host memory already, in
  // host_grad32_buffer (PassOptions::grad_in_host): no read.grad, adam uses that buffer.
  std::vector<bool> grads_in_host32;
  int32_t host_grad32_buffer = kNoIndex;
  // Per unit (empty = none): the bf16 partition is kept in host memory (FetchOptions::in_host),
  // in host_param_buffer: kChunkedBlocking converts it there in place, one task per sub-group,
  // with no slot and no write.
  std::vector<bool> param_in_host;
  int32_t host_param_buffer = kNoIndex;
  std::vector<int32_t> first_deps;        // the first swap-in waits for these (norm, flushed grads)
  std::vector<int32_t> pipelined_read_deps;  // every pipelined read also waits for these
  std::vector<std::vector<int32_t>> ready_deps;  // per sub-group: its gradients are final
  // Read-ahead (needs pipeline_read): the states' reads wait only for the previous read, in
  // update order across iterations, and for pinned memory; the waits above (first_deps,
  // pipelined_read_deps, ready_deps) hold the gradient's read or conversion and Adam instead.
  // The read reserves the fp32 gradient buffer too, so read-ahead cannot starve a gradient.
  bool read_ahead = false;
  ParamUpdatePath param_path = ParamUpdatePath::kChunkedBlocking;
  bool adam_waits_param_write = true;     // DeepSpeed: the blocking fp16 write ends the sub-group
  bool states_after_params = true;        // DeepSpeed: states are swapped out after the fp16 write
  int32_t param_pool = kNoIndex;
  int64_t chunk_elements = 0;             // kChunkedBlocking: elements per parameter slot (chunks
                                          // start IoAlignedStep(chunk_elements) apart)
  std::vector<int32_t> param_write_resource;  // per sub-group (kChunkedBlocking, kWrite)
  int64_t block_bytes = 0;
  int32_t queue_depth = 0;
  int32_t threads = 1;
};

struct SweepResult {
  std::vector<int32_t> tails;          // what a blocking step() waits for
  std::vector<int32_t> read_states;    // per sub-group (kNoIndex when cached)
  std::vector<int32_t> write_states;   // per sub-group (kNoIndex when cached and not written)
  std::vector<int32_t> param_done;     // per sub-group: its fp16 parameters are written / on the GPU
  std::vector<int32_t> adam;           // per sub-group
  // The h2d copies of updated GPU-resident parameters (the resident units'; with kToGpu the
  // whole partition's), in order.
  std::vector<int32_t> resident_refreshes;
};

SweepResult OptimizerSweep(ScheduleBuilder& b, const ModelPlan& plan, const SweepOptions& o);


// With several ranks each refreshes only its own partition of the GPU-resident units after its
// update (`refreshes`, every rank's: SweepResult::resident_refreshes); this one all-gather of
// every rank's partition of each resident unit, after all of them, makes the units whole on every
// GPU again, as DeepSpeed re-gathers its persistent parameters after the step. The next
// iteration's computes of resident units must wait for it. kNoIndex with one rank or no
// resident unit. (Partitions kept on the GPU without parameter offload are gathered unit by unit
// as they are fetched.)
int32_t GatherResident(ScheduleBuilder& b, const ModelPlan& plan, const std::vector<int32_t>& refreshes);

// The step's end: a barrier after `tails` and after GatherResident of `refreshes`; the next
// iteration's computes of GPU-resident units (passes.resident_computes) carry a dep on it.
// Returns the barrier, for what else of the next iteration waits for the step.
int32_t StepEnd(ScheduleBuilder& b, const ModelPlan& plan, const PassResult& passes, const std::vector<int32_t>& tails,
                const std::vector<int32_t>& refreshes);

// The sub-groups a unit's partition overlaps (indices into plan.subgroups).
std::vector<int32_t> SubGroupsOfUnit(const ModelPlan& plan, int32_t unit);

}  // namespace tierflow::policies
