// tierflow validate SCENARIO|SCHEDULE --profile P.yaml --disk [NAME=]DIR ... | --disk-root DIR [-n N]
//                  [--repeats R] [--trace both.json] [--records-dir DIR] [--worst K] [--json]
// Runs one schedule for real (as `run`) and on the simulator with a calibrated profile (as
// `sim --profile`), then prints how well sim predicted real: the steady-state iteration time,
// per iteration, per op class and the worst tasks (docs/calibration.md, "Validation"). Compute is
// compared per layer and phase (traces::GroupComputeByLayer): real charges a layer's whole
// forward or backward to one of its tasks. --trace writes both timelines into one Perfetto file.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "command.h"
#include "inputs.h"
#include "model_figures.h"
#include "tierflow/core/files.h"
#include "tierflow/core/units.h"
#include "tierflow/real/collective.h"
#include "tierflow/real/disk_probe.h"
#include "tierflow/real/disk_set.h"
#include "tierflow/real/executor.h"
#include "tierflow/real/io_memory.h"
#include "tierflow/traces/chrome_trace.h"
#include "tierflow/traces/compare.h"
#include "tierflow/traces/summary.h"
#include "tierflow/sim/simulator.h"

namespace tierflow::cli {
namespace {

struct ValidateArgs {
  std::string input;
  std::string profile;
  std::vector<std::string> disks;
  std::string disk_root;
  int64_t iterations = 6;
  std::string data;
  std::string storage = "auto";
  std::string trace;
  std::string records_dir;
  int32_t worst = 10;
  int32_t repeats = 3;
  std::vector<std::string> sets;
  bool json = false;
};

// One real run of the schedule.
struct RealRun {
  std::vector<TraceRecord> records;
  int64_t direct_io_bytes = 0, buffered_io_bytes = 0;
  std::vector<std::string> buffered_disks;
};

// The real runs, --repeats of them, with a progress bar on rank 0.
StatusOr<std::vector<RealRun>> RunRepeatedly(const ValidateArgs& a, const PlannedInput& in, const real::TrainConfig& config,
                                             real::Collective* comm) {
  const bool reports = comm == nullptr || comm->rank() == 0;
  std::vector<RealRun> runs;
  std::optional<Progress> progress;
  if (reports) progress.emplace("running", static_cast<double>(a.iterations * a.repeats));
  for (int32_t rep = 0; rep < a.repeats; ++rep) {
    real::RunOptions ro;
    ro.iterations = a.iterations;
    ro.disks = a.disks;
    ro.disk_root = a.disk_root;
    ro.storage = a.storage;
    ro.collective = comm;
    ro.on_iteration = [&](int64_t iteration, double) {
      if (progress) progress->Update(static_cast<double>(rep * a.iterations + iteration + 1));
    };
    auto ran = real::RunSchedule(in.schedule, config, ro);
    if (!ran.ok() && comm != nullptr) {  // the other ranks would wait for this one forever
      std::fprintf(stderr, "tierflow validate: error: rank %d of %d: %s\n", comm->rank(), comm->ranks(), ran.status().ToString().c_str());
      std::fflush(stderr);
      comm->Abort(1);
    }
    if (!ran.ok()) {
      if (progress) progress->Finish();
      return ran.status().WithContext("real run");
    }
    runs.push_back({std::move(ran->records), ran->direct_io_bytes, ran->buffered_io_bytes, ran->buffered_disks});
  }
  if (progress) progress->Finish();
  return runs;
}

// What validate reports: the real runs against sim (traces::ValidateAgainstRuns), the disks'
// directories, and the run compared.
struct Validation {
  const traces::SimValidation& judged;
  const std::vector<real::DiskDir>& dirs;
  const RealRun& median;
};

void PrintValidationJson(const ValidateArgs& a, const PlannedInput& in, const Validation& v) {
  nlohmann::ordered_json j;
  j["scenario"] = in.scenario.name;
  j["policy"] = in.scenario.policy;
  j["profile"] = a.profile;
  j["iterations"] = a.iterations;
  const traces::TraceComparison& whole = v.judged.whole;
  j["real_runs_iteration_s"] = v.judged.real_iteration_s;
  j["real_iteration_s"] = whole.a_mean_iteration_s;
  j["sim_iteration_s"] = whole.b_mean_iteration_s;
  j["iteration_error"] = std::isfinite(whole.mean_iteration_rel_error) ? nlohmann::ordered_json(whole.mean_iteration_rel_error)
                                                                      : nlohmann::ordered_json();
  j["comparison"] = nlohmann::ordered_json::parse(traces::ComparisonToJson(v.judged.grouped));
  nlohmann::ordered_json schedulers = nlohmann::ordered_json::object();
  for (const real::DiskDir& d : v.dirs) schedulers[d.device] = real::IoSchedulerOf(d.dir);
  j["io_schedulers"] = schedulers;
  j["direct_io_bytes"] = v.median.direct_io_bytes;
  j["buffered_io_bytes"] = v.median.buffered_io_bytes;
  j["buffered_disks"] = v.median.buffered_disks;
  std::printf("%s\n", j.dump(2).c_str());
}

void PrintValidationText(const ValidateArgs& a, const PlannedInput& in, const Validation& v) {
  std::printf("validate %s (policy %s), %lld iterations; sim on profile %s\n\n", in.scenario.name.c_str(),
              in.scenario.policy.c_str(), static_cast<long long>(a.iterations), a.profile.c_str());
  std::string times;
  for (double t : v.judged.real_iteration_s) times += (times.empty() ? "" : ", ") + FormatDuration(t);
  std::printf("real runs (steady-state iteration time): %s; compared: the median run\n", times.c_str());
  const traces::TraceComparison& whole = v.judged.whole;
  std::printf("iteration time (steady state): real %s, sim %s, error %+.2f %%\n\n", FormatDuration(whole.a_mean_iteration_s).c_str(),
              FormatDuration(whole.b_mean_iteration_s).c_str(), 100 * whole.mean_iteration_rel_error);
  std::printf("a = real, b = sim; compute compared per layer and phase\n%s", traces::ComparisonToText(v.judged.grouped).c_str());
  if (!a.trace.empty()) std::printf("\ntimeline: %s (real and sim side by side; open in ui.perfetto.dev)\n", a.trace.c_str());
  for (const real::DiskDir& d : v.dirs) {
    const std::string note = real::IoSchedulerNote(d.device, d.dir);
    if (!note.empty()) std::printf("\n%s\n", note.c_str());
  }
  if (const std::string note = real::HugePageNote(real::TransparentHugePageMode()); !note.empty()) std::printf("\n%s\n", note.c_str());
  // The profile's disk model is fitted from O_DIRECT probes: page-cache bytes are outside it.
  const std::string buffered = BufferedIoNote(v.median.direct_io_bytes, v.median.buffered_io_bytes, v.median.buffered_disks);
  if (!buffered.empty()) std::printf("\n%s  the profile's disk model is O_DIRECT's: those bytes are outside it\n", buffered.c_str());
}

Status RunValidate(const ValidateArgs& a) {
  TF_RETURN_IF_ERROR(sim::SimulatorAvailable());  // before any real run
  // Several ranks: one process per rank under mpirun, as `run` (docs/executor.md "Many ranks");
  // every rank runs the real runs, rank 0 compares every rank's records with sim's and reports.
  std::unique_ptr<real::Collective> comm;
  if (AutoCollectiveBackend() != "local") {
    TF_ASSIGN_OR_RETURN(comm, real::OpenCollective(AutoCollectiveBackend()));
  }
  const bool reports = comm == nullptr || comm->rank() == 0;
  auto before_run = [&](Status st) {
    if (!st.ok() && !reports) std::exit(1);  // every rank finds it; rank 0 says it, once
    return st;
  };
  auto in_or = LoadPlannedInput(a.input, a.sets);
  TF_RETURN_IF_ERROR(before_run(in_or.status()));
  PlannedInput in = std::move(in_or).value();
  std::vector<CommandPath> paths = {{"input", a.input, PathUse::kReads},       {"--profile", a.profile, PathUse::kReads},
                                    {"--data", a.data, PathUse::kReads},        {"--trace", a.trace, PathUse::kWrites},
                                    {"--records-dir", a.records_dir, PathUse::kWritesIn}, {"--disk-root", a.disk_root, PathUse::kWritesIn}};
  for (const std::string& d : a.disks) paths.push_back({"--disk", d.find('=') == std::string::npos ? d : d.substr(d.find('=') + 1), PathUse::kWritesIn});
  TF_RETURN_IF_ERROR(before_run(CheckCommandPaths(paths)));
  auto profile_or = LoadHardwareFile(a.profile);
  TF_RETURN_IF_ERROR(before_run(profile_or.status()));
  models::HardwareSpec profile = std::move(profile_or).value();

  // Simulate first: a profile that does not fit the schedule (a device it lacks) fails in
  // seconds, before the real run.
  sim::SimOptions so;
  so.iterations = a.iterations;
  auto simulated = sim::Simulate(in.schedule, profile, so);
  if (!simulated.ok()) return before_run(simulated.status().WithContext("sim with profile '" + a.profile + "'"));

  auto config_or = MakeTrainConfig(in.scenario, a.data, 0, 0);
  TF_RETURN_IF_ERROR(before_run(config_or.status()));
  const real::TrainConfig config = std::move(config_or).value();
  TF_RETURN_IF_ERROR(before_run(CheckProcessCount(comm.get(), config.ranks, a.input)));
  // The directory of each storage device, as the run maps them (its I/O scheduler is reported).
  auto dirs_or = real::DiskDirsForSchedule(in.schedule, a.disks, a.disk_root);
  TF_RETURN_IF_ERROR(before_run(dirs_or.status()));
  const std::vector<real::DiskDir> dirs = std::move(dirs_or).value();
  // A shared machine slows whole runs by bursts of other load: run `repeats` times and compare
  // with the run of median steady-state iteration time (each run starts from the same weights).
  TF_ASSIGN_OR_RETURN(std::vector<RealRun> runs, RunRepeatedly(a, in, config, comm.get()));
  if (!reports) return Status::Ok();  // rank 0 has every rank's records
  // Real is the reference; the run of median steady-state iteration time is compared.
  std::vector<const std::vector<TraceRecord>*> real_runs;
  for (const RealRun& r : runs) real_runs.push_back(&r.records);
  traces::CompareOptions co;
  co.worst_count = a.worst;
  const std::vector<TraceRecord>& sim_records = simulated->records;
  const traces::SimValidation judged = traces::ValidateAgainstRuns(real_runs, sim_records, co);
  const RealRun& median = runs[judged.median];
  if (!a.records_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(a.records_dir, ec);
    if (ec) return InvalidArgument("--records-dir '" + a.records_dir + "': " + ec.message());
    TF_RETURN_IF_ERROR(WriteTraceFile((std::filesystem::path(a.records_dir) / "real.jsonl").string(), median.records));
    TF_RETURN_IF_ERROR(WriteTraceFile((std::filesystem::path(a.records_dir) / "sim.jsonl").string(), sim_records));
  }
  if (!a.trace.empty()) {
    std::vector<TraceRecord> both = median.records;
    both.insert(both.end(), sim_records.begin(), sim_records.end());
    TF_RETURN_IF_ERROR(traces::WriteChromeTrace(a.trace, both, &in.schedule));
  }
  const Validation v{judged, dirs, median};
  if (a.json) {
    PrintValidationJson(a, in, v);
  } else {
    PrintValidationText(a, in, v);
  }
  return Status::Ok();
}

Command MakeValidate(CLI::App& parent) {
  auto* a = Keep<ValidateArgs>();
  CLI::App* app = parent.add_subcommand("validate", "Run a schedule for real and on sim with a calibrated profile; print sim's prediction error");
  app->add_option("input", a->input, "Scenario (YAML) or schedule (JSON)")->required();
  app->add_option("--profile", a->profile, "Hardware profile to simulate on (from tierflow calibrate)")->required();
  app->add_option("--disk", a->disks, "Directory for nvme0, then nvme1, ..., remote0, ..., or NAME=DIR (as tierflow run)");
  app->add_option("--disk-root", a->disk_root, "A subdirectory here for every storage device without a --disk (as tierflow run)");
  AddNumber(app, "-n,--iterations", &a->iterations, "Iterations of each, at least 3 (the steady-state mean drops the first, a warm-up, and the last, which drains alone: docs/trace-format.md)", int64_t{3}, int64_t{1000000})->capture_default_str();
  app->add_option("--data", a->data, std::string("Training text or token file; default: the shipped ") + kDefaultCorpus);
  app->add_option("--storage", a->storage, "I/O back-end of the real run: uring, posix, auto")->capture_default_str();
  app->add_option("--trace", a->trace, "Write both timelines (real and sim) into one Perfetto file");
  app->add_option("--records-dir", a->records_dir, "Write real.jsonl and sim.jsonl there");
  AddNumber(app, "--worst", &a->worst, "How many worst tasks to list", 0)->capture_default_str();
  AddNumber(app, "--repeats", &a->repeats, "Real runs; the one of median iteration time is compared", 1, 1000)->capture_default_str();
  AddSetOption(app, &a->sets);
  app->add_flag("--json", a->json, "Print the result as JSON");
  return {app, [a] { return RunValidate(*a); }};
}

TIERFLOW_COMMAND(MakeValidate);

}  // namespace
}  // namespace tierflow::cli
