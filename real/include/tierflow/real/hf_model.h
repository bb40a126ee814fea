// Hugging Face model directories out (`tierflow run --save-model`): what
// transformers.AutoModelForCausalLM.from_pretrained(DIR) loads unchanged — config.json
// (models::LlmToHfConfig) and the weights as safetensors, in one model.safetensors or in shards
// model-0000K-of-0000N.safetensors listed by model.safetensors.index.json, each under its Hugging
// Face name (a tied head is not stored, as transformers does not store it). Reading one back:
// models::LlmFromHfDir and LoadLlamaWeightsFromDir (safetensors.h).
//
// A save never leaves a partial directory in place of a good one: everything is written, fsynced,
// into DIR.tmp-PID beside it, which then takes DIR's place in one rename (an atomic exchange
// where DIR already holds a model, whose old files are removed after).
// Thread safety: free functions; two saves to one directory at once are the caller's to prevent.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tierflow/core/status.h"
#include "tierflow/models/llm.h"
#include "tierflow/real/safetensors.h"

namespace tierflow::real {

struct HfSaveOptions {
  StDtype dtype = StDtype::kBF16;           // kBF16, kF16 or kF32, each rounded once from fp32
  int64_t max_shard_bytes = 5'000'000'000;  // transformers' default max_shard_size, "5GB"
};

// Saves `params` (MakeParamLayout(config) order, fp32) with config.json from `base_config_json`
// (the input directory's; empty: a fresh one). `dir` may not exist yet, or must be a directory
// holding a model (a config.json) or nothing: any other directory is refused, never replaced.
// Errors name the directory and the rule.
Status SaveHfModel(const std::string& dir, const models::LlmConfig& config, std::string_view base_config_json,
                   const float* params, const HfSaveOptions& options = {});

// OK when SaveHfModel may write `dir`: it does not exist, or is a directory that is empty or holds
// a model (a config.json). What a run checks before it starts, so as not to train for nothing.
Status CheckHfSaveTarget(const std::string& dir);

// "bfloat16", "float16" or "float32": transformers' name of a dtype SaveHfModel writes.
std::string_view HfDtypeName(StDtype dtype);

}  // namespace tierflow::real
