#include "inputs.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "tierflow/policies/policy.h"

namespace tierflow::cli {
namespace {
double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

void AddSetOption(CLI::App* app, std::vector<std::string>* sets) {
  app->add_option("--set", *sets, "Override a scenario value: key.path=value (repeatable)")->take_all();
}

StatusOr<PlannedInput> LoadPlannedInput(const std::string& path, const std::vector<std::string>& sets) {
  PlannedInput in;
  if (EndsWith(path, ".json")) {
    TF_ASSIGN_OR_RETURN(in.schedule, ReadScheduleFile(path));
    in.from_schedule_file = true;
    std::string yaml;
    for (const auto& [k, v] : in.schedule.meta) {
      if (k == "scenario_yaml") yaml = v;
    }
    if (yaml.empty()) {
      return InvalidArgument(path + ": the schedule's meta has no 'scenario_yaml', so its hardware is unknown "
                                    "(plan it with `tierflow plan`, or add the scenario to its meta)");
    }
    for (const auto& s : sets) {
      if (s.rfind("hardware.", 0) != 0) {
        return InvalidArgument("--set " + s + ": a schedule file is already planned; only hardware.* can be overridden");
      }
    }
    TF_ASSIGN_OR_RETURN(in.scenario, policies::LoadScenarioText(yaml, sets, path + " (meta.scenario_yaml)"));
    return in;
  }
  TF_ASSIGN_OR_RETURN(in.scenario, policies::LoadScenarioFile(path, sets));
  TF_ASSIGN_OR_RETURN(in.schedule, policies::Plan(in.scenario));
  return in;
}

Progress::Progress(std::string label, double total)
    : label_(std::move(label)), total_(total), start_(Now()), tty_(isatty(STDERR_FILENO)) {}

void Progress::Update(double done) {
  if (!tty_ || total_ <= 0) return;
  const double now = Now();
  if (now - last_print_ < 0.1 && done < total_) return;
  last_print_ = now;
  const double frac = std::min(1.0, done / total_);
  const int width = 30;
  const int filled = static_cast<int>(frac * width);
  const double elapsed = now - start_;
  const double eta = frac > 0 ? elapsed * (1 - frac) / frac : 0;
  std::fprintf(stderr, "\r%s [%.*s%*s] %5.1f%%  %.1fs elapsed, ETA %.1fs ", label_.c_str(), filled,
               "##############################", width - filled, "", 100 * frac, elapsed, eta);
  std::fflush(stderr);
}

void Progress::Finish() {
  if (tty_ && last_print_ >= 0) std::fprintf(stderr, "\r%*s\r", 90, "");
}

}  // namespace tierflow::cli
