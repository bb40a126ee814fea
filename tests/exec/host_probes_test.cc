// The host probes: each records what calibrate's conventions say (docs/calibration.md) — op,
// task, resource, bytes, FLOPs, threads, one record per repetition — and rejects bad input with
// an error naming the probe and the rule. The compute probe charges each layer exactly what the
// schedule's compute tasks of that layer are charged, so that calibrate fits what sim is asked.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#include "tierflow/core/schedule.h"
#include "tierflow/policies/policy.h"
#include "tierflow/policies/scenario.h"
#include "tierflow/real/host_probes.h"

namespace tierflow::real {
namespace {

HostProbeOptions Quick() {
  HostProbeOptions o;
  o.repetitions = 2;
  o.max_threads = 2;
  return o;
}

// The compute probe's tests: the tiny model at sequence 32.
StatusOr<policies::Scenario> TinyAtSequence32() {
  return policies::LoadScenarioFile(std::string(TIERFLOW_SOURCE_DIR) + "/scenarios/tiny-cpu.yaml",
                                    {"training.sequence_length=32"});
}

std::vector<LayerCost> ToLayerCosts(const std::vector<policies::LayerCompute>& costs) {
  std::vector<LayerCost> lc;
  for (const auto& c : costs) lc.push_back({c.forward_flops, c.backward_flops, c.forward_bytes, c.backward_bytes, c.tasks});
  return lc;
}

TrainConfig ConfigAtSequence32(const models::LlmConfig& model) {
  TrainConfig config;
  config.spec.config = model;
  config.batch = 1;
  config.seq = 32;
  return config;
}

TEST(HostProbesTest, CopiesRecordEachSizeDirectionAndKind) {
  int reports = 0;
  HostProbeOptions o = Quick();
  o.progress = [&](const std::string&) { ++reports; };
  auto r = ProbeCopies({64 << 10, 4 << 20}, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // Sizes under 1 MiB get 8x the repetitions: 2 kinds x 2 directions x (16 + 2), and the
  // pinned d2h narrowing to bf16 (16 + 2).
  EXPECT_EQ(r->size(), 5u * (16u + 2u));
  std::map<std::tuple<std::string, Op, int64_t, bool>, int> count;
  for (const TraceRecord& x : *r) {
    EXPECT_EQ(x.source, "probe");
    EXPECT_GT(x.end_s, x.start_s) << x.task;
    EXPECT_EQ(x.resource, x.op == Op::kH2D ? "gpu0.h2d" : "gpu0.d2h");
    EXPECT_TRUE(!x.narrows || (x.op == Op::kD2H && x.task == "probe.copy.pinned")) << x.task;
    ++count[{x.task, x.op, x.bytes, x.narrows}];
  }
  EXPECT_EQ((count[{"probe.copy.pinned", Op::kH2D, 64 << 10, false}]), 16);
  EXPECT_EQ((count[{"probe.copy.pageable", Op::kD2H, 4 << 20, false}]), 2);
  EXPECT_EQ((count[{"probe.copy.pinned", Op::kD2H, 4 << 20, false}]), 2);
  EXPECT_EQ((count[{"probe.copy.pinned", Op::kD2H, 4 << 20, true}]), 2);
  EXPECT_EQ(reports, 4);  // one per kind and size
}

TEST(HostProbesTest, DispatchTimesTheExecutorsHandOver) {
  HostProbeOptions o = Quick();
  auto r = ProbeDispatch(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->size(), 50u * static_cast<size_t>(o.repetitions));
  for (const TraceRecord& x : *r) {
    EXPECT_EQ(x.task, "probe.dispatch");
    EXPECT_EQ(x.op, Op::kBarrier);
    EXPECT_EQ(x.source, "probe");
    EXPECT_GT(x.end_s, x.start_s) << "two thread wake-ups take time";
  }
  o.repetitions = 0;
  EXPECT_FALSE(ProbeDispatch(o).ok());
}

TEST(HostProbesTest, ComputeChargesEachLayerWhatTheScheduleDoes) {
  auto sc = TinyAtSequence32();
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  auto costs = policies::LayerComputeCosts(*sc);
  ASSERT_TRUE(costs.ok()) << costs.status().ToString();

  // The contract: per layer and phase, the costs equal the sums over the schedule's compute tasks.
  auto schedule = policies::Plan(*sc);
  ASSERT_TRUE(schedule.ok()) << schedule.status().ToString();
  struct Planned {
    double flops = 0, bytes = 0;
    int32_t tasks = 0;
  };
  std::map<std::pair<int32_t, Phase>, Planned> planned;
  for (const TaskSpec& t : schedule->tasks()) {
    if (t.op != Op::kCompute) continue;
    Planned& p = planned[{t.layer, t.phase}];
    p.flops += t.flops;
    p.bytes += static_cast<double>(t.bytes);
    ++p.tasks;
  }
  ASSERT_EQ(planned.size(), 2 * costs->size());
  for (size_t l = 0; l < costs->size(); ++l) {
    const auto& c = (*costs)[l];
    const auto fwd = planned[{static_cast<int32_t>(l), Phase::kForward}];
    const auto bwd = planned[{static_cast<int32_t>(l), Phase::kBackward}];
    EXPECT_DOUBLE_EQ(c.forward_flops, fwd.flops) << "layer " << l;
    EXPECT_DOUBLE_EQ(c.forward_bytes, fwd.bytes) << "layer " << l;
    EXPECT_DOUBLE_EQ(c.backward_flops, bwd.flops) << "layer " << l;
    EXPECT_DOUBLE_EQ(c.backward_bytes, bwd.bytes) << "layer " << l;
    EXPECT_EQ(c.tasks, fwd.tasks) << "layer " << l;
    EXPECT_EQ(c.tasks, bwd.tasks) << "layer " << l;
  }
  EXPECT_EQ((*costs)[1].tasks, 9);  // a decoder layer: two norms, q k v o, gate up down

  std::vector<LayerCost> lc = ToLayerCosts(*costs);
  TrainConfig config = ConfigAtSequence32(sc->model);
  config.threads = 2;
  auto r = ProbeCompute(config, lc, "tiny.s32", Quick());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), lc.size() * 2 * 2 + 2);  // layers x phases x repetitions, then the update's repetitions
  for (const TraceRecord& x : *r) {
    if (x.task == "probe.gpu_adam") {  // the device's AdamW over its memory
      EXPECT_EQ(x.op, Op::kOptimizer);
      EXPECT_EQ(x.resource, "gpu0.compute");
      EXPECT_EQ(x.bytes, 4 * kGpuUpdateProbeElements);
      EXPECT_EQ(x.threads, 2);
      EXPECT_GT(x.duration_s(), 0);
      continue;
    }
    EXPECT_EQ(x.task, "probe.compute.tiny.s32");
    EXPECT_EQ(x.op, Op::kCompute);
    EXPECT_EQ(x.threads, 2);
    EXPECT_GT(x.duration_s(), 0);
    ASSERT_GE(x.layer, 0);
    const LayerCost& c = lc[static_cast<size_t>(x.layer)];
    EXPECT_EQ(x.flops, x.phase == Phase::kForward ? c.forward_flops : c.backward_flops);
    EXPECT_EQ(static_cast<double>(x.bytes), x.phase == Phase::kForward ? c.forward_bytes : c.backward_bytes);
    EXPECT_EQ(x.tasks, c.tasks);
    EXPECT_EQ(x.device_end_s, 0);  // the CPU device has no GPU-side span
  }

  lc.pop_back();
  auto wrong = ProbeCompute(config, lc, "x", Quick());
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("layer costs for a model of"), std::string::npos) << wrong.status().ToString();
  config.seq = sc->model.max_seq + 1;
  auto too_long = ProbeCompute(config, std::vector<LayerCost>(costs->size()), "x", Quick());
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("(the model's max_seq)"), std::string::npos);
}

// gpu0 on GPU 0 (options.compute "cuda"): the same records, with the GPU's thread count 0 and each
// layer step's GPU-side span inside its host span; without a GPU, the device's error naming what
// is missing.
TEST(HostProbesTest, ComputeOnTheGpuOrWhyNot) {
  auto sc = TinyAtSequence32();
  ASSERT_TRUE(sc.ok()) << sc.status().ToString();
  auto costs = policies::LayerComputeCosts(*sc);
  ASSERT_TRUE(costs.ok()) << costs.status().ToString();
  std::vector<LayerCost> lc = ToLayerCosts(*costs);
  TrainConfig config = ConfigAtSequence32(sc->model);
  HostProbeOptions o = Quick();
  o.compute = "tpu";
  auto tpu = ProbeCompute(config, lc, "x", o);
  ASSERT_FALSE(tpu.ok());
  EXPECT_NE(tpu.status().message().find("'tpu' (known: cpu, cuda)"), std::string::npos) << tpu.status().ToString();
  o.compute = "cuda";
  auto r = ProbeCompute(config, lc, "tiny.s32", o);
  if (!r.ok()) {
    EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
    EXPECT_NE(r.status().message().find("compute device 'cuda'"), std::string::npos) << r.status().ToString();
    GTEST_SKIP() << "no GPU: " << r.status().ToString();
  }
  ASSERT_EQ(r->size(), lc.size() * 2 * 2 + 2);
  for (const TraceRecord& x : *r) {
    EXPECT_TRUE(x.task == "probe.compute.tiny.s32" || (x.task == "probe.gpu_adam" && x.bytes == 4 * kGpuUpdateProbeElementsCuda)) << x.task;
    EXPECT_EQ(x.threads, 0);
    EXPECT_LE(x.start_s, x.device_start_s) << x.layer;
    EXPECT_LT(x.device_start_s, x.device_end_s) << x.layer;
    EXPECT_LE(x.device_end_s, x.end_s) << x.layer;
  }
}

// Compute alone, then beside each stream: the stream's window as the disk probe records it, the
// compute of both as the compute probe's, all from one origin, and the probe file gone after.
// probe io-cpu's set-up: tiny at sequence 32 on two threads, a fresh directory `name` (and
// `name`2 for a split stream's writer), windows of a few compute steps at least, however slow
// this build runs them (a sanitizer's).
struct IoCpuSetUp {
  explicit IoCpuSetUp(const std::string& name) {
    auto sc = TinyAtSequence32();
    EXPECT_TRUE(sc.ok()) << sc.status().ToString();
    if (!sc.ok()) return;
    auto layer_costs = policies::LayerComputeCosts(*sc);
    EXPECT_TRUE(layer_costs.ok()) << layer_costs.status().ToString();
    if (!layer_costs.ok()) return;
    costs = ToLayerCosts(*layer_costs);
    config = ConfigAtSequence32(sc->model);
    config.threads = 2;
    for (const std::string& d : {name, name + "2"}) {
      dirs.push_back(std::filesystem::path(TIERFLOW_BINARY_DIR) / "tests" / "exec" / d);
      std::filesystem::remove_all(dirs.back());
      std::filesystem::create_directories(dirs.back());
    }
    auto step = ProbeCompute(config, costs, "t", Quick());
    EXPECT_TRUE(step.ok()) << step.status().ToString();
    if (!step.ok()) return;
    double longest = 0;
    for (const TraceRecord& x : *step) longest = x.op == Op::kCompute ? std::max(longest, x.duration_s()) : longest;
    io.dir = dirs[0].string();
    // Sixteen steps long: a window must hold a whole step, and a step can take several times its
    // time here when a test beside this one takes a core (TSan in CI: at four steps long the read
    // and the write windows held none once, at eight the reader-and-writer window once, CI run 35,
    // its two streams and the compute on two cores).
    io.window_s = std::max(0.15, 16 * longest);
    io.file_bytes = 16 << 20;
    options.repetitions = 1;
    ok = true;
  }
  bool ok = false;
  TrainConfig config;
  std::vector<LayerCost> costs;
  std::vector<std::filesystem::path> dirs;
  IoCpuProbeOptions io;
  HostProbeOptions options = Quick();
};

TEST(HostProbesTest, IoCpuTimesComputeAloneAndBesideEachStream) {
  IoCpuSetUp set_up("io_cpu_probe");
  ASSERT_TRUE(set_up.ok);
  const TrainConfig& config = set_up.config;
  const std::vector<LayerCost>& costs = set_up.costs;
  const std::filesystem::path dir = set_up.dirs[0];
  IoCpuProbeOptions io = set_up.io;
  io.streams = {{"read", 64 << 10, 2}, {"write", 64 << 10, 2}, {"rw", 64 << 10, 2}, {"dispatch", 0, 0}};
  HostProbeOptions o = set_up.options;
  int reports = 0;
  o.progress = [&](const std::string&) { ++reports; };
  auto r = ProbeIoCpu(config, costs, io, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(reports, 4);  // one per stream
  std::vector<const TraceRecord*> windows, mix, streams_alone;
  int alone = 0;
  for (const TraceRecord& x : *r) {
    EXPECT_EQ(x.source, "probe");
    if (x.op == Op::kBarrier) {
      EXPECT_EQ(x.task, "probe.io_cpu.dispatch");
      EXPECT_GT(x.tasks, 0) << "the hand-overs in the window";
      windows.push_back(&x);
    } else if (x.op == Op::kRead || x.op == Op::kWrite) {
      EXPECT_EQ(x.block_bytes, 64 << 10);
      EXPECT_EQ(x.queue_depth, 2);
      EXPECT_GT(x.bytes, 0);
      if (x.task == "probe.io_cpu.rw") {
        mix.push_back(&x);  // a reader's and a writer's record of one window
        continue;
      }
      if (x.task == "probe.io_cpu.read_alone" || x.task == "probe.io_cpu.write_alone") {
        EXPECT_EQ(x.task, x.op == Op::kRead ? "probe.io_cpu.read_alone" : "probe.io_cpu.write_alone");
        streams_alone.push_back(&x);  // the stream alone, before its window beside the compute
        continue;
      }
      EXPECT_EQ(x.task, x.op == Op::kRead ? "probe.io_cpu.read" : "probe.io_cpu.write");
      windows.push_back(&x);
    } else {
      ASSERT_EQ(x.op, Op::kCompute);
      EXPECT_TRUE(x.task == "probe.io_cpu.alone" || x.task == "probe.io_cpu.beside") << x.task;
      EXPECT_EQ(x.threads, 2);
      EXPECT_GE(x.layer, 0);
      alone += x.task == "probe.io_cpu.alone" ? 1 : 0;
    }
  }
  ASSERT_EQ(windows.size(), 3u);
  // A read and a write stream ran alone too, before their windows beside the compute, and no
  // compute step lies inside them: what calibrate's cpu.io_*_beside_compute pairs.
  ASSERT_EQ(streams_alone.size(), 2u);
  for (const TraceRecord* a : streams_alone) {
    const auto beside = std::find_if(windows.begin(), windows.end(), [&](const TraceRecord* w) { return w->op == a->op; });
    ASSERT_NE(beside, windows.end());
    EXPECT_LE(a->end_s, (*beside)->start_s);
    for (const TraceRecord& x : *r) {
      EXPECT_FALSE(x.op == Op::kCompute && x.start_s >= a->start_s && x.end_s <= a->end_s) << x.task << " inside " << a->task;
    }
  }
  ASSERT_EQ(mix.size(), 2u);
  EXPECT_NE(mix[0]->op, mix[1]->op);
  EXPECT_EQ(mix[0]->start_s, mix[1]->start_s);
  EXPECT_EQ(mix[0]->end_s, mix[1]->end_s);
  windows.push_back(mix[0]);
  EXPECT_GT(alone, 0);
  // Beside records inside each window: what calibrate pairs.
  for (const TraceRecord* w : windows) {
    int inside = 0;
    for (const TraceRecord& x : *r) {
      inside += x.task == "probe.io_cpu.beside" && x.start_s >= w->start_s && x.end_s <= w->end_s ? 1 : 0;
    }
    EXPECT_GT(inside, 0) << w->task;
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "the probe file is removed";

  io.streams = {{"trim", 4096, 1}};
  auto bad = ProbeIoCpu(config, costs, io, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'trim'"), std::string::npos) << bad.status().message();
  io.streams = {{"read", 4096, 1}};
  io.dir = (dir / "missing").string();
  EXPECT_FALSE(ProbeIoCpu(config, costs, io, o).ok());
}

// Stream "split": a reader on the first directory and a writer on the second at once, each disk
// entry through its own ring, as a run's two --disk are (cpu.io_split checks the sum of their
// loads). One window, a record of each op, each naming its device.
TEST(HostProbesTest, IoCpuSplitRunsTheReaderAndTheWriterOnTwoDirectories) {
  IoCpuSetUp set_up("io_cpu_split");
  ASSERT_TRUE(set_up.ok);
  IoCpuProbeOptions io = set_up.io;
  io.streams = {{"split", 64 << 10, 2}};
  auto refused = ProbeIoCpu(set_up.config, set_up.costs, io, set_up.options);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("two --dir"), std::string::npos) << refused.status().message();
  io.split_dir = set_up.dirs[1].string();
  auto r = ProbeIoCpu(set_up.config, set_up.costs, io, set_up.options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::vector<const TraceRecord*> split;
  for (const TraceRecord& x : *r) {
    if (x.op == Op::kRead || x.op == Op::kWrite) split.push_back(&x);
  }
  ASSERT_EQ(split.size(), 2u);
  std::sort(split.begin(), split.end(), [](const TraceRecord* a, const TraceRecord* b) { return a->op < b->op; });
  for (const TraceRecord* x : split) {
    EXPECT_EQ(x->task, "probe.io_cpu.split");
    EXPECT_GT(x->bytes, 0) << x->resource;
    EXPECT_EQ(x->start_s, split[0]->start_s);
    EXPECT_EQ(x->end_s, split[0]->end_s);
  }
  EXPECT_EQ(split[0]->op == Op::kRead ? split[0]->resource : split[1]->resource, "nvme0.read");
  EXPECT_EQ(split[0]->op == Op::kWrite ? split[0]->resource : split[1]->resource, "nvme1.write");
  int inside = 0;
  for (const TraceRecord& x : *r) {
    inside += x.task == "probe.io_cpu.beside" && x.start_s >= split[0]->start_s && x.end_s <= split[0]->end_s ? 1 : 0;
  }
  EXPECT_GT(inside, 0);
  for (const std::filesystem::path& d : set_up.dirs) EXPECT_TRUE(std::filesystem::is_empty(d)) << "the probe files are removed: " << d;
}

TEST(HostProbesTest, OptimizerAndMemoryByThreadCount) {
  auto r = ProbeOptimizer({1 << 16, 1 << 18}, Quick());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->size(), 2u /*threads*/ * 2u /*counts*/ * 2u /*reps*/ * 2u /*adam, convert*/);
  std::set<std::tuple<std::string, int64_t, int32_t>> points;
  for (const TraceRecord& x : *r) {
    EXPECT_EQ(x.op, x.task == "probe.adam" ? Op::kOptimizer : Op::kConvert);
    EXPECT_GT(x.duration_s(), 0);
    points.insert({x.task, x.bytes, x.threads});
  }
  EXPECT_TRUE(points.count({"probe.adam", 4 << 16, 1}));
  EXPECT_TRUE(points.count({"probe.convert.fp32_to_bf16", 4 << 18, 2}));

  auto m = ProbeMemory(4 << 20, Quick());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 4u);
  for (const TraceRecord& x : *m) {
    EXPECT_EQ(x.task, "probe.memory.update");
    EXPECT_EQ(x.bytes, 28 * (1 << 20));  // 28 bytes per fp32 element of 4 MiB arrays
  }
}

TEST(HostProbesTest, BadInputNamesTheProbeAndTheRule) {
  HostProbeOptions none = Quick();
  none.repetitions = 0;
  EXPECT_NE(ProbeCopies({4096}, none).status().message().find("probe copy: repetitions must be at least 1"), std::string::npos);
  EXPECT_NE(ProbeCopies({4097}, Quick()).status().message().find("not a positive multiple of 4 bytes"), std::string::npos);
  EXPECT_NE(ProbeCopies({}, Quick()).status().message().find("no sizes"), std::string::npos);
  EXPECT_NE(ProbeOptimizer({0}, Quick()).status().message().find("must be positive"), std::string::npos);
  EXPECT_NE(ProbeMemory(1024, Quick()).status().message().find("at least 1 MiB"), std::string::npos);
}

}  // namespace
}  // namespace tierflow::real
