// Where a run's gpu0 lives: the device whose bf16 parameters the h2d tasks fill, whose compute
// tasks run the layer steps, and whose fp32 gradients the d2h tasks take off (checked for
// overflow and squared-norm'd on the way, as DeepSpeed does on the GPU). The executor calls only
// this, so the same schedule runs on either:
//   cpu   gpu0 emulated in host memory: Trainer's fp32 math on bf16 parameters
//   cuda  GPU 0: cuda::LlamaSteps (bf16 activations, cuBLAS and our kernels), built only with the
//         CUDA toolkit (device/cuda_device.cc; without it, device/cuda_device_unavailable.cc)
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
#include "tierflow/real/train_config.h"
#include "tierflow/real/trainer.h"

namespace tierflow::real {

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

// The gradient an update on the GPU reads, in gpu0 memory: fp32, or bf16 (exactly one is set).
struct GradIn {
  const float* fp32 = nullptr;
  const uint16_t* bf16 = nullptr;
};

class ComputeDevice {
 public:
  virtual ~ComputeDevice() = default;
  virtual std::string name() const = 0;
  // Host memory that h2d and d2h will use (the executor's buffers): page-locked where the device
  // copies by DMA (cudaHostRegister), nothing on the CPU. Unregister before freeing it.
  virtual Status RegisterHost(void* /*p*/, int64_t /*bytes*/) { return Status::Ok(); }
  virtual void UnregisterHost(void* /*p*/) {}
  // gpu0 memory: a block for one schedule buffer in a GPU pool (or the GPU-resident parameters).
  // ResourceExhausted, naming the bytes, when the device has no room. Free gives a block back
  // (the device may keep it for a later Allocate of the same size). Blocks are 256-byte aligned.
  virtual StatusOr<void*> Allocate(int64_t bytes) = 0;
  virtual void Free(void* block) = 0;
  // The most bytes Allocate's blocks held at once ("allocated"), and the most it kept in blocks,
  // in use or kept for reuse ("reserved"). The device's own working memory (activations,
  // workspace) is not counted.
  virtual MemoryPeak memory_peak() const = 0;
  // Keep at most `bytes` reserved where the blocks in use allow: kept blocks are freed before a
  // fresh block would pass it (the executor sets its GPU pools' capacity).
  virtual void LimitReserved(int64_t bytes) = 0;
  // The calls below return when their work is done. Where the device times that work on the GPU
  // it sets *span (when span is not null); the CPU device leaves it empty.
  //
  // `bytes` from host memory into gpu0 memory at dst.
  virtual Status H2D(void* dst, const void* src, int64_t bytes, DeviceSpan* span) = 0;
  // `bytes` from gpu0 memory at src into host memory at dst (optimizer states kept on the GPU,
  // read for a checkpoint or at the run's end).
  virtual Status D2H(void* dst, const void* src, int64_t bytes) = 0;
  // `bytes` from gpu0 memory at src to gpu0 memory at dst (the ranges do not overlap): the
  // packing of a collective's parts on the GPU (NCCL's, ops/collective_op.cc).
  virtual Status D2D(void* dst, const void* src, int64_t bytes) = 0;
  // In place: n fp32 values of gpu0 memory rounded to bf16 precision (cpu::RoundToBf16).
  virtual Status RoundToBf16(float* x, int64_t n, CpuThreads& threads) = 0;
  // The CUDA device index of a GPU; -1 for gpu0 emulated in host memory.
  virtual int gpu() const { return -1; }
  // n fp32 gradients at src (gpu0 memory) into host memory, as fp32 or bf16; returns the overflow
  // check and squared norm of gradient * grad_scale.
  virtual StatusOr<cpu::GradCheck> D2HGrad(void* dst, const float* src, int64_t n, bool to_bf16, float grad_scale,
                                           CpuThreads& threads, DeviceSpan* span) = 0;
  // Gradient accumulation: n fp32 gradients at src (gpu0 memory) added into the n bf16
  // gradients at dst (host memory), as cpu::AccumulateBf16 (each sum rounded once to bf16, the
  // loss scale kept as D2HGrad keeps it); returns the check of the sums times grad_scale. The
  // CPU reference's arithmetic, on either device.
  virtual StatusOr<cpu::GradCheck> D2HGradAccumulate(uint16_t* dst, const float* src, int64_t n, float grad_scale,
                                                     CpuThreads& threads, DeviceSpan* span) = 0;
  // models::Layers() index; as Trainer::Forward / Backward (the head's forward sets it->loss).
  // `params` covers the layer (and the tied head's embedding table: Trainer::CheckStepParams);
  // Backward OVERWRITES the step's fp32 gradients at `grads` (gpu0 memory,
  // Trainer::StepGradElements), rounded to bf16 precision: the gradients of a bf16 model, the
  // same values whether a schedule keeps them in fp32 or in bf16.
  virtual Status Forward(int64_t layer, const std::vector<ParamRange>& params, IterationState* it, CpuThreads& threads,
                         DeviceSpan* span) = 0;
  virtual Status Backward(int64_t layer, const std::vector<ParamRange>& params, float* grads, IterationState* it,
                          CpuThreads& threads, DeviceSpan* span) = 0;
  // One AdamW step (cpu::AdamW's bits) on n elements of gpu0 memory: param, m and v updated in
  // place from grad (fp32, or bf16 widened exactly as it is read: cpu::AdamW of the widened
  // values); bf16_param (gpu0 memory, or null) receives the rounded parameters. The update of a
  // sub-group whose optimizer states live on the GPU (docs/schedule-format.md).
  virtual Status AdamW(float* param, float* m, float* v, GradIn grad, uint16_t* bf16_param, int64_t n, int64_t step,
                       float grad_scale, const AdamWConfig& config, CpuThreads& threads, DeviceSpan* span) = 0;
  // dst[i] = bf16(src[i]) (Fp32ToBf16's rounding) on n elements of gpu0 memory: the rounded
  // parameters of an update on the GPU that an overflow skipped (the master unchanged).
  virtual Status Fp32ToBf16(uint16_t* dst, const float* src, int64_t n, CpuThreads& threads) = 0;
};

// The whole model in gpu0 memory, for runs without a schedule (RunInMemory, the compute probe):
// every bf16 parameter in one block, every fp32 gradient in another (with tied embeddings, the
// head's part of the table's gradient after them).
class WholeModel {
 public:
  static StatusOr<std::unique_ptr<WholeModel>> Create(ComputeDevice& device, const Trainer& trainer);
  ~WholeModel();
  WholeModel(const WholeModel&) = delete;
  WholeModel& operator=(const WholeModel&) = delete;

  // Every parameter, from host memory.
  Status Load(const std::vector<uint16_t>& p16);
  // A layer step's parameters (Trainer::CheckStepParams) and where its backward writes.
  std::vector<ParamRange> Layer(int64_t layer) const;
  float* LayerGrads(int64_t layer) const;
  const float* grads() const { return grads_; }
  // The tied head's part of the embedding table's gradient (after its backward); null untied.
  const float* tied_grads() const;

 private:
  WholeModel(ComputeDevice& device, const Trainer& trainer) : device_(device), trainer_(trainer), layout_(trainer.layout()) {}
  ComputeDevice& device_;
  const Trainer& trainer_;
  const ParamLayout& layout_;
  void* params_ = nullptr;
  float* grads_ = nullptr;
};

// gpu0 emulated in host memory, on `trainer` (which must outlive it).
std::unique_ptr<ComputeDevice> MakeCpuDevice(Trainer& trainer);

// The device RunOptions::compute names: "cpu", or "cuda" where the build has CUDA: the machine's
// GPU `local_rank` modulo their count (a rank's, by its place on the machine; GPU 0 with one
// rank), so that ranks beyond the GPUs share them. InvalidArgument for an unknown name,
// Unavailable (with the reason) for a build without CUDA or a machine without a usable GPU.
StatusOr<std::unique_ptr<ComputeDevice>> MakeComputeDevice(const std::string& name, const TrainConfig& config,
                                                           Trainer& trainer, int local_rank = 0);

}  // namespace tierflow::real
