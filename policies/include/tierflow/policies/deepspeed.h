// DeepSpeed configs in and out (docs/deepspeed.md): a ZeRO-3 `ds_config.json` onto the
// zero-infinity policy and the training section of a scenario, and back. Every key of the config
// is mapped, ignored with the reason, or refused with the reason; nothing passes silently.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tierflow/core/status.h"
#include "tierflow/policies/scenario.h"

namespace tierflow::policies {

struct DeepSpeedImport {
  // Scenario keys (training.*, policy.*) and their YAML values, in the config's order; with
  // policy.name first.
  std::vector<std::pair<std::string, std::string>> sets;
  // One line per key not mapped ("ignored: zero_optimization.overlap_comm: ...") or taken at
  // DeepSpeed's default ("default: gradient_clipping absent: DeepSpeed's default 1.0").
  std::vector<std::string> notes;
};

// What the Hugging Face Trainer that launches the config knows, for its "auto" values
// (docs/deepspeed.md, "auto" values): TrainingArguments fields the user passes to it, by name
// (per_device_train_batch_size, gradient_accumulation_steps, learning_rate, adam_beta1,
// adam_beta2, adam_epsilon, weight_decay, max_grad_norm, bf16, fp16, max_steps, warmup_steps,
// warmup_ratio), the model's hidden size and the world size (0: unknown; those keys stay).
struct HfTrainerArgs {
  std::map<std::string, std::string> arguments;  // name -> value as written ("4", "2e-5", "true")
  int64_t hidden_size = 0;
  int64_t world_size = 0;
};

// InvalidArgument naming the key and the rule: not JSON, a stage other than 3, an offload device
// zero-infinity does not have (cpu, unknown), two nvme paths, fp32 training, a negative or
// non-integral size, a train_batch_size that the micro-batch and accumulation do not divide, a
// Trainer argument unknown or contradicted by the config. Each "auto" becomes what the Trainer
// would write, with a note saying from what; one it cannot resolve keeps the scenario's value.
StatusOr<DeepSpeedImport> ImportDeepSpeedConfig(const std::string& json_text, const std::string& origin,
                                                const HfTrainerArgs& trainer = {});

// The DeepSpeed config (JSON text, two-space indent) of a zero-infinity scenario: ZeRO stage 3,
// both offloads on `nvme_path`, every knob at its value or DeepSpeed's default; the scenario
// imports back to the same plan. `notes` gets what DeepSpeed has no key for (cpu_threads, the
// fidelity knobs). InvalidArgument for another policy, naming what DeepSpeed lacks.
StatusOr<std::string> ExportDeepSpeedConfig(const Scenario& s, const std::string& nvme_path, std::vector<std::string>* notes);

// The user's own config (`base_json`, which import must take) with only the keys a zero-infinity
// scenario's knobs set changed (ZeRO's buckets and distances, the offloads' buffers and
// pipelining, aio's request shape), where the scenario's value differs from what the base gives
// the key: its value, what its "auto" becomes (as import resolves it, with `trainer`; the model's
// hidden size and the ranks from `s` where 0), or DeepSpeed's default where absent. Every other key
// stays as written, "auto" included. `changed` gets one "path: old -> new" per key changed;
// `notes` what DeepSpeed has no key for.
StatusOr<std::string> ExportDeepSpeedConfigOnto(const Scenario& s, const std::string& base_json, const std::string& origin,
                                                HfTrainerArgs trainer, std::vector<std::string>* notes,
                                                std::vector<std::string>* changed);

}  // namespace tierflow::policies
