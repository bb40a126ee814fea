// tierflow tune SCENARIO [--memory-budget hardware|baseline|host=…,gpu=…] [--policy P]... [-j N] [-n ITER] [--rounds R] [-o schedule.json] [--set k=v] [--json]
// Searches the policies' knobs with the simulator (docs/tuning.md) and writes the best schedule.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command.h"
#include "inputs.h"
#include "tierflow/core/files.h"
#include "tierflow/core/units.h"
#include "tierflow/models/perf.h"
#include "tierflow/policies/policy.h"
#include "tierflow/policies/scenario.h"
#include "tierflow/sim/simulator.h"
#include "tierflow/sweep/tune.h"

namespace tierflow::cli {
namespace {

struct TuneArgs {
  std::string scenario;
  std::string budget;
  std::vector<std::string> policies;
  int jobs = 0;
  int64_t iterations = 1;
  int rounds = 12;  // sweep::TuneOptions::max_rounds
  std::string output;
  std::vector<std::string> sets;
  bool json = false;
};

// What tune found, as it is reported.
struct TuneReport {
  policies::Scenario scenario;
  sweep::TuneResult r;
  std::string output;                    // the best schedule's file
  const sweep::PolicyBest* zero = nullptr;  // the fastest zero-infinity found, if searched
  std::string deepspeed_schedule, deepspeed_note;
  double speedup = 0;
  models::StorageBound baseline_bound, best_bound;
  std::vector<std::string> names;              // every policy searched, at its defaults:
  std::vector<sweep::Evaluation> defaults;
  bool Within(const sweep::Evaluation& e) const {
    return (r.budget.host_bytes <= 0 || e.host_peak_bytes <= r.budget.host_bytes) && (r.budget.gpu_bytes <= 0 || e.gpu_peak_bytes <= r.budget.gpu_bytes);
  }
};

// The search's options from the verb's: the memory budget asked for, the workers, a status line.
StatusOr<sweep::TuneOptions> SearchOptions(const TuneArgs& a, const policies::Scenario& scenario) {
  sweep::TuneOptions options;
  options.policies = a.policies;
  // The question by default: what is fastest on this machine (its GPUs' memory, its DRAM less the
  // reserve). `baseline`: what is faster within the baseline's own peaks.
  if (a.budget.empty() || a.budget == "hardware") {
    options.budget = sweep::HardwareMemoryBudget(scenario.hardware);
  } else if (a.budget != "baseline") {
    TF_ASSIGN_OR_RETURN(options.budget, sweep::ParseMemoryBudget(a.budget));
  }
  options.iterations = a.iterations;
  options.max_rounds = a.rounds;
  options.jobs = a.jobs > 0 ? a.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Progress: an open-ended search, so a status line (stage, the batch under way with its ETA,
  // evaluations, best) rather than one bar.
  if (!isatty(STDERR_FILENO)) return options;
  options.progress = [](const sweep::TuneProgress& p) {
    std::string eta = "-";
    if (p.batch_done > 0 && p.batch_done < p.batch_total) {
      eta = FormatDuration(p.batch_elapsed_s / static_cast<double>(p.batch_done) * static_cast<double>(p.batch_total - p.batch_done));
    }
    std::fprintf(stderr, "\rtune: %-30s %4lld/%-4lld of the batch (ETA %s), %lld simulated, best %s      ", p.stage.c_str(),
                 static_cast<long long>(p.batch_done), static_cast<long long>(p.batch_total), eta.c_str(),
                 static_cast<long long>(p.evaluations), p.best_s < 1e300 ? FormatDuration(p.best_s).c_str() : "-");
    std::fflush(stderr);
  };
  return options;
}

// DeepSpeed runs zero-infinity only: a winner of another policy comes with the fastest
// zero-infinity configuration found, as a schedule of its own that `deepspeed export` takes.
Status AddDeepSpeedAlternative(const std::string& scenario_path, TuneReport* t) {
  const sweep::TuneResult& r = t->r;
  for (const sweep::PolicyBest& p : r.per_policy) t->zero = p.policy == "zero-infinity" ? &p : t->zero;
  if (r.best_policy == "zero-infinity") return Status::Ok();
  if (t->zero == nullptr) {
    t->deepspeed_note = "DeepSpeed cannot run the winner (" + r.best_policy +
                        " has no DeepSpeed config), and zero-infinity was not searched or nothing of it fits: add --policy zero-infinity for a "
                        "configuration DeepSpeed can run";
    return Status::Ok();
  }
  TF_ASSIGN_OR_RETURN(policies::Scenario z, policies::LoadScenarioText(t->scenario.yaml, t->zero->overrides, scenario_path));
  z.name = t->scenario.name + "-tuned-zero-infinity";
  TF_ASSIGN_OR_RETURN(const Schedule zs, policies::Plan(z));
  const std::string& output = t->output;
  const std::string stem = output.size() > 5 && output.compare(output.size() - 5, 5, ".json") == 0 ? output.substr(0, output.size() - 5) : output;
  t->deepspeed_schedule = stem + ".zero-infinity.json";
  TF_RETURN_IF_ERROR(WriteScheduleFile(t->deepspeed_schedule, zs));
  t->deepspeed_note = fmt::format(
      "DeepSpeed cannot run the winner ({} has no DeepSpeed config); the fastest zero-infinity configuration found takes {} "
      "({:.2f}x the winner's time): {} (tierflow deepspeed export {} --base YOUR_ds_config.json -o ...)",
      r.best_policy, FormatDuration(t->zero->evaluation.iteration_s), t->zero->evaluation.iteration_s / r.best.iteration_s,
      t->deepspeed_schedule, t->deepspeed_schedule);
  return Status::Ok();
}

void PrintTuneJson(const TuneReport& t) {
  const sweep::TuneResult& r = t.r;
  nlohmann::ordered_json j;
  j["scenario"] = t.scenario.name;
  j["baseline_s"] = r.baseline.iteration_s;
  j["best_s"] = r.best.iteration_s;
  j["speedup"] = t.speedup;
  j["policy"] = r.best_policy;
  j["schedule"] = t.output;
  nlohmann::ordered_json changes = nlohmann::ordered_json::array();
  for (const auto& c : r.changes) {
    nlohmann::ordered_json change = {{"knob", c.knob}, {"from", c.from}, {"to", c.to}};
    if (!c.from_default.empty()) change["from_default"] = c.from_default;
    if (!c.to_default.empty()) change["to_default"] = c.to_default;
    changes.push_back(change);
  }
  j["changes"] = changes;
  if (!r.baseline_problem.empty()) {
    nlohmann::ordered_json repairs = nlohmann::ordered_json::array();
    for (const auto& c : r.repairs) repairs.push_back({{"knob", c.knob}, {"from", c.from}, {"to", c.to}});
    j["baseline_repaired"] = {{"problem", r.baseline_problem}, {"repairs", repairs}};
  }
  j["budget"] = {{"host_bytes", r.budget.host_bytes}, {"gpu_bytes", r.budget.gpu_bytes}};
  j["baseline_peak_bytes"] = {{"host", r.baseline.host_peak_bytes}, {"gpu", r.baseline.gpu_peak_bytes}};
  j["best_peak_bytes"] = {{"host", r.best.host_peak_bytes}, {"gpu", r.best.gpu_peak_bytes}};
  j["storage_bound_s"] = {{"baseline", t.baseline_bound.seconds}, {"best", t.best_bound.seconds}};
  j["evaluations"] = r.evaluations;
  j["infeasible"] = r.infeasible;
  j["over_budget"] = r.over_budget;
  j["notes"] = r.notes;
  if (!t.deepspeed_note.empty()) {
    j["deepspeed"] = {{"note", t.deepspeed_note}};
    if (t.zero != nullptr) {
      j["deepspeed"]["schedule"] = t.deepspeed_schedule;
      j["deepspeed"]["iteration_s"] = t.zero->evaluation.iteration_s;
    }
  }
  nlohmann::ordered_json lit = nlohmann::ordered_json::array();
  for (size_t i = 0; i < t.names.size(); ++i) {
    const sweep::Evaluation& e = t.defaults[i];
    nlohmann::ordered_json p = {{"policy", t.names[i]}, {"feasible", e.feasible}};
    if (e.feasible) {
      p["iteration_s"] = e.iteration_s;
      p["host_peak_bytes"] = e.host_peak_bytes;
      p["gpu_peak_bytes"] = e.gpu_peak_bytes;
      p["within_budget"] = t.Within(e);
    } else {
      p["reason"] = e.reason;
    }
    lit.push_back(p);
  }
  j["policies_at_defaults"] = lit;
  std::printf("%s\n", j.dump(2).c_str());
}

void PrintTuneText(const TuneReport& t) {
  const sweep::TuneResult& r = t.r;
  std::printf("tune %s: %lld configurations simulated (%lld infeasible, %lld over the budget)\n", t.scenario.name.c_str(),
              static_cast<long long>(r.evaluations), static_cast<long long>(r.infeasible),
              static_cast<long long>(r.over_budget));
  std::printf("memory budget    %s\n\n", sweep::MemoryBudgetToString(r.budget).c_str());
  if (!r.baseline_problem.empty()) {
    std::printf("the baseline as given does not run: %s\nrepaired (the baseline below, and the start of its policy's search):",
                r.baseline_problem.c_str());
    for (const auto& c : r.repairs) std::printf(" %s %s -> %s", c.knob.c_str(), c.from.c_str(), c.to.c_str());
    std::printf("\n\n");
  }
  std::printf("%-10s %-16s %12s %12s %12s %14s\n", "", "policy", "iteration", "host peak", "gpu peak", "storage bound");
  std::printf("%-10s %-16s %12s %12s %12s %14s\n", "baseline", t.scenario.policy.c_str(), FormatDuration(r.baseline.iteration_s).c_str(),
              FormatBytes(static_cast<double>(r.baseline.host_peak_bytes)).c_str(),
              FormatBytes(static_cast<double>(r.baseline.gpu_peak_bytes)).c_str(), FormatDuration(t.baseline_bound.seconds).c_str());
  std::printf("%-10s %-16s %12s %12s %12s %14s\n", "best", r.best_policy.c_str(), FormatDuration(r.best.iteration_s).c_str(),
              FormatBytes(static_cast<double>(r.best.host_peak_bytes)).c_str(),
              FormatBytes(static_cast<double>(r.best.gpu_peak_bytes)).c_str(), FormatDuration(t.best_bound.seconds).c_str());
  std::printf("\nspeedup %.2fx\n", t.speedup);
  std::printf("\nat their defaults %-7s %12s %12s %12s %8s %8s\n", "", "iteration", "host peak", "gpu peak", "budget", "vs best");
  for (size_t i = 0; i < t.names.size(); ++i) {
    const sweep::Evaluation& e = t.defaults[i];
    if (!e.feasible) {
      std::printf("  %-24s does not plan or run here: %s\n", t.names[i].c_str(), e.reason.c_str());
      continue;
    }
    std::printf("  %-24s %12s %12s %12s %8s %7.2fx\n", t.names[i].c_str(), FormatDuration(e.iteration_s).c_str(),
                FormatBytes(static_cast<double>(e.host_peak_bytes)).c_str(), FormatBytes(static_cast<double>(e.gpu_peak_bytes)).c_str(),
                t.Within(e) ? "fits" : "over", r.best.iteration_s > 0 ? e.iteration_s / r.best.iteration_s : 0.0);
  }
  if (r.changes.empty()) {
    std::printf("no change beats the baseline\n");
  } else {
    std::printf("changes:\n");
    // A side at its policy's default says which value that is; a knob the side's policy does not
    // read (the policy changed) says so.
    const bool policy_changed = r.best_policy != t.scenario.policy;
    auto side = [&](const std::string& value, const std::string& default_value, const std::string& policy) {
      if (!value.empty()) return value;
      if (!default_value.empty()) return default_value + " (default)";
      return policy_changed ? "(not a knob of " + policy + ")" : std::string("(default)");
    };
    for (const auto& c : r.changes) {
      std::printf("  %-36s %s -> %s\n", c.knob.c_str(), side(c.from, c.from_default, t.scenario.policy).c_str(),
                  side(c.to, c.to_default, r.best_policy).c_str());
    }
  }
  for (const auto& n : r.notes) std::printf("note: %s\n", n.c_str());
  std::printf("schedule: %s\n", t.output.c_str());
  if (!t.deepspeed_note.empty()) std::printf("%s\n", t.deepspeed_note.c_str());
}

Status RunTune(const TuneArgs& a) {
  if (a.scenario.size() >= 5 && a.scenario.compare(a.scenario.size() - 5, 5, ".json") == 0) {
    return InvalidArgument(a.scenario + ": tune takes a scenario (YAML), not a schedule");
  }
  TF_RETURN_IF_ERROR(sim::SimulatorAvailable());
  TF_RETURN_IF_ERROR(CheckCommandPaths({{"input", a.scenario, PathUse::kReads}, {"-o", a.output, PathUse::kWrites}}));
  TuneReport t;
  TF_ASSIGN_OR_RETURN(t.scenario, policies::LoadScenarioFile(a.scenario, a.sets));
  const policies::Scenario& scenario = t.scenario;
  TF_ASSIGN_OR_RETURN(const sweep::TuneOptions options, SearchOptions(a, scenario));
  TF_ASSIGN_OR_RETURN(t.r, sweep::Tune(scenario.yaml, a.scenario, options));
  if (options.progress) std::fprintf(stderr, "\r%*s\r", 140, "");
  const sweep::TuneResult& r = t.r;

  // The best schedule, planned again here (workers send back figures only).
  TF_ASSIGN_OR_RETURN(policies::Scenario best_scenario, policies::LoadScenarioText(scenario.yaml, r.best_overrides, a.scenario));
  best_scenario.name = scenario.name + "-tuned";
  TF_ASSIGN_OR_RETURN(Schedule schedule, policies::Plan(best_scenario));
  t.output = a.output.empty() ? scenario.name + ".tuned.json" : a.output;
  TF_RETURN_IF_ERROR(WriteScheduleFile(t.output, schedule));
  TF_RETURN_IF_ERROR(AddDeepSpeedAlternative(a.scenario, &t));
  t.speedup = r.best.iteration_s > 0 ? r.baseline.iteration_s / r.best.iteration_s : 0;
  // What storage alone allows each of the two (models::StorageLowerBound): a best close to its
  // bound can only get faster by moving fewer bytes, which takes memory.
  TF_ASSIGN_OR_RETURN(const policies::Scenario baseline_scenario, policies::LoadScenarioText(scenario.yaml, r.baseline_overrides, a.scenario));
  TF_ASSIGN_OR_RETURN(const Schedule baseline_schedule, policies::Plan(baseline_scenario));
  TF_ASSIGN_OR_RETURN(t.baseline_bound, models::StorageLowerBound(baseline_schedule, scenario.hardware));
  TF_ASSIGN_OR_RETURN(t.best_bound, models::StorageLowerBound(schedule, best_scenario.hardware));
  // Every literature policy (the ones searched) at its own defaults, beside the winner.
  t.names = a.policies.empty() ? policies::PolicyNames() : a.policies;
  std::vector<sweep::Variation> at_defaults;
  for (const std::string& name : t.names) at_defaults.push_back({{"policy={name: " + name + "}"}});
  sweep::EvaluateOptions eo;
  eo.iterations = options.iterations;
  eo.jobs = options.jobs;
  TF_ASSIGN_OR_RETURN(t.defaults, sweep::EvaluateAll(scenario.yaml, a.scenario, at_defaults, eo));
  if (a.json) {
    PrintTuneJson(t);
  } else {
    PrintTuneText(t);
  }
  return Status::Ok();
}

Command MakeTune(CLI::App& parent) {
  auto* a = Keep<TuneArgs>();
  CLI::App* app = parent.add_subcommand("tune", "Search policy knobs with the simulator; write the fastest schedule");
  app->add_option("scenario", a->scenario, "Scenario YAML file")->required();
  app->add_option("--memory-budget", a->budget,
                  "hardware (default: each GPU's memory, DRAM less cpu.host_reserve per node), baseline (the baseline's own peaks), or host=SIZE,gpu=SIZE");
  app->add_option("--policy", a->policies, "Policy to search (repeatable; default: every policy)")->take_all();
  AddNumber(app, "-j,--jobs", &a->jobs, "Worker processes (0: one per core)", 0, 1024);
  AddNumber(app, "-n,--iterations", &a->iterations, "Iterations simulated per candidate", int64_t{1}, int64_t{1000})->capture_default_str();
  AddNumber(app, "--rounds", &a->rounds, "Coordinate-descent rounds per policy: fewer for a quick look (each round tries every knob, then pairs)", 1, 1000)
      ->capture_default_str();
  app->add_option("-o,--output", a->output, "Schedule file to write (default: <scenario name>.tuned.json)");
  AddSetOption(app, &a->sets);
  app->add_flag("--json", a->json, "Print baseline_s, best_s, schedule and changes as JSON");
  return {app, [a] {
            return RunTune(*a);
          }};
}

TIERFLOW_COMMAND(MakeTune);

}  // namespace
}  // namespace tierflow::cli
