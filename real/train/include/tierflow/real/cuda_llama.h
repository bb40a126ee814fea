// One rank's Llama training steps on the GPU, organised as the schedule runs them and as
// Trainer runs them on the CPU: one step per models::Layers() unit (0 the embedding,
// 1..L the decoders, L+1 the head), each given its parameters as a device pointer per tensor of
// the layer (bf16, wherever each lies: the units' gathered buffers, a resident home, or one slice
// of a flat ParamLayout buffer) and its gradient as the layer's fp32 slice.
// Activations are bf16, gradients of activations fp32 (rounded to bf16 where a GEMM reads them);
// activation checkpointing is at layer boundaries (a decoder's backward recomputes its forward
// from its saved input), as the CPU's DecoderBackward does. The math is llama.h's, op by op
// through cuda_ops.h.
//
// The executor's CUDA device runs it (docs/executor.md "GPU back-end"). Untied embeddings only,
// as `tierflow run`.
//
// Thread safety: as the Context.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tierflow/core/status.h"
#include "tierflow/real/cuda_compute.h"
#include "tierflow/real/llama.h"

namespace tierflow::real::cuda {

class LlamaSteps {
 public:
  // Requires ValidateLlamaSpec(spec), untied embeddings, batch >= 1, 1 <= seq <= max_seq.
  // Allocates every activation and scratch buffer of one (batch, seq) on the context's GPU.
  static StatusOr<std::unique_ptr<LlamaSteps>> Create(const Context& ctx, const LlamaSpec& spec, int64_t batch,
                                                      int64_t seq);
  ~LlamaSteps();

  const ParamLayout& layout() const { return layout_; }
  int64_t layers() const { return static_cast<int64_t>(layout_.layer_offset.size()); }

  // This iteration's tokens and targets: host arrays of batch * seq; a token in [0, vocab), a
  // target in [0, vocab) or negative (ignored). InvalidArgument names the first bad entry.
  Status SetBatch(const int32_t* tokens, const int32_t* targets);

  // A layer's parameters: a device pointer to each of its tensors, in ParamLayout::LayerTensors
  // order (LayerTensorPointers cuts them from one slice).
  using LayerParams = std::vector<const uint16_t*>;

  // Forward of `layer` from the previous layer's output; the head's sets loss() (unscaled).
  // InvalidArgument for a layer out of range, or params that are not one non-null pointer per
  // tensor of the layer.
  Status Forward(int64_t layer, const LayerParams& params);
  double loss() const { return loss_; }
  // Backward of `layer` from the gradient the next layer left: grads (the layer's fp32 slice) is
  // OVERWRITTEN with d(loss * loss_scale)/d params. The head's backward starts the chain.
  Status Backward(int64_t layer, const LayerParams& params, float* grads, float loss_scale);

 private:
  LlamaSteps(const Context& ctx, const LlamaSpec& spec, int64_t batch, int64_t seq);
  Status Allocate();
  Status CheckParams(int64_t layer, const LayerParams& params) const;
  // Recomputes decoder `layer`'s forward into the workspace, and writes its output when
  // `x_out` is not null.
  Status DecoderForward(int64_t layer, const DecoderParams<const uint16_t*>& w, uint16_t* x_out);
  // params: the final norm's weight, then the LM head's.
  Status HeadForward(const LayerParams& params, uint16_t* dlogits, float loss_scale);

  const Context& ctx_;
  LlamaSpec spec_;
  ParamLayout layout_;
  int64_t batch_, seq_, rows_;
  double loss_ = 0;
  std::unique_ptr<struct LlamaBuffers> b_;
};

}  // namespace tierflow::real::cuda
