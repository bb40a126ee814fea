// A run's set-up (run.h): the disks checked and opened, buffers, host homes, the GPU-resident home,
// the host pools' arenas (the initial state is written by run_checkpoint.cc).
#include "run.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <thread>
#include <tuple>

#include "tierflow/real/dir_lock.h"
#include "tierflow/real/disk_set.h"

namespace tierflow::real::exec {

// Each resource's pool of CPU threads (ThreadsOf): --threads when given; else the threads the
// schedule gives the resource's optimizer and convert tasks (docs/schedule-format.md: their
// `ranks`, what sim times them with; the planners give a rank's tasks one count, and the largest
// is taken), at most this rank's share of this machine's cores (the ranks on it share them);
// else every core. Each way the run departs from the schedule is a note: sim's prediction of the
// run assumes the schedule's counts.
void Run::SizeThreadPools() {
  const size_t n = s_.resources().size();
  std::vector<int32_t> most(n, 0), least(n, 0);
  for (const TaskSpec& t : s_.tasks()) {
    if ((t.op != Op::kOptimizer && t.op != Op::kConvert) || t.resource == kNoIndex || t.ranks < 1) continue;
    const auto r = static_cast<size_t>(t.resource);
    most[r] = std::max(most[r], t.ranks);
    least[r] = least[r] == 0 ? t.ranks : std::min(least[r], t.ranks);
  }
  const int32_t cores = std::max(1, static_cast<int32_t>(std::thread::hardware_concurrency()));
  const int32_t on_host = comm_ != nullptr ? std::max(1, comm_->ranks_on_host()) : 1;
  const int32_t share = std::max(1, cores / on_host);
  pool_threads_.assign(n, config_.threads > 0 ? config_.threads : cores);
  for (size_t r = 0; r < n; ++r) {
    if (most[r] == 0) continue;
    const std::string& name = s_.resources()[r].name;
    if (config_.threads <= 0) pool_threads_[r] = std::min(most[r], share);
    if (least[r] != most[r]) {
      result_.notes.push_back(name + ": the schedule gives its optimizer and conversions " + std::to_string(least[r]) + " to " +
                              std::to_string(most[r]) + " threads; this run gives each of them " + std::to_string(pool_threads_[r]));
    } else if (pool_threads_[r] != most[r]) {
      result_.notes.push_back(name + ": the schedule gives its optimizer and conversions " + std::to_string(most[r]) +
                              " threads, as sim times them; this run gives them " + std::to_string(pool_threads_[r]) +
                              (config_.threads > 0 ? " (--threads)"
                                                   : " (this machine's cores" +
                                                         (on_host > 1 ? ", " + std::to_string(cores) + " shared by " + std::to_string(on_host) + " ranks"
                                                                      : std::string()) +
                                                         ": plan with hardware.node.cpu.cores " + std::to_string(cores) +
                                                         " for a schedule it runs as planned)"));
    }
  }
}

Status Run::Setup() {
  TF_RETURN_IF_ERROR(CheckRunnable(s_, config_));
  TF_ASSIGN_OR_RETURN(device_, MakeComputeDevice(options_.compute, config_, trainer_, comm_ != nullptr ? comm_->local_rank() : 0));
  TF_RETURN_IF_ERROR(OpenHandlers(*this));
  window_ = std::max<int64_t>(1, s_.iteration_window);
  // The data, like the disks, before anything is written (an empty corpus used to be found after
  // the stores were made).
  TF_ASSIGN_OR_RETURN(TokenLoader loader, TokenLoader::Create(config_.tokens, config_.batch, config_.seq, config_.data_seed));
  loader_ = std::make_unique<TokenLoader>(std::move(loader));
  TF_ASSIGN_OR_RETURN(std::vector<DiskDir> dirs, TakeDirectories());
  TF_RETURN_IF_ERROR(OpenStores(dirs));
  TF_RETURN_IF_ERROR(OpenTierLocks(dirs));
  TF_ASSIGN_OR_RETURN(const int64_t persistent_gpu_bytes, MakeBuffers());
  TF_ASSIGN_OR_RETURN(const int64_t gpu_state_bytes, BindMemoryHomes());
  TF_RETURN_IF_ERROR(MakeResidentHome(persistent_gpu_bytes - gpu_state_bytes));
  TF_RETURN_IF_ERROR(FindMathTasks());
  workers_.resize(s_.resources().size());
  threads_.resize(s_.resources().size());
  SizeThreadPools();
  for (size_t r = 0; r < s_.resources().size(); ++r) workers_[r] = std::make_unique<Worker>();
  iterations_.resize(static_cast<size_t>(window_));
  for (auto& it : iterations_) trainer_.PrepareIteration(&it);
  completed_in_.assign(static_cast<size_t>(window_), 0);
  steps_.assign(static_cast<size_t>(window_), StepSlot{});
  TF_RETURN_IF_ERROR(CheckSharedCheckpointDir());
  TF_RETURN_IF_ERROR(LoadCheckpointIfAny());
  TF_RETURN_IF_ERROR(FindCheckpointGenerations());
  updates_at_start_ = updates_;
  run_iterations_ = options_.iterations - base_iteration_;
  if (run_iterations_ <= 0) {  // before the batches already trained on are skipped
    return FailedPrecondition("checkpoint '" + options_.checkpoint_dir + "' already has " + std::to_string(base_iteration_) +
                              " iterations; ask for more than that");
  }
  for (int64_t i = 0; i < base_iteration_ * micro_steps_ * space_.ranks(); ++i) loader_->Next();  // the batches already trained on
  result_.first_iteration = base_iteration_;
  TF_RETURN_IF_ERROR(InitialiseStores());
  MakeHostArenas();
  return Status::Ok();
}

// The --disk directories, checked before anything is written, and each taken for this run alone
// (dir_lock.h) before its store is truncated; the checkpoint directory too.
StatusOr<std::vector<DiskDir>> Run::TakeDirectories() {
  TF_ASSIGN_OR_RETURN(std::vector<DiskDir> dirs, DiskDirsForSchedule(s_, options_.disks, options_.disk_root));
  TF_RETURN_IF_ERROR(MakeRootDirs(dirs, options_.disk_root));
  std::vector<int64_t> need(s_.devices().size(), 0);
  for (const TensorSpec& t : s_.tensors()) {
    need[static_cast<size_t>(t.device)] = std::max(need[static_cast<size_t>(t.device)], AlignUp(t.offset_bytes + t.size_bytes, kDirectAlignment));
  }
  for (DiskDir& d : dirs) d.required_bytes = need[static_cast<size_t>(s_.FindDevice(d.device))];
  TF_RETURN_IF_ERROR(CheckDiskDirs(dirs));
  // Each directory is this run's alone (dir_lock.h), taken before its store is truncated. With
  // several ranks, rank 0 holds the locks and makes the stores the ranks share; the others open
  // them only after it has (the barrier in OpenStores), so a run that finds a directory taken touches
  // nothing of it on any rank.
  const bool leader = comm_ == nullptr || comm_->rank() == 0;
  for (const DiskDir& d : dirs) {
    if (!leader) break;
    TF_ASSIGN_OR_RETURN(DirLock lock, DirLock::Acquire(d.dir, "--disk '" + d.dir + "' (" + d.device + ")"));
    locks_.push_back(std::move(lock));
  }
  if (!options_.checkpoint_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options_.checkpoint_dir, ec);
    if (ec) return FailedPrecondition("checkpoint '" + options_.checkpoint_dir + "': cannot create it: " + ec.message());
    if (leader) {  // the ranks' shards go to one checkpoint (run_checkpoint.cc)
      TF_ASSIGN_OR_RETURN(DirLock lock, DirLock::Acquire(options_.checkpoint_dir, "checkpoint '" + options_.checkpoint_dir + "'"));
      locks_.push_back(std::move(lock));
    }
  }
  return dirs;
}

// The resources this rank shares with the other ranks of its node (SetNodeShared), each locked
// node-wide through files in the directory of its device's store (tier_locks.h).
Status Run::OpenTierLocks(const std::vector<DiskDir>& dirs) {
  for (const std::string& name : node_shared_) {
    const int32_t r = s_.FindResource(name);
    if (r == kNoIndex) continue;  // no task of this rank's part runs on it
    const ResourceSpec& res = s_.resources()[static_cast<size_t>(r)];
    const std::string& device = s_.devices()[static_cast<size_t>(res.device)].name;
    const auto dir = std::find_if(dirs.begin(), dirs.end(), [&](const DiskDir& d) { return d.device == device; });
    if (dir == dirs.end()) {
      return InvalidArgument("resource '" + name + "' of device '" + device + "' runs tasks of several ranks, which tierflow run holds node-wide " +
                             "only for a storage device's queues: plan the schedule again with this tierflow");
    }
    TF_RETURN_IF_ERROR(tier_locks_.Add(r, name, dir->dir, res.concurrency));
  }
  return Status::Ok();
}

// The storage back-end, and each disk's store opened (made by rank 0 with several ranks).
Status Run::OpenStores(const std::vector<DiskDir>& dirs) {
  const bool leader = comm_ == nullptr || comm_->rank() == 0;
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
  // The ranks share each store, each at its own tensors' bytes: rank 0 makes them first.
  for (int pass = 0; pass < 2; ++pass) {
    if (comm_ != nullptr && pass == 1) TF_RETURN_IF_ERROR(comm_->Barrier());
    if ((pass == 0) != leader) continue;
    for (size_t i = 0; i < dirs.size(); ++i) {
      const int32_t dev = s_.FindDevice(dirs[i].device);
      const std::string path = dirs[i].dir + "/tierflow-run.store";
      OpenOptions o;
      o.device = static_cast<int32_t>(i);
      o.create = leader;
      o.truncate = leader;
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
  }
  return Status::Ok();
}

// Every buffer's state per window slot, the persistent host buffers' memory; the bytes of the
// persistent GPU buffers, within which the GPU-resident home must fit.
StatusOr<int64_t> Run::MakeBuffers() {
  // Buffers in a GPU pool are gpu0 memory, from the compute device when the dispatcher admits
  // them. Persistent ones are not allocated: what they stand for is the device's own (activations
  // and workspace) or the GPU-resident parameters' home below.
  buffers_.resize(s_.buffers().size() * static_cast<size_t>(window_));
  for (size_t i = 0; i < buffers_.size(); ++i) {
    const BufferSpec& spec = s_.buffers()[i % s_.buffers().size()];
    buffers_[i].size = spec.size_bytes;
    buffers_[i].on_gpu = s_.devices()[static_cast<size_t>(s_.pools()[static_cast<size_t>(spec.pool)].device)].kind == DeviceKind::kGpu;
    buffers_[i].pool = spec.pool;
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
  return persistent_gpu_bytes;
}

// The GPU-resident parameters' home: one block of gpu0 memory, within the persistent GPU buffers
// (DeepSpeed's persistent parameters; every partition when parameters stay on the GPU).
Status Run::MakeResidentHome(int64_t persistent_gpu_bytes) {
  // In the model's elements. With several ranks a unit the step's all-gather names is whole
  // there (its other parts gathered after each update); of any other (parameters kept on the
  // GPU as partitions, gathered as they are fetched) this rank's part.
  std::set<int64_t> whole;  // units, by their part's first local element
  for (const TaskSpec& t : s_.tasks()) {
    if (t.op != Op::kAllGather || t.phase != Phase::kStep) continue;
    for (int32_t ti : t.tensors) {
      for (const RankSpace::Unit* u : space_.UnitsIn(T(ti).element_offset, Elements(T(ti)))) whole.insert(u->local);
    }
  }
  std::vector<std::pair<int64_t, int64_t>> ranges;  // [begin, end)
  for (const TensorSpec& ts : s_.tensors()) {
    if (KindOf(ts.kind) == kParam16 && s_.devices()[static_cast<size_t>(ts.device)].kind == DeviceKind::kGpu) {
      if (space_.ranks() == 1) {
        ranges.push_back({ts.element_offset, ts.element_offset + Elements(ts)});
        continue;
      }
      for (const RankSpace::Unit* u : space_.UnitsIn(ts.element_offset, Elements(ts))) {
        const bool all = whole.count(u->local) > 0;
        const int64_t begin = all ? u->global : u->global + space_.rank() * u->part;
        ranges.push_back({begin, begin + (all ? u->n : u->part)});
      }
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
                           std::to_string(persistent_gpu_bytes) + " beside the optimizer states kept on the GPU)");
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
  return Status::Ok();
}

// The last compute task of each (micro-step, phase, layer) runs the layer's math; every layer
// needs one of each.
Status Run::FindMathTasks() {
  std::map<std::tuple<int32_t, int, int32_t>, int32_t> last;
  for (size_t i = 0; i < s_.tasks().size(); ++i) {
    const TaskSpec& t = s_.tasks()[i];
    if (t.op == Op::kCompute) last[{t.micro_step, static_cast<int>(t.phase), t.layer}] = static_cast<int32_t>(i);
  }
  math_task_.assign(s_.tasks().size(), 0);
  for (const auto& [key, task] : last) math_task_[static_cast<size_t>(task)] = 1;
  for (int32_t micro = 0; micro < micro_steps_; ++micro) {
    for (int64_t l = 0; l < trainer_.layer_count(); ++l) {
      for (int phase : {static_cast<int>(Phase::kForward), static_cast<int>(Phase::kBackward)}) {
        if (!last.count({micro, phase, static_cast<int32_t>(l)})) {
          return InvalidArgument("schedule: no " + std::string(PhaseName(static_cast<Phase>(phase))) + " compute task for layer " +
                                 std::to_string(l) + (micro_steps_ > 1 ? " in micro-step " + std::to_string(micro) : std::string()) +
                                 " (every layer needs one)");
        }
      }
    }
  }
  return Status::Ok();
}

// Every tensor kept in memory gets its home: a persistent buffer the tasks naming it use, in host
// memory, or for optimizer states updated on the GPU in gpu0 memory (allocated here: returns its
// bytes, which the resident home cannot have).
StatusOr<int64_t> Run::BindMemoryHomes() {
  memory_home_.assign(s_.tensors().size(), {kNoIndex, 0});
  std::vector<int64_t> packed(s_.buffers().size(), 0);
  auto on_host = [&](const TensorSpec& ts) { return s_.devices()[static_cast<size_t>(ts.device)].kind == DeviceKind::kHost; };
  auto gpu_state = [&](const TensorSpec& ts) {
    const int kind = KindOf(ts.kind);
    return s_.devices()[static_cast<size_t>(ts.device)].kind == DeviceKind::kGpu && kind >= kMaster && kind <= kAdamV;
  };
  // Parameters kept in host memory: each rank's lie in one flat buffer, the persistent host
  // buffer their h2d copies use; every task that names them (the fetch's collectives and
  // computes, the update's conversion) finds them there at their element offset.
  std::map<int32_t, int32_t> flat_params;  // rank -> buffer
  for (const TaskSpec& t : s_.tasks()) {
    if (t.op != Op::kH2D) continue;
    for (int32_t ti : t.tensors) {
      const TensorSpec& ts = T(ti);
      if (KindOf(ts.kind) != kParam16 || !on_host(ts)) continue;
      int32_t home = kNoIndex;
      for (int32_t b : t.uses) {
        if (s_.buffers()[static_cast<size_t>(b)].persistent && !OnGpu(b)) home = b;
      }
      if (home == kNoIndex) return InvalidArgument("task '" + t.id + "' copies " + Range(ts) + " kept in host memory, but uses no persistent host buffer that keeps it");
      const auto [it, added] = flat_params.emplace(ts.rank, home);
      if (!added && it->second != home) {
        return InvalidArgument("task '" + t.id + "' keeps " + Range(ts) + " in buffer '" + s_.buffers()[static_cast<size_t>(home)].name + "', another task rank " +
                               std::to_string(ts.rank) + "'s parameters in '" + s_.buffers()[static_cast<size_t>(it->second)].name +
                               "': a rank's parameters kept in host memory have one buffer");
      }
    }
  }
  for (const TaskSpec& t : s_.tasks()) {
    for (int32_t ti : t.tensors) {
      const TensorSpec& ts = T(ti);
      const int kind = KindOf(ts.kind);
      // Gradients in host memory are placed by the d2h copies that write them (at their element
      // offset in the rank's flat buffer), not bound here.
      const bool on_gpu = gpu_state(ts);
      if ((!on_host(ts) && !on_gpu) || kind == kGrad || kind == kGrad16) continue;
      const char* where = on_gpu ? "GPU memory" : "host memory";
      int32_t home = kNoIndex;
      if (kind == kParam16) {
        const auto it = flat_params.find(ts.rank);
        // The fetch's collectives and computes name the unit but read it on the GPU (another
        // rank's, with several, is not this rank's to bind).
        if (it == flat_params.end() && t.op != Op::kConvert) continue;
        if (it == flat_params.end()) {
          return InvalidArgument("task '" + t.id + "' names " + Range(ts) + " kept in host memory, but no h2d copies rank " + std::to_string(ts.rank) +
                                 "'s parameters from a persistent host buffer");
        }
        home = it->second;
      }
      for (int32_t b : t.uses) {
        if (home != kNoIndex) break;
        if (s_.buffers()[static_cast<size_t>(b)].persistent && OnGpu(b) == on_gpu) {
          home = b;
          break;
        }
      }
      if (home == kNoIndex) {
        return InvalidArgument("task '" + t.id + "' names " + Range(ts) + " kept in " + where + ", but uses no persistent buffer there to keep it in");
      }
      auto& bound = memory_home_[static_cast<size_t>(ti)];
      if (bound.first == kNoIndex) {
        // param16 lies in the rank's flat buffer at its element offset (tensors of overlapping
        // ranges, a unit's and a sub-group's, then name the same bytes); other state is packed
        // in the order the tasks first name it.
        const bool flat = kind == kParam16;
        const int64_t at = flat ? ts.element_offset * 2 : packed[static_cast<size_t>(home)];
        if (at + ts.size_bytes > s_.buffers()[static_cast<size_t>(home)].size_bytes) {
          return InvalidArgument("task '" + t.id + "': the state it keeps in " + where + " does not fit buffer '" + s_.buffers()[static_cast<size_t>(home)].name + "'");
        }
        bound = {home, at};
        if (!flat) packed[static_cast<size_t>(home)] += ts.size_bytes;
      } else if (bound.first != home) {
        return InvalidArgument("task '" + t.id + "' keeps " + Range(ts) + " in buffer '" + s_.buffers()[static_cast<size_t>(home)].name +
                               "', another task in '" + s_.buffers()[static_cast<size_t>(bound.first)].name + "': state kept in memory has one home");
      }
    }
  }
  // The GPU homes' memory, for the whole run.
  int64_t gpu_bytes = 0;
  for (size_t b = 0; b < s_.buffers().size(); ++b) {
    if (!OnGpu(static_cast<int32_t>(b)) || packed[b] == 0) continue;
    TF_RETURN_IF_ERROR(TakeBuffer(buffers_[b], s_.buffers()[b].name));
    gpu_bytes += s_.buffers()[b].size_bytes;
  }
  return gpu_bytes;
}

// A fresh host block is mapped and faulted in whole where a task takes its buffer, on the dispatch
// thread (io_memory.h): a 200 MB parameter slot of ioc's default buffer_size took a quarter of a
// second here, and every task in flight waited for it. Blocks kept per size for reuse (BlockCache)
// only moved such stalls to the first time a run held one more buffer of a size than before, in the
// second or third iteration as often as in the first, and every sub-group of its own size made its
// own. DeepSpeed makes its swap buffers when its engine starts; so does this: each host pool gets
// its part of one mapping at set-up (an ExactPool of one PinnedArena), as large as the pool's
// buffers can hold at once (its capacity less its persistent buffers, which the dispatcher admits
// first, and no more than every instance of its other buffers: one per iteration of the window,
// each rounded up to kDirectAlignment), and TakeBuffer cuts them from it. Its pages are faulted in
// where first touched, by the read, copy or compute that fills them, only as far as the buffers use
// them (a 200 MB slot holding 352 KB of tiny's unit, one huge page), mostly in the first iteration;
// faulting every mapping in here took 0.32-1.09 s per ioc run on tiny. Where the arena holds every
// instance at once, each instance has its own piece of it for the whole run (BufferState::home);
// else pieces are cut as buffers are taken, and a buffer the arena then has no free run for
// (fragmentation, in a pool of several sizes) gets a block of its own, as before;
// RunResult::host_bytes_made_in_run counts it. Cut as taken, ioc's pools on tiny with sub-groups of
// 1e6 elements made 5 MB of blocks mid-run in one CI run and none in others: which runs are free
// when is the dispatcher's timing.
void Run::MakeHostArenas() {
  host_pools_.assign(s_.pools().size(), nullptr);
  std::vector<int64_t> bytes(s_.pools().size(), 0), every(s_.pools().size(), 0);
  int64_t total = 0;
  for (size_t p = 0; p < s_.pools().size(); ++p) {
    const PoolSpec& pool = s_.pools()[p];
    if (s_.devices()[static_cast<size_t>(pool.device)].kind == DeviceKind::kGpu) continue;
    // Room: the capacity less the persistent buffers, plus each live piece's rounding.
    int64_t room = pool.capacity_bytes, instances = 0;
    for (const BufferSpec& spec : s_.buffers()) {
      if (spec.pool != static_cast<int32_t>(p)) continue;
      if (spec.persistent) {
        room -= spec.size_bytes;
      } else {
        instances += window_;
        every[p] += window_ * AlignUp(std::max<int64_t>(spec.size_bytes, 1), kDirectAlignment);
      }
    }
    bytes[p] = std::max<int64_t>(0, std::min(AlignUp(std::max<int64_t>(room, 0), kDirectAlignment) + instances * kDirectAlignment, every[p]));
    total += AlignUp(bytes[p], 4096);  // what CreateExactPool reserves (whole pages)
  }
  if (total == 0) return;
  // One mapping for every host pool, mapped now, faulted in where first touched (a pool's buffers
  // use what they use of it), page-locked through the compute device. Where it cannot be made,
  // the buffers get blocks of their own.
  ArenaOptions o;
  o.lock = false;
  o.populate = false;
  o.cuda_register = false;
  auto arena = PinnedArena::Create(total, o);
  if (!arena.ok()) return;
  host_memory_ = std::move(*arena);
  if (device_) (void)device_->RegisterHost(host_memory_->base(), host_memory_->budget_bytes());
  for (size_t p = 0; p < s_.pools().size(); ++p) {
    if (bytes[p] == 0) continue;
    auto pool = host_memory_->CreateExactPool(s_.pools()[p].name, bytes[p], kDirectAlignment);
    TF_CHECK(pool.ok());  // the arena's budget is their sum
    host_pools_[p] = *pool;
    if (bytes[p] < every[p]) continue;
    // It holds every instance at once: each gets its own piece for the whole run, so that no
    // order of takes and gives (the dispatcher's, which timing decides) can fragment it.
    for (size_t i = 0; i < buffers_.size(); ++i) {
      const BufferSpec& spec = s_.buffers()[i % s_.buffers().size()];
      if (spec.pool != static_cast<int32_t>(p) || spec.persistent) continue;
      BufferState& buf = buffers_[i];
      TF_CHECK(buf.data == nullptr);  // not taken yet: only persistent buffers are, before this
      buf.home = host_pools_[p]->TryAllocate(std::max<int64_t>(buf.size, 1));
      TF_CHECK(!buf.home.empty());  // `every` is their sum
    }
  }
}

}  // namespace tierflow::real::exec
