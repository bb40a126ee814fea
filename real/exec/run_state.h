// The state of one run (run.h) as the op handlers see it (ops/op_handler.h): the schedule and the
// training set-up, where every piece of model state lies (buffers, disk homes, host homes, the
// GPU-resident home) at which version, the compute device and the CPU thread pools, the step
// each iteration is deciding, what each op family opened for the run (Keep), and the ranks'
// agreement. Handlers read and change it through the methods below only; the dispatch loop (Run,
// which derives from it) also sets it up and reads the results back.
//
// Thread safety: the dispatch thread owns it. A handler's work (on a worker) touches only the
// bytes its Prepare resolved, the device and thread pools it was handed, and what its family
// keeps (Find), which is written at set-up only.
#pragma once

#include <array>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tierflow/core/schedule.h"
#include "tierflow/real/block_cache.h"
#include "tierflow/real/compute_device.h"
#include "tierflow/real/dataset.h"
#include "tierflow/real/executor.h"
#include "tierflow/real/io_memory.h"
#include "tierflow/real/pinned_arena.h"
#include "tierflow/real/storage.h"
#include "tierflow/real/trainer.h"
#include "tierflow/real/workers.h"
#include "ranks.h"
#include "state_values.h"

namespace tierflow::real::exec {

// A storage device's file: O_DIRECT where the file system allows it, else buffered.
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

struct NormAccumulator {
  // Per gradient tensor: (elements, check), combined in element order.
  std::map<int64_t, std::pair<int64_t, cpu::GradCheck>> by_begin;
};

// The step of the iteration in one window slot: the gradient checks that decide it, and what
// they decided.
struct StepSlot {
  NormAccumulator norm;     // this rank's checks, per tensor as its gradients left the GPU
  cpu::GradCheck partial;   // with several ranks: this rank's checks combined, for the all-reduce
  int8_t decided = -1;      // -1 undecided, 0 skipped (an overflow), 1 updated
  int64_t adam_step = 0;    // the optimizer step it takes
  float clip = 1.0f;        // the clip factor
};

class RunState {
 public:
  // `s` is the part of the schedule this rank runs (RankPart; the whole schedule with one rank),
  // `space` where its partition lies in the model, `comm` the ranks' collectives (null: one rank).
  RunState(const Schedule& s, const TrainConfig& config, const RunOptions& options, RankSpace space, Collective* comm);
  // Buffers still held (a run that failed) go back; no work is in flight by then.
  ~RunState();
  RunState(const RunState&) = delete;
  RunState& operator=(const RunState&) = delete;

  // ---- The run's inputs
  const Schedule& schedule() const { return s_; }
  const TrainConfig& config() const { return config_; }
  const RankSpace& space() const { return space_; }
  const Trainer& trainer() const { return trainer_; }
  const RunOptions& options() const { return options_; }
  Collective* comm() const { return comm_; }  // null with one rank
  ComputeDevice* device() const { return device_.get(); }
  // The schedule has a global gradient check (overflow_check_and_norm) deciding each step; else
  // every step is taken as its optimizer tasks come (an update overlapped with backward).
  bool global_check() const { return global_check_; }
  int32_t micro_steps() const { return micro_steps_; }
  // Whether `task` runs its layer's math (the layer's last compute task of its pass).
  bool RunsMath(int32_t task) const { return math_task_[static_cast<size_t>(task)] != 0; }

  // ---- What an op family keeps for the run (OpHandler::open): one object of each type at most
  // (Keep refuses a second), destroyed before the compute device.
  struct Kept {
    virtual ~Kept() = default;
  };
  template <typename T>
  T* Find() const {
    for (const auto& k : kept_) {
      if (auto* p = dynamic_cast<T*>(k.get())) return p;
    }
    return nullptr;
  }
  template <typename T>
  T& Keep(std::unique_ptr<T> kept) {
    TF_CHECK(Find<T>() == nullptr);  // an open called twice
    T& ref = *kept;
    kept_.push_back(std::move(kept));
    return ref;
  }
  // A line of the run's notes (RunResult::notes): where it departs from the schedule, or chooses.
  void Note(std::string note) { result_.notes.push_back(std::move(note)); }

  // ---- Ranks (comm() not null)
  // Every rank's `mine`, gathered: Ok where every rank's is, else the first failing rank's (named,
  // on the others), on every rank, so that they go on or stop together.
  Status AgreeAcrossRanks(const Status& mine);
  // Each rank's `mine`, gathered on every rank, in rank order.
  StatusOr<std::vector<std::string>> GatherText(std::string mine);

  // ---- Names, for errors
  std::string Who(const TaskSpec& t, int64_t iteration) const {
    return "task '" + t.id + "' (iteration " + std::to_string(iteration) + ")";
  }
  const TensorSpec& T(int32_t i) const { return s_.tensors()[static_cast<size_t>(i)]; }
  const std::string& BufferName(int32_t b) const { return s_.buffers()[static_cast<size_t>(b)].name; }
  std::string Range(const TensorSpec& t) const {
    return std::string(StateKindName(t.kind)) + " [" + std::to_string(t.element_offset) + ", " +
           std::to_string(t.element_offset + t.size_bytes / StateKindBytes(t.kind)) + ")";
  }
  int64_t Elements(const TensorSpec& t) const { return t.size_bytes / StateKindBytes(t.kind); }

  // ---- Versions of gradients
  // Complete after micro-step `micro` of `iteration`; the partial version is the tied embedding
  // table's after the head's part of that micro-step, before the embedding's own is added
  // (ops/copy_op.cc). The update reads the last micro-step's: the accumulated gradients.
  int64_t GradVersion(int64_t iteration, int32_t micro) const { return 2 * (iteration * micro_steps_ + micro) + 1; }
  int64_t PartialGradVersion(int64_t iteration, int32_t micro) const { return GradVersion(iteration, micro) - 1; }
  int64_t FinalGrad(int64_t iteration) const { return GradVersion(iteration, micro_steps_ - 1); }
  std::string GradVersionText(int64_t v) const;

  // ---- Buffers: what each holds, at which version
  // A buffer's state in the iteration being prepared or finished: iterations in the window each
  // have their own instance of a non-persistent buffer.
  BufferState& Buf(int32_t b) { return buffers_[BufIndex(b)]; }
  const BufferState& Buf(int32_t b) const { return buffers_[BufIndex(b)]; }
  // Kind [begin, begin + n) in `buffer`: the pieces covering it, laid side by side in the buffer
  // as in the element space (one piece; a sub-group over a flat host buffer's per-unit pieces).
  Span FindSpan(int32_t buffer, int kind, int64_t begin, int64_t n) const;
  // The first buffer of `buffers` holding the whole range, as FindSpan, and its index (kNoIndex).
  Span FindIn(std::span<const int32_t> buffers, int kind, int64_t begin, int64_t n, int32_t* which = nullptr) const;
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
  // A buffer that holds gpu0 memory while allocated: in a GPU pool and not persistent, or the
  // persistent home of optimizer states on the GPU (other persistent GPU buffers stand for the
  // device's own memory and the resident home: see Run::Setup).
  bool HoldsGpuMemory(int32_t buffer) const {
    return OnGpu(buffer) && (!s_.buffers()[static_cast<size_t>(buffer)].persistent || buffers_[static_cast<size_t>(buffer)].data != nullptr);
  }
  // Whether `resource` is a GPU's (an optimizer there updates states kept in gpu0 memory).
  bool GpuResource(int32_t resource) const {
    return s_.devices()[static_cast<size_t>(s_.resources()[static_cast<size_t>(resource)].device)].kind == DeviceKind::kGpu;
  }
  // The first buffer holding gpu0 memory that the task allocates, else uses, or kNoIndex.
  int32_t GpuBufferOf(const TaskSpec& t) const;
  // The first buffer of the task on a device of `kind`, of those it allocates first or uses first.
  int32_t FirstBufferOnDevice(const TaskSpec& t, DeviceKind kind, bool allocs_first) const;

  // ---- Homes
  // The versions of each kind of state at its home on storage device `device`.
  Versions& Home(int32_t device, int kind) { return home_[static_cast<size_t>(device)][kind]; }
  const DiskFile& Disk(int32_t device) const { return disk_of_device_[static_cast<size_t>(device)]; }
  // A tensor kept in memory — host memory, or gpu0's (optimizer states updated on the GPU): its
  // persistent buffer and byte offset there, or kNoIndex.
  std::pair<int32_t, int64_t> MemoryHome(int32_t tensor) const { return memory_home_[static_cast<size_t>(tensor)]; }
  // The GPU-resident run holding element `at`, or null; the versions of param16 there.
  const ResidentRun* ResidentAt(int64_t at) const;
  Versions& resident_versions() { return resident_versions_; }
  // Where param16 [begin, begin + n) is on the GPU for `t`: in the gathered pieces of the GPU
  // buffers it uses, else at its GPU-resident home; every part at version `iteration`.
  StatusOr<std::vector<ParamRange>> ParamsOnGpu(const TaskSpec& t, int64_t iteration, int64_t begin, int64_t n) const;

  // ---- Resources
  Storage& io() { return *io_; }
  BlockCache& blocks() { return blocks_; }
  // The pool of CPU threads of a resource's host work, made when first asked for.
  CpuThreads& ThreadsOf(int32_t resource);
  // Counts bytes a read or write moved, O_DIRECT or through the page cache (RunResult).
  void CountIo(bool direct, int64_t bytes) { (direct ? result_.direct_io_bytes : result_.buffered_io_bytes) += bytes; }
  // Job `job`'s asynchronous work ended (an I/O window's last completion): the dispatch loop
  // finishes it. Any thread.
  void JobDone(size_t job, Status status) { events_.Push({job, std::move(status)}); }

  // ---- Iterations and steps
  IterationState& Iter(int64_t iteration) { return iterations_[static_cast<size_t>(iteration % window_)]; }
  // The micro-step's batch, taken by its first forward: the next in order, this rank's of the
  // ranks' batches, into `it`. FailedPrecondition naming `t` when a micro-step starts out of order.
  Status TakeBatch(const TaskSpec& t, int64_t iteration, int32_t micro, IterationState* it);
  StepSlot& Step(int64_t iteration) { return steps_[static_cast<size_t>(iteration % window_)]; }
  // The step of `iteration` from its global gradient check (overflow, clip factor); the loss
  // scale follows it.
  void DecideStep(int64_t iteration, const cpu::GradCheck& total);
  // The iteration whose gradient check decides next; the loss scale the head's backward uses.
  int64_t next_norm_iteration() const { return next_norm_iteration_; }
  float loss_scale() const { return scaler_.scale(); }
  // Optimizer steps taken before this run (a resumed run).
  int64_t updates_at_start() const { return updates_at_start_; }

 protected:
  size_t BufIndex(int32_t b) const {
    const size_t n = s_.buffers().size();
    if (s_.buffers()[static_cast<size_t>(b)].persistent) return static_cast<size_t>(b);
    return static_cast<size_t>(ctx_iteration_ % window_) * n + static_cast<size_t>(b);
  }
  bool OnGpu(int32_t buffer) const { return buffers_[static_cast<size_t>(buffer)].on_gpu; }
  // Memory for a buffer the dispatcher admitted; back, to its cache for reuse (a task freed it)
  // or for good (the run's end).
  Status TakeBuffer(BufferState& buf, const std::string& name);
  void ReturnBuffer(BufferState& buf, bool for_good);
  // The batch of the next micro-step: the loader's next `ranks` batches, this rank's of them.
  TokenBatch NextBatch();

  const Schedule& s_;
  const TrainConfig& config_;
  const RunOptions& options_;
  const RankSpace space_;
  Collective* comm_;                              // null with one rank
  Trainer trainer_;                               // layout, initial weights, activations
  std::unique_ptr<ComputeDevice> device_;   // gpu0 (RunOptions::compute)
  std::vector<std::unique_ptr<Kept>> kept_;  // by the op families (Keep), gone before device_
  LossScaler scaler_;
  bool global_check_;
  int32_t micro_steps_;  // per iteration (Schedule::MicroSteps)
  int64_t window_ = 2;

  Storage* io_ = nullptr;                              // what every I/O goes through
  std::vector<DiskFile> disk_of_device_;               // per schedule device
  std::vector<std::array<Versions, kKindCount>> home_;  // per schedule device
  std::vector<std::pair<int32_t, int64_t>> memory_home_; // per tensor: (persistent buffer, byte offset)
  std::vector<ResidentRun> resident_;                  // sorted by begin
  void* resident_block_ = nullptr;                     // gpu0 memory of resident_
  Versions resident_versions_;                         // param16 at the resident home
  // The host pools' memory (Run::MakeHostArenas), declared before the buffers cut from it.
  std::unique_ptr<PinnedArena> host_memory_;
  std::vector<ExactPool*> host_pools_;                 // per schedule pool (null: a GPU pool, or none)
  std::vector<BufferState> buffers_;                   // per window slot and buffer
  int64_t ctx_iteration_ = 0;                          // the iteration being prepared or finished
  BlockCache blocks_;                            // host memory of buffers and staging
  std::vector<uint8_t> math_task_;                     // per task: runs its layer's math
  std::vector<std::unique_ptr<CpuThreads>> threads_;   // per resource, lazily
  std::vector<int32_t> pool_threads_;                  // per resource: its pool's size (Run::SizeThreadPools)
  std::vector<IterationState> iterations_;             // per window slot
  std::vector<StepSlot> steps_;                        // per window slot
  int64_t updates_ = 0;                                // successful optimizer steps so far
  int64_t updates_at_start_ = 0;                       // of them, before this run (resumed)
  int64_t next_norm_iteration_ = 0;
  int64_t next_batch_ = 0;                             // the next batch, in micro-steps of this run
  std::unique_ptr<TokenLoader> loader_;
  EventQueue events_;                                  // completions, to the dispatch loop
  RunResult result_;
};

}  // namespace tierflow::real::exec
