// The real executor (executor.h): prepare on the dispatch thread, work on a resource's worker or
// the Storage back-end, finish on the dispatch thread.
#include "tierflow/real/executor.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "tierflow/core/dispatcher.h"
#include "tierflow/real/checkpoint.h"
#include "tierflow/real/dataset.h"
#include "tierflow/real/disk_set.h"
#include "tierflow/real/io_window.h"
#include "tierflow/real/storage.h"
#include "block_cache.h"
#include "compute_device.h"
#include "trainer.h"

namespace tierflow::real {
namespace {

using exec::IterationState;
using exec::Trainer;

// ---- State kinds and versions ----------------------------------------------------------------

enum Kind : int { kParam16, kGrad16, kGrad, kMaster, kAdamM, kAdamV, kKindCount };
constexpr const char* kKindNames[kKindCount] = {"param16", "grad16", "grad", "master", "adam_m", "adam_v"};
constexpr int64_t kKindBytes[kKindCount] = {2, 2, 4, 4, 4, 4};

int KindOf(const std::string& name) {
  for (int k = 0; k < kKindCount; ++k) {
    if (name == kKindNames[k]) return k;
  }
  return -1;
}

// Element range -> version: the number of optimizer updates the bytes reflect (gradients: the
// iteration that produced them). kNever where nothing was ever stored.
class Versions {
 public:
  static constexpr int64_t kNever = -1;
  static constexpr int64_t kMixed = -2;

  void Set(int64_t begin, int64_t end, int64_t version) {
    if (begin >= end) return;
    auto it = spans_.lower_bound(begin);
    if (it != spans_.begin()) {
      auto prev = std::prev(it);
      if (prev->second.end > begin) {  // split the span that starts before
        const Span tail = prev->second;
        prev->second.end = begin;
        if (tail.end > end) spans_[end] = {tail.end, tail.version};
      }
    }
    it = spans_.lower_bound(begin);
    while (it != spans_.end() && it->first < end) {
      if (it->second.end > end) spans_[end] = {it->second.end, it->second.version};
      it = spans_.erase(it);
    }
    spans_[begin] = {end, version};
  }
  // The one version of the whole range; kNever if any element was never stored; kMixed if
  // parts differ.
  int64_t Get(int64_t begin, int64_t end) const {
    int64_t version = kNever;
    int64_t at = begin;
    auto it = spans_.upper_bound(begin);
    if (it != spans_.begin()) --it;
    for (; it != spans_.end() && it->first < end; ++it) {
      if (it->second.end <= at) continue;
      if (it->first > at) return kNever;  // a hole
      if (version == kNever) version = it->second.version;
      else if (version != it->second.version) return kMixed;
      at = it->second.end;
      if (at >= end) return version;
    }
    return kNever;
  }

 private:
  struct Span {
    int64_t end;
    int64_t version;
  };
  std::map<int64_t, Span> spans_;
};

// What AdamW multiplies each gradient by: the inverse loss scale times the clip factor, in one
// place for the executor and the in-memory loop alike.
float UpdateGradScale(float loss_scale, float clip) { return 1.0f / loss_scale * clip; }

// The loss scaler the training set-up asks for.
LossScaler ScalerFor(const TrainConfig& config) {
  return config.dynamic_loss_scaling ? LossScaler(config.initial_loss_scale) : LossScaler::None();
}

// Whether the schedule decides each step after a global gradient check.
bool HasGlobalCheck(const Schedule& s) {
  for (const TaskSpec& t : s.tasks()) {
    if (t.op == Op::kConvert && t.kernel == "overflow_check_and_norm") return true;
  }
  return false;
}

std::string VersionText(int64_t v) {
  if (v == Versions::kNever) return "nothing";
  if (v == Versions::kMixed) return "parts of different versions";
  return "version " + std::to_string(v);
}

// ---- Buffers -----------------------------------------------------------------------------------

struct Piece {  // state inside a buffer
  int kind;
  int64_t begin, elements;
  int64_t offset;   // bytes into the buffer
  int64_t version;
};

struct BufferState {
  char* data = nullptr;  // host memory, or gpu0 memory for a buffer in a GPU pool
  int64_t size = 0;
  bool on_gpu = false;
  std::vector<Piece> pieces;
};

// Where a range of state lies in a buffer (Run::FindSpan): its first byte there, and the one
// version of every element (Versions::kMixed when parts differ); data null when the buffer does
// not hold the whole range.
struct Span {
  char* data = nullptr;
  int64_t version = -1;
};

// GPU-resident parameters (param16 whose home is a GPU): elements [begin, begin + n) at data,
// in gpu0 memory.
struct ResidentRun {
  int64_t begin, n;
  char* data;
};

// ---- Events and workers ------------------------------------------------------------------------

struct Event {
  size_t job = 0;
  Status status;
};

class EventQueue {
 public:
  void Push(Event e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(std::move(e));
    }
    cv_.notify_one();
  }
  Event Pop() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !events_.empty(); });
    Event e = std::move(events_.front());
    events_.pop_front();
    return e;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
};

// One thread per resource slot, running closures in order.
class Worker {
 public:
  Worker() : thread_([this] { Loop(); }) {}
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  void Post(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      work_.push_back(std::move(fn));
    }
    cv_.notify_one();
  }

 private:
  void Loop() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !work_.empty(); });
        if (work_.empty()) return;
        fn = std::move(work_.front());
        work_.pop_front();
      }
      fn();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> work_;
  bool stop_ = false;
  std::thread thread_;
};

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
  Run(const Schedule& s, const TrainConfig& config, const RunOptions& options)
      : s_(s),
        config_(config),
        options_(options),
        trainer_(config),
        scaler_(ScalerFor(config)),
        global_check_(HasGlobalCheck(s)),
        // Host blocks are page-locked for the device's copies; where that fails the copies still
        // work, staged by the driver.
        blocks_(
            [this](int64_t bytes) -> void* {
              void* p = nullptr;
              const auto aligned = static_cast<size_t>(AlignUp(bytes, kDirectAlignment));
              if (posix_memalign(&p, static_cast<size_t>(kDirectAlignment), aligned) != 0) return nullptr;
              if (device_) (void)device_->RegisterHost(p, static_cast<int64_t>(aligned));
              return p;
            },
            [this](void* p) {
              if (device_) device_->UnregisterHost(p);
              std::free(p);
            }) {}
  // Buffers still held (a run that failed) go back; no work is in flight by then.
  ~Run() {
    workers_.clear();
    for (BufferState& b : buffers_) ReleaseBuffer(b);
    if (device_ && resident_block_ != nullptr) device_->Free(resident_block_);
  }

  StatusOr<RunResult> Execute();

 private:
  StatusOr<RunResult> ExecutePlainLoop();
  // A job whose work succeeded: its finish, its trace record (ending now), the buffers it frees.
  void Finish(Job& job, const TaskSpec& t);
  Status IterationDone(int64_t iteration);
  Status Setup();
  // Host-homed state (master, adam_m, adam_v kept in host memory across iterations: cached
  // sub-groups) lives in the persistent host buffer that the tasks naming it use, packed in the
  // order they are first named. InvalidArgument when a task names such state with no persistent
  // host buffer, or two tasks keep one range in different buffers.
  Status BindHostHomes();
  Status InitialiseStores();
  Status Start(const Instance& inst, size_t job_index);
  Status PrepareIo(const TaskSpec& t, Job& job, int64_t iteration);
  Status PrepareCopy(const TaskSpec& t, Job& job, int64_t iteration);
  Status PrepareCompute(const TaskSpec& t, int32_t task, Job& job, int64_t iteration);
  Status PrepareOptimizer(const TaskSpec& t, Job& job, int64_t iteration);
  Status PrepareConvert(const TaskSpec& t, Job& job, int64_t iteration);
  // State `kind` (master, adam_m, adam_v) from its disk homes, every element at `version`.
  Status ReadState(int kind, int64_t version, std::vector<float>* out);
  Status LoadCheckpointIfAny();
  Status SaveTrainingCheckpoint(int64_t iteration);

  std::string Who(const TaskSpec& t, int64_t iteration) const {
    return "task '" + t.id + "' (iteration " + std::to_string(iteration) + ")";
  }
  const TensorSpec& T(int32_t i) const { return s_.tensors()[static_cast<size_t>(i)]; }
  std::string Range(const TensorSpec& t) const {
    return t.kind + " [" + std::to_string(t.element_offset) + ", " +
           std::to_string(t.element_offset + t.size_bytes / kKindBytes[KindOf(t.kind)]) + ")";
  }
  int64_t Elements(const TensorSpec& t) const { return t.size_bytes / kKindBytes[KindOf(t.kind)]; }
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
  CpuThreads& ThreadsOf(int32_t resource);

  const Schedule& s_;
  const TrainConfig& config_;
  const RunOptions& options_;
  Trainer trainer_;                               // layout, initial weights, activations
  std::unique_ptr<exec::ComputeDevice> device_;   // gpu0 (RunOptions::compute)
  LossScaler scaler_;
  // The schedule has a global gradient check (overflow_check_and_norm) deciding each step; else
  // every step is taken as its optimizer tasks come (an update overlapped with backward).
  bool global_check_;
  int64_t window_ = 2;

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
  std::vector<uint8_t> math_task_;                     // per task: runs its layer's math
  std::vector<std::unique_ptr<Worker>> workers_;       // per resource
  std::vector<std::unique_ptr<CpuThreads>> threads_;   // per resource, lazily
  std::vector<IterationState> iterations_;
  std::vector<NormAccumulator> norms_;                 // per window slot
  std::vector<int64_t> completed_in_;                  // per window slot
  std::vector<int8_t> step_decided_;                   // per window slot: -1 undecided, 0 skip, 1 update
  std::vector<int64_t> adam_step_;                     // per window slot
  std::vector<float> clip_;                            // per window slot: the clip factor
  int64_t updates_ = 0;                                // successful optimizer steps so far
  int64_t updates_at_start_ = 0;                       // of them, before this run (resumed)
  int64_t next_norm_iteration_ = 0;
  int64_t next_batch_iteration_ = 0;
  int64_t base_iteration_ = 0;                         // iterations done before this run (resumed)
  int64_t run_iterations_ = 0;                         // iterations this run executes
  std::vector<float> initial_[3];                      // master, adam_m, adam_v from a checkpoint
  int64_t tasks_done_ = 0;
  std::unique_ptr<TokenLoader> loader_;
  EventQueue events_;
  std::vector<Job> jobs_;
  std::vector<size_t> free_jobs_;
  double t0_ = 0;
  RunResult result_;
};

CpuThreads& Run::ThreadsOf(int32_t resource) {
  auto& slot = threads_[static_cast<size_t>(resource)];
  if (!slot) {
    const int hw = config_.threads > 0 ? config_.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    slot = std::make_unique<CpuThreads>(hw);
  }
  return *slot;
}

Span Run::FindSpan(int32_t buffer, int kind, int64_t begin, int64_t n) const {
  const BufferState& buf = Buf(buffer);
  const int64_t end = begin + n, bytes = kKindBytes[kind];
  std::vector<const Piece*> parts;
  for (const Piece& p : buf.pieces) {
    if (p.kind != kind || p.begin >= end || begin >= p.begin + p.elements) continue;
    if (p.begin <= begin && end <= p.begin + p.elements) return {buf.data + p.offset + (begin - p.begin) * bytes, p.version};
    parts.push_back(&p);
  }
  std::sort(parts.begin(), parts.end(), [](const Piece* a, const Piece* b) { return a->begin < b->begin; });
  if (parts.empty() || parts.front()->begin > begin) return {};
  const int64_t base = parts.front()->offset + (begin - parts.front()->begin) * bytes;  // where `begin` is
  int64_t at = begin, version = parts.front()->version;
  for (const Piece* p : parts) {
    if (p->begin > at) return {};                                                  // a hole
    if (p->offset + (at - p->begin) * bytes != base + (at - begin) * bytes) return {};  // not side by side
    if (p->version != version) version = Versions::kMixed;
    at = std::max(at, p->begin + p->elements);
  }
  if (at < end) return {};
  return {buf.data + base, version};
}

Span Run::FindIn(const std::vector<int32_t>& buffers, int kind, int64_t begin, int64_t n, int32_t* which) const {
  for (int32_t b : buffers) {
    const Span span = FindSpan(b, kind, begin, n);
    if (span.data == nullptr) continue;
    if (which != nullptr) *which = b;
    return span;
  }
  if (which != nullptr) *which = kNoIndex;
  return {};
}

void Run::SetVersion(int32_t buffer, int kind, int64_t begin, int64_t n, int64_t version) {
  const int64_t end = begin + n, bytes = kKindBytes[kind];
  std::vector<Piece> out;
  for (const Piece& p : Buf(buffer).pieces) {
    const int64_t p_end = p.begin + p.elements;
    if (p.kind != kind || p.begin >= end || begin >= p_end) {
      out.push_back(p);
      continue;
    }
    const int64_t b = std::max(begin, p.begin), e = std::min(end, p_end);
    if (p.begin < b) out.push_back({kind, p.begin, b - p.begin, p.offset, p.version});
    out.push_back({kind, b, e - b, p.offset + (b - p.begin) * bytes, version});
    if (e < p_end) out.push_back({kind, e, p_end - e, p.offset + (e - p.begin) * bytes, p.version});
  }
  Buf(buffer).pieces = std::move(out);
}

void Run::Place(int32_t buffer, const Piece& piece) {
  auto& pieces = Buf(buffer).pieces;
  pieces.erase(std::remove_if(pieces.begin(), pieces.end(), [&](const Piece& q) {
    return q.kind == piece.kind && q.begin < piece.begin + piece.elements && piece.begin < q.begin + q.elements;
  }), pieces.end());
  pieces.push_back(piece);
}

int32_t Run::FirstBufferOnDevice(const TaskSpec& t, DeviceKind kind, bool allocs_first) const {
  auto on = [&](int32_t b) {
    return s_.devices()[static_cast<size_t>(s_.pools()[static_cast<size_t>(s_.buffers()[static_cast<size_t>(b)].pool)].device)].kind == kind;
  };
  const std::vector<int32_t>* lists[2] = {&t.allocs, &t.uses};
  if (!allocs_first) std::swap(lists[0], lists[1]);
  for (const auto* list : lists) {
    for (int32_t b : *list) {
      if (on(b)) return b;
    }
  }
  return kNoIndex;
}

int32_t Run::GpuBufferOf(const TaskSpec& t) const {
  for (const auto* list : {&t.allocs, &t.uses}) {
    for (int32_t b : *list) {
      if (HoldsGpuMemory(b)) return b;
    }
  }
  return kNoIndex;
}

const ResidentRun* Run::ResidentAt(int64_t at) const {
  auto it = std::upper_bound(resident_.begin(), resident_.end(), at, [](int64_t v, const ResidentRun& r) { return v < r.begin; });
  if (it == resident_.begin()) return nullptr;
  --it;
  return at < it->begin + it->n ? &*it : nullptr;
}

StatusOr<std::vector<exec::ParamRange>> Run::ParamsOnGpu(const TaskSpec& t, int64_t iteration, int64_t begin, int64_t n) const {
  std::vector<exec::ParamRange> out;
  const int64_t end = begin + n;
  for (int64_t at = begin; at < end;) {
    const char* data = nullptr;
    int64_t stop = end, version = Versions::kNever;
    for (int32_t b : t.uses) {
      if (!HoldsGpuMemory(b)) continue;
      const BufferState& buf = Buf(b);
      for (const Piece& p : buf.pieces) {
        if (p.kind != kParam16 || at < p.begin || at >= p.begin + p.elements) continue;
        data = buf.data + p.offset + (at - p.begin) * 2;
        stop = std::min(end, p.begin + p.elements);
        version = p.version;
        break;
      }
      if (data != nullptr) break;
    }
    if (data == nullptr) {
      const ResidentRun* r = ResidentAt(at);
      if (r == nullptr) {
        return FailedPrecondition(Who(t, iteration) + " reads param16 [" + std::to_string(at) + ", " + std::to_string(end) +
                                  ") on the GPU, but no GPU buffer it uses holds element " + std::to_string(at) + " and it has no GPU-resident home");
      }
      data = r->data + (at - r->begin) * 2;
      stop = std::min(end, r->begin + r->n);
      version = resident_versions_.Get(at, stop);
    }
    if (version != iteration) {
      return FailedPrecondition(Who(t, iteration) + " computes with param16 [" + std::to_string(at) + ", " + std::to_string(stop) + ") on the GPU at " +
                                VersionText(version) + ", expected version " + std::to_string(iteration) + " (the parameters after " +
                                std::to_string(iteration) + " updates): a dependency is missing");
    }
    out.push_back({at, stop - at, data});
    at = stop;
  }
  return out;
}

Status Run::TakeBuffer(BufferState& buf, const std::string& name) {
  buf.pieces.clear();
  if (buf.on_gpu) {
    auto block = device_->Allocate(buf.size);
    if (!block.ok()) return Status(block.status().code(), "buffer '" + name + "': " + block.status().message());
    buf.data = static_cast<char*>(*block);
    return Status::Ok();
  }
  buf.data = static_cast<char*>(blocks_.Take(buf.size));
  if (buf.data == nullptr) return ResourceExhausted("buffer '" + name + "': cannot allocate " + std::to_string(buf.size) + " bytes of host memory");
  return Status::Ok();
}

void Run::GiveBuffer(BufferState& buf) {
  if (buf.data == nullptr) return;
  if (buf.on_gpu) device_->Free(buf.data);
  else blocks_.Give(buf.data);
  buf.data = nullptr;
  buf.pieces.clear();
}

void Run::ReleaseBuffer(BufferState& buf) {
  if (buf.data == nullptr || (buf.on_gpu && !device_)) return;
  if (buf.on_gpu) device_->Free(buf.data);
  else blocks_.Release(buf.data);
  buf.data = nullptr;
}

Status Run::Setup() {
  TF_RETURN_IF_ERROR(CheckRunnable(s_, config_));
  TF_ASSIGN_OR_RETURN(device_, exec::MakeComputeDevice(options_.compute, config_, trainer_));
  window_ = std::max<int64_t>(1, s_.iteration_window);
  // Disks: checked before anything is written.
  TF_ASSIGN_OR_RETURN(std::vector<DiskDir> dirs, DiskDirsForSchedule(s_, options_.disks, options_.disk_root));
  TF_RETURN_IF_ERROR(MakeRootDirs(dirs, options_.disk_root));
  std::vector<int64_t> need(s_.devices().size(), 0);
  for (const TensorSpec& t : s_.tensors()) {
    need[static_cast<size_t>(t.device)] = std::max(need[static_cast<size_t>(t.device)], AlignUp(t.offset_bytes + t.size_bytes, kDirectAlignment));
  }
  for (DiskDir& d : dirs) d.required_bytes = need[static_cast<size_t>(s_.FindDevice(d.device))];
  TF_RETURN_IF_ERROR(CheckDiskDirs(dirs));
  // The tasks cut their requests into block_bytes pieces themselves (IoWindow), so the back-end
  // must not cut them again, and each device's ring must hold what its I/O resources keep in
  // flight at once (concurrency x the deepest queue_depth of each).
  StorageOptions so;
  {
    std::vector<int32_t> deepest(s_.resources().size(), 0);
    for (const TaskSpec& t : s_.tasks()) {
      if (t.op != Op::kRead && t.op != Op::kWrite) continue;
      so.request_bytes = std::max(so.request_bytes, AlignUp(IoBlockBytes(t), kDirectAlignment));
      if (t.resource != kNoIndex) deepest[static_cast<size_t>(t.resource)] = std::max(deepest[static_cast<size_t>(t.resource)], IoQueueDepth(t));
    }
    std::vector<int32_t> per_device(s_.devices().size(), 0);
    for (size_t r = 0; r < deepest.size(); ++r) {
      const ResourceSpec& res = s_.resources()[r];
      per_device[static_cast<size_t>(res.device)] += res.concurrency * deepest[r];
    }
    for (int32_t depth : per_device) so.queue_depth = std::max(so.queue_depth, depth);
  }
  TF_ASSIGN_OR_RETURN(storage_, NewStorage(options_.storage, so));
  io_ = storage_.get();
  if (!options_.faults.empty()) {
    fault_ = NewFaultInjectingStorage(storage_.get());
    for (const FaultRule& rule : options_.faults) fault_->AddRule(rule);
    io_ = fault_.get();
  }
  disk_of_device_.assign(s_.devices().size(), DiskFile{});
  home_.resize(s_.devices().size());
  for (size_t i = 0; i < dirs.size(); ++i) {
    const int32_t dev = s_.FindDevice(dirs[i].device);
    const std::string path = dirs[i].dir + "/tierflow-run.store";
    OpenOptions o;
    o.device = static_cast<int32_t>(i);
    o.create = true;
    o.truncate = true;
    o.direct = true;
    o.direct_fallback = true;
    TF_ASSIGN_OR_RETURN(OpenFile direct, io_->Open(path, o));
    OpenOptions ob = o;
    ob.truncate = false;
    ob.direct = false;
    TF_ASSIGN_OR_RETURN(OpenFile buffered, io_->Open(path, ob));
    DiskFile& f = disk_of_device_[static_cast<size_t>(dev)];
    f.direct = direct.id;
    f.buffered = buffered.id;
    f.alignment = direct.alignment;
    std::string why;
    if (!direct.direct) {
      why = "its file system refuses O_DIRECT";
    } else if (f.alignment > kDirectAlignment) {  // host blocks are kDirectAlignment-aligned
      why = "its O_DIRECT needs " + std::to_string(f.alignment) + "-byte alignment, more than host blocks have (" +
            std::to_string(kDirectAlignment) + ")";
    } else {
      for (const TensorSpec& ts : s_.tensors()) {
        if (ts.device != dev || (IsAligned(ts.offset_bytes, f.alignment) && IsAligned(ts.size_bytes, f.alignment))) continue;
        why = "tensor '" + ts.name + "' (bytes " + std::to_string(ts.offset_bytes) + " + " + std::to_string(ts.size_bytes) +
              ") is not aligned to the " + std::to_string(f.alignment) + " bytes its O_DIRECT needs";
        break;
      }
    }
    f.direct_all = why.empty();
    if (!f.direct_all) result_.buffered_disks.push_back(dirs[i].device + ": " + why);
    if (dirs[i].required_bytes > 0) {
      Status st = io_->Allocate(direct.id, dirs[i].required_bytes);
      if (!st.ok()) return Status(st.code(), "--disk '" + dirs[i].dir + "' (" + dirs[i].device + "): " + st.message());
    }
  }
  // Buffers in a GPU pool are gpu0 memory, from the compute device when the dispatcher admits
  // them. Persistent ones are not allocated: what they stand for is the device's own (activations
  // and workspace) or the GPU-resident parameters' home below.
  buffers_.resize(s_.buffers().size() * static_cast<size_t>(window_));
  for (size_t i = 0; i < buffers_.size(); ++i) {
    const BufferSpec& spec = s_.buffers()[i % s_.buffers().size()];
    buffers_[i].size = spec.size_bytes;
    buffers_[i].on_gpu = s_.devices()[static_cast<size_t>(s_.pools()[static_cast<size_t>(spec.pool)].device)].kind == DeviceKind::kGpu;
  }
  // What the device keeps in blocks, in use or for reuse, stays within the GPU pools' capacity.
  int64_t gpu_pool_bytes = 0;
  for (const PoolSpec& pool : s_.pools()) {
    if (s_.devices()[static_cast<size_t>(pool.device)].kind == DeviceKind::kGpu) gpu_pool_bytes += pool.capacity_bytes;
  }
  device_->LimitReserved(gpu_pool_bytes);
  int64_t persistent_gpu_bytes = 0;
  for (size_t b = 0; b < s_.buffers().size(); ++b) {
    const BufferSpec& spec = s_.buffers()[b];
    if (!spec.persistent) continue;
    if (buffers_[b].on_gpu) {
      persistent_gpu_bytes += spec.size_bytes;
      continue;
    }
    TF_RETURN_IF_ERROR(TakeBuffer(buffers_[b], spec.name));
  }
  // The GPU-resident parameters' home: one block of gpu0 memory, within the persistent GPU
  // buffers (DeepSpeed's persistent parameters; every partition when parameters stay on the GPU).
  {
    std::vector<std::pair<int64_t, int64_t>> ranges;  // [begin, end)
    for (const TensorSpec& ts : s_.tensors()) {
      if (KindOf(ts.kind) == kParam16 && s_.devices()[static_cast<size_t>(ts.device)].kind == DeviceKind::kGpu) {
        ranges.push_back({ts.element_offset, ts.element_offset + Elements(ts)});
      }
    }
    std::sort(ranges.begin(), ranges.end());
    int64_t bytes = 0;
    for (const auto& [begin, end] : ranges) {
      if (!resident_.empty() && begin <= resident_.back().begin + resident_.back().n) {
        const int64_t grown = std::max(resident_.back().begin + resident_.back().n, end) - resident_.back().begin;
        bytes += (grown - resident_.back().n) * 2;
        resident_.back().n = grown;
      } else {
        resident_.push_back({begin, end - begin, nullptr});
        bytes += (end - begin) * 2;
      }
    }
    if (bytes > persistent_gpu_bytes) {
      return InvalidArgument("schedule: its GPU-resident parameters need " + std::to_string(bytes) + " bytes of GPU memory, more than its persistent GPU buffers hold (" +
                             std::to_string(persistent_gpu_bytes) + ")");
    }
    if (bytes > 0) {
      auto block = device_->Allocate(bytes);
      if (!block.ok()) return Status(block.status().code(), "GPU-resident parameters: " + block.status().message());
      resident_block_ = *block;
      char* at = static_cast<char*>(resident_block_);
      for (ResidentRun& r : resident_) {
        r.data = at;
        at += r.n * 2;
      }
    }
  }
  TF_RETURN_IF_ERROR(BindHostHomes());
  // The last compute task of each (phase, layer) runs the layer's math.
  std::map<std::pair<int, int32_t>, int32_t> last;
  for (size_t i = 0; i < s_.tasks().size(); ++i) {
    const TaskSpec& t = s_.tasks()[i];
    if (t.op == Op::kCompute) last[{static_cast<int>(t.phase), t.layer}] = static_cast<int32_t>(i);
  }
  math_task_.assign(s_.tasks().size(), 0);
  for (const auto& [key, task] : last) math_task_[static_cast<size_t>(task)] = 1;
  for (int64_t l = 0; l < trainer_.layer_count(); ++l) {
    for (int phase : {static_cast<int>(Phase::kForward), static_cast<int>(Phase::kBackward)}) {
      if (!last.count({phase, static_cast<int32_t>(l)})) {
        return InvalidArgument("schedule: no " + std::string(PhaseName(static_cast<Phase>(phase))) +
                               " compute task for layer " + std::to_string(l) + " (every layer needs one)");
      }
    }
  }
  workers_.resize(s_.resources().size());
  threads_.resize(s_.resources().size());
  for (size_t r = 0; r < s_.resources().size(); ++r) workers_[r] = std::make_unique<Worker>();
  iterations_.resize(static_cast<size_t>(window_));
  for (auto& it : iterations_) trainer_.PrepareIteration(&it);
  norms_.resize(static_cast<size_t>(window_));
  completed_in_.assign(static_cast<size_t>(window_), 0);
  step_decided_.assign(static_cast<size_t>(window_), -1);
  adam_step_.assign(static_cast<size_t>(window_), 0);
  clip_.assign(static_cast<size_t>(window_), 1.0f);
  TF_ASSIGN_OR_RETURN(TokenLoader loader, TokenLoader::Create(config_.tokens, config_.batch, config_.seq, config_.data_seed));
  loader_ = std::make_unique<TokenLoader>(std::move(loader));
  TF_RETURN_IF_ERROR(LoadCheckpointIfAny());
  updates_at_start_ = updates_;
  for (int64_t i = 0; i < base_iteration_; ++i) loader_->Next();  // the batches already trained on
  run_iterations_ = options_.iterations - base_iteration_;
  if (run_iterations_ <= 0) {
    return FailedPrecondition("checkpoint '" + options_.checkpoint_dir + "' already has " + std::to_string(base_iteration_) +
                              " iterations; ask for more than that");
  }
  result_.first_iteration = base_iteration_;
  return InitialiseStores();
}

Status Run::BindHostHomes() {
  host_home_.assign(s_.tensors().size(), {kNoIndex, 0});
  std::vector<int64_t> packed(s_.buffers().size(), 0);
  for (const TaskSpec& t : s_.tasks()) {
    for (int32_t ti : t.tensors) {
      const TensorSpec& ts = T(ti);
      const int kind = KindOf(ts.kind);
      // Gradients in host memory are placed by the d2h copies that write them (at their element
      // offset in the rank's flat buffer), not bound here.
      if (s_.devices()[static_cast<size_t>(ts.device)].kind != DeviceKind::kHost || kind == kGrad || kind == kGrad16) continue;
      int32_t home = kNoIndex;
      for (int32_t b : t.uses) {
        if (s_.buffers()[static_cast<size_t>(b)].persistent && !OnGpu(b)) {
          home = b;
          break;
        }
      }
      if (home == kNoIndex) {
        return InvalidArgument("task '" + t.id + "' names " + Range(ts) + " kept in host memory, but uses no persistent host buffer to keep it in");
      }
      auto& bound = host_home_[static_cast<size_t>(ti)];
      if (bound.first == kNoIndex) {
        if (packed[static_cast<size_t>(home)] + ts.size_bytes > s_.buffers()[static_cast<size_t>(home)].size_bytes) {
          return InvalidArgument("task '" + t.id + "': the host-memory state it names does not fit buffer '" + s_.buffers()[static_cast<size_t>(home)].name + "'");
        }
        bound = {home, packed[static_cast<size_t>(home)]};
        packed[static_cast<size_t>(home)] += ts.size_bytes;
      } else if (bound.first != home) {
        return InvalidArgument("task '" + t.id + "' keeps " + Range(ts) + " in buffer '" + s_.buffers()[static_cast<size_t>(home)].name +
                               "', another task in '" + s_.buffers()[static_cast<size_t>(bound.first)].name + "': host-memory state has one home");
      }
    }
  }
  return Status::Ok();
}

// Writes the initial state to every disk home the schedule names (version 0), into the host
// homes, and sets the GPU's bf16 parameters.
Status Run::InitialiseStores() {
  const std::vector<float> master = initial_[0].empty() ? trainer_.InitialMaster() : initial_[0];
  std::vector<uint16_t> p16(master.size());
  for (size_t i = 0; i < master.size(); ++i) p16[i] = Fp32ToBf16(master[i]);
  for (const ResidentRun& r : resident_) {
    TF_RETURN_IF_ERROR(device_->H2D(r.data, p16.data() + r.begin, r.n * 2, nullptr));
    resident_versions_.Set(r.begin, r.begin + r.n, 0);
  }
  const std::vector<float> zeros(master.size(), 0.0f);
  auto initial = [&](int kind, int64_t begin) -> const void* {
    const std::vector<float>& moment = kind == kAdamM ? initial_[1] : initial_[2];
    return kind == kParam16 ? static_cast<const void*>(p16.data() + begin)
           : kind == kMaster ? static_cast<const void*>(master.data() + begin)
           : !moment.empty() ? static_cast<const void*>(moment.data() + begin)
                             : static_cast<const void*>(zeros.data() + begin);
  };
  for (size_t ti = 0; ti < s_.tensors().size(); ++ti) {
    const auto [buffer, offset] = host_home_[ti];
    if (buffer == kNoIndex) continue;
    const TensorSpec& ts = s_.tensors()[ti];
    const int kind = KindOf(ts.kind);
    std::memcpy(Buf(buffer).data + offset, initial(kind, ts.element_offset), static_cast<size_t>(ts.size_bytes));
    Place(buffer, {kind, ts.element_offset, Elements(ts), offset, 0});
  }
  CompletionQueue done;
  std::vector<char*> staged;
  size_t submitted = 0;
  for (const TensorSpec& t : s_.tensors()) {
    const int kind = KindOf(t.kind);
    const DiskFile& f = disk_of_device_[static_cast<size_t>(t.device)];
    if (f.direct < 0 || kind == kGrad || kind == kGrad16) continue;
    const int64_t n = Elements(t);
    // Tensors overlap (a unit's range, a sub-group's): write each range once.
    if (home_[static_cast<size_t>(t.device)][kind].Get(t.element_offset, t.element_offset + n) == 0) continue;
    const void* src = initial(kind, t.element_offset);
    char* block = static_cast<char*>(blocks_.Take(t.size_bytes));
    if (block == nullptr) return ResourceExhausted("initial state: cannot allocate a staging buffer");
    std::memcpy(block, src, static_cast<size_t>(t.size_bytes));
    staged.push_back(block);
    IoRequest r{IoOp::kWrite, f.fd(), t.offset_bytes, t.size_bytes, block, submitted};
    TF_RETURN_IF_ERROR(io_->Submit({&r, 1}, &done));
    ++submitted;
    home_[static_cast<size_t>(t.device)][kind].Set(t.element_offset, t.element_offset + n, 0);
  }
  std::vector<IoCompletion> completions;
  while (completions.size() < submitted) done.Wait(&completions, 1);
  Status first;
  for (const IoCompletion& c : completions) {
    if (!c.status.ok() && first.ok()) first = c.status;
  }
  for (char* b : staged) blocks_.Release(b);
  if (!first.ok()) return Status(first.code(), "writing the initial state: " + first.message());
  return Status::Ok();
}

Status Run::PrepareIo(const TaskSpec& t, Job& job, int64_t iteration) {
  const bool read = t.op == Op::kRead;
  const int32_t buffer = read ? (t.allocs.empty() ? (t.uses.empty() ? kNoIndex : t.uses[0]) : t.allocs[0])
                              : (t.uses.empty() ? kNoIndex : t.uses[0]);
  if (t.tensors.empty()) return Status::Ok();  // bytes with no state (none in our policies)
  if (buffer == kNoIndex) return InvalidArgument(Who(t, iteration) + ": moves tensors but names no buffer");
  BufferState& buf = Buf(buffer);
  struct Move {
    int32_t tensor;
    int64_t offset;
    int64_t version;
    char* bounce;  // an aligned stand-in for a buffer place O_DIRECT cannot take, or null
  };
  std::vector<Move> moves;
  std::vector<IoRequest> requests;
  int64_t packed = 0;
  for (int32_t ti : t.tensors) {
    const TensorSpec& ts = T(ti);
    const int kind = KindOf(ts.kind);
    const DiskFile& f = disk_of_device_[static_cast<size_t>(ts.device)];
    if (f.direct < 0) {
      return InvalidArgument(Who(t, iteration) + ": " + Range(ts) + " lives on '" + s_.devices()[static_cast<size_t>(ts.device)].name +
                             "', not a disk; " + std::string(OpName(t.op)) + " moves state between a disk and host memory");
    }
    const int64_t n = Elements(ts);
    int64_t offset = packed, version = 0;
    if (read) {
      version = home_[static_cast<size_t>(ts.device)][kind].Get(ts.element_offset, ts.element_offset + n);
      if (version < 0) {
        return FailedPrecondition(Who(t, iteration) + " reads " + Range(ts) + " from '" + s_.devices()[static_cast<size_t>(ts.device)].name +
                                  "', which holds " + VersionText(version) + " of it: no task wrote it there");
      }
      if (packed + ts.size_bytes > buf.size) return InvalidArgument(Who(t, iteration) + ": its tensors do not fit buffer '" + s_.buffers()[static_cast<size_t>(buffer)].name + "'");
      packed += ts.size_bytes;
    } else {
      const Span span = FindSpan(buffer, kind, ts.element_offset, n);
      if (span.data == nullptr) {
        return FailedPrecondition(Who(t, iteration) + " writes " + Range(ts) + " from buffer '" + s_.buffers()[static_cast<size_t>(buffer)].name +
                                  "', which does not hold it");
      }
      if (span.version < 0) return FailedPrecondition(Who(t, iteration) + " writes " + Range(ts) + ", whose parts in its buffer are of different versions");
      offset = span.data - buf.data;
      version = span.version;
    }
    (f.direct_all ? result_.direct_io_bytes : result_.buffered_io_bytes) += ts.size_bytes;
    char* place = buf.data + offset;
    char* bounce = nullptr;
    if (f.direct_all && !IsAlignedPtr(place, f.alignment)) {
      // The file is direct-only: a request from a buffer place it cannot take goes through an
      // aligned block (copied in now for a write, out in finish for a read).
      bounce = static_cast<char*>(blocks_.Take(ts.size_bytes));
      if (bounce == nullptr) return ResourceExhausted(Who(t, iteration) + ": cannot allocate an aligned staging block");
      if (!read) std::memcpy(bounce, place, static_cast<size_t>(ts.size_bytes));
    }
    requests.push_back({read ? IoOp::kRead : IoOp::kWrite, f.fd(), ts.offset_bytes, ts.size_bytes, bounce != nullptr ? bounce : place, 0});
    moves.push_back({ti, offset, version, bounce});
  }
  job.finish = [this, moves, read, buffer] {
    for (const Move& m : moves) {
      const TensorSpec& ts = T(m.tensor);
      const int kind = KindOf(ts.kind);
      const int64_t n = Elements(ts);
      if (m.bounce != nullptr) {
        if (read) std::memcpy(Buf(buffer).data + m.offset, m.bounce, static_cast<size_t>(ts.size_bytes));
        blocks_.Give(m.bounce);
      }
      if (read) Buf(buffer).pieces.push_back({kind, ts.element_offset, n, m.offset, m.version});
      else home_[static_cast<size_t>(ts.device)][kind].Set(ts.element_offset, ts.element_offset + n, m.version);
    }
  };
  // The schedule's request shape: pieces of block_bytes, queue_depth of them in flight.
  std::vector<IoRequest> pieces = CutRequests(requests, IoBlockBytes(t));
  const auto window = static_cast<size_t>(IoQueueDepth(t));
  const size_t index = static_cast<size_t>(&job - jobs_.data());
  job.sink = std::make_unique<IoWindow>(io_, std::move(pieces), window,
                                        [this, index](Status st) { events_.Push({index, std::move(st)}); });
  job.sink->Start();
  return Status::Ok();
}

Status Run::PrepareCopy(const TaskSpec& t, Job& job, int64_t iteration) {
  if (t.op == Op::kH2D) {
    // From the host buffer it uses into the GPU buffer it allocates (or uses), packed in list
    // order; without one, into the parameters' GPU-resident home.
    const int32_t buffer = FirstBufferOnDevice(t, DeviceKind::kHost, false);
    const int32_t gpu = GpuBufferOf(t);
    struct Copy {
      char* dst;
      const char* src;
      int64_t bytes;
    };
    std::vector<Copy> copies;
    std::vector<Piece> placed;                                    // into `gpu`
    std::vector<std::pair<const TensorSpec*, int64_t>> refreshed;  // at the resident home
    int64_t packed = 0;
    for (int32_t ti : t.tensors) {
      const TensorSpec& ts = T(ti);
      const int kind = KindOf(ts.kind);
      if (kind != kParam16) return InvalidArgument(Who(t, iteration) + ": h2d of " + ts.kind + " (only param16 goes to the GPU)");
      const int64_t n = Elements(ts);
      const Span p = buffer == kNoIndex ? Span{} : FindSpan(buffer, kind, ts.element_offset, n);
      if (p.data == nullptr) return FailedPrecondition(Who(t, iteration) + " copies " + Range(ts) + " to the GPU, but no host buffer it uses holds it");
      const char* src = p.data;
      if (gpu != kNoIndex) {
        if (packed + n * 2 > Buf(gpu).size) {
          return InvalidArgument(Who(t, iteration) + ": " + Range(ts) + " does not fit GPU buffer '" + s_.buffers()[static_cast<size_t>(gpu)].name + "'");
        }
        copies.push_back({Buf(gpu).data + packed, src, n * 2});
        placed.push_back({kind, ts.element_offset, n, packed, p.version});
        packed += n * 2;
        continue;
      }
      const ResidentRun* r = ResidentAt(ts.element_offset);
      if (r == nullptr || ts.element_offset + n > r->begin + r->n) {
        return FailedPrecondition(Who(t, iteration) + " copies " + Range(ts) + " to the GPU, but it names no GPU buffer for it and it has no GPU-resident home");
      }
      copies.push_back({r->data + (ts.element_offset - r->begin) * 2, src, n * 2});
      refreshed.push_back({&ts, p.version});
    }
    job.work = [this, copies, span = &job.device_span] {
      for (const Copy& c : copies) {
        exec::DeviceSpan one;
        TF_RETURN_IF_ERROR(device_->H2D(c.dst, c.src, c.bytes, &one));
        span->Merge(one);
      }
      return Status::Ok();
    };
    job.finish = [this, gpu, placed, refreshed] {
      for (const Piece& p : placed) Place(gpu, p);
      for (const auto& [ts, v] : refreshed) resident_versions_.Set(ts->element_offset, ts->element_offset + Elements(*ts), v);
    };
    return Status::Ok();
  }
  // d2h: gradients leave the GPU; the norm is accumulated per tensor on the way (as DeepSpeed
  // does per partition while reducing).
  const int32_t buffer = FirstBufferOnDevice(t, DeviceKind::kHost, true);
  if (buffer == kNoIndex) return InvalidArgument(Who(t, iteration) + ": d2h names no host buffer");
  IterationState& it = Iter(iteration);
  struct Out {
    const TensorSpec* ts;
    int64_t offset;
    const float* src;
  };
  std::vector<Out> outs;
  int64_t packed = 0;
  for (int32_t ti : t.tensors) {
    const TensorSpec& ts = T(ti);
    const int kind = KindOf(ts.kind);
    if (kind != kGrad && kind != kGrad16) return InvalidArgument(Who(t, iteration) + ": d2h of " + ts.kind + " (only gradients leave the GPU)");
    const int64_t n = Elements(ts);
    // The layer's fp32 gradients, in a GPU buffer it uses (the backward that computed them
    // allocated it).
    const float* src = nullptr;
    int64_t v = Versions::kNever;
    for (int32_t b : t.uses) {
      if (!HoldsGpuMemory(b)) continue;
      const Span p = FindSpan(b, kGrad, ts.element_offset, n);
      if (p.data == nullptr) continue;
      src = reinterpret_cast<const float*>(p.data);
      v = p.version;
      break;
    }
    if (v != iteration) {
      return FailedPrecondition(Who(t, iteration) + " copies " + Range(ts) + " off the GPU, where the GPU buffers it uses hold " + VersionText(v) +
                                " of it, not iteration " + std::to_string(iteration) + "'s: it runs before the backward that computes it");
    }
    const int64_t offset = kind == kGrad16 ? ts.element_offset * 2 : packed;
    if (offset + ts.size_bytes > Buf(buffer).size) return InvalidArgument(Who(t, iteration) + ": gradients do not fit buffer '" + s_.buffers()[static_cast<size_t>(buffer)].name + "'");
    packed += ts.size_bytes;
    outs.push_back({&ts, offset, src});
  }
  auto checks = std::make_shared<std::vector<cpu::GradCheck>>(outs.size());
  const float grad_scale = 1.0f / it.loss_scale;
  CpuThreads* threads = &ThreadsOf(t.resource);
  char* base = Buf(buffer).data;
  job.work = [this, outs, checks, grad_scale, threads, base, span = &job.device_span] {
    for (size_t i = 0; i < outs.size(); ++i) {
      const TensorSpec& ts = *outs[i].ts;
      const int64_t n = Elements(ts);
      exec::DeviceSpan one;
      TF_ASSIGN_OR_RETURN((*checks)[i], device_->D2HGrad(base + outs[i].offset, outs[i].src, n, KindOf(ts.kind) != kGrad,
                                                         grad_scale, *threads, &one));
      span->Merge(one);
    }
    return Status::Ok();
  };
  job.finish = [this, outs, checks, buffer, iteration] {
    NormAccumulator& norm = norms_[static_cast<size_t>(iteration % window_)];
    for (size_t i = 0; i < outs.size(); ++i) {
      const TensorSpec& ts = *outs[i].ts;
      const int64_t n = Elements(ts);
      Place(buffer, {KindOf(ts.kind), ts.element_offset, n, outs[i].offset, iteration});
      norm.by_begin[ts.element_offset] = {n, (*checks)[i]};
    }
  };
  return Status::Ok();
}

Status Run::PrepareCompute(const TaskSpec& t, int32_t task, Job& job, int64_t iteration) {
  // Every parameter it names must be on the GPU, where it reads (ParamsOnGpu), at this
  // iteration's version: the updates of iterations 0 .. iteration - 1.
  for (int32_t ti : t.tensors) {
    const TensorSpec& ts = T(ti);
    if (KindOf(ts.kind) != kParam16) continue;
    TF_RETURN_IF_ERROR(ParamsOnGpu(t, iteration, ts.element_offset, Elements(ts)).status());
  }
  if (!math_task_[static_cast<size_t>(task)]) return Status::Ok();
  IterationState* it = &Iter(iteration);
  const int64_t layer = t.layer;
  // The layer's math reads the whole layer: the gathered buffers of its units, which this task
  // uses, and the resident home.
  TF_ASSIGN_OR_RETURN(std::vector<exec::ParamRange> params,
                      ParamsOnGpu(t, iteration, trainer_.LayerBegin(layer), trainer_.LayerElements(layer)));
  CpuThreads* threads = &ThreadsOf(t.resource);
  if (t.phase == Phase::kForward) {
    if (layer == 0) {
      if (it->iteration != iteration) {  // the first forward step of an iteration takes its batch
        if (iteration != next_batch_iteration_) {
          return FailedPrecondition(Who(t, iteration) + ": iteration " + std::to_string(iteration) + " starts before iteration " +
                                    std::to_string(next_batch_iteration_));
        }
        ++next_batch_iteration_;
        TokenBatch batch = loader_->Next();
        it->tokens = std::move(batch.inputs);
        it->targets = std::move(batch.targets);
        it->iteration = iteration;
      }
    } else if (it->iteration != iteration) {
      return FailedPrecondition(Who(t, iteration) + ": layer " + std::to_string(layer) + "'s forward runs before the embedding's");
    }
    job.work = [this, layer, params = std::move(params), it, threads, span = &job.device_span] {
      return device_->Forward(layer, params, it, *threads, span);
    };
    return Status::Ok();
  }
  if (layer == trainer_.layer_count() - 1) {
    // The head's backward starts the gradients: they are scaled by the scale after every earlier
    // iteration's overflow check.
    if (global_check_ && next_norm_iteration_ != iteration) {
      return FailedPrecondition(Who(t, iteration) + ": backward starts before iteration " + std::to_string(next_norm_iteration_) +
                                "'s overflow check decided the loss scale");
    }
    it->loss_scale = scaler_.scale();
  }
  // The layer's gradients go to the GPU buffer it allocates, else the first it uses (a buffer the
  // fetch allocated ahead of the layer: docs/schedule-format.md).
  const int32_t grads = GpuBufferOf(t);
  const int64_t begin = trainer_.LayerBegin(layer), n = trainer_.LayerElements(layer);
  if (grads == kNoIndex) {
    return FailedPrecondition(Who(t, iteration) + ": the backward of layer " + std::to_string(layer) +
                              " names no GPU buffer for the layer's gradients (plan the schedule again with this tierflow)");
  }
  for (const Piece& p : Buf(grads).pieces) {
    if (p.kind == kParam16) {
      return InvalidArgument(Who(t, iteration) + ": GPU buffer '" + s_.buffers()[static_cast<size_t>(grads)].name +
                             "', where the backward of layer " + std::to_string(layer) + " would write its gradients, holds parameters");
    }
  }
  if (Buf(grads).size < n * 4) {
    return InvalidArgument(Who(t, iteration) + ": layer " + std::to_string(layer) + "'s gradients (" + std::to_string(n * 4) +
                           " bytes) do not fit GPU buffer '" + s_.buffers()[static_cast<size_t>(grads)].name + "'");
  }
  auto* out = reinterpret_cast<float*>(Buf(grads).data);
  job.work = [this, layer, params = std::move(params), out, it, threads, span = &job.device_span] {
    return device_->Backward(layer, params, out, it, *threads, span);
  };
  job.finish = [this, grads, begin, n, iteration] {
    auto& pieces = Buf(grads).pieces;
    pieces.erase(std::remove_if(pieces.begin(), pieces.end(), [](const Piece& p) { return p.kind == kGrad; }), pieces.end());
    pieces.push_back({kGrad, begin, n, 0, iteration});
  };
  return Status::Ok();
}

Status Run::PrepareOptimizer(const TaskSpec& t, Job& job, int64_t iteration) {
  if (t.kernel != "adam") return InvalidArgument(Who(t, iteration) + ": optimizer kernel '" + t.kernel + "' (tierflow run has adam)");
  const size_t slot = static_cast<size_t>(iteration % window_);
  if (global_check_ && step_decided_[slot] < 0) {
    return FailedPrecondition(Who(t, iteration) + " runs before the overflow check and gradient norm of its iteration");
  }
  float* state[3] = {nullptr, nullptr, nullptr};
  int32_t where[3] = {kNoIndex, kNoIndex, kNoIndex};
  int64_t begin = -1, n = 0;
  for (int32_t ti : t.tensors) {
    const TensorSpec& ts = T(ti);
    const int kind = KindOf(ts.kind);
    if (kind < kMaster) continue;
    begin = ts.element_offset;
    n = Elements(ts);
    const Span p = FindIn(t.uses, kind, begin, n, &where[kind - kMaster]);
    if (p.data == nullptr) return FailedPrecondition(Who(t, iteration) + " updates " + Range(ts) + " but no buffer it uses holds it");
    if (p.version != iteration) {
      return FailedPrecondition(Who(t, iteration) + " updates " + Range(ts) + " at " + VersionText(p.version) + ", expected version " +
                                std::to_string(iteration));
    }
    state[kind - kMaster] = reinterpret_cast<float*>(p.data);
  }
  if (begin < 0) return InvalidArgument(Who(t, iteration) + ": adam names no master, adam_m, adam_v tensors");
  const Span g = FindIn(t.uses, kGrad, begin, n);
  if (g.data == nullptr) {
    return FailedPrecondition(Who(t, iteration) + ": no buffer it uses holds the fp32 gradient [" + std::to_string(begin) + ", " +
                              std::to_string(begin + n) + ")");
  }
  if (g.version != iteration) {
    return FailedPrecondition(Who(t, iteration) + " uses the gradient of " + VersionText(g.version) + ", expected iteration " +
                              std::to_string(iteration) + "'s");
  }
  const float* grad = reinterpret_cast<const float*>(g.data);
  // Without a global check every step is taken (CheckRunnable: no loss scaling, no clipping).
  const bool update = global_check_ ? step_decided_[slot] == 1 : true;
  const int64_t step = global_check_ ? adam_step_[slot] : updates_at_start_ + iteration + 1;
  const float grad_scale = UpdateGradScale(Iter(iteration).loss_scale, global_check_ ? clip_[slot] : 1.0f);
  CpuThreads* threads = &ThreadsOf(t.resource);
  const AdamWConfig cfg = config_.adam;
  job.work = [=] {
    if (update) cpu::AdamW(state[0], state[1], state[2], grad, nullptr, n, step, grad_scale, cfg, *threads);
    return Status::Ok();
  };
  job.finish = [this, where, begin, n, iteration] {
    for (int k = 0; k < 3; ++k) SetVersion(where[k], kMaster + k, begin, n, iteration + 1);
  };
  return Status::Ok();
}

Status Run::PrepareConvert(const TaskSpec& t, Job& job, int64_t iteration) {
  const size_t slot = static_cast<size_t>(iteration % window_);
  if (t.kernel == "overflow_check_and_norm") {
    if (iteration != next_norm_iteration_) {
      return FailedPrecondition(Who(t, iteration) + ": overflow checks out of iteration order");
    }
    // Every gradient must have left the GPU (and been checked) before the check finishes.
    int64_t at = 0;
    for (const auto& [begin, part] : norms_[slot].by_begin) {
      if (begin != at) break;
      at += part.first;
    }
    if (at != trainer_.layout().total) {
      return FailedPrecondition(Who(t, iteration) + " finishes the gradient norm, but the gradients from element " + std::to_string(at) +
                                " on have not left the GPU yet: a dependency is missing");
    }
    job.finish = [this, slot, iteration] {
      NormAccumulator& norm = norms_[slot];
      cpu::GradCheck total;
      for (const auto& entry : norm.by_begin) total = cpu::CombineGradChecks(total, entry.second.second);
      const bool update = scaler_.Update(total.finite);
      step_decided_[slot] = update ? 1 : 0;
      clip_[slot] = cpu::ClipCoefficient(total, config_.gradient_clipping);
      if (update) ++updates_;
      adam_step_[slot] = updates_;
      norm.by_begin.clear();
      next_norm_iteration_ = iteration + 1;
    };
    return Status::Ok();
  }
  if (t.kernel == "fp32_to_bf16") {
    const int32_t out = t.allocs.empty() ? kNoIndex : t.allocs[0];
    if (out == kNoIndex) return InvalidArgument(Who(t, iteration) + ": fp32_to_bf16 allocates no output buffer");
    struct Conv {
      const float* src;
      int64_t offset, begin, n, version;
    };
    std::vector<Conv> convs;
    int64_t packed = 0;
    for (int32_t ti : t.tensors) {
      const TensorSpec& ts = T(ti);
      const int64_t n = Elements(ts);
      const Span p = FindIn(t.uses, kMaster, ts.element_offset, n);
      if (p.data == nullptr) return FailedPrecondition(Who(t, iteration) + ": no buffer it uses holds the master weights of " + Range(ts));
      const float* src = reinterpret_cast<const float*>(p.data);
      const int64_t version = p.version;
      if (version != iteration + 1) {
        return FailedPrecondition(Who(t, iteration) + " converts master weights at " + VersionText(version) + ", expected version " +
                                  std::to_string(iteration + 1) + " (after this iteration's update)");
      }
      convs.push_back({src, packed, ts.element_offset, n, version});
      packed += ts.size_bytes;
    }
    if (packed > Buf(out).size) return InvalidArgument(Who(t, iteration) + ": its output does not fit buffer '" + s_.buffers()[static_cast<size_t>(out)].name + "'");
    CpuThreads* threads = &ThreadsOf(t.resource);
    char* base = Buf(out).data;
    job.work = [convs, threads, base] {
      for (const Conv& c : convs) cpu::Fp32ToBf16(reinterpret_cast<uint16_t*>(base + c.offset), c.src, c.n, *threads);
      return Status::Ok();
    };
    job.finish = [this, convs, out] {
      for (const Conv& c : convs) Buf(out).pieces.push_back({kParam16, c.begin, c.n, c.offset, c.version});
    };
    return Status::Ok();
  }
  if (t.kernel == "bf16_to_fp32") {
    // The bf16 gradients kept in host memory, widened into the fp32 gradient buffer.
    if (t.tensors.size() != 1) return InvalidArgument(Who(t, iteration) + ": bf16_to_fp32 names one grad16 tensor");
    const TensorSpec& ts = T(t.tensors[0]);
    const int64_t n = Elements(ts);
    // The sub-group's bf16 gradients, every unit's part of this iteration, side by side in the
    // host buffer the d2h copies put them in.
    int32_t src_buf = kNoIndex;
    const Span p = FindIn(t.uses, kGrad16, ts.element_offset, n, &src_buf);
    if (p.data == nullptr) return FailedPrecondition(Who(t, iteration) + ": no buffer it uses holds " + Range(ts));
    if (p.version != iteration) {
      return FailedPrecondition(Who(t, iteration) + " widens gradients of " + VersionText(p.version) + ", expected iteration " +
                                std::to_string(iteration) + "'s: a dependency on a gradient copy is missing");
    }
    int32_t out = t.allocs.empty() ? kNoIndex : t.allocs[0];
    for (int32_t b : t.uses) {
      if (out == kNoIndex && b != src_buf) out = b;
    }
    if (out == kNoIndex || Buf(out).size < n * 4) return InvalidArgument(Who(t, iteration) + ": bf16_to_fp32 has no fp32 output buffer of " + std::to_string(n * 4) + " bytes");
    const uint16_t* src = reinterpret_cast<const uint16_t*>(p.data);
    float* dst = reinterpret_cast<float*>(Buf(out).data);
    CpuThreads* threads = &ThreadsOf(t.resource);
    job.work = [src, dst, n, threads] {
      threads->ParallelFor(n, 1 << 14, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) dst[i] = Bf16ToFp32(src[i]);
      });
      return Status::Ok();
    };
    const int64_t begin = ts.element_offset;
    job.finish = [this, out, begin, n, iteration] { Place(out, {kGrad, begin, n, 0, iteration}); };
    return Status::Ok();
  }
  return InvalidArgument(Who(t, iteration) + ": convert kernel '" + t.kernel + "' is not supported by tierflow run");
}

Status Run::Start(const Instance& inst, size_t job_index) {
  const TaskSpec& t = s_.tasks()[static_cast<size_t>(inst.task)];
  ctx_iteration_ = inst.iteration;
  Job& job = jobs_[job_index];
  job = Job{};
  job.instance = inst;
  job.start_s = MonotonicSeconds() - t0_;
  // Disk I/O and CPU work touch host memory only: a GPU buffer there is gpu0 memory (device
  // memory on a real GPU), which they cannot address.
  if (t.op == Op::kRead || t.op == Op::kWrite || t.op == Op::kOptimizer || t.op == Op::kConvert) {
    for (const auto* list : {&t.allocs, &t.uses}) {
      for (int32_t b : *list) {
        if (!OnGpu(b)) continue;
        const BufferSpec& spec = s_.buffers()[static_cast<size_t>(b)];
        return InvalidArgument(Who(t, inst.iteration) + ": buffer '" + spec.name + "' is in GPU pool '" +
                               s_.pools()[static_cast<size_t>(spec.pool)].name + "', and a " + std::string(OpName(t.op)) + " task works on host memory");
      }
    }
  }
  // Buffers it allocates get memory now (the dispatcher has admitted them to their pools).
  for (int32_t b : t.allocs) {
    Status st = TakeBuffer(Buf(b), s_.buffers()[static_cast<size_t>(b)].name);
    if (!st.ok()) return Status(st.code(), Who(t, inst.iteration) + ": " + st.message());
  }
  Status st;
  switch (t.op) {
    case Op::kRead:
    case Op::kWrite:
      st = PrepareIo(t, job, inst.iteration);
      if (st.ok() && job.sink == nullptr) events_.Push({job_index, Status::Ok()});
      return st;
    case Op::kH2D:
    case Op::kD2H: st = PrepareCopy(t, job, inst.iteration); break;
    case Op::kCompute: st = PrepareCompute(t, inst.task, job, inst.iteration); break;
    case Op::kOptimizer: st = PrepareOptimizer(t, job, inst.iteration); break;
    case Op::kConvert: st = PrepareConvert(t, job, inst.iteration); break;
    default: break;  // collectives of one rank, alloc, free, barrier: nothing to do
  }
  TF_RETURN_IF_ERROR(st);
  if (!job.work || t.resource == kNoIndex) {
    if (job.work) TF_RETURN_IF_ERROR(job.work());
    events_.Push({job_index, Status::Ok()});
    return Status::Ok();
  }
  if (options_.plain_loop) {
    events_.Push({job_index, job.work()});
    return Status::Ok();
  }
  workers_[static_cast<size_t>(t.resource)]->Post([this, job_index] {
    Status s = jobs_[job_index].work();
    events_.Push({job_index, s});
  });
  return Status::Ok();
}

// Every task of `iteration` has completed: report its loss, checkpoint when due.
Status Run::IterationDone(int64_t iteration) {
  step_decided_[static_cast<size_t>(iteration % window_)] = -1;
  if (!global_check_) {  // every step was taken; the per-tensor checks went unused
    updates_ = updates_at_start_ + iteration + 1;
    norms_[static_cast<size_t>(iteration % window_)].by_begin.clear();
  }
  const double loss = Iter(iteration).loss;
  result_.loss.push_back(loss);
  if (options_.on_iteration) options_.on_iteration(base_iteration_ + iteration, loss);
  const int64_t done = base_iteration_ + iteration + 1;
  if (options_.checkpoint_every > 0 && !options_.checkpoint_dir.empty() && done % options_.checkpoint_every == 0) {
    return SaveTrainingCheckpoint(iteration);
  }
  return Status::Ok();
}

void Run::Finish(Job& job, const TaskSpec& t) {
  ctx_iteration_ = job.instance.iteration;
  if (job.finish) job.finish();
  TraceRecord r;
  r.iteration = job.instance.iteration;
  r.task = t.id;
  r.op = t.op;
  r.resource = t.resource == kNoIndex ? "" : s_.resources()[static_cast<size_t>(t.resource)].name;
  r.layer = t.layer;
  r.phase = t.phase;
  r.bytes = t.bytes;
  r.flops = t.flops;
  r.start_s = job.start_s;
  r.end_s = IsInstantOp(t.op) ? job.start_s : MonotonicSeconds() - t0_;
  r.source = "real";
  if (!job.device_span.empty()) {
    r.device_start_s = job.device_span.start_s - t0_;
    r.device_end_s = job.device_span.end_s - t0_;
  }
  if (t.op == Op::kRead || t.op == Op::kWrite) {  // the shape it ran with, as sim records it
    r.block_bytes = IoBlockBytes(t);
    r.queue_depth = IoQueueDepth(t);
  }
  // As sim records it (docs/trace-format.md): the threads a CPU task ran on, the rank count of a
  // collective, 0 otherwise.
  if (t.op == Op::kOptimizer || t.op == Op::kConvert) {
    r.threads = t.resource == kNoIndex ? 0 : ThreadsOf(t.resource).threads();
  } else if (t.op == Op::kAllGather || t.op == Op::kReduceScatter || t.op == Op::kAllReduce) {
    r.threads = t.ranks;
  }
  result_.records.push_back(std::move(r));
  for (int32_t b : t.frees) GiveBuffer(Buf(b));
  job.sink.reset();
}

StatusOr<RunResult> Run::ExecutePlainLoop() {
  const std::vector<int32_t> order = s_.TopologicalOrder();
  jobs_.resize(1);
  t0_ = MonotonicSeconds();
  for (int64_t iteration = 0; iteration < run_iterations_; ++iteration) {
    for (int32_t task : order) {
      const TaskSpec& t = s_.tasks()[static_cast<size_t>(task)];
      TF_RETURN_IF_ERROR(Start({task, iteration}, 0));
      Event e = events_.Pop();
      if (!e.status.ok()) return Status(e.status.code(), Who(t, iteration) + ": " + e.status.message());
      Finish(jobs_[0], t);
    }
    TF_RETURN_IF_ERROR(IterationDone(iteration));
  }
  result_.wall_s = MonotonicSeconds() - t0_;
  result_.tasks = run_iterations_ * static_cast<int64_t>(order.size());
  result_.gpu_memory = device_->memory_peak();
  TF_RETURN_IF_ERROR(ReadState(kMaster, run_iterations_, &result_.master));
  return std::move(result_);
}

StatusOr<RunResult> Run::Execute() {
  TF_RETURN_IF_ERROR(Setup());
  if (options_.plain_loop) return ExecutePlainLoop();
  Dispatcher d(s_, run_iterations_);
  t0_ = MonotonicSeconds();
  std::vector<Instance> to_start;
  Status failure;
  int64_t running = 0;
  const int64_t per_iteration = static_cast<int64_t>(s_.tasks().size());
  // Jobs live in a vector that never reallocates while work is in flight: sized to the most
  // instances that can run at once (every task of the window).
  jobs_.resize(static_cast<size_t>(per_iteration * window_ + 1));
  for (size_t i = jobs_.size(); i-- > 0;) free_jobs_.push_back(i);
  double busy = 0, busy_from = MonotonicSeconds();
  for (;;) {
    if (failure.ok()) {
      to_start.clear();
      d.Dispatch(&to_start);
      for (const Instance& inst : to_start) {
        if (free_jobs_.empty()) {
          failure = Internal("executor: more instances in flight than the iteration window allows");
          break;
        }
        const size_t j = free_jobs_.back();
        free_jobs_.pop_back();
        ++running;
        Status st = Start(inst, j);
        if (!st.ok()) {
          failure = st;
          --running;  // its work was never started
          break;
        }
      }
    }
    if (running == 0) {
      if (!failure.ok()) return failure;
      if (d.done()) break;
      return d.DeadlockReport();
    }
    busy += MonotonicSeconds() - busy_from;
    Event e = events_.Pop();
    busy_from = MonotonicSeconds();
    --running;
    Job& job = jobs_[e.job];
    const TaskSpec& t = s_.tasks()[static_cast<size_t>(job.instance.task)];
    if (!e.status.ok()) {
      if (failure.ok()) failure = Status(e.status.code(), Who(t, job.instance.iteration) + ": " + e.status.message());
      continue;
    }
    if (!failure.ok()) continue;
    Finish(job, t);
    const int64_t iteration = job.instance.iteration;
    free_jobs_.push_back(e.job);
    d.Complete(job.instance);
    if (options_.exit_after_tasks > 0 && ++tasks_done_ == options_.exit_after_tasks) std::_Exit(137);
    const size_t slot = static_cast<size_t>(iteration % window_);
    if (++completed_in_[slot] == per_iteration) {
      completed_in_[slot] = 0;
      Status st = IterationDone(iteration);
      if (!st.ok() && failure.ok()) failure = st;
    }
  }
  busy += MonotonicSeconds() - busy_from;
  result_.wall_s = MonotonicSeconds() - t0_;
  result_.dispatch_busy_s = busy;
  result_.tasks = d.completed();
  for (size_t p = 0; p < s_.pools().size(); ++p) result_.pool_peak_bytes.push_back(d.pool_peak_bytes(static_cast<int32_t>(p)));
  result_.gpu_memory = device_->memory_peak();
  TF_RETURN_IF_ERROR(ReadState(kMaster, run_iterations_, &result_.master));
  return std::move(result_);
}

Status Run::ReadState(int kind, int64_t version, std::vector<float>* master) {
  master->assign(static_cast<size_t>(trainer_.layout().total), 0.0f);
  Versions got;
  CompletionQueue done;
  std::vector<std::pair<char*, const TensorSpec*>> reads;
  for (const TensorSpec& ts : s_.tensors()) {
    if (KindOf(ts.kind) != kind) continue;
    const DiskFile& f = disk_of_device_[static_cast<size_t>(ts.device)];
    if (f.buffered < 0) continue;
    const int64_t n = Elements(ts);
    if (home_[static_cast<size_t>(ts.device)][kind].Get(ts.element_offset, ts.element_offset + n) != version) continue;
    if (got.Get(ts.element_offset, ts.element_offset + n) == 1) continue;  // a copy already read
    got.Set(ts.element_offset, ts.element_offset + n, 1);
    char* block = static_cast<char*>(blocks_.Take(ts.size_bytes));
    if (block == nullptr) return ResourceExhausted(std::string("reading ") + kKindNames[kind] + ": cannot allocate a staging buffer");
    IoRequest r{IoOp::kRead, f.fd(), ts.offset_bytes, ts.size_bytes, block, reads.size()};
    TF_RETURN_IF_ERROR(io_->Submit({&r, 1}, &done));
    reads.push_back({block, &ts});
  }
  std::vector<IoCompletion> completions;
  while (completions.size() < reads.size()) done.Wait(&completions, 1);
  for (const IoCompletion& c : completions) {
    if (!c.status.ok()) return Status(c.status.code(), std::string("reading ") + kKindNames[kind] + ": " + c.status.message());
  }
  for (const auto& [block, ts] : reads) {
    std::memcpy(master->data() + ts->element_offset, block, static_cast<size_t>(ts->size_bytes));
    blocks_.Give(block);
  }
  for (size_t ti = 0; ti < s_.tensors().size(); ++ti) {  // and what host memory keeps
    const TensorSpec& ts = s_.tensors()[ti];
    const int32_t buffer = host_home_[ti].first;
    if (buffer == kNoIndex || KindOf(ts.kind) != kind) continue;
    const int64_t n = Elements(ts);
    const Span span = FindSpan(buffer, kind, ts.element_offset, n);
    if (span.data == nullptr || span.version != version) continue;
    std::memcpy(master->data() + ts.element_offset, span.data, static_cast<size_t>(ts.size_bytes));
    got.Set(ts.element_offset, ts.element_offset + n, 1);
  }
  if (got.Get(0, trainer_.layout().total) != 1) {
    return FailedPrecondition(std::string("some of ") + kKindNames[kind] + " is not at version " + std::to_string(version) +
                              " in host memory or on any disk (" + std::to_string(base_iteration_ + version) + " iterations)");
  }
  return Status::Ok();
}

namespace {
constexpr const char* kCheckpointName = "tierflow-run";
}  // namespace

// The committed checkpoint in options_.checkpoint_dir, when resuming and there is one: the state
// to start from, the step, the loss scaler and the iterations already done.
Status Run::LoadCheckpointIfAny() {
  if (!options_.resume) return Status::Ok();
  if (options_.checkpoint_dir.empty()) return InvalidArgument("resume needs a checkpoint directory");
  if (!std::filesystem::exists(options_.checkpoint_dir + "/" + kCheckpointName + ".manifest.json")) return Status::Ok();
  auto storage = NewPosixStorage();
  CheckpointOptions o;
  o.dirs = {options_.checkpoint_dir};
  o.name = kCheckpointName;
  const size_t total = static_cast<size_t>(trainer_.layout().total);
  initial_[0].resize(total), initial_[1].resize(total), initial_[2].resize(total);
  std::string meta;
  Status sizes;
  auto sink = [&](const CheckpointEntry& e) -> void* {
    for (int k = 0; k < 3; ++k) {
      if (e.name != kKindNames[kMaster + k]) continue;
      if (e.size_bytes != static_cast<int64_t>(total * 4)) {
        sizes = InvalidArgument("checkpoint '" + options_.checkpoint_dir + "': " + e.name + " has " + std::to_string(e.size_bytes) +
                                " bytes, this model needs " + std::to_string(total * 4));
        return nullptr;
      }
      return initial_[k].data();
    }
    if (e.name == "meta") {
      meta.resize(static_cast<size_t>(e.size_bytes));
      return meta.data();
    }
    return nullptr;
  };
  auto stats = LoadCheckpoint(*storage, o, sink);
  if (!stats.ok()) return stats.status().WithContext("checkpoint '" + options_.checkpoint_dir + "'");
  TF_RETURN_IF_ERROR(sizes);
  const auto j = nlohmann::json::parse(meta, nullptr, false);
  if (j.is_discarded() || !j.contains("iterations_done") || !j.contains("updates") || !j.contains("loss_scale") || !j.contains("good_steps")) {
    return DataLoss("checkpoint '" + options_.checkpoint_dir + "': its meta record is unreadable");
  }
  base_iteration_ = j["iterations_done"].get<int64_t>();
  updates_ = j["updates"].get<int64_t>();
  scaler_.Restore(j["loss_scale"].get<float>(), j["good_steps"].get<int64_t>());
  return Status::Ok();
}

// After `iteration` (of this run) completes: its updated states are at version iteration + 1 in
// their homes; they, the step and the loss scaler are saved atomically.
Status Run::SaveTrainingCheckpoint(int64_t iteration) {
  std::vector<float> state[3];
  for (int k = 0; k < 3; ++k) TF_RETURN_IF_ERROR(ReadState(kMaster + k, iteration + 1, &state[k]).WithContext("checkpoint"));
  nlohmann::json j;
  j["iterations_done"] = base_iteration_ + iteration + 1;
  j["updates"] = updates_;
  j["loss_scale"] = scaler_.scale();
  j["good_steps"] = scaler_.good_steps();
  const std::string meta = j.dump();
  std::vector<CheckpointTensor> tensors;
  for (int k = 0; k < 3; ++k) tensors.push_back({kKindNames[kMaster + k], "fp32", 0, state[k].data(), static_cast<int64_t>(state[k].size() * 4)});
  tensors.push_back({"meta", "u8", 0, meta.data(), static_cast<int64_t>(meta.size())});
  auto storage = NewPosixStorage();
  CheckpointOptions o;
  o.dirs = {options_.checkpoint_dir};
  o.name = kCheckpointName;
  auto stats = SaveCheckpoint(*storage, tensors, o);
  if (!stats.ok()) return stats.status().WithContext("checkpoint '" + options_.checkpoint_dir + "'");
  return Status::Ok();
}

}  // namespace

Status CheckRunnable(const Schedule& schedule, const TrainConfig& config) {
  TF_RETURN_IF_ERROR(ValidateLlamaSpec(config.spec));
  if (config.spec.config.tied_embeddings) return InvalidArgument("tierflow run: tied embeddings are not supported yet");
  TF_RETURN_IF_ERROR(schedule.Validate());
  if (!HasGlobalCheck(schedule) && (config.dynamic_loss_scaling || config.gradient_clipping > 0)) {
    return InvalidArgument("schedule '" + schedule.name + "' updates without a global gradient check (its optimizer overlaps backward), but " +
                           (config.dynamic_loss_scaling ? std::string("training.loss_scaling is dynamic")
                                                        : "training.gradient_clipping is " + std::to_string(config.gradient_clipping)) +
                           ": plan it with training.loss_scaling: none and training.gradient_clipping: 0, or without policy.overlap_optimizer");
  }
  const ParamLayout layout = MakeParamLayout(config.spec.config);
  for (const TaskSpec& t : schedule.tasks()) {
    if (IsCollectiveOp(t.op) && t.ranks > 1) {
      return InvalidArgument("tierflow run on this host runs one rank; task '" + t.id + "' is a collective of " + std::to_string(t.ranks) +
                             " ranks (set training.data_parallel: 1)");
    }
    if (t.op == Op::kCompute && t.resource != kNoIndex && schedule.resources()[static_cast<size_t>(t.resource)].concurrency != 1) {
      return InvalidArgument("resource '" + schedule.resources()[static_cast<size_t>(t.resource)].name + "': a compute resource of concurrency 1 is required");
    }
  }
  // One micro-step: no unit is computed forward twice in an iteration.
  std::map<int32_t, std::string> forward_of;
  for (const TaskSpec& t : schedule.tasks()) {
    if (t.op != Op::kCompute || t.phase != Phase::kForward || t.tensors.empty()) continue;
    auto [it, fresh] = forward_of.emplace(t.tensors[0], t.id);
    if (!fresh) {
      return InvalidArgument("tierflow run: gradient_accumulation_steps > 1 is not supported yet (tasks '" + it->second + "' and '" + t.id +
                             "' compute the same unit forward)");
    }
  }
  for (const TensorSpec& ts : schedule.tensors()) {
    const int kind = KindOf(ts.kind);
    if (kind < 0) return InvalidArgument("tensor '" + ts.name + "': kind '" + ts.kind + "' is not one tierflow run knows");
    if (ts.rank != 0) return InvalidArgument("tensor '" + ts.name + "': rank " + std::to_string(ts.rank) + " (tierflow run runs rank 0 only)");
    if (ts.size_bytes % kKindBytes[kind] != 0 || ts.element_offset + ts.size_bytes / kKindBytes[kind] > layout.total) {
      return InvalidArgument("tensor '" + ts.name + "': its range is outside the model's " + std::to_string(layout.total) + " parameters");
    }
  }
  if (schedule.tensors().empty()) {
    return InvalidArgument("schedule '" + schedule.name + "' names no tensors: plan it again with this tierflow (tasks must say which state they move)");
  }
  return Status::Ok();
}

StatusOr<RunResult> RunSchedule(const Schedule& schedule, const TrainConfig& config, const RunOptions& options) {
  if (options.iterations < 1) return InvalidArgument("iterations must be >= 1");
  Run run(schedule, config, options);
  return run.Execute();
}

StatusOr<RunResult> RunInMemory(const TrainConfig& config, int64_t iterations,
                                const std::function<void(int64_t, double)>& on_iteration, const std::string& compute) {
  TF_RETURN_IF_ERROR(ValidateLlamaSpec(config.spec));
  if (iterations < 1) return InvalidArgument("iterations must be >= 1");
  Trainer trainer(config);
  TF_ASSIGN_OR_RETURN(std::unique_ptr<exec::ComputeDevice> device, exec::MakeComputeDevice(compute, config, trainer));
  const int hw = config.threads > 0 ? config.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  CpuThreads threads(hw);
  TF_ASSIGN_OR_RETURN(TokenLoader loader, TokenLoader::Create(config.tokens, config.batch, config.seq, config.data_seed));
  std::vector<float> master = trainer.InitialMaster();
  std::vector<float> m(master.size(), 0.0f), v(master.size(), 0.0f), grad(master.size());
  std::vector<uint16_t> p16(master.size());
  cpu::Fp32ToBf16(p16.data(), master.data(), static_cast<int64_t>(master.size()), threads);
  TF_ASSIGN_OR_RETURN(std::unique_ptr<exec::WholeModel> model, exec::WholeModel::Create(*device, trainer.layout()));
  TF_RETURN_IF_ERROR(model->Load(p16));
  LossScaler scaler = ScalerFor(config);
  IterationState it;
  trainer.PrepareIteration(&it);
  RunResult result;
  const double t0 = MonotonicSeconds();
  int64_t updates = 0;
  const int64_t layers = trainer.layer_count();
  for (int64_t i = 0; i < iterations; ++i) {
    TokenBatch batch = loader.Next();
    it.tokens = std::move(batch.inputs);
    it.targets = std::move(batch.targets);
    it.iteration = i;
    it.loss_scale = scaler.scale();
    for (int64_t l = 0; l < layers; ++l) TF_RETURN_IF_ERROR(device->Forward(l, model->Layer(l), &it, threads, nullptr));
    for (int64_t l = layers; l-- > 0;) {
      TF_RETURN_IF_ERROR(device->Backward(l, model->Layer(l), model->LayerGrads(l), &it, threads, nullptr));
    }
    // Every gradient off the device tensor by tensor, checked on the way, as the d2h tasks do.
    cpu::GradCheck total;
    for (const ParamTensor& pt : trainer.layout().tensors) {
      TF_ASSIGN_OR_RETURN(const cpu::GradCheck check, device->D2HGrad(grad.data() + pt.offset, model->grads() + pt.offset, pt.elements,
                                                                      false, 1.0f / it.loss_scale, threads, nullptr));
      total = cpu::CombineGradChecks(total, check);
    }
    if (scaler.Update(total.finite)) {
      ++updates;
      const float clip = cpu::ClipCoefficient(total, config.gradient_clipping);
      cpu::AdamW(master.data(), m.data(), v.data(), grad.data(), nullptr, static_cast<int64_t>(master.size()), updates,
                 UpdateGradScale(it.loss_scale, clip), config.adam, threads);
    }
    cpu::Fp32ToBf16(p16.data(), master.data(), static_cast<int64_t>(master.size()), threads);
    TF_RETURN_IF_ERROR(model->Load(p16));
    result.loss.push_back(it.loss);
    result.iteration_end_s.push_back(MonotonicSeconds() - t0);
    if (on_iteration) on_iteration(i, it.loss);
  }
  result.wall_s = MonotonicSeconds() - t0;  // no schedule: no tasks, records or pools
  result.gpu_memory = device->memory_peak();
  result.master = std::move(master);
  return result;
}

}  // namespace tierflow::real
