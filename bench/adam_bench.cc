// CPU AdamW throughput against a STREAM-like triad, both with the same CpuThreads pool.
//
//   triad:  a[i] = b[i] + s * c[i]               12 B/element (STREAM's count: 2 reads, 1 write)
//   adamw:  param, m, v, grad read; param, m, v written    28 B/element
//   adamw+bf16: the same plus the bf16 parameter copy        30 B/element
//   overflow_check_and_norm: grad read                        4 B/element
// bytes/s = counted bytes * elements / median time; ratio = adamw bytes/s / triad bytes/s.
// Write-allocate traffic is not counted (STREAM's convention), which favours the triad's
// denominator least: its write stream costs an extra read that AdamW's in-place updates do not.
//
// Usage: adam_bench [--threads=N] [--elements=N] [google-benchmark flags]; defaults 2 threads,
// 2^24 elements per array (64 MiB each, far beyond the last-level cache), 10 repetitions.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "median_reporter.h"
#include "tierflow/real/adamw.h"

namespace tierflow::real {
namespace {

int g_threads = 2;
int64_t g_elements = int64_t{1} << 24;

CpuThreads& Threads() {
  static CpuThreads threads(g_threads);
  return threads;
}

// Filled in parallel so that pages are first touched by the pool's threads.
std::vector<float> Filled(float value) {
  std::vector<float> v(static_cast<size_t>(g_elements));
  Threads().ParallelFor(g_elements, [&](int64_t b, int64_t e) {
    std::fill(v.begin() + b, v.begin() + e, value);
  });
  return v;
}

void Triad(float* __restrict a, const float* __restrict b, const float* __restrict c, float s,
           int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}

void BM_Triad(benchmark::State& state) {
  std::vector<float> a = Filled(0.0f), b = Filled(1.0f), c = Filled(2.0f);
  for (auto _ : state) {
    Threads().ParallelFor(g_elements, [&](int64_t begin, int64_t end) {
      Triad(a.data() + begin, b.data() + begin, c.data() + begin, 3.0f, end - begin);
    });
    benchmark::ClobberMemory();
  }
  const bool wrong = a[static_cast<size_t>(g_elements / 2)] != 7.0f;
  state.counters["wrong"] = wrong ? 1 : 0;
  state.SetBytesProcessed(state.iterations() * g_elements * 12);
  state.SetItemsProcessed(state.iterations() * g_elements);
}

void AdamBench(benchmark::State& state, bool bf16) {
  std::vector<float> p = Filled(0.5f), m = Filled(0.0f), v = Filled(0.0f), g = Filled(0.01f);
  std::vector<uint16_t> copy(bf16 ? static_cast<size_t>(g_elements) : 0);
  AdamWConfig config;
  config.weight_decay = 0.01f;
  int64_t step = 0;
  for (auto _ : state) {
    cpu::AdamW(p.data(), m.data(), v.data(), g.data(), bf16 ? copy.data() : nullptr, g_elements,
               ++step, 1.0f, config, Threads());
    benchmark::ClobberMemory();
  }
  // Every element saw the same history, so all must equal element 0 and be finite.
  const size_t mid = static_cast<size_t>(g_elements / 2);
  state.counters["wrong"] = (p[mid] != p[0] || !(p[mid] < 0.5f)) ? 1 : 0;
  state.SetBytesProcessed(state.iterations() * g_elements * (bf16 ? 30 : 28));
  state.SetItemsProcessed(state.iterations() * g_elements);
}
void BM_AdamW(benchmark::State& state) { AdamBench(state, false); }
void BM_AdamW_Bf16(benchmark::State& state) { AdamBench(state, true); }

void BM_OverflowCheckAndNorm(benchmark::State& state) {
  std::vector<float> g = Filled(0.5f);
  double sum_sq = 0;
  for (auto _ : state) {
    const cpu::GradCheck check = cpu::OverflowCheckAndNorm(g.data(), g_elements, 0.5f, Threads());
    sum_sq = check.sum_sq;
    benchmark::DoNotOptimize(sum_sq);
  }
  state.counters["wrong"] = sum_sq != 0.0625 * static_cast<double>(g_elements) ? 1 : 0;
  state.SetBytesProcessed(state.iterations() * g_elements * 4);
  state.SetItemsProcessed(state.iterations() * g_elements);
}

}  // namespace
}  // namespace tierflow::real

int main(int argc, char** argv) {
  using namespace tierflow::real;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      g_threads = std::max(1, std::atoi(argv[i] + 10));
    } else if (std::strncmp(argv[i], "--elements=", 11) == 0) {
      g_elements = std::max<int64_t>(1024, std::atoll(argv[i] + 11));
    } else {
      args.push_back(argv[i]);
    }
  }
  for (auto* b : {benchmark::RegisterBenchmark("triad", BM_Triad),
                  benchmark::RegisterBenchmark("adamw", BM_AdamW),
                  benchmark::RegisterBenchmark("adamw_bf16", BM_AdamW_Bf16),
                  benchmark::RegisterBenchmark("overflow_check_and_norm",
                                               BM_OverflowCheckAndNorm)}) {
    b->Repetitions(10)->ReportAggregatesOnly(true)->UseRealTime()->Unit(benchmark::kMillisecond);
  }
  int new_argc = static_cast<int>(args.size());
  benchmark::Initialize(&new_argc, args.data());
  std::printf("threads %d, elements %lld per array\n", g_threads,
              static_cast<long long>(g_elements));
  tierflow::bench::MedianReporter reporter("bytes_per_second");
  benchmark::RunSpecifiedBenchmarks(&reporter);
  const auto& med = reporter.median;
  if (med.count("triad") && med.count("adamw")) {
    const double triad = med.at("triad");
    std::printf("\n%-26s %12s %14s %8s\n", "kernel", "GB/s", "Gelem/s", "vs triad");
    for (const auto& [name, bytes_per_s] : med) {
      const double bytes_per_elem = name == "triad" ? 12 : name == "adamw" ? 28
                                    : name == "adamw_bf16" ? 30 : 4;
      std::printf("%-26s %12.2f %14.3f %7.1f%%\n", name.c_str(), bytes_per_s / 1e9,
                  bytes_per_s / bytes_per_elem / 1e9, 100.0 * bytes_per_s / triad);
    }
  }
  benchmark::Shutdown();
  return 0;
}
