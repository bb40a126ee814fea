// tierflow sim SCENARIO|SCHEDULE [--iterations N] [--profile P.yaml] [--trace out.json] [--records out.jsonl] [--json]
#include <cmath>
#include <cstdio>

#include "command.h"
#include "inputs.h"
#include "model_figures.h"
#include "tierflow/core/files.h"
#include "tierflow/core/units.h"
#include "tierflow/policies/policy.h"
#include "tierflow/sim/simulator.h"
#include "tierflow/traces/chrome_trace.h"

namespace tierflow::cli {
namespace {

// The paper comparison's metric of one simulated run (docs/scenario-format.md, `paper:`).
double PaperMetric(const std::string& metric, const Schedule& schedule, const nlohmann::ordered_json& report) {
  if (metric == "peak_host_bytes") {
    double bytes = 0;
    for (const PoolSpec& p : schedule.pools()) {
      if (p.device != kNoIndex && schedule.devices()[p.device].kind == DeviceKind::kHost &&
          report["peak_bytes"].contains(p.name)) {
        bytes += static_cast<double>(report["peak_bytes"][p.name].get<int64_t>());
      }
    }
    return bytes;
  }
  const double it = report["iteration_s"].get<double>();
  if (metric == "throughput") return it > 0 ? 1.0 / it : 0.0;  // iterations/s: same tokens per iteration
  return it;
}

// Simulates the paper's baseline (the scenario with the baseline's --set overrides) and
// compares the ratio of the metric with the paper's.
// With a profile, the baseline is simulated on it too (planned, as always, on its own hardware).
StatusOr<nlohmann::ordered_json> ComparePaper(const policies::Scenario& scenario, const Schedule& schedule,
                                              const nlohmann::ordered_json& report, int64_t iterations,
                                              const models::HardwareSpec* profile) {
  const policies::PaperClaim& p = scenario.paper;
  TF_ASSIGN_OR_RETURN(policies::Scenario base, policies::LoadScenarioText(scenario.yaml, p.baseline_sets, "paper.baseline"));
  base.has_paper = false;
  TF_ASSIGN_OR_RETURN(Schedule base_schedule, policies::Plan(base));
  sim::SimOptions options;
  options.iterations = iterations;
  auto result = sim::Simulate(base_schedule, profile != nullptr ? *profile : base.hardware, options);
  if (!result.ok()) return result.status().WithContext("paper baseline");
  RunFacts facts;
  facts.scenario = base.name;
  facts.policy = base.policy;
  facts.iterations = iterations;
  facts.pool_peak_bytes = result->pool_peak_bytes;
  facts.tasks = result->tasks_simulated;
  facts.wall_s = result->wall_s;
  const nlohmann::ordered_json base_report = BuildReport(base_schedule, result->records, facts);
  const double sys = PaperMetric(p.metric, schedule, report);
  const double ref = PaperMetric(p.metric, base_schedule, base_report);
  const double ratio = ref > 0 ? sys / ref : 0.0;
  nlohmann::ordered_json j;
  j["system"] = p.system;
  j["claim"] = p.claim;
  j["source"] = p.source;
  j["metric"] = p.metric;
  j["baseline_policy"] = base.policy;
  j["baseline_set"] = p.baseline_sets;
  j["baseline_metric"] = ref;
  j["metric_value"] = sys;
  j["expected_ratio"] = p.expected_ratio;
  j["simulated_ratio"] = ratio;
  j["tolerance"] = p.tolerance;
  j["within"] = std::fabs(ratio / p.expected_ratio - 1.0) <= p.tolerance;
  return j;
}

struct SimArgs {
  std::string input;
  int64_t iterations = 3;
  std::string trace;
  std::string records;
  std::vector<std::string> sets;
  std::string profile;
  bool json = false;
};

Status RunSim(const SimArgs& a) {
  TF_RETURN_IF_ERROR(CheckCommandPaths({{"input", a.input, PathUse::kReads},
                                        {"--profile", a.profile, PathUse::kReads},
                                        {"--records", a.records, PathUse::kWrites},
                                        {"--trace", a.trace, PathUse::kWrites}}));
  TF_ASSIGN_OR_RETURN(PlannedInput in, LoadPlannedInput(a.input, a.sets));
  // Every task instance is kept as a trace record: bounded before anything is allocated.
  const int64_t per_iteration = std::max<int64_t>(1, static_cast<int64_t>(in.schedule.tasks().size()));
  if (a.iterations > kMaxSimulatedInstances / per_iteration) {
    return InvalidArgument("--iterations " + std::to_string(a.iterations) + ": " + std::to_string(per_iteration) + " tasks per iteration would make more than " +
                           std::to_string(kMaxSimulatedInstances) + " task instances (at most " + std::to_string(kMaxSimulatedInstances / per_iteration) +
                           " iterations; the steady state needs 3)");
  }
  // A profile changes the machine the schedule is simulated on, never the schedule: the plan is
  // the scenario's, so that sim and `run` execute the same tasks.
  if (!a.profile.empty()) {
    TF_ASSIGN_OR_RETURN(in.scenario.hardware, LoadHardwareFile(a.profile));
  }
  sim::SimOptions options;
  options.iterations = a.iterations;
  options.schedule_validated = true;  // PlannedInput's schedule is (inputs.h): not a second time
  Progress progress("simulating", 1.0);
  options.progress = [&](const sim::SimProgress& p) {
    progress.Update(p.instances_total ? static_cast<double>(p.instances_completed) / static_cast<double>(p.instances_total) : 1.0);
  };
  auto result = sim::Simulate(in.schedule, in.scenario.hardware, options);
  progress.Finish();
  if (!result.ok()) return result.status();
  RunFacts facts;
  facts.scenario = in.scenario.name;
  facts.policy = in.scenario.policy;
  facts.iterations = a.iterations;
  facts.pool_peak_bytes = result->pool_peak_bytes;
  facts.tasks = result->tasks_simulated;
  facts.wall_s = result->wall_s;
  facts.setting = SettingOf(in.scenario);
  nlohmann::ordered_json report = BuildReport(in.schedule, result->records, facts);
  TF_ASSIGN_OR_RETURN(const models::StorageBound bound, models::StorageLowerBound(in.schedule, in.scenario.hardware));
  report["storage_bound"] = StorageBoundJson(bound);
  // A plan whose pools exceed the machine's memory is no prediction: its figures are printed, and
  // the command fails naming the memory and the bytes short.
  const models::MemoryFit fit = models::CheckMemoryFit(in.schedule, in.scenario.hardware, result->pool_peak_bytes);
  report["memory"] = MemoryFitJson(fit);
  if (in.scenario.has_paper) {
    TF_ASSIGN_OR_RETURN(report["paper"], ComparePaper(in.scenario, in.schedule, report, a.iterations,
                                                         a.profile.empty() ? nullptr : &in.scenario.hardware));
  }
  if (!a.records.empty()) TF_RETURN_IF_ERROR(WriteTraceFile(a.records, result->records));
  if (!a.trace.empty()) TF_RETURN_IF_ERROR(traces::WriteChromeTrace(a.trace, result->records, &in.schedule));
  if (a.json) {
    std::printf("%s\n", report.dump(2).c_str());
  } else {
    if (!fit.fits()) std::printf("INFEASIBLE: %s\n\n", fit.Problem().c_str());
    std::printf("%s", ReportToText(in.schedule, report).c_str());
    std::printf("\nsimulated %lld task instances in %s (%s tasks/s)\n", static_cast<long long>(result->tasks_simulated),
                FormatDuration(result->wall_s).c_str(), FormatCount(report["tasks_per_s"].get<double>()).c_str());
    if (!a.trace.empty()) std::printf("timeline: %s (open in ui.perfetto.dev)\n", a.trace.c_str());
    std::printf("%s", StorageBoundText(bound, report["iteration_s"].get<double>()).c_str());
    if (report.contains("paper")) {
      const auto& p = report["paper"];
      std::printf("\npaper: %s; simulated: %.3f (%s \u00b1%.0f %%) [%s %s vs %s with %s]\n", p["claim"].get<std::string>().c_str(),
                  p["simulated_ratio"].get<double>(), p["within"].get<bool>() ? "within" : "outside",
                  100 * p["tolerance"].get<double>(), p["metric"].get<std::string>().c_str(),
                  in.scenario.policy.c_str(), p["baseline_policy"].get<std::string>().c_str(),
                  p["baseline_set"].dump().c_str());
      std::printf("  expected ratio %.3f (%s)\n", p["expected_ratio"].get<double>(), p["source"].get<std::string>().c_str());
    }
  }
  if (!fit.fits()) {
    return ResourceExhausted("the plan does not fit the machine, so its figures predict nothing: " + fit.Problem() +
                             " (smaller pools or buffers, another policy, or `tierflow tune`, which keeps to the machine's memory)");
  }
  return Status::Ok();
}

Command MakeSim(CLI::App& parent) {
  auto* a = Keep<SimArgs>();
  CLI::App* app = parent.add_subcommand("sim", "Simulate a scenario or a schedule on SimGrid");
  app->add_option("input", a->input, "Scenario (YAML) or schedule (JSON)")->required();
  AddNumber(app, "-n,--iterations", &a->iterations, "Iterations to simulate", int64_t{1})->capture_default_str();
  app->add_option("--trace", a->trace, "Write a Chrome/Perfetto timeline (JSON)");
  app->add_option("--records", a->records, "Write the trace records (JSON Lines)");
  AddSetOption(app, &a->sets);
  app->add_option("--profile", a->profile, "Simulate on this hardware profile (from tierflow calibrate) instead of the scenario's hardware");
  app->add_flag("--json", a->json, "Print the report as JSON");
  return {app, [a] { return RunSim(*a); }};
}

TIERFLOW_COMMAND(MakeSim);

}  // namespace
}  // namespace tierflow::cli
