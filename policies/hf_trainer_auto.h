// What the Hugging Face Trainer writes in place of a DeepSpeed config's "auto" values
// (transformers' HfTrainerDeepSpeedConfig: trainer_config_process and trainer_config_finalize),
// so that `deepspeed import` resolves them as a launch would and says what it took.
//
// Each value comes from a TrainingArguments field: the one the user gives (--hf NAME=VALUE), else
// the one the config's own explicit keys imply (the Trainer refuses a config whose explicit value
// disagrees with its argument, so `"gradient_accumulation_steps": 4` means the Trainer was given
// 4), else the Trainer's default. The bucket sizes come from the model's hidden size, the batch
// from the world size.
//
// Thread safety: values.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "tierflow/core/status.h"
#include "tierflow/policies/deepspeed.h"

namespace tierflow::policies {

// The value at a dotted config path ("zero_optimization.offload_param.buffer_count"; a list's
// element as "optimizer.params.betas.0"), or null.
const nlohmann::ordered_json* JsonAtPath(const nlohmann::ordered_json& root, const std::string& path);

struct AutoValue {
  nlohmann::ordered_json value;
  std::string from;  // where it comes from, for the note: "per_device_train_batch_size 8, the Trainer's default"
};

class HfAutoValues {
 public:
  // Errors: an unknown or malformed --hf argument; one the config's explicit value contradicts
  // (the Trainer's own "mismatch" error).
  static StatusOr<HfAutoValues> Make(const nlohmann::ordered_json& root, const HfTrainerArgs& args);
  // What "auto" at `path` ("zero_optimization.reduce_bucket_size") becomes; null when the Trainer
  // fills it from what an import cannot know (the step count without --hf max_steps).
  const AutoValue* Find(const std::string& path) const;

 private:
  std::map<std::string, AutoValue> values_;
};

}  // namespace tierflow::policies
