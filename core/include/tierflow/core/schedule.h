// The schedule: a program for one training iteration, executed N times by the dispatcher in the
// simulator and in the real executor alike. docs/schedule-format.md documents the file.
//
// A schedule names devices, resources (queues with a concurrency limit), pools (memory budgets),
// buffers (allocations in a pool), tensors (pieces of model state with a home) and tasks. A task
// runs on one resource; it starts when its deps in the same iteration and its carried deps in
// earlier iterations have completed, its resource has a free slot and its allocations fit in
// their pools. Everything a policy decides is visible here as ops, edges, resources and pools.
//
// Cross references are indices into the vectors below; the file spells them as names. Build a
// schedule with the Add* methods (which keep the name indices current), then call Validate().
//
// Thread safety: a Schedule is a value; concurrent reads are safe, writes need exclusion.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tierflow/core/inline_list.h"
#include "tierflow/core/name_index.h"
#include "tierflow/core/ops.h"
#include "tierflow/core/status.h"

namespace tierflow {

inline constexpr const char* kScheduleFormat = "tierflow.schedule/1";
inline constexpr int32_t kNoIndex = NameIndex::kAbsent;

struct DeviceSpec {
  std::string name;  // "gpu0", "host", "nvme0", "remote0", "net"
  DeviceKind kind = DeviceKind::kHost;
  bool operator==(const DeviceSpec&) const = default;
};

struct ResourceSpec {
  std::string name;     // "gpu0.compute", "nvme0.read", "cpu.optimizer", "dp.comm"
  int32_t device = kNoIndex;
  int32_t concurrency = 1;  // instances in flight at once, >= 1
  bool operator==(const ResourceSpec&) const = default;
};

struct PoolSpec {
  std::string name;  // "gpu0.hbm", "host.pinned"
  int32_t device = kNoIndex;
  int64_t capacity_bytes = 0;
  bool operator==(const PoolSpec&) const = default;
};

struct BufferSpec {
  std::string name;
  int32_t pool = kNoIndex;
  int64_t size_bytes = 0;
  // A persistent buffer is held for the whole run (allocated before the first iteration, never
  // freed) and no task allocates or frees it. Any other buffer is allocated by one task and freed
  // by one task in every iteration.
  bool persistent = false;
  bool operator==(const BufferSpec&) const = default;
};

struct TensorSpec {
  std::string name;    // "layers.3.param16.r0", "opt.sg5.m.r1"
  StateKind kind = StateKind::kParam16;  // its bytes per element: StateKindBytes
  std::string dtype;   // "bf16", "fp16", "fp32"
  InlineList<int64_t, 2> shape;
  int32_t rank = 0;    // data-parallel shard it belongs to
  int32_t device = kNoIndex;  // home device
  int64_t offset_bytes = 0;   // offset in that device's store
  int64_t size_bytes = 0;
  // First element of the range this tensor covers in the rank's flat state of its kind
  // (docs/schedule-format.md "Tensors": what the real executor moves and computes on).
  int64_t element_offset = 0;
  bool operator==(const TensorSpec&) const = default;
};

struct CarriedDep {
  int32_t task = kNoIndex;
  int32_t distance = 1;  // iterations back, >= 1
  bool operator==(const CarriedDep&) const = default;
};

// DeepSpeed's aio defaults, what a read or write task that leaves block_bytes or queue_depth
// at 0 gets — in sim and in the real executor alike.
inline constexpr int64_t kDefaultBlockBytes = 1 << 20;
inline constexpr int32_t kDefaultQueueDepth = 8;

inline constexpr int32_t kEveryRank = -1;

struct TaskSpec {
  std::string id;
  Op op = Op::kBarrier;
  int32_t resource = kNoIndex;  // kNoIndex only for alloc, free and barrier
  Kernel kernel = Kernel::kNone; // compute/optimizer/convert: the named step (KernelFitsOp)
  int64_t bytes = 0;            // bytes moved (I/O, copies, collectives) or touched (compute)
  double flops = 0;
  int64_t block_bytes = 0;      // I/O request size, 0 = kDefaultBlockBytes (IoBlockBytes)
  int32_t queue_depth = 0;      // I/O requests in flight for this task, 0 = kDefaultQueueDepth
  int32_t ranks = 0;            // participants of a collective; threads of an optimizer task
  // The data-parallel rank that runs it; kEveryRank for a collective or a barrier (each rank
  // takes part) and for tasks of a schedule that does not say (one rank). A task of a rank names
  // only tensors of that rank. `tierflow run` over several ranks executes on rank r the tasks of
  // rank r and every collective (docs/schedule-format.md "Ranks").
  int32_t rank = kEveryRank;
  // Indices into the schedule's tables, up to four of each kept in place (IndexList, inline_list.h).
  IndexList tensors;  // model state it reads or writes
  IndexList allocs;   // buffers it allocates when it starts
  IndexList uses;     // buffers it reads or writes
  IndexList frees;    // buffers it frees when it completes
  IndexList deps;     // tasks of the same iteration that must complete first
  InlineList<CarriedDep, 2> carried;  // deps on tasks of earlier iterations
  int32_t priority = 0;         // lower runs first among ready instances on one resource
  Phase phase = Phase::kOther;
  int32_t layer = -1;
  // Which micro-step of the iteration it belongs to (gradient accumulation: every micro-step
  // runs forward and backward on its own batch; 0 .. micro_steps - 1). Schedule::MicroSteps.
  int32_t micro_step = 0;
  bool operator==(const TaskSpec&) const = default;
};

// A read or write task's request size and requests in flight, defaults applied.
inline int64_t IoBlockBytes(const TaskSpec& t) { return t.block_bytes > 0 ? t.block_bytes : kDefaultBlockBytes; }
inline int32_t IoQueueDepth(const TaskSpec& t) { return t.queue_depth > 0 ? t.queue_depth : kDefaultQueueDepth; }

class Schedule {
 public:
  std::string name;
  // At most this many iterations have instances materialised at once: iteration t + window
  // starts only after iteration t has completed entirely. Part of the contract, so that sim
  // and real overlap iterations the same way.
  int32_t iteration_window = 2;
  // Free-form provenance (policy, model, hardware, knob values), kept in order.
  std::vector<std::pair<std::string, std::string>> meta;
  // What the schedule trains, on what, and how (docs/schedule-format.md "Model, hardware and
  // training"): the planned scenario's model, hardware and training as JSON objects, kept as
  // their text (empty when absent). models/ reads them (LlmFromYamlText, HardwareFromYamlText,
  // TrainingFromYaml); core checks only that each is an object.
  struct Sections {
    std::string model, hardware, training;
    // Equal as JSON values (a file read back holds the same objects, not the same spacing).
    bool operator==(const Sections& o) const;
  };
  Sections sections;

  const std::vector<DeviceSpec>& devices() const { return devices_; }
  const std::vector<ResourceSpec>& resources() const { return resources_; }
  const std::vector<PoolSpec>& pools() const { return pools_; }
  const std::vector<BufferSpec>& buffers() const { return buffers_; }
  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  const std::vector<TaskSpec>& tasks() const { return tasks_; }
  std::vector<TaskSpec>& mutable_tasks() { return tasks_; }
  std::vector<PoolSpec>& mutable_pools() { return pools_; }

  // Each Add* returns the new index. A duplicate name is a bug of the caller (TF_CHECK, at the
  // Add*, or at IndexNames for names deferred); files with duplicates are rejected by the reader
  // before they get here.
  int32_t AddDevice(DeviceSpec d);
  int32_t AddResource(ResourceSpec r);
  int32_t AddPool(PoolSpec p);
  int32_t AddBuffer(BufferSpec b);
  int32_t AddTensor(TensorSpec t);
  int32_t AddTask(TaskSpec t);

  // Indexing each name as it is added costs a cache miss or two a name once the tables no longer
  // sit in cache, which a planner's passes see to between two adds (a tenth of planning the
  // quickstart). A builder that looks no task, buffer or tensor up by name until it has finished
  // defers their indexes: after DeferNameIndexes(), AddBuffer, AddTensor and AddTask only append,
  // and IndexNames() indexes what they appended in one batch, the tables in cache, checking the
  // names unique as each Add* does. FindBuffer, FindTensor or FindTask in between is a bug of the
  // caller (TF_CHECK). Devices, resources and pools are always indexed as they are added.
  void DeferNameIndexes() { names_deferred_ = true; }
  void IndexNames();

  // Room for this many tasks, buffers and tensors without growing their vectors (a builder that
  // knows about how many it will add: each growth moves every spec made so far).
  void Reserve(size_t tasks, size_t buffers, size_t tensors);

  // kNoIndex when absent.
  int32_t FindDevice(std::string_view name) const { return device_index_.Find(name, devices_, NameOf<DeviceSpec>); }
  int32_t FindResource(std::string_view name) const { return resource_index_.Find(name, resources_, NameOf<ResourceSpec>); }
  int32_t FindPool(std::string_view name) const { return pool_index_.Find(name, pools_, NameOf<PoolSpec>); }
  int32_t FindBuffer(std::string_view name) const {
    TF_CHECK(!names_deferred_);
    return buffer_index_.Find(name, buffers_, NameOf<BufferSpec>);
  }
  int32_t FindTensor(std::string_view name) const {
    TF_CHECK(!names_deferred_);
    return tensor_index_.Find(name, tensors_, NameOf<TensorSpec>);
  }
  int32_t FindTask(std::string_view name) const {
    TF_CHECK(!names_deferred_);
    return task_index_.Find(name, tasks_, IdOf);
  }

  // Checks every rule of docs/schedule-format.md: references in range, sizes and counts in
  // range, no cycle among same-iteration deps (so none in the unrolled graph either), every
  // buffer allocated once before any use and freed once after every use, buffers fitting their
  // pools. The first broken rule is returned, naming the task (or object) and the rule.
  Status Validate() const;

  // Same-iteration topological order of tasks (stable: ties keep schedule order). Requires a
  // valid schedule.
  std::vector<int32_t> TopologicalOrder() const;

  // Micro-steps per iteration: 1 + the largest TaskSpec::micro_step (1 for an empty schedule).
  int32_t MicroSteps() const;

  bool operator==(const Schedule& o) const;

 private:
  template <typename Spec>
  static const std::string& NameOf(const Spec& s) { return s.name; }
  static const std::string& IdOf(const TaskSpec& t) { return t.id; }
  std::vector<DeviceSpec> devices_;
  std::vector<ResourceSpec> resources_;
  std::vector<PoolSpec> pools_;
  std::vector<BufferSpec> buffers_;
  std::vector<TensorSpec> tensors_;
  std::vector<TaskSpec> tasks_;
  NameIndex device_index_, resource_index_, pool_index_, buffer_index_, tensor_index_, task_index_;
  bool names_deferred_ = false;
};

// The file format (JSON, "format": "tierflow.schedule/1"). Writing is deterministic and
// reading then writing reproduces the file byte for byte.
std::string ScheduleToJson(const Schedule& schedule);
// Parses and validates. Errors name the object ("task 'bwd.L3'") and the rule or key.
StatusOr<Schedule> ScheduleFromJson(const std::string& text);
StatusOr<Schedule> ReadScheduleFile(const std::string& path);
Status WriteScheduleFile(const std::string& path, const Schedule& schedule);

}  // namespace tierflow
