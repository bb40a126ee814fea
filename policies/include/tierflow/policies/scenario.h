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

namespace tierflow::policies {

// The most micro-steps per iteration a scenario may ask for (training.gradient_accumulation_steps).
inline constexpr int64_t kMaxMicroSteps = 1024;

struct TrainingSetup {
  int64_t micro_batch_size = 1;          // sequences per rank per micro-step
  int64_t sequence_length = 4096;
  int64_t gradient_accumulation_steps = 1;  // 1 .. kMaxMicroSteps
  int32_t data_parallel = 0;             // ranks; 0 = every GPU of the node
  bool activation_checkpointing = true;
  std::string dtype = "bf16";            // parameters and gradients on the GPU
  // "dynamic": DeepSpeed's fp16 loss scaler (initial 2^16; an overflow skips the step and halves
  // the scale). "none": gradients unscaled and every step taken, as DeepSpeed's bf16 optimizer.
  // Absent: "dynamic" for fp16, "none" for bf16.
  std::string loss_scaling = "none";
  // Clip the gradients to this global L2 norm before the update (torch's clip_grad_norm_); 0 = off.
  double gradient_clipping = 0;
  // Whether the update of a sub-group must wait for the global gradient check (the overflow check
  // and the norm over every gradient): true when the loss scale is dynamic or clipping is on.
  bool UpdateNeedsGlobalCheck() const { return loss_scaling == "dynamic" || gradient_clipping > 0; }
};

// A policy's knobs as written in the scenario; each generator reads the ones it knows with the
// typed getters, and Finish() rejects any it did not read (a misspelt knob is an error, not a
// silent default).
class Knobs {
 public:
  Knobs() = default;
  explicit Knobs(std::map<std::string, std::string> values) : values_(std::move(values)) {}

  StatusOr<bool> Bool(const std::string& name, bool default_value);
  StatusOr<int64_t> Int(const std::string& name, int64_t default_value);  // "1e9" accepted when integral
  StatusOr<int64_t> Bytes(const std::string& name, int64_t default_value);  // needs a unit
  StatusOr<double> Number(const std::string& name, double default_value);
  StatusOr<std::string> String(const std::string& name, const std::string& default_value,
                               const std::vector<std::string>& allowed);
  // Error naming the first knob no getter asked for, and the knobs `policy` knows.
  Status Finish(const std::string& policy) const;
  const std::map<std::string, std::string>& values() const { return values_; }

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> read_;
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
  // The scenario as read, --set overrides applied: plan stores it in the schedule's meta so that
  // `sim SCHEDULE` finds the same hardware without the scenario file.
  std::string yaml;
  bool has_paper = false;
  PaperClaim paper;
};

// `overrides` are "key.path=value" strings (from --set).
StatusOr<Scenario> LoadScenarioFile(const std::string& path, const std::vector<std::string>& overrides = {});
StatusOr<Scenario> LoadScenarioText(const std::string& yaml, const std::vector<std::string>& overrides = {},
                                    const std::string& origin = "scenario");

}  // namespace tierflow::policies
