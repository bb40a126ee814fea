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
// Every kernel's arrays are cut from one block, array k starting k cache lines past k x elements
// floats, as the memory and optimizer probes lay theirs out (real/probes/host_probes.cc). Two more
// benchmarks show why: the memory probe's update loop (p += s g, m += s g, v += s g g; 28 B per
// element; "update") and AdamW with their four arrays in separate std::vectors, allocated one
// after another as the probe's were ("_vectors"): with a power-of-two count they start at the same
// address modulo a page, a power of two plus a page apart.
//
// Usage: adam_bench [--threads=N] [--elements=N] [google-benchmark flags]; defaults 2 threads,
// 2^24 elements per array (64 MiB each, far beyond the last-level cache), 10 repetitions.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
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

constexpr int64_t kLineFloats = 16;

enum class Layout { kStaggered, kVectors };

// `values.size()` arrays of g_elements floats, filled with values[k] in parallel so that pages
// are first touched by the pool's threads. kStaggered: one page-aligned block, array k at
// k x (g_elements + 16) floats; kVectors: one std::vector each.
class Arrays {
 public:
  Arrays(const std::vector<float>& values, Layout layout) {
    if (layout == Layout::kStaggered) {
      const int64_t stride = g_elements + kLineFloats;
      const auto bytes = static_cast<size_t>(stride * static_cast<int64_t>(values.size())) * sizeof(float);
      block_.reset(static_cast<float*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096)));
      if (!block_) {
        std::fprintf(stderr, "adam_bench: cannot allocate %zu bytes\n", bytes);
        std::exit(1);
      }
      for (size_t k = 0; k < values.size(); ++k) arrays_.push_back(block_.get() + static_cast<int64_t>(k) * stride);
    } else {
      for (size_t k = 0; k < values.size(); ++k) arrays_.push_back(vectors_.emplace_back(static_cast<size_t>(g_elements)).data());
    }
    for (size_t k = 0; k < values.size(); ++k) {
      float* a = arrays_[k];
      Threads().ParallelFor(g_elements, [&](int64_t b, int64_t e) { std::fill(a + b, a + e, values[k]); });
    }
  }
  float* operator[](int k) const { return arrays_[static_cast<size_t>(k)]; }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> block_;
  std::deque<std::vector<float>> vectors_;  // a deque: its elements stay where they are
  std::vector<float*> arrays_;
};

void Triad(float* __restrict a, const float* __restrict b, const float* __restrict c, float s,
           int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}

void BM_Triad(benchmark::State& state) {
  const Arrays x({0.0f, 1.0f, 2.0f}, Layout::kStaggered);
  for (auto _ : state) {
    Threads().ParallelFor(g_elements, [&](int64_t begin, int64_t end) {
      Triad(x[0] + begin, x[1] + begin, x[2] + begin, 3.0f, end - begin);
    });
    benchmark::ClobberMemory();
  }
  const bool wrong = x[0][g_elements / 2] != 7.0f;
  state.counters["wrong"] = wrong ? 1 : 0;
  state.SetBytesProcessed(state.iterations() * g_elements * 12);
  state.SetItemsProcessed(state.iterations() * g_elements);
}

void AdamBench(benchmark::State& state, bool bf16, Layout layout) {
  const Arrays x({0.5f, 0.0f, 0.0f, 0.01f}, layout);  // param, m, v, grad
  float *p = x[0], *m = x[1], *v = x[2], *g = x[3];
  std::vector<uint16_t> copy(bf16 ? static_cast<size_t>(g_elements) : 0);
  AdamWConfig config;
  config.weight_decay = 0.01f;
  int64_t step = 0;
  for (auto _ : state) {
    cpu::AdamW(p, m, v, g, bf16 ? copy.data() : nullptr, g_elements, ++step, 1.0f, config, Threads());
    benchmark::ClobberMemory();
  }
  // Every element saw the same history, so all must equal element 0 and be finite.
  const int64_t mid = g_elements / 2;
  state.counters["wrong"] = (p[mid] != p[0] || !(p[mid] < 0.5f)) ? 1 : 0;
  state.SetBytesProcessed(state.iterations() * g_elements * (bf16 ? 30 : 28));
  state.SetItemsProcessed(state.iterations() * g_elements);
}
void BM_AdamW(benchmark::State& state) { AdamBench(state, false, Layout::kStaggered); }
void BM_AdamW_Bf16(benchmark::State& state) { AdamBench(state, true, Layout::kStaggered); }
void BM_AdamW_Vectors(benchmark::State& state) { AdamBench(state, false, Layout::kVectors); }

// The memory probe's loop (ProbeMemory): Adam's traffic with almost none of its arithmetic.
void UpdateBench(benchmark::State& state, Layout layout) {
  const Arrays x({0.5f, 0.25f, 0.0f, 0.0f}, layout);  // p, g, m, v
  int64_t pass = 0;
  for (auto _ : state) {
    const float s = pass++ % 2 == 0 ? 1e-3f : -1e-3f;
    Threads().ParallelFor(g_elements, [&](int64_t b, int64_t e) {
      float *pp = x[0], *mp = x[2], *vp = x[3];
      const float* gp = x[1];
      for (int64_t i = b; i < e; ++i) {
        pp[i] += s * gp[i];
        mp[i] += s * gp[i];
        vp[i] += s * gp[i] * gp[i];
      }
    });
    benchmark::ClobberMemory();
  }
  state.counters["wrong"] = x[1][g_elements / 2] != 0.25f ? 1 : 0;
  state.SetBytesProcessed(state.iterations() * g_elements * 28);
  state.SetItemsProcessed(state.iterations() * g_elements);
}
void BM_Update(benchmark::State& state) { UpdateBench(state, Layout::kStaggered); }
void BM_Update_Vectors(benchmark::State& state) { UpdateBench(state, Layout::kVectors); }

void BM_OverflowCheckAndNorm(benchmark::State& state) {
  const Arrays g({0.5f}, Layout::kStaggered);
  double sum_sq = 0;
  for (auto _ : state) {
    const cpu::GradCheck check = cpu::OverflowCheckAndNorm(g[0], g_elements, 0.5f, Threads());
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
                  benchmark::RegisterBenchmark("adamw_vectors", BM_AdamW_Vectors),
                  benchmark::RegisterBenchmark("update", BM_Update),
                  benchmark::RegisterBenchmark("update_vectors", BM_Update_Vectors),
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
      const double bytes_per_elem = name == "triad"                 ? 12
                                    : name == "adamw_bf16"            ? 30
                                    : name == "overflow_check_and_norm" ? 4
                                                                        : 28;
      std::printf("%-26s %12.2f %14.3f %7.1f%%\n", name.c_str(), bytes_per_s / 1e9,
                  bytes_per_s / bytes_per_elem / 1e9, 100.0 * bytes_per_s / triad);
    }
  }
  benchmark::Shutdown();
  return 0;
}
