// Simulator throughput: task instances simulated per second of host time (wall clock, fork and
// result transfer included), on a synthetic read -> h2d -> compute -> d2h -> write pipeline of
// ~5k tasks per iteration, for 1, 10 and 100 iterations. The target is >= 100k tasks/s on one
// core, flat in the number of iterations (sim must stay linear in the number of tasks).
//
//   tasks_per_s     = instances simulated / wall seconds of Simulate()
//   tasks_per_cpu_s = instances simulated / CPU seconds of the simulating process (one thread;
//                     the figure to compare on a shared machine)
//
// To benchmark another schedule, call RunSimBenchmark() from a BENCHMARK_CAPTURE.
#include <benchmark/benchmark.h>

#include <string>

#include "tierflow/core/schedule.h"
#include "tierflow/models/hardware.h"
#include "tierflow/policies/policy.h"
#include "tierflow/sim/simulator.h"

namespace tierflow::sim {
namespace {

models::HardwareSpec BenchHardware() {
  models::HardwareSpec hw;
  models::NodeSpec& n = hw.node;
  n.name = "bench-node";
  n.gpu_count = 1;
  // Named fields: positional ones had slid onto the wrong members as the specs grew (the kernel
  // overhead onto forward_efficiency, the pageable factor onto d2h_bf16_bw, the mixed efficiency
  // onto read_iops: reads capped at 0.85 a second).
  n.gpu = {.name = "bench-gpu", .hbm_bytes = 80LL << 30, .peak_flops = 400e12, .hbm_bw_bytes_per_s = 2e12,
           .compute_efficiency = 0.5, .kernel_overhead_s = 5e-6};
  n.pcie = {.h2d_bw_bytes_per_s = 25e9, .d2h_bw_bytes_per_s = 25e9, .pageable_factor = 0.5, .latency_s = 5e-6,
            .root_complex_bw_bytes_per_s = 64e9};
  n.cpu = {.cores = 32, .host_memory_bytes = 512LL << 30, .memory_bw_bytes_per_s = 150e9, .adam_elements_per_s_per_core = 2e8,
           .convert_bytes_per_s_per_core = 4e9};
  n.interconnect = {.kind = "pcie", .bus_bw_bytes_per_s = 20e9, .latency_s = 1e-5};
  n.nvme.push_back({.name = "bench-ssd", .capacity_bytes = 4LL << 40, .read_bw_bytes_per_s = 7e9, .write_bw_bytes_per_s = 5e9,
                    .read_latency_s = 80e-6, .write_latency_s = 20e-6, .mixed_efficiency = 0.85});
  return hw;
}

// `layers` x 5 tasks: read (allocates a pinned buffer) -> h2d -> compute -> d2h -> write (frees
// it), reads and writes 4 in flight, 8 buffers: the pool, the disk and the root complex all bind.
Schedule SyntheticPipeline(int layers) {
  Schedule s;
  s.name = "synthetic-pipeline";
  const int32_t gpu = s.AddDevice({"gpu0", DeviceKind::kGpu});
  const int32_t host = s.AddDevice({"host", DeviceKind::kHost});
  const int32_t nvme = s.AddDevice({"nvme0", DeviceKind::kNvme});
  const int32_t rd = s.AddResource({"nvme0.read", nvme, 4});
  const int32_t wr = s.AddResource({"nvme0.write", nvme, 4});
  const int32_t h2d = s.AddResource({"gpu0.h2d", gpu, 1});
  const int32_t d2h = s.AddResource({"gpu0.d2h", gpu, 1});
  const int32_t comp = s.AddResource({"gpu0.compute", gpu, 1});
  const int64_t bytes = 32LL << 20;
  const int32_t pool = s.AddPool({"host.pinned", host, 8 * bytes});
  auto task = [&](std::string id, Op op, int32_t res, std::vector<int32_t> deps) {
    TaskSpec t;
    t.id = std::move(id);
    t.op = op;
    t.resource = res;
    t.bytes = bytes;
    t.deps = std::move(deps);
    return t;
  };
  for (int i = 0; i < layers; ++i) {
    const std::string l = std::to_string(i);
    const int32_t buf = s.AddBuffer({"buf" + l, pool, bytes, false});
    TaskSpec r = task("read" + l, Op::kRead, rd, {});
    r.allocs = {buf};
    r.layer = i;
    const int32_t ri = s.AddTask(std::move(r));
    TaskSpec c = task("h2d" + l, Op::kH2D, h2d, {ri});
    c.uses = {buf};
    const int32_t ci = s.AddTask(std::move(c));
    TaskSpec x = task("fwd" + l, Op::kCompute, comp, {ci});
    x.flops = 1e12;
    const int32_t xi = s.AddTask(std::move(x));
    TaskSpec d = task("d2h" + l, Op::kD2H, d2h, {xi});
    d.uses = {buf};
    const int32_t di = s.AddTask(std::move(d));
    TaskSpec w = task("write" + l, Op::kWrite, wr, {di});
    w.uses = {buf};
    w.frees = {buf};
    s.AddTask(std::move(w));
  }
  return s;
}

}  // namespace

// Simulates `schedule` for `iterations` iterations per benchmark iteration and reports
// tasks_per_s (instances per wall second), tasks_per_cpu_s (per CPU second of the simulating
// process), sim_makespan_s, and the SimGrid activities made per task instance.
void RunSimBenchmark(benchmark::State& state, const Schedule& schedule,
                     const models::HardwareSpec& hw, int64_t iterations, bool record_trace) {
  SimOptions options;
  options.iterations = iterations;
  options.record_trace = record_trace;
  int64_t tasks = 0, activities = 0;
  double wall_s = 0, cpu_s = 0, makespan_s = 0;
  for (auto _ : state) {
    auto result = Simulate(schedule, hw, options);
    if (!result.ok()) {
      state.SkipWithError(result.status().ToString().c_str());
      return;
    }
    tasks += result->tasks_simulated;
    activities += result->activities;
    wall_s += result->wall_s;
    cpu_s += result->cpu_s;
    makespan_s = result->makespan_s;
    benchmark::DoNotOptimize(result->records.data());
  }
  state.counters["tasks_per_s"] = benchmark::Counter(static_cast<double>(tasks) / wall_s);
  state.counters["tasks_per_cpu_s"] = benchmark::Counter(static_cast<double>(tasks) / cpu_s);
  state.counters["tasks_per_run"] = benchmark::Counter(static_cast<double>(tasks) / state.iterations());
  state.counters["activities_per_task"] = benchmark::Counter(static_cast<double>(activities) / static_cast<double>(tasks));
  state.counters["sim_makespan_s"] = makespan_s;
}

namespace {

void BM_SyntheticPipeline(benchmark::State& state) {
  static const Schedule schedule = SyntheticPipeline(1000);  // 5000 tasks per iteration
  static const models::HardwareSpec hw = BenchHardware();
  RunSimBenchmark(state, schedule, hw, state.range(0), state.range(1) != 0);
}
BENCHMARK(BM_SyntheticPipeline)
    ->ArgNames({"iterations", "trace"})
    ->Args({1, 1})
    ->Args({10, 1})
    ->Args({100, 1})
    ->Args({100, 0})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tierflow::sim

namespace tierflow::sim {

// The quickstart: Llama-2-70B under zero-infinity on the 4 x A100 one-NVMe node (21k tasks per
// iteration), planned once, simulated for 1, 10 and 100 iterations; and the same on a cluster of
// four such nodes, 16 ranks (84k tasks per iteration): sim stays linear in tasks when the
// platform grows (tasks_per_s of the two side by side).
StatusOr<std::pair<Schedule, models::HardwareSpec>> PlanQuickstart(const std::vector<std::string>& overrides) {
  auto scenario = policies::LoadScenarioFile(std::string(TIERFLOW_SOURCE_DIR) + "/scenarios/quickstart.yaml", overrides);
  if (!scenario.ok()) return scenario.status();
  auto schedule = policies::Plan(*scenario);
  if (!schedule.ok()) return schedule.status();
  return std::make_pair(std::move(*schedule), scenario->hardware);
}

void RunPlanned(benchmark::State& state, const StatusOr<std::pair<Schedule, models::HardwareSpec>>& planned) {
  if (!planned.ok()) {
    state.SkipWithError(planned.status().ToString().c_str());
    return;
  }
  RunSimBenchmark(state, planned->first, planned->second, state.range(0), true);
}

void BM_Quickstart(benchmark::State& state) {
  static const auto planned = PlanQuickstart({});
  RunPlanned(state, planned);
}
BENCHMARK(BM_Quickstart)->ArgNames({"iterations"})->Arg(1)->Arg(10)->Arg(100)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_QuickstartFourNodes(benchmark::State& state) {
  static const auto planned = PlanQuickstart({"hardware.nodes=4", "training.data_parallel=16"});
  RunPlanned(state, planned);
}
BENCHMARK(BM_QuickstartFourNodes)->ArgNames({"iterations"})->Arg(1)->Arg(10)->Arg(25)->Unit(benchmark::kMillisecond)->UseRealTime();

// Planning the quickstart (issue 59: <= 10 ms): Plan() of the scenario, loaded once, with the
// validation Plan ends with (the schedule a sweep simulates). CPU time is the figure on a shared
// machine; tasks_per_plan says what was built.
void BM_PlanQuickstart(benchmark::State& state) {
  static const auto scenario = policies::LoadScenarioFile(std::string(TIERFLOW_SOURCE_DIR) + "/scenarios/quickstart.yaml", {});
  if (!scenario.ok()) {
    state.SkipWithError(scenario.status().ToString().c_str());
    return;
  }
  int64_t tasks = 0;
  for (auto _ : state) {
    auto schedule = policies::Plan(*scenario);
    if (!schedule.ok()) {
      state.SkipWithError(schedule.status().ToString().c_str());
      return;
    }
    tasks = static_cast<int64_t>(schedule->tasks().size());
    benchmark::DoNotOptimize(schedule->tasks().data());
  }
  state.counters["tasks_per_plan"] = static_cast<double>(tasks);
}
BENCHMARK(BM_PlanQuickstart)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime();

// The validation the plan ends with (Schedule::Validate of the quickstart's schedule), alone: its
// share of BM_PlanQuickstart.
void BM_ValidateQuickstart(benchmark::State& state) {
  static const auto planned = PlanQuickstart({});
  if (!planned.ok()) {
    state.SkipWithError(planned.status().ToString().c_str());
    return;
  }
  const Schedule& schedule = planned->first;
  for (auto _ : state) {
    const Status st = schedule.Validate();
    if (!st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      return;
    }
  }
  state.counters["tasks"] = static_cast<double>(schedule.tasks().size());
}
BENCHMARK(BM_ValidateQuickstart)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime();

// 10^6 tasks of one op kind (issue 59: each in <= 2 s), independent (flat) or each depending on
// the one before (chain), one iteration, without trace records (as the sweep simulates). Each op
// runs on its own resource of the bench node (4 in flight where the op allows); alloc and free
// come as pairs over one buffer each, a pinned pool holding 64 of them.
Schedule MillionTasks(Op op, bool chain, int32_t count) {
  Schedule s;
  s.name = std::string("million-") + std::string(OpName(op));
  const int32_t gpu = s.AddDevice({"gpu0", DeviceKind::kGpu});
  const int32_t host = s.AddDevice({"host", DeviceKind::kHost});
  const int32_t nvme = s.AddDevice({"nvme0", DeviceKind::kNvme});
  const int32_t net = s.AddDevice({"net", DeviceKind::kNetwork});
  int32_t resource = kNoIndex;
  int64_t bytes = 1 << 20;
  switch (op) {
    case Op::kRead: resource = s.AddResource({"nvme0.read", nvme, 4}); break;
    case Op::kWrite: resource = s.AddResource({"nvme0.write", nvme, 4}); break;
    case Op::kH2D: resource = s.AddResource({"gpu0.h2d", gpu, 1}); break;
    case Op::kD2H: resource = s.AddResource({"gpu0.d2h", gpu, 1}); break;
    case Op::kCompute: resource = s.AddResource({"gpu0.compute", gpu, 1}); break;
    case Op::kAllGather:
    case Op::kReduceScatter:
    case Op::kAllReduce: resource = s.AddResource({"dp.comm", net, 1}); break;
    case Op::kOptimizer:
    case Op::kConvert: resource = s.AddResource({"cpu", host, 4}); break;
    default: bytes = 0; break;
  }
  const int32_t pool = s.AddPool({"host.pinned", host, 64 << 20});
  for (int32_t i = 0; i < count; ++i) {
    TaskSpec t;
    t.op = op;
    t.id = "t" + std::to_string(i);
    t.resource = resource;
    t.bytes = bytes;
    if (op == Op::kCompute) t.flops = 1e9;
    if (op == Op::kAlloc || op == Op::kFree) {
      // Pairs: task 2k allocates buffer k, task 2k + 1 (an alloc-op task that only frees) frees it.
      if (i % 2 == 0) {
        t.op = Op::kAlloc;
        t.allocs = {s.AddBuffer({"b" + std::to_string(i / 2), pool, 1 << 20, false})};
      } else {
        t.op = Op::kFree;
        t.frees = {static_cast<int32_t>(s.buffers().size()) - 1};
        t.deps = {i - 1};
      }
    }
    if (chain && i > 0 && t.deps.empty()) t.deps = {i - 1};
    s.AddTask(std::move(t));
  }
  return s;
}

void BM_MillionTasks(benchmark::State& state) {
  const auto op = static_cast<Op>(state.range(0));
  const bool chain = state.range(1) != 0;
  const Schedule schedule = MillionTasks(op, chain, 1000000);
  const Status valid = schedule.Validate();
  if (!valid.ok()) {
    state.SkipWithError(valid.ToString().c_str());
    return;
  }
  state.SetLabel(std::string(OpName(op)) + (chain ? " chain" : " flat"));
  static const models::HardwareSpec hw = BenchHardware();
  SimOptions options;
  options.iterations = 1;
  options.record_trace = false;
  options.schedule_validated = true;
  double wall_s = 0, cpu_s = 0;
  int64_t tasks = 0;
  for (auto _ : state) {
    auto result = Simulate(schedule, hw, options);
    if (!result.ok()) {
      state.SkipWithError(result.status().ToString().c_str());
      return;
    }
    wall_s += result->wall_s;
    cpu_s += result->cpu_s;
    tasks += result->tasks_simulated;
  }
  state.counters["wall_s"] = wall_s / static_cast<double>(state.iterations());
  state.counters["tasks_per_cpu_s"] = static_cast<double>(tasks) / cpu_s;  // of the simulating process
}
void MillionTaskArgs(benchmark::internal::Benchmark* b) {
  for (Op op : {Op::kRead, Op::kWrite, Op::kH2D, Op::kD2H, Op::kCompute, Op::kAllGather, Op::kReduceScatter, Op::kAllReduce,
                Op::kOptimizer, Op::kConvert, Op::kAlloc, Op::kBarrier}) {
    for (int chain : {0, 1}) b->Args({static_cast<int64_t>(op), chain});
  }
}
BENCHMARK(BM_MillionTasks)->ArgNames({"op", "chain"})->Apply(MillionTaskArgs)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace tierflow::sim

BENCHMARK_MAIN();
