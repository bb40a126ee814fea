// tierflow deepspeed import CONFIG.json --model M --hardware H [--set k=v ...] -o SCENARIO.yaml
// tierflow deepspeed export SCENARIO|SCHEDULE [--set k=v ...] [--nvme-path P] -o CONFIG.json
// A DeepSpeed ZeRO-3 config to a zero-infinity scenario and back (policies/deepspeed.h,
// docs/deepspeed.md): every key mapped, or named with why it was ignored or refused.
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "command.h"
#include "inputs.h"
#include "tierflow/core/files.h"
#include "tierflow/policies/deepspeed.h"
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
  bool json = false;
};

struct ExportArgs {
  std::string input;
  std::string output;
  std::string nvme_path = "/local_nvme";
  std::vector<std::string> sets;
  bool json = false;
};

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

Status RunImport(const ImportArgs& a) {
  TF_RETURN_IF_ERROR(RefuseOutputOverInput(a.output, a.config, "-o"));
  TF_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(a.config, "DeepSpeed config"));
  TF_ASSIGN_OR_RETURN(const policies::DeepSpeedImport imported, policies::ImportDeepSpeedConfig(text, a.config));
  const std::string name = a.name.empty() ? std::filesystem::path(a.config).stem().string() : a.name;
  TF_ASSIGN_OR_RETURN(const std::string model, Section("model", a.model));
  TF_ASSIGN_OR_RETURN(const std::string hardware, Section("hardware", a.hardware));
  const std::string yaml = "name: " + nlohmann::json(name).dump() + "\n" + model + hardware + "training: {}\npolicy: {name: zero-infinity}\n";
  std::vector<std::string> sets;
  for (const auto& [key, value] : imported.sets) sets.push_back(key + "=" + value);
  for (const std::string& s : a.sets) sets.push_back(s);  // the user's last: they win
  TF_ASSIGN_OR_RETURN(const policies::Scenario scenario, policies::LoadScenarioText(yaml, sets, a.config));
  std::string out = "# Imported from " + std::filesystem::path(a.config).filename().string() + " by `tierflow deepspeed import`.\n";
  for (const std::string& n : imported.notes) out += "# " + n + "\n";
  out += scenario.yaml + "\n";
  TF_RETURN_IF_ERROR(WriteFileAtomically(a.output, out, "scenario"));
  if (a.json) {
    nlohmann::ordered_json j;
    j["scenario"] = a.output;
    nlohmann::ordered_json mapped = nlohmann::ordered_json::object();
    for (const auto& [key, value] : imported.sets) mapped[key] = value;
    j["mapped"] = mapped;
    j["notes"] = imported.notes;
    std::printf("%s\n", j.dump(2).c_str());
    return Status::Ok();
  }
  for (const std::string& n : imported.notes) std::printf("%s\n", n.c_str());
  std::printf("%zu keys mapped, %zu notes -> %s (tierflow sim %s)\n", imported.sets.size(), imported.notes.size(), a.output.c_str(),
              a.output.c_str());
  return Status::Ok();
}

Status RunExport(const ExportArgs& a) {
  TF_RETURN_IF_ERROR(RefuseOutputOverInput(a.output, a.input, "-o"));
  TF_ASSIGN_OR_RETURN(const PlannedInput in, LoadPlannedInput(a.input, a.sets));
  std::vector<std::string> notes;
  TF_ASSIGN_OR_RETURN(const std::string config, policies::ExportDeepSpeedConfig(in.scenario, a.nvme_path, &notes));
  TF_RETURN_IF_ERROR(WriteFileAtomically(a.output, config, "DeepSpeed config"));
  if (a.json) {
    nlohmann::ordered_json j;
    j["config"] = a.output;
    j["notes"] = notes;
    std::printf("%s\n", j.dump(2).c_str());
    return Status::Ok();
  }
  for (const std::string& n : notes) std::printf("%s\n", n.c_str());
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
  imp->add_flag("--json", ia->json, "Print what was mapped and the notes as JSON");
  CLI::App* exp = ds->add_subcommand("export", "A zero-infinity scenario or schedule to a DeepSpeed config");
  auto* ea = Keep<ExportArgs>();
  exp->add_option("input", ea->input, "Scenario YAML or schedule JSON")->required();
  exp->add_option("-o,--output", ea->output, "DeepSpeed config (JSON) to write")->required();
  exp->add_option("--nvme-path", ea->nvme_path, "offload_param and offload_optimizer nvme_path")->capture_default_str();
  AddSetOption(exp, &ea->sets);
  exp->add_flag("--json", ea->json, "Print the output path and notes as JSON");
  return Command{ds, [ia, ea, imp] { return imp->parsed() ? RunImport(*ia) : RunExport(*ea); }};
}

TIERFLOW_COMMAND(MakeDeepSpeed);

}  // namespace
}  // namespace tierflow::cli
