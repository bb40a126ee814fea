// What `tierflow run` does with the model besides training it: the initial weights of a Hugging
// Face directory (--model-dir, model.hf_dir) or of --init's file, the fine-tuned model saved as a
// Hugging Face directory (--save-model, --save-every, --save-dtype), and its loss on a held-out
// batch (--eval-every). docs/executor.md has the rules.
// Thread safety: one FineTune per run, used on the run's calling thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tierflow/core/status.h"
#include "tierflow/real/cpu_threads.h"
#include "tierflow/real/dataset.h"
#include "tierflow/real/executor.h"
#include "tierflow/real/safetensors.h"

namespace tierflow::cli {

struct FineTuneArgs {
  std::string init;          // a safetensors file of the initial weights
  std::string model_dir;     // the Hugging Face directory the model was read from, or ""
  std::string save_model;    // a Hugging Face directory for the fine-tuned model, or ""
  std::string save_dtype;    // bf16 | fp32; "": the input directory's, else bf16
  int64_t save_every = 0;    // also save after every K iterations
  int64_t eval_every = 0;    // the held-out loss after every K iterations, and at the end
};

class FineTune {
 public:
  // Checks the flags and the save directory, loads the initial weights into config, and holds the
  // eval batch out of config->tokens: everything a bad flag or file could stop, before the run
  // touches a disk. Errors name the flag or file and the rule.
  static StatusOr<FineTune> Prepare(FineTuneArgs args, real::TrainConfig* config);

  // What the run calls with its master weights: saves and evaluations every K iterations (none
  // when neither --save-every nor --eval-every is given). `print`: a line each on stdout.
  real::MasterHook Hook(bool print);
  // After the run, with its final master weights: the final save and evaluation, and the report's
  // "saved_model" and "eval" entries.
  Status Finish(const std::vector<float>& master, int64_t iterations_done, nlohmann::ordered_json* report, bool print);

 private:
  Status Save(const std::vector<float>& master, const std::string& flag);
  void Eval(const std::vector<float>& master, int64_t iterations_done, bool print);
  // The saves' conversions and the evaluations' math: the run's thread count, started once.
  real::CpuThreads& Threads();

  FineTuneArgs args_;
  const real::TrainConfig* config_ = nullptr;
  std::string base_config_json_;  // the input directory's config.json, which a saved one extends
  real::StDtype save_dtype_ = real::StDtype::kBF16;
  real::TokenBatch eval_batch_;
  int64_t last_eval_ = -1;        // iterations done at the last evaluation
  nlohmann::ordered_json evals_ = nlohmann::ordered_json::array();
  std::unique_ptr<real::CpuThreads> threads_;  // made at the first save or evaluation
};

}  // namespace tierflow::cli
