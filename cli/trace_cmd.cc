// `tierflow trace`: look at trace records (docs/trace-format.md).
//   tierflow trace summary TRACE.jsonl [--schedule S.json] [--source NAME] [--json]
//   tierflow trace chrome TRACE.jsonl [MORE.jsonl ...] -o OUT.json [--schedule S.json]
//   tierflow trace compare A.jsonl B.jsonl [--worst N] [--json]
//   tierflow trace chakra SCENARIO|SCHEDULE -o DIR [-n N] [--profile P.yaml] [--storage-as-memory] [--json]
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "command.h"
#include "inputs.h"
#include "tierflow/core/files.h"
#include "tierflow/core/schedule.h"
#include "tierflow/core/text.h"
#include "tierflow/core/trace_record.h"
#include "tierflow/sim/simulator.h"
#include "tierflow/traces/chakra.h"
#include "tierflow/traces/chrome_trace.h"
#include "tierflow/traces/compare.h"
#include "tierflow/traces/summary.h"

namespace tierflow::cli {
namespace {

struct TraceOptions {
  std::vector<std::string> traces;
  std::string schedule_path;
  std::string source;
  std::string output_path;
  bool json = false;
  int32_t worst = 10;
};

struct ChakraArgs {
  std::string input;
  std::string dir;
  std::string profile;
  std::vector<std::string> sets;
  int64_t iterations = 3;
  traces::ChakraOptions options;
  bool json = false;
};

StatusOr<std::optional<Schedule>> LoadOptionalSchedule(const std::string& path) {
  if (path.empty()) return std::optional<Schedule>();
  TF_ASSIGN_OR_RETURN(Schedule s, ReadScheduleFile(path));
  return std::optional<Schedule>(std::move(s));
}

void Print(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  if (!text.empty() && text.back() != '\n') std::fputc('\n', stdout);
}

Status RunSummary(const TraceOptions& o) {
  TF_ASSIGN_OR_RETURN(std::vector<TraceRecord> records, ReadTraceFile(o.traces.at(0)));
  TF_ASSIGN_OR_RETURN(std::optional<Schedule> schedule, LoadOptionalSchedule(o.schedule_path));
  std::set<std::string> sources;
  for (const auto& r : records) sources.insert(r.source);
  if (!o.source.empty()) {
    if (!sources.count(o.source)) {
      return InvalidArgument("trace '" + o.traces[0] + "' has no records with source '" + o.source + "'");
    }
    std::erase_if(records, [&](const TraceRecord& r) { return r.source != o.source; });
  } else if (sources.size() > 1) {
    std::string names;
    for (const auto& s : sources) names += (names.empty() ? "" : ", ") + s;
    return InvalidArgument("trace '" + o.traces[0] + "' mixes records of several runs (sources " + names +
                           "); pick one with --source");
  }
  traces::TraceSummary summary = traces::Summarize(records, schedule ? &*schedule : nullptr);
  Print(o.json ? traces::SummaryToJson(summary) : traces::SummaryToText(summary));
  return Status::Ok();
}

Status RunChrome(const TraceOptions& o) {
  std::vector<CommandPath> paths = {{"-o", o.output_path, PathUse::kWrites}, {"--schedule", o.schedule_path, PathUse::kReads}};
  for (const std::string& path : o.traces) paths.push_back({"input", path, PathUse::kReads});
  TF_RETURN_IF_ERROR(CheckCommandPaths(paths));
  TF_ASSIGN_OR_RETURN(std::optional<Schedule> schedule, LoadOptionalSchedule(o.schedule_path));
  std::vector<TraceRecord> all;
  std::set<std::string> seen;
  for (const std::string& path : o.traces) {
    TF_ASSIGN_OR_RETURN(std::vector<TraceRecord> records, ReadTraceFile(path));
    // Two files with the same source (two real runs) stay apart: the later one's source gets
    // the file's stem appended.
    std::set<std::string> mine;
    for (const auto& r : records) mine.insert(r.source);
    std::map<std::string, std::string> rename;
    for (const auto& s : mine) {
      rename[s] = seen.count(s) ? s + "@" + std::filesystem::path(path).stem().string() : s;
    }
    for (auto& r : records) {
      r.source = rename[r.source];
      seen.insert(r.source);
      all.push_back(std::move(r));
    }
  }
  TF_RETURN_IF_ERROR(traces::WriteChromeTrace(o.output_path, all, schedule ? &*schedule : nullptr));
  std::printf("wrote %s: %zu records from %zu file(s)%s; open it in https://ui.perfetto.dev\n",
              o.output_path.c_str(), all.size(), o.traces.size(),
              schedule ? ", with pool occupancy counters" : "");
  return Status::Ok();
}

Status RunCompare(const TraceOptions& o) {
  TF_ASSIGN_OR_RETURN(std::vector<TraceRecord> a, ReadTraceFile(o.traces.at(0)));
  TF_ASSIGN_OR_RETURN(std::vector<TraceRecord> b, ReadTraceFile(o.traces.at(1)));
  traces::CompareOptions options;
  options.worst_count = o.worst;
  traces::TraceComparison c = traces::Compare(a, b, options);
  if (c.matched == 0) {
    return InvalidArgument("'" + o.traces[0] + "' and '" + o.traces[1] +
                           "' have no task instance in common (same task and iteration): traces of one schedule are compared");
  }
  Print(o.json ? traces::ComparisonToJson(c) : traces::ComparisonToText(c));
  return Status::Ok();
}

// Simulates the input, then writes the last iteration's tasks as Chakra execution traces, one
// per rank (traces/chakra.h; docs/trace-format.md "Chakra").
Status RunChakra(const ChakraArgs& a) {
  TF_RETURN_IF_ERROR(CheckCommandPaths({{"input", a.input, PathUse::kReads},
                                        {"--profile", a.profile, PathUse::kReads},
                                        {"-o", a.dir, PathUse::kWritesIn}}));
  if (a.options.prefix.empty() || a.options.prefix.find('/') != std::string::npos || a.options.prefix == "." ||
      a.options.prefix == "..") {
    return InvalidArgument("--prefix " + Quoted(a.options.prefix) + ": a file name without '/' (the files are <prefix>.<rank>.et in -o)");
  }
  TF_ASSIGN_OR_RETURN(PlannedInput in, LoadPlannedInput(a.input, a.sets));
  if (!a.profile.empty()) {
    TF_ASSIGN_OR_RETURN(in.scenario.hardware, LoadHardwareFile(a.profile));
  }
  traces::IterationTimes times;
  times.iteration = a.iterations - 1;
  times.start_s.assign(in.schedule.tasks().size(), 0.0);
  times.end_s.assign(in.schedule.tasks().size(), 0.0);
  sim::SimOptions options;
  options.iterations = a.iterations;
  options.schedule_validated = true;  // PlannedInput's schedule is (inputs.h): not a second time
  options.record_trace = false;
  options.on_complete = [&](int32_t task, int64_t iteration, double start_s, double end_s) {
    if (iteration != times.iteration) return;
    times.start_s[static_cast<size_t>(task)] = start_s;
    times.end_s[static_cast<size_t>(task)] = end_s;
  };
  TF_ASSIGN_OR_RETURN(const sim::SimResult result, sim::Simulate(in.schedule, in.scenario.hardware, options));
  TF_ASSIGN_OR_RETURN(const std::vector<traces::ChakraFile> files, traces::WriteChakraTraces(in.schedule, times, a.dir, a.options));
  if (a.json) {
    nlohmann::ordered_json j;
    j["iteration"] = times.iteration;
    j["simulated_s"] = result.makespan_s;
    j["prefix"] = (std::filesystem::path(a.dir) / a.options.prefix).string();
    for (const traces::ChakraFile& f : files) {
      j["files"].push_back({{"path", f.path}, {"rank", f.rank}, {"nodes", f.nodes}, {"bytes", f.bytes}});
    }
    Print(j.dump(2));
    return Status::Ok();
  }
  for (const traces::ChakraFile& f : files) {
    std::printf("wrote %s: rank %d, %lld nodes, %lld bytes\n", f.path.c_str(), f.rank, static_cast<long long>(f.nodes),
                static_cast<long long>(f.bytes));
  }
  std::printf("Chakra execution traces of iteration %lld (simulated); ASTRA-sim's workload prefix: %s\n",
              static_cast<long long>(times.iteration), (std::filesystem::path(a.dir) / a.options.prefix).string().c_str());
  return Status::Ok();
}

Command MakeTraceCommand(CLI::App& parent) {
  CLI::App* app = parent.add_subcommand("trace", "Summarise, export (Perfetto, Chakra) and compare trace records");
  app->require_subcommand(1);

  TraceOptions* summary = Keep<TraceOptions>();
  CLI::App* s = app->add_subcommand(
      "summary", "Iteration time, phases, busy/exposed time per resource, pool peaks, critical path");
  s->add_option("trace", summary->traces, "trace records (JSON Lines)")->required()->expected(1);
  s->add_option("--schedule", summary->schedule_path,
                "the schedule the trace ran (needed for pools and the critical path)");
  s->add_option("--source", summary->source, "summarise only records of this source (sim, real, ...)");
  s->add_flag("--json", summary->json, "print JSON instead of tables");

  TraceOptions* chrome = Keep<TraceOptions>();
  CLI::App* c = app->add_subcommand(
      "chrome", "Write Chrome trace JSON for Perfetto; several traces (sim and real) side by side");
  c->add_option("traces", chrome->traces, "trace records (JSON Lines), one or more")->required();
  c->add_option("-o,--output", chrome->output_path, "the Chrome trace JSON to write")->required();
  c->add_option("--schedule", chrome->schedule_path, "the schedule (adds pool occupancy counters)");

  TraceOptions* compare = Keep<TraceOptions>();
  CLI::App* k = app->add_subcommand("compare", "Compare two traces of one schedule; errors are (B - A) / A");
  k->add_option("traces", compare->traces, "A.jsonl (the reference) and B.jsonl")->required()->expected(2);
  AddNumber(k, "--worst", &compare->worst, "how many worst tasks to list", 0)->capture_default_str();
  k->add_flag("--json", compare->json, "print JSON instead of tables");

  ChakraArgs* chakra = Keep<ChakraArgs>();
  CLI::App* e = app->add_subcommand(
      "chakra", "Write a schedule's simulated iteration as Chakra execution traces (.et per rank, for ASTRA-sim)");
  e->add_option("input", chakra->input, "scenario (YAML) or schedule (JSON)")->required();
  e->add_option("-o,--output", chakra->dir, "the directory to write <prefix>.<rank>.et into")->required();
  AddNumber(e, "-n,--iterations", &chakra->iterations, "iterations to simulate; the last one is written", int64_t{1}, int64_t{1000})->capture_default_str();
  e->add_option("--profile", chakra->profile, "hardware profile to simulate on (calibrate's output)");
  AddSetOption(e, &chakra->sets);
  e->add_option("--prefix", chakra->options.prefix, "file name prefix")->capture_default_str();
  e->add_flag("--storage-as-memory", chakra->options.storage_as_memory,
              "disk reads and writes as MEM_LOAD/MEM_STORE nodes (for tools that predate STORAGE_NODE)");
  e->add_flag("--json", chakra->json, "print the files written as JSON");

  return Command{app, [=]() -> Status {
                   if (s->parsed()) return RunSummary(*summary);
                   if (e->parsed()) return RunChakra(*chakra);
                   if (c->parsed()) return RunChrome(*chrome);
                   if (k->parsed()) return RunCompare(*compare);
                   return InvalidArgument("trace needs a subcommand: summary, chrome, compare or chakra");
                 }};
}

}  // namespace

TIERFLOW_COMMAND(MakeTraceCommand);

}  // namespace tierflow::cli
