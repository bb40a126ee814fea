// What one run trains — the model, the batch, the optimizer and the training math's settings
// (loss scaling, clipping), the data and the initial weights' seed — and the device memory it
// held. The executor, the in-memory reference, the compute devices and the compute probe all
// take it (executor.h).
// Thread safety: a value.
#pragma once

#include <cstdint>
#include <vector>

#include "tierflow/models/training.h"
#include "tierflow/real/adamw.h"
#include "tierflow/real/llama.h"

namespace tierflow::real {

// The most bytes of a device's memory a run held in blocks at once (allocated), and the most it
// kept, in use or for reuse (reserved), as PyTorch's caching allocator counts them: what a
// compute device reports and RunResult carries.
struct MemoryPeak {
  int64_t allocated = 0, reserved = 0;
};

struct TrainConfig {
  LlamaSpec spec;
  int64_t batch = 1;                // sequences per micro-step
  int64_t seq = 128;
  // Micro-steps per optimizer step, each forward and backward on its own batch, their gradients
  // summed in bf16 (cpu::AccumulateBf16) and their losses averaged. Scenario
  // training.gradient_accumulation_steps.
  int32_t micro_steps = 1;
  // Data-parallel ranks (training.data_parallel): each micro-step trains one batch per rank, the
  // next `ranks` batches of the loader, rank r the r-th; their gradients are summed in rank
  // order in fp32 and rounded to bf16 (as the reduce-scatter of real/collective sums), the
  // backward of each starting from loss_scale / (micro_steps x ranks), so that the iteration's
  // gradient is the mean over its ranks x micro_steps batches, as its loss is.
  int32_t ranks = 1;
  // Scenario training.optimizer (lr: the peak; `tierflow run --lr` overrides it). The weight decay
  // spares vectors (norm weights, biases): RankSpace::DecayRuns.
  AdamWConfig adam{.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.0f};
  // Scenario training.lr_schedule: the rate of each update (LearningRate).
  models::LrScheduleSetup lr_schedule;
  // Dynamic loss scaling (fp16: an overflow skips the step and halves the scale) from
  // initial_loss_scale, or none (bf16: scale 1, every step taken). Scenario training.loss_scaling.
  bool dynamic_loss_scaling = false;
  float initial_loss_scale = 65536.0f;
  // Clip the gradients to this global L2 norm before each update; 0 = off.
  // Scenario training.gradient_clipping.
  double gradient_clipping = 0;
  uint64_t init_seed = 1234;        // InitLlamaParams
  // The initial fp32 parameters in the layout's order (MakeParamLayout: a safetensors file read
  // with LoadLlamaWeights, `tierflow run --init`); empty = InitLlamaParams with init_seed.
  std::vector<float> initial_weights;
  uint64_t data_seed = 1;           // TokenLoader's shuffle
  std::vector<int32_t> tokens;      // the training corpus, already tokenized
  int threads = 0;                  // compute threads, 0 = the hardware's
};

// What a scenario's model and training section say of a run (the rest — the corpus, initial
// weights, threads — is the caller's): the model, batch, sequence, micro-steps, ranks (at least
// 1), loss scaling, clipping, AdamW and its schedule, and the seeds when training.seed is set.
TrainConfig TrainConfigFor(const models::LlmConfig& model, const models::TrainingSetup& training);

// The learning rate of AdamW step `step` (1-based: the updates taken so far, this one included):
// lr x the factor of Hugging Face's schedule at scheduler step step - 1 (its Trainer steps the
// scheduler after each update, so the first update runs at factor(0): 0 under a warm-up), or of
// DeepSpeed's at iteration step - 2 (its engine also steps after each update, but its schedulers
// start at iteration -1). A skipped update (an fp16 overflow) does not advance it, as neither
// steps its scheduler then.
float LearningRate(const models::LrScheduleSetup& schedule, float lr, int64_t step);

}  // namespace tierflow::real
