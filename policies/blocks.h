// Building blocks shared by the policy generators: what the model and training setup imply
// (parameter units, per-rank partitions, optimizer sub-groups, FLOPs), a schedule builder with
// the standard device, resource and pool names, and the three pipelines every offloading system
// has — fetch a parameter unit, flush its gradient, sweep the optimizer over sub-groups — with
// the options in which the systems differ.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tierflow/core/schedule.h"
#include "tierflow/policies/scenario.h"

namespace tierflow::policies {

// The boundaries a planner chooses inside the flat parameter space — sub-groups cut at
// sub_group_size, parameter chunks of buffer_size, each rank's stretch of a device's store — fall
// on multiples of this many elements: 4 KiB of bf16 (8 KiB of fp32), the strictest O_DIRECT
// alignment of common file systems. A disk every tensor of which starts and ends on such a
// boundary is read and written O_DIRECT by the real executor (docs/executor.md), as DeepSpeed
// pads its swap files to its I/O alignment. Unit boundaries are the model's: a model whose
// tensors' partitions are multiples of 2048 elements (a hidden size that is a multiple of 2048,
// on one rank) is aligned throughout; unit offsets are not padded (the flat element space has
// no holes).
inline constexpr int64_t kIoAlignElements = 2048;
// The most optimizer sub-groups per rank a plan may have (MakeModelPlan refuses more).
inline constexpr int64_t kMaxSubGroups = 65'536;
// `elements` rounded down to a multiple of kIoAlignElements; a count below it stays as it is.
inline int64_t IoAlignedStep(int64_t elements) {
  return elements >= kIoAlignElements ? elements / kIoAlignElements * kIoAlignElements : elements;
}

// A parameter tensor fetched, computed and released as one (one nn.Parameter in DeepSpeed).
struct ParamUnit {
  std::string name;
  int32_t layer = -1;           // the unit's layer in models::Layers() order
  int64_t elements = 0;
  int64_t rank_elements = 0;    // partition per rank: ceil(elements / ranks)
  int64_t rank_offset = 0;      // start of the partition in the rank's flat parameter space
  bool gpu_resident = false;    // small enough to stay on the GPU (persistence threshold)
  double fwd_flops = 0;         // per rank per micro-step
  double bwd_flops = 0;         // includes the recompute when activation checkpointing
  int64_t compute_bytes = 0;    // bytes touched by its compute (roofline)
};

struct SubGroup {
  int64_t begin = 0;     // in the rank's flat parameter space (elements)
  int64_t elements = 0;
};

struct ModelPlan {
  std::vector<ParamUnit> units;       // forward order
  std::vector<SubGroup> subgroups;    // per rank (identical on every rank)
  int64_t rank_elements = 0;          // flat parameter partition per rank
  int64_t tokens = 0;                 // per rank per micro-step
  int32_t ranks = 1;
  int64_t gpu_resident_bytes = 0;     // per rank: persistent params, activation checkpoints, workspace
  // Tied embeddings: the unit of the token embedding table, which the head computes with too;
  // -1 when untied. It stays on the GPU (gpu_resident), so that both ends of every pass find it
  // there, and the head's backward sends its part of the table's gradient ahead of the
  // embedding's (TrainingPasses).
  int32_t tied_unit = -1;
};

// The ranks on each node (the first node's: ranks fill nodes of hardware.node.gpu_count in
// order), who share its CPU cores.
inline int32_t RanksPerNode(const Scenario& s, int32_t ranks) { return std::clamp(ranks, 1, std::max(1, s.hardware.node.gpu_count)); }

// How a rank's flat parameter partition is cut into optimizer sub-groups.
enum class SubGroupRule {
  // Pieces of IoAlignedStep(sub_group_size) elements, cut anywhere (inside a unit too).
  kFlat,
  // Whole units of at most sub_group_size elements, a larger unit alone: a unit's state lies in
  // one sub-group. Needed when sub-groups are placed on different devices: a unit's reads and
  // gradient writes go to one device, which must be the one its sub-group's update reads from.
  kUnitsAtMost,
  // DeepSpeed's (_create_fp16_sub_groups in runtime/zero/stage3.py): whole units appended in
  // order, a group closed once it holds at least sub_group_size elements (so a group may be
  // larger than sub_group_size), the last one with the last unit; one group when sub_group_size
  // is at least the partition.
  kDeepSpeed,
};

// persistence_threshold: tensors with fewer elements stay on the GPU (never fetched).
StatusOr<ModelPlan> MakeModelPlan(const Scenario& s, int64_t sub_group_size, int64_t persistence_threshold,
                                  SubGroupRule rule = SubGroupRule::kFlat);

// What a unit's compute task of one phase is charged: its FLOPs and the bytes it touches (the
// roofline's memory side; backward reads and writes twice the forward's). The compute probe
// charges its measurements the same way, so that calibrate fits what the schedule will ask.
inline double ComputeTaskFlops(const ParamUnit& unit, bool forward) { return forward ? unit.fwd_flops : unit.bwd_flops; }
inline int64_t ComputeTaskBytes(const ParamUnit& unit, bool forward) { return unit.compute_bytes * (forward ? 1 : 2); }

// Adds devices, resources, pools, buffers and tasks by name, creating a device or resource on
// first use. Standard names (one node): gpu{r}, host, nvme{d}, remote{d}, net; resources
// gpu{r}.compute, gpu{r}.h2d, gpu{r}.d2h, cpu.r{r}, dp.comm; pools gpu{r}.hbm. On a cluster every
// device but net, and every resource on one, starts with its node (OnNode).
class ScheduleBuilder {
 public:
  ScheduleBuilder(const Scenario& s, std::string policy);

  int32_t Device(const std::string& name, DeviceKind kind);
  int32_t Resource(const std::string& name, const std::string& device, int32_t concurrency = 1);
  int32_t Pool(const std::string& name, const std::string& device, int64_t capacity_bytes);
  int32_t Buffer(const std::string& name, int32_t pool, int64_t size_bytes, bool persistent = false);
  int32_t Tensor(TensorSpec t) { return schedule_.AddTensor(std::move(t)); }
  int32_t Task(TaskSpec t) { return schedule_.AddTask(std::move(t)); }
  TaskSpec& task(int32_t i) { return schedule_.mutable_tasks()[i]; }
  PoolSpec& pool(int32_t i) { return schedule_.mutable_pools()[i]; }
  int32_t task_count() const { return static_cast<int32_t>(schedule_.tasks().size()); }
  void Meta(const std::string& key, const std::string& value) { schedule_.meta.emplace_back(key, value); }

  int32_t GpuCompute(int32_t rank);
  int32_t GpuH2D(int32_t rank);
  int32_t GpuD2H(int32_t rank);
  int32_t Cpu(int32_t rank);
  int32_t Comm();
  int32_t GpuPool(int32_t rank);
  // Rank `rank`'s node (ranks fill the nodes, hardware.node.gpu_count each, in order) and the
  // names of its devices there, each created on first use: models::NodeDeviceName, the bare name
  // on one node (gpu{r}, host, nvme{d}, remote{t}), node{n}.gpu{local}, node{n}.host, ... on a
  // cluster. Resources, pools and buffers keep the rank in their names.
  int32_t NodeOf(int32_t rank) const;
  std::string OnNode(int32_t rank, const std::string& local) const;
  std::string Gpu(int32_t rank);
  std::string Host(int32_t rank);
  std::string Nvme(int32_t rank, int32_t disk);
  std::string Remote(int32_t rank, int32_t tier);

  // Model state as schedule tensors (docs/schedule-format.md "Tensors"). StateLayout takes the
  // plan's partition once; State returns the tensor for elements [begin, begin + elements) of
  // `kind` of rank `rank`, homed
  // on `device`, creating it on first use. Each kind has its own region of a device's store,
  // addressed by flat element index, so overlapping ranges (a unit's gradient written, a
  // sub-group's read back) name the same bytes.
  void StateLayout(const ModelPlan& plan);
  int32_t State(StateKind kind, int32_t rank, int64_t begin, int64_t elements, int32_t device);
  int32_t DeviceOfResource(int32_t resource) const { return schedule_.resources()[resource].device; }
  int64_t tensor_bytes(int32_t tensor) const { return schedule_.tensors()[tensor].size_bytes; }
  // The device of gpu{rank}, created on first use.
  int32_t GpuDevice(int32_t rank) { return schedule_.FindDevice(Gpu(rank)); }
  int32_t HostDevice(int32_t rank) { return schedule_.FindDevice(Host(rank)); }

  // The validated schedule. A buffer or a task's buffers larger than their pool means the
  // scenario's memory budget is too small for the policy (an error naming the budget); any
  // other broken rule is a bug of the generator.
  StatusOr<Schedule> Finish();
  const Scenario& scenario() const { return scenario_; }

 private:
  const Scenario& scenario_;
  std::string policy_;
  Schedule schedule_;
  int64_t state_region_bytes_ = 0;  // per kind and device: ranks x rank stride x 4, 1 MiB-aligned
  int64_t state_rank_elements_ = 0;  // a rank's stride: its elements, rounded up to kIoAlignElements
  // State()'s tensors by what names them, so that asking again builds no name (a fifth of
  // planning the quickstart was State() building names to look up tensors it had made).
  struct StateKey {
    int64_t begin, elements;
    int32_t rank, device;
    StateKind kind;
    bool operator==(const StateKey&) const = default;
  };
  struct StateKeyHash {
    size_t operator()(const StateKey& k) const {
      uint64_t h = static_cast<uint64_t>(k.begin) * 0x9E3779B97F4A7C15ull;
      h ^= static_cast<uint64_t>(k.elements) + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
      h ^= (static_cast<uint64_t>(static_cast<uint32_t>(k.rank)) << 32 | static_cast<uint32_t>(k.device)) + (h << 6) + (h >> 2);
      return static_cast<size_t>(h ^ static_cast<uint64_t>(k.kind));
    }
  };
  std::unordered_map<StateKey, int32_t, StateKeyHash> states_;
  // Per rank, the GPU's name and the resources and pool made for it (kNoIndex until asked):
  // planning asks for them per task, and finding each by its name built two strings a time.
  struct RankDevices {
    std::string gpu;
    int32_t compute = kNoIndex, h2d = kNoIndex, d2h = kNoIndex, cpu = kNoIndex, pool = kNoIndex;
  };
  RankDevices& Of(int32_t rank);
  std::vector<RankDevices> ranks_;
};

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

// Where a unit's reduced gradient partition goes after its backward.
enum class GradientPath {
  kFlushToNvme,  // DeepSpeed: fp32 partition d2h into a pinned staging buffer, async write
  kKeepInHost,   // MLP-Offload, HiTrain, Fuyou: bf16 partition d2h into a persistent host buffer
};
// With gradient accumulation (micro-steps > 1), a tied embedding, or
// PassOptions::grad_partition_buffer, every micro-step's d2h adds its bf16 partition into a
// persistent host buffer of the rank's whole partition (DeepSpeed's grad_partitions_flat_buffer,
// bf16 for a bf16 model), the first micro-step's d2h overwriting it: kKeepInHost's buffer, or for
// kFlushToNvme one of its own ("grad.accum.r{r}", in pool "host.pinned.grad_accum.r{r}").
// kFlushToNvme then flushes once, after the last micro-step: per unit a bf16_to_fp32 convert into
// a pinned staging buffer and the write (DeepSpeed's .float() and swap_out_gradients at the
// accumulation boundary).

// Forward and backward of every micro-step: fetch (FetchUnits), compute per rank, and in
// backward the reduce-scatter and the gradient path.
struct PassOptions {
  FetchOptions fetch;                 // phase, tag and priority_base are set per pass
  GradientPath gradient_path = GradientPath::kFlushToNvme;
  std::vector<int32_t> grad_pool;     // per rank: pinned staging (flush) or the host buffer's pool
  std::vector<int32_t> grad_write_resource;  // per rank (flush)
  PlacedResource grad_write_resource_of;     // multi-disk placement (flush), by unit
  int64_t block_bytes = 0;
  int32_t queue_depth = 0;
  int32_t cpu_threads = 1;            // per rank: threads of the flush's bf16_to_fp32 converts
  // The first all-gather of a pass waits for the last one of the previous pass, so that one
  // pass's gathers never take the memory an earlier pass still needs (needed when gathers are
  // bounded by memory rather than by reads: parameters on the GPU, a GPU prefetch window).
  bool chain_passes = false;
  // kFlushToNvme, per unit (empty = none): the fp32 gradient partition stays in host memory,
  // copied by its d2h into host_grad_buffer[rank], the rank's persistent flat fp32 buffer, and
  // never written (DeepSpeed keeps a gradient below its swap minimum, and every gradient of a
  // sub-group whose states it does not swap, in memory).
  std::vector<bool> grad_in_host;
  std::vector<int32_t> host_grad_buffer;  // per rank
  // Gradients reduced in buckets (DeepSpeed's reduce_bucket_size, elements): a unit's gradient
  // joins the bucket once its layer's backward has run; when it would take the bucket past this
  // size, the bucket's reduce-scatters, d2h copies and writes are issued first (after the
  // backward computed so far), and whatever is left is issued after the pass's last layer
  // (DeepSpeed's independent_gradient_partition_epilogue). The layers' GPU gradients stay
  // allocated until their bucket is issued. 0: each layer's gradients are issued after its own
  // backward.
  int64_t reduce_bucket_elements = 0;
  // kFlushToNvme: the gradients pass through the rank's persistent bf16 partition buffer (above)
  // at one micro-step too. DeepSpeed's stage 3 allocates grad_partitions_flat_buffer whenever
  // the optimizer is offloaded and partition_grads copies every reduced partition into it
  // before converting it to fp32 for swap_out_gradients (_offload_grad_partition_at_boundary),
  // so it holds 2 bytes per element of host memory for good.
  bool grad_partition_buffer = false;
  // With grad_partition_buffer: the epilogue of each reduce bucket in DeepSpeed's order
  // (partition_grads, called by a gradient hook on one thread). All of the bucket's
  // reduce-scatters first; then, unit by unit, one after the other, the d2h into the partition
  // buffer (and, with device_memory_is_host, the widening to fp32 into a buffer of its own);
  // only after the last of them the swap-out, unit by unit: the fp32 gradient into the pinned
  // staging, then its write. The next bucket's reduce-scatter, and the rank's next compute (the
  // backward's, or the next micro-step's forward), wait for this epilogue's last task.
  bool deepspeed_epilogue = false;
  // Where DeepSpeed's widened fp32 gradients (`.to(fp32)` of the partition, device memory) are:
  // on an emulated GPU (hardware gpu.shares_host_cores) host memory, and the widening and the
  // swap-out's copy are CPU work, which the loop's `bf16_to_fp32` into pool host.grad32.r{r} (as
  // large as the largest bucket's partition) and the swap-out's `copy` are. On a GPU they are GPU
  // memory and work, for which the plan has no op: the swap-out widens each partition from the
  // partition buffer straight into the staging (in place of DeepSpeed's 4-byte d2h of it).
  bool device_memory_is_host = false;
  // DeepSpeed's stage3_max_live_parameters (elements, 0 = no limit): a unit is gathered (its
  // GPU admission: the h2d, or the all-gather of a partition kept on the GPU) only once the
  // units gathered before it, in fetch order over the iteration's passes and not yet freed, and
  // it hold at most this many elements together: the admission waits for the compute that frees
  // enough of them. The units of the layer being computed are exempt (DeepSpeed fetches the
  // current module whatever the count, and limits only its prefetch).
  int64_t max_live_elements = 0;
  // Per unit (empty = none): the forward keeps the unit gathered for the backward, whose compute
  // frees it, and the backward does not fetch it again (zero-infinity: DeepSpeed's reuse
  // distance). Such units count as live parameters (max_live_elements) all the while.
  // GPU-resident units are never fetched and ignore it.
  std::vector<bool> kept_for_backward;
};

struct PassResult {
  std::vector<int32_t> reads;                      // every parameter read, all passes
  std::vector<std::pair<int32_t, int32_t>> read_rank_unit;  // per read: (rank, unit)
  size_t first_forward_reads = 0;                  // reads[0 .. this) belong to the first forward pass
  std::vector<int32_t> gathers;                    // every all-gather, all passes
  std::vector<int32_t> last_compute;               // per rank
  std::vector<std::vector<int32_t>> grad_copies;   // per rank: every gradient d2h
  std::vector<std::vector<int32_t>> grad_writes;   // per rank: every gradient write (flush)
  // [rank][unit]: the task after which the unit's gradient of the last micro-step is final in
  // host memory (the d2h) or on disk (the write); kNoIndex for GPU-resident units.
  std::vector<std::vector<int32_t>> grad_ready;
  std::vector<int32_t> host_grad_buffer;           // per rank (kKeepInHost), persistent
  // Computes of GPU-resident units: their parameters are refreshed by the previous iteration's
  // update, so each must carry a dep on it (as parameter reads do).
  std::vector<int32_t> resident_computes;
  // The h2d copies of partitions kept in host memory (FetchOptions::in_host), which the previous
  // iteration's update rewrites in place: each must carry a dep on it too.
  std::vector<int32_t> host_fetches;
};

PassResult TrainingPasses(ScheduleBuilder& b, const ModelPlan& plan, const PassOptions& o);

// The overflow check and global gradient norm over each rank's gradients after `deps[r]`, then
// one all-reduce of the norm; returns the all-reduce. `host_bytes_per_element` is what the check
// reads per gradient element (4 for fp32 gradients).
// `temporaries` (per rank, optional): a buffer the check allocates and frees (DeepSpeed's
// unfused isinf/isnan over the flat gradient creates full-size temporaries).
int32_t GradientNorm(ScheduleBuilder& b, const ModelPlan& plan, const std::vector<std::vector<int32_t>>& deps,
                     int32_t threads, int64_t host_bytes_per_element = 4,
                     const std::vector<int32_t>& temporaries = {});

// A pinned pool as PyTorch's caching host allocator provides it when `rounding`: the block is
// rounded up to the next power of two. Adds the pool with the rounded capacity and, when that
// is larger, a persistent pad buffer of the difference, so that the pool's peak counts the
// memory really pinned while the usable capacity stays `capacity_bytes`.
int32_t PinnedPool(ScheduleBuilder& b, int32_t rank, const std::string& name, int64_t capacity_bytes, bool rounding);

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
  bool write_cached = false;              // cached sub-groups are still written back
  int32_t cache_pool = kNoIndex;          // where cached states live (persistent buffers)
  int32_t opt_pool = kNoIndex;            // pinned buffers of states and gradients in flight
  bool grads_on_nvme = true;              // read.grad from the sub-group's read resource
  int32_t host_grad_buffer = kNoIndex;    // else: convert.grad bf16 -> fp32 from this buffer
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

// The sub-groups a unit's partition overlaps (indices into plan.subgroups).
std::vector<int32_t> SubGroupsOfUnit(const ModelPlan& plan, int32_t unit);

}  // namespace tierflow::policies
