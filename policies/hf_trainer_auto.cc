// The Hugging Face Trainer's "auto" values (hf_trainer_auto.h). The fields, defaults and formulas
// are transformers' (training_args.py, integrations/deepspeed.py).
#include "hf_trainer_auto.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <vector>

namespace tierflow::policies {
namespace {

using Json = nlohmann::ordered_json;

// A TrainingArguments field, its default, and the config keys the Trainer fills from it (and
// checks against it when they are explicit).
enum class Kind { kInt, kReal, kBool };
struct Field {
  const char* name;
  double default_value;
  Kind kind;
  std::vector<std::string> paths;  // "optimizer.params.betas.0": an element of a list
};

const std::vector<Field>& Fields() {
  static const std::vector<Field> kFields = {
      {"per_device_train_batch_size", 8, Kind::kInt, {"train_micro_batch_size_per_gpu"}},
      {"gradient_accumulation_steps", 1, Kind::kInt, {"gradient_accumulation_steps"}},
      {"max_grad_norm", 1.0, Kind::kReal, {"gradient_clipping"}},
      {"learning_rate", 5e-5, Kind::kReal, {"optimizer.params.lr", "scheduler.params.warmup_max_lr"}},
      {"adam_beta1", 0.9, Kind::kReal, {"optimizer.params.betas.0"}},
      {"adam_beta2", 0.999, Kind::kReal, {"optimizer.params.betas.1"}},
      {"adam_epsilon", 1e-8, Kind::kReal, {"optimizer.params.eps"}},
      {"weight_decay", 0.0, Kind::kReal, {"optimizer.params.weight_decay"}},
      {"bf16", 0, Kind::kBool, {"bf16.enabled"}},
      {"fp16", 0, Kind::kBool, {"fp16.enabled"}},
      {"max_steps", -1, Kind::kInt, {"scheduler.params.total_num_steps"}},
      {"warmup_steps", 0, Kind::kInt, {"scheduler.params.warmup_num_steps"}},
      {"warmup_ratio", 0.0, Kind::kReal, {}},
  };
  return kFields;
}

}  // namespace

const Json* JsonAtPath(const Json& root, const std::string& path) {
  const Json* j = &root;
  size_t at = 0;
  while (at <= path.size()) {
    size_t end = path.find('.', at);
    if (end == std::string::npos) end = path.size();
    const std::string part = path.substr(at, end - at);
    if (j->is_object()) {
      if (!j->contains(part)) return nullptr;
      j = &(*j)[part];
    } else if (j->is_array() && !part.empty() && part.find_first_not_of("0123456789") == std::string::npos) {
      const size_t i = std::stoul(part);
      if (i >= j->size()) return nullptr;
      j = &(*j)[i];
    } else {
      return nullptr;
    }
    at = end + 1;
  }
  return j;
}

namespace {

// An explicit value of a field at `path`: a number or a boolean ("auto" and anything else: none).
std::optional<double> Explicit(const Json& root, const std::string& path) {
  const Json* v = JsonAtPath(root, path);
  if (v == nullptr) return std::nullopt;
  if (v->is_boolean()) return v->get<bool>() ? 1.0 : 0.0;
  if (v->is_number() && std::isfinite(v->get<double>())) return v->get<double>();
  return std::nullopt;
}

std::string Text(double v, Kind kind) { return kind == Kind::kBool ? (v != 0 ? "true" : "false") : fmt::format("{}", v); }

// The value as the config would hold it.
Json ToJson(double v, Kind kind) {
  if (kind == Kind::kBool) return v != 0;
  if (kind == Kind::kInt && std::fabs(v) < 9e18) return static_cast<int64_t>(v);  // larger: as written, for import to refuse
  return v;
}

StatusOr<double> ParseArgument(const Field& f, const std::string& text) {
  if (f.kind == Kind::kBool) {
    if (text == "true" || text == "True" || text == "1") return 1.0;
    if (text == "false" || text == "False" || text == "0") return 0.0;
    return InvalidArgument(fmt::format("--hf {}={}: expected true or false", f.name, text.substr(0, 40)));
  }
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v)) {
    return InvalidArgument(fmt::format("--hf {}={}: expected a number", f.name, text.substr(0, 40)));
  }
  if (f.kind == Kind::kInt && (v != std::floor(v) || std::fabs(v) > 1e15)) {
    return InvalidArgument(fmt::format("--hf {}={}: expected an integer", f.name, text.substr(0, 40)));
  }
  return v;
}

struct Resolved {
  double value = 0;
  Kind kind = Kind::kReal;
  std::string from;
};

}  // namespace

StatusOr<HfAutoValues> HfAutoValues::Make(const Json& root, const HfTrainerArgs& args) {
  std::map<std::string, Resolved> field;
  for (const auto& [name, text] : args.arguments) {
    bool known = false;
    for (const Field& f : Fields()) known = known || name == f.name;
    if (!known) {
      std::string list;
      for (const Field& f : Fields()) list += (list.empty() ? "" : ", ") + std::string(f.name);
      return InvalidArgument("--hf " + name.substr(0, 60) + ": not a TrainingArguments field the DeepSpeed integration reads (known: " + list + ")");
    }
  }
  for (const Field& f : Fields()) {
    Resolved r{f.default_value, f.kind, fmt::format("{} {}, the Trainer's default", f.name, Text(f.default_value, f.kind))};
    if (const auto it = args.arguments.find(f.name); it != args.arguments.end()) {
      TF_ASSIGN_OR_RETURN(r.value, ParseArgument(f, it->second));
      r.from = fmt::format("--hf {}={}", f.name, it->second);
      for (const std::string& path : f.paths) {
        const std::optional<double> v = Explicit(root, path);
        // warmup_num_steps is written as max(1, warmup_steps).
        const double expect = std::string(f.name) == "warmup_steps" ? std::max(1.0, r.value) : r.value;
        if (v && *v != expect) {
          return InvalidArgument(fmt::format("{} is {} in the config and --hf {}={}: the Trainer refuses a config that disagrees with its "
                                             "arguments; make them equal, or write \"auto\"",
                                             path, Text(*v, f.kind), f.name, it->second));
        }
      }
    } else {
      for (const std::string& path : f.paths) {
        if (const std::optional<double> v = Explicit(root, path)) {
          r = {*v, f.kind, fmt::format("{} {}, as your {} says", f.name, Text(*v, f.kind), path)};
          break;
        }
      }
    }
    field[f.name] = r;
  }
  auto value = [&](const char* name) { return field.at(name).value; };
  HfAutoValues out;
  auto fill = [&](const std::string& path, Json v, const std::string& from) { out.values_[path] = {std::move(v), from}; };
  auto from_field = [&](const std::string& path, const char* name) {
    const Resolved& r = field.at(name);
    fill(path, ToJson(r.value, r.kind), r.from);
  };
  from_field("train_micro_batch_size_per_gpu", "per_device_train_batch_size");
  from_field("gradient_accumulation_steps", "gradient_accumulation_steps");
  // A product that is no batch (a --hf size of 0, or past 10^15) is left unresolved: import's
  // own checks name the size.
  const double product = value("per_device_train_batch_size") * value("gradient_accumulation_steps") * static_cast<double>(args.world_size);
  if (args.world_size > 0 && product >= 1 && product < 1e15) {
    const auto batch = static_cast<int64_t>(product);
    fill("train_batch_size", batch,
         fmt::format("world size {} x per_device_train_batch_size {} x gradient_accumulation_steps {}", args.world_size,
                     Text(value("per_device_train_batch_size"), Kind::kInt), Text(value("gradient_accumulation_steps"), Kind::kInt)));
  }
  from_field("gradient_clipping", "max_grad_norm");
  from_field("optimizer.params.lr", "learning_rate");
  fill("optimizer.params.betas", Json::array({value("adam_beta1"), value("adam_beta2")}),
       field.at("adam_beta1").from + "; " + field.at("adam_beta2").from);
  from_field("optimizer.params.eps", "adam_epsilon");
  from_field("optimizer.params.weight_decay", "weight_decay");
  fill("scheduler.params.warmup_min_lr", 0, "not a Trainer argument: the Trainer writes 0");
  from_field("scheduler.params.warmup_max_lr", "learning_rate");
  const double steps = value("max_steps");
  if (steps > 0) from_field("scheduler.params.total_num_steps", "max_steps");
  // get_warmup_steps: warmup_steps when > 0, else ceil(warmup_ratio x the step count); at least 1.
  if (value("warmup_steps") > 0 || steps > 0) {
    const double w = value("warmup_steps") > 0 ? value("warmup_steps") : std::ceil(value("warmup_ratio") * steps);
    fill("scheduler.params.warmup_num_steps", static_cast<int64_t>(std::max(1.0, w)),
         value("warmup_steps") > 0 ? field.at("warmup_steps").from
                                   : fmt::format("ceil(warmup_ratio {} x max_steps {}), at least 1", Text(value("warmup_ratio"), Kind::kReal), Text(steps, Kind::kInt)));
  }
  from_field("bf16.enabled", "bf16");
  from_field("fp16.enabled", "fp16");
  // Neither --bf16 nor --fp16 said: the Trainer would train in fp32, which tierflow does not
  // model; an "auto" precision is taken as the one a ZeRO-3 offload run launches with.
  const bool precision_known = value("bf16") != 0 || value("fp16") != 0 || args.arguments.count("bf16") || args.arguments.count("fp16");
  if (!precision_known) {
    const Json* bf16 = JsonAtPath(root, "bf16.enabled");
    const Json* fp16 = JsonAtPath(root, "fp16.enabled");
    const bool bf16_auto = bf16 != nullptr && bf16->is_string();
    const bool fp16_auto = fp16 != nullptr && fp16->is_string();
    const std::string why = "taken as launched with --{}: with neither --bf16 nor --fp16 the Trainer trains in fp32, which tierflow does not model "
                            "(--hf {}=true for the other)";
    if (bf16_auto) {
      fill("bf16.enabled", true, fmt::format(fmt::runtime(why), "bf16", "fp16"));
    } else if (fp16_auto) {
      fill("fp16.enabled", true, fmt::format(fmt::runtime(why), "fp16", "bf16"));
    }
  }
  if (args.hidden_size > 0) {
    const int64_t h = args.hidden_size;
    fill("zero_optimization.reduce_bucket_size", h * h, fmt::format("hidden_size x hidden_size, the model's hidden size {}", h));
    fill("zero_optimization.stage3_prefetch_bucket_size", static_cast<int64_t>(0.9 * static_cast<double>(h * h)),
         fmt::format("int(0.9 x hidden_size x hidden_size), the model's hidden size {}", h));
    fill("zero_optimization.stage3_param_persistence_threshold", 10 * h, fmt::format("10 x hidden_size, the model's hidden size {}", h));
  }
  return out;
}

const AutoValue* HfAutoValues::Find(const std::string& path) const {
  const auto it = values_.find(path);
  return it == values_.end() ? nullptr : &it->second;
}

}  // namespace tierflow::policies
