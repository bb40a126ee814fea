// tierflow deepspeed import CONFIG.json --model M --hardware H [--set k=v ...] -o SCENARIO.yaml
// tierflow deepspeed export SCENARIO|SCHEDULE [--set k=v ...] [--nvme-path P | --base YOURS.json] -o CONFIG.json
// A DeepSpeed ZeRO-3 config to a zero-infinity scenario and back (policies/deepspeed.h,
// docs/deepspeed.md): every key mapped, or named with why it was ignored or refused.
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "command.h"
#include "inputs.h"
#include "tierflow/core/files.h"
#include "tierflow/policies/deepspeed.h"
#include "tierflow/policies/policy.h"
#include "tierflow/policies/scenario.h"

namespace tierflow::cli {
namespace {

struct ImportArgs {
  std::string config;
  std::string model;
  std::string hardware;
  std::string name;
  std::string output;
  std::vector<std::string> sets;
  std::vector<std::string> trainer;  // --hf NAME=VALUE
  bool json = false;
};

struct ExportArgs {
  std::string input;
  std::string output;
  std::string nvme_path = "/local_nvme";
  std::string base;                  // the user's config, edited rather than replaced
  std::vector<std::string> trainer;  // --hf NAME=VALUE, for the base's "auto" values
  std::vector<std::string> sets;
  bool json = false;
};

// --hf NAME=VALUE arguments.
StatusOr<std::map<std::string, std::string>> ParseTrainerArguments(const std::vector<std::string>& given) {
  std::map<std::string, std::string> out;
  for (const std::string& kv : given) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return InvalidArgument("--hf " + kv.substr(0, 60) + ": expected NAME=VALUE (a TrainingArguments field)");
    out[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return out;
}

// `value` as the scenario's `key` section: a preset name, or the YAML file of a full description
// (indented under the key).
StatusOr<std::string> Section(const std::string& key, const std::string& value) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(value, ec)) return key + ": {preset: " + value + "}\n";
  TF_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(value, "--" + key + " file"));
  std::string out = key + ":\n";
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    out += "  " + text.substr(at, end - at) + "\n";
    at = end + 1;
  }
  return out;
}

// The Trainer's arguments (--hf NAME=VALUE), with what the base scenario says of the model and
// the ranks.
StatusOr<policies::HfTrainerArgs> TrainerArgs(const ImportArgs& a, const policies::Scenario& base) {
  policies::HfTrainerArgs t;
  TF_ASSIGN_OR_RETURN(t.arguments, ParseTrainerArguments(a.trainer));
  t.hidden_size = base.model.hidden;
  t.world_size = base.training.data_parallel;
  return t;
}

Status RunImport(const ImportArgs& a) {
  TF_RETURN_IF_ERROR(CheckCommandPaths({{"input", a.config, PathUse::kReads}, {"--model", a.model, PathUse::kReads}, {"--hardware", a.hardware, PathUse::kReads}, {"-o", a.output, PathUse::kWrites}}));
  TF_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(a.config, "DeepSpeed config"));
  const std::string name = a.name.empty() ? std::filesystem::path(a.config).stem().string() : a.name;
  TF_ASSIGN_OR_RETURN(const std::string model, Section("model", a.model));
  TF_ASSIGN_OR_RETURN(const std::string hardware, Section("hardware", a.hardware));
  const std::string yaml = "name: " + nlohmann::json(name).dump() + "\n" + model + hardware + "training: {}\npolicy: {name: zero-infinity}\n";
  // The model and ranks first: the Trainer's "auto" bucket sizes and batch depend on them.
  TF_ASSIGN_OR_RETURN(const policies::Scenario base, policies::LoadScenarioText(yaml, a.sets, a.config));
  TF_ASSIGN_OR_RETURN(const policies::HfTrainerArgs trainer, TrainerArgs(a, base));
  TF_ASSIGN_OR_RETURN(policies::DeepSpeedImport imported, policies::ImportDeepSpeedConfig(text, a.config, trainer));
  std::vector<std::string> sets;
  for (const auto& [key, value] : imported.sets) sets.push_back(key + "=" + value);
  for (const std::string& s : a.sets) sets.push_back(s);  // the user's last: they win
  TF_ASSIGN_OR_RETURN(const policies::Scenario scenario, policies::LoadScenarioText(yaml, sets, a.config));
  // What a DeepSpeed config does not say, taken from the scenario: named, so that nothing is
  // silently assumed.
  const models::TrainingSetup& t = scenario.training;
  imported.notes.push_back("scenario: training.sequence_length " + std::to_string(t.sequence_length) +
                           " (a DeepSpeed config has none; --set training.sequence_length=N as your tokenizer's max_length), micro-batch " +
                           std::to_string(t.micro_batch_size) + ", gradient accumulation " + std::to_string(t.gradient_accumulation_steps) + ", " +
                           std::to_string(t.data_parallel) + " ranks: global batch " +
                           std::to_string(t.micro_batch_size * t.gradient_accumulation_steps * t.data_parallel) + " sequences");
  // Whether it runs: zero-infinity's planner refuses what DeepSpeed fails on at launch or in its
  // first iteration (its swap buffers, its buffer size), with the fix. Said here, not after a
  // DeepSpeed user's minutes of loading.
  const StatusOr<Schedule> planned = policies::Plan(scenario);
  std::string problem;
  if (!planned.ok()) problem = planned.status().message();
  std::string out = "# Imported from " + std::filesystem::path(a.config).filename().string() + " by `tierflow deepspeed import`.\n";
  for (const std::string& n : imported.notes) out += "# " + n + "\n";
  if (!problem.empty()) out += "# This config does not run as written: " + problem + "\n";
  out += scenario.yaml + "\n";
  TF_RETURN_IF_ERROR(WriteFileAtomically(a.output, out, "scenario"));
  if (a.json) {
    nlohmann::ordered_json j;
    j["scenario"] = a.output;
    nlohmann::ordered_json mapped = nlohmann::ordered_json::object();
    for (const auto& [key, value] : imported.sets) mapped[key] = value;
    j["mapped"] = mapped;
    j["notes"] = imported.notes;
    j["runs"] = problem.empty();
    if (!problem.empty()) j["problem"] = problem;
    std::printf("%s\n", j.dump(2).c_str());
    return Status::Ok();
  }
  for (const std::string& n : imported.notes) std::printf("%s\n", n.c_str());
  std::printf("%zu keys mapped, %zu notes -> %s\n", imported.sets.size(), imported.notes.size(), a.output.c_str());
  if (problem.empty()) {
    std::printf("next: tierflow sim %s\n", a.output.c_str());
  } else {
    std::printf("\nThis config does not run as written (zero-infinity's planner refuses what DeepSpeed fails on at launch or in its "
                "first iteration): %s\n"
                "next: tierflow tune %s (it starts by repairing this), or apply the fix with --set and import again\n",
                problem.c_str(), a.output.c_str());
  }
  return Status::Ok();
}

Status RunExport(const ExportArgs& a) {
  TF_RETURN_IF_ERROR(CheckCommandPaths({{"input", a.input, PathUse::kReads}, {"--base", a.base, PathUse::kReads}, {"-o", a.output, PathUse::kWrites}}));
  TF_ASSIGN_OR_RETURN(const PlannedInput in, LoadPlannedInput(a.input, a.sets));
  std::vector<std::string> notes, changed;
  std::string config;
  if (a.base.empty()) {
    TF_ASSIGN_OR_RETURN(config, policies::ExportDeepSpeedConfig(in.scenario, a.nvme_path, &notes));
  } else {
    TF_ASSIGN_OR_RETURN(const std::string base, ReadFileToString(a.base, "--base DeepSpeed config"));
    policies::HfTrainerArgs trainer;
    TF_ASSIGN_OR_RETURN(trainer.arguments, ParseTrainerArguments(a.trainer));
    TF_ASSIGN_OR_RETURN(config, policies::ExportDeepSpeedConfigOnto(in.scenario, base, a.base, trainer, &notes, &changed));
  }
  TF_RETURN_IF_ERROR(WriteFileAtomically(a.output, config, "DeepSpeed config"));
  if (a.json) {
    nlohmann::ordered_json j;
    j["config"] = a.output;
    if (!a.base.empty()) j["changed"] = changed;
    j["notes"] = notes;
    std::printf("%s\n", j.dump(2).c_str());
    return Status::Ok();
  }
  for (const std::string& n : notes) std::printf("%s\n", n.c_str());
  if (!a.base.empty()) {
    for (const std::string& c : changed) std::printf("changed: %s\n", c.c_str());
    std::printf("%s with %zu key%s changed for %s -> %s\n", a.base.c_str(), changed.size(), changed.size() == 1 ? "" : "s",
                in.scenario.name.c_str(), a.output.c_str());
    return Status::Ok();
  }
  std::printf("DeepSpeed config of %s (%s) -> %s\n", in.scenario.name.c_str(), in.scenario.policy.c_str(), a.output.c_str());
  return Status::Ok();
}

Command MakeDeepSpeed(CLI::App& parent) {
  CLI::App* ds = parent.add_subcommand("deepspeed", "DeepSpeed ZeRO-3 configs in (to a scenario) and out (from a zero-infinity scenario or schedule)");
  ds->require_subcommand(1);
  CLI::App* imp = ds->add_subcommand("import", "A DeepSpeed config (ds_config.json) to a zero-infinity scenario");
  auto* ia = Keep<ImportArgs>();
  imp->add_option("config", ia->config, "DeepSpeed config (JSON)")->required();
  imp->add_option("--model", ia->model, "Model preset (tierflow model --list) or model YAML file")->required();
  imp->add_option("--hardware", ia->hardware, "Hardware preset (tierflow hardware --list) or hardware YAML file")->required();
  imp->add_option("--name", ia->name, "Scenario name (default: the config file's name)");
  imp->add_option("-o,--output", ia->output, "Scenario YAML to write")->required();
  AddSetOption(imp, &ia->sets);
  imp->add_option("--hf", ia->trainer,
                  "A Hugging Face TrainingArguments value the Trainer launches with, NAME=VALUE (repeatable; e.g. "
                  "per_device_train_batch_size=4): what its \"auto\" values become")
      ->take_all();
  imp->add_flag("--json", ia->json, "Print what was mapped, the notes and whether DeepSpeed could run it as JSON");
  CLI::App* exp = ds->add_subcommand("export", "A zero-infinity scenario or schedule to a DeepSpeed config");
  auto* ea = Keep<ExportArgs>();
  exp->add_option("input", ea->input, "Scenario YAML or schedule JSON")->required();
  exp->add_option("-o,--output", ea->output, "DeepSpeed config (JSON) to write")->required();
  exp->add_option("--nvme-path", ea->nvme_path, "offload_param and offload_optimizer nvme_path (without --base)")->capture_default_str();
  exp->add_option("--base", ea->base,
                  "Your DeepSpeed config: written back with only the ZeRO, offload and aio knobs the scenario changes, every other key as it is");
  exp->add_option("--hf", ea->trainer, "With --base: a TrainingArguments value, NAME=VALUE, for its \"auto\" values (as import takes it)")
      ->take_all();
  AddSetOption(exp, &ea->sets);
  exp->add_flag("--json", ea->json, "Print the output path and notes as JSON");
  return Command{ds, [ia, ea, imp] { return imp->parsed() ? RunImport(*ia) : RunExport(*ea); }};
}

TIERFLOW_COMMAND(MakeDeepSpeed);

}  // namespace
}  // namespace tierflow::cli
