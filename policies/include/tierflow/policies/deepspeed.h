// DeepSpeed configs in and out (docs/deepspeed.md): a ZeRO-3 `ds_config.json` onto the
// zero-infinity policy and the training section of a scenario, and back. Every key of the config
// is mapped, ignored with the reason, or refused with the reason; nothing passes silently.
// Thread safety: pure functions.
#pragma once

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

// InvalidArgument naming the key and the rule: not JSON, a stage other than 3, an offload device
// zero-infinity does not have (cpu, unknown), two nvme paths, fp32 training, a negative or
// non-integral size, a train_batch_size that the micro-batch and accumulation do not divide.
StatusOr<DeepSpeedImport> ImportDeepSpeedConfig(const std::string& json_text, const std::string& origin);

// The DeepSpeed config (JSON text, two-space indent) of a zero-infinity scenario: ZeRO stage 3,
// both offloads on `nvme_path`, every knob at its value or DeepSpeed's default; the scenario
// imports back to the same plan. `notes` gets what DeepSpeed has no key for (cpu_threads, the
// fidelity knobs). InvalidArgument for another policy, naming what DeepSpeed lacks.
StatusOr<std::string> ExportDeepSpeedConfig(const Scenario& s, const std::string& nvme_path, std::vector<std::string>* notes);

}  // namespace tierflow::policies
