// The update of a sub-group whose optimizer states live on the GPU (blocks.h;
// docs/schedule-format.md "Where a sub-group is updated"): its gradient copied up from host
// memory (the bf16 gradients as the backward left them, which the update widens, or fp32 where
// the gradients are kept in fp32), Adam on the GPU's compute resource over the states kept
// there, its rounded bf16 parameters refreshed in place where they live on the GPU and sent to
// their disk where they do not (a d2h into an exact-size pinned buffer, then the write); and
// whether a GPU pool holds such states.
#pragma once

#include "schedule_builder.h"

namespace tierflow::policies {

struct GpuUpdateSpec {
  int32_t rank = 0;
  std::string suffix;                    // of the task and buffer names: ".sg{g}.r{r}"
  int64_t first = 0, n = 0;              // the sub-group's elements in the rank's flat space
  int32_t states = kNoIndex;             // the persistent GPU buffer of its states
  std::vector<int32_t> home_states;      // master, adam_m, adam_v homed on the GPU
  int32_t grad = kNoIndex;               // the host buffer holding its gradient
  bool grad16 = false;                   // that buffer holds grad16 (2 bytes per element), else grad (fp32)
  bool grad_persistent = false;          // that buffer is persistent: the copy up does not free it
  std::vector<int32_t> grad_deps;        // what the copy up waits for: the gradient is there
  std::vector<int32_t> in_place;         // param16 homed on the GPU, refreshed in place
  std::vector<int32_t> homeward;         // param16 homed on a disk, sent there
  int32_t gpu_pool = kNoIndex;           // the gradient's and the rounded parameters' GPU buffers
  int32_t param_pool = kNoIndex;         // the pinned buffer on their way home
  int32_t param_write_resource = kNoIndex;
  int64_t block_bytes = 0;
  int32_t queue_depth = 0;
  int32_t write_priority = 0;
};

struct GpuUpdateTasks {
  int32_t copy = kNoIndex;  // the gradient's copy up: after it the gradient is on the GPU
  int32_t adam = kNoIndex;  // the update
  int32_t done = kNoIndex;  // after it the parameters are current at their home: the write, else the update
};

GpuUpdateTasks GpuUpdate(ScheduleBuilder& b, const GpuUpdateSpec& u);

// The sub-groups `on_gpu` (SweepOptions::on_gpu) fit each rank's GPU pool: their states (12 bytes
// per element, persistent) and the largest one's gradient, counted as fp32, the most it takes
// (and, `params_off_gpu`, its rounded bf16 parameters) beside the pool's other persistent buffers
// (the parameters kept there).
// Else InvalidArgument naming `knob`, the pool and the bytes short. Call after the pool's other
// persistent buffers are made.
Status CheckStatesFitGpu(ScheduleBuilder& b, const ModelPlan& plan, const std::vector<bool>& on_gpu, bool params_off_gpu,
                         const std::string& knob);

}  // namespace tierflow::policies
