#include "tierflow/real/cuda_compute.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <limits>
#include <utility>

namespace tierflow::real::cuda {
namespace {

Status CudaError(cudaError_t e, const std::string& call) {
  return Internal(call + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

Status CublasError(cublasStatus_t s, const std::string& call) {
  return Internal(call + ": " + cublasGetStatusName(s) + " (" + cublasGetStatusString(s) + ")");
}

#define TF_CUDA(call)                                          \
  do {                                                         \
    const cudaError_t tf_cuda_e = (call);                      \
    if (tf_cuda_e != cudaSuccess) return CudaError(tf_cuda_e, #call); \
  } while (0)

bool FitsInt(int64_t v) { return v >= 0 && v <= std::numeric_limits<int>::max(); }

Status CheckLinearShape(const char* what, int64_t n_rows, int64_t in, int64_t out_dim) {
  if (!FitsInt(n_rows) || !FitsInt(in) || !FitsInt(out_dim) || n_rows == 0 || in == 0 || out_dim == 0) {
    return InvalidArgument(std::string(what) + ": shape " + std::to_string(n_rows) + " x " + std::to_string(in) + " -> " +
                           std::to_string(out_dim) + " (each must be 1 .. 2^31-1)");
  }
  return Status::Ok();
}

}  // namespace

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

StatusOr<std::unique_ptr<Context>> Context::Open(int device) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    return Unavailable(std::string("no usable CUDA device: cudaGetDeviceCount: ") + cudaGetErrorName(e) + " (" +
                       cudaGetErrorString(e) + ")");
  }
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
  cudaStream_t stream = nullptr;
  TF_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  c->stream_ = stream;
  cublasHandle_t handle = nullptr;
  if (cublasStatus_t s = cublasCreate(&handle); s != CUBLAS_STATUS_SUCCESS) return CublasError(s, "cublasCreate");
  c->cublas_ = handle;
  if (cublasStatus_t s = cublasSetStream(handle, stream); s != CUBLAS_STATUS_SUCCESS) return CublasError(s, "cublasSetStream");
  return c;
}

Context::~Context() {
  if (cublas_ != nullptr) cublasDestroy(static_cast<cublasHandle_t>(cublas_));
  if (stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

StatusOr<DeviceBuffer> Context::Allocate(int64_t bytes) const {
  if (bytes <= 0) return InvalidArgument("device allocation of " + std::to_string(bytes) + " bytes");
  TF_CUDA(cudaSetDevice(device_));
  DeviceBuffer b;
  const cudaError_t e = cudaMalloc(&b.data_, static_cast<size_t>(bytes));
  if (e != cudaSuccess) {
    return ResourceExhausted("cudaMalloc of " + std::to_string(bytes) + " bytes on " + name_ + ": " + cudaGetErrorString(e));
  }
  b.bytes_ = bytes;
  return b;
}

Status Context::Synchronize() const {
  TF_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
  return Status::Ok();
}

Status Context::LinearForwardBf16(float* out, const uint16_t* x, const uint16_t* w, int64_t n_rows, int64_t in,
                                  int64_t out_dim) const {
  TF_RETURN_IF_ERROR(CheckLinearShape("linear forward", n_rows, in, out_dim));
  // Row-major x[N,I], W[O,I], out[N,O] are column-major x^T (I x N), W^T (I x O), out^T (O x N):
  // out^T = W x^T = op_T(W^T) x^T, so A = W^T transposed (m = O, k = I, lda = I), B = x^T
  // (k = I, n = N, ldb = I), C = out^T (ldc = O).
  const float alpha = 1.0f, beta = 0.0f;
  const int m = static_cast<int>(out_dim), n = static_cast<int>(n_rows), k = static_cast<int>(in);
  const cublasStatus_t s =
      cublasGemmEx(static_cast<cublasHandle_t>(cublas_), CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, w, CUDA_R_16BF, k, x,
                   CUDA_R_16BF, k, &beta, out, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS) return CublasError(s, "cublasGemmEx (linear forward, bf16 in, fp32 out)");
  return Status::Ok();
}

Status Context::LinearBackwardBf16(float* dx, float* dw, const uint16_t* dout, const uint16_t* x, const uint16_t* w,
                                   int64_t n_rows, int64_t in, int64_t out_dim) const {
  TF_RETURN_IF_ERROR(CheckLinearShape("linear backward", n_rows, in, out_dim));
  const float alpha = 1.0f, beta = 1.0f;  // accumulate into dx and dw
  const int nr = static_cast<int>(n_rows), i = static_cast<int>(in), o = static_cast<int>(out_dim);
  auto handle = static_cast<cublasHandle_t>(cublas_);
  if (dx != nullptr) {
    // dx^T (I x N) += W^T (I x O, column-major view of W, lda = I) * dout^T (O x N, ldb = O).
    const cublasStatus_t s = cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, i, nr, o, &alpha, w, CUDA_R_16BF, i, dout,
                                          CUDA_R_16BF, o, &beta, dx, CUDA_R_32F, i, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) return CublasError(s, "cublasGemmEx (linear backward, dx)");
  }
  if (dw != nullptr) {
    // dw^T (I x O) += x^T (I x N, lda = I) * dout (N x O: the transpose of dout^T, ldb = O).
    const cublasStatus_t s = cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_T, i, o, nr, &alpha, x, CUDA_R_16BF, i, dout,
                                          CUDA_R_16BF, o, &beta, dw, CUDA_R_32F, i, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) return CublasError(s, "cublasGemmEx (linear backward, dw)");
  }
  return Status::Ok();
}

}  // namespace tierflow::real::cuda
