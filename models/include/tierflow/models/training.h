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

}  // namespace tierflow::models
