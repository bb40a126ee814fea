// The dispatcher: decides when each task instance (task, iteration) of a schedule starts, for
// the simulator and the real executor alike, so that a schedule means the same thing in both.
//
// An instance is ready when
//   - its deps in the same iteration have completed,
//   - its carried deps (task, distance d) in iteration - d have completed (none before iteration 0),
//   - its resource has a free slot (instant ops alloc/free/barrier need none), and
//   - the buffers it allocates fit in their pools (free bytes = capacity - allocated bytes).
// Among ready instances on one resource the lower priority value goes first, then the earlier
// iteration, then schedule order. An instance whose allocations do not fit is not ready: it waits
// without blocking instances behind it that do fit (it is looked at again when its pool frees).
//
// Iterations are materialised lazily in a window of schedule.iteration_window iterations:
// iteration t + window is materialised only once iteration t has completed entirely, so memory
// stays proportional to the window, not to the number of iterations.
//
// Protocol: the executor calls Dispatch() to get the instances to start (their resource slots
// and buffer allocations are taken at that moment), starts them, and calls Complete() for each
// as it finishes (its frees are released and its resource slot returned), then Dispatch() again.
// When Dispatch() hands out nothing, nothing is in flight and Done() is false, the schedule is
// deadlocked: DeadlockReport() says why. The dispatcher never sleeps, measures or spawns.
//
// Thread safety: none; one executor thread drives it.
#pragma once

#include <cstdint>
#include <queue>
#include <set>
#include <string>
#include <vector>

#include "tierflow/core/schedule.h"
#include "tierflow/core/status.h"

namespace tierflow {

struct Instance {
  int32_t task = kNoIndex;
  int64_t iteration = 0;
  bool operator==(const Instance&) const = default;
};

class Dispatcher {
 public:
  // Requires schedule.Validate().ok() and iterations >= 0. Keeps a reference to `schedule`,
  // which must outlive the dispatcher.
  Dispatcher(const Schedule& schedule, int64_t iterations);

  // Appends to *to_start every instance that may start now, in dispatch order, and marks them
  // started. Returns how many it appended.
  int64_t Dispatch(std::vector<Instance>* to_start);

  // Reports that a started instance has finished. Requires it to be in flight.
  void Complete(const Instance& instance);

  // Every instance of every iteration has completed.
  bool Done() const { return completed_total_ == total_instances_; }
  int64_t in_flight() const { return in_flight_; }
  int64_t completed() const { return completed_total_; }
  int64_t total_instances() const { return total_instances_; }

  // A kDeadlock Status listing the blocked instances (at most a few dozen) and what each waits
  // for: the dep not yet completed, or the pool and how many bytes it is short. OK when the
  // dispatcher is not deadlocked (work is in flight, or everything is done, or something can
  // be dispatched).
  Status DeadlockReport() const;

  // Bytes allocated per schedule pool now (persistent buffers included), and the peak so far.
  const std::vector<int64_t>& pool_used_bytes() const { return pool_used_; }
  const std::vector<int64_t>& pool_peak_bytes() const { return pool_peak_; }

 private:
  enum class State : uint8_t { kWaiting, kReady, kParked, kRunning, kDone };
  struct Key {  // heap order: priority, iteration, schedule order
    int32_t priority;
    int64_t iteration;
    int32_t task;
    bool operator>(const Key& o) const {
      if (priority != o.priority) return priority > o.priority;
      if (iteration != o.iteration) return iteration > o.iteration;
      return task > o.task;
    }
    bool operator<(const Key& o) const { return o > *this; }
  };
  using Heap = std::priority_queue<Key, std::vector<Key>, std::greater<Key>>;
  struct PoolNeed {
    int32_t pool;
    int64_t bytes;
  };
  struct CarriedSucc {
    int32_t task;
    int32_t distance;
  };
  struct IterationState {
    int64_t iteration = -1;
    int64_t completed = 0;
    std::vector<int32_t> pending;  // deps not yet completed, per task
    std::vector<State> state;
  };

  IterationState& Slot(int64_t iteration) { return window_[iteration % window_size_]; }
  const IterationState& Slot(int64_t iteration) const { return window_[iteration % window_size_]; }
  bool Materialised(int64_t iteration) const {
    return iteration >= base_ && iteration < next_materialise_;
  }
  bool InstanceDone(int32_t task, int64_t iteration) const;
  void Materialise(int64_t iteration);
  void MakeReady(int32_t task, int64_t iteration);
  void Satisfy(int32_t task, int64_t iteration);
  // The first pool the instance's allocations do not fit in, or kNoIndex.
  int32_t ShortPool(int32_t task) const;
  int64_t NeedIn(int32_t task, int32_t pool) const;
  void Park(const Key& key, int32_t pool);
  void Start(const Key& key, std::vector<Instance>* to_start);

  const Schedule& schedule_;
  const int64_t iterations_;
  const int32_t n_tasks_;
  const int32_t instant_queue_;  // index of the queue of instant ops, after the resources
  int64_t window_size_;
  std::vector<IterationState> window_;
  int64_t base_ = 0;              // lowest iteration not yet complete
  int64_t next_materialise_ = 0;  // first iteration not yet materialised
  int64_t total_instances_ = 0;
  int64_t completed_total_ = 0;
  int64_t in_flight_ = 0;

  std::vector<std::vector<int32_t>> succ_;               // same-iteration successors
  std::vector<std::vector<CarriedSucc>> carried_succ_;   // successors in later iterations
  std::vector<int32_t> initial_pending_;                 // same-iteration dep counts
  std::vector<std::vector<PoolNeed>> alloc_needs_;       // per task, bytes per pool
  std::vector<std::vector<PoolNeed>> free_bytes_;        // per task, bytes freed per pool
  std::vector<int32_t> queue_of_;                        // per task: resource or instant_queue_

  std::vector<Heap> ready_;           // per queue
  std::vector<int32_t> free_slots_;   // per queue (instant queue: unbounded)
  std::vector<uint8_t> queue_dirty_;
  std::vector<int32_t> dirty_queues_;
  // Per pool: instances ready but short of bytes in that pool, in key order, and their needs
  // (the smallest need bounds the re-examination after a free, keeping it O(started) when
  // buffers are of similar sizes).
  std::vector<std::set<Key>> parked_;
  std::vector<std::multiset<int64_t>> parked_needs_;
  std::vector<uint8_t> pool_freed_;       // per pool: bytes freed since parked_ was last scanned
  std::vector<int32_t> freed_pools_;
  std::vector<int64_t> pool_used_;
  std::vector<int64_t> pool_peak_;
};

}  // namespace tierflow
