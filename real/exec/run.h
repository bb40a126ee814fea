// One run of a schedule (executor.h's RunSchedule): the dispatch loop over the run's state
// (run_state.h), which the op handlers (ops/op_handler.h) prepare each started task against.
//   run_setup.cc      disks, buffers, host homes, the GPU-resident home, the host arenas
//   run_state.cc      finding state in buffers, buffer memory, batches, the step's decision,
//                     the ranks' agreement
//   run_loop.cc       the dispatch loop, Start and Finish, reading state back
//   run_checkpoint.cc the initial state in its homes, the checkpoints
//   run_ranks.cc      the result gathered from every rank
//   ops/              one handler per op family, and the op table (ops/op_table.cc)
//
// Thread safety: everything but a Job's work runs on the dispatch thread.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tierflow/core/dispatcher.h"
#include "tierflow/core/schedule.h"
#include "tierflow/real/checkpoint.h"
#include "tierflow/real/comm_engine.h"
#include "tierflow/real/dataset.h"
#include "tierflow/real/dir_lock.h"
#include "tierflow/real/disk_set.h"
#include "tierflow/real/executor.h"
#include "tierflow/real/io_memory.h"
#include "tierflow/real/io_window.h"
#include "tierflow/real/storage.h"
#include "ops/op_handler.h"
#include "run_state.h"
#include "tier_locks.h"

namespace tierflow::real::exec {

// ---- The run -----------------------------------------------------------------------------------

class Run : public RunState {
 public:
  Run(const Schedule& s, const TrainConfig& config, const RunOptions& options, RankSpace space, Collective* comm)
      : RunState(s, config, options, std::move(space), comm) {}
  // The engine and the workers stop before the state's buffers go back (~RunState); first the
  // node-wide locks go, so that no other rank waits on this one's while its engine winds down.
  ~Run() {
    tier_locks_.Close();
    engine_.reset();
    workers_.clear();
  }

  StatusOr<RunResult> Execute();
  // The order a plain loop runs the tasks in (RunOptions::plain_loop); by default the schedule's
  // topological order (with several ranks, RankPartOrder's).
  void SetPlainOrder(std::vector<int32_t> order) { plain_order_ = std::move(order); }
  // The resources (by name) that this rank shares with other ranks of its node: each task on one
  // holds its node-wide lock while it runs (tier_locks.h; NodeSharedResources).
  void SetNodeShared(std::vector<std::string> names) { node_shared_ = std::move(names); }

 private:
  StatusOr<RunResult> ExecutePlainLoop();
  // A job whose work succeeded: its finish, its trace record (ending now), the buffers it frees.
  void Finish(Job& job, const TaskSpec& t);
  Status IterationDone(int64_t iteration);
  // The record window (RunOptions::keep_iterations, on_record): hands every record of an
  // iteration below `below` to on_record and drops it; the rest stay in completion order.
  Status HandOnRecords(int64_t below);
  // At the run's end: the window cut to its last keep_iterations, every record handed on.
  Status FinishRecords();
  Status Setup();
  // Setup's stages, in order.
  StatusOr<std::vector<DiskDir>> TakeDirectories();
  Status OpenStores(const std::vector<DiskDir>& dirs);
  StatusOr<int64_t> MakeBuffers();
  // State kept in memory across iterations (master, adam_m, adam_v of cached sub-groups in host
  // memory, of sub-groups updated on the GPU in gpu0 memory; parameters kept in host memory)
  // lives in the persistent buffer on that device that the tasks naming it use, packed in the
  // order they are first named. InvalidArgument when a task names such state with no persistent
  // buffer there, or two tasks keep one range in different buffers. Returns the bytes of the
  // GPU homes, allocated here.
  StatusOr<int64_t> BindMemoryHomes();
  // The GPU-resident parameters' home, within `persistent_gpu_bytes` (what the persistent GPU
  // buffers hold beyond the states' homes).
  Status MakeResidentHome(int64_t persistent_gpu_bytes);
  Status FindMathTasks();
  // Makes, before the first iteration, each host pool's memory (an ExactPool of one PinnedArena,
  // pinned_arena.h): as many bytes as its buffers can hold at once, from which TakeBuffer cuts
  // them, so that no task waits mid-run for fresh memory to be mapped and faulted in.
  void MakeHostArenas();
  Status InitialiseStores();
  // Starts an instance the dispatcher admitted: its buffers, then, once it holds its node-wide
  // lock if it needs one, Begin: its preparation and its work handed on.
  Status Start(const Instance& inst, size_t job_index);
  Status Begin(size_t job_index);
  // An event of the loop that grants a job its node-wide lock: begins it, unless the run has
  // failed or the grant is one; false when the job will not run (its lock given back).
  bool Granted(const Event& e, Status* failure);
  // Lets go of the node-wide lock `job` holds, if any: when its record ends, or when it fails.
  void ReleaseTierLock(Job& job, const TaskSpec& t);
  Status OpenTierLocks(const std::vector<DiskDir>& dirs);
  // At the run's end, over every rank: the master weights in the model's order and the losses
  // (the mean over ranks and micro-steps), as one process training the global batch reports them;
  // the instances executed and the trace records of every rank.
  Status GatherRanks();
  Status GatherFigures();
  // The model's master weights in its order, from every rank's partition `local` (the collective's
  // caller: the dispatch thread before or after the CommEngine runs).
  StatusOr<std::vector<float>> GatherModel(const std::vector<float>& local);
  // State `kind` (master, adam_m, adam_v) from its homes on disk and in host memory, every element
  // at `version`.
  Status ReadState(int kind, int64_t version, std::vector<float>* out);
  CheckpointOptions TrainingCheckpoint() const;  // where and under what name
  Status LoadCheckpointIfAny();
  Status ReadCheckpoint(std::vector<float> state[3]);
  Status CheckSharedCheckpointDir();
  Status FindCheckpointGenerations();
  Status SaveTrainingCheckpoint(int64_t iteration);
  Status CommitTrainingCheckpoint(const CheckpointShard& mine);

  // Sizes each resource's pool of CPU threads (pool_threads_), noting where the run departs from
  // the schedule's counts.
  void SizeThreadPools();

  std::unique_ptr<CommEngine> engine_;             // with several ranks
  std::vector<double> loss_sums_;                  // per iteration run: this rank's, over micro-steps
  std::vector<DirLock> locks_;                        // every directory the run writes
  std::unique_ptr<Storage> storage_;
  std::unique_ptr<FaultInjectingStorage> fault_;      // wraps storage_ when options_.faults is set
  std::vector<std::unique_ptr<Worker>> workers_;       // per resource
  std::vector<int64_t> completed_in_;                  // per window slot
  int64_t base_iteration_ = 0;                         // iterations done before this run (resumed)
  int64_t run_iterations_ = 0;                         // iterations this run executes
  // From a checkpoint: the master weights in the model's order, adam_m and adam_v the rank's own.
  std::vector<float> initial_[3];
  int64_t checkpoint_generation_base_ = 0;             // FindCheckpointGenerations
  // With several ranks: checkpoints saved whose commit (on the CommEngine) has not come back, and
  // the job index its event carries.
  int64_t commits_in_flight_ = 0;
  static constexpr size_t kCommitJob = SIZE_MAX;
  int64_t tasks_done_ = 0;
  // Iterations completed, for the record window (RunOptions::keep_iterations): every iteration
  // below done_below_ is done; done_above_ holds those done out of order above it.
  int64_t done_below_ = 0;
  std::set<int64_t> done_above_;
  int64_t records_below_ = 0;                          // records of earlier iterations are handed on
  std::vector<Job> jobs_;
  std::vector<size_t> free_jobs_;
  std::vector<int32_t> plain_order_;
  std::vector<std::string> node_shared_;
  TierLocks tier_locks_;
  double t0_ = 0;
};

}  // namespace tierflow::real::exec
