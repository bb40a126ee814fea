#include "tierflow/models/training.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "tierflow/core/text.h"
#include "tierflow/models/yaml_tree.h"
#include "doc.h"

namespace tierflow::models {

using internal::Doc;
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

namespace {

Doc Real(double v) { return Doc::Plain(fmt::format("{:.17g}", v)); }
Doc Int(int64_t v) { return Doc::Plain(std::to_string(v)); }

// Every field TrainingFromYaml reads, numbers with 17 significant digits.
Doc TrainingDoc(const TrainingSetup& t) {
  Doc d = Doc::Map();
  d.Add("micro_batch_size", Int(t.micro_batch_size));
  d.Add("sequence_length", Int(t.sequence_length));
  d.Add("gradient_accumulation_steps", Int(t.gradient_accumulation_steps));
  d.Add("data_parallel", Int(t.data_parallel));
  d.Add("activation_checkpointing", Doc::Plain(t.activation_checkpointing ? "true" : "false"));
  d.Add("dtype", Doc::Plain(fmt::format("{}", t.dtype)));
  d.Add("loss_scaling", Doc::Plain(fmt::format("{}", t.loss_scaling)));
  d.Add("gradient_clipping", Real(t.gradient_clipping));
  const OptimizerSetup& o = t.optimizer;
  Doc betas = Doc::List(/*flow=*/true);
  betas.Push(Real(o.beta1)).Push(Real(o.beta2));
  Doc optimizer = Doc::Map(/*flow=*/true);
  optimizer.Add("lr", Real(o.lr)).Add("betas", std::move(betas)).Add("eps", Real(o.eps)).Add("weight_decay", Real(o.weight_decay));
  d.Add("optimizer", std::move(optimizer));
  const LrScheduleSetup& l = t.lr_schedule;
  Doc schedule = Doc::Map(/*flow=*/true);
  schedule.Add("type", Doc::Plain(fmt::format("{}", l.type)))
      .Add("warmup_steps", Int(l.warmup_steps))
      .Add("total_steps", Int(l.total_steps))
      .Add("min_lr_ratio", Real(l.min_lr_ratio));
  if (l.deepspeed()) schedule.Add("warmup_type", Doc::Plain(fmt::format("{}", l.warmup_type))).Add("warmup_min_ratio", Real(l.warmup_min_ratio));
  d.Add("lr_schedule", std::move(schedule));
  if (t.seed >= 0) d.Add("seed", Int(t.seed));
  return d;
}

}  // namespace

std::string TrainingToYaml(const TrainingSetup& t) { return TrainingDoc(t).Yaml(); }
std::string TrainingToJson(const TrainingSetup& t) { return TrainingDoc(t).Json(); }


}  // namespace tierflow::models
