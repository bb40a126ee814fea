// Sweeps and the tuner on the small scenario (tests/cli/data/small.yaml: four Llama-2-7B layers
// on 4 x A100 with one NVMe), which plans and simulates in a few milliseconds.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "tierflow/policies/policy.h"
#include "tierflow/policies/scenario.h"
#include "tierflow/sim/simulator.h"
#include "tierflow/sweep/sweep.h"
#include "tierflow/sweep/tune.h"
#include "tierflow/traces/summary.h"

namespace tierflow::sweep {
namespace {

const std::string kData = std::string(TIERFLOW_SOURCE_DIR) + "/tests/cli/data";

std::string SmallYaml() {
  std::ifstream in(kData + "/small.yaml");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A fresh directory per test, removed at the end.
class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("tierflow-sweep-test-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

StatusOr<SweepSpec> Load(const std::string& body) {
  return LoadSweepText("base: small.yaml\n" + body, "test.yaml", kData);
}

TEST(SweepSpec, GridIsACrossProductLastKeyFastestRunsOuter) {
  auto spec = Load(
      "grid:\n"
      "  policy.pipeline_read: [false, true]\n"
      "  training.sequence_length: [512, 1024, 2048]\n"
      "runs:\n"
      "  - {}\n"
      "  - {policy.buffer_count: 8}\n");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_EQ(spec->runs.size(), 12u);
  EXPECT_EQ(spec->keys, (std::vector<std::string>{"policy.pipeline_read", "training.sequence_length", "policy.buffer_count"}));
  using Settings = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(spec->runs[0].settings, (Settings{{"policy.pipeline_read", "false"}, {"training.sequence_length", "512"}}));
  EXPECT_EQ(spec->runs[1].settings, (Settings{{"policy.pipeline_read", "false"}, {"training.sequence_length", "1024"}}));
  EXPECT_EQ(spec->runs[3].settings, (Settings{{"policy.pipeline_read", "true"}, {"training.sequence_length", "512"}}));
  EXPECT_EQ(spec->runs[11].settings,
            (Settings{{"policy.pipeline_read", "true"}, {"training.sequence_length", "2048"}, {"policy.buffer_count", "8"}}));
  for (size_t i = 0; i < spec->runs.size(); ++i) EXPECT_EQ(spec->runs[i].index, static_cast<int64_t>(i));
  EXPECT_EQ(spec->runs[11].variation().overrides,
            (std::vector<std::string>{"policy.pipeline_read=true", "training.sequence_length=2048", "policy.buffer_count=8"}));
}

TEST(SweepSpec, InlineBaseAndRunsOnly) {
  auto spec = LoadSweepText(
      "name: inline\n"
      "base: {model: {preset: llama2-7b, layers: 2}, hardware: {preset: a100x4-1nvme}}\n"
      "iterations: 2\n"
      "memory_budget: {host: 64 GiB}\n"
      "runs:\n  - {policy.buffer_count: 3}\n  - {policy.buffer_count: 4}\n  - {hardware.preset: a100x4-4nvme}\n",
      "inline.yaml", "");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->name, "inline");
  EXPECT_EQ(spec->iterations, 2);
  EXPECT_EQ(spec->budget.host_bytes, 64LL << 30);
  EXPECT_EQ(spec->runs.size(), 3u);
  EXPECT_EQ(spec->keys, (std::vector<std::string>{"policy.buffer_count", "hardware.preset"}));
}

TEST(SweepSpec, ErrorsNameTheKey) {
  struct Case {
    std::string body, expect;
  };
  const Case cases[] = {
      {"grid: {policy.buffer_count: [3]}\ncolour: red\n", "unknown key 'colour'"},
      {"grid: {policy.buffer_count: []}\n", "grid.policy.buffer_count: empty list"},
      {"grid: {policy.buffer_count: 3}\n", "grid.policy.buffer_count: expected a list"},
      {"iterations: 0\ngrid: {policy.buffer_count: [3]}\n", "iterations must be >= 1"},
      {"name: x\n", "neither 'grid' nor 'runs'"},
      {"runs: []\n", "runs: expected a non-empty list"},
      {"grid: {policy.buffer_count: [3]}\nruns: [{policy.buffer_count: 4}]\n", "also a grid key"},
      {"grid: {training.sequence_lenght: [1024]}\n", "unknown key 'sequence_lenght'"},
      {"grid: {training.sequence_length: [1024, lots]}\n", "grid.training.sequence_length value 'lots'"},
      {"memory_budget: {host: 12}\ngrid: {policy.buffer_count: [3]}\n", "memory_budget"},
  };
  for (const Case& c : cases) {
    auto spec = Load(c.body);
    ASSERT_FALSE(spec.ok()) << c.body;
    EXPECT_NE(spec.status().message().find(c.expect), std::string::npos) << c.body << " -> " << spec.status().message();
  }
  auto missing = LoadSweepText("base: absent.yaml\ngrid: {policy.buffer_count: [3]}\n", "t.yaml", kData);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(SweepSpec, ShardsPartitionTheRuns) {
  EXPECT_FALSE(ParseShard("3/3").ok());
  EXPECT_FALSE(ParseShard("-1/3").ok());
  EXPECT_FALSE(ParseShard("1").ok());
  EXPECT_FALSE(ParseShard("1/").ok());
  EXPECT_FALSE(ParseShard("a/2").ok());
  auto spec = Load("grid: {policy.buffer_count: [3, 4, 5, 6, 7, 8, 9]}\n");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  std::multiset<int64_t> seen;
  for (int64_t i = 0; i < 3; ++i) {
    auto shard = ParseShard(std::to_string(i) + "/3");
    ASSERT_TRUE(shard.ok());
    for (const SweepRun& r : RunsOfShard(*spec, *shard)) {
      EXPECT_EQ(r.index % 3, i);
      seen.insert(r.index);
    }
  }
  EXPECT_EQ(seen, (std::multiset<int64_t>{0, 1, 2, 3, 4, 5, 6}));
}

std::string FileText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The figures of a sweep row equal what traces::Summarize (the `tierflow sim` report) computes
// from the same run's records, over the same steady-state iterations (traces::SteadyIterations).
// Two scenarios: small, and tiny under ioc, whose last iteration drains its deferred writes
// alone and so has a short period — which the steady state must leave out (checked below, so
// that a sweep using another rule than the summary's fails here).
TEST(Evaluate, FiguresMatchTheTraceSummary) {
  struct Case {
    std::string name, yaml;
    std::vector<std::string> sets;
    bool short_last_period;
  };
  const Case cases[] = {{"small", SmallYaml(), {}, false},
                        {"tiny-cpu ioc", FileText(std::string(TIERFLOW_SOURCE_DIR) + "/scenarios/tiny-cpu.yaml"),
                         {"policy.name=ioc"}, true}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto scenario = policies::LoadScenarioText(c.yaml, c.sets, c.name);
    ASSERT_TRUE(scenario.ok()) << scenario.status().ToString();
    auto schedule = policies::Plan(*scenario);
    ASSERT_TRUE(schedule.ok());
    sim::SimOptions so;
    so.iterations = 4;
    auto result = sim::Simulate(*schedule, scenario->hardware, so);
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    const traces::TraceSummary summary = traces::Summarize(result->records, &*schedule);
    ASSERT_EQ(summary.iterations.size(), 4u);
    if (c.short_last_period) {
      const double last_period = summary.iterations[3].end_s - summary.iterations[2].end_s;
      ASSERT_LT(last_period, 0.99 * summary.mean_iteration_s) << "the case no longer tells the rules apart";
    }

    Variation v;
    v.overrides = c.sets;
    EvaluateOptions eo;
    eo.iterations = 4;
    auto e = EvaluateOne(c.yaml, c.name, v, eo);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    ASSERT_TRUE(e->feasible) << e->reason;
    EXPECT_DOUBLE_EQ(e->iteration_s, summary.mean_iteration_s);
    const traces::SteadyRange steady = traces::SteadyIterations(summary.iterations.size());
    double step = 0;
    for (size_t i = steady.first; i < steady.end; ++i) step += summary.iterations[i].phase(Phase::kStep).span_s;
    EXPECT_NEAR(e->step_s, step / static_cast<double>(steady.end - steady.first), 1e-9 * step);
    int64_t host = 0, gpu = 0;
    ASSERT_EQ(e->pool_peak_bytes.size(), schedule->pools().size());
    for (size_t p = 0; p < schedule->pools().size(); ++p) {
      EXPECT_EQ(e->pool_peak_bytes[p].first, schedule->pools()[p].name);
      EXPECT_EQ(e->pool_peak_bytes[p].second, result->pool_peak_bytes[p]);
      const DeviceKind kind = schedule->devices()[schedule->pools()[p].device].kind;
      if (kind == DeviceKind::kHost) host += result->pool_peak_bytes[p];
      if (kind == DeviceKind::kGpu) gpu = std::max(gpu, result->pool_peak_bytes[p]);
    }
    EXPECT_EQ(e->host_peak_bytes, host);
    EXPECT_EQ(e->gpu_peak_bytes, gpu);
    EXPECT_GT(e->forward_s, 0);
    EXPECT_GT(e->backward_s, 0);
  }
}

TEST(SteadyIterations, FirstAndLastLeftOutFromThree) {
  EXPECT_EQ(traces::SteadyIterations(0).end, 0u);
  EXPECT_EQ(traces::SteadyIterations(1).first, 0u);
  EXPECT_EQ(traces::SteadyIterations(1).end, 1u);
  EXPECT_EQ(traces::SteadyIterations(2).first, 1u);
  EXPECT_EQ(traces::SteadyIterations(2).end, 2u);
  EXPECT_EQ(traces::SteadyIterations(5).first, 1u);
  EXPECT_EQ(traces::SteadyIterations(5).end, 4u);
}

TEST(Sweep, InfeasibleRunsAreRowsWithTheReason) {
  auto spec = Load(
      "memory_budget: {host: 15 GiB}\n"  // the base pins 10.6 GiB, the last run 20.7
      "runs:\n"
      "  - {}\n"
      "  - {policy.buffer_size: 1000, policy.max_in_cpu: 0}\n"  // a partition on NVMe larger than a slot
      "  - {policy.bufer_count: 3}\n"               // a knob the policy does not read
      "  - {policy.pipeline_read: false, policy.pipeline_write: false, policy.buffer_count: 8, policy.sub_group_size: 5e8}\n");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EvaluateOptions eo;
  eo.jobs = 2;
  auto rows = RunSweep(*spec, spec->runs, eo);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 4u);
  EXPECT_TRUE((*rows)[0].eval.feasible) << (*rows)[0].eval.reason;
  EXPECT_FALSE((*rows)[1].eval.feasible);
  EXPECT_NE((*rows)[1].eval.reason.find("raise policy.buffer_size"), std::string::npos) << (*rows)[1].eval.reason;
  EXPECT_FALSE((*rows)[2].eval.feasible);
  EXPECT_NE((*rows)[2].eval.reason.find("bufer_count"), std::string::npos) << (*rows)[2].eval.reason;
  EXPECT_FALSE((*rows)[3].eval.feasible);  // 20.7 GiB of pinned host memory
  EXPECT_NE((*rows)[3].eval.reason.find("memory budget: host peak"), std::string::npos) << (*rows)[3].eval.reason;
  EXPECT_GT((*rows)[3].eval.iteration_s, 0);  // still simulated: its figures are in the row

  const std::string csv = SweepCsv(*spec, *rows);
  auto table = ParseCsv(csv, "csv");
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  ASSERT_EQ(table->rows.size(), 4u);
  EXPECT_EQ(table->rows[1][table->Column("feasible")], "false");
  EXPECT_EQ(table->rows[1][table->Column("iteration_s")], "");
  EXPECT_EQ(table->rows[0][table->Column("feasible")], "true");
  const std::string ranked = RankedTable(*table, 10);
  EXPECT_NE(ranked.find("4 runs: 1 feasible, 3 not"), std::string::npos) << ranked;
  EXPECT_NE(ranked.find("(the base)"), std::string::npos) << ranked;
}

// GCC says so with __SANITIZE_ADDRESS__, clang with __has_feature.
#if defined(__SANITIZE_ADDRESS__)
#define TIERFLOW_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TIERFLOW_TEST_ASAN 1
#endif
#endif
#ifdef TIERFLOW_TEST_ASAN
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif

// 24 runs, simulated whole several times by the tests below: every run plans and simulates in
// milliseconds (a buffer_size of 1000 elements cut the model into 1.07 M tensor pieces, a 200 MB
// schedule, seconds a run).
constexpr const char* kGrid =
    "grid:\n"
    "  policy.pipeline_read: [false, true]\n"
    "  policy.sub_group_size: [5e7, 1e8]\n"
    "  training.sequence_length: [512, 1024, 2048]\n"
    "runs:\n  - {}\n  - {policy.buffer_size: 2e8}\n";

TEST(Sweep, CsvIsTheSameWhateverTheJobsAndParallelism) {
  auto spec = Load(kGrid);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  std::vector<std::string> csvs;
  for (int jobs : {1, 3}) {
    for (Parallelism p : {Parallelism::kWorkerProcesses, Parallelism::kThreads}) {
      // Threads that each fork a simulation: under AddressSanitizer (GCC 12's, and clang 14's
      // that scripts/sanitize.sh builds with) a child can inherit the allocator's lock held by
      // another thread and wait on it forever (glibc's malloc is fork-safe, ASan's is not). The
      // other three variants still run under scripts/sanitize.sh.
      if (kAddressSanitizer && p == Parallelism::kThreads && jobs > 1) continue;
      EvaluateOptions eo;
      eo.jobs = jobs;
      eo.parallelism = p;
      int64_t last = 0;
      std::set<double> seen;  // each run's time, as it completes
      eo.progress = [&](int64_t done, int64_t total, const Evaluation& completed) {
        EXPECT_EQ(done, last + 1);
        EXPECT_EQ(total, 24);
        last = done;
        if (completed.feasible) seen.insert(completed.iteration_s);
      };
      auto rows = RunSweep(*spec, spec->runs, eo);
      ASSERT_TRUE(rows.ok()) << rows.status().ToString();
      EXPECT_EQ(last, 24);
      std::set<double> rows_seen;
      for (const SweepRow& row : *rows) {
        if (row.eval.feasible) rows_seen.insert(row.eval.iteration_s);
      }
      EXPECT_EQ(seen, rows_seen) << "progress hands on each run as it completes";
      csvs.push_back(SweepCsv(*spec, *rows));
    }
  }
  for (size_t i = 1; i < csvs.size(); ++i) EXPECT_EQ(csvs[i], csvs[0]) << "variant " << i;
}

TEST(Sweep, MergedShardsEqualTheUnshardedSweep) {
  TempDir dir;
  auto spec = Load(kGrid);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EvaluateOptions eo;
  eo.jobs = 2;
  auto all = RunSweep(*spec, spec->runs, eo);
  ASSERT_TRUE(all.ok());
  const std::string whole = SweepCsv(*spec, *all);
  std::vector<std::string> paths;
  for (int i = 0; i < 3; ++i) {
    auto rows = RunSweep(*spec, RunsOfShard(*spec, {i, 3}), eo);
    ASSERT_TRUE(rows.ok());
    paths.push_back(dir.File("shard" + std::to_string(i) + ".csv"));
    ASSERT_TRUE(WriteTextFile(paths.back(), SweepCsv(*spec, *rows)).ok());
  }
  // Any order of the slices.
  auto merged = MergeCsvs({paths[2], paths[0], paths[1]});
  ASSERT_TRUE(merged.ok()) << merged.status().ToString();
  EXPECT_EQ(CsvToText(*merged), whole);

  auto missing = MergeCsvs({paths[0], paths[2]});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("8 of 24 runs are missing (first: 1, 4, 7"), std::string::npos)
      << missing.status().message();
  auto twice = MergeCsvs({paths[0], paths[1], paths[2], paths[1]});
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("is in both"), std::string::npos) << twice.status().message();
  // A slice of another sweep: other columns.
  auto other = Load("grid: {policy.buffer_count: [3, 4]}\n");
  ASSERT_TRUE(other.ok());
  auto other_rows = RunSweep(*other, RunsOfShard(*other, {1, 3}), eo);
  ASSERT_TRUE(other_rows.ok());
  ASSERT_TRUE(WriteTextFile(dir.File("other.csv"), SweepCsv(*other, *other_rows)).ok());
  auto mixed = MergeCsvs({paths[0], paths[1], paths[2], dir.File("other.csv")});
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.status().message().find("other columns"), std::string::npos) << mixed.status().message();
}

TEST(Sweep, CsvRoundTripsQuotedFields) {
  CsvTable t;
  t.header = {"run", "run_count", "reason"};
  t.rows = {{"0", "1", "deadlock: a, \"b\"\nand more"}};
  auto back = ParseCsv(CsvToText(t), "t");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->rows, t.rows);
  EXPECT_FALSE(ParseCsv("a,b\n1\n", "t").ok());
}

TEST(Sweep, PlotWritesAPng) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) GTEST_SKIP() << "gnuplot is not installed";
  TempDir dir;
  auto spec = Load(kGrid);
  ASSERT_TRUE(spec.ok());
  EvaluateOptions eo;
  eo.jobs = 2;
  auto rows = RunSweep(*spec, spec->runs, eo);
  ASSERT_TRUE(rows.ok());
  auto table = ParseCsv(SweepCsv(*spec, *rows), "csv");
  ASSERT_TRUE(table.ok());
  const std::string png = dir.File("plot.png");
  Status s = PlotSweep(*table, "test sweep", png);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::ifstream in(png, std::ios::binary);
  char magic[8] = {};
  in.read(magic, 8);
  EXPECT_EQ(std::string(magic + 1, 3), "PNG");
  EXPECT_GT(std::filesystem::file_size(png), 10000u);
}

TEST(MemoryBudget, Parses) {
  auto b = ParseMemoryBudget("host=200GiB,gpu=70 GiB");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->host_bytes, 200LL << 30);
  EXPECT_EQ(b->gpu_bytes, 70LL << 30);
  EXPECT_EQ(ParseMemoryBudget("gpu=1 GB")->host_bytes, 0);
  EXPECT_FALSE(ParseMemoryBudget("disk=1GiB").ok());
  EXPECT_FALSE(ParseMemoryBudget("host=12").ok());  // no unit
}

// The small scenario's baseline pipelines the optimizer swapper on one SSD, which is slower
// than the serial swapper; turning both flags off only pays off together (and with more
// parameter slots): the exhaustive 360-run sweep's best within the baseline's memory is 8.49 s.
TEST(Tune, ImprovesOnTheBaselineWithinItsMemory) {
  TuneOptions options;
  options.jobs = 2;
  // One round of every policy (245 candidates) finds 8 % and meets over-budget ones; the default
  // twelve (1,149 candidates, a minute and a half under ASan) repeat the same code, and run in
  // cli.sweep_shard_merge_tune.
  options.max_rounds = 1;
  auto r = Tune(SmallYaml(), "small", options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->budget.host_bytes, r->baseline.host_peak_bytes);
  EXPECT_EQ(r->budget.gpu_bytes, r->baseline.gpu_peak_bytes);
  EXPECT_LT(r->best.iteration_s, r->baseline.iteration_s * 0.95);
  EXPECT_LE(r->best.host_peak_bytes, r->budget.host_bytes);
  EXPECT_LE(r->best.gpu_peak_bytes, r->budget.gpu_bytes);
  EXPECT_FALSE(r->changes.empty());
  EXPECT_GT(r->over_budget, 0);  // faster configurations above the budget exist and were refused
  // The overrides reproduce the best.
  auto again = EvaluateOne(SmallYaml(), "small", {r->best_overrides}, {});
  ASSERT_TRUE(again.ok());
  EXPECT_DOUBLE_EQ(again->iteration_s, r->best.iteration_s);
}

TEST(Tune, RespectsATightBudget) {
  TuneOptions options;
  options.jobs = 2;
  options.budget.host_bytes = 17LL << 29;  // 8.5 GiB; the baseline needs 8.9 GiB
  options.policies = {"zero-infinity"};     // the changes below are those of this policy's knobs
  auto r = Tune(SmallYaml(), "small", options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_LE(r->best.host_peak_bytes, 17LL << 29);
  EXPECT_LE(r->best.gpu_peak_bytes, r->baseline.gpu_peak_bytes);
  EXPECT_GT(r->over_budget, 0);
  // Only what matters is reported: the search also set buffer_count to its default 5 on the way,
  // which changes nothing and is left out.
  std::vector<std::string> changed;
  for (const KnobChange& c : r->changes) changed.push_back(c.knob + ":" + c.from + "->" + c.to);
  EXPECT_EQ(changed, (std::vector<std::string>{"policy.pipeline_read:true->false", "policy.pipeline_write:true->false"}));

  options.budget.host_bytes = 1LL << 20;  // nothing fits 1 MiB
  auto none = Tune(SmallYaml(), "small", options);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kResourceExhausted);
}

// A baseline that does not run as written (parameters on NVMe in swap buffers smaller than a
// partition, which DeepSpeed asserts on) is repaired along the knob its error names, to within
// 1/64 of the least value that runs; past that problem lies the next (DeepSpeed's default five
// swap buffers are too few for whole partitions), repaired the same way; the search starts there,
// and the changes still start from the scenario as written.
TEST(Tune, RepairsABaselineThatDoesNotRun) {
  auto broken = policies::LoadScenarioText(SmallYaml(), {"policy.buffer_size=1000", "policy.max_in_cpu=0", "policy.buffer_count=5"}, "small");
  ASSERT_TRUE(broken.ok()) << broken.status().ToString();
  const auto plan = policies::Plan(*broken);
  ASSERT_FALSE(plan.ok());
  const std::string reason = plan.status().message();
  const size_t at = reason.find("raise policy.buffer_size to at least ");
  ASSERT_NE(at, std::string::npos) << reason;
  const int64_t least = std::stoll(reason.substr(at + std::string("raise policy.buffer_size to at least ").size()));
  TuneOptions options;
  options.jobs = 2;
  options.max_rounds = 1;
  options.policies = {"zero-infinity"};
  auto r = Tune(broken->yaml, "small", options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE(r->baseline_problem.find("policy.buffer_size: the partition of"), std::string::npos) << r->baseline_problem;
  ASSERT_EQ(r->repairs.size(), 2u);
  EXPECT_EQ(r->repairs[1].knob, "policy.buffer_size");
  EXPECT_EQ(r->repairs[1].from, "1000");
  const int64_t repaired = std::stoll(r->repairs[1].to);
  EXPECT_GE(repaired, least);
  EXPECT_LE(repaired, least + least / 64 + 1) << "bisected back to within 1/64 of the least that runs";
  EXPECT_EQ(r->repairs[0].knob, "policy.buffer_count");
  EXPECT_EQ(r->repairs[0].from, "5");
  // The least count that runs: one fewer does not plan.
  auto fewer = policies::LoadScenarioText(
      SmallYaml(), {"policy.buffer_size=" + r->repairs[1].to, "policy.max_in_cpu=0", "policy.buffer_count=" + std::to_string(std::stoll(r->repairs[0].to) - 1)},
      "small");
  ASSERT_TRUE(fewer.ok());
  EXPECT_FALSE(policies::Plan(*fewer).ok()) << r->repairs[0].to << " - 1 buffers";
  EXPECT_TRUE(r->baseline.feasible);
  auto again = EvaluateOne(broken->yaml, "small", {r->baseline_overrides}, {});
  ASSERT_TRUE(again.ok());
  EXPECT_DOUBLE_EQ(again->iteration_s, r->baseline.iteration_s);
  bool from_written = false;
  for (const KnobChange& c : r->changes) from_written = from_written || (c.knob == "policy.buffer_size" && c.from == "1000");
  EXPECT_TRUE(from_written) << "changes start from the scenario as written";

  // Nothing the error names can repair: said, with the reason.
  auto hopeless = policies::LoadScenarioText(SmallYaml(), {"policy.bufer_count=3"}, "small");
  ASSERT_TRUE(hopeless.ok());
  auto none = Tune(hopeless->yaml, "small", options);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no move of the knobs its reasons name makes it run"), std::string::npos) << none.status().message();
}

// A run whose pinned pools exceed the machine's memory is infeasible whatever the budget, with
// the bytes short; its figures stay for the table.
TEST(Evaluate, APlanBeyondTheMachinesMemoryIsInfeasible) {
  auto fits = EvaluateOne(SmallYaml(), "small", {{}}, {});
  ASSERT_TRUE(fits.ok());
  EXPECT_TRUE(fits->feasible) << fits->reason;
  auto over = EvaluateOne(SmallYaml(), "small", {{"hardware.node.cpu.host_memory=4 GiB", "hardware.node.cpu.host_reserve=1 GiB"}}, {});
  ASSERT_TRUE(over.ok());
  EXPECT_FALSE(over->feasible);
  EXPECT_NE(over->reason.find("does not fit the machine: pinned host memory on host peaks at"), std::string::npos) << over->reason;
  EXPECT_NE(over->reason.find("and the node has 3.00 GiB (cpu.host_memory less cpu.host_reserve)"), std::string::npos) << over->reason;
  EXPECT_EQ(over->host_peak_bytes, fits->host_peak_bytes);
  EXPECT_GT(over->iteration_s, 0);
}

TEST(Tune, RejectsAnUnknownPolicy) {
  TuneOptions options;
  options.policies = {"no-such-policy"};
  auto r = Tune(SmallYaml(), "small", options);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unknown policy 'no-such-policy'"), std::string::npos);
}

}  // namespace
}  // namespace tierflow::sweep
