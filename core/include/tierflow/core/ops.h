// The vocabulary shared by the schedule, the trace records, the docs and the CLI: task ops,
// training phases and device kinds, with their one spelling each.
//
// Thread safety: pure functions over constants.
#pragma once

#include <optional>
#include <string_view>

namespace tierflow {

enum class Op : uint8_t {
  kRead,           // disk -> host buffer
  kWrite,          // host buffer -> disk
  kH2D,            // host -> GPU copy
  kD2H,            // GPU -> host copy
  kCompute,        // a named kernel step on a GPU (or the CPU reference)
  kAllGather,
  kReduceScatter,
  kAllReduce,
  kOptimizer,      // Adam over one sub-group of a shard, on the CPU
  kConvert,        // a dtype cast or accumulation on the host
  kAlloc,          // only allocates buffers
  kFree,           // only frees buffers
  kBarrier,        // only orders other tasks
};
inline constexpr int kOpCount = 13;

enum class Phase : uint8_t { kForward, kBackward, kStep, kOther };
inline constexpr int kPhaseCount = 4;

enum class DeviceKind : uint8_t { kGpu, kHost, kNvme, kRemote, kNetwork };

std::string_view OpName(Op op);
std::optional<Op> OpFromName(std::string_view name);
std::string_view PhaseName(Phase phase);
std::optional<Phase> PhaseFromName(std::string_view name);
std::string_view DeviceKindName(DeviceKind kind);
std::optional<DeviceKind> DeviceKindFromName(std::string_view name);

// Ops that only manage buffers or ordering and take no time on any resource.
inline bool IsInstantOp(Op op) { return op == Op::kAlloc || op == Op::kFree || op == Op::kBarrier; }
inline bool IsCollectiveOp(Op op) {
  return op == Op::kAllGather || op == Op::kReduceScatter || op == Op::kAllReduce;
}

}  // namespace tierflow
