// The training math of one rank as the executor and the in-memory reference both run it: the
// emulated GPU's state (bf16 parameters, fp32 working weights and gradients), a layer's forward
// and backward in models::Layers() order, and the per-iteration activations. The emulated GPU's
// working state is allocated by EmulateGpu() (the CPU compute device's), so a run whose gpu0 is a
// real GPU holds none of it; its parameters and gradients live in the blocks the compute device
// allocates (compute_device.h).
//
// Parameters are computed on in bf16 (widened to fp32 per layer, as mixed-precision training
// does); gradients are fp32, scaled by the loss scale. Thread safety: one caller per layer step;
// distinct iterations use distinct IterationState.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tierflow/core/status.h"
#include "tierflow/real/cpu_threads.h"
#include "tierflow/real/train_config.h"
#include "tierflow/real/llama.h"

namespace tierflow::real {

// Elements [begin, begin + n) of the ParamLayout's bf16 parameters, at `data` in gpu0 memory: a
// layer step is given its parameters as such ranges, in order and covering the layer, wherever
// the schedule put them (a gathered buffer per unit, the GPU-resident home).
struct ParamRange {
  int64_t begin = 0, n = 0;
  const void* data = nullptr;
};

// InvalidArgument unless `params` are consecutive ranges, each with data, covering
// [begin, begin + n) exactly.
Status CheckLayerParams(const std::vector<ParamRange>& params, int64_t begin, int64_t n);

// Where each tensor of `layer` (ParamLayout::LayerTensors order) starts within `params`, when
// every one lies whole in one range (the schedule's units are tensors, so a step finds each in
// its unit's gathered buffer or the resident home); empty when a tensor straddles two ranges.
// Requires CheckLayerParams(params, the layer's begin, its elements).
std::vector<const void*> TensorStarts(const ParamLayout& layout, int64_t layer, const std::vector<ParamRange>& params);

struct IterationState {
  int64_t iteration = -1;
  int32_t micro_step = -1;   // whose batch tokens and targets hold
  int32_t micro_steps = 1;   // per iteration (gradient accumulation)
  int32_t ranks = 1;         // data-parallel ranks whose batches the iteration's gradient averages
  std::vector<int32_t> tokens, targets;
  std::vector<std::vector<float>> boundary;  // layer inputs: embedding output, then each decoder's
  std::vector<float> d_x;
  double loss = 0;           // the micro-step's (the head's forward sets it)
  double loss_sum = 0;       // over the iteration's micro-steps so far
  float loss_scale = 1;
  // What the head's backward scales d(loss) by: the iteration's loss is the mean of its
  // micro-steps' over its ranks (DeepSpeed divides each micro-step's loss by
  // gradient_accumulation_steps and the reduced gradients by the data-parallel world size; the
  // two divisions are folded into the seed, exact for powers of two).
  float BackwardSeed() const { return loss_scale / static_cast<float>(micro_steps * ranks); }
};

class Trainer {
 public:
  explicit Trainer(const TrainConfig& config);

  const LlamaSpec& spec() const { return config_.spec; }
  const ParamLayout& layout() const { return layout_; }
  int64_t layer_count() const { return static_cast<int64_t>(layout_.layer_offset.size()); }
  int64_t LayerBegin(int64_t layer) const { return layout_.layer_offset[static_cast<size_t>(layer)]; }
  int64_t LayerElements(int64_t layer) const { return layout_.layer_elements[static_cast<size_t>(layer)]; }
  // Whether elements [begin, begin + n) lie in `layer`.
  bool InLayer(int64_t layer, int64_t begin, int64_t n) const {
    return layer >= 0 && layer < layer_count() && begin >= LayerBegin(layer) && begin + n <= LayerBegin(layer) + LayerElements(layer);
  }
  // With tied embeddings the head computes with the embedding table (layer 0) too.
  bool TiedHead(int64_t layer) const { return config_.spec.config.tied_embeddings && layer == layer_count() - 1; }
  // What a layer step reads (StepParams) and the gradients its backward writes: the layer's
  // elements, and for the tied head the table's after them (its part of the table's gradient).
  int64_t StepGradElements(int64_t layer) const { return LayerElements(layer) + (TiedHead(layer) ? LayerElements(0) : 0); }
  // InvalidArgument unless `params` cover the layer in order (CheckLayerParams), followed for the
  // tied head by ranges covering the embedding table.
  Status CheckStepParams(int64_t layer, const std::vector<ParamRange>& params) const;

  // The initial fp32 parameters: config.initial_weights, else InitLlamaParams with config.init_seed.
  std::vector<float> InitialMaster() const;
  // Allocates the emulated GPU's working state (the fp32 working weights and the workspace,
  // about 4 bytes per parameter); Forward and Backward need it. Idempotent.
  void EmulateGpu();
  void PrepareIteration(IterationState* it) const;  // sizes the activations

  // models::Layers() index `layer`: 0 embedding, 1..L decoders, L+1 head, its bf16 parameters
  // read from `params` (CheckStepParams). Forward of the head sets it->loss. Backward overwrites
  // the step's StepGradElements fp32 gradients, scaled and rounded to bf16 precision (the
  // gradients of a bf16 model), at `grads`.
  void Forward(int64_t layer, const std::vector<ParamRange>& params, IterationState* it, CpuThreads& threads);
  void Backward(int64_t layer, const std::vector<ParamRange>& params, float* grads, IterationState* it,
                CpuThreads& threads);

 private:
  // Widens the step's parameters into w32_, unless `iteration` (>= 0) is the one the layer's were
  // last widened in: a layer's parameters cannot change between its forward and its backward
  // (every micro-step and rank of an iteration computes with the same weights, the update comes
  // after), so the backward and later micro-steps reuse what the first forward widened.
  void Widen(int64_t layer, const std::vector<ParamRange>& params, int64_t iteration, CpuThreads& threads);
  const float* LmHead() const;

  TrainConfig config_;
  ParamLayout layout_;
  std::vector<float> w32_;  // fp32 working weights, widened from the layer's parameters per step
  std::vector<int64_t> widened_in_;  // per layer: the iteration its w32_ was widened in, or -1
  std::unique_ptr<LlamaWorkspace<float>> ws_;
};

}  // namespace tierflow::real
