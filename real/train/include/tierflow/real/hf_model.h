// Hugging Face model directories in (`--model-dir`: models::LlmFromHfDir reads config.json,
// LoadHfWeights the weights) and out (`tierflow run --save-model`): what
// transformers.AutoModelForCausalLM.from_pretrained(DIR) loads unchanged — config.json
// (models::LlmToHfConfig) and the weights as safetensors, in one model.safetensors or in shards
// model-0000K-of-0000N.safetensors listed by model.safetensors.index.json, each under its Hugging
// Face name (a tied head is not stored, as transformers does not store it).
//
// The weights stream through the storage back-end (storage.h) in both directions: O_DIRECT where
// the file system takes it, in chunks with several in flight, each chunk converted between fp32
// and the file's dtype while the others move, so that a model loads and saves at the disk's pace
// (bench/hf_io_bench.cc measures both against fio). Nothing holds a whole file in memory.
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
#include "tierflow/real/llama.h"
#include "tierflow/real/safetensors.h"

namespace tierflow::real {

class CpuThreads;  // cpu_threads.h
class Storage;     // storage.h

// How weights move between a directory and memory.
struct HfIoOptions {
  Storage* storage = nullptr;      // null: the io_uring back-end where it runs, else posix threads
  int64_t chunk_bytes = 16 << 20;  // a multiple of kDirectAlignment
  int depth = 4;                   // chunks in flight
  bool direct = true;              // O_DIRECT where the file system takes it
  CpuThreads* threads = nullptr;   // the conversions' threads; null: one per core
};

struct HfLoadStats {
  int64_t bytes_read = 0;  // what the files gave, headers included
  int files = 0;
  bool direct = true;      // every data read went O_DIRECT
};

// Fills params[begin, end) — elements of `layout`'s flat buffer, params being all of it; end -1 is
// layout.total — from Hugging Face directory `dir`: its model.safetensors, or the shards its
// model.safetensors.index.json maps the tensors to (a shard is a plain file of the directory).
// Every file's header is read and checked first (each tensor of the layout present with its shape
// and a float dtype), then each file's bytes that the range needs are read in file order, in
// chunks, and converted to fp32 as they arrive; tensors the layout does not have are skipped.
// Errors name the index or the file, and the tensor.
StatusOr<HfLoadStats> LoadHfWeights(const std::string& dir, const ParamLayout& layout, float* params, const HfIoOptions& io = {},
                                    int64_t begin = 0, int64_t end = -1);

struct HfSaveOptions {
  StDtype dtype = StDtype::kBF16;           // kBF16, kF16 or kF32, each rounded once from fp32
  int64_t max_shard_bytes = 5'000'000'000;  // transformers' default max_shard_size, "5GB"
  HfIoOptions io;
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
