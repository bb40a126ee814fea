// tierflow plan SCENARIO -o schedule.json [--set k=v ...] [--json]
#include <cstdio>
#include <nlohmann/json.hpp>

#include "command.h"
#include "tierflow/core/files.h"
#include "inputs.h"
#include "model_figures.h"
#include "tierflow/core/units.h"

namespace tierflow::cli {
namespace {

struct PlanArgs {
  std::string scenario;
  std::string output;
  std::vector<std::string> sets;
  bool json = false;
};

Status RunPlan(const PlanArgs& a) {
  TF_RETURN_IF_ERROR(CheckCommandPaths({{"input", a.scenario, PathUse::kReads}, {"-o", a.output, PathUse::kWrites}}));
  TF_ASSIGN_OR_RETURN(PlannedInput in, LoadPlannedInput(a.scenario, a.sets));
  if (in.from_schedule_file) return InvalidArgument(a.scenario + ": plan takes a scenario (YAML), not a schedule");
  TF_RETURN_IF_ERROR(WriteScheduleFile(a.output, in.schedule));
  const Schedule& s = in.schedule;
  int64_t io_bytes = 0;
  double flops = 0;
  for (const TaskSpec& t : s.tasks()) {
    if (t.op == Op::kRead || t.op == Op::kWrite) io_bytes += t.bytes;
    flops += t.flops;
  }
  if (a.json) {
    nlohmann::ordered_json j;
    j["schedule"] = a.output;
    j["policy"] = in.scenario.policy;
    j["tasks"] = s.tasks().size();
    j["resources"] = s.resources().size();
    j["pools"] = s.pools().size();
    j["buffers"] = s.buffers().size();
    j["io_bytes_per_iteration"] = io_bytes;
    j["flops_per_iteration"] = flops;
    const std::vector<std::string> notes = PlanNotes(s);
    if (!notes.empty()) j["plan_notes"] = notes;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("planned %s (%s) -> %s\n", in.scenario.name.c_str(), in.scenario.policy.c_str(), a.output.c_str());
    std::printf("  %zu tasks, %zu resources, %zu pools, %zu buffers per iteration\n", s.tasks().size(),
                s.resources().size(), s.pools().size(), s.buffers().size());
    std::printf("  %s of disk I/O and %.3g FLOP per iteration\n", FormatBytes(static_cast<double>(io_bytes)).c_str(), flops);
    for (const std::string& note : PlanNotes(s)) std::printf("note: %s\n", note.c_str());
  }
  return Status::Ok();
}

Command MakePlan(CLI::App& parent) {
  auto* a = Keep<PlanArgs>();
  CLI::App* app = parent.add_subcommand("plan", "Generate the schedule of a scenario's policy");
  app->add_option("scenario", a->scenario, "Scenario YAML file")->required();
  app->add_option("-o,--output", a->output, "Schedule file to write (JSON)")->required();
  AddSetOption(app, &a->sets);
  app->add_flag("--json", a->json, "Print a JSON summary");
  return {app, [a] { return RunPlan(*a); }};
}

TIERFLOW_COMMAND(MakePlan);

}  // namespace
}  // namespace tierflow::cli
