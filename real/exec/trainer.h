// The training math of one rank as the executor and the in-memory reference both run it: the
// emulated GPU's state (bf16 parameters, fp32 working weights and gradients), a layer's forward
// and backward in models::Layers() order, and the per-iteration activations. The emulated GPU's
// state is allocated by EmulateGpu() (the CPU compute device's), so a run whose gpu0 is a real
// GPU holds none of it.
//
// Parameters are computed on in bf16 (widened to fp32 per layer, as mixed-precision training
// does); gradients are fp32, scaled by the loss scale. Thread safety: one caller per layer step;
// distinct iterations use distinct IterationState.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tierflow/real/cpu_threads.h"
#include "tierflow/real/executor.h"
#include "tierflow/real/llama.h"

namespace tierflow::real::exec {

struct IterationState {
  int64_t iteration = -1;
  std::vector<int32_t> tokens, targets;
  std::vector<std::vector<float>> boundary;  // layer inputs: embedding output, then each decoder's
  std::vector<float> d_x;
  double loss = 0;
  float loss_scale = 1;
};

class Trainer {
 public:
  explicit Trainer(const TrainConfig& config);

  const LlamaSpec& spec() const { return config_.spec; }
  const ParamLayout& layout() const { return layout_; }
  int64_t layer_count() const { return static_cast<int64_t>(layout_.layer_offset.size()); }
  int64_t LayerBegin(int64_t layer) const { return layout_.layer_offset[static_cast<size_t>(layer)]; }
  int64_t LayerElements(int64_t layer) const { return layout_.layer_elements[static_cast<size_t>(layer)]; }

  // The initial fp32 parameters (InitLlamaParams with config.init_seed).
  std::vector<float> InitialMaster() const;
  // Allocates the emulated GPU's state (dev_p16, dev_grad, the fp32 working weights and the
  // workspace, about 10 bytes per parameter); Forward and Backward need it. Idempotent.
  void EmulateGpu();
  void PrepareIteration(IterationState* it) const;  // sizes the activations

  // models::Layers() index `layer`: 0 embedding, 1..L decoders, L+1 head. Forward of the head
  // sets it->loss. Backward overwrites dev_grad over the layer's range.
  void Forward(int64_t layer, IterationState* it, CpuThreads& threads);
  void Backward(int64_t layer, IterationState* it, CpuThreads& threads);

  std::vector<uint16_t> dev_p16;  // the emulated GPU's bf16 parameters (EmulateGpu)
  std::vector<float> dev_grad;    // the emulated GPU's fp32 gradients, scaled (EmulateGpu)

 private:
  void Widen(int64_t layer, CpuThreads& threads);
  const float* LmHead() const;

  TrainConfig config_;
  ParamLayout layout_;
  std::vector<float> w32_;  // fp32 working weights, widened from dev_p16 per layer
  std::unique_ptr<LlamaWorkspace<float>> ws_;
};

}  // namespace tierflow::real::exec
