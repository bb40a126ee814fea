// The ranks of a run (run.h, docs/executor.md "Many ranks"): the part of a schedule one rank
// executes, where a rank's partition of the parameters lies in the model, and the one order in
// which every rank issues its collectives.
//
// Thread safety: RankPart and RankSpace are values. (The collectives run on the rank's CommEngine,
// tierflow/real/comm_engine.h.)
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tierflow/core/schedule.h"
#include "tierflow/real/cpu_threads.h"
#include "tierflow/real/llama.h"
#include "tierflow/real/train_config.h"

namespace tierflow::real::exec {

// What rank `rank` executes of a schedule of several ranks: the tasks of that rank and every
// collective and barrier, the collectives naming only its own tensors and buffers; its tensors;
// the buffers its tasks name (and the persistent buffers of their pools); every device, so that
// --disk maps alike on every rank. A dependency on another rank's task is dropped: what one rank
// needs of another comes through a collective, which completes on every rank together. The
// collectives' resources admit every collective at once: the CommEngine orders and serialises
// them. InvalidArgument when a task other than a collective or barrier says no rank.
StatusOr<Schedule> RankPart(const Schedule& schedule, int32_t rank);
// The whole schedule's topological order (Schedule::TopologicalOrder) restricted to rank `rank`'s
// part, as the part's task indices: an order of the part in which every rank meets the
// collectives alike, for a plain loop (RunOptions::plain_loop) of several ranks.
std::vector<int32_t> RankPartOrder(const Schedule& schedule, int32_t rank);
// The resources whose tasks name more than one rank (MLP-Offload's tier locks, IOC's shared
// queue), by name: each rank runs its part alone, so a run holds them node-wide (tier_locks.h).
std::vector<std::string> NodeSharedResources(const Schedule& schedule);

// Where rank `rank`'s flat partition (the schedule's element space: unit after unit, each unit's
// part of elements / ranks) lies in the model's flat parameters (ParamLayout order): rank r holds
// elements [r * part, (r + 1) * part) of every tensor. With one rank the two spaces are one.
class RankSpace {
 public:
  // InvalidArgument when a tensor of the model does not split into `ranks` equal parts.
  static StatusOr<RankSpace> Make(const ParamLayout& layout, int32_t rank, int32_t ranks);

  int32_t rank() const { return rank_; }
  int32_t ranks() const { return ranks_; }
  int64_t local_total() const { return local_total_; }

  struct Unit {
    int64_t global = 0;  // the model tensor's first element
    int64_t n = 0;       // its elements
    int64_t local = 0;   // its part's first element in the rank's space
    int64_t part = 0;    // n / ranks
  };
  // The model tensor whose part holds local element `at` (at < local_total()).
  const Unit& UnitAt(int64_t at) const;
  // The model tensors whose parts local [begin, begin + n) touches, in order (n > 0).
  std::vector<const Unit*> UnitsIn(int64_t begin, int64_t n) const;
  struct Segment {
    int64_t local = 0, global = 0, n = 0;
  };
  // Local [begin, begin + n) as runs of the model's elements, in order (one run with one rank).
  std::vector<Segment> Segments(int64_t begin, int64_t n) const;
  // The rank's own elements of the model, as local and global runs (one per tensor).
  const std::vector<Unit>& units() const { return units_; }
  // Local [begin, begin + n) as runs with whether AdamW's weight decay applies: to a model tensor
  // of two or more dimensions, not to a vector (a norm's weight, a bias), as Hugging Face's
  // Trainer groups the parameters by default. Offsets from `begin`; neighbours alike are merged.
  struct DecayRun {
    int64_t offset = 0, n = 0;
    bool decay = false;
  };
  std::vector<DecayRun> DecayRuns(const ParamLayout& layout, int64_t begin, int64_t n) const;

 private:
  int32_t rank_ = 0, ranks_ = 1;
  int64_t local_total_ = 0;
  std::vector<Unit> units_;  // by local (and global) order
};

// One AdamW step (cpu::AdamW) over local [begin, begin + n), whose states and gradient start at
// param, m, v and grad: the learning rate LearningRate gives update `step`, and the weight decay
// on the runs DecayRuns says take it. Elementwise: any split of a range gives the same bits.
void AdamWSparingVectors(const RankSpace& space, const TrainConfig& config, const ParamLayout& layout, int64_t begin, int64_t n,
                         float* param, float* m, float* v, const float* grad, int64_t step, float grad_scale, CpuThreads& threads);
// The runs AdamWSparingVectors updates, for a back-end of its own (the GPU's): `update` is called
// for each run [offset, offset + elements) of the range (offset from `begin`), in order, with the
// run's configuration; the first error stops it.
Status ForEachAdamWRun(const RankSpace& space, const TrainConfig& config, const ParamLayout& layout, int64_t begin, int64_t n, int64_t step,
                       const std::function<Status(int64_t offset, int64_t elements, const AdamWConfig& config)>& update);

}  // namespace tierflow::real::exec
