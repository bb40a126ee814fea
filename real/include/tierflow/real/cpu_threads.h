// CpuThreads: a small fixed pool of std::threads that runs one parallel loop at a time.
//
// ParallelFor(n, fn) splits [0, n) into at most threads() contiguous chunks and calls
// fn(begin, end) once per non-empty chunk, the calling thread doing the first chunk; it returns
// when every chunk is done. The kernels built on it give each output element to exactly one
// chunk and reduce in a fixed order, so their results do not depend on the thread count.
//
// Thread safety: one ParallelFor at a time per pool (calls from several threads are serialised
// by a mutex). fn must not call ParallelFor on the same pool.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tierflow::real {

class CpuThreads {
 public:
  // threads >= 1; threads - 1 worker threads are started (the caller is the first thread).
  explicit CpuThreads(int threads);
  ~CpuThreads();
  CpuThreads(const CpuThreads&) = delete;
  CpuThreads& operator=(const CpuThreads&) = delete;

  int threads() const { return threads_; }

  // Calls fn(begin, end) over [0, n) in at most threads() chunks of at least `grain` items each
  // (fewer chunks when n is small). Chunk t is [n*t/k, n*(t+1)/k) for k chunks.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);
  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
    ParallelFor(n, 1, fn);
  }

 private:
  void WorkerLoop(int index);

  int threads_;
  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // one ParallelFor at a time
  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  uint64_t generation_ = 0;
  int chunks_ = 0;
  int pending_ = 0;
  int64_t n_ = 0;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  bool stop_ = false;
};

// A process-wide pool with std::thread::hardware_concurrency() threads (at least 1), made on
// first use.
CpuThreads& DefaultCpuThreads();

}  // namespace tierflow::real
