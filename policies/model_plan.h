// The model plan (blocks.h): what the model and the training set-up imply — parameter units, each
// rank's partition of them, the optimizer's sub-groups, the FLOPs and bytes of each unit's
// compute.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tierflow/core/schedule.h"
#include "tierflow/policies/scenario.h"

namespace tierflow::policies {

// The boundaries a planner chooses inside the flat parameter space — sub-groups cut at
// sub_group_size, parameter chunks of buffer_size, each rank's stretch of a device's store — fall
// on multiples of this many elements: 4 KiB of bf16 (8 KiB of fp32), the strictest O_DIRECT
// alignment of common file systems. A disk every tensor of which starts and ends on such a
// boundary is read and written O_DIRECT by the real executor (docs/executor.md), as DeepSpeed
// pads its swap files to its I/O alignment. Unit boundaries are the model's: a model whose
// tensors' partitions are multiples of 2048 elements (a hidden size that is a multiple of 2048,
// on one rank) is aligned throughout; unit offsets are not padded (the flat element space has
// no holes).
inline constexpr int64_t kIoAlignElements = 2048;
// The most optimizer sub-groups per rank a plan may have (MakeModelPlan refuses more).
inline constexpr int64_t kMaxSubGroups = 65'536;
// `elements` rounded down to a multiple of kIoAlignElements; a count below it stays as it is.
inline int64_t IoAlignedStep(int64_t elements) {
  return elements >= kIoAlignElements ? elements / kIoAlignElements * kIoAlignElements : elements;
}

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
  // Tied embeddings: the unit of the token embedding table, which the head computes with too;
  // -1 when untied. It stays on the GPU (gpu_resident), so that both ends of every pass find it
  // there, and the head's backward sends its part of the table's gradient ahead of the
  // embedding's (TrainingPasses).
  int32_t tied_unit = -1;
};

// The ranks on each node (the first node's: ranks fill nodes of hardware.node.gpu_count in
// order), who share its CPU cores.
inline int32_t RanksPerNode(const Scenario& s, int32_t ranks) { return std::clamp(ranks, 1, std::max(1, s.hardware.node.gpu_count)); }

// How a rank's flat parameter partition is cut into optimizer sub-groups.
enum class SubGroupRule {
  // Pieces of IoAlignedStep(sub_group_size) elements, cut anywhere (inside a unit too).
  kFlat,
  // Whole units of at most sub_group_size elements, a larger unit alone: a unit's state lies in
  // one sub-group. Needed when sub-groups are placed on different devices: a unit's reads and
  // gradient writes go to one device, which must be the one its sub-group's update reads from.
  kUnitsAtMost,
  // DeepSpeed's (_create_fp16_sub_groups in runtime/zero/stage3.py): whole units appended in
  // order, a group closed once it holds at least sub_group_size elements (so a group may be
  // larger than sub_group_size), the last one with the last unit; one group when sub_group_size
  // is at least the partition.
  kDeepSpeed,
};

// persistence_threshold: tensors with fewer elements stay on the GPU (never fetched).
StatusOr<ModelPlan> MakeModelPlan(const Scenario& s, int64_t sub_group_size, int64_t persistence_threshold,
                                  SubGroupRule rule = SubGroupRule::kFlat);

// What a unit's compute task of one phase is charged: its FLOPs and the bytes it touches (the
// roofline's memory side; backward reads and writes twice the forward's). The compute probe
// charges its measurements the same way, so that calibrate fits what the schedule will ask.
inline double ComputeTaskFlops(const ParamUnit& unit, bool forward) { return forward ? unit.fwd_flops : unit.bwd_flops; }
inline int64_t ComputeTaskBytes(const ParamUnit& unit, bool forward) { return unit.compute_bytes * (forward ? 1 : 2); }

}  // namespace tierflow::policies
