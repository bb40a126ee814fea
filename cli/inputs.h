// What the verbs that take "SCENARIO|SCHEDULE" share: reading either kind of file (a .json file
// is a schedule, anything else a scenario), applying --set overrides, and recovering the
// hardware a schedule was planned for from the scenario stored in its meta.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "tierflow/core/files.h"
#include "tierflow/core/schedule.h"
#include "tierflow/models/hardware.h"
#include "tierflow/policies/scenario.h"
#include "tierflow/real/collective.h"
#include "tierflow/real/dir_lock.h"
#include "tierflow/real/executor.h"

namespace tierflow::cli {

// Bounds checked before anything is allocated: compute threads (run, probes), and the task
// instances a simulation keeps as trace records (about 200 bytes each).
inline constexpr int kMaxThreads = 1024;
inline constexpr int64_t kMaxSimulatedInstances = 20'000'000;

struct PlannedInput {
  Schedule schedule;  // validated: by the planner (a scenario) or by the file's reader (a schedule)
  policies::Scenario scenario;  // the scenario file's, or the schedule's typed sections (ScenarioOfSchedule)
  bool from_schedule_file = false;
};

// Adds `--set key.path=value` (repeatable) and `--model-dir DIR` to a subcommand: --model-dir
// puts the override `model={hf_dir: DIR}` before the --set ones (kModelDirSet).
void AddSetOption(CLI::App* app, std::vector<std::string>* sets);
inline constexpr const char* kModelDirSet = "model=";

// Loads a scenario (and plans it) or a schedule. --set applies to scenarios; on a schedule file
// it is an error (the schedule is already planned), except for hardware.* keys, which re-target
// the stored scenario's hardware.
// The collective back-end `probe collective` and `run` use when none is named: mpi when this
// process was started by mpirun and the build has MPI, else local (one rank).
std::string AutoCollectiveBackend();
// Under mpirun (`comm` not null), one process per rank of `input`'s training.data_parallel
// `ranks`: InvalidArgument naming both counts and the mpirun line otherwise.
Status CheckProcessCount(const real::Collective* comm, int32_t ranks, const std::string& input);

StatusOr<PlannedInput> LoadPlannedInput(const std::string& path, const std::vector<std::string>& sets);
// What a schedule file trains, on what and how, from its typed sections (model and hardware
// required, training optional: the defaults), with `sets` (hardware.* only) applied to its
// hardware; `path` names the file in errors. No scenario is read or planned.
StatusOr<policies::Scenario> ScenarioOfSchedule(const Schedule& schedule, const std::string& path, const std::vector<std::string>& sets);

// The training set-up `run` and `validate` give the executor: the scenario's model and shape,
// the corpus (`data`: a .txt file is byte-tokenized, anything else an llm.c token file; empty:
// DefaultCorpusPath()), AdamW and its schedule from the scenario's training.optimizer and
// lr_schedule (`lr` > 0 in place of its lr), training.seed, and the compute threads.
inline constexpr const char* kDefaultCorpus = "data/corpus/kjv-genesis.txt";
// The shipped corpus, from any directory: kDefaultCorpus under the working directory (a
// checkout), else beside the binary — <prefix>/share/tierflow/corpus of an installed one
// (`cmake --install`), the checkout's data/ of one in build/cli/. kDefaultCorpus when none holds it.
std::string DefaultCorpusPath();
StatusOr<real::TrainConfig> MakeTrainConfig(const policies::Scenario& scenario, const std::string& data, float lr,
                                            int threads);

// A hardware description file (a calibrated profile, or any file in docs/hardware-format.md);
// errors name the file.
StatusOr<models::HardwareSpec> LoadHardwareFile(const std::string& path);

// Takes each of `dirs` for this process (real::DirLock: another tierflow process writing one is
// refused, with its pid), creating them first when `create`. `flag` names them in errors
// ("--dir"). First the command's paths are checked together (CheckCommandPaths): the directories
// as written in, with `others`, the command's other paths (its --trace, its -o), so that one
// directory given twice is said as such and not as "another process". The locks are held while the
// returned vector lives.
StatusOr<std::vector<real::DirLock>> LockDirs(const std::vector<std::string>& dirs, const std::string& flag, bool create,
                                              std::vector<CommandPath> others = {});

// Prints a one-line progress bar with ETA to stderr when it is a terminal.
class Progress {
 public:
  Progress(std::string label, double total);
  // `note`, when given, follows the ETA ("best 1.234 s").
  void Update(double done, const std::string& note = "");
  void Finish();

 private:
  std::string label_;
  double total_;
  double start_;
  double last_print_ = -1;
  bool tty_;
};

}  // namespace tierflow::cli
