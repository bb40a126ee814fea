// What each op asks of a task, checked when a schedule is loaded (CheckRunnable), so that a
// schedule the executor cannot run is refused before the first byte moves, with the task and the
// rule named, instead of stopping mid-run. The op files (io_task.cc, ...) keep their own checks
// of what only the run can know: versions, and what a buffer holds at that moment.
#include "run.h"

namespace tierflow::real::exec {
namespace {

DeviceKind DeviceOf(const Schedule& s, int32_t device) { return s.devices()[static_cast<size_t>(device)].kind; }
DeviceKind BufferDevice(const Schedule& s, int32_t buffer) {
  return DeviceOf(s, s.pools()[static_cast<size_t>(s.buffers()[static_cast<size_t>(buffer)].pool)].device);
}
bool IsStorage(DeviceKind k) { return k == DeviceKind::kNvme || k == DeviceKind::kRemote; }

}  // namespace

Status CheckTaskContracts(const Schedule& s) {
  const int32_t micro_steps = s.MicroSteps();
  for (const TaskSpec& t : s.tasks()) {
    const std::string who = "task '" + t.id + "' (" + std::string(OpName(t.op)) + ")";
    auto tensor = [&](int32_t i) -> const TensorSpec& { return s.tensors()[static_cast<size_t>(i)]; };
    auto names = [&](const TensorSpec& ts) { return "'" + ts.name + "' (" + std::string(StateKindName(ts.kind)) + ")"; };
    if ((t.op == Op::kCompute || t.op == Op::kOptimizer || t.op == Op::kConvert) && t.kernel == Kernel::kNone) {
      return InvalidArgument(who + ": names no kernel (" + KernelsOf(t.op) + "); tierflow run needs one to know what it computes");
    }
    // Disk I/O and CPU work address host memory only: a buffer of a GPU pool is gpu0 memory.
    if (t.op == Op::kRead || t.op == Op::kWrite || t.op == Op::kOptimizer || t.op == Op::kConvert) {
      for (const auto* list : {&t.allocs, &t.uses}) {
        for (int32_t b : *list) {
          if (BufferDevice(s, b) != DeviceKind::kHost) {
            return InvalidArgument(who + ": buffer '" + s.buffers()[static_cast<size_t>(b)].name + "' is not in host memory, and a " +
                                   std::string(OpName(t.op)) + " task works on host memory");
          }
        }
      }
    }
    switch (t.op) {
      case Op::kRead:
      case Op::kWrite:
        if (t.tensors.empty()) break;
        if (t.allocs.empty() && t.uses.empty()) return InvalidArgument(who + ": moves tensors but names no buffer");
        for (int32_t i : t.tensors) {
          if (!IsStorage(DeviceOf(s, tensor(i).device))) {
            return InvalidArgument(who + ": " + names(tensor(i)) + " lives on '" + s.devices()[static_cast<size_t>(tensor(i).device)].name +
                                   "', not a storage device; a " + std::string(OpName(t.op)) + " moves state between a disk and host memory");
          }
        }
        break;
      case Op::kH2D:
        for (int32_t i : t.tensors) {
          if (tensor(i).kind != StateKind::kParam16) return InvalidArgument(who + ": copies " + names(tensor(i)) + " to the GPU; only param16 goes there");
        }
        break;
      case Op::kD2H:
        for (int32_t i : t.tensors) {
          if (tensor(i).kind != StateKind::kGrad && tensor(i).kind != StateKind::kGrad16) {
            return InvalidArgument(who + ": copies " + names(tensor(i)) + " off the GPU; only gradients (grad, grad16) leave it");
          }
          if (micro_steps > 1 && tensor(i).kind != StateKind::kGrad16) {
            return InvalidArgument(who + ": copies " + names(tensor(i)) + " off the GPU, but with " + std::to_string(micro_steps) +
                                   " micro-steps gradients accumulate in host memory as grad16 (docs/schedule-format.md)");
          }
        }
        break;
      case Op::kOptimizer: {
        int kinds = 0;
        for (int32_t i : t.tensors) {
          const StateKind k = tensor(i).kind;
          if (k == StateKind::kMaster || k == StateKind::kAdamM || k == StateKind::kAdamV) kinds |= 1 << static_cast<int>(k);
        }
        if (kinds != (1 << KindOf(StateKind::kMaster) | 1 << KindOf(StateKind::kAdamM) | 1 << KindOf(StateKind::kAdamV))) {
          return InvalidArgument(who + ": adam names its sub-group's master, adam_m and adam_v tensors, each once at least");
        }
        break;
      }
      case Op::kConvert:
        if (t.kernel == Kernel::kFp32ToBf16) {
          // Parameters kept in host memory are converted in place, at their home; the others
          // into the buffer it allocates.
          for (int32_t i : t.tensors) {
            if (tensor(i).kind != StateKind::kParam16) return InvalidArgument(who + ": fp32_to_bf16 names " + names(tensor(i)) + "; it writes param16 only");
            if (DeviceOf(s, tensor(i).device) != DeviceKind::kHost && t.allocs.empty()) {
              return InvalidArgument(who + ": fp32_to_bf16 allocates no output buffer for " + names(tensor(i)) + ", which is not kept in host memory");
            }
          }
        }
        if (t.kernel == Kernel::kBf16ToFp32 && (t.tensors.size() != 1 || tensor(t.tensors[0]).kind != StateKind::kGrad16)) {
          return InvalidArgument(who + ": bf16_to_fp32 names one grad16 tensor, the sub-group's gradients it widens");
        }
        if (t.kernel == Kernel::kCopy && (t.tensors.size() != 1 || t.allocs.size() != 1)) {
          return InvalidArgument(who + ": copy names one tensor and allocates one buffer, the one it copies the tensor into");
        }
        break;
      default: break;
    }
  }
  return Status::Ok();
}

}  // namespace tierflow::real::exec
