// `tierflow calibrate INPUT... [-o profile.yaml] [--base PRESET|FILE.yaml] [--json] [--allow-refused]`:
// fits the performance models from trace records (files, or directories of *.jsonl) and fio
// JSON (`nvmeK=FILE.json`, or a .json file for nvme0), prints each fit (model, outcome,
// parameters, samples, residuals, data range) and writes the profile (docs/calibration.md).
// Any refused fit fails the command and writes nothing, unless --allow-refused.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "command.h"
#include "tierflow/core/files.h"
#include "inputs.h"
#include "tierflow/core/trace_record.h"
#include "tierflow/models/hardware.h"
#include "tierflow/calibrate/calibrate.h"
#include "tierflow/calibrate/fio.h"

namespace tierflow::cli {
namespace {

struct CalibrateArgs {
  std::vector<std::string> inputs;
  std::string output;
  std::string base = "cpu-host";
  bool json = false;
  bool allow_refused = false;
};

namespace fs = std::filesystem;

struct Inputs {
  std::vector<TraceRecord> records;
  std::vector<calibrate::DiskSample> disk_samples;
  int64_t trace_files = 0;
  int64_t fio_files = 0;
};

Status AddTraceFile(const std::string& path, Inputs* in) {
  TF_ASSIGN_OR_RETURN(std::vector<TraceRecord> records, ReadTraceFile(path));
  in->records.insert(in->records.end(), records.begin(), records.end());
  ++in->trace_files;
  return Status::Ok();
}

Status AddFioFile(const std::string& path, int32_t device, Inputs* in) {
  TF_ASSIGN_OR_RETURN(std::vector<calibrate::DiskSample> samples, calibrate::ReadFioFile(path, device));
  in->disk_samples.insert(in->disk_samples.end(), samples.begin(), samples.end());
  ++in->fio_files;
  return Status::Ok();
}

// `nvmeK=FILE.json`: fio output of disk K.
const std::regex& DeviceFileArg() {
  static const std::regex kDeviceFile("nvme([0-9]+)=(.+)");
  return kDeviceFile;
}

// The file or directory an input argument names.
std::string InputPath(const std::string& arg) {
  std::smatch m;
  return std::regex_match(arg, m, DeviceFileArg()) ? m[2].str() : arg;
}

StatusOr<Inputs> LoadInputs(const std::vector<std::string>& args) {
  Inputs in;
  for (const std::string& arg : args) {
    std::smatch m;
    if (std::regex_match(arg, m, DeviceFileArg())) {
      TF_RETURN_IF_ERROR(AddFioFile(m[2].str(), std::stoi(m[1].str()), &in));
      continue;
    }
    std::error_code ec;
    if (fs::is_directory(arg, ec)) {
      std::vector<std::string> files;
      for (const auto& entry : fs::directory_iterator(arg, ec)) {
        if (entry.is_regular_file() && entry.path().extension() == ".jsonl") files.push_back(entry.path().string());
      }
      if (ec) return IoError("calibrate: cannot list directory '" + arg + "': " + ec.message());
      if (files.empty()) return InvalidArgument("calibrate: directory '" + arg + "' holds no *.jsonl trace files");
      std::sort(files.begin(), files.end());
      for (const std::string& f : files) TF_RETURN_IF_ERROR(AddTraceFile(f, &in));
      continue;
    }
    if (arg.ends_with(".json")) {
      TF_RETURN_IF_ERROR(AddFioFile(arg, 0, &in));  // a plain .json is fio output for nvme0
      continue;
    }
    TF_RETURN_IF_ERROR(AddTraceFile(arg, &in));
  }
  return in;
}

StatusOr<models::HardwareSpec> LoadBase(const std::string& base) {
  if (base.ends_with(".yaml") || base.ends_with(".yml") || base.find('/') != std::string::npos) {
    auto hw = LoadHardwareFile(base);
    if (!hw.ok()) return hw.status().WithContext("--base");
    return hw;
  }
  auto hw = models::HardwarePreset(base);
  if (!hw.ok()) return hw.status().WithContext("--base");
  return hw;
}

nlohmann::ordered_json ToJson(const calibrate::Calibration& cal, const Inputs& in, const std::string& base,
                              const std::string& written) {
  nlohmann::ordered_json j;
  j["records"] = in.records.size();
  j["fio_samples"] = in.disk_samples.size();
  j["base"] = base;
  nlohmann::ordered_json fits = nlohmann::ordered_json::array();
  for (const calibrate::FitReport& f : cal.fits) {
    nlohmann::ordered_json params = nlohmann::ordered_json::array();
    for (const calibrate::FitParameter& p : f.params) {
      params.push_back({{"name", p.name},
                        {"value", p.value},
                        {"unit", p.unit},
                        {"rel_std_error", p.rel_std_error},
                        {"written", p.written}});
    }
    fits.push_back({{"model", f.model},
                    {"outcome", std::string(calibrate::FitOutcomeName(f.outcome))},
                    {"reason", f.reason},
                    {"note", f.note},
                    {"params", params},
                    {"samples", f.samples},
                    {"rms_rel_residual", f.rms_rel_residual},
                    {"max_rel_residual", f.max_rel_residual},
                    {"condition_number", f.condition_number},
                    {"data_range", f.data_range}});
  }
  j["fits"] = fits;
  j["notes"] = cal.notes;
  j["profile"] = written.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(written);
  return j;
}

std::string Pct(double fraction) {
  if (!std::isfinite(fraction)) return "inf";
  return fmt::format("{:.1f} %", fraction * 100);
}

void PrintTable(const calibrate::Calibration& cal, const Inputs& in, const std::string& base) {
  fmt::print("# tierflow calibrate: {} trace records from {} file(s), {} fio samples from {} file(s); base {}\n",
             in.records.size(), in.trace_files, in.disk_samples.size(), in.fio_files, base);
  fmt::print(
      "# parameters: value ± relative standard error; * = reported, not written; rms/max = relative residuals\n");
  fmt::print("{:<18} {:<8} {:<58} {:>7} {:>8} {:>8}  {}\n", "model", "outcome", "parameters", "samples", "rms", "max",
             "data");
  for (const calibrate::FitReport& f : cal.fits) {
    std::string params;
    for (const calibrate::FitParameter& p : f.params) {
      if (!params.empty()) params += ", ";
      params +=
          fmt::format("{}{} {} ±{}", p.name, p.written ? "" : "*", calibrate::FormatParameter(p), Pct(p.rel_std_error));
    }
    if (f.outcome == calibrate::FitOutcome::kNoData) {
      fmt::print("{:<18} {:<8} {:<58}\n", f.model, calibrate::FitOutcomeName(f.outcome), "- (base kept)");
      continue;
    }
    fmt::print("{:<18} {:<8} {:<58} {:>7} {:>8} {:>8}  {}\n", f.model, calibrate::FitOutcomeName(f.outcome),
               params.empty() ? "-" : params, f.samples, f.params.empty() ? "-" : Pct(f.rms_rel_residual),
               f.params.empty() ? "-" : Pct(f.max_rel_residual), f.data_range);
  }
  bool header = false;
  for (const calibrate::FitReport& f : cal.fits) {
    if (f.outcome == calibrate::FitOutcome::kFitted && f.note.empty()) continue;
    if (f.outcome == calibrate::FitOutcome::kNoData) continue;
    if (!header) fmt::print("\n");
    header = true;
    fmt::print("  {}\n",
               f.outcome == calibrate::FitOutcome::kRefused ? "refused " + f.reason : f.model + ": " + f.note);
  }
  for (const std::string& n : cal.notes) fmt::print("  note: {}\n", n);
}

Status Run(const CalibrateArgs& a) {
  if (a.inputs.empty()) return InvalidArgument("calibrate: give at least one trace file, directory or fio JSON");
  std::vector<CommandPath> paths = {{"-o", a.output, PathUse::kWrites}, {"--base", a.base, PathUse::kReads}};
  for (const std::string& input : a.inputs) paths.push_back({"input", InputPath(input), PathUse::kReads});
  TF_RETURN_IF_ERROR(CheckCommandPaths(paths));
  TF_ASSIGN_OR_RETURN(models::HardwareSpec base, LoadBase(a.base));
  TF_ASSIGN_OR_RETURN(Inputs in, LoadInputs(a.inputs));
  // The simulator's own records measure nothing: a profile fitted to them would only give back
  // the hardware file they were simulated on.
  const int64_t measured = std::count_if(in.records.begin(), in.records.end(), [](const TraceRecord& r) { return r.source != "sim"; });
  if (measured == 0 && in.disk_samples.empty()) {
    return InvalidArgument("calibrate: the inputs hold no measured records (" + std::to_string(in.records.size()) +
                           " records, all from the simulator) and no fio output: give the records of probes "
                           "(tierflow probe all) or of real runs (tierflow run --records)");
  }
  TF_ASSIGN_OR_RETURN(calibrate::Calibration cal, calibrate::Calibrate(in.records, in.disk_samples, base));
  const std::vector<const calibrate::FitReport*> refused = calibrate::RefusedFits(cal);
  const bool write = !a.output.empty() && (refused.empty() || a.allow_refused);
  if (write) {
    std::string text = fmt::format("# tierflow calibrate: {} trace records, {} fio samples, base '{}'\n",
                                   in.records.size(), in.disk_samples.size(), a.base);
    text +=
        "# fit                  outcome  parameters (± relative standard error); samples, rms/max relative residual; "
        "data\n";
    for (const calibrate::FitReport& f : cal.fits) text += "# " + calibrate::FitSummary(f) + "\n";
    for (const std::string& n : cal.notes) text += "# note: " + n + "\n";
    text += models::HardwareToYaml(cal.profile);
    TF_RETURN_IF_ERROR(WriteFileAtomically(a.output, text, "profile"));
  }
  if (a.json) {
    fmt::print("{}\n", ToJson(cal, in, a.base, write ? a.output : "").dump(1));
  } else {
    PrintTable(cal, in, a.base);
    if (write) fmt::print("wrote {}\n", a.output);
  }
  if (!refused.empty() && !a.allow_refused) {
    std::string list;
    for (const calibrate::FitReport* f : refused) list += (list.empty() ? "" : " | ") + f->reason;
    return FailedPrecondition(
        fmt::format("{} fit{} refused, nothing written (--allow-refused writes the profile with the "
                    "base's values for them): {}",
                    refused.size(), refused.size() == 1 ? "" : "s", list));
  }
  return Status::Ok();
}


Command MakeCalibrate(CLI::App& parent) {
  auto* a = Keep<CalibrateArgs>();
  CLI::App* app = parent.add_subcommand("calibrate", "Fit the performance models from trace records and fio output");
  app->add_option("inputs", a->inputs,
                  "Trace files (.jsonl), directories of *.jsonl, fio JSON (nvmeK=FILE.json, or FILE.json for nvme0)")
      ->required();
  app->add_option("-o,--output", a->output, "Write the calibrated hardware profile (YAML) here");
  app->add_option("--base", a->base,
                  "Hardware whose unfitted numbers are kept: a preset or a YAML file (default cpu-host)");
  app->add_flag("--json", a->json, "Print the fit reports as JSON");
  app->add_flag("--allow-refused", a->allow_refused,
                "Write the profile even if fits were refused (their base values stay)");
  return Command{app, [a] { return Run(*a); }};
}

TIERFLOW_COMMAND(MakeCalibrate);

}  // namespace
}  // namespace tierflow::cli
