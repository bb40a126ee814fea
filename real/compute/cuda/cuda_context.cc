#include "tierflow/real/cuda_compute.h"

#include <utility>

#include "tierflow/real/cuda_status.h"

namespace tierflow::real::cuda {

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

namespace {
// A synchronous copy on the context's stream of `bytes` (at most the buffer's `capacity`).
Status SyncCopy(const Context& ctx, void* dst, const void* src, int64_t bytes, int64_t capacity, cudaMemcpyKind kind) {
  if (bytes < 0 || bytes > capacity) {
    return InvalidArgument("copy of " + std::to_string(bytes) + " bytes " +
                           (kind == cudaMemcpyHostToDevice ? "into" : "out of") + " a device buffer of " +
                           std::to_string(capacity));
  }
  auto stream = static_cast<cudaStream_t>(ctx.stream());
  TF_CUDA(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), kind, stream));
  TF_CUDA(cudaStreamSynchronize(stream));
  return Status::Ok();
}
}  // namespace

Status DeviceBuffer::CopyFromHost(const Context& ctx, const void* src, int64_t bytes) {
  return SyncCopy(ctx, data_, src, bytes, bytes_, cudaMemcpyHostToDevice);
}

Status DeviceBuffer::CopyToHost(const Context& ctx, void* dst, int64_t bytes) const {
  return SyncCopy(ctx, dst, data_, bytes, bytes_, cudaMemcpyDeviceToHost);
}

StatusOr<int> Context::Count() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    return Unavailable(std::string("no usable CUDA device: cudaGetDeviceCount: ") + cudaGetErrorName(e) + " (" +
                       cudaGetErrorString(e) + ")");
  }
  return count;
}

StatusOr<std::unique_ptr<Context>> Context::Open(int device) {
  TF_ASSIGN_OR_RETURN(const int count, Count());
  if (device < 0 || device >= count) {
    return Unavailable("no CUDA device " + std::to_string(device) + " (" + std::to_string(count) + " present)");
  }
  std::unique_ptr<Context> c(new Context());
  c->device_ = device;
  TF_CUDA(cudaSetDevice(device));
  cudaDeviceProp prop{};
  TF_CUDA(cudaGetDeviceProperties(&prop, device));
  c->name_ = prop.name;
  c->capability_ = prop.major * 10 + prop.minor;
  for (void** slot : {&c->stream_, &c->h2d_, &c->d2h_}) {
    cudaStream_t stream = nullptr;
    TF_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    *slot = stream;
  }
  auto stream = static_cast<cudaStream_t>(c->stream_);
  cublasHandle_t handle = nullptr;
  TF_CUBLAS(cublasCreate(&handle), "cublasCreate");
  c->cublas_ = handle;
  TF_CUBLAS(cublasSetStream(handle, stream), "cublasSetStream");
  return c;
}

Context::~Context() {
  if (cublas_ != nullptr) cublasDestroy(static_cast<cublasHandle_t>(cublas_));
  for (void* s : {stream_, h2d_, d2h_}) {
    if (s != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(s));
  }
}

StatusOr<DeviceBuffer> Context::Allocate(int64_t bytes) const {
  if (bytes <= 0) return InvalidArgument("device allocation of " + std::to_string(bytes) + " bytes");
  TF_CUDA(cudaSetDevice(device_));
  DeviceBuffer b;
  const cudaError_t e = cudaMalloc(&b.data_, static_cast<size_t>(bytes));
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear it, or the next launch check would report it
    return ResourceExhausted("cudaMalloc of " + std::to_string(bytes) + " bytes on " + name_ + ": " + cudaGetErrorString(e));
  }
  b.bytes_ = bytes;
  return b;
}

Status Context::Synchronize() const {
  TF_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
  return Status::Ok();
}

StatusOr<void*> Context::Scratch(int64_t bytes) const {
  if (bytes <= scratch_.size_bytes()) return scratch_.data();
  TF_RETURN_IF_ERROR(Synchronize());  // an op queued earlier may still use the old buffer
  scratch_ = DeviceBuffer();
  TF_ASSIGN_OR_RETURN(scratch_, Allocate(bytes));
  return scratch_.data();
}

Status CopyAsync(void* dst, const void* src, int64_t bytes, CopyKind kind, void* stream) {
  if (bytes < 0) return InvalidArgument("copy of " + std::to_string(bytes) + " bytes");
  if (bytes == 0) return Status::Ok();
  TF_CUDA(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                          kind == CopyKind::kHostToDevice   ? cudaMemcpyHostToDevice
                          : kind == CopyKind::kDeviceToHost ? cudaMemcpyDeviceToHost
                                                            : cudaMemcpyDeviceToDevice,
                          static_cast<cudaStream_t>(stream)));
  return Status::Ok();
}

StatusOr<PinnedHostBuffer> PinnedHostBuffer::Allocate(int64_t bytes) {
  if (bytes <= 0) return InvalidArgument("pinned host allocation of " + std::to_string(bytes) + " bytes");
  PinnedHostBuffer b;
  const cudaError_t e = cudaMallocHost(&b.data_, static_cast<size_t>(bytes));
  if (e != cudaSuccess) {
    return ResourceExhausted("cudaMallocHost of " + std::to_string(bytes) + " bytes: " + cudaGetErrorString(e));
  }
  b.bytes_ = bytes;
  return b;
}

PinnedHostBuffer::PinnedHostBuffer(PinnedHostBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

PinnedHostBuffer::~PinnedHostBuffer() {
  if (data_ != nullptr) cudaFreeHost(data_);
}

StatusOr<std::unique_ptr<Timeline>> Timeline::Start(const Context& ctx) {
  std::unique_ptr<Timeline> t(new Timeline());
  cudaEvent_t origin = nullptr;
  TF_CUDA(cudaEventCreate(&origin));
  t->origin_ = origin;
  TF_CUDA(cudaEventRecord(origin, static_cast<cudaStream_t>(ctx.stream())));
  return t;
}

Timeline::~Timeline() {
  for (void* e : start_) cudaEventDestroy(static_cast<cudaEvent_t>(e));
  for (void* e : end_) cudaEventDestroy(static_cast<cudaEvent_t>(e));
  if (origin_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(origin_));
}

StatusOr<int64_t> Timeline::Pair() {
  if (!free_.empty()) {
    const int64_t i = free_.back();
    free_.pop_back();
    return i;
  }
  cudaEvent_t a = nullptr, b = nullptr;
  TF_CUDA(cudaEventCreate(&a));
  if (const cudaError_t e = cudaEventCreate(&b); e != cudaSuccess) {
    cudaEventDestroy(a);
    return CudaError(e, "cudaEventCreate");
  }
  start_.push_back(a);
  end_.push_back(b);
  pending_.push_back(false);
  return static_cast<int64_t>(start_.size()) - 1;
}

StatusOr<int64_t> Timeline::Begin(void* stream) {
  TF_ASSIGN_OR_RETURN(const int64_t i, Pair());
  pending_[static_cast<size_t>(i)] = true;
  TF_CUDA(cudaEventRecord(static_cast<cudaEvent_t>(start_[static_cast<size_t>(i)]), static_cast<cudaStream_t>(stream)));
  return i;
}

Status Timeline::End(int64_t task, void* stream) {
  if (task < 0 || task >= static_cast<int64_t>(end_.size()) || !pending_[static_cast<size_t>(task)]) {
    return InvalidArgument("timeline: no task " + std::to_string(task) + " in flight");
  }
  TF_CUDA(cudaEventRecord(static_cast<cudaEvent_t>(end_[static_cast<size_t>(task)]), static_cast<cudaStream_t>(stream)));
  return Status::Ok();
}

StatusOr<std::pair<double, double>> Timeline::Times(int64_t task) {
  if (task < 0 || task >= static_cast<int64_t>(end_.size()) || !pending_[static_cast<size_t>(task)]) {
    return InvalidArgument("timeline: no task " + std::to_string(task) + " in flight");
  }
  const auto start = static_cast<cudaEvent_t>(start_[static_cast<size_t>(task)]);
  const auto end = static_cast<cudaEvent_t>(end_[static_cast<size_t>(task)]);
  TF_CUDA(cudaEventSynchronize(end));
  float start_ms = 0, end_ms = 0;
  TF_CUDA(cudaEventElapsedTime(&start_ms, static_cast<cudaEvent_t>(origin_), start));
  TF_CUDA(cudaEventElapsedTime(&end_ms, static_cast<cudaEvent_t>(origin_), end));
  pending_[static_cast<size_t>(task)] = false;
  free_.push_back(task);
  return std::pair<double, double>{start_ms * 1e-3, end_ms * 1e-3};
}

}  // namespace tierflow::real::cuda
