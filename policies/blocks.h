// Building blocks shared by the policy generators: what the model and training setup imply
// (parameter units, per-rank partitions, optimizer sub-groups, FLOPs), a schedule builder with
// the standard device, resource and pool names, and the three pipelines every offloading system
// has — fetch a parameter unit, flush its gradient, sweep the optimizer over sub-groups — with
// the options in which the systems differ.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tierflow/core/schedule.h"
#include "tierflow/policies/scenario.h"

namespace tierflow::policies {

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
};

// persistence_threshold: tensors with fewer elements stay on the GPU (never fetched).
StatusOr<ModelPlan> MakeModelPlan(const Scenario& s, int64_t sub_group_size, int64_t persistence_threshold);

// Adds devices, resources, pools, buffers and tasks by name, creating a device or resource on
// first use. Standard names: gpu{r}, host, nvme{d}, remote{d}, net; resources gpu{r}.compute,
// gpu{r}.h2d, gpu{r}.d2h, cpu.r{r}, dp.comm; pools gpu{r}.hbm.
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
  void Meta(const std::string& key, const std::string& value) { schedule_.meta.emplace_back(key, value); }

  int32_t GpuCompute(int32_t rank);
  int32_t GpuH2D(int32_t rank);
  int32_t GpuD2H(int32_t rank);
  int32_t Cpu(int32_t rank);
  int32_t Comm();
  int32_t GpuPool(int32_t rank);
  static std::string Nvme(int32_t disk) { return "nvme" + std::to_string(disk); }

  Schedule Finish() { return std::move(schedule_); }
  const Scenario& scenario() const { return scenario_; }

 private:
  const Scenario& scenario_;
  Schedule schedule_;
};

// How a pass (forward or backward of one micro-step) fetches its parameter units.
struct FetchOptions {
  Phase phase = Phase::kForward;
  std::string tag;                    // unique per pass: "f0", "b0", ...
  std::vector<int32_t> slot_pool;     // per rank: pinned pool the partitions are read into
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
};

struct FetchedUnit {
  int32_t unit = 0;
  int32_t allgather = kNoIndex;            // the task after which the full unit is on every GPU
  std::vector<int32_t> gathered_buffer;    // per rank, in the GPU pool; the compute frees it
  std::vector<int32_t> reads;              // per rank (kNoIndex when resident)
};

// Emits read -> h2d per rank and one all-gather per unit, in `order` (indices into plan.units),
// skipping GPU-resident units. The all-gather frees the pinned slots and allocates the gathered
// buffers; successive all-gathers are issued in order (DeepSpeed's fetch coordinator).
std::vector<FetchedUnit> FetchUnits(ScheduleBuilder& b, const ModelPlan& plan, const std::vector<int32_t>& order,
                                    const FetchOptions& o);

}  // namespace tierflow::policies
