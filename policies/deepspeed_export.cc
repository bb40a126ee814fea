// DeepSpeed configs out (deepspeed.h): a zero-infinity scenario as a ZeRO-3 config of its own, or
// onto the user's config, changing only the knobs tierflow tunes.
#include <fmt/format.h>

#include <algorithm>

#include "hf_trainer_auto.h"
#include "policies_internal.h"
#include "tierflow/core/json_checked.h"
#include "tierflow/policies/deepspeed.h"

namespace tierflow::policies {
namespace {

using Json = nlohmann::ordered_json;

// The config keys a zero-infinity scenario's knobs set: what an export onto the user's config may
// change.
const char* const kKnobPaths[] = {
    "zero_optimization.sub_group_size",
    "zero_optimization.stage3_param_persistence_threshold",
    "zero_optimization.reduce_bucket_size",
    "zero_optimization.stage3_max_live_parameters",
    "zero_optimization.stage3_max_reuse_distance",
    "zero_optimization.offload_param.device",
    "zero_optimization.offload_param.buffer_count",
    "zero_optimization.offload_param.buffer_size",
    "zero_optimization.offload_param.max_in_cpu",
    "zero_optimization.offload_optimizer.device",
    "zero_optimization.offload_optimizer.ratio",
    "zero_optimization.offload_optimizer.buffer_count",
    "zero_optimization.offload_optimizer.pipeline_read",
    "zero_optimization.offload_optimizer.pipeline_write",
    "aio.block_size",
    "aio.queue_depth",
};

// Equal as config values: numbers by value (1e9 and 1000000000), the rest as JSON.
bool Same(const Json& a, const Json& b) {
  if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();
  return a == b;
}

// Sets `path` in `root`, making the objects on the way.
void SetAt(Json& root, const std::string& path, const Json& value) {
  Json* j = &root;
  size_t at = 0;
  while (true) {
    const size_t end = path.find('.', at);
    const std::string part = path.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (end == std::string::npos) {
      (*j)[part] = value;
      return;
    }
    if (!j->contains(part) || !(*j)[part].is_object()) (*j)[part] = Json::object();
    j = &(*j)[part];
    at = end + 1;
  }
}

}  // namespace

StatusOr<std::string> ExportDeepSpeedConfig(const Scenario& s, const std::string& nvme_path, std::vector<std::string>* notes) {
  if (s.policy != "zero-infinity") {
    return InvalidArgument("policy '" + s.policy + "' has no DeepSpeed config: DeepSpeed schedules ZeRO-Infinity only (" +
                           (s.policy == "fuyou" || s.policy == "hitrain" || s.policy == "tierflow"
                                ? std::string("an update overlapped with backward, GPU prefetch windows, several disks and cached optimizer states are not DeepSpeed's")
                                : std::string("decoupled all-gathers, several disks, a remote tier and adaptive pinned pools are not DeepSpeed's")) +
                           "); export a zero-infinity scenario or schedule: the one tierflow tune writes beside a winner of another policy "
                           "(<output>.zero-infinity.json, the fastest zero-infinity configuration it found), or tierflow tune --policy zero-infinity");
  }
  TF_ASSIGN_OR_RETURN(const ZeroInfinityKnobs k, ReadZeroInfinityKnobs(s));  // the planner's knobs and defaults
  if (k.cpu_threads > 0) notes->push_back(fmt::format("not exported: policy.cpu_threads {}: DeepSpeed's CPU Adam takes the threads of its process", k.cpu_threads));
  if (k.pin_rounding) notes->push_back("not exported: policy.pin_memory_rounding models what DeepSpeed does anyway (PyTorch's caching host allocator)");
  if (k.overflow_temporaries) notes->push_back("not exported: policy.overflow_check_temporaries models what DeepSpeed does anyway (its unfused overflow check)");

  const TrainingSetup& t = s.training;
  Json j;
  j["train_micro_batch_size_per_gpu"] = t.micro_batch_size;
  j["gradient_accumulation_steps"] = t.gradient_accumulation_steps;
  j["train_batch_size"] = t.micro_batch_size * t.gradient_accumulation_steps * std::max<int64_t>(1, t.data_parallel);
  j["gradient_clipping"] = t.gradient_clipping;
  if (t.dtype == "fp16") {
    if (t.loss_scaling != "dynamic") return InvalidArgument("training.dtype fp16 with loss_scaling '" + t.loss_scaling + "': DeepSpeed's fp16 scales the loss (dynamic)");
    j["fp16"] = {{"enabled", true}, {"loss_scale", 0}, {"initial_scale_power", 16}};
  } else {
    if (t.loss_scaling != "none") return InvalidArgument("training.dtype bf16 with loss_scaling '" + t.loss_scaling + "': DeepSpeed's bf16 does not scale the loss");
    j["bf16"] = {{"enabled", true}};
  }
  Json zero;
  zero["stage"] = 3;
  zero["sub_group_size"] = k.sub_group_size;
  zero["stage3_param_persistence_threshold"] = k.persistence;
  zero["reduce_bucket_size"] = k.reduce_bucket_size;
  zero["stage3_max_live_parameters"] = k.max_live_parameters;
  zero["stage3_max_reuse_distance"] = k.max_reuse_distance;
  if (k.params_on_nvme) {
    zero["offload_param"] = {{"device", "nvme"}, {"nvme_path", nvme_path}, {"pin_memory", true}, {"buffer_count", k.buffer_count}, {"buffer_size", k.buffer_size},
                             {"max_in_cpu", k.max_in_cpu}};
  } else {
    zero["offload_param"] = {{"device", "none"}};
  }
  if (k.states_on_nvme) {
    zero["offload_optimizer"] = {{"device", "nvme"},           {"nvme_path", nvme_path},         {"pin_memory", true},
                                 {"buffer_count", k.optimizer_buffer_count}, {"pipeline_read", k.pipeline_read}, {"pipeline_write", k.pipeline_write}};
  } else if (k.states_on_gpu) {
    zero["offload_optimizer"] = {{"device", "none"}};  // ZeRO-3 without optimizer offload
  } else {
    zero["offload_optimizer"] = {{"device", "cpu"}, {"pin_memory", true}};  // ZeRO-Offload
    if (k.ratio != 1) zero["offload_optimizer"]["ratio"] = k.ratio;          // ZeRO-Offload++
  }
  j["zero_optimization"] = zero;
  j["aio"] = {{"block_size", k.block_size}, {"queue_depth", k.queue_depth}};
  if (!t.activation_checkpointing) {
    notes->push_back("not exported: training.activation_checkpointing false: activation checkpointing is the model's (gradient_checkpointing_enable), not DeepSpeed's config");
  }
  return j.dump(2) + "\n";
}

StatusOr<std::string> ExportDeepSpeedConfigOnto(const Scenario& s, const std::string& base_json, const std::string& origin,
                                                HfTrainerArgs trainer, std::vector<std::string>* notes, std::vector<std::string>* changed) {
  // The base must be a config import takes: what it maps is what an export may write back.
  if (trainer.hidden_size == 0) trainer.hidden_size = s.model.hidden;
  if (trainer.world_size == 0) trainer.world_size = std::max(1, s.training.data_parallel);
  TF_RETURN_IF_ERROR(ImportDeepSpeedConfig(base_json, origin, trainer).status());
  TF_ASSIGN_OR_RETURN(Json base, ParseJsonChecked(base_json, origin));
  TF_ASSIGN_OR_RETURN(const HfAutoValues autos, HfAutoValues::Make(base, trainer));
  TF_ASSIGN_OR_RETURN(const std::string fresh_text, ExportDeepSpeedConfig(s, "/unused", notes));
  Scenario at_defaults = s;
  at_defaults.knobs = Knobs();
  std::vector<std::string> unused;
  TF_ASSIGN_OR_RETURN(const std::string defaults_text, ExportDeepSpeedConfig(at_defaults, "/unused", &unused));
  const Json fresh = Json::parse(fresh_text);
  const Json defaults = Json::parse(defaults_text);
  for (const char* path : kKnobPaths) {
    const Json* want = JsonAtPath(fresh, path);
    if (want == nullptr) continue;  // not a knob of this placement (buffers without parameter offload)
    const Json* written = JsonAtPath(base, path);
    // What the base gives the key: its value, what its "auto" becomes, or DeepSpeed's default.
    const Json* has = written;
    std::string as_written = written != nullptr ? written->dump() : "absent";
    if (written != nullptr && written->is_string() && written->get<std::string>() == "auto") {
      const AutoValue* a = autos.Find(path);
      has = a != nullptr ? &a->value : nullptr;
      if (a != nullptr) as_written = "\"auto\" (" + a->value.dump() + ")";
    } else if (written == nullptr) {
      has = JsonAtPath(defaults, path);
      if (has != nullptr) as_written = "absent (DeepSpeed's default " + has->dump() + ")";
    }
    if (has != nullptr && Same(*has, *want)) continue;
    SetAt(base, path, *want);
    changed->push_back(std::string(path) + ": " + as_written + " -> " + want->dump());
  }
  return base.dump(2) + "\n";
}

}  // namespace tierflow::policies
