// real::IoWindow, the request shape of every read and write task of `tierflow run`, on the
// io_uring back-end against fio doing the same: one 1 GiB O_DIRECT file read (or written) in
// block-sized requests with `depth` in flight. Each repetition runs fio and the window back to
// back, alternating which goes first; counters are medians, ratio = window / fio. The window
// refills from the completion path (one Submit per completed piece, no thread hand-off), so the
// ratio measures what that costs against fio's own loop. The window's buffer is either a heap
// block (4 KiB pages, as fio's) or I/O memory (tierflow/real/io_memory.h: 2 MiB pages, as the
// executor's and the disk probe's); a virtual disk copies each physically contiguous piece of a
// request separately, so there the second moves more (docs/storage.md "Host memory for I/O").
//   io_window_bench [--dir=D] [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "storage_bench_util.h"
#include "tierflow/real/io_memory.h"
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

// The window's buffer: a heap block of 4 KiB pages, or I/O memory.
struct Buffer {
  explicit Buffer(bool io_memory) : io(io_memory) {
    if (io) {
      data = static_cast<char*>(real::AllocateIoMemory(kFileBytes));
    } else {
      void* mem = nullptr;
      if (posix_memalign(&mem, real::kDirectAlignment, kFileBytes) == 0) data = static_cast<char*>(mem);
    }
  }
  ~Buffer() {
    if (io) {
      real::FreeIoMemory(data, kFileBytes);
    } else {
      std::free(data);
    }
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  bool io;
  char* data = nullptr;
};

void WindowVsFio(benchmark::State& state, real::IoOp op) {
  const int64_t block = state.range(0);
  const int depth = static_cast<int>(state.range(1));
  state.SetLabel(state.range(2) != 0 ? "I/O memory" : "heap");
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
  Buffer mem(state.range(2) != 0);
  if (mem.data == nullptr) {
    state.SkipWithError("cannot allocate the buffer");
    return;
  }
  char* buffer = mem.data;
  std::memset(buffer, 0x5a, kFileBytes);
  std::string why;
  // Lay both files out once (reads need data there; writes then overwrite written extents, the
  // case of the executor's store files after their first pass).
  if (WindowOnce(io->get(), file->id, buffer, real::IoOp::kWrite, 1 << 20, 8, &why) < 0 ||
      tierflow::bench::RunFio("write", 1 << 20, 8, kFileBytes, 0) <= 0) {
    state.SkipWithError(why.empty() ? "fio failed (is fio installed with io_uring support?)" : why.c_str());
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
            return;
          }
          fio.push_back(f);
        } else {
          const double b = WindowOnce(io->get(), file->id, buffer, op, block, depth, &why);
          if (b < 0) {
            state.SkipWithError(why.c_str());
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
  state.counters["window_GBps"] = Median(ours) / 1e9;
  state.counters["fio_GBps"] = Median(fio) / 1e9;
  state.counters["ratio"] = Median(ours) / Median(fio);
}

void BM_WindowRead(benchmark::State& s) { WindowVsFio(s, real::IoOp::kRead); }
void BM_WindowWrite(benchmark::State& s) { WindowVsFio(s, real::IoOp::kWrite); }

// DeepSpeed's aio defaults (1 MiB x 8) and the small synchronous requests of calibrate_node.sh,
// each into a heap block (0) and into I/O memory (1).
BENCHMARK(BM_WindowRead)->ArgsProduct({{1 << 20}, {8}, {0, 1}})->Args({16 << 10, 1, 1})->Iterations(1)->Unit(benchmark::kSecond);
BENCHMARK(BM_WindowWrite)->ArgsProduct({{1 << 20}, {8}, {0, 1}})->Args({16 << 10, 1, 1})->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace

int main(int argc, char** argv) { return tierflow::bench::RunBenchmarksInBenchDir(argc, argv); }
