// The CUDA compute back-end's device context: one GPU, one stream, one cuBLAS handle, device
// buffers from plain cudaMalloc (no managed memory) and the ops' scratch. The ops themselves are
// cuda_ops.h.
//
// Built only when CMake finds the CUDA toolkit (TIERFLOW_HAVE_CUDA). Every call returns a Status
// naming the CUDA or cuBLAS call and its error string; Context::Open says what is missing on a
// machine without a GPU or driver, which the GPU tests print when they skip.
//
// Thread safety: a Context and its buffers belong to one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tierflow/core/status.h"

namespace tierflow::real::cuda {

class Context;

// Device memory from cudaMalloc, freed on destruction. These two copies are synchronous, on the
// context's compute stream (for set-up and tests); CopyAsync is the copy engines' kind.
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
  // The GPUs there are: Unavailable, naming the reason, where the driver cannot say.
  static StatusOr<int> Count();
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int device() const { return device_; }  // the CUDA device index
  const std::string& device_name() const { return name_; }
  int compute_capability() const { return capability_; }  // e.g. 90 for sm_90

  StatusOr<DeviceBuffer> Allocate(int64_t bytes) const;
  Status Synchronize() const;

  // A device buffer of at least `bytes` that the ops use for their temporaries (attention's
  // bf16 probabilities and score gradients, reduction partials): grown on demand, after the
  // stream has drained, and reused by the next op on the stream.
  StatusOr<void*> Scratch(int64_t bytes) const;

  // The three streams of DESIGN.md's gpu0 resources: compute (ops and cuBLAS), h2d and d2h (the
  // copy engines). All non-blocking; ordering between them is by events.
  void* stream() const { return stream_; }  // cudaStream_t of gpu0.compute
  void* h2d_stream() const { return h2d_; }
  void* d2h_stream() const { return d2h_; }
  void* cublas() const { return cublas_; }  // cublasHandle_t, bound to stream()

 private:
  Context() = default;
  int device_ = 0;
  int capability_ = 0;
  std::string name_;
  void* stream_ = nullptr;  // cudaStream_t
  void* h2d_ = nullptr;
  void* d2h_ = nullptr;
  void* cublas_ = nullptr;  // cublasHandle_t
  mutable DeviceBuffer scratch_;
};

enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };

// An asynchronous copy of `bytes` on `stream` (a cudaStream_t). From page-locked host memory
// (cudaMallocHost, or registered as the pinned arena is) it is a DMA that overlaps compute; from
// pageable memory the driver stages it through its own pinned buffer and the call may return
// only when the host side has been read. Device to device runs at memory speed.
Status CopyAsync(void* dst, const void* src, int64_t bytes, CopyKind kind, void* stream);

// Page-locked host memory from cudaMallocHost (the copy probe's "pinned" buffers).
class PinnedHostBuffer {
 public:
  static StatusOr<PinnedHostBuffer> Allocate(int64_t bytes);
  PinnedHostBuffer() = default;
  PinnedHostBuffer(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer& operator=(PinnedHostBuffer&& other) noexcept;
  ~PinnedHostBuffer();
  void* data() const { return data_; }
  int64_t size_bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  int64_t bytes_ = 0;
};

// GPU-side times of work on any of the context's streams, as trace records want them: seconds
// since the timeline's origin, an event recorded when it was started. Begin/End record an event
// pair around a task on its stream; Times waits for the pair and reads the GPU's clock
// (cudaEventElapsedTime: float milliseconds, about half a microsecond of resolution near the
// origin, 0.1 ms after 1000 s, so a long run starts a timeline per iteration). Events are pooled
// and reused once their times have been read.
class Timeline {
 public:
  // Records the origin on the context's compute stream.
  static StatusOr<std::unique_ptr<Timeline>> Start(const Context& ctx);
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // A started task: an index into the timeline's event pairs.
  StatusOr<int64_t> Begin(void* stream);
  Status End(int64_t task, void* stream);
  // {start, end} in seconds since the origin; waits for the task's end event. Frees the pair.
  StatusOr<std::pair<double, double>> Times(int64_t task);

 private:
  Timeline() = default;
  StatusOr<int64_t> Pair();
  void* origin_ = nullptr;             // cudaEvent_t
  std::vector<void*> start_, end_;     // cudaEvent_t per pair
  std::vector<bool> pending_;          // begun and not yet read
  std::vector<int64_t> free_;          // pairs whose times were read
};

}  // namespace tierflow::real::cuda
