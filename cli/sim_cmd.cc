// tierflow sim SCENARIO|SCHEDULE [--iterations N] [--trace out.json] [--records out.jsonl] [--json]
#include <cstdio>

#include "command.h"
#include "inputs.h"
#include "report.h"
#include "tierflow/core/units.h"
#ifdef TIERFLOW_HAVE_SIMGRID
#include "tierflow/sim/simulator.h"
#include "tierflow/traces/chrome_trace.h"
#endif

namespace tierflow::cli {
namespace {

struct SimArgs {
  std::string input;
  int64_t iterations = 3;
  std::string trace;
  std::string records;
  std::vector<std::string> sets;
  bool json = false;
};

Status RunSim(const SimArgs& a) {
#ifndef TIERFLOW_HAVE_SIMGRID
  (void)a;
  return Unavailable("this tierflow was built without SimGrid (apt-get install libsimgrid-dev, then rebuild)");
#else
  if (a.iterations < 1) return InvalidArgument("--iterations must be >= 1");
  TF_ASSIGN_OR_RETURN(PlannedInput in, LoadPlannedInput(a.input, a.sets));
  sim::SimOptions options;
  options.iterations = a.iterations;
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
  const nlohmann::ordered_json report = BuildReport(in.schedule, result->records, facts);
  if (!a.records.empty()) TF_RETURN_IF_ERROR(WriteTraceFile(a.records, result->records));
  if (!a.trace.empty()) TF_RETURN_IF_ERROR(traces::WriteChromeTrace(a.trace, result->records, &in.schedule));
  if (a.json) {
    std::printf("%s\n", report.dump(2).c_str());
  } else {
    std::printf("%s", ReportToText(in.schedule, report).c_str());
    std::printf("\nsimulated %lld task instances in %s (%s tasks/s)\n", static_cast<long long>(result->tasks_simulated),
                FormatDuration(result->wall_s).c_str(), FormatCount(report["tasks_per_s"].get<double>()).c_str());
    if (!a.trace.empty()) std::printf("timeline: %s (open in ui.perfetto.dev)\n", a.trace.c_str());
  }
  return Status::Ok();
#endif
}

Command MakeSim(CLI::App& parent) {
  auto* a = Keep<SimArgs>();
  CLI::App* app = parent.add_subcommand("sim", "Simulate a scenario or a schedule on SimGrid");
  app->add_option("input", a->input, "Scenario (YAML) or schedule (JSON)")->required();
  app->add_option("-n,--iterations", a->iterations, "Iterations to simulate")->capture_default_str();
  app->add_option("--trace", a->trace, "Write a Chrome/Perfetto timeline (JSON)");
  app->add_option("--records", a->records, "Write the trace records (JSON Lines)");
  AddSetOption(app, &a->sets);
  app->add_flag("--json", a->json, "Print the report as JSON");
  return {app, [a] { return RunSim(*a); }};
}

TIERFLOW_COMMAND(MakeSim);

}  // namespace
}  // namespace tierflow::cli
