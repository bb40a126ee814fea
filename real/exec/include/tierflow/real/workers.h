// The executor's threads (run.h): one queue of completions the dispatch thread sleeps on, and
// one worker thread per resource running its tasks' work in order.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "tierflow/core/status.h"

namespace tierflow::real::exec {

// ---- Events and workers ------------------------------------------------------------------------

struct Event {
  size_t job = 0;
  Status status;
  // Not the job's end but its node-wide lock granted (tier_locks.h): the slot taken, -1 with the
  // error that kept it.
  bool grant = false;
  int32_t slot = -1;
};

class EventQueue {
 public:
  // Notifies under the lock: the dispatch thread may pop the run's last event and destroy the
  // queue as soon as the lock is free, so a notify after it would touch a destroyed condition
  // variable (ThreadSanitizer found it: an io_uring completion thread still in notify_one).
  void Push(Event e) {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(e));
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

}  // namespace tierflow::real::exec
