#include "tierflow/real/host_probes.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <thread>

#include "tierflow/real/adamw.h"
#include "tierflow/real/compute_device.h"
#include "tierflow/real/cpu_threads.h"
#include "tierflow/real/disk_probe.h"
#include "tierflow/real/emulated_copy.h"
#include "tierflow/real/storage.h"
#include "tierflow/real/trainer.h"
#include "tierflow/real/workers.h"
#include "probe_common.h"

namespace tierflow::real {

using probe_internal::CheckOptions;
using probe_internal::HandOvers;
using probe_internal::kHandOverGapS;
using probe_internal::MaxThreads;
using probe_internal::Record;
using probe_internal::Report;

namespace {

// Larger than any last-level cache we expect, so that rotating through it keeps data cold.
constexpr int64_t kColdPoolBytes = int64_t{256} << 20;

// Every byte 0x3f: as fp32 0.747, as bf16 0.746 — ordinary numbers (a fill such as 0x01 makes
// denormals, which cost the optimizer ~20x and would be measured instead of the real rate).
constexpr char kFill = 0x3f;

// The fp32 streams of one kernel are laid out in one block, stream k starting k cache lines past
// k x n floats, so that no two start at the same address modulo a page. In four std::vectors of
// 128 MiB, allocated one after another, they did, and on this project's AMD EPYC VM the memory
// probe's loop moved 10 GB/s on one thread and 19 on two where staggered it moves 22 and 31-38:
// the probe measured a collision of its streams in the caches, not the memory (docs/calibration.md,
// cpu.memory; bench/adam_bench.cc's "_vectors" kernels).
constexpr int64_t kLineFloats = 16;

// Floats that `count` staggered streams of `n` floats take.
int64_t StaggeredFloats(int64_t n, int count) { return count * (n + kLineFloats); }
float* Stream(float* block, int64_t n, int k) { return block + k * (n + kLineFloats); }

// A byte pool, filled once (so that page faults are not measured) and shared by every point of
// a probe, which carves it into slots of its own size that successive repetitions rotate through.
class ColdPool {
 public:
  // At least kColdPoolBytes, and at least two slots of the largest size.
  explicit ColdPool(int64_t largest_slot)
      : data_(static_cast<size_t>(std::max(kColdPoolBytes, 2 * AlignUp(largest_slot))), kFill) {}
  char* Slot(int64_t i, int64_t slot_bytes) {
    const int64_t slot = AlignUp(slot_bytes);
    const int64_t slots = static_cast<int64_t>(data_.size()) / slot;
    return data_.data() + (i % slots) * slot;
  }

 private:
  static int64_t AlignUp(int64_t b) { return (b + 4095) / 4096 * 4096; }
  std::vector<char> data_;
};

}  // namespace

StatusOr<std::vector<TraceRecord>> ProbeCopies(const std::vector<int64_t>& sizes, const HostProbeOptions& o) {
  TF_RETURN_IF_ERROR(CheckOptions(o, "probe copy"));
  if (sizes.empty()) return InvalidArgument("probe copy: no sizes given");
  for (int64_t s : sizes) {
    if (s < 4 || s % 4 != 0) return InvalidArgument("probe copy: size " + std::to_string(s) + " is not a positive multiple of 4 bytes");
  }
  CpuThreads threads(MaxThreads(o));
  // The emulated GPU and the host side each rotate through a cold pool. "Pinned" host memory is
  // the executor's kind of buffer (allocated once, touched); "pageable" is memory the copy
  // faults in as it goes, as a fresh pageable buffer would. Pinned d2h is measured twice: as a
  // plain copy of fp32 gradients, and narrowing them to `size` bytes of bf16 (twice as many
  // bytes of fp32 read: records with `narrows`), as a d2h into DeepSpeed's bf16 partition buffer does.
  const int64_t largest = *std::max_element(sizes.begin(), sizes.end());
  ColdPool device(2 * largest);
  ColdPool host(largest);
  std::vector<TraceRecord> out;
  const double t0 = MonotonicSeconds();
  for (const bool pinned : {true, false}) {
    const std::string task = pinned ? "probe.copy.pinned" : "probe.copy.pageable";
    for (int64_t size : sizes) {
      // Small copies take microseconds: more repetitions keep their median meaningful.
      const int32_t reps = o.repetitions * (size < (int64_t{1} << 20) ? 8 : 1);
      enum Kind { kH2D, kD2H, kD2HNarrowing };
      for (const Kind kind : {kH2D, kD2H, kD2HNarrowing}) {
        if (kind == kD2HNarrowing && !pinned) continue;
        const bool h2d = kind == kH2D, narrows = kind == kD2HNarrowing;
        for (int32_t rep = -1; rep < reps; ++rep) {
          char* dev = device.Slot(rep + 1, narrows ? 2 * size : size);
          char* hst = host.Slot(rep + 1, size);
          std::unique_ptr<char[]> fresh;
          if (!pinned) {
            fresh.reset(new char[static_cast<size_t>(size)]);  // not touched: its pages fault on the copy
            hst = fresh.get();
            if (h2d) std::memset(hst, kFill, static_cast<size_t>(size));  // an h2d source has content
          }
          const double start = MonotonicSeconds();
          if (h2d) {
            EmulatedH2D(reinterpret_cast<uint16_t*>(dev), hst, size / 2);
          } else {
            const int64_t elements = narrows ? size / 2 : size / 4;
            EmulatedD2HGrad(hst, reinterpret_cast<const float*>(dev), elements, narrows, 1.0f, threads);
          }
          const double end = MonotonicSeconds();
          if (rep < 0) continue;
          out.push_back(Record(task, h2d ? Op::kH2D : Op::kD2H, h2d ? "gpu0.h2d" : "gpu0.d2h", rep, size, start - t0,
                               end - t0, h2d ? 1 : threads.threads()));
          out.back().narrows = narrows;
        }
      }
      Report(o, task + " " + std::to_string(size) + " B");
    }
  }
  return out;
}

StatusOr<std::vector<TraceRecord>> ProbeOptimizer(const std::vector<int64_t>& element_counts, const HostProbeOptions& o) {
  TF_RETURN_IF_ERROR(CheckOptions(o, "probe optimizer"));
  if (element_counts.empty()) return InvalidArgument("probe optimizer: no element counts given");
  for (int64_t n : element_counts) {
    if (n < 1) return InvalidArgument("probe optimizer: element count " + std::to_string(n) + " must be positive");
  }
  std::vector<TraceRecord> out;
  const double t0 = MonotonicSeconds();
  const AdamWConfig cfg{.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.0f};
  // Four fp32 arrays (parameter, gradient, m, v) per slot for Adam; the cast's source and
  // destination in slots of the same size.
  ColdPool pool(4 * StaggeredFloats(*std::max_element(element_counts.begin(), element_counts.end()), 4));
  for (int32_t nt = 1; nt <= MaxThreads(o); ++nt) {
    CpuThreads threads(nt);
    for (int64_t n : element_counts) {
      for (int32_t rep = -1; rep < o.repetitions; ++rep) {
        const int64_t slot_bytes = 4 * StaggeredFloats(n, 4);
        float* base = reinterpret_cast<float*>(pool.Slot(rep + 1, slot_bytes));
        float* p = Stream(base, n, 0);
        float* g = Stream(base, n, 1);
        float* m = Stream(base, n, 2);
        float* v = Stream(base, n, 3);
        double start = MonotonicSeconds();
        cpu::AdamW(p, m, v, g, nullptr, n, rep + 2, 1.0f, cfg, threads);
        double end = MonotonicSeconds();
        if (rep >= 0) out.push_back(Record("probe.adam", Op::kOptimizer, "cpu", rep, 4 * n, start - t0, end - t0, nt));
        // The cast's destination a line past its slot's page, as Adam's streams are staggered.
        float* src = reinterpret_cast<float*>(pool.Slot(rep + 2, slot_bytes));
        auto* dst = reinterpret_cast<uint16_t*>(pool.Slot(rep + 3, slot_bytes) + 4 * kLineFloats);
        start = MonotonicSeconds();
        cpu::Fp32ToBf16(dst, src, n, threads);
        end = MonotonicSeconds();
        if (rep >= 0) out.push_back(Record("probe.convert.fp32_to_bf16", Op::kConvert, "cpu", rep, 4 * n, start - t0, end - t0, nt));
      }
      Report(o, "adam and convert, " + std::to_string(n) + " elements, " + std::to_string(nt) + " thread(s)");
    }
  }
  return out;
}

StatusOr<std::vector<TraceRecord>> ProbeDispatch(const HostProbeOptions& o) {
  TF_RETURN_IF_ERROR(CheckOptions(o, "probe dispatch"));
  // The executor's hand-over, with its own classes: the dispatch thread posts a task to a
  // resource's worker, which pushes its completion to the event queue the dispatch thread sleeps
  // on; the next task is posted as soon as the event is seen, as a chain of dependent tasks is
  // (each thread has just gone to sleep when the other wakes it). Measured here: 50-75 us per
  // task, one mode; with an idle pause between tasks the wake-ups turn bimodal (3 us or 70 us,
  // by how long the threads slept), which no run's chain of tasks sees.
  HandOvers hand_overs;
  std::vector<TraceRecord> out;
  const int32_t reps = 50 * o.repetitions;
  const double t0 = MonotonicSeconds();
  for (int32_t rep = -1; rep < reps; ++rep) {
    const double start = MonotonicSeconds();
    const Status handed = hand_overs.One();
    const double end = MonotonicSeconds();
    TF_RETURN_IF_ERROR(handed);
    if (rep >= 0) out.push_back(Record("probe.dispatch", Op::kBarrier, "cpu", rep, 0, start - t0, end - t0, 1));
  }
  Report(o, "task hand-over");
  return out;
}

StatusOr<std::vector<TraceRecord>> ProbeMemory(int64_t bytes, const HostProbeOptions& o) {
  TF_RETURN_IF_ERROR(CheckOptions(o, "probe memory"));
  if (bytes < (int64_t{1} << 20)) return InvalidArgument("probe memory: at least 1 MiB, got " + std::to_string(bytes) + " bytes");
  // Four fp32 streams of `bytes` each, three updated in place from the fourth:
  // p += s*g, m += s*g, v += s*g*g — the optimizer's traffic (read p, g, m, v; write p, m, v:
  // 28 bytes per element, the figure the Adam model divides memory bandwidth by) with almost none
  // of its arithmetic. A copy or STREAM's triad would measure a different pattern: their stores
  // go to lines not read before, which the CPU must first fetch. The streams are staggered, as
  // Adam's are in probe optimizer (Stream).
  const int64_t n = bytes / 4;
  std::vector<float> block(static_cast<size_t>(StaggeredFloats(n, 4)), 0.f);
  std::fill_n(Stream(block.data(), n, 0), n, 0.5f);
  std::fill_n(Stream(block.data(), n, 1), n, 0.25f);
  std::vector<TraceRecord> out;
  const double t0 = MonotonicSeconds();
  for (int32_t nt = 1; nt <= MaxThreads(o); ++nt) {
    CpuThreads threads(nt);
    for (int32_t rep = -1; rep < o.repetitions; ++rep) {
      const float s = rep % 2 == 0 ? 1e-3f : -1e-3f;  // keeps the values bounded over repetitions
      const double start = MonotonicSeconds();
      threads.ParallelFor(n, 1 << 16, [&](int64_t b, int64_t e) {
        float* pp = Stream(block.data(), n, 0);
        const float* gp = Stream(block.data(), n, 1);
        float* mp = Stream(block.data(), n, 2);
        float* vp = Stream(block.data(), n, 3);
        for (int64_t i = b; i < e; ++i) {
          pp[i] += s * gp[i];
          mp[i] += s * gp[i];
          vp[i] += s * gp[i] * gp[i];
        }
      });
      const double end = MonotonicSeconds();
      if (rep >= 0) out.push_back(Record("probe.memory.update", Op::kConvert, "cpu", rep, 28 * n, start - t0, end - t0, nt));
    }
    Report(o, "memory update, " + std::to_string(nt) + " thread(s)");
  }
  return out;
}

}  // namespace tierflow::real
