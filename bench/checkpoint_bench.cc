// Checkpoint strategies against each other and against fio's sequential write of the same
// number of bytes (request size 8 MiB, queue depth 16, O_DIRECT, io_uring, fsync at the end —
// the same durability a checkpoint save pays). The default tensor set (DefaultCheckpointSizes:
// 2000 small tensors of 4–256 KiB plus 12 of 16–64 MiB per rank) is dominated by small tensors
// in count. Each repetition runs every contender back to back; counters are medians.
//   checkpoint_bench [--dir=D]
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>

#include "storage_bench_util.h"
#include "tierflow/real/checkpoint.h"
#include "tierflow/real/storage.h"

namespace {

using tierflow::bench::BenchDir;
using tierflow::bench::Median;
namespace real = tierflow::real;

constexpr int kReps = 3;
constexpr int64_t kRequestBytes = 8 << 20;
constexpr int kQueueDepth = 16;

struct Set {
  std::vector<std::unique_ptr<char[]>> data;
  std::vector<real::CheckpointTensor> tensors;
  int64_t bytes = 0;
};

Set MakeSet() {
  Set s;
  uint64_t x = 88172645463325252ull;
  for (auto& [name, size] : real::DefaultCheckpointSizes(real::SizeDistribution{}, 0)) {
    s.data.emplace_back(new char[size]);
    char* p = s.data.back().get();
    for (int64_t i = 0; i + 8 <= size; i += 8) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      std::memcpy(p + i, &x, 8);
    }
    s.tensors.push_back(real::CheckpointTensor{name, "bf16", 0, p, size});
    s.bytes += size;
  }
  return s;
}

void BM_Checkpoint(benchmark::State& state) {
  Set set = MakeSet();
  real::StorageOptions so;
  so.request_bytes = kRequestBytes;
  so.queue_depth = kQueueDepth;
  auto uring = real::NewStorage("auto", so);
  auto posix = real::NewPosixStorage(so);
  if (!uring.ok()) {
    state.SkipWithError(uring.status().ToString().c_str());
    return;
  }
  // Pinned staging kept across saves, as a training job keeps it (created outside the timing).
  tierflow::real::ArenaOptions ao;
  ao.allow_unlocked = true;
  auto arena = real::PinnedArena::Create(4 * (int64_t{32} << 20), ao);
  if (!arena.ok()) {
    state.SkipWithError(arena.status().ToString().c_str());
    return;
  }
  auto staging = (*arena)->CreateSlotPool("checkpoint.staging", 32 << 20, 4);
  if (!staging.ok()) {
    state.SkipWithError(staging.status().ToString().c_str());
    return;
  }
  std::vector<double> agg_w, agg_r, fpt_w, fpt_r, fio_w;
  for (auto _ : state) {
    for (int rep = 0; rep < kReps; ++rep) {
      for (auto strategy : {real::CheckpointStrategy::kAggregated, real::CheckpointStrategy::kFilePerTensor}) {
        real::CheckpointOptions o;
        o.dirs = {BenchDir()};
        o.name = std::string("bench-") + real::CheckpointStrategyName(strategy);
        o.strategy = strategy;
        o.staging = *staging;
        real::Storage& st = strategy == real::CheckpointStrategy::kAggregated ? **uring : *posix;
        auto saved = real::SaveCheckpoint(st, set.tensors, o);
        if (!saved.ok()) {
          state.SkipWithError(saved.status().ToString().c_str());
          return;
        }
        (void)real::DropCheckpointCache(st, o);
        std::vector<std::unique_ptr<char[]>> bufs;
        auto loaded = real::LoadCheckpoint(st, o, [&](const real::CheckpointEntry& e) {
          bufs.emplace_back(new char[std::max<int64_t>(1, e.size_bytes)]);
          return static_cast<void*>(bufs.back().get());
        });
        if (!loaded.ok()) {
          state.SkipWithError(loaded.status().ToString().c_str());
          return;
        }
        (void)real::RemoveCheckpoint(st, o);
        auto& w = strategy == real::CheckpointStrategy::kAggregated ? agg_w : fpt_w;
        auto& r = strategy == real::CheckpointStrategy::kAggregated ? agg_r : fpt_r;
        w.push_back(static_cast<double>(saved->bytes) / saved->duration_s);
        r.push_back(static_cast<double>(loaded->bytes) / loaded->duration_s);
      }
      double f = tierflow::bench::RunFio("write", kRequestBytes, kQueueDepth, real::AlignUp(set.bytes, 1 << 20), 0, "--end_fsync=1");
      tierflow::bench::RemoveFioFile();
      if (f <= 0) {
        state.SkipWithError("fio failed");
        return;
      }
      fio_w.push_back(f);
    }
  }
  state.counters["bytes"] = static_cast<double>(set.bytes);
  state.counters["tensors"] = static_cast<double>(set.tensors.size());
  state.counters["aggregated_write_GBps"] = Median(agg_w) / 1e9;
  state.counters["aggregated_read_GBps"] = Median(agg_r) / 1e9;
  state.counters["file_per_tensor_write_GBps"] = Median(fpt_w) / 1e9;
  state.counters["file_per_tensor_read_GBps"] = Median(fpt_r) / 1e9;
  state.counters["fio_seq_write_GBps"] = Median(fio_w) / 1e9;
  state.counters["agg_vs_fpt_write"] = Median(agg_w) / Median(fpt_w);
  state.counters["agg_vs_fpt_read"] = Median(agg_r) / Median(fpt_r);
  state.counters["agg_vs_fio_write"] = Median(agg_w) / Median(fio_w);
}

BENCHMARK(BM_Checkpoint)->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace

int main(int argc, char** argv) { return tierflow::bench::RunBenchmarksInBenchDir(argc, argv); }
