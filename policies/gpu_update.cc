// The update on the GPU (gpu_update.h).
#include "gpu_update.h"

#include <algorithm>

#include "tierflow/core/units.h"

namespace tierflow::policies {

GpuUpdateTasks GpuUpdate(ScheduleBuilder& b, const GpuUpdateSpec& u) {
  GpuUpdateTasks out;
  const int64_t grad_bytes = u.n * (u.grad16 ? 2 : 4);
  const int32_t grad_up = b.Buffer("gradgpu" + u.suffix, u.gpu_pool, grad_bytes);
  TaskSpec h2d;
  h2d.id = "h2d.grad" + u.suffix;
  h2d.op = Op::kH2D;
  h2d.rank = u.rank;
  h2d.resource = b.GpuH2D(u.rank);
  h2d.bytes = grad_bytes;
  h2d.tensors = {b.State(u.grad16 ? StateKind::kGrad16 : StateKind::kGrad, u.rank, u.first, u.n, b.HostDevice(u.rank))};
  h2d.allocs = {grad_up};
  h2d.uses = {u.grad};
  if (!u.grad_persistent) h2d.frees = {u.grad};
  h2d.deps = u.grad_deps;
  h2d.phase = Phase::kStep;
  const int32_t copy = out.copy = b.Task(std::move(h2d));
  const int32_t rounded = u.homeward.empty() ? kNoIndex : b.Buffer("p16gpu" + u.suffix, u.gpu_pool, u.n * 2);
  TaskSpec adam;
  adam.id = "adam" + u.suffix;
  adam.op = Op::kOptimizer;
  adam.kernel = Kernel::kAdam;
  adam.rank = u.rank;
  adam.resource = b.GpuCompute(u.rank);
  adam.bytes = u.n * 4;
  if (rounded != kNoIndex) adam.allocs = {rounded};
  adam.uses = {u.states, grad_up};
  adam.frees = {grad_up};
  adam.tensors = u.home_states;
  adam.tensors.insert(adam.tensors.end(), u.in_place.begin(), u.in_place.end());
  adam.deps = {copy};
  adam.phase = Phase::kStep;
  out.adam = out.done = b.Task(std::move(adam));
  if (u.homeward.empty()) return out;
  int64_t bytes = 0;
  for (int32_t t : u.homeward) bytes += b.tensor_bytes(t);
  const int32_t staged = b.Buffer("p16" + u.suffix, u.param_pool, bytes);  // exact size
  TaskSpec d2h;
  d2h.id = "d2h.p16" + u.suffix;
  d2h.op = Op::kD2H;
  d2h.rank = u.rank;
  d2h.resource = b.GpuD2H(u.rank);
  d2h.bytes = bytes;
  d2h.tensors = u.homeward;
  d2h.allocs = {staged};
  d2h.uses = {rounded};
  d2h.frees = {rounded};
  d2h.deps = {out.adam};
  d2h.phase = Phase::kStep;
  const int32_t down = b.Task(std::move(d2h));
  TaskSpec pw;
  pw.id = "write.p16" + u.suffix;
  pw.op = Op::kWrite;
  pw.rank = u.rank;
  pw.resource = u.param_write_resource;
  pw.bytes = bytes;
  pw.tensors = u.homeward;
  pw.block_bytes = u.block_bytes;
  pw.queue_depth = u.queue_depth;
  pw.uses = {staged};
  pw.frees = {staged};
  pw.deps = {down};
  pw.phase = Phase::kStep;
  pw.priority = u.write_priority;
  out.done = b.Task(std::move(pw));
  return out;
}

Status CheckStatesFitGpu(ScheduleBuilder& b, const ModelPlan& plan, const std::vector<bool>& on_gpu, bool params_off_gpu, const std::string& knob) {
  int64_t states = 0, largest = 0, count = 0;
  for (size_t g = 0; g < on_gpu.size(); ++g) {
    if (!on_gpu[g]) continue;
    ++count;
    states += plan.subgroups[g].elements * 12;
    largest = std::max(largest, plan.subgroups[g].elements * (params_off_gpu ? 6 : 4));
  }
  if (count == 0) return Status::Ok();
  for (int32_t r = 0; r < plan.ranks; ++r) {
    const int32_t pool = b.GpuPool(r);
    const int64_t others = b.PersistentBytes(pool);
    const int64_t capacity = b.pool(pool).capacity_bytes;
    if (states + largest + others <= capacity) continue;
    return InvalidArgument(knob + ": the optimizer states of " + std::to_string(count) + " sub-groups on the GPU take " + FormatBytes(static_cast<double>(states)) +
                           " (12 bytes per element) and the largest one's gradient" + (params_off_gpu ? " and rounded parameters " : " ") +
                           FormatBytes(static_cast<double>(largest)) + ", beside " +
                           FormatBytes(static_cast<double>(others)) + " of parameters kept there; pool '" + b.pool(pool).name + "' holds " +
                           FormatBytes(static_cast<double>(capacity)) + " (hardware.node.gpu.hbm): " +
                           FormatBytes(static_cast<double>(states + largest + others - capacity)) + " short");
  }
  return Status::Ok();
}

}  // namespace tierflow::policies
