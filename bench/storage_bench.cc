// The io_uring engine against fio on the same directory: sequential 1 MiB reads and writes at
// queue depth 16 and 32, O_DIRECT, same file size and time per repetition. Each repetition runs
// fio and the engine back to back, alternating which goes first (both see the same background
// load); each keeps its file across repetitions. Counters are medians; ratio = engine / fio.
//   storage_bench [--dir=D] [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include "storage_bench_util.h"
#include "tierflow/real/disk_probe.h"

namespace {

using tierflow::bench::BenchDir;
using tierflow::bench::Median;

constexpr int64_t kFileBytes = int64_t{1} << 30;
constexpr double kSeconds = 2.0;
constexpr int kReps = 5;

void EngineVsFio(benchmark::State& state, const std::string& op, const std::string& backend) {
  const int64_t block = state.range(0);
  const int qd = static_cast<int>(state.range(1));
  std::vector<double> ours, fio;
  for (auto _ : state) {
    for (int rep = 0; rep < kReps; ++rep) {
      for (int turn = 0; turn < 2; ++turn) {
        if ((turn == 0) == (rep % 2 == 0)) {
          double f = tierflow::bench::RunFio(op, block, qd, kFileBytes, kSeconds);
          if (f <= 0) {
            state.SkipWithError("fio failed (is fio installed with io_uring support?)");
            return;
          }
          fio.push_back(f);
        } else {
          tierflow::real::DiskProbeOptions o;
          o.dirs = {BenchDir()};
          o.block_bytes = {block};
          o.queue_depths = {qd};
          o.ops = {op};
          o.device_counts = {1};
          o.file_bytes = kFileBytes;
          o.warmup_s = 0.25;
          o.duration_s = kSeconds;
          o.repetitions = 1;
          o.backend = backend;
          o.keep_files = true;
          auto r = tierflow::real::RunDiskProbe(o, nullptr);
          if (!r.ok()) {
            state.SkipWithError(r.status().ToString().c_str());
            return;
          }
          if (r->at(0).wrong != 0) state.SkipWithError("engine reported wrong data");
          ours.push_back(r->at(0).bytes_per_s);
        }
      }
    }
  }
  tierflow::bench::RemoveFioFile();
  std::remove(tierflow::real::ProbeFilePath(BenchDir()).c_str());
  state.counters["engine_GBps"] = Median(ours) / 1e9;
  state.counters["fio_GBps"] = Median(fio) / 1e9;
  state.counters["ratio"] = Median(ours) / Median(fio);
}

void BM_UringRead(benchmark::State& s) { EngineVsFio(s, "read", "uring"); }
void BM_UringWrite(benchmark::State& s) { EngineVsFio(s, "write", "uring"); }
void BM_PosixRead(benchmark::State& s) { EngineVsFio(s, "read", "posix"); }
void BM_PosixWrite(benchmark::State& s) { EngineVsFio(s, "write", "posix"); }

BENCHMARK(BM_UringRead)->Args({1 << 20, 16})->Args({1 << 20, 32})->Iterations(1)->Unit(benchmark::kSecond);
BENCHMARK(BM_UringWrite)->Args({1 << 20, 16})->Args({1 << 20, 32})->Iterations(1)->Unit(benchmark::kSecond);
BENCHMARK(BM_PosixRead)->Args({1 << 20, 16})->Iterations(1)->Unit(benchmark::kSecond);
BENCHMARK(BM_PosixWrite)->Args({1 << 20, 16})->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace

int main(int argc, char** argv) { return tierflow::bench::RunBenchmarksInBenchDir(argc, argv); }
