#include "tierflow/real/cpu_threads.h"

#include <algorithm>

#include "tierflow/core/status.h"

namespace tierflow::real {

CpuThreads::CpuThreads(int threads) : threads_(std::max(1, threads)) {
  workers_.reserve(static_cast<size_t>(threads_ - 1));
  for (int i = 1; i < threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

CpuThreads::~CpuThreads() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void CpuThreads::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    int chunks = 0;
    int64_t n = 0;
    const std::function<void(int64_t, int64_t)>* fn = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      chunks = chunks_;
      n = n_;
      fn = fn_;
    }
    if (index < chunks) {
      (*fn)(n * index / chunks, n * (index + 1) / chunks);
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }
}

void CpuThreads::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int chunks = static_cast<int>(std::min<int64_t>(threads_, (n + grain - 1) / grain));
  if (chunks <= 1) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    chunks_ = chunks;
    pending_ = chunks - 1;
    n_ = n;
    fn_ = &fn;
    ++generation_;
  }
  start_cv_.notify_all();
  fn(0, n / chunks);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  fn_ = nullptr;
}

CpuThreads& DefaultCpuThreads() {
  static CpuThreads* pool =
      new CpuThreads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  return *pool;
}

}  // namespace tierflow::real
