// The compute probes (host_probes.h): a model's layers timed on the compute device, alone
// (ProbeCompute, with the device's AdamW after them) and beside disk streams and hand-overs
// (ProbeIoCpu).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <thread>

#include "tierflow/real/adamw.h"
#include "tierflow/real/compute_device.h"
#include "tierflow/real/cpu_threads.h"
#include "tierflow/real/disk_probe.h"
#include "tierflow/real/host_probes.h"
#include "tierflow/real/trainer.h"
#include "probe_common.h"

namespace tierflow::real {

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
    TF_ASSIGN_OR_RETURN(p->device_, MakeComputeDevice(o.compute, config, p->trainer_));
    TF_ASSIGN_OR_RETURN(p->model_, WholeModel::Create(*p->device_, p->trainer_));
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
      DeviceSpan span;
      const double start = MonotonicSeconds();
      TF_RETURN_IF_ERROR(forward ? device_->Forward(layer, model_->Layer(layer), &it_, threads_, &span)
                                 : device_->Backward(layer, model_->Layer(layer), model_->LayerGrads(layer), &it_, threads_, &span));
      const double end = MonotonicSeconds();
      if (rep < 0) return Status::Ok();
      const LayerCost& c = costs_[static_cast<size_t>(layer)];
      TraceRecord r = probe_internal::Record(task, Op::kCompute, "gpu0.compute", rep,
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
  // values of a model's scale), a record of `task` as Pass's; nothing recorded when rep < 0. The
  // gradient is bf16, as the plans' updates on the GPU take it (docs/schedule-format.md).
  Status Update(const std::string& task, int64_t n, int32_t rep, double t0, std::vector<TraceRecord>* out) {
    if (update_.empty()) {
      for (int k = 0; k < 5; ++k) {  // param, m, v (fp32), grad, bf16 copy (bf16)
        TF_ASSIGN_OR_RETURN(void* block, device_->Allocate(k < 3 ? n * 4 : n * 2));
        update_.push_back(block);
      }
      const float init[3] = {0.02f, 1e-4f, 1e-6f};
      std::vector<float> values(static_cast<size_t>(n));
      for (int k = 0; k < 3; ++k) {
        std::fill(values.begin(), values.end(), init[k]);
        TF_RETURN_IF_ERROR(device_->H2D(update_[static_cast<size_t>(k)], values.data(), n * 4, nullptr));
      }
      const std::vector<uint16_t> grad(static_cast<size_t>(n), Fp32ToBf16(3e-3f));
      TF_RETURN_IF_ERROR(device_->H2D(update_[3], grad.data(), n * 2, nullptr));
    }
    float* const* f = reinterpret_cast<float* const*>(update_.data());
    DeviceSpan span;
    const double start = MonotonicSeconds();
    TF_RETURN_IF_ERROR(device_->AdamW(f[0], f[1], f[2], GradIn{nullptr, static_cast<const uint16_t*>(update_[3])}, static_cast<uint16_t*>(update_[4]), n,
                                      rep + 2, 1.0f, AdamWConfig{}, threads_, &span));
    const double end = MonotonicSeconds();
    if (rep < 0) return Status::Ok();
    TraceRecord r = probe_internal::Record(task, Op::kOptimizer, "gpu0.compute", rep, 4 * n, start - t0, end - t0, record_threads_);
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
        threads_(config.threads > 0 ? config.threads : probe_internal::MaxThreads(o)),
        record_threads_(o.compute == "cpu" ? threads_.threads() : 0) {}

  Trainer trainer_;
  std::vector<LayerCost> costs_;
  CpuThreads threads_;
  int32_t record_threads_;
  std::unique_ptr<ComputeDevice> device_;  // after trainer_: it refers to it
  std::unique_ptr<WholeModel> model_;
  IterationState it_;
  int64_t passes_ = 0;
  std::vector<void*> update_;  // Update's arrays, in the device's memory
};

}  // namespace

StatusOr<std::vector<TraceRecord>> ProbeCompute(const TrainConfig& config, const std::vector<LayerCost>& costs,
                                                const std::string& label, const HostProbeOptions& o) {
  TF_RETURN_IF_ERROR(probe_internal::CheckOptions(o, "probe compute"));
  TF_ASSIGN_OR_RETURN(std::unique_ptr<LayerPasses> passes, LayerPasses::Create(config, costs, o));
  std::vector<TraceRecord> out;
  const double t0 = MonotonicSeconds();
  const std::string task = "probe.compute." + label;
  for (int32_t rep = -1; rep < o.repetitions; ++rep) {
    TF_RETURN_IF_ERROR(passes->Pass(task, rep, t0, &out));
    probe_internal::Report(o, task + (rep < 0 ? " warm-up" : " repetition " + std::to_string(rep + 1)));
  }
  if (!o.gpu_update) return out;
  const int64_t n = passes->on_card() ? kGpuUpdateProbeElementsCuda : kGpuUpdateProbeElements;
  for (int32_t rep = -1; rep < o.repetitions; ++rep) TF_RETURN_IF_ERROR(passes->Update("probe.gpu_adam", n, rep, t0, &out));
  probe_internal::Report(o, "probe.gpu_adam");
  return out;
}

StatusOr<std::vector<TraceRecord>> ProbeIoCpu(const TrainConfig& config, const std::vector<LayerCost>& costs,
                                              const IoCpuProbeOptions& io, const HostProbeOptions& o) {
  TF_RETURN_IF_ERROR(probe_internal::CheckOptions(o, "probe io-cpu"));
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
      probe_internal::HandOvers hand_overs;
      const double warm_until = MonotonicSeconds() + 0.1;
      while (MonotonicSeconds() < warm_until) TF_RETURN_IF_ERROR(hand_overs.One());
      const double start = MonotonicSeconds(), stop = start + io.window_s;
      int32_t count = 0;
      double now = start;
      for (; now < stop; now = MonotonicSeconds(), ++count) {
        std::this_thread::sleep_for(std::chrono::duration<double>(probe_internal::kHandOverGapS));
        TF_RETURN_IF_ERROR(hand_overs.One());
      }
      TraceRecord r = probe_internal::Record("probe.io_cpu.dispatch", Op::kBarrier, "cpu", 0, 0, start, now, 1);
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
        std::string what = "compute beside " + st.op;
        if (st.op == "dispatch") {
          what += " hand-overs";
        } else {
          what += ' ';
          what += std::to_string(st.block_bytes) + " B x " + std::to_string(st.queue_depth);
        }
        probe_internal::Report(o, what);
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

}  // namespace tierflow::real
