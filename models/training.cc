#include "tierflow/models/training.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "tierflow/core/text.h"
#include "tierflow/models/yaml_tree.h"

namespace tierflow::models {
namespace {

std::string Q(const std::string& s) { return Quoted(s); }

// An integer in [1, most] (or [0, most]): core's one rule (ParseInteger), before it is converted.
StatusOr<int64_t> PositiveInt(const YAML::Node& node, const std::string& where, int64_t most, bool allow_zero = false) {
  if (!node.IsScalar()) return InvalidArgument(where + ": expected an integer");
  return ParseInteger(node.Scalar(), where, allow_zero ? 0 : 1, most);
}

// A finite number in [lo, hi] (ParseReal).
StatusOr<double> Number(const YAML::Node& node, const std::string& where, double lo, double hi) {
  if (!node.IsScalar()) return InvalidArgument(where + ": expected a number");
  return ParseReal(node.Scalar(), where, lo, hi);
}

Status ReadOptimizer(const YAML::Node& node, OptimizerSetup* o) {
  if (node.IsNull()) return Status::Ok();
  TF_RETURN_IF_ERROR(CheckYamlKeys(node, "training.optimizer", {"lr", "betas", "eps", "weight_decay"}));
  if (node["lr"]) {
    TF_ASSIGN_OR_RETURN(o->lr, Number(node["lr"], "training.optimizer.lr", 0, 1e3));
    if (!(o->lr > 0)) return InvalidArgument("training.optimizer.lr: " + Q(node["lr"].Scalar()) + " must be a finite number > 0");
  }
  if (node["betas"]) {
    const YAML::Node& b = node["betas"];
    if (!b.IsSequence() || b.size() != 2) return InvalidArgument("training.optimizer.betas: expected [beta1, beta2]");
    TF_ASSIGN_OR_RETURN(o->beta1, Number(b[0], "training.optimizer.betas[0]", 0, 1));
    TF_ASSIGN_OR_RETURN(o->beta2, Number(b[1], "training.optimizer.betas[1]", 0, 1));
    if (o->beta1 >= 1 || o->beta2 >= 1) return InvalidArgument("training.optimizer.betas: each must be in [0, 1)");
  }
  if (node["eps"]) {
    TF_ASSIGN_OR_RETURN(o->eps, Number(node["eps"], "training.optimizer.eps", 0, 1));
    if (!(o->eps > 0)) return InvalidArgument("training.optimizer.eps: " + Q(node["eps"].Scalar()) + " must be in (0, 1]");
  }
  if (node["weight_decay"]) {
    TF_ASSIGN_OR_RETURN(o->weight_decay, Number(node["weight_decay"], "training.optimizer.weight_decay", 0, 1));
  }
  return Status::Ok();
}

Status ReadLrSchedule(const YAML::Node& node, LrScheduleSetup* s) {
  if (node.IsNull()) return Status::Ok();
  TF_RETURN_IF_ERROR(CheckYamlKeys(node, "training.lr_schedule",
                                   {"type", "warmup_steps", "total_steps", "min_lr_ratio", "warmup_type", "warmup_min_ratio"}));
  if (node["type"]) {
    s->type = node["type"].as<std::string>();
    if (s->type != "constant" && s->type != "linear" && s->type != "cosine" && !s->deepspeed()) {
      return InvalidArgument("training.lr_schedule.type: " + Q(s->type) +
                             " (constant, linear or cosine; DeepSpeed's WarmupLR, WarmupDecayLR or WarmupCosineLR)");
    }
    if (s->deepspeed()) s->warmup_type = "log";  // DeepSpeed's default
  }
  if (node["warmup_steps"]) {
    TF_ASSIGN_OR_RETURN(s->warmup_steps, PositiveInt(node["warmup_steps"], "training.lr_schedule.warmup_steps", int64_t{1} << 40, true));
  }
  if (node["total_steps"]) {
    TF_ASSIGN_OR_RETURN(s->total_steps, PositiveInt(node["total_steps"], "training.lr_schedule.total_steps", int64_t{1} << 40, true));
  }
  if (node["min_lr_ratio"]) {
    TF_ASSIGN_OR_RETURN(s->min_lr_ratio, Number(node["min_lr_ratio"], "training.lr_schedule.min_lr_ratio", 0, 1));
  }
  for (const char* key : {"warmup_type", "warmup_min_ratio"}) {
    if (node[key] && !s->deepspeed()) {
      return InvalidArgument(std::string("training.lr_schedule.") + key + ": DeepSpeed's schedules take it (WarmupLR, WarmupDecayLR, "
                             "WarmupCosineLR), not " + Q(s->type) + " (its warm-up is linear from 0)");
    }
  }
  if (node["warmup_type"]) {
    s->warmup_type = node["warmup_type"].as<std::string>();
    if (s->warmup_type != "log" && s->warmup_type != "linear") {
      return InvalidArgument("training.lr_schedule.warmup_type: " + Q(s->warmup_type) + " (log or linear)");
    }
  }
  if (node["warmup_min_ratio"]) {
    TF_ASSIGN_OR_RETURN(s->warmup_min_ratio,
                        Number(node["warmup_min_ratio"], "training.lr_schedule.warmup_min_ratio", 0, 1));
  }
  if ((s->type == "linear" || s->type == "cosine") && s->total_steps <= s->warmup_steps) {
    return InvalidArgument("training.lr_schedule: a " + s->type + " schedule needs total_steps above warmup_steps (" +
                           std::to_string(s->total_steps) + " <= " + std::to_string(s->warmup_steps) + ")");
  }
  if ((s->type == "WarmupDecayLR" || s->type == "WarmupCosineLR") && s->total_steps < 1) {
    return InvalidArgument("training.lr_schedule: " + s->type + " needs total_steps (DeepSpeed's total_num_steps)");
  }
  return Status::Ok();
}

StatusOr<bool> Boolean(const YAML::Node& node, const std::string& where) {
  try {
    return node.as<bool>();
  } catch (const YAML::Exception&) {
    return InvalidArgument(where + ": " + Q(node.IsScalar() ? node.Scalar() : "?") + " is not true or false");
  }
}

}  // namespace

StatusOr<TrainingSetup> TrainingFromYaml(const YAML::Node& node) {
  TrainingSetup t;
  if (!node.IsDefined() || node.IsNull()) return t;
  TF_RETURN_IF_ERROR(CheckYamlKeys(node, "training",
                                   {"micro_batch_size", "sequence_length", "gradient_accumulation_steps", "data_parallel",
                                    "activation_checkpointing", "dtype", "loss_scaling", "gradient_clipping", "optimizer",
                                    "lr_schedule", "seed"}));
  try {
    if (node["micro_batch_size"]) {
      TF_ASSIGN_OR_RETURN(t.micro_batch_size, PositiveInt(node["micro_batch_size"], "training.micro_batch_size", int64_t{1} << 20));
    }
    if (node["sequence_length"]) {
      TF_ASSIGN_OR_RETURN(t.sequence_length, PositiveInt(node["sequence_length"], "training.sequence_length", int64_t{1} << 24));
    }
    if (node["gradient_accumulation_steps"]) {
      // Every micro-step is its own forward and backward in the schedule's task graph.
      TF_ASSIGN_OR_RETURN(t.gradient_accumulation_steps,
                          PositiveInt(node["gradient_accumulation_steps"], "training.gradient_accumulation_steps", kMaxMicroSteps));
    }
    if (node["data_parallel"]) {
      TF_ASSIGN_OR_RETURN(int64_t dp, PositiveInt(node["data_parallel"], "training.data_parallel", int64_t{1} << 20, true));
      t.data_parallel = static_cast<int32_t>(dp);
    }
    if (node["activation_checkpointing"]) {
      TF_ASSIGN_OR_RETURN(t.activation_checkpointing, Boolean(node["activation_checkpointing"], "training.activation_checkpointing"));
    }
    if (node["dtype"]) {
      t.dtype = node["dtype"].as<std::string>();
      if (t.dtype != "bf16" && t.dtype != "fp16") return InvalidArgument("training.dtype: " + Q(t.dtype) + " (bf16 or fp16)");
    }
    t.loss_scaling = t.dtype == "fp16" ? "dynamic" : "none";
    if (node["loss_scaling"]) {
      t.loss_scaling = node["loss_scaling"].as<std::string>();
      if (t.loss_scaling != "dynamic" && t.loss_scaling != "none") {
        return InvalidArgument("training.loss_scaling: " + Q(t.loss_scaling) + " (dynamic or none)");
      }
    }
    if (node["gradient_clipping"]) {
      TF_ASSIGN_OR_RETURN(const double v, Number(node["gradient_clipping"], "training.gradient_clipping", 0,
                                                  std::numeric_limits<double>::max()));
      t.gradient_clipping = v;
    }
    if (node["optimizer"]) TF_RETURN_IF_ERROR(ReadOptimizer(node["optimizer"], &t.optimizer));
    if (node["lr_schedule"]) TF_RETURN_IF_ERROR(ReadLrSchedule(node["lr_schedule"], &t.lr_schedule));
    if (node["seed"]) {
      TF_ASSIGN_OR_RETURN(t.seed, PositiveInt(node["seed"], "training.seed", int64_t{1} << 53, true));
    }
  } catch (const YAML::Exception& e) {
    return InvalidArgument(std::string("training: ") + e.what());
  }
  return t;
}

std::string TrainingToYaml(const TrainingSetup& t) {
  std::string y;
  y += fmt::format("micro_batch_size: {}\n", t.micro_batch_size);
  y += fmt::format("sequence_length: {}\n", t.sequence_length);
  y += fmt::format("gradient_accumulation_steps: {}\n", t.gradient_accumulation_steps);
  y += fmt::format("data_parallel: {}\n", t.data_parallel);
  y += fmt::format("activation_checkpointing: {}\n", t.activation_checkpointing ? "true" : "false");
  y += fmt::format("dtype: {}\n", t.dtype);
  y += fmt::format("loss_scaling: {}\n", t.loss_scaling);
  y += fmt::format("gradient_clipping: {:.17g}\n", t.gradient_clipping);
  const OptimizerSetup& o = t.optimizer;
  y += fmt::format("optimizer: {{lr: {:.17g}, betas: [{:.17g}, {:.17g}], eps: {:.17g}, weight_decay: {:.17g}}}\n", o.lr, o.beta1,
                   o.beta2, o.eps, o.weight_decay);
  const LrScheduleSetup& s = t.lr_schedule;
  const std::string deepspeed =
      s.deepspeed() ? fmt::format(", warmup_type: {}, warmup_min_ratio: {:.17g}", s.warmup_type, s.warmup_min_ratio) : "";
  y += fmt::format("lr_schedule: {{type: {}, warmup_steps: {}, total_steps: {}, min_lr_ratio: {:.17g}{}}}\n", s.type, s.warmup_steps,
                   s.total_steps, s.min_lr_ratio, deepspeed);
  if (t.seed >= 0) y += fmt::format("seed: {}\n", t.seed);
  return y;
}

}  // namespace tierflow::models
