// The vocabulary shared by the schedule, the trace records, the docs and the CLI: task ops,
// training phases, device kinds, state kinds and kernels, with their one spelling each.
//
// Thread safety: pure functions over constants.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
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

// The kinds of model state a tensor holds (docs/schedule-format.md "Tensors"), each a range of
// one rank's flat state of that kind.
enum class StateKind : uint8_t {
  kParam16,  // "param16": bf16 parameters
  kGrad16,   // "grad16": bf16 gradients (kept in host memory)
  kGrad,     // "grad": fp32 gradients
  kMaster,   // "master": fp32 master weights
  kAdamM,    // "adam_m": Adam's first moment
  kAdamV,    // "adam_v": Adam's second moment
};
inline constexpr int kStateKindCount = 6;

// The named step of a compute, optimizer or convert task; kNone for every other op.
enum class Kernel : uint8_t {
  kNone,                  // ""
  kForward,               // "fwd": a unit's forward (compute)
  kBackward,              // "bwd": a unit's backward (compute)
  kAdam,                  // "adam": AdamW over a sub-group (optimizer)
  kOverflowCheckAndNorm,  // "overflow_check_and_norm": the global gradient check (convert)
  kFp32ToBf16,            // "fp32_to_bf16": updated master weights to bf16 parameters (convert)
  kBf16ToFp32,            // "bf16_to_fp32": bf16 gradients widened for the update (convert)
  kCopy,                  // "copy": tensors copied from one host buffer into another (convert)
};
inline constexpr int kKernelCount = 8;

std::string_view OpName(Op op);
std::optional<Op> OpFromName(std::string_view name);
std::string_view PhaseName(Phase phase);
std::optional<Phase> PhaseFromName(std::string_view name);
std::string_view DeviceKindName(DeviceKind kind);
std::optional<DeviceKind> DeviceKindFromName(std::string_view name);
std::string_view StateKindName(StateKind kind);
std::optional<StateKind> StateKindFromName(std::string_view name);
// Bytes per element: 2 for the bf16 kinds, 4 for the fp32 ones.
constexpr int64_t StateKindBytes(StateKind kind) { return kind == StateKind::kParam16 || kind == StateKind::kGrad16 ? 2 : 4; }
std::string_view StateKindDtype(StateKind kind);  // "bf16" or "fp32"
std::string_view KernelName(Kernel kernel);
std::optional<Kernel> KernelFromName(std::string_view name);
// Whether a task of `op` may name `kernel`: fwd and bwd are compute's, adam the optimizer's, the
// three casts convert's. kNone fits every op: sim times compute, optimizer and convert tasks by
// their cost alone; the real executor refuses them without a kernel when it loads the schedule.
bool KernelFitsOp(Kernel kernel, Op op);
// "fwd, bwd" — the kernels an op takes, for error messages; "" for an op without kernels.
std::string KernelsOf(Op op);

// Ops that only manage buffers or ordering and take no time on any resource.
inline bool IsInstantOp(Op op) { return op == Op::kAlloc || op == Op::kFree || op == Op::kBarrier; }
inline bool IsCollectiveOp(Op op) {
  return op == Op::kAllGather || op == Op::kReduceScatter || op == Op::kAllReduce;
}

}  // namespace tierflow
