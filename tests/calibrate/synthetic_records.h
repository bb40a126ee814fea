// Trace records synthesised from KNOWN hardware parameters through the models/perf.h functions,
// with deterministic multiplicative noise, following the record conventions of
// docs/calibration.md: what the probes and the real executor write.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tierflow/core/trace_record.h"
#include "tierflow/models/hardware.h"
#include "tierflow/models/perf.h"

namespace tierflow::calibrate::testing {

// Uniform factors in [1 - amplitude, 1 + amplitude] from a fixed-seed 64-bit LCG (the same
// sequence on every platform, unlike std::uniform_real_distribution).
class Noise {
 public:
  explicit Noise(double amplitude, uint64_t seed = 0x7469657266ull) : amplitude_(amplitude), state_(seed) {}
  double Factor() {
    state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(state_ >> 11) * 0x1.0p-53;  // [0, 1)
    return 1.0 + amplitude_ * (2.0 * u - 1.0);
  }

 private:
  double amplitude_;
  uint64_t state_;
};

inline TraceRecord Probe(const std::string& task, Op op, const std::string& resource, int64_t bytes, double seconds) {
  TraceRecord r;
  r.task = task;
  r.op = op;
  r.resource = resource;
  r.bytes = bytes;
  r.start_s = 0;
  r.end_s = seconds;
  r.source = "probe";
  return r;
}

// Disk probe windows of 1 s (threads = 1) for one device: every block x qd, both directions,
// `reps` repetitions; bytes completed in the window carry the noise.
inline void AddDiskSweep(const models::NvmeSpec& disk, int device, const std::vector<int64_t>& blocks,
                         const std::vector<int32_t>& qds, int reps, Noise& noise, std::vector<TraceRecord>* out) {
  double t = 0;
  for (int rep = 0; rep < reps; ++rep) {
    for (bool read : {true, false}) {
      for (int64_t b : blocks) {
        for (int32_t qd : qds) {
          const double bw = read ? models::DiskReadBandwidth(disk, b, qd) : models::DiskWriteBandwidth(disk, b, qd);
          TraceRecord r = Probe(read ? "probe.disk.read" : "probe.disk.write", read ? Op::kRead : Op::kWrite,
                                "nvme" + std::to_string(device) + (read ? ".read" : ".write"),
                                static_cast<int64_t>(bw * noise.Factor()), 0);
          r.iteration = rep;
          r.start_s = t;
          r.end_s = t + 1.0;
          r.block_bytes = b;
          r.queue_depth = qd;
          r.threads = 1;
          out->push_back(r);
          t += 1.25;
        }
      }
    }
  }
}

// Windows that drove devices 0 and 1 at once (1 MiB, depth 8, reads then writes, 1 s each):
// together they complete `together` times what the faster alone would, split unfairly as one
// shared device splits them (even repetitions 90/10, odd ones all to nvme1: nvme0's record then
// says 0 bytes), at different times in each repetition.
inline void AddJointWindows(const models::NvmeSpec& d0, const models::NvmeSpec& d1, double together, int reps,
                            Noise& noise, std::vector<TraceRecord>* out) {
  double t = 20000;
  for (int rep = 0; rep < reps; ++rep) {
    for (bool read : {true, false}) {
      auto alone = [&](const models::NvmeSpec& d) {
        return read ? models::DiskReadBandwidth(d, 1 << 20, 8) : models::DiskWriteBandwidth(d, 1 << 20, 8);
      };
      const double aggregate = together * std::max(alone(d0), alone(d1)) * noise.Factor();
      for (int device : {0, 1}) {
        const double share = rep % 2 == 0 ? (device == 0 ? 0.9 : 0.1) : (device == 0 ? 0.0 : 1.0);
        TraceRecord r = Probe(read ? "probe.disk.read" : "probe.disk.write", read ? Op::kRead : Op::kWrite,
                              "nvme" + std::to_string(device) + (read ? ".read" : ".write"),
                              static_cast<int64_t>(aggregate * share), 0);
        r.iteration = rep;
        r.start_s = t;
        r.end_s = t + 1.0;
        r.block_bytes = 1 << 20;
        r.queue_depth = 8;
        r.threads = 2;
        out->push_back(r);
      }
      t += 1.25;
    }
  }
}

// Mixed windows: reads and writes of one device in one 1 s window, 70 % of the bytes read; the
// aggregate is mixed_efficiency x the harmonic mix of the single-stream bandwidths at (block, qd).
inline void AddMixedWindows(const models::NvmeSpec& disk, int device, int64_t block, const std::vector<int32_t>& qds,
                            int reps, Noise& noise, std::vector<TraceRecord>* out) {
  double t = 10000;
  for (int rep = 0; rep < reps; ++rep) {
    for (int32_t qd : qds) {
      const double r = 0.7, w = 0.3;
      const double harmonic =
          1.0 / (r / models::DiskReadBandwidth(disk, block, qd) + w / models::DiskWriteBandwidth(disk, block, qd));
      const double aggregate = disk.mixed_efficiency * harmonic * noise.Factor();
      for (bool read : {true, false}) {
        TraceRecord rec = Probe("probe.disk.mix", read ? Op::kRead : Op::kWrite,
                                "nvme" + std::to_string(device) + (read ? ".read" : ".write"),
                                static_cast<int64_t>(aggregate * (read ? r : w)), 0);
        rec.iteration = rep;
        rec.start_s = t;
        rec.end_s = t + 1.0;
        rec.block_bytes = block;
        rec.queue_depth = qd;
        rec.threads = 1;
        out->push_back(rec);
      }
      t += 1.25;
    }
  }
}

// Reader and writer streams at once (`probe disk --ops rw`): per (readers, writers) pair and
// repetition, one 1 s window of 1 MiB requests, each stream `qd` deep; the aggregate is
// `efficiency(readers + writers)` x the harmonic mix, at that byte split, of the single streams
// at the requests in flight; the reads take `read_share` of the bytes. Windows start at `t`, 1.25 s
// apart (a window is known by its device, repetition, start and end).
inline void AddStreamWindows(const models::NvmeSpec& disk, int device, const std::vector<std::pair<int32_t, int32_t>>& pairs,
                             int32_t qd, const std::function<double(int32_t)>& efficiency, double read_share, int reps,
                             Noise& noise, std::vector<TraceRecord>* out, double t = 30000) {
  for (int rep = 0; rep < reps; ++rep) {
    for (const auto& [readers, writers] : pairs) {
      const int32_t inflight = qd * (readers + writers);
      const double r = read_share, w = 1 - read_share;
      const double harmonic = 1.0 / (r / models::DiskReadBandwidth(disk, 1 << 20, inflight) +
                                     w / models::DiskWriteBandwidth(disk, 1 << 20, inflight));
      const double aggregate = efficiency(readers + writers) * harmonic * noise.Factor();
      for (bool read : {true, false}) {
        TraceRecord rec = Probe("probe.disk.rw", read ? Op::kRead : Op::kWrite,
                                "nvme" + std::to_string(device) + (read ? ".read" : ".write"),
                                static_cast<int64_t>(aggregate * (read ? r : w)), 0);
        rec.iteration = rep;
        rec.start_s = t;
        rec.end_s = t + 1.0;
        rec.block_bytes = 1 << 20;
        rec.queue_depth = qd;
        rec.threads = 1;
        rec.tasks = read ? readers : writers;
        out->push_back(rec);
      }
      t += 1.25;
    }
  }
}

// Copies of every size, pinned in both directions and pageable host-to-device.
inline void AddCopies(const models::PcieSpec& pcie, const std::vector<int64_t>& sizes, Noise& noise,
                      std::vector<TraceRecord>* out) {
  for (int64_t b : sizes) {
    out->push_back(
        Probe("probe.copy.h2d", Op::kH2D, "gpu0.h2d", b, models::CopyTime(pcie, true, b, true) * noise.Factor()));
    out->push_back(
        Probe("probe.copy.d2h", Op::kD2H, "gpu0.d2h", b, models::CopyTime(pcie, false, b, true) * noise.Factor()));
    out->push_back(Probe("probe.copy.pageable.h2d", Op::kH2D, "gpu0.h2d", b,
                         models::CopyTime(pcie, true, b, false) * noise.Factor()));
    if (pcie.d2h_bf16_bw_bytes_per_s > 0) {  // a d2h narrowing fp32 gradients to b bytes of bf16
      // Named as the plain d2h's records: only `narrows` tells them apart, as in the copy probe's.
      out->push_back(Probe("probe.copy.d2h", Op::kD2H, "gpu0.d2h", b, models::NarrowingCopyTime(pcie, b) * noise.Factor()));
      out->back().narrows = true;
    }
  }
}

// The executor's hand-over (probe dispatch): `n` round trips of `overhead_s`, each scaled by the
// noise.
inline void AddDispatch(double overhead_s, int n, Noise& noise, std::vector<TraceRecord>* out) {
  for (int i = 0; i < n; ++i) out->push_back(Probe("probe.dispatch", Op::kBarrier, "cpu", 0, overhead_s * noise.Factor()));
}

// probe io-cpu, on `threads` threads: per measured class of `cpu` (io_read_cores, io_write_cores)
// and, with task_overhead_cpu, a chain of hand-overs (20 k/s), `reps` rounds of compute alone
// (three layers, both phases), the stream alone for a window at 1 GB/s, then compute beside the
// stream, whose window holds the steps beside it; a step beside a stream that keeps f cores busy
// takes cores / (cores - f) as long, and the stream beside the compute moves its class's share
// of 1 GB/s (IoRateBesideCompute). Timed after every other probe record (from t = 1000 s).
inline void AddIoCpu(const models::CpuSpec& cpu, int32_t threads, int reps, Noise& noise, std::vector<TraceRecord>* out) {
  double t = 1000;
  const auto steps = [&](const std::string& task, double slowdown) {
    for (int32_t layer = 0; layer < 3; ++layer) {
      for (const Phase phase : {Phase::kForward, Phase::kBackward}) {
        const double seconds = 1e-3 * (layer + 1) * (phase == Phase::kBackward ? 2 : 1) * slowdown * noise.Factor();
        TraceRecord r = Probe(task, Op::kCompute, "gpu0.compute", 0, seconds);
        r.start_s = t;
        r.end_s = t + seconds;
        t = r.end_s;
        r.layer = layer;
        r.phase = phase;
        r.threads = threads;
        out->push_back(r);
      }
    }
  };
  constexpr double kHandOversPerS = 20000;
  for (int rep = 0; rep < reps; ++rep) {
    if (cpu.task_overhead_cpu_s > 0) {
      steps("probe.io_cpu.alone", 1.0);
      const double start = t;
      steps("probe.io_cpu.beside", cpu.cores / (cpu.cores - cpu.task_overhead_cpu_s * kHandOversPerS));
      TraceRecord w = Probe("probe.io_cpu.dispatch", Op::kBarrier, "cpu", 0, 0);
      w.start_s = start;
      w.end_s = t;
      w.tasks = static_cast<int32_t>(std::llround(kHandOversPerS * (t - start)));
      w.threads = 1;
      out->push_back(w);
    }
    for (const bool write : {false, true}) {
      for (const models::IoCpuPoint& p : write ? cpu.io_write_cores : cpu.io_read_cores) {
        steps("probe.io_cpu.alone", 1.0);
        constexpr double kAloneS = 0.01;
        TraceRecord a = Probe(write ? "probe.io_cpu.write_alone" : "probe.io_cpu.read_alone", write ? Op::kWrite : Op::kRead,
                              write ? "nvme0.write" : "nvme0.read", static_cast<int64_t>(1e9 * kAloneS * noise.Factor()), 0);
        a.start_s = t;
        a.end_s = t += kAloneS;
        a.block_bytes = p.block_bytes;
        a.queue_depth = p.queue_depth;
        a.threads = 1;
        a.iteration = rep;
        out->push_back(a);
        const double start = t;
        steps("probe.io_cpu.beside", cpu.cores / (cpu.cores - p.cores));
        const double kept = models::IoRateBesideCompute(cpu, write, p.block_bytes, p.queue_depth);
        TraceRecord w = Probe(write ? "probe.io_cpu.write" : "probe.io_cpu.read", write ? Op::kWrite : Op::kRead,
                              write ? "nvme0.write" : "nvme0.read", static_cast<int64_t>(kept * 1e9 * (t - start)), 0);
        w.iteration = rep;
        w.start_s = start;
        w.end_s = t;
        w.block_bytes = p.block_bytes;
        w.queue_depth = p.queue_depth;
        w.threads = 1;
        out->push_back(w);
      }
    }
  }
}

// probe io-cpu's stream "rw" (or, `split`, "split": the writer on a second disk entry) after every
// other record: `reps` rounds of compute alone and beside a reader and a writer of one class at
// once, which move `read_share` and `write_share` of AddIoCpu's rate alone (1 GB/s) while the
// compute on `threads` = cpu.cores threads loses `lost` cores.
inline void AddIoCpuMix(const models::CpuSpec& cpu, int64_t block, int32_t depth, double read_share, double write_share,
                        double lost, int reps, std::vector<TraceRecord>* out, bool split = false) {
  double t = 0;
  for (const TraceRecord& r : *out) t = std::max(t, r.end_s);
  const auto steps = [&](const std::string& task, double slowdown) {
    for (int32_t layer = 0; layer < 3; ++layer) {
      const double seconds = 1e-3 * (layer + 1) * slowdown;
      TraceRecord r = Probe(task, Op::kCompute, "gpu0.compute", 0, seconds);
      r.start_s = t;
      r.end_s = t + seconds;
      t = r.end_s;
      r.layer = layer;
      r.phase = Phase::kForward;
      r.threads = cpu.cores;
      out->push_back(r);
    }
  };
  for (int rep = 0; rep < reps; ++rep) {
    steps("probe.io_cpu.alone", 1.0);
    const double start = t;
    steps("probe.io_cpu.beside", cpu.cores / (cpu.cores - lost));
    for (const bool write : {false, true}) {
      const double share = write ? write_share : read_share;
      TraceRecord w = Probe(split ? "probe.io_cpu.split" : "probe.io_cpu.rw", write ? Op::kWrite : Op::kRead,
                            write ? (split ? "nvme1.write" : "nvme0.write") : "nvme0.read", static_cast<int64_t>(share * 1e9 * (t - start)), 0);
      w.start_s = start;
      w.end_s = t;
      w.block_bytes = block;
      w.queue_depth = depth;
      w.threads = 1;
      out->push_back(w);
    }
  }
}

// One compute probe sample: a whole layer's FLOPs and bytes in one record.
inline TraceRecord ComputeProbe(const models::GpuSpec& gpu, Phase phase, double flops, int64_t bytes, double factor) {
  TraceRecord r = Probe("probe.compute.layer", Op::kCompute, "gpu0.compute", bytes,
                        models::ComputeTime(gpu, flops, static_cast<double>(bytes), phase) * factor);
  r.phase = phase;
  r.flops = flops;
  return r;
}

// Forward and backward layers over `flops` (bytes = flops / 100: compute-bound on any GPU here),
// plus flop-less samples over `bytes` (memory-bound), which determine hbm_bw.
inline void AddCompute(const models::GpuSpec& gpu, const std::vector<double>& flops, const std::vector<int64_t>& bytes,
                       Noise& noise, std::vector<TraceRecord>* out) {
  for (double f : flops) {
    out->push_back(ComputeProbe(gpu, Phase::kForward, f, static_cast<int64_t>(f / 100), noise.Factor()));
    out->push_back(ComputeProbe(gpu, Phase::kBackward, 2 * f, static_cast<int64_t>(f / 50), noise.Factor()));
  }
  for (int64_t b : bytes) out->push_back(ComputeProbe(gpu, Phase::kOther, 0, b, noise.Factor()));
}

// The compute probe's update on the GPU (probe.gpu_adam), `reps` records per element count, each
// timed on the GPU (GpuAdamTime) inside a host span twice as long.
inline void AddGpuUpdates(const models::GpuSpec& gpu, const std::vector<int64_t>& elements, int reps, Noise& noise,
                          std::vector<TraceRecord>* out) {
  double t = 50000;
  for (int64_t e : elements) {
    for (int rep = 0; rep < reps; ++rep) {
      const double on_gpu = models::GpuAdamTime(gpu, e) * noise.Factor();
      TraceRecord r = Probe("probe.gpu_adam", Op::kOptimizer, "gpu0.compute", 4 * e, 2 * on_gpu);
      r.start_s = t;
      r.end_s = t + 2 * on_gpu;
      r.device_start_s = t + on_gpu / 2;
      r.device_end_s = r.device_start_s + on_gpu;
      r.iteration = rep;
      out->push_back(r);
      t += 1;
    }
  }
}

// Adam over `elements` with 1..cores threads (bytes = 4 x elements), the memory probe at
// `cores` threads (and a few at one thread, which the fit must leave out), and conversions.
inline void AddCpu(const models::CpuSpec& cpu, const std::vector<int64_t>& elements, Noise& noise,
                   std::vector<TraceRecord>* out) {
  for (int64_t e : elements) {
    for (int32_t t = 1; t <= cpu.cores; ++t) {
      TraceRecord r = Probe("probe.optimizer", Op::kOptimizer, "cpu.optimizer", 4 * e,
                            models::AdamTime(cpu, e, t) * noise.Factor());
      r.threads = t;
      out->push_back(r);
    }
  }
  for (int64_t b : {int64_t{1} << 28, int64_t{1} << 29, int64_t{1} << 30, int64_t{3} << 29}) {
    for (int32_t t : {1, cpu.cores}) {
      // At one thread the probe is not at the sustained rate; 0.3 x makes that visible if used.
      const double rate = t == cpu.cores ? cpu.memory_bw_bytes_per_s : 0.3 * cpu.memory_bw_bytes_per_s;
      TraceRecord r =
          Probe("probe.memory.copy", Op::kConvert, "cpu.convert", b, static_cast<double>(b) / rate * noise.Factor());
      r.threads = t;
      out->push_back(r);
    }
  }
  for (int64_t b : {int64_t{16} << 20, int64_t{64} << 20, int64_t{256} << 20}) {
    for (int32_t t = 1; t <= cpu.cores; ++t) {
      TraceRecord r =
          Probe("probe.convert.bf16", Op::kConvert, "cpu.convert", b, models::ConvertTime(cpu, b, t) * noise.Factor());
      r.threads = t;
      out->push_back(r);
    }
  }
}

// All-gathers and all-reduces over sizes and 2..8 ranks (threads = ranks), and one rank's
// reduce-scatters (its library's local copy at ic.local_bw) when that is set.
inline void AddCollectives(const models::InterconnectSpec& ic, const std::vector<int64_t>& sizes, Noise& noise,
                           std::vector<TraceRecord>* out) {
  for (int64_t b : sizes) {
    if (ic.local_bw_bytes_per_s > 0) {
      TraceRecord r = Probe("probe.collective", Op::kReduceScatter, "dp.comm", b,
                            static_cast<double>(b) / ic.local_bw_bytes_per_s * noise.Factor());
      r.threads = 1;
      out->push_back(r);
    }
    for (int32_t n : {2, 4, 8}) {
      for (auto [op, kind] : {std::pair{Op::kAllGather, models::Collective::kAllGather},
                              std::pair{Op::kAllReduce, models::Collective::kAllReduce}}) {
        TraceRecord r =
            Probe("probe.collective", op, "dp.comm", b, models::CollectiveTime(ic, kind, b, n) * noise.Factor());
        r.threads = n;
        out->push_back(r);
      }
    }
  }
}

}  // namespace tierflow::calibrate::testing
