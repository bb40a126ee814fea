// The dispatcher: decides when each task instance (task, iteration) starts, for the simulator
// and the real executor alike, so that a schedule means the same thing in both.
//
// An instance is ready when its same-iteration deps and its carried deps (task, iteration -
// distance) have completed. It starts when, in addition, its resource has a free slot and the
// buffers it allocates fit in their pools. Among startable instances, on one resource and across
// resources alike (which matters when they compete for a pool), the earlier iteration goes
// first, then the lower priority value, then the earlier task in the schedule (priority orders
// the tasks of one iteration: a schedule is a program for one iteration).
// An instance whose allocations do not fit steps aside (it does not block its resource) until
// its pool releases bytes.
//
// The dispatcher never sleeps, measures or spawns anything. The executor's loop is:
//     Dispatcher d(schedule, iterations);
//     d.Dispatch(&to_start);            // start each (its allocations are already taken)
//     ... when one finishes: d.Complete(instance); d.Dispatch(&to_start); ...
//     if (d.running() == 0 && !d.done()) -> d.DeadlockReport()
// Iterations are materialised lazily: at most schedule.iteration_window iterations have state
// at once, so memory stays proportional to one iteration whatever the iteration count.
//
// Thread safety: none; one thread drives a dispatcher.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
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
  // Requires schedule.Validate().ok(); `schedule` must outlive the dispatcher.
  Dispatcher(const Schedule& schedule, int64_t iterations);

  // Appends every instance that can start now and marks it running: its resource slot and its
  // allocations are taken. Returns the number appended.
  size_t Dispatch(std::vector<Instance>* to_start);

  // Reports that a running instance has finished: frees the buffers it frees, releases its
  // resource slot and makes its successors ready. Requires the instance to be running.
  void Complete(const Instance& instance);

  bool done() const { return completed_ == total_; }
  int64_t running() const { return running_; }
  int64_t completed() const { return completed_; }
  int64_t total() const { return total_; }
  int64_t iterations() const { return iterations_; }

  // Bytes of pool `p` held now and at most so far, persistent buffers included.
  int64_t pool_in_use_bytes(int32_t p) const { return pools_[p].in_use; }
  int64_t pool_peak_bytes(int32_t p) const { return pools_[p].peak; }

  // When nothing runs, nothing can start and work remains: a kDeadlock Status whose message
  // lists the blocked instances and what each waits for: for every pool with waiters, its first
  // three (the bytes each is short) and how many more; then up to max_instances in all, the
  // instances waiting on deps that are not themselves waiting. OK when not deadlocked.
  Status DeadlockReport(size_t max_instances = 12) const;

 private:
  enum State : uint8_t { kWaiting = 0, kQueued, kPoolWait, kRunning, kDone };

  struct Pending {  // an entry of a resource's ready queue or a pool's waiting heap
    int64_t priority;
    int64_t iteration;
    int32_t task;
    // Of an instance woken from a pool's waiters (WakePoolWaiters): that pool, whose `admitted`
    // counts its bytes until it is dispatched. Not part of the order.
    int32_t woken_by = kNoIndex;
    // std::push_heap builds a max-heap; invert so the smallest (iteration, priority, task) is on top.
    bool operator<(const Pending& o) const {
      if (iteration != o.iteration) return iteration > o.iteration;
      if (priority != o.priority) return priority > o.priority;
      return task > o.task;
    }
  };
  // A resource's ready instances, the first in dispatch order on top. Instances mostly become
  // ready in dispatch order (a flat schedule's at once, in task order): those that come after
  // every one queued so far join a run kept in order, at no cost; the others go to a heap. The
  // top is the smaller of the two fronts, so the order is a heap's alone (the same dispatch,
  // bit for bit), and a flat schedule of 10^6 tasks pays no heap's log n per instance.
  class ReadyQueue {
   public:
    bool empty() const { return run_head_ == run_.size() && heap_.empty(); }
    size_t size() const { return run_.size() - run_head_ + heap_.size(); }
    // Every instance queued, first in dispatch order first (for reports: it copies and sorts).
    std::vector<Pending> InOrder() const {
      std::vector<Pending> all(run_.begin() + static_cast<std::ptrdiff_t>(run_head_), run_.end());
      all.insert(all.end(), heap_.begin(), heap_.end());
      std::sort(all.begin(), all.end(), [](const Pending& a, const Pending& b) { return b < a; });
      return all;
    }
    // The first in dispatch order; requires !empty(). (Pending's comparator is inverted: a < b
    // when a comes after b.)
    const Pending& top() const {
      if (run_head_ == run_.size()) return heap_.front();
      if (heap_.empty()) return run_[run_head_];
      return heap_.front() < run_[run_head_] ? run_[run_head_] : heap_.front();
    }
    void push(const Pending& p) {
      if (run_head_ == run_.size()) {
        run_.clear();
        run_head_ = 0;
      }
      if (run_.empty() || p < run_.back()) {  // p comes after the run's last: joins it
        run_.push_back(p);
        return;
      }
      heap_.push_back(p);
      std::push_heap(heap_.begin(), heap_.end());
    }
    void pop() {
      if (run_head_ < run_.size() && (heap_.empty() || heap_.front() < run_[run_head_])) {
        // The run's consumed front is dropped once it is half the run, so the run holds what is
        // queued, not every instance it ever held.
        if (++run_head_ >= 4096 && run_head_ * 2 >= run_.size()) {
          run_.erase(run_.begin(), run_.begin() + static_cast<std::ptrdiff_t>(run_head_));
          run_head_ = 0;
        }
        return;
      }
      std::pop_heap(heap_.begin(), heap_.end());
      heap_.pop_back();
    }

   private:
    std::vector<Pending> run_;  // [run_head_, end) queued, in dispatch order
    size_t run_head_ = 0;
    std::vector<Pending> heap_;
  };
  struct ResourceState {
    int32_t free_slots = 0;  // < 0 never happens; INT32_MAX for instant ops
    bool dirty = false;
    ReadyQueue ready;
  };
  struct PoolState {
    int64_t capacity = 0;
    int64_t in_use = 0;
    int64_t peak = 0;
    // Bytes of the waiters woken and not yet dispatched: a later free wakes only what fits
    // beside them too, so a waiter woken is one that fits, not one sent back to wait again.
    int64_t admitted = 0;
    // Instances that did not fit, in dispatch order. A free re-queues only the waiters that the
    // free bytes can admit. They arrive in dispatch order (a resource's queue hands them over
    // in it), so the queue's run takes them at no cost: a long queue of waiters (10^5 flat
    // allocations behind a pool of 64) costs no log n per instance.
    ReadyQueue waiting;
  };
  struct PoolBytes {
    int32_t pool;
    int64_t bytes;
  };
  struct Slot {  // one materialised iteration
    int64_t iteration = -1;
    int64_t completed = 0;
    std::vector<int32_t> remaining;  // unfinished deps per task
    std::vector<uint8_t> state;
  };

  Slot& SlotOf(int64_t iteration) { return slots_[static_cast<size_t>(iteration % window_)]; }
  const Slot& SlotOf(int64_t iteration) const { return slots_[static_cast<size_t>(iteration % window_)]; }
  bool IsDone(int32_t task, int64_t iteration) const;
  void Materialize(int64_t iteration);
  void MakeReady(int32_t task, int64_t iteration);
  void MarkDirty(int32_t resource);
  int32_t FirstShortPool(int32_t task) const;  // kNoIndex when all allocations fit
  int64_t NeedBytes(int32_t task, int32_t pool) const;
  void WakePoolWaiters(int32_t pool);

  const Schedule& schedule_;
  const int64_t iterations_;
  const int64_t window_;
  const int32_t task_count_;
  const int32_t instant_resource_;  // index of the pseudo-resource for instant ops
  int64_t total_ = 0;
  int64_t completed_ = 0;
  int64_t running_ = 0;
  int64_t oldest_live_ = 0;   // iterations below are complete
  int64_t next_iteration_ = 0;  // first iteration not yet materialised

  // Per task, flattened (CSR) for speed.
  std::vector<int32_t> resource_of_;
  std::vector<int32_t> priority_;
  std::vector<int32_t> dep_count_;
  std::vector<int32_t> succ_begin_, succ_;                 // same-iteration successors
  std::vector<int32_t> carried_begin_;                     // each task's carried deps (Materialize)
  std::vector<CarriedDep> carried_;
  std::vector<int32_t> carried_succ_begin_;                // successors in later iterations
  std::vector<CarriedDep> carried_succ_;
  std::vector<int32_t> alloc_begin_, free_begin_;
  std::vector<PoolBytes> alloc_, free_;

  std::vector<ResourceState> resources_;
  std::vector<int32_t> dirty_;
  std::vector<PoolState> pools_;
  std::vector<Slot> slots_;
};

}  // namespace tierflow
