#include "tierflow/policies/scenario.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <limits>
#include <fstream>
#include <sstream>

#include "tierflow/core/text.h"
#include "tierflow/core/units.h"
#include "tierflow/models/yaml_tree.h"

namespace tierflow::policies {
namespace {

std::string Q(const std::string& s) { return Quoted(s); }

using models::CheckYamlKeys;

StatusOr<PaperClaim> ReadPaper(const YAML::Node& node) {
  TF_RETURN_IF_ERROR(CheckYamlKeys(node, "paper", {"system", "claim", "metric", "baseline", "expected_ratio", "tolerance", "source"}));
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
  TF_RETURN_IF_ERROR(CheckYamlKeys(base, "paper.baseline", {"set"}));
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
  if (it == values_.end()) {
    NoteDefault(name, default_value ? "true" : "false");
    return default_value;
  }
  if (it->second == "true") return true;
  if (it->second == "false") return false;
  return InvalidArgument("policy." + name + ": " + Q(it->second) + " is not true or false");
}

StatusOr<int64_t> Knobs::Int(const std::string& name, int64_t default_value, int64_t lo, int64_t hi) {
  read_.insert(name);
  auto it = values_.find(name);
  if (it == values_.end()) {
    NoteDefault(name, std::to_string(default_value));
    return default_value;
  }
  return ParseInteger(it->second, "policy." + name, lo, hi);
}

StatusOr<int64_t> Knobs::CountOrAll(const std::string& name, int64_t default_value, int64_t all) {
  read_.insert(name);
  auto it = values_.find(name);
  if (it == values_.end()) {
    NoteDefault(name, std::to_string(default_value));
    return default_value;
  }
  if (it->second == "all") return all;
  return ParseInteger(it->second, "policy." + name + " (a count, or 'all')", 0, all);
}

StatusOr<int64_t> Knobs::Bytes(const std::string& name, int64_t default_value) {
  read_.insert(name);
  auto it = values_.find(name);
  if (it == values_.end()) {
    NoteDefault(name, std::to_string(default_value) + " B");
    return default_value;
  }
  auto b = ParseBytes(it->second);
  if (!b.ok()) return b.status().WithContext("policy." + name);
  return b;
}

StatusOr<double> Knobs::Number(const std::string& name, double default_value) {
  read_.insert(name);
  auto it = values_.find(name);
  if (it == values_.end()) {
    NoteDefault(name, fmt::format("{}", default_value));
    return default_value;
  }
  return ParseReal(it->second, "policy." + name, std::numeric_limits<double>::lowest(), std::numeric_limits<double>::max());
}

StatusOr<std::string> Knobs::String(const std::string& name, const std::string& default_value,
                                    const std::vector<std::string>& allowed) {
  read_.insert(name);
  auto it = values_.find(name);
  if (it == values_.end()) {
    NoteDefault(name, default_value);
    return default_value;
  }
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
  TF_ASSIGN_OR_RETURN(YAML::Node root, models::LoadYamlText(yaml, origin));
  if (!root.IsMap()) return InvalidArgument(origin + ": expected a map with model, hardware, training, policy");
  try {
    for (const auto& o : overrides) TF_RETURN_IF_ERROR(models::ApplyYamlOverride(root, o));
    TF_RETURN_IF_ERROR(CheckYamlKeys(root, origin, {"name", "description", "model", "hardware", "training", "policy", "paper"}));
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
    if (root["model"].IsMap() && root["model"]["hf_dir"] && root["model"]["hf_dir"].IsScalar()) {
      s.model_dir = root["model"]["hf_dir"].Scalar();
    }
    auto hw = models::HardwareFromYaml(root["hardware"]);
    if (!hw.ok()) return hw.status().WithContext(origin);
    s.hardware = std::move(hw).value();
    auto training = models::TrainingFromYaml(root["training"]);
    if (!training.ok()) return training.status().WithContext(origin);
    s.training = *training;
    // Learned positions end at the table's last row: a longer sequence has no position to embed.
    // (Rotary positions extrapolate; `run` refuses past max_seq for every model, as it trains.)
    if (s.model.position == models::PositionKind::kLearned && s.training.sequence_length > s.model.max_seq) {
      return InvalidArgument(origin + ": training.sequence_length " + std::to_string(s.training.sequence_length) +
                             " is above model.max_seq " + std::to_string(s.model.max_seq) +
                             ": the model's learned positions end there (its position table has max_seq rows)");
    }
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
