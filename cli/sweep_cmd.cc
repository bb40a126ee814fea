// tierflow sweep SWEEP.yaml [-j N] [-o results.csv] [--plot out.png] [--shard I/N] [--top K] [--set k=v] [--json]
// tierflow sweep merge A.csv B.csv ... -o all.csv [--plot out.png] [--top K]
// docs/sweep-format.md documents the file, the CSV and sharding.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "command.h"
#include "tierflow/core/files.h"
#include "inputs.h"
#include "tierflow/core/units.h"
#include "tierflow/sim/simulator.h"
#include "tierflow/sweep/sweep.h"

namespace tierflow::cli {
namespace {

struct SweepArgs {
  std::string input;
  int jobs = 0;  // 0: one per core
  std::string output;
  std::string plot;
  std::string shard;
  int top = 10;
  std::string parallelism = "processes";
  std::vector<std::string> sets;
  bool json = false;
  // merge
  std::vector<std::string> merge_inputs;
  std::string merge_output;
  std::string merge_plot;
  int merge_top = 10;
  CLI::App* merge = nullptr;
};

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Status RunMerge(const SweepArgs& a) {
  std::vector<CommandPath> paths = {{"-o", a.merge_output, PathUse::kWrites}, {"--plot", a.merge_plot, PathUse::kWrites}};
  for (const std::string& input : a.merge_inputs) paths.push_back({"input", input, PathUse::kReads});
  TF_RETURN_IF_ERROR(CheckCommandPaths(paths));
  TF_ASSIGN_OR_RETURN(sweep::CsvTable merged, sweep::MergeCsvs(a.merge_inputs));
  TF_RETURN_IF_ERROR(sweep::WriteTextFile(a.merge_output, sweep::CsvToText(merged)));
  std::printf("merged %zu files, %zu runs -> %s\n\n", a.merge_inputs.size(), merged.rows.size(), a.merge_output.c_str());
  std::printf("%s", sweep::RankedTable(merged, a.merge_top).c_str());
  if (!a.merge_plot.empty()) {
    TF_RETURN_IF_ERROR(sweep::PlotSweep(merged, a.merge_output, a.merge_plot));
    std::printf("plot: %s\n", a.merge_plot.c_str());
  }
  return Status::Ok();
}

Status RunSweepVerb(const SweepArgs& a) {
  if (a.merge->parsed()) return RunMerge(a);
  if (a.input.empty()) return InvalidArgument("sweep: give a SWEEP.yaml (or `tierflow sweep merge A.csv B.csv -o all.csv`)");
  TF_RETURN_IF_ERROR(sim::SimulatorAvailable());
  const int jobs = a.jobs > 0 ? a.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  sweep::Shard shard;
  if (!a.shard.empty()) {
    TF_ASSIGN_OR_RETURN(shard, sweep::ParseShard(a.shard));
  }
  TF_ASSIGN_OR_RETURN(sweep::SweepSpec spec, sweep::LoadSweepFile(a.input, a.sets));
  const std::vector<sweep::SweepRun> runs = sweep::RunsOfShard(spec, shard);
  TF_RETURN_IF_ERROR(CheckCommandPaths({{"input", a.input, PathUse::kReads}, {"-o", a.output, PathUse::kWrites}, {"--plot", a.plot, PathUse::kWrites}}));
  std::string output = a.output;
  if (output.empty()) {
    output = spec.name + (shard.count > 1 ? ".shard" + std::to_string(shard.index) + "of" + std::to_string(shard.count) : "") + ".csv";
  }
  if (!a.json) {
    std::fprintf(stderr, "sweep %s: %zu runs%s, %lld iteration(s) each, %d worker processes\n", spec.name.c_str(), runs.size(),
                 shard.count > 1 ? (" (shard " + a.shard + " of " + std::to_string(spec.runs.size()) + ")").c_str() : "",
                 static_cast<long long>(spec.iterations), jobs);
  }
  Progress progress("sweep", static_cast<double>(runs.size()));
  sweep::EvaluateOptions options;
  options.jobs = jobs;
  options.parallelism = a.parallelism == "threads" ? sweep::Parallelism::kThreads : sweep::Parallelism::kWorkerProcesses;
  double best_s = 0;  // the fastest feasible run so far, shown beside the bar
  options.progress = [&](int64_t done, int64_t, const sweep::Evaluation& completed) {
    if (completed.feasible && (best_s == 0 || completed.iteration_s < best_s)) best_s = completed.iteration_s;
    progress.Update(static_cast<double>(done), best_s > 0 ? "best " + FormatDuration(best_s) : "");
  };
  const double t0 = Now();
  TF_ASSIGN_OR_RETURN(std::vector<sweep::SweepRow> rows, sweep::RunSweep(spec, runs, options));
  const double wall_s = Now() - t0;
  progress.Finish();
  const std::string csv = sweep::SweepCsv(spec, rows);
  TF_RETURN_IF_ERROR(sweep::WriteTextFile(output, csv));
  TF_ASSIGN_OR_RETURN(sweep::CsvTable table, sweep::ParseCsv(csv, output));
  if (!a.plot.empty()) TF_RETURN_IF_ERROR(sweep::PlotSweep(table, spec.name, a.plot));

  int64_t feasible = 0;
  double plan_s = 0, sim_s = 0, worker_s = 0;
  const sweep::SweepRow* best = nullptr;
  for (const auto& r : rows) {
    plan_s += r.eval.plan_s;
    sim_s += r.eval.sim_s;
    worker_s += r.eval.wall_s;
    if (!r.eval.feasible) continue;
    ++feasible;
    if (!best || r.eval.iteration_s < best->eval.iteration_s) best = &r;
  }
  const double n = rows.empty() ? 1.0 : static_cast<double>(rows.size());
  if (a.json) {
    nlohmann::ordered_json j;
    j["sweep"] = spec.name;
    j["csv"] = output;
    if (!a.plot.empty()) j["plot"] = a.plot;
    j["runs"] = rows.size();
    j["run_count"] = spec.runs.size();
    j["shard"] = std::to_string(shard.index) + "/" + std::to_string(shard.count);
    j["feasible"] = feasible;
    j["jobs"] = jobs;
    j["wall_s"] = wall_s;
    j["mean_plan_s"] = plan_s / n;
    j["mean_sim_s"] = sim_s / n;
    j["mean_worker_s"] = worker_s / n;
    if (best) {
      nlohmann::ordered_json b;
      b["run"] = best->run.index;
      b["iteration_s"] = best->eval.iteration_s;
      nlohmann::ordered_json settings = nlohmann::ordered_json::object();
      for (const auto& [k, v] : best->run.settings) settings[k] = v;
      b["settings"] = settings;
      j["best"] = b;
    }
    std::printf("%s\n", j.dump(2).c_str());
    return Status::Ok();
  }
  std::printf("%s", sweep::RankedTable(table, a.top).c_str());
  std::printf("\n%zu runs in %s with -j %d (%.2f runs/s); per run: plan %s, simulate %s, worker %s\n",
              rows.size(), FormatDuration(wall_s).c_str(), jobs, wall_s > 0 ? static_cast<double>(rows.size()) / wall_s : 0.0,
              FormatDuration(plan_s / n).c_str(), FormatDuration(sim_s / n).c_str(), FormatDuration(worker_s / n).c_str());
  std::printf("csv: %s\n", output.c_str());
  if (!a.plot.empty()) std::printf("plot: %s\n", a.plot.c_str());
  return Status::Ok();
}

Command MakeSweep(CLI::App& parent) {
  auto* a = Keep<SweepArgs>();
  CLI::App* app = parent.add_subcommand("sweep", "Simulate many variations of a scenario in parallel into a CSV");
  app->add_option("sweep", a->input, "Sweep file (YAML, docs/sweep-format.md)");
  AddNumber(app, "-j,--jobs", &a->jobs, "Worker processes (0: one per core)", 0, 1024);
  app->add_option("-o,--output", a->output, "CSV to write (default: <sweep name>.csv)");
  app->add_option("--plot", a->plot, "Also write a PNG plot (needs gnuplot)");
  app->add_option("--shard", a->shard, "Run only slice I of N (runs with index % N == I), e.g. 0/4");
  AddNumber(app, "--top", &a->top, "Rows of the ranked table", 0)->capture_default_str();
  app->add_option("--parallelism", a->parallelism,
                  "processes: a worker process plans and simulates each run (fastest); threads: threads plan, "
                  "each simulation forks")
      ->check(CLI::IsMember({"processes", "threads"}))
      ->capture_default_str();
  AddSetOption(app, &a->sets);
  app->add_flag("--json", a->json, "Print a JSON summary instead of the table");
  app->require_subcommand(0, 1);
  a->merge = app->add_subcommand("merge", "Join the CSVs of a sweep's shards into one");
  a->merge->add_option("csv", a->merge_inputs, "Shard CSVs")->required();
  a->merge->add_option("-o,--output", a->merge_output, "Merged CSV to write")->required();
  a->merge->add_option("--plot", a->merge_plot, "Also write a PNG plot (needs gnuplot)");
  AddNumber(a->merge, "--top", &a->merge_top, "Rows of the ranked table", 0)->capture_default_str();
  return {app, [a] {
            return RunSweepVerb(*a);
          }};
}

TIERFLOW_COMMAND(MakeSweep);

}  // namespace
}  // namespace tierflow::cli
