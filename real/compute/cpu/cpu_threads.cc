#include "tierflow/real/cpu_threads.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace tierflow::real {
namespace {

// The CPUs this thread may run on, in increasing order (empty if unknown).
std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

bool BindTo(std::thread& t, int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return pthread_setaffinity_np(t.native_handle(), sizeof(one), &one) == 0;
}

}  // namespace

CpuThreads::CpuThreads(int threads) : threads_(std::max(1, threads)) {
  const char* bind = std::getenv("TIERFLOW_CPU_BIND");
  if (threads_ > 1 && !(bind && std::strcmp(bind, "0") == 0)) {
    std::vector<int> allowed = AllowedCpus();
    if (static_cast<int>(allowed.size()) >= threads_) {
      cpus_.assign(allowed.begin(), allowed.begin() + threads_);
      slot_of_cpu_.assign(static_cast<size_t>(cpus_.back() + 1), -1);
      for (int i = 0; i < threads_; ++i) slot_of_cpu_[static_cast<size_t>(cpus_[static_cast<size_t>(i)])] = i;
    }
  }
  const int first = bound() ? 0 : 1;  // unbound, the caller always runs chunk 0
  slots_.resize(static_cast<size_t>(threads_));
  workers_.reserve(static_cast<size_t>(threads_ - first));
  for (int i = first; i < threads_; ++i) {
    slots_[static_cast<size_t>(i)] = std::make_unique<Worker>();
    workers_.emplace_back([this, i] { WorkerLoop(i); });
    if (bound() && !BindTo(workers_.back(), cpus_[static_cast<size_t>(i)])) {
      // A CPU that may not be bound to after all (a cpuset changed under us): run unbound, the
      // caller taking chunk 0 as on a machine with too few CPUs; slot 0's worker then idles.
      cpus_.clear();
      slot_of_cpu_.clear();
    }
  }
}

CpuThreads::~CpuThreads() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  for (auto& s : slots_) {
    if (s) s->wake.notify_one();
  }
  for (auto& w : workers_) w.join();
}

void CpuThreads::WorkerLoop(int index) {
  Worker& me = *slots_[static_cast<size_t>(index)];
  uint64_t seen = 0;
  for (;;) {
    int chunks = 0;
    int64_t n = 0;
    const std::function<void(int64_t, int64_t)>* fn = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      me.wake.wait(lock, [&] { return stop_ || me.job != seen; });
      if (stop_) return;
      seen = me.job;
      chunks = chunks_;
      n = n_;
      fn = fn_;
    }
    (*fn)(n * index / chunks, n * (index + 1) / chunks);
    std::lock_guard<std::mutex> lock(mu_);
    if (--pending_ == 0) done_cv_.notify_one();
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
  int mine = 0;  // the chunk this thread runs: its CPU's slot where that slot is in use
  if (bound()) {
    const int cpu = sched_getcpu();
    if (cpu >= 0 && cpu < static_cast<int>(slot_of_cpu_.size())) {
      const int slot = slot_of_cpu_[static_cast<size_t>(cpu)];
      if (slot >= 0 && slot < chunks) mine = slot;
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    chunks_ = chunks;
    pending_ = chunks - 1;
    n_ = n;
    fn_ = &fn;
    ++generation_;
    for (int i = 0; i < chunks; ++i) {
      if (i != mine) slots_[static_cast<size_t>(i)]->job = generation_;
    }
  }
  for (int i = 0; i < chunks; ++i) {
    if (i != mine) slots_[static_cast<size_t>(i)]->wake.notify_one();
  }
  fn(n * mine / chunks, n * (mine + 1) / chunks);
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
