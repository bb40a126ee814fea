// What one training step is: the batch, the micro-steps, the data parallelism and the training
// math's settings (precision, loss scaling, clipping). A scenario's `training:` section
// (docs/scenario-format.md) and a schedule file's typed `training` section hold it.
//
// Thread safety: values and pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "tierflow/core/status.h"

namespace YAML {
class Node;
}

namespace tierflow::models {

// The most micro-steps per iteration a scenario may ask for (training.gradient_accumulation_steps).
inline constexpr int64_t kMaxMicroSteps = 1024;

// The AdamW update a run takes (torch.optim.AdamW): training.optimizer. Weight decay spares the
// norms' weights (and biases), as Hugging Face's Trainer groups the parameters by default.
struct OptimizerSetup {
  double lr = 1e-3;  // the peak learning rate (tierflow run --lr overrides it)
  double beta1 = 0.9, beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0;
  bool operator==(const OptimizerSetup&) const = default;
};

// The learning rate over the updates, by Hugging Face's names (get_scheduler): `constant`, or a
// linear warm-up from 0 over warmup_steps then `constant`, `linear` decay to min_lr_ratio x lr at
// total_steps, or `cosine` (half a cosine) down to it; and by DeepSpeed's (lr_schedules.py, as its
// engine steps them: after each update, from iteration -1): `WarmupLR` (a `log` or `linear`
// warm-up from min_lr_ratio x lr to lr over max(2, warmup_steps), then lr), `WarmupDecayLR` (the
// same, then linear decay back to min_lr_ratio x lr at total_steps), `WarmupCosineLR` (a warm-up
// from warmup_min_ratio x lr, then a cosine to min_lr_ratio x lr at total_steps).
// training.lr_schedule.
struct LrScheduleSetup {
  std::string type = "constant";  // constant | linear | cosine | WarmupLR | WarmupDecayLR | WarmupCosineLR
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;        // linear and cosine: required, > warmup_steps; DeepSpeed's decays: >= 1
  double min_lr_ratio = 0;        // where the decay ends (DeepSpeed's WarmupLR and WarmupDecayLR: where the warm-up starts too)
  std::string warmup_type = "linear";  // DeepSpeed's: log (its default) or linear
  double warmup_min_ratio = 0;         // WarmupCosineLR: where its warm-up starts, over lr
  bool deepspeed() const { return type == "WarmupLR" || type == "WarmupDecayLR" || type == "WarmupCosineLR"; }
  bool operator==(const LrScheduleSetup&) const = default;
};

struct TrainingSetup {
  int64_t micro_batch_size = 1;          // sequences per rank per micro-step
  int64_t sequence_length = 4096;
  int64_t gradient_accumulation_steps = 1;  // 1 .. kMaxMicroSteps
  int32_t data_parallel = 0;             // ranks; 0 = every GPU of the node
  bool activation_checkpointing = true;
  std::string dtype = "bf16";            // parameters and gradients on the GPU
  // "dynamic": DeepSpeed's fp16 loss scaler (initial 2^16; an overflow skips the step and halves
  // the scale). "none": gradients unscaled and every step taken, as DeepSpeed's bf16 optimizer.
  // Absent: "dynamic" for fp16, "none" for bf16.
  std::string loss_scaling = "none";
  // Clip the gradients to this global L2 norm before the update (torch's clip_grad_norm_); 0 = off.
  double gradient_clipping = 0;
  OptimizerSetup optimizer;
  LrScheduleSetup lr_schedule;
  // Seeds the initial weights (when not read from a file) and the batches' order; absent (-1):
  // tierflow's defaults (1234 for the weights, 1 for the batches).
  int64_t seed = -1;
  // Whether the update of a sub-group must wait for the global gradient check (the overflow check
  // and the norm over every gradient): true when the loss scale is dynamic or clipping is on.
  bool UpdateNeedsGlobalCheck() const { return loss_scaling == "dynamic" || gradient_clipping > 0; }
  bool operator==(const TrainingSetup&) const = default;
};

// The `training` map (null: every default). Strict: unknown keys, non-integers, values out of
// range are InvalidArgument naming "training.<key>".
StatusOr<TrainingSetup> TrainingFromYaml(const YAML::Node& node);
// Every field, as TrainingFromYaml reads it back to the same value (17 significant digits).
std::string TrainingToYaml(const TrainingSetup& t);
// The same fields as the JSON object of a schedule's training section: what YamlToJson makes of
// TrainingToYaml's text, written directly.
std::string TrainingToJson(const TrainingSetup& t);

}  // namespace tierflow::models
