// CpuThreads: a small fixed pool of std::threads that runs one parallel loop at a time.
//
// ParallelFor(n, fn) splits [0, n) into at most threads() contiguous chunks and calls
// fn(begin, end) once per non-empty chunk, the calling thread doing one of them; it returns
// when every chunk is done. The kernels built on it give each output element to exactly one
// chunk and reduce in a fixed order, so their results do not depend on the thread count, nor on
// which thread runs which chunk.
//
// Placement. Where the process may run on at least threads() CPUs, the pool keeps one worker
// per chunk slot, worker i bound to the i-th of those CPUs, and the caller runs the chunk of the
// slot whose CPU it is on (chunk 0 when that slot is not in use), so the chunks of one loop run
// on distinct CPUs. Left to the scheduler, a fork-join pool's threads wake each other onto the
// waker's CPU: on a 2-vCPU VM both threads of every layer of a pass ran on one CPU, the other
// idle, after a phase of small disk requests (tiny-cpu's forward 17-18 ms a pass instead of
// 11, docs/executor.md "The CPU threads"). With fewer CPUs allowed than threads, or with
// TIERFLOW_CPU_BIND=0 in the environment (read when a pool is made), the workers are not bound
// and the caller runs chunk 0. Only the workers whose chunk is in use are woken.
//
// Thread safety: one ParallelFor at a time per pool (calls from several threads are serialised
// by a mutex). fn must not call ParallelFor on the same pool.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tierflow::real {

class CpuThreads {
 public:
  // threads >= 1 (less is taken as 1).
  explicit CpuThreads(int threads);
  ~CpuThreads();
  CpuThreads(const CpuThreads&) = delete;
  CpuThreads& operator=(const CpuThreads&) = delete;

  int threads() const { return threads_; }

  // Whether worker i runs on cpus()[i] alone (see Placement above); cpus() is empty when not.
  bool bound() const { return !cpus_.empty(); }
  const std::vector<int>& cpus() const { return cpus_; }

  // Calls fn(begin, end) over [0, n) in at most threads() chunks of at least `grain` items each
  // (fewer chunks when n is small). Chunk t is [n*t/k, n*(t+1)/k) for k chunks.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);
  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
    ParallelFor(n, 1, fn);
  }

 private:
  struct Worker {
    std::condition_variable wake;
    uint64_t job = 0;  // the generation of the last loop that gave this worker a chunk
  };
  void WorkerLoop(int index);

  int threads_;
  std::vector<int> cpus_;            // worker i's CPU, when bound
  std::vector<int> slot_of_cpu_;     // CPU number -> slot, or -1
  std::vector<std::unique_ptr<Worker>> slots_;  // per slot; null for the caller's slot 0 when unbound
  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // one ParallelFor at a time
  std::mutex mu_;       // guards what follows and every Worker's job
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
