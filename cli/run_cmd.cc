// tierflow run SCENARIO|SCHEDULE --disk [NAME=]DIR ... | --disk-root DIR [--iterations N] [--trace out.json]
//              [--records out.jsonl] [--data FILE] [--in-memory] [--json]
// Runs a schedule for real (real/exec): fine-tunes the scenario's model on the CPU with gpu0
// emulated in host memory, state offloaded to the --disk directories as the schedule says.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <map>
#include <memory>
#include <optional>

#include "command.h"
#include "fine_tune.h"
#include "inputs.h"
#include "model_figures.h"
#include "tierflow/core/files.h"
#include "tierflow/core/units.h"
#include "tierflow/real/checksum.h"
#include "tierflow/real/collective.h"
#include "tierflow/real/executor.h"
#include "tierflow/real/llama.h"
#include "tierflow/traces/chrome_trace.h"
#include "tierflow/traces/summary.h"

namespace tierflow::cli {
namespace {

struct RunArgs {
  std::string input;
  std::vector<std::string> disks;
  std::string disk_root;
  int64_t iterations = 3;
  std::string trace;
  std::string records;
  std::string data;
  std::string init;  // safetensors file of the initial weights (Hugging Face names)
  std::string save_model;  // a Hugging Face directory for the fine-tuned model
  std::string save_dtype;  // bf16 | fp32; empty: the input directory's (bf16 without one)
  int64_t save_every = 0;  // also save it after every K iterations
  int64_t eval_every = 0;  // the held-out loss after every K iterations
  std::string storage = "auto";
  std::string compute = "cpu";
  int threads = 0;
  float lr = 0;  // 0: the scenario's training.optimizer.lr
  bool in_memory = false;
  bool plain_loop = false;
  std::string checkpoint;
  int64_t checkpoint_every = 0;
  bool resume = false;
  int64_t exit_after_tasks = 0;
  int64_t exit_in_checkpoint = 0;
  int64_t fail_io_after = -1;  // testing: the I/O operation after this many fails (EIO)
  int32_t exit_rank = -1;  // with several ranks: only this one exits or fails (-1: every rank)
  std::vector<std::string> sets;
  bool json = false;
};

// A billion iterations of the smallest model is years; more is a typo.
constexpr int64_t kMaxIterations = 1000000000;
// The iterations whose trace records a run keeps for its report and --trace timeline: a long
// run's memory stays flat, and --records streams every record to its file as the run goes.
constexpr int64_t kReportIterations = 32;

// What the run's checkpoints cost: how many, their size, and the median of each part (the
// states gathered from their homes, then the atomic save), with the save's bandwidth.
// With several ranks, rank 0's: its shard's size and time (the commit follows beside training).
std::string CheckpointNote(const std::vector<real::RunResult::CheckpointTiming>& list, const std::string& dir, bool ranks) {
  auto median = [&](auto field) {
    std::vector<double> v;
    for (const auto& c : list) v.push_back(field(c));
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double gather = median([](const auto& c) { return c.gather_s; });
  const double save = median([](const auto& c) { return c.save_s; });
  const double total = median([](const auto& c) { return c.gather_s + c.save_s; });
  const double bytes = static_cast<double>(list.back().bytes);
  return "checkpoints: " + std::to_string(list.size()) + " saved to " + dir + ", " + FormatBytes(bytes) + (ranks ? " of rank 0's each" : " each") + "; median " +
         FormatDuration(total) + " with training paused (gathering the states " + FormatDuration(gather) + ", saving " +
         FormatDuration(save) + ": " + FormatBandwidth(bytes / save) + ", " + FormatDuration(total / (bytes / 1e9)) + " per GB)\n";
}

// What `run` asks of the executor (everything but streaming the records).
real::RunOptions ScheduleRunOptions(const RunArgs& a, real::Collective* comm, const std::function<void(int64_t, double)>& on_iteration,
                                    const real::MasterHook& on_master) {
  real::RunOptions options;
  options.iterations = a.iterations;
  options.disks = a.disks;
  options.disk_root = a.disk_root;
  options.storage = a.storage;
  options.compute = a.compute;
  options.on_iteration = on_iteration;
  options.on_master = on_master;
  options.plain_loop = a.plain_loop;
  options.checkpoint_dir = a.checkpoint;
  options.checkpoint_every = a.checkpoint_every;
  options.resume = a.resume;
  const bool spared = comm != nullptr && a.exit_rank >= 0 && comm->rank() != a.exit_rank;
  options.exit_after_tasks = spared ? 0 : a.exit_after_tasks;
  options.exit_in_checkpoint = spared ? 0 : a.exit_in_checkpoint;
  if (a.fail_io_after >= 0 && !spared) {
    real::FaultRule io_error;
    io_error.skip = a.fail_io_after;
    options.faults.push_back(io_error);
  }
  options.keep_iterations = kReportIterations;
  options.collective = comm;
  return options;
}

// Several ranks: each rank's I/O, GPU memory and host pools, and each node's host pools.
nlohmann::ordered_json RanksReport(const real::RunResult& result) {
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (const real::RunResult::RankFigures& f : result.ranks) {
    ranks.push_back({{"rank", f.rank},
                     {"node", f.node},
                     {"direct_io_bytes", f.direct_io_bytes},
                     {"buffered_io_bytes", f.buffered_io_bytes},
                     {"gpu_memory_peak_bytes", f.gpu_memory.allocated},
                     {"gpu_memory_reserved_peak_bytes", f.gpu_memory.reserved},
                     {"host_pool_peak_bytes", f.host_pool_peak_bytes}});
  }
  return ranks;
}

// The run's report (--json's, and the text's source): the schedule's timings from the records,
// the executor's I/O, memory and checkpoints, the losses and the weights' hash.
nlohmann::ordered_json RunReport(const RunArgs& a, const PlannedInput& in, const real::RunResult& result, RunFacts* facts_out) {
  RunFacts& facts = *facts_out;
  nlohmann::ordered_json report;
  facts.scenario = in.scenario.name;
  facts.policy = a.in_memory ? "in-memory" : in.scenario.policy;
  facts.iterations = a.iterations;
  facts.pool_peak_bytes = result.pool_peak_bytes;
  facts.tasks = result.tasks;
  facts.wall_s = result.wall_s;
  facts.tasks_key = "tasks_executed";
  facts.setting = SettingOf(in.scenario);
  // A real GPU under a scenario of an emulated one (cpu-host's): the hardware's peak is not the
  // card's, so the report gives no MFU (tests/gpu/run.sh's 1B runs; bench/gpu_report.py has it).
  if (a.compute == "cuda" && in.scenario.hardware.node.gpu.shares_host_cores) facts.setting.peak_flops_per_gpu = 0;
  if (a.iterations > kReportIterations) facts.summarised_iterations = kReportIterations;
  if (a.in_memory) {
    report["iteration_s"] = traces::SteadyIterationTime(result.iteration_end_s, 0.0);  // ends from the run's start
    report["wall_s"] = result.wall_s;
  } else {
    report = BuildReport(in.schedule, result.records, facts);
  }
  if (!a.in_memory) {
    report["dispatch_busy_s"] = result.dispatch_busy_s;
    report["direct_io_bytes"] = result.direct_io_bytes;
    report["buffered_io_bytes"] = result.buffered_io_bytes;
    report["buffered_disks"] = result.buffered_disks;
    report["notes"] = result.notes;
    report["host_bytes_made_in_run"] = result.host_bytes_made_in_run;
  }
  if (!result.checkpoints.empty()) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const auto& c : result.checkpoints) {
      list.push_back({{"iterations_done", c.iterations_done}, {"gather_s", c.gather_s}, {"save_s", c.save_s}, {"bytes", c.bytes}});
    }
    report["checkpoints"] = list;
  }
  report["gpu_memory_peak_bytes"] = result.gpu_memory.allocated;
  report["gpu_memory_reserved_peak_bytes"] = result.gpu_memory.reserved;
  if (!result.ranks.empty()) report["ranks"] = RanksReport(result);
  if (result.first_iteration > 0) report["first_iteration"] = result.first_iteration;
  report["loss"] = result.loss;
  report["weights_sha256"] = real::Sha256Hex(result.master.data(), result.master.size() * sizeof(float));
  return report;
}

void PrintRunText(const RunArgs& a, const PlannedInput& in, const real::RunResult& result, const nlohmann::ordered_json& report,
                  const RunFacts& facts) {
  if (a.in_memory) {
    std::printf("\niteration time   %s (steady state)\n", FormatDuration(report["iteration_s"].get<double>()).c_str());
  } else {
    std::printf("\n%s", ReportToText(in.schedule, report).c_str());
  }
  const std::string buffered = BufferedIoNote(result.direct_io_bytes, result.buffered_io_bytes, result.buffered_disks);
  if (!buffered.empty()) std::printf("\n%s", buffered.c_str());
  for (const std::string& note : result.notes) std::printf("\nnote: %s\n", note.c_str());
  if (!result.checkpoints.empty()) std::printf("\n%s", CheckpointNote(result.checkpoints, a.checkpoint, result.ranks.size() > 1).c_str());
  if (result.ranks.empty()) {
    std::printf("\ngpu0 memory: %s at peak, %s reserved (%s; the device's own activations and workspace come on top)\n",
                FormatBytes(result.gpu_memory.allocated).c_str(), FormatBytes(result.gpu_memory.reserved).c_str(),
                a.in_memory ? "the whole model's parameters and gradients" : "the schedule's GPU buffers and GPU-resident parameters");
  } else {
    // Every rank's own figures (the I/O above is their sum), and each node's host pools.
    std::printf("\nper rank (the GPU's memory: the schedule's GPU buffers and GPU-resident parameters)\n");
    std::map<int32_t, int64_t> node_host;
    for (const nlohmann::ordered_json& r : report["ranks"]) {
      const int32_t node = r["node"].get<int32_t>();
      node_host[node] += r["host_pool_peak_bytes"].get<int64_t>();
      std::printf("  rank %d (node %d)  I/O %s (%s through the page cache)  GPU memory %s at peak, %s reserved  host pools %s at peak\n",
                  r["rank"].get<int32_t>(), node, FormatBytes(static_cast<double>(r["direct_io_bytes"].get<int64_t>() + r["buffered_io_bytes"].get<int64_t>())).c_str(),
                  FormatBytes(static_cast<double>(r["buffered_io_bytes"].get<int64_t>())).c_str(),
                  FormatBytes(static_cast<double>(r["gpu_memory_peak_bytes"].get<int64_t>())).c_str(),
                  FormatBytes(static_cast<double>(r["gpu_memory_reserved_peak_bytes"].get<int64_t>())).c_str(),
                  FormatBytes(static_cast<double>(r["host_pool_peak_bytes"].get<int64_t>())).c_str());
    }
    for (const auto& [node, bytes] : node_host) {
      std::printf("  node %d  host pools %s at most (the sum of its ranks' peaks)\n", node, FormatBytes(static_cast<double>(bytes)).c_str());
    }
  }
  std::printf("ran %lld iterations in %s; final loss %.6f\nweights sha256 %s\n", static_cast<long long>(result.loss.size()),
              FormatDuration(result.wall_s).c_str(), result.loss.back(), report["weights_sha256"].get<std::string>().c_str());
  if (!a.trace.empty()) {
    const std::string which = facts.summarised_iterations > 0 ? "the last " + std::to_string(facts.summarised_iterations) + " iterations; " : "";
    std::printf("timeline: %s (%sopen in ui.perfetto.dev)\n", a.trace.c_str(), which.c_str());
  }
}

Status RunRun(const RunArgs& a) {
  if (a.in_memory && a.plain_loop) return InvalidArgument("--in-memory ignores the schedule and --plain-loop runs it: give one");
  if (a.in_memory && (!a.records.empty() || !a.trace.empty())) {
    return InvalidArgument(std::string(a.records.empty() ? "--trace" : "--records") +
                           " with --in-memory: the in-memory reference runs no schedule, so it has no task records to write (its "
                           "iteration times are in --json's report)");
  }
  if ((a.checkpoint_every > 0 || a.resume) && a.checkpoint.empty()) return InvalidArgument("--checkpoint-every and --resume need --checkpoint DIR");
  // Several ranks: one process per rank under mpirun, each running its part of the schedule;
  // rank 0 reports (docs/executor.md "Many ranks"). What every rank finds wrong before the run
  // (its inputs, the rank count) rank 0 says, once.
  std::unique_ptr<real::Collective> comm;
  if (!a.in_memory && AutoCollectiveBackend() != "local") {
    TF_ASSIGN_OR_RETURN(comm, real::OpenCollective(AutoCollectiveBackend()));
  }
  auto before_run = [&](Status st) {
    if (!st.ok() && comm != nullptr && comm->rank() != 0) std::exit(1);
    return st;
  };
  auto in_or = LoadPlannedInput(a.input, a.sets);
  TF_RETURN_IF_ERROR(before_run(in_or.status()));
  PlannedInput in = std::move(in_or).value();
  // Every path the run names, apart before anything is written (core/files.h).
  std::vector<CommandPath> paths = {{"input", a.input, PathUse::kReads},
                                    {"--init", a.init, PathUse::kReads},
                                    {"--data", a.data, PathUse::kReads},
                                    {"model.hf_dir (the input model's directory)", in.scenario.model_dir, PathUse::kReads},
                                    {"--records", a.records, PathUse::kWrites},
                                    {"--trace", a.trace, PathUse::kWrites},
                                    {"--save-model", a.save_model, PathUse::kReplaces},
                                    {"--disk-root", a.disk_root, PathUse::kWritesIn}};
  if (!a.in_memory) {
    for (const std::string& d : a.disks) paths.push_back({"--disk", d.find('=') == std::string::npos ? d : d.substr(d.find('=') + 1), PathUse::kWritesIn});
  }
  paths.push_back({"--checkpoint", a.checkpoint, PathUse::kWritesIn});
  TF_RETURN_IF_ERROR(before_run(CheckCommandPaths(paths)));
  auto config_or = MakeTrainConfig(in.scenario, a.data, a.lr, a.threads);
  TF_RETURN_IF_ERROR(before_run(config_or.status()));
  real::TrainConfig config = std::move(config_or).value();
  FineTuneArgs ft;
  ft.init = a.init;
  ft.model_dir = in.scenario.model_dir;
  ft.save_model = a.save_model;
  ft.save_dtype = a.save_dtype;
  ft.save_every = a.save_every;
  ft.eval_every = a.eval_every;
  auto fine_tune_or = FineTune::Prepare(std::move(ft), &config);
  TF_RETURN_IF_ERROR(before_run(fine_tune_or.status()));
  FineTune fine_tune = std::move(fine_tune_or).value();
  TF_RETURN_IF_ERROR(before_run(CheckProcessCount(comm.get(), config.ranks, a.input)));
  const bool reports = comm == nullptr || comm->rank() == 0;
  // A line per iteration: its loss, the tokens per second so far and the time left.
  const double tokens_per_iteration = static_cast<double>(config.batch * config.seq * config.micro_steps * config.ranks);
  const auto started = std::chrono::steady_clock::now();
  int64_t lines = 0;
  auto print_loss = [&](int64_t iteration, double loss) {
    if (a.json || !reports) return;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    ++lines;
    const double per = elapsed / static_cast<double>(lines);
    std::printf("iteration %4lld  loss %.6f  %s tokens/s  ETA %s%s\n", static_cast<long long>(iteration), loss,
                FormatCount(tokens_per_iteration / per).c_str(), FormatDuration(per * static_cast<double>(a.iterations - 1 - iteration)).c_str(),
                comm != nullptr ? "  (rank 0's batches)" : "");
    std::fflush(stdout);
  };
  const real::MasterHook on_master = fine_tune.Hook(!a.json && reports);
  real::RunResult result;
  std::optional<TraceWriter> records_out;  // put in place only when the run succeeds
  if (a.in_memory) {
    TF_ASSIGN_OR_RETURN(result, real::RunInMemory(config, a.iterations, print_loss, a.compute, on_master));
  } else {
    real::RunOptions options = ScheduleRunOptions(a, comm.get(), print_loss, on_master);
    if (!a.records.empty() && reports) {
      TF_ASSIGN_OR_RETURN(TraceWriter w, TraceWriter::Open(a.records));
      records_out.emplace(std::move(w));
      options.on_record = [&](const TraceRecord& r) { return records_out->Write(r); };
    }
    StatusOr<real::RunResult> run = real::RunSchedule(in.schedule, config, options);
    if (!run.ok() && comm != nullptr) {  // the other ranks would wait for this one forever
      std::fprintf(stderr, "tierflow run: error: rank %d of %d: %s\n", comm->rank(), comm->ranks(), run.status().ToString().c_str());
      std::fflush(stderr);
      comm->Abort(1);
    }
    TF_ASSIGN_OR_RETURN(result, std::move(run));
    if (records_out) TF_RETURN_IF_ERROR(records_out->Close());
    if (!reports) return Status::Ok();  // rank 0 reports every rank's weights and losses
  }
  RunFacts facts;
  nlohmann::ordered_json report = RunReport(a, in, result, &facts);
  TF_RETURN_IF_ERROR(fine_tune.Finish(result.master, result.first_iteration + static_cast<int64_t>(result.loss.size()), &report,
                                       !a.json));
  if (!a.trace.empty()) TF_RETURN_IF_ERROR(traces::WriteChromeTrace(a.trace, result.records, &in.schedule));
  if (a.json) {
    std::printf("%s\n", report.dump(2).c_str());
    return Status::Ok();
  }
  PrintRunText(a, in, result, report, facts);
  return Status::Ok();
}

Command MakeRun(CLI::App& parent) {
  auto* a = Keep<RunArgs>();
  CLI::App* app = parent.add_subcommand("run", "Run a scenario or schedule for real: fine-tune on the CPU, state offloaded to --disk directories");
  app->add_option("input", a->input, "Scenario (YAML) or schedule (JSON)")->required();
  app->add_option("--disk", a->disks,
                  "Directory for nvme0, then nvme1, ..., then remote0, ... (one per storage device of the schedule), or NAME=DIR");
  app->add_option("--disk-root", a->disk_root, "Give every storage device without a --disk its own subdirectory here (DIR/nvme0, ...)");
  AddNumber(app, "-n,--iterations", &a->iterations, "Training iterations", int64_t{1}, kMaxIterations)->capture_default_str();
  app->add_option("--trace", a->trace, "Write a Chrome/Perfetto timeline (JSON)");
  app->add_option("--records", a->records, "Write the trace records (JSON Lines, the format of sim --records)");
  app->add_option("--init", a->init, "Initial weights: a safetensors file of the model's tensors under their Hugging Face names (default: the model directory's with --model-dir, else tierflow's own initialisation)");
  app->add_option("--save-model", a->save_model,
                  "After the run, save the fine-tuned model as a Hugging Face directory (config.json and safetensors "
                  "shards of at most 5 GB), in place of any earlier save there");
  AddNumber(app, "--save-every", &a->save_every, "Also save it (in place of the last save) after every K iterations (needs --save-model)", int64_t{0}, kMaxIterations);
  app->add_option("--save-dtype", a->save_dtype, "The saved weights' type: bf16 or fp32 (default: the input directory's, else bf16)")
      ->check(CLI::IsMember({"bf16", "fp32"}));
  AddNumber(app, "--eval-every", &a->eval_every, "The loss and perplexity on a held-out batch (the corpus's last batch of windows, not trained on) after every K "
                  "iterations and at the end", int64_t{0}, kMaxIterations);
  app->add_option("--data", a->data, std::string("Training text (.txt, byte-tokenized) or llm.c token file; default: the shipped ") + kDefaultCorpus);
  app->add_option("--storage", a->storage, "I/O back-end: uring, posix, memory (store files in RAM), auto")->capture_default_str();
  app->add_option("--compute", a->compute, "Where gpu0 is: cpu (emulated in host memory) or cuda (GPU 0; a build with CUDA)")
      ->capture_default_str();
  AddNumber(app, "--threads", &a->threads, "Threads of each host compute pool (0: the schedule's for the optimizer and conversions, at most this rank's share of the cores; every core for the rest)", 0, kMaxThreads)->capture_default_str();
  AddNumber(app, "--lr", &a->lr, "AdamW's peak learning rate, in place of the scenario's training.optimizer.lr (0: the scenario's, whose default is 1e-3)", 0.0f, 1e3f);
  app->add_flag("--in-memory", a->in_memory, "Ignore the schedule: the same training as a plain loop in memory (the reference)");
  app->add_option("--checkpoint", a->checkpoint, "Directory for the training checkpoint (master weights, Adam moments, step)");
  AddNumber(app, "--checkpoint-every", &a->checkpoint_every, "Save a checkpoint after every K iterations (needs --checkpoint)", int64_t{0}, kMaxIterations);
  app->add_flag("--resume", a->resume, "Start from the committed checkpoint in --checkpoint, if any; -n is the total to reach");
  AddNumber(app, "--exit-after-tasks", &a->exit_after_tasks, "Testing: exit at once (as if killed) after N task completions", int64_t{0})
      ->group("");
  AddNumber(app, "--exit-in-checkpoint", &a->exit_in_checkpoint,
            "Testing: exit at once (as if killed) once this process has written its part of the K-th checkpoint, before it is committed", int64_t{0})
      ->group("");
  AddNumber(app, "--fail-io-after", &a->fail_io_after, "Testing: the I/O operation after N fails with EIO", int64_t{-1})->group("");
  AddNumber(app, "--exit-rank", &a->exit_rank, "Testing: under mpirun, only this rank exits or fails (--exit-after-tasks, --exit-in-checkpoint, --fail-io-after)", -1, 65535)
      ->group("");
  app->add_flag("--plain-loop", a->plain_loop,
                "Run the schedule's tasks one at a time in topological order, without the dispatcher (its overhead's baseline)");
  AddSetOption(app, &a->sets);
  app->add_flag("--json", a->json, "Print the report as JSON");
  return {app, [a] { return RunRun(*a); }};
}

TIERFLOW_COMMAND(MakeRun);

}  // namespace
}  // namespace tierflow::cli
