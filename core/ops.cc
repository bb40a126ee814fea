#include "tierflow/core/ops.h"

#include <array>

namespace tierflow {
namespace {
constexpr std::array<std::string_view, kOpCount> kOpNames = {
    "read", "write", "h2d", "d2h", "compute", "allgather", "reducescatter",
    "allreduce", "optimizer", "convert", "alloc", "free", "barrier"};
constexpr std::array<std::string_view, kPhaseCount> kPhaseNames = {"forward", "backward", "step",
                                                                    "other"};
constexpr std::array<std::string_view, 5> kDeviceKindNames = {"gpu", "host", "nvme", "remote",
                                                               "network"};

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

}  // namespace tierflow
