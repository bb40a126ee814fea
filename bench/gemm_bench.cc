// GFLOP/s of the CPU back-end's GEMM (cpu::Gemm, the linear layers' and attention's products)
// against Eigen's on the same shapes: the linear layers of tiny (hidden 256, ffn 688) and
// small-cpu (hidden 768, ffn 2048) on one micro-batch of 128 tokens, each in its three products
// (forward C = X W^T, input gradient C += dY W, weight gradient C += dY^T X).
//
//   gemm_bench [--threads=N] [google-benchmark flags]    (tierflow at 1 thread and at N, default 2;
//                                                         Eigen on one thread)
// The table at the end gives each shape's median GFLOP/s and tierflow's at one thread over
// Eigen's. Eigen runs only where the CPU has AVX2 and FMA (its file is compiled for them).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <benchmark/benchmark.h>

#include "median_reporter.h"
#include "gemm_bench_eigen.h"  // GemmLayout; EigenGemm is linked only with TIERFLOW_BENCH_EIGEN
#include "tierflow/real/cpu_gemm.h"

namespace tierflow::bench {
namespace {

struct Shape {
  const char* name;
  int64_t rows, in, out;  // a linear layer [out, in] on `rows` tokens
};

const Shape kShapes[] = {{"tiny.attn", 128, 256, 256},       {"tiny.ffn_up", 128, 256, 688},
                         {"tiny.ffn_down", 128, 688, 256},   {"small.attn", 128, 768, 768},
                         {"small.ffn_up", 128, 768, 2048},   {"small.ffn_down", 128, 2048, 768}};

const char* LayoutName(GemmLayout l) {
  return l == GemmLayout::kForward ? "fwd" : l == GemmLayout::kInputGrad ? "dx" : "dw";
}

// m, n, k of the product: forward [rows, out] over in; dx [rows, in] over out; dw [out, in] over rows.
std::tuple<int64_t, int64_t, int64_t> Mnk(const Shape& s, GemmLayout l) {
  if (l == GemmLayout::kForward) return {s.rows, s.out, s.in};
  if (l == GemmLayout::kInputGrad) return {s.rows, s.in, s.out};
  return {s.out, s.in, s.rows};
}

int g_threads = 2;

void TierflowGemm(GemmLayout l, const Shape& s, const float* x, const float* w, const float* dy, float* c,
                  real::CpuThreads& threads) {
  using real::cpu::Gemm;
  if (l == GemmLayout::kForward) {
    Gemm<float>(s.rows, s.out, s.in, {x, s.in, 1}, {w, 1, s.in}, c, s.out, false, threads);
  } else if (l == GemmLayout::kInputGrad) {
    Gemm<float>(s.rows, s.in, s.out, {dy, s.out, 1}, {w, s.in, 1}, c, s.in, true, threads);
  } else {
    Gemm<float>(s.out, s.in, s.rows, {dy, 1, s.out}, {x, s.in, 1}, c, s.in, true, threads);
  }
}

void Run(benchmark::State& state, const Shape& s, GemmLayout l, bool eigen, int threads_n) {
  real::CpuThreads threads(threads_n);
  std::vector<float> x(static_cast<size_t>(s.rows * s.in), 0.5f), w(static_cast<size_t>(s.out * s.in), 0.25f),
      dy(static_cast<size_t>(s.rows * s.out), 0.125f);
  const auto [m, n, k] = Mnk(s, l);
  std::vector<float> c(static_cast<size_t>(m * n), 0.0f);
  for (auto _ : state) {
#ifdef TIERFLOW_BENCH_EIGEN
    if (eigen) {
      const float* a = l == GemmLayout::kForward ? x.data() : dy.data();
      const float* b = l == GemmLayout::kForward ? w.data() : l == GemmLayout::kInputGrad ? w.data() : x.data();
      EigenGemm(l, m, n, k, a, b, c.data());
    } else {
      TierflowGemm(l, s, x.data(), w.data(), dy.data(), c.data(), threads);
    }
#else
    (void)eigen;
    TierflowGemm(l, s, x.data(), w.data(), dy.data(), c.data(), threads);
#endif
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * static_cast<double>(m * n * k) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

}  // namespace
}  // namespace tierflow::bench

int main(int argc, char** argv) {
  using namespace tierflow::bench;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      g_threads = std::max(1, std::atoi(argv[i] + 10));
    } else {
      args.push_back(argv[i]);
    }
  }
  bool eigen = false;
#ifdef TIERFLOW_BENCH_EIGEN
  eigen = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (!eigen) std::printf("Eigen left out: its kernel is compiled for AVX2 + FMA, which this CPU lacks\n");
#else
  std::printf("Eigen left out: not found at configure time (or the compiler has no -mavx2 -mfma)\n");
#endif
  std::vector<std::string> names;
  for (const Shape& s : kShapes) {
    for (const GemmLayout l : {GemmLayout::kForward, GemmLayout::kInputGrad, GemmLayout::kWeightGrad}) {
      const std::string base = std::string(s.name) + "." + LayoutName(l);
      names.push_back(base);
      std::vector<std::pair<std::string, std::pair<bool, int>>> runs = {{base + "/tierflow/1", {false, 1}},
                                                                        {base + "/tierflow/" + std::to_string(g_threads), {false, g_threads}}};
      if (g_threads == 1) runs.pop_back();
      if (eigen) runs.push_back({base + "/eigen/1", {true, 1}});
      for (const auto& [name, how] : runs) {
        const Shape* shape = &s;
        benchmark::RegisterBenchmark(name.c_str(), [shape, l, how = how](benchmark::State& st) {
          Run(st, *shape, l, how.first, how.second);
        })->Repetitions(5)->ReportAggregatesOnly(true)->UseRealTime()->Unit(benchmark::kMicrosecond);
      }
    }
  }
  int new_argc = static_cast<int>(args.size());
  benchmark::Initialize(&new_argc, args.data());
  std::printf("tierflow kernel: %s; threads 1 and %d\n", tierflow::real::cpu::GemmKernelName(), g_threads);
  MedianReporter reporter("GFLOP/s");
  benchmark::RunSpecifiedBenchmarks(&reporter);
  const auto& med = reporter.median;
  const std::string many = "tierflow/" + std::to_string(g_threads);
  std::printf("\n%-20s %14s %14s %12s %16s\n", "product", "tierflow 1 thr", ("tierflow " + std::to_string(g_threads) + " thr").c_str(),
              "Eigen 1 thr", "tierflow/Eigen");
  for (const std::string& base : names) {
    auto get = [&](const std::string& which) {
      auto it = med.find(base + "/" + which);
      return it == med.end() ? 0.0 : it->second / 1e9;
    };
    const double ours = get("tierflow/1"), many_v = get(many), theirs = get("eigen/1");
    if (ours == 0) continue;  // filtered out
    if (theirs > 0) {
      std::printf("%-20s %14.1f %14.1f %12.1f %15.2fx\n", base.c_str(), ours, many_v, theirs, ours / theirs);
    } else {
      std::printf("%-20s %14.1f %14.1f %12s %16s\n", base.c_str(), ours, many_v, "-", "-");
    }
  }
  benchmark::Shutdown();
  return 0;
}
