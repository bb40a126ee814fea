#include "fine_tune.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <thread>

#include "tierflow/core/files.h"
#include "tierflow/real/hf_model.h"
#include "tierflow/real/llama.h"

namespace tierflow::cli {
namespace {

namespace fs = std::filesystem;

// --save-dtype, or the input directory's dtype (config.json's dtype or torch_dtype), else bf16.
real::StDtype SaveDtype(const std::string& flag, const std::string& base_config_json) {
  std::string name = flag;
  if (name.empty() && !base_config_json.empty()) {
    const nlohmann::json j = nlohmann::json::parse(base_config_json, nullptr, /*allow_exceptions=*/false);
    for (const char* key : {"dtype", "torch_dtype"}) {
      if (j.is_object() && j.contains(key) && j[key].is_string()) name = j[key].get<std::string>() == "float32" ? "fp32" : "bf16";
    }
  }
  return name == "fp32" ? real::StDtype::kF32 : real::StDtype::kBF16;
}

}  // namespace

StatusOr<FineTune> FineTune::Prepare(FineTuneArgs args, real::TrainConfig* config) {
  if ((!args.save_dtype.empty() || args.save_every != 0) && args.save_model.empty()) {
    return InvalidArgument("--save-dtype and --save-every need --save-model DIR");
  }
  if (!args.save_dtype.empty() && args.save_dtype != "bf16" && args.save_dtype != "fp32") {
    return InvalidArgument("--save-dtype '" + args.save_dtype + "': bf16 or fp32");
  }
  FineTune f;
  if (!args.save_model.empty()) {
    TF_RETURN_IF_ERROR(real::CheckHfSaveTarget(args.save_model).WithContext("--save-model"));
    if (!args.model_dir.empty()) {
      TF_ASSIGN_OR_RETURN(f.base_config_json_, ReadFileToString((fs::path(args.model_dir) / "config.json").string(), "config.json"));
    }
    f.save_dtype_ = SaveDtype(args.save_dtype, f.base_config_json_);
  }
  // The initial weights of another system (a Hugging Face checkpoint), not our own: --init's
  // file, else the model directory's.
  if (!args.init.empty() || !args.model_dir.empty()) {
    const real::ParamLayout layout = real::MakeParamLayout(config->spec.config);
    config->initial_weights.assign(static_cast<size_t>(layout.total), 0.0f);
    if (!args.init.empty()) {
      auto file = real::SafetensorsFile::Open(args.init);
      if (!file.ok()) return file.status().WithContext("--init");
      TF_RETURN_IF_ERROR(real::LoadLlamaWeights(*file, layout, config->initial_weights.data()).WithContext("--init"));
    } else {
      TF_RETURN_IF_ERROR(real::LoadHfWeights(args.model_dir, layout, config->initial_weights.data())
                             .status()
                             .WithContext("the model's weights (model.hf_dir)"));
    }
  }
  if (args.eval_every > 0) {
    auto split = real::SplitHeldOut(config->tokens, config->batch, config->seq);
    if (!split.ok()) return split.status().WithContext("--eval-every: the corpus");
    config->tokens = std::move(split->train);
    f.eval_batch_ = std::move(split->eval);
  }
  f.args_ = std::move(args);
  f.config_ = config;
  return f;
}

real::CpuThreads& FineTune::Threads() {
  if (threads_ == nullptr) {
    const int hw = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    threads_ = std::make_unique<real::CpuThreads>(config_->threads > 0 ? config_->threads : hw);
  }
  return *threads_;
}

Status FineTune::Save(const std::vector<float>& master, const std::string& flag) {
  real::HfSaveOptions o;
  o.dtype = save_dtype_;
  o.io.threads = &Threads();
  return real::SaveHfModel(args_.save_model, config_->spec.config, base_config_json_, master.data(), o).WithContext(flag);
}

void FineTune::Eval(const std::vector<float>& master, int64_t iterations_done, bool print) {
  if (iterations_done == last_eval_) return;
  last_eval_ = iterations_done;
  const double loss = real::EvalLoss(config_->spec, master.data(), eval_batch_.inputs, eval_batch_.targets, config_->batch,
                                     config_->seq, Threads());
  evals_.push_back({{"iterations_done", iterations_done}, {"loss", loss}, {"perplexity", std::exp(loss)}});
  if (print) {
    std::printf("eval after %lld iterations: held-out loss %.6f, perplexity %.4f\n", static_cast<long long>(iterations_done), loss,
                std::exp(loss));
    std::fflush(stdout);
  }
}

real::MasterHook FineTune::Hook(bool print) {
  real::MasterHook hook;
  const int64_t save = args_.save_every, eval = args_.eval_every;
  hook.every = save > 0 && eval > 0 ? std::gcd(save, eval) : std::max(save, eval);
  if (hook.every == 0) return hook;
  hook.fn = [this, save, eval, print](int64_t done, const std::vector<float>& master) -> Status {
    if (save > 0 && done % save == 0) {
      TF_RETURN_IF_ERROR(Save(master, "--save-every"));
      if (print) std::printf("saved the model after %lld iterations to %s\n", static_cast<long long>(done), args_.save_model.c_str());
    }
    if (eval > 0 && done % eval == 0) Eval(master, done, print);
    return Status::Ok();
  };
  return hook;
}

Status FineTune::Finish(const std::vector<float>& master, int64_t iterations_done, nlohmann::ordered_json* report, bool print) {
  if (args_.eval_every > 0) {
    Eval(master, iterations_done, print);
    (*report)["eval"] = evals_;
  }
  if (!args_.save_model.empty()) {
    TF_RETURN_IF_ERROR(Save(master, "--save-model"));
    (*report)["saved_model"] = {{"dir", args_.save_model}, {"dtype", real::HfDtypeName(save_dtype_)}};
    if (print) {
      std::printf("fine-tuned model saved to %s (%s; transformers' from_pretrained loads it)\n", args_.save_model.c_str(),
                  std::string(real::HfDtypeName(save_dtype_)).c_str());
    }
  }
  return Status::Ok();
}

}  // namespace tierflow::cli
