#include "inputs.h"

#include "command.h"

#include <cstdlib>
#include <map>

#include <fstream>
#include <sstream>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <cstdio>

#include "tierflow/models/training.h"
#include "tierflow/models/yaml_tree.h"
#include "tierflow/policies/policy.h"
#include "tierflow/core/files.h"
#include "tierflow/real/collective.h"
#include "tierflow/real/dataset.h"
#include "tierflow/real/tokenizer.h"

namespace tierflow::cli {
namespace {
double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

void AddSetOption(CLI::App* app, std::vector<std::string>* sets) {
  app->add_option("--set", *sets, "Override a scenario value: key.path=value (repeatable)")->take_all();
  std::string* model_dir = Keep<std::string>();
  app->add_option("--model-dir", *model_dir,
                  "The model of a Hugging Face directory (its config.json; run starts from its weights): the scenario's "
                  "model becomes {hf_dir: DIR}, before any --set");
  app->parse_complete_callback([sets, model_dir] {
    if (model_dir->empty()) return;
    YAML::Emitter e;
    e << YAML::Flow << YAML::BeginMap << YAML::Key << "hf_dir" << YAML::Value << YAML::DoubleQuoted << *model_dir
      << YAML::EndMap;
    sets->insert(sets->begin(), std::string(kModelDirSet) + e.c_str());
  });
}

StatusOr<policies::Scenario> ScenarioOfSchedule(const Schedule& schedule, const std::string& path, const std::vector<std::string>& sets) {
  const Schedule::Sections& sections = schedule.sections;
  for (const auto& [key, text] : {std::pair<const char*, const std::string*>{"model", &sections.model}, {"hardware", &sections.hardware}}) {
    if (text->empty()) {
      return InvalidArgument(path + ": the schedule has no '" + key + "' section, so what it trains on is unknown " +
                             "(plan it with this tierflow, or add the section: docs/schedule-format.md)");
    }
  }
  policies::Scenario s;
  s.name = schedule.name;
  std::map<std::string, std::string> knobs;  // the planner writes each knob set as meta "policy.<knob>"
  for (const auto& [k, v] : schedule.meta) {
    if (k == "policy") s.policy = v;
    if (k == "model.hf_dir") s.model_dir = v;
    if (k.rfind("policy.", 0) == 0) knobs[k.substr(7)] = v;
  }
  s.knobs = policies::Knobs(std::move(knobs));
  try {
    auto model = models::LlmFromYaml(YAML::Load(sections.model));
    if (!model.ok()) return model.status().WithContext(path);
    s.model = std::move(model).value();
    YAML::Node hardware = YAML::Load(sections.hardware);
    for (const auto& set : sets) {
      if (set.rfind(kModelDirSet, 0) == 0) {
        return InvalidArgument("--model-dir: " + path + " is a schedule, already planned for its model; give --model-dir with a scenario");
      }
      if (set.rfind("hardware.", 0) != 0) {
        return InvalidArgument("--set " + set + ": a schedule file is already planned; only hardware.* can be overridden");
      }
      TF_RETURN_IF_ERROR(models::ApplyYamlOverride(hardware, set.substr(std::string("hardware.").size())));
    }
    auto hw = models::HardwareFromYaml(hardware);
    if (!hw.ok()) return hw.status().WithContext(path);
    s.hardware = std::move(hw).value();
    auto training = models::TrainingFromYaml(sections.training.empty() ? YAML::Node() : YAML::Load(sections.training));
    if (!training.ok()) return training.status().WithContext(path);
    s.training = std::move(training).value();
  } catch (const YAML::Exception& e) {
    return InvalidArgument(path + ": " + e.what());
  }
  if (s.training.data_parallel == 0) s.training.data_parallel = s.hardware.node.gpu_count;
  if (s.training.data_parallel > s.hardware.node.gpu_count * s.hardware.nodes) {  // after any hardware.* override
    return InvalidArgument(path + ": training.data_parallel " + std::to_string(s.training.data_parallel) + " exceeds the " +
                           std::to_string(s.hardware.node.gpu_count * s.hardware.nodes) + " GPUs of the hardware");
  }
  return s;
}

std::string AutoCollectiveBackend() {
  const bool under_mpirun = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
                            std::getenv("PMIX_RANK") != nullptr;
  return under_mpirun && real::CollectiveBackends().find("mpi") != std::string::npos ? "mpi" : "local";
}

Status CheckProcessCount(const real::Collective* comm, int32_t ranks, const std::string& input) {
  if (comm == nullptr || comm->ranks() == ranks) return Status::Ok();
  return InvalidArgument(input + " trains on " + std::to_string(ranks) + " ranks (training.data_parallel), but mpirun started " +
                         std::to_string(comm->ranks()) + " processes: run it with mpirun -np " + std::to_string(ranks));
}

StatusOr<PlannedInput> LoadPlannedInput(const std::string& path, const std::vector<std::string>& sets) {
  PlannedInput in;
  if (path.ends_with(".json")) {
    TF_ASSIGN_OR_RETURN(in.schedule, ReadScheduleFile(path));
    in.from_schedule_file = true;
    if (in.schedule.tasks().empty()) return InvalidArgument(path + ": schedule '" + in.schedule.name + "' has no tasks: nothing to simulate or run");
    TF_ASSIGN_OR_RETURN(in.scenario, ScenarioOfSchedule(in.schedule, path, sets));
    return in;
  }
  TF_ASSIGN_OR_RETURN(in.scenario, policies::LoadScenarioFile(path, sets));
  TF_ASSIGN_OR_RETURN(in.schedule, policies::Plan(in.scenario));
  return in;
}

namespace {

StatusOr<std::vector<int32_t>> LoadTokens(const std::string& path) {
  if (path.size() >= 4 && path.compare(path.size() - 4, 4, ".txt") == 0) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return NotFound("--data '" + path + "': cannot open");
    std::stringstream text;
    text << in.rdbuf();
    return real::ByteEncode(text.str());
  }
  return real::ReadTokenFile(path);
}

}  // namespace

std::string DefaultCorpusPath() {
  std::error_code ec;
  if (std::filesystem::is_regular_file(kDefaultCorpus, ec)) return kDefaultCorpus;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return kDefaultCorpus;
  for (const std::filesystem::path& candidate : {exe.parent_path() / "../share/tierflow/corpus/kjv-genesis.txt",
                                                 exe.parent_path() / "../.." / kDefaultCorpus}) {
    if (std::filesystem::is_regular_file(candidate, ec)) return candidate.lexically_normal().string();
  }
  return kDefaultCorpus;
}

StatusOr<real::TrainConfig> MakeTrainConfig(const policies::Scenario& scenario, const std::string& data, float lr,
                                            int threads) {
  real::TrainConfig config = real::TrainConfigFor(scenario.model, scenario.training);
  if (lr > 0) config.adam.lr = lr;
  config.threads = threads;
  const std::string path = data.empty() ? DefaultCorpusPath() : data;
  auto tokens = LoadTokens(path);
  if (!tokens.ok()) {
    return Status(tokens.status().code(),
                  tokens.status().message() +
                      (data.empty() ? " (the shipped corpus is looked up under the working directory, then under the binary's "
                                      "../share/tierflow (cmake --install) and its checkout; give --data FILE)"
                                    : ""));
  }
  config.tokens = std::move(*tokens);
  // Enough for one batch, by the loader's own rule, checked here to name the file, before a run
  // touches its disks.
  if (auto loader = real::TokenLoader::Create(config.tokens, config.batch, config.seq, config.data_seed); !loader.ok()) {
    return Status(loader.status().code(), "--data '" + path + "': " + loader.status().message());
  }
  for (int32_t t : config.tokens) {
    if (t < 0 || t >= config.spec.config.vocab) {
      return InvalidArgument("--data '" + path + "': token id " + std::to_string(t) + " is outside the model's vocabulary of " +
                             std::to_string(config.spec.config.vocab));
    }
  }
  return config;
}

StatusOr<models::HardwareSpec> LoadHardwareFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("hardware file '" + path + "' cannot be opened");
  std::stringstream ss;
  ss << in.rdbuf();
  auto hw = models::HardwareFromYamlText(ss.str());
  if (!hw.ok()) return hw.status().WithContext("hardware file '" + path + "'");
  return hw;
}

StatusOr<std::vector<real::DirLock>> LockDirs(const std::vector<std::string>& dirs, const std::string& flag, bool create,
                                              std::vector<CommandPath> others) {
  std::vector<real::DirLock> locks;
  for (const std::string& dir : dirs) others.push_back({flag, dir, PathUse::kWritesIn});
  TF_RETURN_IF_ERROR(CheckCommandPaths(others));
  for (const std::string& dir : dirs) {
    const std::string label = flag + " '" + dir + "'";
    std::error_code ec;
    if (create) std::filesystem::create_directories(dir, ec);
    if (ec) return FailedPrecondition(label + ": cannot create it: " + ec.message());
    if (!std::filesystem::is_directory(dir, ec)) return NotFound(label + ": not a directory");
    TF_ASSIGN_OR_RETURN(real::DirLock lock, real::DirLock::Acquire(dir, label));
    locks.push_back(std::move(lock));
  }
  return locks;
}

Progress::Progress(std::string label, double total)
    : label_(std::move(label)), total_(total), start_(Now()), tty_(isatty(STDERR_FILENO)) {}

void Progress::Update(double done, const std::string& note) {
  if (!tty_ || total_ <= 0) return;
  const double now = Now();
  if (now - last_print_ < 0.1 && done < total_) return;
  last_print_ = now;
  const double frac = std::min(1.0, done / total_);
  const int width = 30;
  const int filled = static_cast<int>(frac * width);
  const double elapsed = now - start_;
  const double eta = frac > 0 ? elapsed * (1 - frac) / frac : 0;
  std::fprintf(stderr, "\r%s [%.*s%*s] %5.1f%%  %.1fs elapsed, ETA %.1fs %s ", label_.c_str(), filled,
               "##############################", width - filled, "", 100 * frac, elapsed, eta, note.c_str());
  std::fflush(stderr);
}

void Progress::Finish() {
  if (tty_ && last_print_ >= 0) std::fprintf(stderr, "\r%*s\r", 110, "");
}

}  // namespace tierflow::cli
