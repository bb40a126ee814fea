// DeepSpeed configs in and out (deepspeed.h). The keys and defaults are DeepSpeed's
// (deepspeed/runtime/zero/config.py, offload_config.py, runtime/constants.py, swap_tensor
// aio config); each maps to the zero-infinity knob of the same name in docs/policies.md.
#include "tierflow/policies/deepspeed.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <set>

#include "hf_trainer_auto.h"
#include "policies_internal.h"
#include "tierflow/core/json_checked.h"
#include "tierflow/core/text.h"

namespace tierflow::policies {
namespace {

using Json = nlohmann::ordered_json;

// Reads one JSON object, remembering which keys were taken; the rest are reported as ignored.
class Section {
 public:
  Section(const Json* j, std::string path, DeepSpeedImport* out, const HfAutoValues* autos)
      : j_(j), path_(std::move(path)), out_(out), autos_(autos) {}

  std::string Path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  // The value of `key`, or null when absent. "auto" is what the Hugging Face Trainer would write
  // at launch (HfAutoValues), with a note saying from what; one it fills from what an import
  // cannot know counts as absent, with a note.
  const Json* Get(const std::string& key) {
    taken_.insert(key);
    if (j_ == nullptr || !j_->contains(key)) return nullptr;
    const Json& v = (*j_)[key];
    if (v.is_string() && v.get<std::string>() == "auto") {
      if (const AutoValue* a = autos_->Find(Path(key)); a != nullptr) {
        out_->notes.push_back("auto: " + Path(key) + " = " + a->value.dump() + " (as the Hugging Face Trainer fills it: " + a->from + ")");
        return &a->value;
      }
      out_->notes.push_back("ignored: " + Path(key) + " is \"auto\" (the Hugging Face Trainer fills it at launch from what an import does not know): "
                            "the scenario's value stays (--set to change it)");
      return nullptr;
    }
    return &v;
  }
  // The value as written ("auto" included), without taking the key; null when absent.
  const Json* Raw(const std::string& key) const {
    return j_ != nullptr && j_->contains(key) ? &(*j_)[key] : nullptr;
  }
  StatusOr<Section> Child(const std::string& key) {
    const Json* v = Get(key);
    if (v != nullptr && !v->is_object()) return InvalidArgument(Path(key) + ": expected an object");
    return Section(v, Path(key), out_, autos_);
  }
  // A count: an integral number >= min (1e9 written as 1e9 or 1000000000.0 is accepted).
  StatusOr<std::optional<int64_t>> Int(const std::string& key, int64_t min) {
    const Json* v = Get(key);
    if (v == nullptr) return std::optional<int64_t>();
    if (!v->is_number()) return InvalidArgument(Path(key) + ": expected a number, got " + Quoted(v->dump()));
    TF_ASSIGN_OR_RETURN(const int64_t i, ParseInteger(v->dump(), Path(key), min, INT64_MAX));
    return std::optional<int64_t>(i);
  }
  StatusOr<std::optional<double>> Number(const std::string& key) {
    const Json* v = Get(key);
    if (v == nullptr) return std::optional<double>();
    if (!v->is_number() || !std::isfinite(v->get<double>())) return InvalidArgument(Path(key) + ": expected a number, got " + Quoted(v->dump()));
    return std::optional<double>(v->get<double>());
  }
  StatusOr<std::optional<bool>> Bool(const std::string& key) {
    const Json* v = Get(key);
    if (v == nullptr) return std::optional<bool>();
    if (!v->is_boolean()) return InvalidArgument(Path(key) + ": expected true or false, got " + Quoted(v->dump()));
    return std::optional<bool>(v->get<bool>());
  }
  StatusOr<std::optional<std::string>> String(const std::string& key) {
    const Json* v = Get(key);
    if (v == nullptr) return std::optional<std::string>();
    if (!v->is_string()) return InvalidArgument(Path(key) + ": expected a string, got " + Quoted(v->dump()));
    return std::optional<std::string>(v->get<std::string>());
  }
  // Takes `key` without mapping it, with the reason.
  void Ignore(const std::string& key, const std::string& why) {
    if (Get(key) != nullptr) out_->notes.push_back("ignored: " + Path(key) + ": " + why);
  }
  // Every key not taken: ignored, not modelled.
  void Rest(const std::string& why) {
    if (j_ == nullptr) return;
    for (auto it = j_->begin(); it != j_->end(); ++it) {
      if (taken_.count(it.key()) != 0) continue;
      // An "auto" not modelled still says what the Trainer would make it.
      const AutoValue* a = it.value().is_string() && it.value().get<std::string>() == "auto" ? autos_->Find(Path(it.key())) : nullptr;
      out_->notes.push_back("ignored: " + Path(it.key()) +
                            (a != nullptr ? " \"auto\" = " + a->value.dump() + " (as the Hugging Face Trainer fills it: " + a->from + ")" : "") +
                            ": " + why);
    }
  }
  bool present() const { return j_ != nullptr; }

 private:
  const Json* j_;
  std::string path_;
  DeepSpeedImport* out_;
  const HfAutoValues* autos_;
  std::set<std::string> taken_;
};

std::string Text(int64_t v) { return std::to_string(v); }
std::string Text(bool v) { return v ? "true" : "false"; }
// The shortest text that reads back to the same double ("3e-05", "0.9").
std::string Real(double v) { return fmt::format("{}", v); }

}  // namespace

namespace {

// scheduler {type, params}: DeepSpeed's WarmupLR, WarmupDecayLR and WarmupCosineLR become
// training.lr_schedule of the same type (models::LrScheduleSetup), with DeepSpeed's defaults for
// what the config leaves out; the others are noted.
Status ImportScheduler(Section& top, std::optional<double> optimizer_lr, DeepSpeedImport* out) {
  auto set = [&](const std::string& key, const std::string& value) { out->sets.emplace_back(key, value); };
  TF_ASSIGN_OR_RETURN(Section scheduler, top.Child("scheduler"));
  TF_ASSIGN_OR_RETURN(auto type, scheduler.String("type"));
  if (!type) return Status::Ok();
  TF_ASSIGN_OR_RETURN(Section params, scheduler.Child("params"));
  if (*type != "WarmupLR" && *type != "WarmupDecayLR" && *type != "WarmupCosineLR") {
    out->notes.push_back("ignored: scheduler.type '" + *type + "': tierflow runs DeepSpeed's WarmupLR, WarmupDecayLR and WarmupCosineLR "
                         "(and Hugging Face's constant, linear and cosine); the scenario's schedule stays");
    params.Rest("its schedule is not taken");
    return Status::Ok();
  }
  TF_ASSIGN_OR_RETURN(auto warmup, params.Int("warmup_num_steps", 0));
  TF_ASSIGN_OR_RETURN(auto warmup_type, params.String("warmup_type"));
  if (warmup_type && *warmup_type != "log" && *warmup_type != "linear") {
    return InvalidArgument(params.Path("warmup_type") + " '" + *warmup_type + "': log or linear");
  }
  std::optional<int64_t> total;
  if (*type != "WarmupLR") {
    const bool automatic = params.present() && params.Raw("total_num_steps") != nullptr && params.Raw("total_num_steps")->is_string();
    TF_ASSIGN_OR_RETURN(total, params.Int("total_num_steps", 1));
    if (!total) {
      out->notes.push_back(std::string("ignored: scheduler ") + *type + ": total_num_steps is " + (automatic ? "\"auto\"" : "absent") +
                           ", and its decay needs it: the scenario's schedule stays (--set training.lr_schedule.type=" + *type +
                           " and total_steps=N to run it)");
      params.Rest("the schedule is not taken");
      return Status::Ok();
    }
  }
  double min_ratio = 0, warmup_min_ratio = 0;
  if (*type == "WarmupCosineLR") {
    TF_ASSIGN_OR_RETURN(auto cos_min, params.Number("cos_min_ratio"));
    TF_ASSIGN_OR_RETURN(auto start, params.Number("warmup_min_ratio"));
    min_ratio = cos_min.value_or(0.0001);  // DeepSpeed's default
    warmup_min_ratio = start.value_or(0);
    for (const auto& [key, v] : {std::pair{"cos_min_ratio", min_ratio}, std::pair{"warmup_min_ratio", warmup_min_ratio}}) {
      if (v < 0 || v > 1) return InvalidArgument(params.Path(key) + ": " + Real(v) + " must be in [0, 1]");
    }
  } else {
    // The rate runs from warmup_min_lr to warmup_max_lr, which replaces the optimizer's.
    TF_ASSIGN_OR_RETURN(auto min_lr, params.Number("warmup_min_lr"));
    TF_ASSIGN_OR_RETURN(auto max_lr, params.Number("warmup_max_lr"));
    const double peak = max_lr.value_or(optimizer_lr.value_or(0.001));
    if (!(peak > 0) || min_lr.value_or(0) < 0 || min_lr.value_or(0) > peak) {
      return InvalidArgument(params.Path("warmup_min_lr") + " " + Real(min_lr.value_or(0)) + " and warmup_max_lr " + Real(peak) +
                             ": need 0 <= warmup_min_lr <= warmup_max_lr, warmup_max_lr > 0");
    }
    if (max_lr && optimizer_lr && *optimizer_lr != *max_lr) {
      out->notes.push_back("replaced: optimizer.params.lr " + Real(*optimizer_lr) + " by scheduler.params.warmup_max_lr " + Real(*max_lr) +
                           " (DeepSpeed's " + *type + " sets the rate)");
    }
    if (max_lr) {
      std::erase_if(out->sets, [](const auto& kv) { return kv.first == "training.optimizer.lr"; });
      set("training.optimizer.lr", Real(peak));
    } else if (min_lr.value_or(0) > 0 && !optimizer_lr) {
      out->notes.push_back("default: scheduler.params.warmup_min_lr " + Real(*min_lr) + " is taken over DeepSpeed's default rate 0.001 "
                           "(no warmup_max_lr or optimizer lr says it): training.lr_schedule.min_lr_ratio " + Real(*min_lr / peak));
    }
    min_ratio = min_lr.value_or(0) / peak;
  }
  set("training.lr_schedule.type", *type);
  const bool warmup_auto = params.Raw("warmup_num_steps") != nullptr && params.Raw("warmup_num_steps")->is_string();
  if (warmup || !warmup_auto) set("training.lr_schedule.warmup_steps", Text(warmup.value_or(1000)));  // DeepSpeed's default
  if (total) set("training.lr_schedule.total_steps", Text(*total));
  set("training.lr_schedule.min_lr_ratio", Real(min_ratio));
  set("training.lr_schedule.warmup_type", warmup_type.value_or("log"));
  if (*type == "WarmupCosineLR") set("training.lr_schedule.warmup_min_ratio", Real(warmup_min_ratio));
  params.Rest("not a parameter of " + *type);
  scheduler.Rest("not modelled");
  return Status::Ok();
}

// The batch (micro-batch x accumulation x data-parallel ranks = train_batch_size) and clipping.
Status ImportBatch(Section& top, DeepSpeedImport& out) {
  auto set = [&](const std::string& key, const std::string& value) { out.sets.emplace_back(key, value); };
  TF_ASSIGN_OR_RETURN(auto micro, top.Int("train_micro_batch_size_per_gpu", 1));
  TF_ASSIGN_OR_RETURN(auto gas, top.Int("gradient_accumulation_steps", 1));
  TF_ASSIGN_OR_RETURN(auto batch, top.Int("train_batch_size", 1));
  if (micro) set("training.micro_batch_size", Text(*micro));
  if (gas) set("training.gradient_accumulation_steps", Text(*gas));
  if (batch) {
    const int64_t per_rank = micro.value_or(1) * gas.value_or(1);
    if (*batch % per_rank != 0) {
      return (InvalidArgument(fmt::format("train_batch_size {} is not a multiple of train_micro_batch_size_per_gpu x gradient_accumulation_steps = {}",
                                                *batch, per_rank)));
    }
    set("training.data_parallel", Text(*batch / per_rank));
  }
  TF_ASSIGN_OR_RETURN(auto clip, top.Number("gradient_clipping"));
  if (clip && *clip < 0) return (InvalidArgument("gradient_clipping: " + std::to_string(*clip) + " must be >= 0"));
  if (!clip && top.Raw("gradient_clipping") == nullptr) {
    out.notes.push_back("default: gradient_clipping absent: DeepSpeed's default, 1.0 (since DeepSpeed PR 8068; 0 turns it off)");
    clip = 1.0;
  }
  if (clip) set("training.gradient_clipping", fmt::format("{}", *clip));
  return Status::Ok();
}

// Precision: bf16, or fp16 with the dynamic loss scaler.
Status ImportPrecision(Section& top, DeepSpeedImport& out) {
  auto set = [&](const std::string& key, const std::string& value) { out.sets.emplace_back(key, value); };
  TF_ASSIGN_OR_RETURN(Section bf16, top.Child("bf16"));
  TF_ASSIGN_OR_RETURN(Section fp16, top.Child("fp16"));
  TF_ASSIGN_OR_RETURN(auto bf16_on, bf16.Bool("enabled"));
  TF_ASSIGN_OR_RETURN(auto fp16_on, fp16.Bool("enabled"));
  if (bf16_on.value_or(false) && fp16_on.value_or(false)) return (InvalidArgument("bf16.enabled and fp16.enabled are both true: choose one"));
  if (fp16_on.value_or(false)) {
    set("training.dtype", "fp16");
    set("training.loss_scaling", "dynamic");
    TF_ASSIGN_OR_RETURN(auto scale, fp16.Number("loss_scale"));
    if (scale && *scale != 0) {
      return (InvalidArgument(fmt::format("fp16.loss_scale {}: a static loss scale; tierflow scales dynamically (loss_scale 0)", *scale)));
    }
    TF_ASSIGN_OR_RETURN(auto power, fp16.Int("initial_scale_power", 0));
    if (power && *power != 16) out.notes.push_back(fmt::format("ignored: fp16.initial_scale_power {}: tierflow's dynamic scaler starts at 2^16", *power));
    fp16.Rest("the loss scaler's schedule is DeepSpeed's defaults in tierflow (window 1000, hysteresis 2)");
  } else if (bf16_on.value_or(false)) {
    set("training.dtype", "bf16");
    set("training.loss_scaling", "none");
    fp16.Rest("fp16 is off");
  } else {
    return (InvalidArgument("neither bf16.enabled nor fp16.enabled: tierflow models mixed-precision training (set bf16 or fp16)"));
  }
  bf16.Rest("not modelled");
  return Status::Ok();
}

// ZeRO stage 3, parameters on NVMe or the GPU, optimizer states on NVMe or in host memory.
Status ImportZero(Section& top, DeepSpeedImport& out) {
  auto set = [&](const std::string& key, const std::string& value) { out.sets.emplace_back(key, value); };
  TF_ASSIGN_OR_RETURN(Section zero, top.Child("zero_optimization"));
  if (!zero.present()) return (InvalidArgument("zero_optimization: missing; tierflow's zero-infinity is ZeRO stage 3 with NVMe offload"));
  TF_ASSIGN_OR_RETURN(auto stage, zero.Int("stage", 0));
  if (!stage || *stage != 3) {
    return (InvalidArgument("zero_optimization.stage " + (stage ? std::to_string(*stage) : std::string("absent")) +
                                  ": tierflow's zero-infinity is ZeRO stage 3 (stages 1 and 2 keep parameters on every GPU)"));
  }
  TF_ASSIGN_OR_RETURN(auto sub_group, zero.Int("sub_group_size", 1));
  if (sub_group) set("policy.sub_group_size", Text(*sub_group));
  TF_ASSIGN_OR_RETURN(auto persistence, zero.Int("stage3_param_persistence_threshold", 0));
  TF_ASSIGN_OR_RETURN(auto bucket, zero.Int("reduce_bucket_size", 1));
  if (bucket) set("policy.reduce_bucket_size", Text(*bucket));
  if (persistence) set("policy.param_persistence_threshold", Text(*persistence));
  TF_ASSIGN_OR_RETURN(auto live, zero.Int("stage3_max_live_parameters", 1));
  if (live) set("policy.max_live_parameters", Text(*live));
  TF_ASSIGN_OR_RETURN(auto reuse, zero.Int("stage3_max_reuse_distance", 0));
  if (reuse) set("policy.max_reuse_distance", Text(*reuse));
  std::string nvme_path;
  TF_ASSIGN_OR_RETURN(Section param, zero.Child("offload_param"));
  TF_ASSIGN_OR_RETURN(auto param_device, param.String("device"));
  const std::string pdev = param_device.value_or("none");
  if (pdev == "nvme") {
    set("policy.offload_param", "nvme");
    TF_ASSIGN_OR_RETURN(auto path, param.String("nvme_path"));
    nvme_path = path.value_or("");
    TF_ASSIGN_OR_RETURN(auto count, param.Int("buffer_count", 1));
    if (count) set("policy.buffer_count", Text(*count));
    TF_ASSIGN_OR_RETURN(auto size, param.Int("buffer_size", 1));
    if (size) set("policy.buffer_size", Text(*size));
    TF_ASSIGN_OR_RETURN(auto in_cpu, param.Int("max_in_cpu", 0));
    if (in_cpu) set("policy.max_in_cpu", Text(*in_cpu));
  } else if (pdev == "none") {
    set("policy.offload_param", "none");
  } else {
    return (InvalidArgument("zero_optimization.offload_param.device '" + pdev + "': zero-infinity keeps parameters on NVMe ('nvme') or on the GPU ('none')" +
                                  (pdev == "cpu" ? "; parameters in CPU memory are not modelled" : "")));
  }
  param.Ignore("pin_memory", "tierflow's buffers are pinned");
  param.Rest("not modelled");
  TF_ASSIGN_OR_RETURN(Section opt, zero.Child("offload_optimizer"));
  TF_ASSIGN_OR_RETURN(auto opt_device, opt.String("device"));
  const std::string odev = opt_device.value_or("none");
  if (odev == "cpu" || odev == "none") {
    // ZeRO-Offload: the states in host memory, the update on the CPU; ZeRO-Offload++'s ratio is
    // the share of the sub-groups updated on the CPU, the first of the rest on the GPU. none:
    // every state on the GPU (ZeRO-3 without optimizer offload).
    set("policy.offload_optimizer", odev);
    TF_ASSIGN_OR_RETURN(auto ratio, opt.Number("ratio"));
    if (ratio && odev == "none") {
      opt.Ignore("ratio", "DeepSpeed reads it with device 'cpu' only");
    } else if (ratio) {
      if (!(*ratio >= 0 && *ratio <= 1)) return InvalidArgument(fmt::format("zero_optimization.offload_optimizer.ratio {}: a share, in [0, 1]", *ratio));
      if (*ratio != 1.0) set("policy.ratio", Real(*ratio));
    }
    for (const char* key : {"nvme_path", "buffer_count", "pipeline_read", "pipeline_write", "fast_init"}) {
      opt.Ignore(key, "DeepSpeed reads it with device 'nvme' only");
    }
  } else if (odev != "nvme") {
    return InvalidArgument("zero_optimization.offload_optimizer.device '" + odev +
                           "': zero-infinity keeps the optimizer states on NVMe ('nvme'), in host memory ('cpu', with ratio: part of them on the GPU) "
                           "or on the GPU ('none')");
  } else {
    TF_ASSIGN_OR_RETURN(auto opt_path, opt.String("nvme_path"));
    if (opt_path && !nvme_path.empty() && *opt_path != nvme_path) {
      return InvalidArgument("offload_param.nvme_path '" + nvme_path + "' and offload_optimizer.nvme_path '" + *opt_path +
                             "' differ: zero-infinity puts both on one disk (nvme0); plan several disks with policy ioc or tierflow");
    }
    TF_ASSIGN_OR_RETURN(auto opt_count, opt.Int("buffer_count", 1));
    if (opt_count) set("policy.optimizer_buffer_count", Text(*opt_count));
    TF_ASSIGN_OR_RETURN(auto pipeline_read, opt.Bool("pipeline_read"));
    if (pipeline_read) set("policy.pipeline_read", Text(*pipeline_read));
    TF_ASSIGN_OR_RETURN(auto pipeline_write, opt.Bool("pipeline_write"));
    if (pipeline_write) set("policy.pipeline_write", Text(*pipeline_write));
  }
  opt.Ignore("pin_memory", "tierflow's buffers are pinned");
  opt.Rest("not modelled");
  zero.Rest("not modelled (the prefetch bucket, the all-gather bucket and communication overlap are tierflow's own)");
  return Status::Ok();
}

// The aio request shape.
Status ImportAio(Section& top, DeepSpeedImport& out) {
  auto set = [&](const std::string& key, const std::string& value) { out.sets.emplace_back(key, value); };
  TF_ASSIGN_OR_RETURN(Section aio, top.Child("aio"));
  TF_ASSIGN_OR_RETURN(auto block, aio.Int("block_size", 1));
  if (block) set("policy.block_size", Text(*block) + " B");
  TF_ASSIGN_OR_RETURN(auto depth, aio.Int("queue_depth", 1));
  if (depth) set("policy.queue_depth", Text(*depth));
  aio.Rest("not modelled (one submission stream per handle)");
  return Status::Ok();
}

// Adam's hyper-parameters (what tierflow run's AdamW takes: training.optimizer; --lr overrides the
// rate) and the learning-rate schedule.
Status ImportOptimizer(Section& top, DeepSpeedImport& out) {
  auto set = [&](const std::string& key, const std::string& value) { out.sets.emplace_back(key, value); };
  TF_ASSIGN_OR_RETURN(Section optimizer, top.Child("optimizer"));
  TF_ASSIGN_OR_RETURN(auto type, optimizer.String("type"));
  if (type) {
    std::string t = *type;
    for (char& ch : t) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (t != "adam" && t != "adamw") return (InvalidArgument("optimizer.type '" + *type + "': tierflow's optimizer is (CPU) Adam/AdamW"));
  }
  TF_ASSIGN_OR_RETURN(Section params, optimizer.Child("params"));
  std::optional<double> optimizer_lr;
  for (const char* key : {"lr", "eps", "weight_decay"}) {
    TF_ASSIGN_OR_RETURN(auto v, params.Number(key));
    if (v) set(std::string("training.optimizer.") + key, Real(*v));
    if (std::string(key) == "lr") optimizer_lr = v;
  }
  if (const Json* betas = params.Get("betas"); betas != nullptr) {
    if (!betas->is_array() || betas->size() != 2 || !(*betas)[0].is_number() || !(*betas)[1].is_number()) {
      return InvalidArgument(params.Path("betas") + ": expected [beta1, beta2], got " + Quoted(betas->dump()));
    }
    set("training.optimizer.betas", "[" + Real((*betas)[0].get<double>()) + ", " + Real((*betas)[1].get<double>()) + "]");
  }
  params.Rest("not modelled (tierflow's update is AdamW with decoupled weight decay)");
  optimizer.Rest("not modelled");
  TF_RETURN_IF_ERROR(ImportScheduler(top, optimizer_lr, &out));
  return Status::Ok();
}

StatusOr<DeepSpeedImport> Import(const Json& root, const HfAutoValues& autos) {
  DeepSpeedImport out;
  out.sets.emplace_back("policy.name", "zero-infinity");
  Section top(&root, "", &out, &autos);
  TF_RETURN_IF_ERROR(ImportBatch(top, out));
  TF_RETURN_IF_ERROR(ImportPrecision(top, out));
  TF_RETURN_IF_ERROR(ImportZero(top, out));
  TF_RETURN_IF_ERROR(ImportAio(top, out));
  TF_RETURN_IF_ERROR(ImportOptimizer(top, out));
  top.Rest("not modelled");
  return out;
}

}  // namespace

StatusOr<DeepSpeedImport> ImportDeepSpeedConfig(const std::string& json_text, const std::string& origin, const HfTrainerArgs& trainer) {
  TF_ASSIGN_OR_RETURN(const Json root, ParseJsonChecked(json_text, origin));
  if (!root.is_object()) return InvalidArgument(origin + ": expected a JSON object (a DeepSpeed config)");
  StatusOr<HfAutoValues> autos = HfAutoValues::Make(root, trainer);
  if (!autos.ok()) return Status(autos.status().code(), origin + ": " + autos.status().message());
  StatusOr<DeepSpeedImport> out = Import(root, *autos);
  if (!out.ok()) return Status(out.status().code(), origin + ": " + out.status().message());
  return out;
}

}  // namespace tierflow::policies
