// The schedule builder (blocks.h): devices, resources, pools, buffers and tasks added by their
// standard names, and the state tensors of each rank's flat element space.
#pragma once

#include <utility>
#include <vector>

#include "model_plan.h"
#include "tierflow/core/name_index.h"

namespace tierflow::policies {

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
  int32_t Buffer(std::string name, int32_t pool, int64_t size_bytes, bool persistent = false);
  int32_t Tensor(TensorSpec t) { return schedule_.AddTensor(std::move(t)); }
  int32_t Task(TaskSpec t) { return schedule_.AddTask(std::move(t)); }
  TaskSpec& task(int32_t i) { return schedule_.mutable_tasks()[i]; }
  PoolSpec& pool(int32_t i) { return schedule_.mutable_pools()[i]; }
  // The bytes of the persistent buffers in pool `pool` so far.
  int64_t PersistentBytes(int32_t pool) const {
    int64_t sum = 0;
    for (const BufferSpec& b : schedule_.buffers()) sum += b.persistent && b.pool == pool ? b.size_bytes : 0;
    return sum;
  }
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
  // plan's partition (each call the same plan); State returns the tensor for elements
  // [begin, begin + elements) of `kind` of rank `rank`, homed on `device`, creating it on first use. Each kind has its own region of a device's store,
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
  // planning the quickstart was State() building names to look up tensors it had made): each key
  // and its tensor, found through a NameIndex of the keys (a std::unordered_map, with a node per
  // entry and a division by a prime per lookup, was 7 % of planning the quickstart).
  struct StateKey {
    int64_t begin, elements;
    int32_t rank, device;
    StateKind kind;
    bool operator==(const StateKey&) const = default;
  };
  // The tensor of `key`, kNoIndex where it has none yet (the caller makes it and stores it there).
  int32_t& StateEntry(const StateKey& key);
  std::vector<std::pair<StateKey, int32_t>> states_;  // each key and its tensor
  NameIndex state_index_;                             // of states_ by key
  // Per rank, the GPU's name and the resources and pool made for it (kNoIndex until asked):
  // planning asks for them per task, and finding each by its name built two strings a time.
  struct RankDevices {
    std::string gpu;
    int32_t compute = kNoIndex, h2d = kNoIndex, d2h = kNoIndex, cpu = kNoIndex, pool = kNoIndex;
  };
  RankDevices& Of(int32_t rank);
  std::vector<RankDevices> ranks_;
};

// A pinned pool as PyTorch's caching host allocator provides it when `rounding`: the block is
// rounded up to the next power of two. Adds the pool with the rounded capacity and, when that
// is larger, a persistent pad buffer of the difference, so that the pool's peak counts the
// memory really pinned while the usable capacity stays `capacity_bytes`.
int32_t PinnedPool(ScheduleBuilder& b, int32_t rank, const std::string& name, int64_t capacity_bytes, bool rounding);

}  // namespace tierflow::policies
