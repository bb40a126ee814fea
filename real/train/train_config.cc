// TrainConfigFor and LearningRate (train_config.h). LearningRate is Hugging Face's learning-rate
// schedules (transformers' optimization.py: get_constant_schedule_with_warmup,
// get_linear_schedule_with_warmup, get_cosine_schedule_with_warmup with num_cycles 0.5, and their
// min_lr_rate form) and DeepSpeed's (deepspeed/runtime/lr_schedules.py: WarmupLR, WarmupDecayLR,
// WarmupCosineLR).
#include <algorithm>
#include <cmath>
#include <numbers>

#include "tierflow/real/train_config.h"

namespace tierflow::real {

TrainConfig TrainConfigFor(const models::LlmConfig& model, const models::TrainingSetup& t) {
  TrainConfig c;
  c.spec.config = model;
  c.batch = t.micro_batch_size;
  c.seq = t.sequence_length;
  c.micro_steps = static_cast<int32_t>(t.gradient_accumulation_steps);
  c.ranks = std::max<int32_t>(1, t.data_parallel);
  c.dynamic_loss_scaling = t.loss_scaling == "dynamic";
  c.gradient_clipping = t.gradient_clipping;
  const models::OptimizerSetup& o = t.optimizer;
  c.adam = {.lr = static_cast<float>(o.lr), .beta1 = static_cast<float>(o.beta1), .beta2 = static_cast<float>(o.beta2),
            .eps = static_cast<float>(o.eps), .weight_decay = static_cast<float>(o.weight_decay)};
  c.lr_schedule = t.lr_schedule;
  if (t.seed >= 0) c.init_seed = c.data_seed = static_cast<uint64_t>(t.seed);
  return c;
}

namespace {

// DeepSpeed's schedules at the iteration its engine has reached before update `step` (1-based): it
// steps the scheduler after each update, and the scheduler starts at iteration -1.
double DeepSpeedFactor(const models::LrScheduleSetup& s, int64_t step) {
  const int64_t it = step - 2;
  const double warmup = static_cast<double>(std::max<int64_t>(2, s.warmup_steps));
  const double at = static_cast<double>(it);
  if (s.type == "WarmupCosineLR" && it < 0) return 0;  // get_lr before the first step
  if (at < warmup) {
    const double gamma = it < 0 ? 0 : s.warmup_type == "log" ? std::log(at + 1) / std::log(warmup) : at / warmup;
    const double start = s.type == "WarmupCosineLR" ? s.warmup_min_ratio : s.min_lr_ratio;
    return start + (1 - start) * gamma;
  }
  const double total = static_cast<double>(s.total_steps);
  if (s.type == "WarmupDecayLR") {
    const double gamma = std::max(0.0, (total - at) / std::max(1.0, total - warmup));
    return s.min_lr_ratio + (1 - s.min_lr_ratio) * gamma;
  }
  if (s.type == "WarmupCosineLR") {
    const double progress = std::min(1.0, (at - warmup + 1) / std::max(1.0, total - warmup));
    return std::max(0.0, s.min_lr_ratio + (1 - s.min_lr_ratio) * (1 + std::cos(std::numbers::pi * progress)) / 2);
  }
  return 1;  // WarmupLR after its warm-up
}

}  // namespace

float LearningRate(const models::LrScheduleSetup& s, float lr, int64_t step) {
  if (s.deepspeed()) return static_cast<float>(static_cast<double>(lr) * DeepSpeedFactor(s, step));
  const double at = static_cast<double>(std::max<int64_t>(step - 1, 0));  // the scheduler's step
  const double warmup = static_cast<double>(s.warmup_steps);
  double factor = 1;
  if (at < warmup) {
    factor = at / std::max(1.0, warmup);
  } else if (s.type != "constant") {
    const double total = static_cast<double>(s.total_steps);
    const double progress = std::min(1.0, (at - warmup) / std::max(1.0, total - warmup));
    const double shape = s.type == "linear" ? 1 - progress : 0.5 * (1 + std::cos(std::numbers::pi * progress));
    factor = s.min_lr_ratio + (1 - s.min_lr_ratio) * shape;
  }
  return static_cast<float>(static_cast<double>(lr) * factor);
}

}  // namespace tierflow::real
