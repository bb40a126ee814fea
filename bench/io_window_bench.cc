// real::IoWindow, the request shape of every read and write task of `tierflow run`, on the
// io_uring back-end against fio doing the same: one 1 GiB O_DIRECT file read (or written) in
// block-sized requests with `depth` in flight. Each repetition runs fio and the window back to
// back, alternating which goes first; counters are medians, ratio = window / fio. The window
// refills from the completion path (one Submit per completed piece, no thread hand-off), so the
// ratio measures what that costs against fio's own loop.
//   io_window_bench [--dir=D] [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "storage_bench_util.h"
#include "tierflow/real/io_window.h"
#include "tierflow/real/storage.h"

namespace {

using tierflow::bench::BenchDir;
using tierflow::bench::Median;
namespace real = tierflow::real;

constexpr int64_t kFileBytes = int64_t{1} << 30;
constexpr int kReps = 5;

// Bytes per second of one IoWindow over the whole file, or -1 (the error in `why`).
double WindowOnce(real::Storage* io, real::FileId file, char* buffer, real::IoOp op, int64_t block, int depth,
                  std::string* why) {
  std::promise<tierflow::Status> done;
  auto result = done.get_future();
  real::IoWindow w(io, real::CutRequests({{op, file, 0, kFileBytes, buffer, 0}}, block), static_cast<size_t>(depth),
                   [&](tierflow::Status s) { done.set_value(std::move(s)); });
  const double start = real::MonotonicSeconds();
  w.Start();
  const tierflow::Status s = result.get();
  const double seconds = real::MonotonicSeconds() - start;
  if (!s.ok()) {
    *why = s.ToString();
    return -1;
  }
  return static_cast<double>(kFileBytes) / seconds;
}

void WindowVsFio(benchmark::State& state, real::IoOp op) {
  const int64_t block = state.range(0);
  const int depth = static_cast<int>(state.range(1));
  const std::string rw = op == real::IoOp::kRead ? "read" : "write";
  real::StorageOptions so;
  so.request_bytes = block;  // as the executor sets it: the window cuts, the back-end does not
  so.queue_depth = std::max(32, depth);
  auto io = real::NewStorage("uring", so);
  if (!io.ok()) {
    state.SkipWithError(io.status().ToString().c_str());
    return;
  }
  const std::string path = BenchDir() + "/io-window-bench.dat";
  real::OpenOptions oo;
  oo.create = true;
  auto file = (*io)->Open(path, oo);
  if (!file.ok()) {
    state.SkipWithError(file.status().ToString().c_str());
    return;
  }
  void* mem = nullptr;
  if (posix_memalign(&mem, real::kDirectAlignment, kFileBytes) != 0) {
    state.SkipWithError("cannot allocate the buffer");
    return;
  }
  char* buffer = static_cast<char*>(mem);
  std::memset(buffer, 0x5a, kFileBytes);
  std::string why;
  // Lay both files out once (reads need data there; writes then overwrite written extents, the
  // case of the executor's store files after their first pass).
  if (WindowOnce(io->get(), file->id, buffer, real::IoOp::kWrite, 1 << 20, 8, &why) < 0 ||
      tierflow::bench::RunFio("write", 1 << 20, 8, kFileBytes, 0) <= 0) {
    state.SkipWithError(why.empty() ? "fio failed (is fio installed with io_uring support?)" : why.c_str());
    std::free(mem);
    return;
  }
  std::vector<double> ours, fio;
  for (auto _ : state) {
    for (int rep = 0; rep < kReps; ++rep) {
      for (int turn = 0; turn < 2; ++turn) {
        if ((turn == 0) == (rep % 2 == 0)) {
          const double f = tierflow::bench::RunFio(rw, block, depth, kFileBytes, 0);
          if (f <= 0) {
            state.SkipWithError("fio failed (is fio installed with io_uring support?)");
            std::free(mem);
            return;
          }
          fio.push_back(f);
        } else {
          const double b = WindowOnce(io->get(), file->id, buffer, op, block, depth, &why);
          if (b < 0) {
            state.SkipWithError(why.c_str());
            std::free(mem);
            return;
          }
          ours.push_back(b);
        }
      }
    }
  }
  (void)(*io)->Close(file->id);
  std::remove(path.c_str());
  tierflow::bench::RemoveFioFile();
  std::free(mem);
  state.counters["window_GBps"] = Median(ours) / 1e9;
  state.counters["fio_GBps"] = Median(fio) / 1e9;
  state.counters["ratio"] = Median(ours) / Median(fio);
}

void BM_WindowRead(benchmark::State& s) { WindowVsFio(s, real::IoOp::kRead); }
void BM_WindowWrite(benchmark::State& s) { WindowVsFio(s, real::IoOp::kWrite); }

// DeepSpeed's aio defaults (1 MiB x 8) and the small synchronous requests of calibrate_node.sh.
BENCHMARK(BM_WindowRead)->Args({1 << 20, 8})->Args({16 << 10, 1})->Iterations(1)->Unit(benchmark::kSecond);
BENCHMARK(BM_WindowWrite)->Args({1 << 20, 8})->Args({16 << 10, 1})->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace

int main(int argc, char** argv) { return tierflow::bench::RunBenchmarksInBenchDir(argc, argv); }
