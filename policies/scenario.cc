#include "tierflow/policies/scenario.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "tierflow/core/units.h"

namespace tierflow::policies {
namespace {

std::string Q(const std::string& s) { return "'" + s + "'"; }

// Applies one "a.b.c=value" override to the tree, creating maps on the way.
Status ApplyOverride(YAML::Node root, const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    return InvalidArgument("--set " + Q(text) + ": expected key.path=value");
  }
  const std::string path = text.substr(0, eq);
  const std::string value = text.substr(eq + 1);
  std::vector<std::string> keys;
  std::stringstream ss(path);
  for (std::string k; std::getline(ss, k, '.');) {
    if (k.empty()) return InvalidArgument("--set " + Q(text) + ": empty key in path " + Q(path));
    keys.push_back(k);
  }
  // yaml-cpp's operator[] on a temporary is awkward; walk with explicit nodes.
  std::vector<YAML::Node> chain{root};
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    YAML::Node next = chain.back()[keys[i]];
    if (next.IsDefined() && !next.IsNull() && !next.IsMap()) {
      return InvalidArgument("--set " + Q(text) + ": " + Q(keys[i]) + " is not a section");
    }
    if (!next.IsDefined() || next.IsNull()) {
      chain.back()[keys[i]] = YAML::Node(YAML::NodeType::Map);
      next = chain.back()[keys[i]];
    }
    chain.push_back(next);
  }
  chain.back()[keys.back()] = YAML::Load(value.empty() ? "''" : value);
  return Status::Ok();
}

Status CheckKeys(const YAML::Node& node, const std::string& where, std::initializer_list<const char*> keys) {
  if (!node.IsMap()) return InvalidArgument(where + ": expected a map");
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string k = it->first.as<std::string>();
    bool known = false;
    for (const char* allowed : keys) known |= (k == allowed);
    if (!known) {
      std::string list;
      for (const char* allowed : keys) list += (list.empty() ? "" : ", ") + std::string(allowed);
      return InvalidArgument(where + ": unknown key " + Q(k) + " (known: " + list + ")");
    }
  }
  return Status::Ok();
}

StatusOr<int64_t> PositiveInt(const YAML::Node& node, const std::string& where, bool allow_zero = false) {
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
  return static_cast<int64_t>(v);
}

StatusOr<bool> Boolean(const YAML::Node& node, const std::string& where) {
  try {
    return node.as<bool>();
  } catch (const YAML::Exception&) {
    return InvalidArgument(where + ": " + Q(node.IsScalar() ? node.Scalar() : "?") + " is not true or false");
  }
}

StatusOr<TrainingSetup> ReadTraining(const YAML::Node& node) {
  TrainingSetup t;
  if (!node.IsDefined() || node.IsNull()) return t;
  TF_RETURN_IF_ERROR(CheckKeys(node, "training",
                               {"micro_batch_size", "sequence_length", "gradient_accumulation_steps",
                                "data_parallel", "activation_checkpointing", "dtype", "loss_scaling",
                                "gradient_clipping"}));
  if (node["micro_batch_size"]) {
    TF_ASSIGN_OR_RETURN(t.micro_batch_size, PositiveInt(node["micro_batch_size"], "training.micro_batch_size"));
  }
  if (node["sequence_length"]) {
    TF_ASSIGN_OR_RETURN(t.sequence_length, PositiveInt(node["sequence_length"], "training.sequence_length"));
  }
  if (node["gradient_accumulation_steps"]) {
    TF_ASSIGN_OR_RETURN(t.gradient_accumulation_steps,
                        PositiveInt(node["gradient_accumulation_steps"], "training.gradient_accumulation_steps"));
    // Every micro-step is its own forward and backward in the schedule's task graph.
    if (t.gradient_accumulation_steps > kMaxMicroSteps) {
      return InvalidArgument("training.gradient_accumulation_steps: " + std::to_string(t.gradient_accumulation_steps) +
                             " is above " + std::to_string(kMaxMicroSteps) + " (each micro-step is a forward and backward in the schedule)");
    }
  }
  if (node["data_parallel"]) {
    TF_ASSIGN_OR_RETURN(int64_t dp, PositiveInt(node["data_parallel"], "training.data_parallel", true));
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
  return t;
}

StatusOr<PaperClaim> ReadPaper(const YAML::Node& node) {
  TF_RETURN_IF_ERROR(CheckKeys(node, "paper", {"system", "claim", "metric", "baseline", "expected_ratio", "tolerance", "source"}));
  PaperClaim p;
  for (const char* key : {"system", "claim", "metric", "expected_ratio", "source"}) {
    if (!node[key]) return InvalidArgument(std::string("paper: missing key '") + key + "'");
  }
  p.system = node["system"].as<std::string>();
  p.claim = node["claim"].as<std::string>();
  p.source = node["source"].as<std::string>();
  p.metric = node["metric"].as<std::string>();
  if (p.metric != "iteration_s" && p.metric != "peak_host_bytes" && p.metric != "throughput") {
    return InvalidArgument("paper.metric: " + Q(p.metric) + " (iteration_s, peak_host_bytes or throughput)");
  }
  try {
    p.expected_ratio = node["expected_ratio"].as<double>();
  } catch (const YAML::Exception&) {
    return InvalidArgument("paper.expected_ratio: " + Q(node["expected_ratio"].Scalar()) + " is not a number");
  }
  if (!(p.expected_ratio > 0)) return InvalidArgument("paper.expected_ratio must be > 0");
  if (node["tolerance"]) {
    try {
      p.tolerance = node["tolerance"].as<double>();
    } catch (const YAML::Exception&) {
      return InvalidArgument("paper.tolerance: " + Q(node["tolerance"].Scalar()) + " is not a number");
    }
    if (!(p.tolerance > 0 && p.tolerance < 1)) return InvalidArgument("paper.tolerance must be in (0, 1)");
  }
  const YAML::Node base = node["baseline"];
  if (!base || !base.IsMap()) return InvalidArgument("paper.baseline: expected a map with 'set: [key.path=value, ...]'");
  TF_RETURN_IF_ERROR(CheckKeys(base, "paper.baseline", {"set"}));
  const YAML::Node sets = base["set"];
  if (!sets || !sets.IsSequence() || sets.size() == 0) {
    return InvalidArgument("paper.baseline.set: expected a non-empty list of key.path=value");
  }
  for (const auto& v : sets) p.baseline_sets.push_back(v.as<std::string>());
  return p;
}

}  // namespace

StatusOr<bool> Knobs::Bool(const std::string& name, bool default_value) {
  read_.insert(name);
  auto it = values_.find(name);
  if (it == values_.end()) return default_value;
  if (it->second == "true") return true;
  if (it->second == "false") return false;
  return InvalidArgument("policy." + name + ": " + Q(it->second) + " is not true or false");
}

StatusOr<int64_t> Knobs::Int(const std::string& name, int64_t default_value) {
  read_.insert(name);
  auto it = values_.find(name);
  if (it == values_.end()) return default_value;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end != '\0' || v != std::floor(v) || !std::isfinite(v)) {
    return InvalidArgument("policy." + name + ": " + Q(it->second) + " is not an integer");
  }
  if (v < 0) return InvalidArgument("policy." + name + ": " + Q(it->second) + " must be >= 0");
  return static_cast<int64_t>(v);
}

StatusOr<int64_t> Knobs::Bytes(const std::string& name, int64_t default_value) {
  read_.insert(name);
  auto it = values_.find(name);
  if (it == values_.end()) return default_value;
  auto b = ParseBytes(it->second);
  if (!b.ok()) return b.status().WithContext("policy." + name);
  return b;
}

StatusOr<double> Knobs::Number(const std::string& name, double default_value) {
  read_.insert(name);
  auto it = values_.find(name);
  if (it == values_.end()) return default_value;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end != '\0' || !std::isfinite(v)) {
    return InvalidArgument("policy." + name + ": " + Q(it->second) + " is not a number");
  }
  return v;
}

StatusOr<std::string> Knobs::String(const std::string& name, const std::string& default_value,
                                    const std::vector<std::string>& allowed) {
  read_.insert(name);
  auto it = values_.find(name);
  if (it == values_.end()) return default_value;
  for (const auto& a : allowed) {
    if (a == it->second) return it->second;
  }
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  return InvalidArgument("policy." + name + ": " + Q(it->second) + " is not one of " + list);
}

Status Knobs::Finish(const std::string& policy) const {
  for (const auto& [k, v] : values_) {
    if (!read_.count(k)) {
      std::string list;
      for (const auto& r : read_) list += (list.empty() ? "" : ", ") + r;
      return InvalidArgument("policy." + k + ": unknown knob for policy " + Q(policy) + " (known: " + list + ")");
    }
  }
  return Status::Ok();
}

StatusOr<Scenario> LoadScenarioText(const std::string& yaml, const std::vector<std::string>& overrides,
                                    const std::string& origin) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(origin + ": not valid YAML: " + e.what());
  }
  if (!root.IsMap()) return InvalidArgument(origin + ": expected a map with model, hardware, training, policy");
  try {
    for (const auto& o : overrides) TF_RETURN_IF_ERROR(ApplyOverride(root, o));
    TF_RETURN_IF_ERROR(CheckKeys(root, origin, {"name", "description", "model", "hardware", "training", "policy", "paper"}));
    Scenario s;
    s.name = root["name"] ? root["name"].as<std::string>() : origin;
    YAML::Emitter emitter;
    emitter << root;
    s.yaml = emitter.c_str();
    if (!root["model"]) return InvalidArgument(origin + ": missing key 'model'");
    if (!root["hardware"]) return InvalidArgument(origin + ": missing key 'hardware'");
    auto model = models::LlmFromYaml(root["model"]);
    if (!model.ok()) return model.status().WithContext(origin);
    s.model = std::move(model).value();
    auto hw = models::HardwareFromYaml(root["hardware"]);
    if (!hw.ok()) return hw.status().WithContext(origin);
    s.hardware = std::move(hw).value();
    auto training = ReadTraining(root["training"]);
    if (!training.ok()) return training.status().WithContext(origin);
    s.training = *training;
    if (s.training.data_parallel == 0) s.training.data_parallel = s.hardware.node.gpu_count;
    if (s.training.data_parallel > s.hardware.node.gpu_count * s.hardware.nodes) {
      return InvalidArgument(origin + ": training.data_parallel " + std::to_string(s.training.data_parallel) +
                             " exceeds the " + std::to_string(s.hardware.node.gpu_count * s.hardware.nodes) +
                             " GPUs of the hardware");
    }
    const YAML::Node policy = root["policy"];
    std::map<std::string, std::string> knobs;
    if (policy.IsDefined() && !policy.IsNull()) {
      if (!policy.IsMap()) return InvalidArgument(origin + ": policy: expected a map with 'name' and knobs");
      for (auto it = policy.begin(); it != policy.end(); ++it) {
        const std::string k = it->first.as<std::string>();
        if (it->second.IsNull() && k != "name") continue;  // null: the knob is unset (its default)
        if (!it->second.IsScalar()) return InvalidArgument(origin + ": policy." + k + ": expected a single value");
        if (k == "name") s.policy = it->second.as<std::string>();
        else knobs[k] = it->second.Scalar();
      }
    }
    s.knobs = Knobs(std::move(knobs));
    if (root["paper"] && !root["paper"].IsNull()) {
      auto paper = ReadPaper(root["paper"]);
      if (!paper.ok()) return paper.status().WithContext(origin);
      s.paper = std::move(paper).value();
      s.has_paper = true;
    }
    return s;
  } catch (const YAML::Exception& e) {
    return InvalidArgument(origin + ": " + e.what());
  }
}

StatusOr<Scenario> LoadScenarioFile(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) return NotFound("scenario file '" + path + "' cannot be opened");
  std::stringstream ss;
  ss << in.rdbuf();
  return LoadScenarioText(ss.str(), overrides, path);
}

}  // namespace tierflow::policies
