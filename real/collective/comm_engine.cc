#include "tierflow/real/comm_engine.h"

#include <array>
#include <vector>

namespace tierflow::real {

CommEngine::CommEngine(Collective* comm, std::function<void(size_t, Status)> done)
    : comm_(comm), done_(std::move(done)), thread_([this] { Loop(); }) {}

CommEngine::~CommEngine() { Finish(); }

void CommEngine::Post(int32_t task, int64_t iteration, size_t job, std::function<Status()> work) {
  std::lock_guard<std::mutex> lock(mu_);
  if (comm_->rank() == 0) queue_.push_back({{task, iteration}, Item{job, std::move(work)}});
  else posted_[{task, iteration}] = Item{job, std::move(work)};
  cv_.notify_all();
}

void CommEngine::Finish() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    finishing_ = true;
    cv_.notify_all();
  }
  thread_.join();
}

void CommEngine::Fail() {
  std::lock_guard<std::mutex> lock(mu_);
  failed_ = true;
  finishing_ = true;
  cv_.notify_all();
}

void CommEngine::Loop() {
  for (;;) {
    std::array<int64_t, 2> next{-1, -1};  // (task, iteration); task -1: the end
    Item item;
    if (comm_->rank() == 0) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return finishing_ || !queue_.empty(); });
      if (!queue_.empty()) {
        next = {queue_.front().first.first, queue_.front().first.second};
        item = std::move(queue_.front().second);
        queue_.pop_front();
      }
    }
    Status st = Complete(comm_->Broadcast(next.data(), sizeof(next), 0));
    if (!st.ok()) {  // nothing more can be agreed on: every waiting collective fails
      std::vector<size_t> failed;
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (auto& [key, posted] : posted_) failed.push_back(posted.job);
        for (auto& [key, queued] : queue_) failed.push_back(queued.job);
      }
      if (item.work) failed.push_back(item.job);
      for (size_t job : failed) done_(job, st);  // outside the lock: `done` may post
      return;
    }
    if (next[0] == -1) return;
    if (comm_->rank() != 0) {
      std::unique_lock<std::mutex> lock(mu_);
      const std::pair<int32_t, int64_t> key{static_cast<int32_t>(next[0]), next[1]};
      cv_.wait(lock, [&] { return failed_ || posted_.count(key) > 0; });
      if (posted_.count(key) == 0) return;  // failed: it will never be posted here
      item = std::move(posted_[key]);
      posted_.erase(key);
    }
    done_(item.job, item.work());
  }
}

}  // namespace tierflow::real
