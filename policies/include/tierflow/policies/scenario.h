// A scenario: the model, the hardware, the training setup and the policy with its knobs — what
// `tierflow plan` turns into a schedule. docs/scenario-format.md documents the YAML file.
//
// Loading is strict: unknown keys, values without units where a unit is required, negative
// sizes and unknown presets are errors naming the key path. `--set key.path=value` overrides
// are applied to the YAML tree before it is read, so they obey the same rules.
//
// Thread safety: values.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tierflow/core/status.h"
#include "tierflow/models/hardware.h"
#include "tierflow/models/llm.h"
#include "tierflow/models/training.h"

namespace tierflow::policies {

// The training setup is the models' (models/training.h); scenarios read it there.
using models::kMaxMicroSteps;
using models::TrainingSetup;

// A policy's knobs as written in the scenario; each generator reads the ones it knows with the
// typed getters, and Finish() rejects any it did not read (a misspelt knob is an error, not a
// silent default).
class Knobs {
 public:
  Knobs() = default;
  explicit Knobs(std::map<std::string, std::string> values) : values_(std::move(values)) {}

  StatusOr<bool> Bool(const std::string& name, bool default_value);
  // Numbers follow core's one rule (ParseInteger, ParseReal): "1e9" is accepted when integral, and
  // the error names the range and echoes a few dozen characters of the value.
  StatusOr<int64_t> Int(const std::string& name, int64_t default_value, int64_t lo = 0, int64_t hi = INT64_MAX);
  // A count >= 0, or "all" (returned as `all`).
  StatusOr<int64_t> CountOrAll(const std::string& name, int64_t default_value, int64_t all);
  StatusOr<int64_t> Bytes(const std::string& name, int64_t default_value);  // needs a unit
  StatusOr<double> Number(const std::string& name, double default_value);
  StatusOr<std::string> String(const std::string& name, const std::string& default_value,
                               const std::vector<std::string>& allowed);
  // Error naming the first knob no getter asked for, and the knobs `policy` knows.
  Status Finish(const std::string& policy) const;
  const std::map<std::string, std::string>& values() const { return values_; }
  // Where the getters record the default they return for a knob not set, spelt as a scenario
  // would ("5", "true", "1048576 B"); copies share it, so that planning a copy fills it
  // (policies::KnobDefaults). Null (the default): nothing is recorded.
  void RecordDefaultsIn(std::map<std::string, std::string>* out) { defaults_ = out; }

 private:
  void NoteDefault(const std::string& name, std::string text) {
    if (defaults_ != nullptr) defaults_->emplace(name, std::move(text));
  }
  std::map<std::string, std::string> values_;
  std::set<std::string> read_;
  std::map<std::string, std::string>* defaults_ = nullptr;
};

// A paper's headline figure that a scenario reproduces (`paper:` in the file). `tierflow sim`
// simulates the scenario and the baseline (the scenario with `baseline_sets` applied) and
// compares ratio = metric(scenario) / metric(baseline) with expected_ratio.
struct PaperClaim {
  std::string system;                      // "IOC"
  std::string claim;                       // the headline, in words
  std::string metric;                      // iteration_s, peak_host_bytes or throughput
  std::vector<std::string> baseline_sets;  // --set overrides that turn the scenario into the baseline
  double expected_ratio = 0;               // the paper's metric(system) / metric(baseline)
  double tolerance = 0.15;                 // relative, on the ratio
  std::string source;                      // where the figure comes from
};

struct Scenario {
  std::string name;
  models::LlmConfig model;
  models::HardwareSpec hardware;
  TrainingSetup training;
  std::string policy = "zero-infinity";
  Knobs knobs;
  // The scenario as read, --set overrides applied: what tune and a paper's baseline plan again
  // with their own overrides. (A schedule file carries the model, hardware and training as typed
  // sections instead: Schedule::Sections.)
  std::string yaml;
  // The Hugging Face directory the model was read from (model.hf_dir, --model-dir), whose weights
  // a run starts from; "" otherwise. A schedule carries it as meta "model.hf_dir".
  std::string model_dir;
  bool has_paper = false;
  PaperClaim paper;
};

// `overrides` are "key.path=value" strings (from --set).
StatusOr<Scenario> LoadScenarioFile(const std::string& path, const std::vector<std::string>& overrides = {});
StatusOr<Scenario> LoadScenarioText(const std::string& yaml, const std::vector<std::string>& overrides = {},
                                    const std::string& origin = "scenario");

}  // namespace tierflow::policies
