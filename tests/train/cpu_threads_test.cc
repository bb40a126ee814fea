// CpuThreads: every index once in any placement, and the chunks of one loop on distinct CPUs
// where the pool can bind its workers.
#include "tierflow/real/cpu_threads.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace tierflow::real {
namespace {

int AllowedCpuCount() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
}

TEST(CpuThreads, EveryIndexOnceWhateverTheThreadCount) {
  for (int threads : {1, 2, 3, AllowedCpuCount(), AllowedCpuCount() + 1, 64}) {
    CpuThreads pool(threads);
    for (int64_t n : {1, 2, 5, 1000}) {
      for (int64_t grain : {1, 7}) {
        std::vector<int> hits(static_cast<size_t>(n), 0);
        std::mutex mu;
        std::vector<std::pair<int64_t, int64_t>> ranges;
        pool.ParallelFor(n, grain, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) ++hits[static_cast<size_t>(i)];
          std::lock_guard<std::mutex> lock(mu);
          ranges.emplace_back(begin, end);
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)], 1) << threads << " threads, n " << n << ", index " << i;
        const int64_t chunks = std::min<int64_t>(pool.threads(), (n + grain - 1) / grain);
        EXPECT_EQ(static_cast<int64_t>(ranges.size()), chunks) << threads << " threads, n " << n;
      }
    }
  }
}

TEST(CpuThreads, TheChunksOfOneLoopRunOnDistinctCpus) {
  const int cpus = AllowedCpuCount();
  if (cpus < 2) GTEST_SKIP() << "this process may run on " << cpus << " CPU: nothing to spread over";
  CpuThreads pool(cpus);
  ASSERT_TRUE(pool.bound());
  ASSERT_EQ(static_cast<int>(pool.cpus().size()), cpus);
  EXPECT_EQ(std::set<int>(pool.cpus().begin(), pool.cpus().end()).size(), static_cast<size_t>(cpus));
  for (int rep = 0; rep < 20; ++rep) {
    std::mutex mu;
    std::vector<std::pair<int64_t, int>> worker_chunks;  // (chunk, CPU) of the chunks the workers ran
    int by_caller = 0;
    const std::thread::id caller = std::this_thread::get_id();
    pool.ParallelFor(cpus, [&](int64_t begin, int64_t) {
      const int cpu = sched_getcpu();
      std::lock_guard<std::mutex> lock(mu);
      if (std::this_thread::get_id() == caller) {
        ++by_caller;
      } else {
        worker_chunks.emplace_back(begin, cpu);
      }
    });
    EXPECT_EQ(by_caller, 1);
    ASSERT_EQ(static_cast<int>(worker_chunks.size()), cpus - 1);
    for (const auto& [chunk, cpu] : worker_chunks) {
      EXPECT_EQ(cpu, pool.cpus()[static_cast<size_t>(chunk)]) << "chunk " << chunk << " ran off its worker's CPU";
    }
  }
}

// The caller runs chunk 0 of every loop when the workers are left to the scheduler.
void ExpectTheCallerRunsChunkZero(CpuThreads& pool) {
  EXPECT_FALSE(pool.bound());
  std::vector<int64_t> caller_begins;
  const std::thread::id caller = std::this_thread::get_id();
  std::mutex mu;
  pool.ParallelFor(1000, [&](int64_t begin, int64_t) {
    std::lock_guard<std::mutex> lock(mu);
    if (std::this_thread::get_id() == caller) caller_begins.push_back(begin);
  });
  EXPECT_EQ(caller_begins, std::vector<int64_t>{0});
}

TEST(CpuThreads, MoreThreadsThanCpusAreLeftToTheScheduler) {
  CpuThreads pool(AllowedCpuCount() + 1);
  ExpectTheCallerRunsChunkZero(pool);
}

TEST(CpuThreads, BindingIsOffWithTheEnvironmentsZero) {
  ASSERT_EQ(setenv("TIERFLOW_CPU_BIND", "0", 1), 0);
  CpuThreads pool(std::max(2, AllowedCpuCount()));
  unsetenv("TIERFLOW_CPU_BIND");
  ExpectTheCallerRunsChunkZero(pool);
}

}  // namespace
}  // namespace tierflow::real
