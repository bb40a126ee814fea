// gpu0 on GPU 0 (compute_device.h): blocks of device memory from cudaMalloc for the schedule's
// GPU buffers, kept per size for reuse; the layer steps of cuda::LlamaSteps on the compute
// stream; h2d and d2h on the copy streams from the executor's host blocks, page-locked by
// RegisterHost. Every call returns when its work is done on the GPU, so the dispatcher's
// dependencies order GPU work as they order CPU work; with a DeviceSpan it brackets that work
// with CUDA events (docs/trace-format.md "GPU-side times").
//
// Memory: what Allocate hands out (the schedule's GPU buffers: gathered parameters, a layer's
// gradients, the GPU-resident parameters), plus the device's own working memory: LlamaSteps'
// activations and workspace and the d2h's bf16 staging. A step reads each tensor where the
// schedule put it (its unit's gathered buffer, the resident home); only ranges that cut a tensor
// in two, which our policies never plan, are first copied into a block of the layer's size.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "tierflow/real/block_cache.h"
#include "tierflow/real/compute_device.h"
#include "tierflow/real/cuda_compute.h"
#include "tierflow/real/cuda_llama.h"
#include "tierflow/real/cuda_ops.h"
#include "tierflow/real/cuda_status.h"
#include "tierflow/real/storage.h"
#include "cuda_device.h"

namespace tierflow::real {

namespace {

// One call's GPU-side span: an event before its work on the stream the work starts on, one after
// it on the stream it ends on (one device, one clock), read once the work has been waited for:
// the end is the host clock then, the start the end less the events' elapsed time. Does nothing
// without a span to fill.
class SpanTimer {
 public:
  explicit SpanTimer(DeviceSpan* out) : out_(out) {}
  ~SpanTimer() {
    if (begin_ != nullptr) cudaEventDestroy(begin_);
    if (end_ != nullptr) cudaEventDestroy(end_);
  }
  SpanTimer(const SpanTimer&) = delete;
  SpanTimer& operator=(const SpanTimer&) = delete;

  Status Begin(void* stream) {
    if (out_ == nullptr) return Status::Ok();
    TF_CUDA(cudaEventCreate(&begin_));
    TF_CUDA(cudaEventCreate(&end_));
    TF_CUDA(cudaEventRecord(begin_, static_cast<cudaStream_t>(stream)));
    return Status::Ok();
  }
  Status End(void* stream) {
    if (out_ == nullptr) return Status::Ok();
    TF_CUDA(cudaEventRecord(end_, static_cast<cudaStream_t>(stream)));
    return Status::Ok();
  }
  // After the work has been waited for.
  Status Read() {
    if (out_ == nullptr) return Status::Ok();
    TF_CUDA(cudaEventSynchronize(end_));
    const double now = MonotonicSeconds();
    float ms = 0;
    TF_CUDA(cudaEventElapsedTime(&ms, begin_, end_));
    *out_ = DeviceSpan{now - static_cast<double>(ms) * 1e-3, now};
    return Status::Ok();
  }

 private:
  DeviceSpan* out_;
  cudaEvent_t begin_ = nullptr, end_ = nullptr;
};

class CudaDevice final : public ComputeDevice {
 public:
  std::string name() const override { return "cuda (" + ctx_->device_name() + ")"; }

  static StatusOr<std::unique_ptr<ComputeDevice>> Create(const TrainConfig& config, int local_rank) {
    std::unique_ptr<CudaDevice> d(new CudaDevice());
    TF_ASSIGN_OR_RETURN(const int gpus, cuda::Context::Count());
    TF_ASSIGN_OR_RETURN(d->ctx_, cuda::Context::Open(gpus > 0 ? local_rank % gpus : 0));
    TF_ASSIGN_OR_RETURN(d->steps_, cuda::LlamaSteps::Create(*d->ctx_, config.spec, config.batch, config.seq));
    d->blocks_ = std::make_unique<BlockCache>(
        [](int64_t bytes) -> void* {
          void* p = nullptr;
          if (cudaMalloc(&p, static_cast<size_t>(bytes)) != cudaSuccess) {
            (void)cudaGetLastError();  // out of memory is not sticky
            return nullptr;
          }
          return p;
        },
        [](void* p, int64_t) { cudaFree(p); });
    return std::unique_ptr<ComputeDevice>(std::move(d));
  }
  ~CudaDevice() override {
    if (ctx_ != nullptr) (void)Current();
    blocks_.reset();  // cudaFree of the free blocks, on this device
  }

  Status RegisterHost(void* p, int64_t bytes) override {
    TF_RETURN_IF_ERROR(Current());
    std::lock_guard<std::mutex> lock(registered_mu_);
    if (const cudaError_t e = cudaHostRegister(p, static_cast<size_t>(bytes), cudaHostRegisterDefault); e != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: copies from this block are staged by the driver instead
      return cuda::CudaError(e, "cudaHostRegister");
    }
    registered_.insert(p);
    return Status::Ok();
  }
  void UnregisterHost(void* p) override {
    std::lock_guard<std::mutex> lock(registered_mu_);
    if (registered_.erase(p) > 0) cudaHostUnregister(p);
  }

  StatusOr<void*> Allocate(int64_t bytes) override {
    TF_RETURN_IF_ERROR(Current());
    std::lock_guard<std::mutex> lock(blocks_mu_);
    void* p = blocks_->Take(bytes);
    if (p == nullptr) {
      size_t free_bytes = 0, total = 0;
      (void)cudaMemGetInfo(&free_bytes, &total);
      return ResourceExhausted("cuda device: cannot allocate " + std::to_string(bytes) + " bytes of GPU memory (" +
                               std::to_string(free_bytes) + " of " + std::to_string(total) + " free)");
    }
    return p;
  }
  void Free(void* block) override {
    std::lock_guard<std::mutex> lock(blocks_mu_);
    blocks_->Give(block);
  }
  MemoryPeak memory_peak() const override {
    std::lock_guard<std::mutex> lock(blocks_mu_);
    return {blocks_->peak_bytes(), blocks_->peak_reserved_bytes()};
  }
  void LimitReserved(int64_t bytes) override {
    std::lock_guard<std::mutex> lock(blocks_mu_);
    blocks_->set_limit(bytes);
  }

  Status H2D(void* dst, const void* src, int64_t bytes, DeviceSpan* span) override {
    TF_RETURN_IF_ERROR(Current());
    SpanTimer timer(span);
    TF_RETURN_IF_ERROR(timer.Begin(ctx_->h2d_stream()));
    TF_RETURN_IF_ERROR(cuda::CopyAsync(dst, src, bytes, cuda::CopyKind::kHostToDevice, ctx_->h2d_stream()));
    TF_RETURN_IF_ERROR(timer.End(ctx_->h2d_stream()));
    TF_RETURN_IF_ERROR(Sync(ctx_->h2d_stream()));
    return timer.Read();
  }

  Status D2H(void* dst, const void* src, int64_t bytes) override {
    TF_RETURN_IF_ERROR(Current());
    TF_RETURN_IF_ERROR(cuda::CopyAsync(dst, src, bytes, cuda::CopyKind::kDeviceToHost, ctx_->d2h_stream()));
    return Sync(ctx_->d2h_stream());
  }

  // On the d2h stream, beside the device's own copies off the GPU (a copy engine's work too).
  Status D2D(void* dst, const void* src, int64_t bytes) override {
    TF_RETURN_IF_ERROR(Current());
    TF_RETURN_IF_ERROR(cuda::CopyAsync(dst, src, bytes, cuda::CopyKind::kDeviceToDevice, ctx_->d2h_stream()));
    return Sync(ctx_->d2h_stream());
  }

  // On the d2h stream with D2D (the collective's unpacking), not behind the compute stream's
  // layer steps: it uses no scratch, so it needs no turn of mu_.
  Status RoundToBf16(float* x, int64_t n, CpuThreads&) override {
    TF_RETURN_IF_ERROR(Current());
    TF_RETURN_IF_ERROR(cuda::RoundToBf16(x, n, ctx_->d2h_stream()));
    return Sync(ctx_->d2h_stream());
  }

  int gpu() const override { return ctx_->device(); }

  StatusOr<cpu::GradCheck> D2HGrad(void* dst, const float* src, int64_t n, bool to_bf16, float grad_scale,
                                   CpuThreads&, DeviceSpan* span) override {
    // The check and the cast use the compute stream and the context's scratch: one at a time with
    // the layer steps (mu_). The copy is the copy engine's: the next layer step may run beside it,
    // as the schedule's resources say, so mu_ is let go once the cast is done; staging_mu_ keeps
    // the bf16 staging until the copy has read it.
    std::unique_lock<std::mutex> staging_lock(staging_mu_, std::defer_lock);  // the fp32 copy needs no staging
    if (to_bf16) staging_lock.lock();
    std::unique_lock<std::mutex> lock(mu_);
    TF_RETURN_IF_ERROR(Current());
    SpanTimer timer(span);
    TF_RETURN_IF_ERROR(timer.Begin(ctx_->stream()));
    TF_ASSIGN_OR_RETURN(const cpu::GradCheck check, cuda::OverflowCheckAndNorm(*ctx_, src, n, grad_scale));  // waits for the stream
    if (!to_bf16) {
      lock.unlock();
      TF_RETURN_IF_ERROR(cuda::CopyAsync(dst, src, n * 4, cuda::CopyKind::kDeviceToHost, ctx_->d2h_stream()));
      TF_RETURN_IF_ERROR(timer.End(ctx_->d2h_stream()));
      TF_RETURN_IF_ERROR(Sync(ctx_->d2h_stream()));
      TF_RETURN_IF_ERROR(timer.Read());
      return check;
    }
    if (staging_.size_bytes() < n * 2) {
      staging_ = cuda::DeviceBuffer();
      TF_ASSIGN_OR_RETURN(staging_, ctx_->Allocate(n * 2));
    }
    auto* staged = static_cast<uint16_t*>(staging_.data());
    TF_RETURN_IF_ERROR(cuda::Fp32ToBf16(*ctx_, staged, src, n));
    TF_RETURN_IF_ERROR(ctx_->Synchronize());
    lock.unlock();
    TF_RETURN_IF_ERROR(cuda::CopyAsync(dst, staged, n * 2, cuda::CopyKind::kDeviceToHost, ctx_->d2h_stream()));
    TF_RETURN_IF_ERROR(timer.End(ctx_->d2h_stream()));
    TF_RETURN_IF_ERROR(Sync(ctx_->d2h_stream()));
    TF_RETURN_IF_ERROR(timer.Read());
    return check;
  }

  // The micro-step's fp32 gradients come to host memory and are added there, by the CPU
  // reference's arithmetic (cpu::AccumulateBf16), so that accumulation rounds as on the CPU device.
  StatusOr<cpu::GradCheck> D2HGradAccumulate(uint16_t* dst, const float* src, int64_t n, float grad_scale,
                                             CpuThreads& threads, DeviceSpan* span) override {
    // Only the copy engine and host_staging_: beside the layer steps.
    std::lock_guard<std::mutex> lock(staging_mu_);
    TF_RETURN_IF_ERROR(Current());
    if (static_cast<int64_t>(host_staging_.size()) < n) host_staging_.resize(static_cast<size_t>(n));
    SpanTimer timer(span);
    TF_RETURN_IF_ERROR(timer.Begin(ctx_->d2h_stream()));
    TF_RETURN_IF_ERROR(cuda::CopyAsync(host_staging_.data(), src, n * 4, cuda::CopyKind::kDeviceToHost, ctx_->d2h_stream()));
    TF_RETURN_IF_ERROR(timer.End(ctx_->d2h_stream()));
    TF_RETURN_IF_ERROR(Sync(ctx_->d2h_stream()));
    TF_RETURN_IF_ERROR(timer.Read());
    return cpu::AccumulateBf16(dst, host_staging_.data(), n, grad_scale, threads);
  }

  Status Forward(int64_t layer, const std::vector<ParamRange>& params, IterationState* it, CpuThreads&,
                 DeviceSpan* span) override {
    return Step(layer, params, span, [&](const cuda::LlamaSteps::LayerParams& p) -> Status {
      if (layer == 0) TF_RETURN_IF_ERROR(steps_->SetBatch(it->tokens.data(), it->targets.data()));
      TF_RETURN_IF_ERROR(steps_->Forward(layer, p));
      if (layer == steps_->layers() - 1) it->loss = steps_->loss();  // read back by the head's forward
      return Status::Ok();
    });
  }

  Status Backward(int64_t layer, const std::vector<ParamRange>& params, float* grads, IterationState* it, CpuThreads&,
                  DeviceSpan* span) override {
    const int64_t n = steps_->layout().layer_elements[static_cast<size_t>(layer)];
    return Step(layer, params, span, [&](const cuda::LlamaSteps::LayerParams& p) {
      TF_RETURN_IF_ERROR(steps_->Backward(layer, p, grads, it->BackwardSeed()));
      return cuda::RoundToBf16(*ctx_, grads, n);
    });
  }

  // On the compute stream, one at a time with the layer steps (a GPU update shares the card's
  // compute with the passes, as the schedule's resource says).
  Status AdamW(float* param, float* m, float* v, GradIn grad, uint16_t* bf16_param, int64_t n, int64_t step, float grad_scale,
               const AdamWConfig& config, CpuThreads&, DeviceSpan* span) override {
    std::lock_guard<std::mutex> lock(mu_);
    TF_RETURN_IF_ERROR(Current());
    SpanTimer timer(span);
    TF_RETURN_IF_ERROR(timer.Begin(ctx_->stream()));
    TF_RETURN_IF_ERROR(grad.fp32 != nullptr ? cuda::AdamW(*ctx_, param, m, v, grad.fp32, bf16_param, n, step, grad_scale, config)
                                            : cuda::AdamW(*ctx_, param, m, v, grad.bf16, bf16_param, n, step, grad_scale, config));
    TF_RETURN_IF_ERROR(timer.End(ctx_->stream()));
    TF_RETURN_IF_ERROR(ctx_->Synchronize());
    return timer.Read();
  }

  Status Fp32ToBf16(uint16_t* dst, const float* src, int64_t n, CpuThreads&) override {
    std::lock_guard<std::mutex> lock(mu_);
    TF_RETURN_IF_ERROR(Current());
    TF_RETURN_IF_ERROR(cuda::Fp32ToBf16(*ctx_, dst, src, n));
    return ctx_->Synchronize();
  }

 private:
  CudaDevice() = default;

  // One layer step on the compute stream, bracketed by the span's events, over the layer's
  // tensors where they lie (Tensors); returns when the GPU has finished it.
  Status Step(int64_t layer, const std::vector<ParamRange>& params, DeviceSpan* span,
              const std::function<Status(const cuda::LlamaSteps::LayerParams&)>& run) {
    std::lock_guard<std::mutex> lock(mu_);
    TF_RETURN_IF_ERROR(Current());
    SpanTimer timer(span);
    TF_RETURN_IF_ERROR(timer.Begin(ctx_->stream()));
    TF_ASSIGN_OR_RETURN(const cuda::LlamaSteps::LayerParams p, Tensors(layer, params));
    TF_RETURN_IF_ERROR(run(p));
    TF_RETURN_IF_ERROR(timer.End(ctx_->stream()));
    TF_RETURN_IF_ERROR(ctx_->Synchronize());
    return timer.Read();
  }

  // A pointer to each of the layer's tensors: into the ranges when each tensor lies whole in one,
  // else into the layer block, into which the ranges are copied (on the compute stream, ahead of
  // the step; the block is allocated the first time it is needed).
  StatusOr<cuda::LlamaSteps::LayerParams> Tensors(int64_t layer, const std::vector<ParamRange>& params) {
    const ParamLayout& layout = steps_->layout();
    const int64_t begin = layout.layer_offset[static_cast<size_t>(layer)];
    const int64_t elements = layout.layer_elements[static_cast<size_t>(layer)];
    TF_RETURN_IF_ERROR(CheckLayerParams(params, begin, elements));
    cuda::LlamaSteps::LayerParams out;
    for (const void* p : TensorStarts(layout, layer, params)) out.push_back(static_cast<const uint16_t*>(p));
    if (!out.empty()) return out;
    if (layer_.size_bytes() < elements * 2) {
      layer_ = cuda::DeviceBuffer();
      TF_ASSIGN_OR_RETURN(layer_, ctx_->Allocate(elements * 2));
    }
    auto* dst = static_cast<uint16_t*>(layer_.data());
    for (const ParamRange& r : params) {
      TF_RETURN_IF_ERROR(cuda::CopyAsync(dst + (r.begin - begin), r.data, r.n * 2, cuda::CopyKind::kDeviceToDevice, ctx_->stream()));
    }
    return LayerTensorPointers<const uint16_t>(layout, layer, dst);
  }

  // Each worker thread makes the GPU current before its first CUDA call.
  Status Current() const {
    TF_CUDA(cudaSetDevice(ctx_->device()));
    return Status::Ok();
  }
  static Status Sync(void* stream) {
    TF_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
    return Status::Ok();
  }

  std::unique_ptr<cuda::Context> ctx_;
  std::unique_ptr<cuda::LlamaSteps> steps_;
  cuda::DeviceBuffer layer_, staging_;  // a layer's bf16 parameters when its ranges cut a tensor; d2h's bf16 cast
  std::vector<float> host_staging_;     // an accumulating d2h's fp32 gradients, in host memory
  std::mutex mu_;                       // the compute stream, cuBLAS handle, scratch and layer_
  std::mutex staging_mu_;               // staging_ and host_staging_ (taken before mu_, never after)
  mutable std::mutex blocks_mu_;
  std::unique_ptr<BlockCache> blocks_;    // Allocate's blocks
  std::mutex registered_mu_;
  std::unordered_set<void*> registered_;  // host blocks page-locked by RegisterHost
};

}  // namespace

StatusOr<std::unique_ptr<ComputeDevice>> MakeCudaDevice(const TrainConfig& config, int local_rank) {
  return CudaDevice::Create(config, local_rank);
}

}  // namespace tierflow::real
