#include "tierflow/real/host_probes.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <thread>

#include "compute_device.h"
#include "emulated_copy.h"
#include "run_workers.h"
#include "tierflow/real/adamw.h"
#include "tierflow/real/cpu_threads.h"
#include "tierflow/real/disk_probe.h"
#include "tierflow/real/storage.h"
#include "trainer.h"

namespace tierflow::real {
namespace {

// The idle gap before each hand-over of probe io-cpu's stream "dispatch" (ProbeIoCpu): a run's
// chain of small copies hands a task over every 60 to 130 us (tiny's forward, calibrate_node's
// traces), so its threads sleep between hand-overs, as they do here.
constexpr double kHandOverGapS = 100e-6;

// Larger than any last-level cache we expect, so that rotating through it keeps data cold.
constexpr int64_t kColdPoolBytes = int64_t{256} << 20;

int32_t MaxThreads(const HostProbeOptions& o) {
  if (o.max_threads > 0) return o.max_threads;
  return std::max(1, static_cast<int32_t>(std::thread::hardware_concurrency()));
}

Status CheckOptions(const HostProbeOptions& o, const char* probe) {
  if (o.repetitions < 1) return InvalidArgument(std::string(probe) + ": repetitions must be at least 1");
  if (o.max_threads < 0) return InvalidArgument(std::string(probe) + ": max_threads must not be negative");
  return Status::Ok();
}

void Report(const HostProbeOptions& o, const std::string& what) {
  if (o.progress) o.progress(what);
}

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

// The executor's hand-over of a task, with its own classes: the caller posts to a resource's
// worker, which pushes the completion to the event queue the caller sleeps on (ProbeDispatch,
// ProbeIoCpu's stream "dispatch").
class HandOvers {
 public:
  Status One() {
    worker_.Post([this] { events_.Push({0, Status::Ok()}); });
    return events_.Pop().status;
  }

 private:
  exec::EventQueue events_;  // declared first: the worker's thread pushes to it until joined
  exec::Worker worker_;
};

TraceRecord Record(std::string task, Op op, std::string resource, int64_t rep, int64_t bytes, double start,
                   double end, int32_t threads) {
  TraceRecord r = ProbeRecord(std::move(task), op, std::move(resource), rep, bytes, start, end);
  r.threads = threads;
  return r;
}

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
            exec::EmulatedH2D(reinterpret_cast<uint16_t*>(dev), hst, size / 2);
          } else {
            const int64_t elements = narrows ? size / 2 : size / 4;
            exec::EmulatedD2HGrad(hst, reinterpret_cast<const float*>(dev), elements, narrows, 1.0f, threads);
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

namespace {

// A model loaded on the probe's compute device, whose layers' forward and backward steps are
// timed one record each, as a run's compute tasks (ProbeCompute, ProbeIoCpu).
class LayerPasses {
 public:
  static StatusOr<std::unique_ptr<LayerPasses>> Create(const TrainConfig& config, const std::vector<LayerCost>& costs,
                                                       const HostProbeOptions& o) {
    TF_RETURN_IF_ERROR(ValidateLlamaSpec(config.spec));
    if (config.batch < 1) return InvalidArgument("probe compute: batch must be at least 1");
    TF_RETURN_IF_ERROR(ValidateLlamaSequence(config.spec, config.seq, "probe compute: sequence"));
    std::unique_ptr<LayerPasses> p(new LayerPasses(config, costs, o));
    if (static_cast<int64_t>(costs.size()) != p->trainer_.layer_count()) {
      return InvalidArgument("probe compute: " + std::to_string(costs.size()) + " layer costs for a model of " +
                             std::to_string(p->trainer_.layer_count()) + " layers");
    }
    TF_ASSIGN_OR_RETURN(p->device_, exec::MakeComputeDevice(o.compute, config, p->trainer_));
    TF_ASSIGN_OR_RETURN(p->model_, exec::WholeModel::Create(*p->device_, p->trainer_));
    {
      const std::vector<float> master = p->trainer_.InitialMaster();
      std::vector<uint16_t> p16(master.size());
      cpu::Fp32ToBf16(p16.data(), master.data(), static_cast<int64_t>(master.size()), p->threads_);
      TF_RETURN_IF_ERROR(p->model_->Load(p16).WithContext("probe compute"));
    }
    p->trainer_.PrepareIteration(&p->it_);
    std::mt19937 rng(7);
    std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(config.spec.config.vocab - 1));
    const size_t rows = static_cast<size_t>(config.batch * config.seq);
    p->it_.tokens.resize(rows);
    p->it_.targets.resize(rows);
    for (size_t i = 0; i < rows; ++i) {
      p->it_.tokens[i] = token(rng);
      p->it_.targets[i] = token(rng);
    }
    p->it_.loss_scale = 1.0f;
    return p;
  }

  // One iteration's forward steps, then its backward steps, each layer a record of `task`
  // (iteration `rep`, times from `t0`); nothing recorded when rep < 0 (a warm-up).
  Status Pass(const std::string& task, int32_t rep, double t0, std::vector<TraceRecord>* out) {
    // Each pass an iteration of its own, so its forward steps widen the layer's bf16 weights and
    // its backward steps reuse them, as a run's do (Trainer::Widen).
    it_.iteration = ++passes_;
    auto time = [&](int64_t layer, bool forward) -> Status {
      exec::DeviceSpan span;
      const double start = MonotonicSeconds();
      TF_RETURN_IF_ERROR(forward ? device_->Forward(layer, model_->Layer(layer), &it_, threads_, &span)
                                 : device_->Backward(layer, model_->Layer(layer), model_->LayerGrads(layer), &it_, threads_, &span));
      const double end = MonotonicSeconds();
      if (rep < 0) return Status::Ok();
      const LayerCost& c = costs_[static_cast<size_t>(layer)];
      TraceRecord r = Record(task, Op::kCompute, "gpu0.compute", rep,
                             static_cast<int64_t>(forward ? c.forward_bytes : c.backward_bytes), start - t0, end - t0,
                             record_threads_);
      r.layer = static_cast<int32_t>(layer);
      r.phase = forward ? Phase::kForward : Phase::kBackward;
      r.flops = forward ? c.forward_flops : c.backward_flops;
      r.tasks = c.tasks;
      if (!span.empty()) {
        r.device_start_s = span.start_s - t0;
        r.device_end_s = span.end_s - t0;
      }
      out->push_back(std::move(r));
      return Status::Ok();
    };
    const int64_t layers = trainer_.layer_count();
    for (int64_t l = 0; l < layers; ++l) TF_RETURN_IF_ERROR(time(l, true));
    for (int64_t l = layers; l-- > 0;) TF_RETURN_IF_ERROR(time(l, false));
    return Status::Ok();
  }

  // One AdamW step of the device over n elements of its memory (made on the first call, with
  // values of a model's scale), a record of `task` as Pass's; nothing recorded when rep < 0.
  Status Update(const std::string& task, int64_t n, int32_t rep, double t0, std::vector<TraceRecord>* out) {
    if (update_.empty()) {
      for (int k = 0; k < 5; ++k) {  // param, m, v, grad (fp32), bf16 copy
        TF_ASSIGN_OR_RETURN(void* block, device_->Allocate(k < 4 ? n * 4 : n * 2));
        update_.push_back(block);
      }
      const float init[4] = {0.02f, 1e-4f, 1e-6f, 3e-3f};
      std::vector<float> values(static_cast<size_t>(n));
      for (int k = 0; k < 4; ++k) {
        std::fill(values.begin(), values.end(), init[k]);
        TF_RETURN_IF_ERROR(device_->H2D(update_[static_cast<size_t>(k)], values.data(), n * 4, nullptr));
      }
    }
    float* const* f = reinterpret_cast<float* const*>(update_.data());
    exec::DeviceSpan span;
    const double start = MonotonicSeconds();
    TF_RETURN_IF_ERROR(device_->AdamW(f[0], f[1], f[2], f[3], static_cast<uint16_t*>(update_[4]), n, rep + 2, 1.0f, AdamWConfig{}, threads_, &span));
    const double end = MonotonicSeconds();
    if (rep < 0) return Status::Ok();
    TraceRecord r = Record(task, Op::kOptimizer, "gpu0.compute", rep, 4 * n, start - t0, end - t0, record_threads_);
    if (!span.empty()) {
      r.device_start_s = span.start_s - t0;
      r.device_end_s = span.end_s - t0;
    }
    out->push_back(std::move(r));
    return Status::Ok();
  }
  bool on_card() const { return device_->name().rfind("cuda", 0) == 0; }

  ~LayerPasses() {
    for (void* block : update_) device_->Free(block);
  }

 private:
  LayerPasses(const TrainConfig& config, const std::vector<LayerCost>& costs, const HostProbeOptions& o)
      : trainer_(config),
        costs_(costs),
        threads_(config.threads > 0 ? config.threads : MaxThreads(o)),
        record_threads_(o.compute == "cpu" ? threads_.threads() : 0) {}

  exec::Trainer trainer_;
  std::vector<LayerCost> costs_;
  CpuThreads threads_;
  int32_t record_threads_;
  std::unique_ptr<exec::ComputeDevice> device_;  // after trainer_: it refers to it
  std::unique_ptr<exec::WholeModel> model_;
  exec::IterationState it_;
  int64_t passes_ = 0;
  std::vector<void*> update_;  // Update's arrays, in the device's memory
};

}  // namespace

StatusOr<std::vector<TraceRecord>> ProbeCompute(const TrainConfig& config, const std::vector<LayerCost>& costs,
                                                const std::string& label, const HostProbeOptions& o) {
  TF_RETURN_IF_ERROR(CheckOptions(o, "probe compute"));
  TF_ASSIGN_OR_RETURN(std::unique_ptr<LayerPasses> passes, LayerPasses::Create(config, costs, o));
  std::vector<TraceRecord> out;
  const double t0 = MonotonicSeconds();
  const std::string task = "probe.compute." + label;
  for (int32_t rep = -1; rep < o.repetitions; ++rep) {
    TF_RETURN_IF_ERROR(passes->Pass(task, rep, t0, &out));
    Report(o, task + (rep < 0 ? " warm-up" : " repetition " + std::to_string(rep + 1)));
  }
  const int64_t n = passes->on_card() ? kGpuUpdateProbeElementsCuda : kGpuUpdateProbeElements;
  for (int32_t rep = -1; rep < o.repetitions; ++rep) TF_RETURN_IF_ERROR(passes->Update("probe.gpu_adam", n, rep, t0, &out));
  Report(o, "probe.gpu_adam");
  return out;
}

StatusOr<std::vector<TraceRecord>> ProbeIoCpu(const TrainConfig& config, const std::vector<LayerCost>& costs,
                                              const IoCpuProbeOptions& io, const HostProbeOptions& o) {
  TF_RETURN_IF_ERROR(CheckOptions(o, "probe io-cpu"));
  if (io.dir.empty()) return InvalidArgument("probe io-cpu: no directory given");
  if (io.streams.empty()) return InvalidArgument("probe io-cpu: no streams given");
  if (!(io.window_s > 0)) return InvalidArgument("probe io-cpu: the window must be positive");
  for (const IoCpuProbeOptions::Stream& st : io.streams) {
    if (st.op != "read" && st.op != "write" && st.op != "rw" && st.op != "split" && st.op != "dispatch") {
      return InvalidArgument("probe io-cpu: stream op '" + st.op + "' (known: read, write, rw, split, dispatch)");
    }
    if (st.op == "split" && io.split_dir.empty()) {
      return InvalidArgument("probe io-cpu: stream op 'split' runs its writer on a second directory: give two --dir");
    }
  }
  TF_ASSIGN_OR_RETURN(std::unique_ptr<LayerPasses> passes, LayerPasses::Create(config, costs, o));
  std::vector<TraceRecord> out;
  const double t0 = MonotonicSeconds();
  TF_RETURN_IF_ERROR(passes->Pass("probe.io_cpu.alone", -1, t0, &out));  // warm-up
  const std::string file = ProbeFilePath(io.dir);
  // One window of a disk stream (the disk probe's, its record renamed) or of the executor's
  // hand-overs (ProbeDispatch's, its record's `tasks` counting them), each after an idle gap of
  // kHandOverGapS: in a run the threads sleep between a chain's small tasks, and a wake-up from
  // sleep is what costs (here 67 us of core-time each with the gap, 2 us back to back, when the
  // two threads never sleep).
  const auto stream_window = [&](const IoCpuProbeOptions::Stream& st) -> StatusOr<std::vector<TraceRecord>> {
    if (st.op == "dispatch") {
      HandOvers hand_overs;
      const double warm_until = MonotonicSeconds() + 0.1;
      while (MonotonicSeconds() < warm_until) TF_RETURN_IF_ERROR(hand_overs.One());
      const double start = MonotonicSeconds(), stop = start + io.window_s;
      int32_t count = 0;
      double now = start;
      for (; now < stop; now = MonotonicSeconds(), ++count) {
        std::this_thread::sleep_for(std::chrono::duration<double>(kHandOverGapS));
        TF_RETURN_IF_ERROR(hand_overs.One());
      }
      TraceRecord r = Record("probe.io_cpu.dispatch", Op::kBarrier, "cpu", 0, 0, start, now, 1);
      r.tasks = count;
      return std::vector<TraceRecord>{r};
    }
    DiskProbeOptions d;
    const bool split = st.op == "split";
    d.dirs = split ? std::vector<std::string>{io.dir, io.split_dir} : std::vector<std::string>{io.dir};
    d.device_counts = {static_cast<int32_t>(d.dirs.size())};
    d.ops = {split ? std::string("rw") : st.op};
    d.streams = {{1, 1}};  // op rw: a reader and a writer at once
    d.split_streams = split;  // the reader on the first directory, the writer on the second
    d.block_bytes = {st.block_bytes};
    d.queue_depths = {st.queue_depth};
    d.file_bytes = io.file_bytes;
    d.warmup_s = 0.1;
    d.duration_s = io.window_s;
    d.repetitions = 1;
    d.backend = io.backend;
    d.keep_files = true;  // filled by the first stream, reused by the others, removed below
    std::vector<TraceRecord> window;
    TF_RETURN_IF_ERROR(RunDiskProbe(d, &window, nullptr)
                           .status()
                           .WithContext("probe io-cpu: --dir '" + io.dir + "'" + (split ? " and '" + io.split_dir + "'" : std::string())));
    for (TraceRecord& r : window) r.task = "probe.io_cpu." + st.op;
    return window;
  };
  auto body = [&]() -> Status {
    for (int32_t rep = 0; rep < o.repetitions; ++rep) {
      for (const IoCpuProbeOptions::Stream& st : io.streams) {
        // Compute alone for a window, a read or write stream alone for a window, then both at
        // once for a window: close in time, so that the machine's drift over the probe does not
        // enter the ratios (what the stream takes from the compute, and the compute from it).
        const double alone_until = MonotonicSeconds() + io.window_s;
        while (MonotonicSeconds() < alone_until) TF_RETURN_IF_ERROR(passes->Pass("probe.io_cpu.alone", rep, t0, &out));
        if (st.op == "read" || st.op == "write") {
          StatusOr<std::vector<TraceRecord>> alone = stream_window(st);
          TF_RETURN_IF_ERROR(alone.status());
          for (TraceRecord& r : *alone) {
            r.task = "probe.io_cpu." + st.op + "_alone";
            r.iteration = rep;
            r.start_s -= t0;
            r.end_s -= t0;
            out.push_back(std::move(r));
          }
        }
        StatusOr<std::vector<TraceRecord>> window = std::vector<TraceRecord>{};
        std::atomic<bool> done{false};
        std::thread stream([&] {
          window = stream_window(st);
          done.store(true);
        });
        Status computed = Status::Ok();
        // Compute all along; calibrate keeps the layers that ran inside the stream's window.
        while (!done.load() && computed.ok()) computed = passes->Pass("probe.io_cpu.beside", rep, t0, &out);
        stream.join();
        TF_RETURN_IF_ERROR(computed);
        TF_RETURN_IF_ERROR(window.status());
        for (TraceRecord& r : *window) {
          r.iteration = rep;
          r.start_s -= t0;
          r.end_s -= t0;
          out.push_back(std::move(r));
        }
        Report(o, "compute beside " + st.op + (st.op == "dispatch" ? std::string(" hand-overs")
                                                                    : " " + std::to_string(st.block_bytes) + " B x " + std::to_string(st.queue_depth)));
      }
    }
    return Status::Ok();
  };
  const Status st = body();
  ::unlink(file.c_str());
  if (!io.split_dir.empty()) ::unlink(ProbeFilePath(io.split_dir).c_str());
  TF_RETURN_IF_ERROR(st);
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
