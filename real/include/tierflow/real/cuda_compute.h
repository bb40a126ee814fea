// The CUDA compute back-end (issue: GPU back-end), first piece: a device context (one GPU, one
// stream, one cuBLAS handle), device buffers from plain cudaMalloc (no managed memory), and the
// linear layer's forward and backward in bf16 with fp32 accumulation on cuBLAS — the GEMM that dominates a
// layer. The other ops of compute_ops.h (norms, rotary, attention, SwiGLU, cross-entropy, the
// overflow check) are still the CPU back-end's only.
//
// Built only when CMake finds the CUDA toolkit (TIERFLOW_HAVE_CUDA); it needs no nvcc (cuBLAS and
// the runtime API are called from C++). Every call returns a Status naming the CUDA or cuBLAS
// call and its error string; Context::Open says what is missing on a machine without a GPU or
// driver, which the GPU tests print when they skip.
//
// Thread safety: a Context and its buffers belong to one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tierflow/core/status.h"

namespace tierflow::real::cuda {

class Context;

// Device memory from cudaMalloc, freed on destruction. Copies are synchronous on the context's
// stream (the executor's h2d/d2h streams come later).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return data_; }
  int64_t size_bytes() const { return bytes_; }
  Status CopyFromHost(const Context& ctx, const void* src, int64_t bytes);
  Status CopyToHost(const Context& ctx, void* dst, int64_t bytes) const;

 private:
  friend class Context;
  void* data_ = nullptr;
  int64_t bytes_ = 0;
};

class Context {
 public:
  // Opens GPU `device`: Unavailable, naming the missing piece (no driver, no device, an index
  // beyond the devices there are), where it cannot.
  static StatusOr<std::unique_ptr<Context>> Open(int device = 0);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const std::string& device_name() const { return name_; }
  int compute_capability() const { return capability_; }  // e.g. 90 for sm_90

  StatusOr<DeviceBuffer> Allocate(int64_t bytes) const;
  Status Synchronize() const;

  // out[N,O] = x[N,I] W[O,I]^T (PyTorch nn.Linear layout, row-major, as cpu::LinearForward):
  // x and w bf16, out fp32, fp32 accumulation (cuBLAS, CUBLAS_COMPUTE_32F). Device pointers;
  // runs on the context's stream (Synchronize() to wait).
  Status LinearForwardBf16(float* out, const uint16_t* x, const uint16_t* w, int64_t n_rows, int64_t in,
                           int64_t out_dim) const;

  // dx[N,I] += dout W and dw[O,I] += dout^T x (as cpu::LinearBackward): dout, x and w bf16, dx
  // and dw fp32 accumulators, fp32 accumulation. Either of dx, dw may be null.
  Status LinearBackwardBf16(float* dx, float* dw, const uint16_t* dout, const uint16_t* x, const uint16_t* w,
                            int64_t n_rows, int64_t in, int64_t out_dim) const;

  void* stream() const { return stream_; }  // cudaStream_t

 private:
  Context() = default;
  int device_ = 0;
  int capability_ = 0;
  std::string name_;
  void* stream_ = nullptr;  // cudaStream_t
  void* cublas_ = nullptr;  // cublasHandle_t
};

}  // namespace tierflow::real::cuda
