// gpu0 on GPU 0 (compute_device.h): the model's bf16 parameters and fp32 gradients in device
// memory, the layer steps of cuda::LlamaSteps on the compute stream, h2d and d2h on the copy
// streams from the executor's host blocks, page-locked by RegisterHost. Every call returns when its
// work is done on the GPU, so the dispatcher's dependencies order GPU work as they order CPU work;
// with a DeviceSpan it brackets that work with CUDA events (docs/trace-format.md "GPU-side
// times").
//
// Memory: the parameter and gradient arrays are whole-model (2 + 4 bytes per parameter); the
// schedule's GPU pool budget is not yet what bounds them.
#include <cuda_runtime_api.h>

#include <mutex>
#include <unordered_set>

#include "compute_device.h"
#include "tierflow/real/cuda_compute.h"
#include "tierflow/real/cuda_llama.h"
#include "tierflow/real/cuda_ops.h"
#include "tierflow/real/cuda_status.h"
#include "tierflow/real/storage.h"

namespace tierflow::real::exec {

StatusOr<std::unique_ptr<ComputeDevice>> MakeCudaDevice(const TrainConfig& config);

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

  static StatusOr<std::unique_ptr<ComputeDevice>> Create(const TrainConfig& config) {
    std::unique_ptr<CudaDevice> d(new CudaDevice());
    TF_ASSIGN_OR_RETURN(d->ctx_, cuda::Context::Open(0));
    TF_ASSIGN_OR_RETURN(d->steps_, cuda::LlamaSteps::Create(*d->ctx_, config.spec, config.batch, config.seq));
    const int64_t total = d->steps_->layout().total;
    TF_ASSIGN_OR_RETURN(d->p16_, d->ctx_->Allocate(total * 2));
    TF_ASSIGN_OR_RETURN(d->grad_, d->ctx_->Allocate(total * 4));
    return std::unique_ptr<ComputeDevice>(std::move(d));
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

  Status LoadParams(const std::vector<uint16_t>& p16) override {
    std::lock_guard<std::mutex> lock(mu_);
    TF_RETURN_IF_ERROR(Current());
    if (static_cast<int64_t>(p16.size()) * 2 != p16_.size_bytes()) return InvalidArgument("cuda device: parameter count differs");
    return p16_.CopyFromHost(*ctx_, p16.data(), p16_.size_bytes());
  }

  Status H2D(int64_t element_offset, const void* src, int64_t n, DeviceSpan* span) override {
    TF_RETURN_IF_ERROR(Current());
    TF_RETURN_IF_ERROR(CheckRange(element_offset, n));
    SpanTimer timer(span);
    TF_RETURN_IF_ERROR(timer.Begin(ctx_->h2d_stream()));
    TF_RETURN_IF_ERROR(cuda::CopyAsync(P16() + element_offset, src, n * 2, cuda::CopyKind::kHostToDevice, ctx_->h2d_stream()));
    TF_RETURN_IF_ERROR(timer.End(ctx_->h2d_stream()));
    TF_RETURN_IF_ERROR(Sync(ctx_->h2d_stream()));
    return timer.Read();
  }

  StatusOr<cpu::GradCheck> D2HGrad(void* dst, int64_t element_offset, int64_t n, bool to_bf16, float grad_scale,
                                   CpuThreads&, DeviceSpan* span) override {
    TF_RETURN_IF_ERROR(CheckRange(element_offset, n));
    // The check and the cast use the compute stream and the context's scratch: one at a time with
    // the layer steps.
    std::lock_guard<std::mutex> lock(mu_);
    TF_RETURN_IF_ERROR(Current());
    const float* src = Grad() + element_offset;
    SpanTimer timer(span);
    TF_RETURN_IF_ERROR(timer.Begin(ctx_->stream()));
    TF_ASSIGN_OR_RETURN(const cpu::GradCheck check, cuda::OverflowCheckAndNorm(*ctx_, src, n, grad_scale));
    if (!to_bf16) {
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
    TF_RETURN_IF_ERROR(cuda::CopyAsync(dst, staged, n * 2, cuda::CopyKind::kDeviceToHost, ctx_->d2h_stream()));
    TF_RETURN_IF_ERROR(timer.End(ctx_->d2h_stream()));
    TF_RETURN_IF_ERROR(Sync(ctx_->d2h_stream()));
    TF_RETURN_IF_ERROR(timer.Read());
    return check;
  }

  Status Forward(int64_t layer, IterationState* it, CpuThreads&, DeviceSpan* span) override {
    std::lock_guard<std::mutex> lock(mu_);
    TF_RETURN_IF_ERROR(Current());
    SpanTimer timer(span);
    TF_RETURN_IF_ERROR(timer.Begin(ctx_->stream()));
    if (layer == 0) TF_RETURN_IF_ERROR(steps_->SetBatch(it->tokens.data(), it->targets.data()));
    TF_RETURN_IF_ERROR(steps_->Forward(layer, P16() + Begin(layer)));
    TF_RETURN_IF_ERROR(timer.End(ctx_->stream()));
    TF_RETURN_IF_ERROR(ctx_->Synchronize());
    if (layer == steps_->layers() - 1) it->loss = steps_->loss();
    return timer.Read();
  }

  Status Backward(int64_t layer, IterationState* it, CpuThreads&, DeviceSpan* span) override {
    std::lock_guard<std::mutex> lock(mu_);
    TF_RETURN_IF_ERROR(Current());
    SpanTimer timer(span);
    TF_RETURN_IF_ERROR(timer.Begin(ctx_->stream()));
    TF_RETURN_IF_ERROR(steps_->Backward(layer, P16() + Begin(layer), Grad() + Begin(layer), it->loss_scale));
    TF_RETURN_IF_ERROR(timer.End(ctx_->stream()));
    TF_RETURN_IF_ERROR(ctx_->Synchronize());
    return timer.Read();
  }

 private:
  CudaDevice() = default;
  uint16_t* P16() const { return static_cast<uint16_t*>(p16_.data()); }
  float* Grad() const { return static_cast<float*>(grad_.data()); }
  int64_t Begin(int64_t layer) const { return steps_->layout().layer_offset[static_cast<size_t>(layer)]; }

  // Each worker thread makes the GPU current before its first CUDA call.
  Status Current() const {
    TF_CUDA(cudaSetDevice(ctx_->device()));
    return Status::Ok();
  }
  Status CheckRange(int64_t begin, int64_t n) const {
    if (begin < 0 || n < 1 || begin + n > steps_->layout().total) {
      return InvalidArgument("cuda device: elements [" + std::to_string(begin) + ", " + std::to_string(begin + n) +
                             ") outside the model's " + std::to_string(steps_->layout().total));
    }
    return Status::Ok();
  }
  static Status Sync(void* stream) {
    TF_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
    return Status::Ok();
  }

  std::unique_ptr<cuda::Context> ctx_;
  std::unique_ptr<cuda::LlamaSteps> steps_;
  cuda::DeviceBuffer p16_, grad_, staging_;
  std::mutex mu_;  // the compute stream, cuBLAS handle and scratch
  std::mutex registered_mu_;
  std::unordered_set<void*> registered_;  // host blocks page-locked by RegisterHost
};

}  // namespace

StatusOr<std::unique_ptr<ComputeDevice>> MakeCudaDevice(const TrainConfig& config) { return CudaDevice::Create(config); }

}  // namespace tierflow::real::exec
