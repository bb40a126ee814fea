// What the verbs that take "SCENARIO|SCHEDULE" share: reading either kind of file (a .json file
// is a schedule, anything else a scenario), applying --set overrides, and recovering the
// hardware a schedule was planned for from the scenario stored in its meta.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "tierflow/core/schedule.h"
#include "tierflow/policies/scenario.h"

namespace tierflow::cli {

struct PlannedInput {
  Schedule schedule;
  policies::Scenario scenario;  // from the file, or from the schedule's meta
  bool from_schedule_file = false;
};

// Adds `--set key.path=value` (repeatable) to a subcommand.
void AddSetOption(CLI::App* app, std::vector<std::string>* sets);

// Loads a scenario (and plans it) or a schedule. --set applies to scenarios; on a schedule file
// it is an error (the schedule is already planned), except for hardware.* keys, which re-target
// the stored scenario's hardware.
StatusOr<PlannedInput> LoadPlannedInput(const std::string& path, const std::vector<std::string>& sets);

// Prints a one-line progress bar with ETA to stderr when it is a terminal.
class Progress {
 public:
  Progress(std::string label, double total);
  void Update(double done);
  void Finish();

 private:
  std::string label_;
  double total_;
  double start_;
  double last_print_ = -1;
  bool tty_;
};

}  // namespace tierflow::cli
