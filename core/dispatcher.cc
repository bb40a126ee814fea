#include "tierflow/core/dispatcher.h"

#include <algorithm>
#include <climits>
#include <sstream>

namespace tierflow {
namespace {

// Running sums of per-entry counts (counts[i + 1] holds entry i's): counts[i] becomes where entry
// i's items begin in the flat array, counts[n] their total.
void RunningSums(std::vector<int32_t>* counts) {
  for (size_t i = 1; i < counts->size(); ++i) (*counts)[i] += (*counts)[i - 1];
}

}  // namespace

Dispatcher::Dispatcher(const Schedule& schedule, int64_t iterations)
    : schedule_(schedule),
      iterations_(iterations),
      window_(std::max<int64_t>(1, schedule.iteration_window)),
      task_count_(static_cast<int32_t>(schedule.tasks().size())),
      instant_resource_(static_cast<int32_t>(schedule.resources().size())) {
  TF_CHECK(iterations >= 0);
  const auto& tasks = schedule.tasks();
  const int32_t n = task_count_;
  total_ = iterations * n;

  resource_of_.resize(n);
  priority_.resize(n);
  dep_count_.resize(n);
  // The successor lists and each task's pool bytes, in compressed rows: counted, then filled in
  // task order (a successor list holds its tasks in schedule order).
  succ_begin_.assign(n + 1, 0);
  carried_begin_.assign(n + 1, 0);
  carried_succ_begin_.assign(n + 1, 0);
  alloc_begin_.assign(n + 1, 0);
  free_begin_.assign(n + 1, 0);
  for (int32_t i = 0; i < n; ++i) {
    const TaskSpec& t = tasks[i];
    resource_of_[i] = t.resource == kNoIndex ? instant_resource_ : t.resource;
    priority_[i] = t.priority;
    dep_count_[i] = static_cast<int32_t>(t.deps.size());
    for (int32_t d : t.deps) ++succ_begin_[d + 1];
    carried_begin_[i + 1] = static_cast<int32_t>(t.carried.size());
    for (const CarriedDep& c : t.carried) ++carried_succ_begin_[c.task + 1];
    alloc_begin_[i + 1] = static_cast<int32_t>(t.allocs.size());
    free_begin_[i + 1] = static_cast<int32_t>(t.frees.size());
  }
  RunningSums(&succ_begin_);
  RunningSums(&carried_begin_);
  RunningSums(&carried_succ_begin_);
  RunningSums(&alloc_begin_);
  RunningSums(&free_begin_);
  succ_.resize(succ_begin_[n]);
  carried_.resize(carried_begin_[n]);
  carried_succ_.resize(carried_succ_begin_[n]);
  alloc_.resize(alloc_begin_[n]);
  free_.resize(free_begin_[n]);
  std::vector<int32_t> succ_at(succ_begin_.begin(), succ_begin_.end() - 1);
  std::vector<int32_t> carried_at(carried_succ_begin_.begin(), carried_succ_begin_.end() - 1);
  for (int32_t i = 0; i < n; ++i) {
    const TaskSpec& t = tasks[i];
    for (int32_t d : t.deps) succ_[succ_at[d]++] = i;
    std::copy(t.carried.begin(), t.carried.end(), carried_.begin() + carried_begin_[i]);
    for (const CarriedDep& c : t.carried) carried_succ_[carried_at[c.task]++] = {i, c.distance};
    PoolBytes* out = alloc_.data() + alloc_begin_[i];
    for (int32_t b : t.allocs) *out++ = {schedule.buffers()[b].pool, schedule.buffers()[b].size_bytes};
    out = free_.data() + free_begin_[i];
    for (int32_t b : t.frees) *out++ = {schedule.buffers()[b].pool, schedule.buffers()[b].size_bytes};
  }

  resources_.resize(schedule.resources().size() + 1);
  for (size_t r = 0; r < schedule.resources().size(); ++r) {
    resources_[r].free_slots = schedule.resources()[r].concurrency;
  }
  resources_[instant_resource_].free_slots = INT32_MAX;

  pools_.resize(schedule.pools().size());
  for (size_t p = 0; p < pools_.size(); ++p) pools_[p].capacity = schedule.pools()[p].capacity_bytes;
  for (const BufferSpec& b : schedule.buffers()) {
    if (b.persistent) {
      pools_[b.pool].in_use += b.size_bytes;
      pools_[b.pool].peak = pools_[b.pool].in_use;
    }
  }

  slots_.resize(static_cast<size_t>(std::min<int64_t>(window_, std::max<int64_t>(iterations, 1))));
  for (Slot& s : slots_) {
    s.remaining.resize(n);
    s.state.resize(n);
  }
  while (next_iteration_ < iterations_ && next_iteration_ < static_cast<int64_t>(slots_.size())) {
    Materialize(next_iteration_++);
  }
}

bool Dispatcher::IsDone(int32_t task, int64_t iteration) const {
  if (iteration < oldest_live_) return true;
  if (iteration >= next_iteration_) return false;
  return SlotOf(iteration).state[task] == kDone;
}

void Dispatcher::MarkDirty(int32_t resource) {
  ResourceState& r = resources_[resource];
  if (!r.dirty) {
    r.dirty = true;
    dirty_.push_back(resource);
  }
}

void Dispatcher::MakeReady(int32_t task, int64_t iteration) {
  SlotOf(iteration).state[task] = kQueued;
  const int32_t r = resource_of_[task];
  resources_[r].ready.push({priority_[task], iteration, task});
  MarkDirty(r);
}

void Dispatcher::Materialize(int64_t iteration) {
  Slot& slot = SlotOf(iteration);
  slot.iteration = iteration;
  slot.completed = 0;
  for (int32_t i = 0; i < task_count_; ++i) {
    int32_t remaining = dep_count_[i];
    for (int32_t k = carried_begin_[i]; k < carried_begin_[i + 1]; ++k) {
      const CarriedDep& c = carried_[static_cast<size_t>(k)];
      if (iteration - c.distance >= 0 && !IsDone(c.task, iteration - c.distance)) ++remaining;
    }
    slot.remaining[i] = remaining;
    slot.state[i] = kWaiting;
  }
  for (int32_t i = 0; i < task_count_; ++i) {
    if (slot.remaining[i] == 0) MakeReady(i, iteration);
  }
}

int64_t Dispatcher::NeedBytes(int32_t task, int32_t pool) const {
  int64_t need = 0;  // several buffers of one task in one pool must fit together
  for (int32_t k = alloc_begin_[task]; k < alloc_begin_[task + 1]; ++k) {
    if (alloc_[k].pool == pool) need += alloc_[k].bytes;
  }
  return need;
}

int32_t Dispatcher::FirstShortPool(int32_t task) const {
  for (int32_t k = alloc_begin_[task]; k < alloc_begin_[task + 1]; ++k) {
    const int32_t pool = alloc_[k].pool;
    if (pools_[pool].in_use + NeedBytes(task, pool) > pools_[pool].capacity) return pool;
  }
  return kNoIndex;
}

void Dispatcher::WakePoolWaiters(int32_t p) {
  PoolState& pool = pools_[p];
  while (!pool.waiting.empty()) {
    Pending w = pool.waiting.top();
    const int64_t need = NeedBytes(w.task, p);
    if (pool.in_use + pool.admitted + need > pool.capacity) break;  // in order: no overtaking
    pool.admitted += need;
    w.woken_by = p;
    pool.waiting.pop();
    SlotOf(w.iteration).state[w.task] = kQueued;
    const int32_t r = resource_of_[w.task];
    resources_[r].ready.push(w);
    MarkDirty(r);
  }
}

size_t Dispatcher::Dispatch(std::vector<Instance>* to_start) {
  size_t started = 0;
  // Across resources too, the earliest (iteration, priority, task) goes first: it matters when
  // instances on different resources compete for one pool. The dirty list is short (the
  // resources touched since the last call), so a scan per start is cheap.
  while (true) {
    int32_t best = kNoIndex;
    for (size_t i = 0; i < dirty_.size();) {
      const int32_t r = dirty_[i];
      ResourceState& res = resources_[r];
      if (res.free_slots <= 0 || res.ready.empty()) {
        res.dirty = false;
        dirty_[i] = dirty_.back();
        dirty_.pop_back();
        continue;
      }
      // Pending's comparator is inverted: a < b when b comes first.
      if (best == kNoIndex || resources_[best].ready.top() < res.ready.top()) best = r;
      ++i;
    }
    if (best == kNoIndex) break;
    ResourceState& res = resources_[best];
    Pending p = res.ready.top();
    res.ready.pop();
    const int64_t it = p.iteration;
    if (p.woken_by != kNoIndex) {
      pools_[p.woken_by].admitted -= NeedBytes(p.task, p.woken_by);
      p.woken_by = kNoIndex;
    }
    if (alloc_begin_[p.task] != alloc_begin_[p.task + 1]) {
      const int32_t short_pool = FirstShortPool(p.task);
      if (short_pool != kNoIndex) {
        SlotOf(it).state[p.task] = kPoolWait;
        pools_[short_pool].waiting.push(p);
        continue;
      }
      for (int32_t k = alloc_begin_[p.task]; k < alloc_begin_[p.task + 1]; ++k) {
        PoolState& pool = pools_[alloc_[k].pool];
        pool.in_use += alloc_[k].bytes;
        pool.peak = std::max(pool.peak, pool.in_use);
      }
    }
    SlotOf(it).state[p.task] = kRunning;
    if (best != instant_resource_) --res.free_slots;
    ++running_;
    ++started;
    to_start->push_back({p.task, it});
  }
  return started;
}

void Dispatcher::Complete(const Instance& inst) {
  Slot& slot = SlotOf(inst.iteration);
  TF_CHECK(slot.iteration == inst.iteration && slot.state[inst.task] == kRunning);
  slot.state[inst.task] = kDone;
  --running_;
  ++completed_;
  ++slot.completed;

  const int32_t r = resource_of_[inst.task];
  if (r != instant_resource_) {
    ++resources_[r].free_slots;
    MarkDirty(r);
  }
  for (int32_t k = free_begin_[inst.task]; k < free_begin_[inst.task + 1]; ++k) {
    pools_[free_[k].pool].in_use -= free_[k].bytes;
    WakePoolWaiters(free_[k].pool);
  }
  for (int32_t k = succ_begin_[inst.task]; k < succ_begin_[inst.task + 1]; ++k) {
    const int32_t s = succ_[k];
    if (--slot.remaining[s] == 0) MakeReady(s, inst.iteration);
  }
  for (int32_t k = carried_succ_begin_[inst.task]; k < carried_succ_begin_[inst.task + 1]; ++k) {
    const CarriedDep& c = carried_succ_[k];
    const int64_t later = inst.iteration + c.distance;
    if (later < next_iteration_) {  // materialised: count it down; otherwise Materialize sees it done
      Slot& ls = SlotOf(later);
      if (--ls.remaining[c.task] == 0) MakeReady(c.task, later);
    }
  }
  // Retire complete iterations in order and materialise the ones the window now admits.
  while (oldest_live_ < next_iteration_ && SlotOf(oldest_live_).completed == task_count_) {
    SlotOf(oldest_live_).iteration = -1;
    ++oldest_live_;
    if (next_iteration_ < iterations_) Materialize(next_iteration_++);
  }
}

Status Dispatcher::DeadlockReport(size_t max_instances) const {
  if (done() || running_ > 0) return Status::Ok();
  // If anything could start, this is not a deadlock (the caller has not called Dispatch).
  for (const ResourceState& r : resources_) {
    if (!r.ready.empty() && r.free_slots > 0) return Status::Ok();
  }
  const auto& tasks = schedule_.tasks();
  std::ostringstream out;
  out << "schedule '" << schedule_.name << "' cannot make progress: " << completed_ << " of " << total_
      << " task instances completed, none running";
  size_t listed = 0;
  // Pool waits first: they are the root cause; dep waits follow from them. Every pool with
  // waiters is named (its first few, then how many more), so that one full pool does not hide
  // another.
  constexpr size_t kPerPool = 3;
  for (size_t p = 0; p < pools_.size(); ++p) {
    const PoolState& pool = pools_[p];
    size_t shown = 0;
    for (const Pending& w : pool.waiting.InOrder()) {
      if (shown == kPerPool) {
        out << "\n  ... and " << (pool.waiting.size() - shown) << " more waiting for pool '" << schedule_.pools()[p].name << "'";
        break;
      }
      ++shown;
      ++listed;
      const int64_t need = NeedBytes(w.task, static_cast<int32_t>(p));
      const int64_t free_bytes = pool.capacity - pool.in_use;
      out << "\n  task '" << tasks[w.task].id << "' (iteration " << w.iteration << ") waits for pool '"
          << schedule_.pools()[p].name << "': needs " << need << " bytes, " << free_bytes << " of "
          << pool.capacity << " free, short by " << (need - free_bytes) << " bytes";
    }
  }
  for (int64_t it = oldest_live_; it < next_iteration_ && listed < max_instances; ++it) {
    const Slot& slot = SlotOf(it);
    for (int32_t i = 0; i < task_count_ && listed < max_instances; ++i) {
      if (slot.state[i] != kWaiting) continue;
      // Only list tasks whose unfinished deps are all blocked elsewhere, not mere followers:
      // a task whose deps include a waiting task is implied by that one.
      std::string waits;
      bool follows_waiting = false;
      for (int32_t d : tasks[i].deps) {
        if (slot.state[d] == kWaiting) follows_waiting = true;
        if (slot.state[d] != kDone) waits += (waits.empty() ? "" : ", ") + ("'" + tasks[d].id + "'");
      }
      for (const CarriedDep& c : tasks[i].carried) {
        if (it - c.distance >= 0 && !IsDone(c.task, it - c.distance)) {
          waits += (waits.empty() ? "" : ", ") + ("'" + tasks[c.task].id + "' of iteration " +
                                                  std::to_string(it - c.distance));
        }
      }
      if (follows_waiting) continue;
      ++listed;
      out << "\n  task '" << tasks[i].id << "' (iteration " << it << ") waits for " << waits;
    }
  }
  return Status(StatusCode::kDeadlock, out.str());
}

}  // namespace tierflow
