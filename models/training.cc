#include "tierflow/models/training.h"

#include <yaml-cpp/yaml.h>

#include <cmath>

#include <fmt/format.h>

#include "tierflow/models/yaml_tree.h"

namespace tierflow::models {
namespace {

std::string Q(const std::string& s) { return "'" + s + "'"; }

// An integer in [1, most] (or [0, most]), bounded before it is converted.
StatusOr<int64_t> PositiveInt(const YAML::Node& node, const std::string& where, int64_t most, bool allow_zero = false) {
  if (!node.IsScalar()) return InvalidArgument(where + ": expected an integer");
  double v;
  try {
    v = node.as<double>();
  } catch (const YAML::Exception&) {
    return InvalidArgument(where + ": " + Q(node.Scalar()) + " is not an integer");
  }
  if (v != std::floor(v)) return InvalidArgument(where + ": " + Q(node.Scalar()) + " is not an integer");
  if (v < 0 || (!allow_zero && v == 0)) {
    return InvalidArgument(where + ": " + Q(node.Scalar()) + (allow_zero ? " must be >= 0" : " must be > 0"));
  }
  if (v > static_cast<double>(most)) return InvalidArgument(where + ": " + Q(node.Scalar()) + " is above " + std::to_string(most));
  return static_cast<int64_t>(v);
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
                                    "activation_checkpointing", "dtype", "loss_scaling", "gradient_clipping"}));
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
      const YAML::Node& c = node["gradient_clipping"];
      double v = -1;
      try {
        v = c.as<double>();
      } catch (const YAML::Exception&) {
        return InvalidArgument("training.gradient_clipping: " + Q(c.IsScalar() ? c.Scalar() : "?") + " is not a number");
      }
      if (!(v >= 0) || !std::isfinite(v)) {
        return InvalidArgument("training.gradient_clipping: " + Q(c.Scalar()) + " must be a finite number >= 0 (0 = off)");
      }
      t.gradient_clipping = v;
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
  return y;
}

}  // namespace tierflow::models
