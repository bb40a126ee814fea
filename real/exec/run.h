// One run of a schedule (executor.h's RunSchedule): the dispatch loop, and per op family a
// Prepare* that resolves a started task's tensors to bytes, checks their versions and leaves the
// task's work and finish in its Job. Each op family is in its own file, its contract at its top:
//   io_task.cc        read, write: disk homes <-> host buffers (IoWindow requests)
//   copy_task.cc      h2d, d2h: parameters onto gpu0, gradients off it (with the overflow check)
//   compute_task.cc   compute: a layer's forward or backward on the compute device
//   optimizer_task.cc optimizer: AdamW over one sub-group
//   convert_task.cc   convert: the global gradient check, fp32 -> bf16 parameters, bf16 -> fp32 gradients
//   run_setup.cc      disks, buffers, host homes, the GPU-resident home, the initial state
//   run_buffers.cc    finding state in buffers, buffer memory
//   run_loop.cc       the dispatch loop, Start and Finish, reading state back
//   run_checkpoint.cc the run's checkpoints
//   collective_task.cc allgather, reducescatter, allreduce over the ranks (ranks.h)
//   task_contracts.cc what each op asks of a task, checked when the schedule is loaded
// A new op is one Prepare* in its own file, its case in Run::Start and its rules in
// CheckTaskContracts.
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
#include "tierflow/real/dataset.h"
#include "tierflow/real/dir_lock.h"
#include "tierflow/real/executor.h"
#include "tierflow/real/io_memory.h"
#include "tierflow/real/io_window.h"
#include "tierflow/real/storage.h"
#include "block_cache.h"
#include "compute_device.h"
#include "host_arena.h"
#include "ranks.h"
#include "run_state.h"
#include "run_workers.h"
#include "trainer.h"

namespace tierflow::real::exec {

// What each op asks of a task's kernel, buffers and tensors (task_contracts.cc): InvalidArgument
// naming the task and the rule. CheckRunnable calls it, before anything runs.
Status CheckTaskContracts(const Schedule& schedule);

// ---- The run -----------------------------------------------------------------------------------

struct DiskFile {
  FileId direct = -1;    // O_DIRECT when the file system allows it
  FileId buffered = -1;  // for requests that are not aligned as O_DIRECT needs
  int64_t alignment = kDirectAlignment;  // what O_DIRECT needs of offsets, lengths and buffers
  // Every request to the file goes O_DIRECT (it takes it, and every tensor homed there is aligned
  // as it needs), else every request goes through the page cache: never both. Direct and buffered
  // I/O to overlapping pages of one file are not coherent (a unit's buffered tail page and the
  // sub-group's direct write around it lost bytes of the write).
  bool direct_all = false;
  FileId fd() const { return direct_all ? direct : buffered; }
};

struct Job {
  Instance instance;
  double start_s = 0;
  std::function<Status()> work;      // on a worker; empty for I/O and instant ops
  std::function<void()> finish;      // on the dispatch thread, after success
  std::unique_ptr<IoWindow> sink;  // reads and writes
  exec::DeviceSpan device_span;      // its work's span on a real GPU, set by work (the record's)
};

struct NormAccumulator {
  // Per gradient tensor: (elements, check), combined in element order.
  std::map<int64_t, std::pair<int64_t, cpu::GradCheck>> by_begin;
};

class Run {
 public:
  // `s` is the part of the schedule this rank runs (RankPart; the whole schedule with one rank),
  // `space` where its partition lies in the model, `comm` the ranks' collectives (null: one rank).
  Run(const Schedule& s, const TrainConfig& config, const RunOptions& options, RankSpace space, Collective* comm)
      : s_(s),
        config_(config),
        options_(options),
        space_(std::move(space)),
        comm_(comm),
        trainer_(config),
        scaler_(ScalerFor(config)),
        global_check_(HasGlobalCheck(s)),
        micro_steps_(s.MicroSteps()),
        // Host blocks are I/O memory (io_memory.h: huge pages from 2 MiB up, as the disk probe's)
        // and page-locked for the device's copies; where that fails the copies still work, staged
        // by the driver. Mapped, not faulted in: one made mid-run costs the dispatch thread a
        // mapping, and its pages are faulted in by the task that fills them, as an arena's are.
        blocks_(
            [this](int64_t bytes) -> void* {
              void* p = AllocateIoMemory(bytes, /*populate=*/false);
              if (p != nullptr && device_) (void)device_->RegisterHost(p, AlignUp(bytes, kDirectAlignment));
              return p;
            },
            [this](void* p, int64_t bytes) {
              if (device_) device_->UnregisterHost(p);
              FreeIoMemory(p, bytes);
            }) {}
  // Buffers still held (a run that failed) go back; no work is in flight by then.
  ~Run() {
    engine_.reset();
    workers_.clear();
    for (BufferState& b : buffers_) ReleaseBuffer(b);
    for (HostArena& a : arenas_) {
      if (a.base() == nullptr) continue;
      if (device_) device_->UnregisterHost(a.base());
      FreeIoMemory(a.base(), a.size_bytes());
    }
    if (device_ && resident_block_ != nullptr) device_->Free(resident_block_);
  }

  StatusOr<RunResult> Execute();

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
  // Host-homed state (master, adam_m, adam_v kept in host memory across iterations: cached
  // sub-groups) lives in the persistent host buffer that the tasks naming it use, packed in the
  // order they are first named. InvalidArgument when a task names such state with no persistent
  // host buffer, or two tasks keep one range in different buffers.
  Status BindHostHomes();
  // Makes, before the first iteration, each host pool's arena (host_arena.h): as many bytes as
  // its buffers can hold at once, from which TakeBuffer cuts them, so that no task waits mid-run
  // for fresh memory to be mapped and faulted in.
  void MakeHostArenas();
  // The arena a host buffer's memory was cut from, or null (a block of its own).
  HostArena* ArenaHolding(const BufferState& buf);
  Status InitialiseStores();
  Status Start(const Instance& inst, size_t job_index);
  Status PrepareIo(const TaskSpec& t, Job& job, int64_t iteration);
  Status PrepareCopy(const TaskSpec& t, Job& job, int64_t iteration);
  Status PrepareCompute(const TaskSpec& t, int32_t task, Job& job, int64_t iteration);
  Status PrepareOptimizer(const TaskSpec& t, Job& job, int64_t iteration);
  Status PrepareConvert(const TaskSpec& t, Job& job, int64_t iteration);
  // Collectives over several ranks (collective_task.cc); nothing to do with one rank.
  Status PrepareCollective(const TaskSpec& t, Job& job, int64_t iteration);
  Status PrepareAllGather(const TaskSpec& t, Job& job, int64_t iteration);
  Status PrepareReduceScatter(const TaskSpec& t, Job& job, int64_t iteration);
  Status PrepareNormAllReduce(const TaskSpec& t, Job& job, int64_t iteration);
  // The step's decision from the iteration's global gradient check (overflow, clip factor).
  void DecideStep(size_t slot, int64_t iteration, const cpu::GradCheck& total);
  // At the run's end, over every rank: the master weights in the model's order and the losses
  // (the mean over ranks and micro-steps), as one process training the global batch reports them;
  // the instances executed and the trace records of every rank.
  Status GatherRanks();
  // The batch of the next micro-step: the loader's next `ranks` batches, this rank's of them.
  TokenBatch NextBatch();
  // State `kind` (master, adam_m, adam_v) from its homes on disk and in host memory, every element
  // at `version`.
  Status ReadState(int kind, int64_t version, std::vector<float>* out);
  Status LoadCheckpointIfAny();
  Status SaveTrainingCheckpoint(int64_t iteration);

  std::string Who(const TaskSpec& t, int64_t iteration) const {
    return "task '" + t.id + "' (iteration " + std::to_string(iteration) + ")";
  }
  const TensorSpec& T(int32_t i) const { return s_.tensors()[static_cast<size_t>(i)]; }
  std::string Range(const TensorSpec& t) const {
    return std::string(StateKindName(t.kind)) + " [" + std::to_string(t.element_offset) + ", " +
           std::to_string(t.element_offset + t.size_bytes / StateKindBytes(t.kind)) + ")";
  }
  int64_t Elements(const TensorSpec& t) const { return t.size_bytes / StateKindBytes(t.kind); }
  // The version of gradients: complete after micro-step `micro` of `iteration`; the partial
  // version is the tied embedding table's after the head's part of that micro-step, before the
  // embedding's own is added (copy_task.cc). The update reads the last micro-step's: the
  // accumulated gradients.
  int64_t GradVersion(int64_t iteration, int32_t micro) const { return 2 * (iteration * micro_steps_ + micro) + 1; }
  int64_t PartialGradVersion(int64_t iteration, int32_t micro) const { return GradVersion(iteration, micro) - 1; }
  int64_t FinalGrad(int64_t iteration) const { return GradVersion(iteration, micro_steps_ - 1); }
  std::string GradVersionText(int64_t v) const {
    if (v < 0) return VersionText(v);
    const int64_t step = v / 2;
    std::string text = "iteration " + std::to_string(step / micro_steps_);
    if (micro_steps_ > 1) text += " micro-step " + std::to_string(step % micro_steps_);
    return v % 2 == 0 ? text + " (the tied head's part)" : text;
  }
  // A buffer's state in the iteration being prepared or finished (ctx_iteration_): iterations in
  // the window each have their own instance of a non-persistent buffer.
  BufferState& Buf(int32_t b) { return buffers_[BufIndex(b)]; }
  const BufferState& Buf(int32_t b) const { return buffers_[BufIndex(b)]; }
  size_t BufIndex(int32_t b) const {
    const size_t n = s_.buffers().size();
    if (s_.buffers()[static_cast<size_t>(b)].persistent) return static_cast<size_t>(b);
    return static_cast<size_t>(ctx_iteration_ % window_) * n + static_cast<size_t>(b);
  }
  // Kind [begin, begin + n) in `buffer`: the pieces covering it, laid side by side in the buffer
  // as in the element space (one piece; a sub-group over a flat host buffer's per-unit pieces).
  Span FindSpan(int32_t buffer, int kind, int64_t begin, int64_t n) const;
  // The first buffer of `buffers` holding the whole range, as FindSpan, and its index (kNoIndex).
  Span FindIn(const std::vector<int32_t>& buffers, int kind, int64_t begin, int64_t n, int32_t* which = nullptr) const;
  // Marks kind [begin, begin + n) in `buffer` as `version`, splitting pieces that reach beyond it.
  void SetVersion(int32_t buffer, int kind, int64_t begin, int64_t n, int64_t version);
  // Places kind [begin, begin + n) at `offset` of `buffer`, replacing what held any of it.
  void Place(int32_t buffer, const Piece& piece);
  // Where a task writes kind starting at `begin` into host buffer `buffer`: a persistent buffer
  // keeps the rank's state of that kind in host memory, each element at its own offset (bf16
  // gradients are always there); a staging buffer at `packed`, where the task packs its tensors.
  int64_t WriteOffset(int32_t buffer, int kind, int64_t begin, int64_t packed) const {
    const bool flat = kind == kGrad16 || s_.buffers()[static_cast<size_t>(buffer)].persistent;
    return flat ? begin * KindBytes(kind) : packed;
  }
  bool OnGpu(int32_t buffer) const { return buffers_[static_cast<size_t>(buffer)].on_gpu; }
  // A buffer that holds gpu0 memory while allocated: in a GPU pool and not persistent (persistent
  // GPU buffers stand for the device's own memory and the resident home: see Setup).
  bool HoldsGpuMemory(int32_t buffer) const { return OnGpu(buffer) && !s_.buffers()[static_cast<size_t>(buffer)].persistent; }
  // The first buffer holding gpu0 memory that the task allocates, else uses, or kNoIndex.
  int32_t GpuBufferOf(const TaskSpec& t) const;
  // Where param16 [begin, begin + n) is on the GPU for `t`: in the gathered pieces of the GPU
  // buffers it uses, else at its GPU-resident home; every part at version `iteration`.
  StatusOr<std::vector<exec::ParamRange>> ParamsOnGpu(const TaskSpec& t, int64_t iteration, int64_t begin, int64_t n) const;
  // The GPU-resident run holding element `at`, or null.
  const ResidentRun* ResidentAt(int64_t at) const;
  // Memory for a buffer the dispatcher admitted; back to its cache; freed for good.
  Status TakeBuffer(BufferState& buf, const std::string& name);
  void GiveBuffer(BufferState& buf);
  void ReleaseBuffer(BufferState& buf);
  int32_t FirstBufferOnDevice(const TaskSpec& t, DeviceKind kind, bool allocs_first) const;
  IterationState& Iter(int64_t iteration) { return iterations_[static_cast<size_t>(iteration % window_)]; }
  // Sizes each resource's pool of CPU threads (pool_threads_), noting where the run departs from
  // the schedule's counts.
  void SizeThreadPools();
  // The pool of CPU threads of a resource's host work, made when first asked for.
  CpuThreads& ThreadsOf(int32_t resource);

  const Schedule& s_;
  const TrainConfig& config_;
  const RunOptions& options_;
  const RankSpace space_;
  Collective* comm_;                              // null with one rank
  std::unique_ptr<CommEngine> engine_;             // with several ranks
  std::vector<cpu::GradCheck> norm_partial_;       // per window slot: this rank's part of the check
  std::vector<double> loss_sums_;                  // per iteration run: this rank's, over micro-steps
  Trainer trainer_;                               // layout, initial weights, activations
  std::unique_ptr<exec::ComputeDevice> device_;   // gpu0 (RunOptions::compute)
  LossScaler scaler_;
  // The schedule has a global gradient check (overflow_check_and_norm) deciding each step; else
  // every step is taken as its optimizer tasks come (an update overlapped with backward).
  bool global_check_;
  int32_t micro_steps_;  // per iteration (Schedule::MicroSteps)
  int64_t window_ = 2;

  std::vector<DirLock> locks_;                        // every directory the run writes
  std::unique_ptr<Storage> storage_;
  std::unique_ptr<FaultInjectingStorage> fault_;      // wraps storage_ when options_.faults is set
  Storage* io_ = nullptr;                              // what every I/O goes through
  std::vector<DiskFile> disk_of_device_;               // per schedule device
  std::vector<std::array<Versions, kKindCount>> home_;  // per schedule device
  std::vector<std::pair<int32_t, int64_t>> host_home_; // per tensor: (persistent host buffer, byte offset)
  std::vector<ResidentRun> resident_;                  // sorted by begin
  void* resident_block_ = nullptr;                     // gpu0 memory of resident_
  Versions resident_versions_;                         // param16 at the resident home
  std::vector<BufferState> buffers_;                   // per window slot and buffer
  int64_t ctx_iteration_ = 0;
  exec::BlockCache blocks_;                            // host memory of buffers and staging
  std::vector<HostArena> arenas_;                      // per schedule pool (none for a GPU pool)
  std::vector<uint8_t> math_task_;                     // per task: runs its layer's math
  std::vector<std::unique_ptr<Worker>> workers_;       // per resource
  std::vector<std::unique_ptr<CpuThreads>> threads_;   // per resource, lazily
  std::vector<int32_t> pool_threads_;                  // per resource: its pool's size (SizeThreadPools)
  std::vector<IterationState> iterations_;
  std::vector<NormAccumulator> norms_;                 // per window slot
  std::vector<int64_t> completed_in_;                  // per window slot
  std::vector<int8_t> step_decided_;                   // per window slot: -1 undecided, 0 skip, 1 update
  std::vector<int64_t> adam_step_;                     // per window slot
  std::vector<float> clip_;                            // per window slot: the clip factor
  int64_t updates_ = 0;                                // successful optimizer steps so far
  int64_t updates_at_start_ = 0;                       // of them, before this run (resumed)
  int64_t next_norm_iteration_ = 0;
  int64_t next_batch_ = 0;                             // the next batch, in micro-steps of this run
  int64_t base_iteration_ = 0;                         // iterations done before this run (resumed)
  int64_t run_iterations_ = 0;                         // iterations this run executes
  std::vector<float> initial_[3];                      // master, adam_m, adam_v from a checkpoint
  int64_t tasks_done_ = 0;
  // Iterations completed, for the record window (RunOptions::keep_iterations): every iteration
  // below done_below_ is done; done_above_ holds those done out of order above it.
  int64_t done_below_ = 0;
  std::set<int64_t> done_above_;
  int64_t records_below_ = 0;                          // records of earlier iterations are handed on
  std::unique_ptr<TokenLoader> loader_;
  EventQueue events_;
  std::vector<Job> jobs_;
  std::vector<size_t> free_jobs_;
  double t0_ = 0;
  RunResult result_;
};

}  // namespace tierflow::real::exec
