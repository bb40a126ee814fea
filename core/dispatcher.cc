#include "tierflow/core/dispatcher.h"

#include <algorithm>
#include <limits>

namespace tierflow {
namespace {

std::string Quote(const std::string& s) { return "'" + s + "'"; }

}  // namespace

Dispatcher::Dispatcher(const Schedule& schedule, int64_t iterations)
    : schedule_(schedule),
      iterations_(iterations),
      n_tasks_(static_cast<int32_t>(schedule.tasks().size())),
      instant_queue_(static_cast<int32_t>(schedule.resources().size())),
      window_size_(std::max<int64_t>(1, schedule.iteration_window)) {
  TF_CHECK(iterations >= 0);
  const auto& tasks = schedule.tasks();
  const auto& buffers = schedule.buffers();
  const size_t n_pools = schedule.pools().size();
  const int32_t n_queues = instant_queue_ + 1;

  total_instances_ = static_cast<int64_t>(n_tasks_) * iterations_;
  succ_.resize(n_tasks_);
  carried_succ_.resize(n_tasks_);
  initial_pending_.assign(n_tasks_, 0);
  alloc_needs_.resize(n_tasks_);
  free_bytes_.resize(n_tasks_);
  queue_of_.resize(n_tasks_);

  auto add_need = [](std::vector<PoolNeed>* needs, int32_t pool, int64_t bytes) {
    for (PoolNeed& n : *needs) {
      if (n.pool == pool) {
        n.bytes += bytes;
        return;
      }
    }
    needs->push_back({pool, bytes});
  };
  for (int32_t i = 0; i < n_tasks_; ++i) {
    const TaskSpec& t = tasks[i];
    for (int32_t d : t.deps) {
      succ_[d].push_back(i);
      ++initial_pending_[i];
    }
    for (const CarriedDep& c : t.carried) carried_succ_[c.task].push_back({i, c.distance});
    for (int32_t b : t.allocs) add_need(&alloc_needs_[i], buffers[b].pool, buffers[b].size_bytes);
    for (int32_t b : t.frees) add_need(&free_bytes_[i], buffers[b].pool, buffers[b].size_bytes);
    queue_of_[i] = IsInstantOp(t.op) ? instant_queue_ : t.resource;
  }

  ready_.resize(n_queues);
  free_slots_.resize(n_queues);
  for (int32_t r = 0; r < instant_queue_; ++r) free_slots_[r] = schedule.resources()[r].concurrency;
  free_slots_[instant_queue_] = std::numeric_limits<int32_t>::max();
  queue_dirty_.assign(n_queues, 0);
  parked_.resize(n_pools);
  parked_needs_.resize(n_pools);
  pool_freed_.assign(n_pools, 0);
  pool_used_.assign(n_pools, 0);
  for (const BufferSpec& b : buffers) {
    if (b.persistent) pool_used_[b.pool] += b.size_bytes;
  }
  pool_peak_ = pool_used_;

  window_.resize(window_size_);
  if (n_tasks_ == 0) {
    base_ = next_materialise_ = iterations_;
    return;
  }
  while (next_materialise_ < std::min(iterations_, window_size_)) Materialise(next_materialise_);
}

bool Dispatcher::InstanceDone(int32_t task, int64_t iteration) const {
  if (iteration < base_) return true;
  if (iteration >= next_materialise_) return false;
  return Slot(iteration).state[task] == State::kDone;
}

void Dispatcher::Materialise(int64_t iteration) {
  TF_CHECK(iteration == next_materialise_);
  IterationState& slot = Slot(iteration);
  TF_CHECK(slot.iteration < base_);  // the slot's previous iteration has completed entirely
  slot.iteration = iteration;
  slot.completed = 0;
  slot.pending.assign(initial_pending_.begin(), initial_pending_.end());
  slot.state.assign(n_tasks_, State::kWaiting);
  ++next_materialise_;
  const auto& tasks = schedule_.tasks();
  for (int32_t i = 0; i < n_tasks_; ++i) {
    for (const CarriedDep& c : tasks[i].carried) {
      const int64_t src = iteration - c.distance;
      if (src >= 0 && !InstanceDone(c.task, src)) ++slot.pending[i];
    }
  }
  for (int32_t i = 0; i < n_tasks_; ++i) {
    if (slot.pending[i] == 0) MakeReady(i, iteration);
  }
}

void Dispatcher::MakeReady(int32_t task, int64_t iteration) {
  Slot(iteration).state[task] = State::kReady;
  const int32_t q = queue_of_[task];
  ready_[q].push(Key{schedule_.tasks()[task].priority, iteration, task});
  if (!queue_dirty_[q]) {
    queue_dirty_[q] = 1;
    dirty_queues_.push_back(q);
  }
}

void Dispatcher::Satisfy(int32_t task, int64_t iteration) {
  IterationState& slot = Slot(iteration);
  TF_CHECK(slot.state[task] == State::kWaiting && slot.pending[task] > 0);
  if (--slot.pending[task] == 0) MakeReady(task, iteration);
}

int32_t Dispatcher::ShortPool(int32_t task) const {
  const auto& pools = schedule_.pools();
  for (const PoolNeed& n : alloc_needs_[task]) {
    if (pool_used_[n.pool] + n.bytes > pools[n.pool].capacity_bytes) return n.pool;
  }
  return kNoIndex;
}

int64_t Dispatcher::NeedIn(int32_t task, int32_t pool) const {
  for (const PoolNeed& n : alloc_needs_[task]) {
    if (n.pool == pool) return n.bytes;
  }
  return 0;
}

void Dispatcher::Park(const Key& key, int32_t pool) {
  Slot(key.iteration).state[key.task] = State::kParked;
  parked_[pool].insert(key);
  parked_needs_[pool].insert(NeedIn(key.task, pool));
}

void Dispatcher::Start(const Key& key, std::vector<Instance>* to_start) {
  for (const PoolNeed& n : alloc_needs_[key.task]) {
    pool_used_[n.pool] += n.bytes;
    pool_peak_[n.pool] = std::max(pool_peak_[n.pool], pool_used_[n.pool]);
  }
  --free_slots_[queue_of_[key.task]];
  Slot(key.iteration).state[key.task] = State::kRunning;
  ++in_flight_;
  to_start->push_back(Instance{key.task, key.iteration});
}

int64_t Dispatcher::Dispatch(std::vector<Instance>* to_start) {
  const size_t before = to_start->size();
  // Instances parked on a pool that has freed bytes go back to their queues, in key order, as
  // many as the free bytes can hold (each may still be short of another pool).
  const auto& pools = schedule_.pools();
  for (int32_t p : freed_pools_) {
    pool_freed_[p] = 0;
    int64_t avail = pools[p].capacity_bytes - pool_used_[p];
    std::set<Key>& parked = parked_[p];
    std::multiset<int64_t>& needs = parked_needs_[p];
    for (auto it = parked.begin(); it != parked.end() && !needs.empty() && avail >= *needs.begin();) {
      const Key k = *it;
      const int64_t need = NeedIn(k.task, p);
      if (need > avail) {
        ++it;
        continue;
      }
      avail -= need;
      it = parked.erase(it);
      needs.erase(needs.find(need));
      const int32_t short_pool = ShortPool(k.task);
      if (short_pool == kNoIndex) {
        MakeReady(k.task, k.iteration);
      } else {
        Park(k, short_pool);
      }
    }
  }
  freed_pools_.clear();

  for (size_t qi = 0; qi < dirty_queues_.size(); ++qi) {
    const int32_t q = dirty_queues_[qi];
    queue_dirty_[q] = 0;
    Heap& heap = ready_[q];
    while (free_slots_[q] > 0 && !heap.empty()) {
      const Key k = heap.top();
      heap.pop();
      const int32_t short_pool = ShortPool(k.task);
      if (short_pool == kNoIndex) {
        Start(k, to_start);
      } else {
        Park(k, short_pool);
      }
    }
  }
  dirty_queues_.clear();
  return static_cast<int64_t>(to_start->size() - before);
}

void Dispatcher::Complete(const Instance& instance) {
  TF_CHECK(Materialised(instance.iteration));
  IterationState& slot = Slot(instance.iteration);
  TF_CHECK(instance.task >= 0 && instance.task < n_tasks_);
  TF_CHECK(slot.state[instance.task] == State::kRunning);
  slot.state[instance.task] = State::kDone;
  --in_flight_;
  ++completed_total_;
  ++slot.completed;

  const int32_t q = queue_of_[instance.task];
  ++free_slots_[q];
  if (!queue_dirty_[q] && !ready_[q].empty()) {
    queue_dirty_[q] = 1;
    dirty_queues_.push_back(q);
  }
  for (const PoolNeed& n : free_bytes_[instance.task]) {
    pool_used_[n.pool] -= n.bytes;
    if (!pool_freed_[n.pool] && !parked_[n.pool].empty()) {
      pool_freed_[n.pool] = 1;
      freed_pools_.push_back(n.pool);
    }
  }
  for (int32_t s : succ_[instance.task]) Satisfy(s, instance.iteration);
  for (const CarriedSucc& c : carried_succ_[instance.task]) {
    const int64_t target = instance.iteration + c.distance;
    if (target < next_materialise_) Satisfy(c.task, target);
  }

  // Slide the window past every iteration that has completed entirely.
  while (base_ < next_materialise_ && Slot(base_).completed == n_tasks_) ++base_;
  while (next_materialise_ < std::min(iterations_, base_ + window_size_)) {
    Materialise(next_materialise_);
  }
}

Status Dispatcher::DeadlockReport() const {
  if (Done() || in_flight_ > 0) return Status::Ok();
  for (int32_t q : dirty_queues_) {
    if (free_slots_[q] > 0 && !ready_[q].empty()) return Status::Ok();
  }
  if (!freed_pools_.empty()) return Status::Ok();

  const auto& tasks = schedule_.tasks();
  const auto& pools = schedule_.pools();
  auto who = [&](int32_t task, int64_t iteration) {
    return "task " + Quote(tasks[task].id) + " (iteration " + std::to_string(iteration) + ")";
  };
  constexpr int kMaxListed = 20;
  std::vector<std::string> pool_lines, dep_lines;
  int64_t blocked = 0;
  for (int64_t it = base_; it < next_materialise_; ++it) {
    const IterationState& slot = Slot(it);
    for (int32_t i = 0; i < n_tasks_; ++i) {
      const State st = slot.state[i];
      if (st == State::kDone) continue;
      ++blocked;
      if (st == State::kParked || st == State::kReady) {
        const int32_t p = ShortPool(i);
        if (p == kNoIndex) continue;  // cannot happen once deadlocked; listed in the count only
        const int64_t need = NeedIn(i, p);
        if (static_cast<int>(pool_lines.size()) < kMaxListed) {
          pool_lines.push_back(who(i, it) + " needs " + std::to_string(need) + " bytes in pool " +
                               Quote(pools[p].name) + ", which has " +
                               std::to_string(pools[p].capacity_bytes - pool_used_[p]) +
                               " of " + std::to_string(pools[p].capacity_bytes) +
                               " bytes free (" +
                               std::to_string(pool_used_[p] + need - pools[p].capacity_bytes) +
                               " bytes short)");
        }
        continue;
      }
      if (static_cast<int>(dep_lines.size()) >= kMaxListed) continue;
      std::string line;
      for (int32_t d : tasks[i].deps) {
        if (slot.state[d] != State::kDone) {
          line = who(i, it) + " waits for " + who(d, it);
          break;
        }
      }
      if (line.empty()) {
        for (const CarriedDep& c : tasks[i].carried) {
          const int64_t src = it - c.distance;
          if (src >= 0 && !InstanceDone(c.task, src)) {
            line = who(i, it) + " waits for carried dep " + who(c.task, src);
            break;
          }
        }
      }
      if (!line.empty()) dep_lines.push_back(line);
    }
  }
  std::string msg = "schedule " + Quote(schedule_.name) + " cannot make progress: " +
                    std::to_string(blocked) + " task instances blocked, none running";
  int64_t listed = 0;
  for (const auto* lines : {&pool_lines, &dep_lines}) {
    for (const std::string& l : *lines) {
      if (listed >= kMaxListed) break;
      msg += "; " + l;
      ++listed;
    }
  }
  if (blocked > listed) msg += "; ...";
  return Status(StatusCode::kDeadlock, msg);
}

}  // namespace tierflow
