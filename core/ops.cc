#include "tierflow/core/ops.h"

#include <array>
#include <string>

namespace tierflow {
namespace {
constexpr std::array<std::string_view, kOpCount> kOpNames = {
    "read", "write", "h2d", "d2h", "compute", "allgather", "reducescatter",
    "allreduce", "optimizer", "convert", "alloc", "free", "barrier"};
constexpr std::array<std::string_view, kPhaseCount> kPhaseNames = {"forward", "backward", "step",
                                                                    "other"};
constexpr std::array<std::string_view, 5> kDeviceKindNames = {"gpu", "host", "nvme", "remote",
                                                               "network"};

constexpr std::array<std::string_view, kStateKindCount> kStateKindNames = {"param16", "grad16", "grad",
                                                                          "master",  "adam_m", "adam_v"};
constexpr std::array<std::string_view, kKernelCount> kKernelNames = {
    "", "fwd", "bwd", "adam", "overflow_check_and_norm", "fp32_to_bf16", "bf16_to_fp32", "copy"};

template <typename E, size_t N>
std::optional<E> Lookup(const std::array<std::string_view, N>& names, std::string_view name) {
  for (size_t i = 0; i < N; ++i) {
    if (names[i] == name) return static_cast<E>(i);
  }
  return std::nullopt;
}
}  // namespace

std::string_view OpName(Op op) { return kOpNames[static_cast<size_t>(op)]; }
std::optional<Op> OpFromName(std::string_view name) { return Lookup<Op>(kOpNames, name); }
std::string_view PhaseName(Phase phase) { return kPhaseNames[static_cast<size_t>(phase)]; }
std::optional<Phase> PhaseFromName(std::string_view name) { return Lookup<Phase>(kPhaseNames, name); }
std::string_view DeviceKindName(DeviceKind kind) { return kDeviceKindNames[static_cast<size_t>(kind)]; }
std::optional<DeviceKind> DeviceKindFromName(std::string_view name) {
  return Lookup<DeviceKind>(kDeviceKindNames, name);
}

std::string_view StateKindName(StateKind kind) { return kStateKindNames[static_cast<size_t>(kind)]; }
std::optional<StateKind> StateKindFromName(std::string_view name) { return Lookup<StateKind>(kStateKindNames, name); }
std::string_view StateKindDtype(StateKind kind) { return StateKindBytes(kind) == 2 ? "bf16" : "fp32"; }
std::string_view KernelName(Kernel kernel) { return kKernelNames[static_cast<size_t>(kernel)]; }
std::optional<Kernel> KernelFromName(std::string_view name) { return Lookup<Kernel>(kKernelNames, name); }

bool KernelFitsOp(Kernel kernel, Op op) {
  switch (kernel) {
    case Kernel::kNone: return true;  // sim times a task by its cost; `tierflow run` needs the kernel (CheckRunnable)
    case Kernel::kForward:
    case Kernel::kBackward: return op == Op::kCompute;
    case Kernel::kAdam: return op == Op::kOptimizer;
    case Kernel::kOverflowCheckAndNorm:
    case Kernel::kFp32ToBf16:
    case Kernel::kBf16ToFp32:
    case Kernel::kCopy: return op == Op::kConvert;
  }
  return false;
}

std::string KernelsOf(Op op) {
  std::string out;
  for (int k = 1; k < kKernelCount; ++k) {
    if (KernelFitsOp(static_cast<Kernel>(k), op)) out += (out.empty() ? "" : ", ") + std::string(kKernelNames[static_cast<size_t>(k)]);
  }
  return out;
}

}  // namespace tierflow
