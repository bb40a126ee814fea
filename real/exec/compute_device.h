// Where a run's gpu0 lives: the device whose bf16 parameters the h2d tasks fill, whose compute
// tasks run the layer steps, and whose fp32 gradients the d2h tasks take off (checked for
// overflow and squared-norm'd on the way, as DeepSpeed does on the GPU). The executor calls only
// this, so the same schedule runs on either:
//   cpu   gpu0 emulated in host memory: exec::Trainer's fp32 math on bf16 parameters
//   cuda  GPU 0: cuda::LlamaSteps (bf16 activations, cuBLAS and our kernels), built only with the
//         CUDA toolkit (TIERFLOW_EXEC_CUDA)
//
// Thread safety: the executor calls each method from the worker thread of the task's resource;
// implementations serialise what must be (the CUDA device uses one lock for its compute stream).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tierflow/core/status.h"
#include "tierflow/real/adamw.h"
#include "tierflow/real/cpu_threads.h"
#include "tierflow/real/executor.h"
#include "trainer.h"

namespace tierflow::real::exec {

// Where a device times its work on the GPU: the span of one call's work there, in
// MonotonicSeconds() (docs/trace-format.md "GPU-side times"). end_s is 0 when there is none.
struct DeviceSpan {
  double start_s = 0, end_s = 0;
  bool empty() const { return end_s == 0; }
  // The span covering both (a task of several calls).
  void Merge(const DeviceSpan& o) {
    if (o.empty()) return;
    if (empty()) {
      *this = o;
      return;
    }
    start_s = std::min(start_s, o.start_s);
    end_s = std::max(end_s, o.end_s);
  }
};

class ComputeDevice {
 public:
  virtual ~ComputeDevice() = default;
  virtual std::string name() const = 0;
  // Host memory that h2d and d2h will use (the executor's buffers): page-locked where the device
  // copies by DMA (cudaHostRegister), nothing on the CPU. Unregister before freeing it.
  virtual Status RegisterHost(void* /*p*/, int64_t /*bytes*/) { return Status::Ok(); }
  virtual void UnregisterHost(void* /*p*/) {}
  // The whole model's bf16 parameters, before the first task.
  virtual Status LoadParams(const std::vector<uint16_t>& p16) = 0;
  // The calls below return when their work is done. Where the device times that work on the GPU
  // it sets *span (when span is not null); the CPU device leaves it empty.
  //
  // n bf16 parameters from host memory into [element_offset, element_offset + n).
  virtual Status H2D(int64_t element_offset, const void* src, int64_t n, DeviceSpan* span) = 0;
  // n fp32 gradients from element_offset into host memory, as fp32 or bf16; returns the overflow
  // check and squared norm of gradient * grad_scale.
  virtual StatusOr<cpu::GradCheck> D2HGrad(void* dst, int64_t element_offset, int64_t n, bool to_bf16,
                                           float grad_scale, CpuThreads& threads, DeviceSpan* span) = 0;
  // models::Layers() index; as Trainer::Forward / Backward (the head's forward sets it->loss).
  virtual Status Forward(int64_t layer, IterationState* it, CpuThreads& threads, DeviceSpan* span) = 0;
  virtual Status Backward(int64_t layer, IterationState* it, CpuThreads& threads, DeviceSpan* span) = 0;
};

// gpu0 emulated in host memory, on `trainer` (which must outlive it).
std::unique_ptr<ComputeDevice> MakeCpuDevice(Trainer& trainer);

// The device RunOptions::compute names: "cpu", or "cuda" (GPU 0) where the build has CUDA.
// InvalidArgument for an unknown name, Unavailable (with the reason) for a build without CUDA or
// a machine without a usable GPU.
StatusOr<std::unique_ptr<ComputeDevice>> MakeComputeDevice(const std::string& name, const TrainConfig& config,
                                                           Trainer& trainer);

}  // namespace tierflow::real::exec
