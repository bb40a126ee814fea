// Dispatches per second of the core dispatcher: each instance is dispatched, started and
// completed with zero duration, so the figure is the dispatcher's own cost per task instance.
// The schedule has the shape of an offloaded layer pipeline: read -> h2d -> compute -> d2h ->
// write per layer over five resources, a slot pool gating the reads, and a carried dep from each
// layer's write to its read in the next iteration.
#include <benchmark/benchmark.h>

#include <deque>
#include <string>

#include "tierflow/core/dispatcher.h"

namespace tierflow {
namespace {

Schedule PipelineSchedule(int layers, int slots) {
  Schedule s;
  s.name = "bench-pipeline";
  s.AddDevice({"host", DeviceKind::kHost});
  const char* names[] = {"nvme0.read", "gpu0.h2d", "gpu0.compute", "gpu0.d2h", "nvme0.write"};
  const Op ops[] = {Op::kRead, Op::kH2D, Op::kCompute, Op::kD2H, Op::kWrite};
  for (const char* n : names) s.AddResource({n, 0, 1});
  s.AddPool({"host.pinned", 0, int64_t{slots} * 4096});
  for (int l = 0; l < layers; ++l) {
    const std::string L = std::to_string(l);
    int32_t buf = s.AddBuffer({"buf" + L, 0, 4096, false});
    int32_t prev = kNoIndex;
    for (int k = 0; k < 5; ++k) {
      TaskSpec t;
      t.id = std::string(names[k]) + "." + L;
      t.op = ops[k];
      t.resource = k;
      t.bytes = 4096;
      t.layer = l;
      if (k == 0) t.allocs.push_back(buf);
      else t.uses.push_back(buf);
      if (k == 4) t.frees.push_back(buf), t.uses.clear();
      if (prev != kNoIndex) t.deps.push_back(prev);
      prev = s.AddTask(std::move(t));
    }
  }
  for (int l = 0; l < layers; ++l) {
    s.mutable_tasks()[l * 5].carried.push_back({l * 5 + 4, 1});
  }
  return s;
}

void BM_Dispatch(benchmark::State& state) {
  const int layers = static_cast<int>(state.range(0));
  const int64_t iterations = state.range(1);
  Schedule s = PipelineSchedule(layers, 4);
  if (!s.Validate().ok()) {
    state.SkipWithError(s.Validate().ToString().c_str());
    return;
  }
  int64_t instances = 0;
  std::vector<Instance> start;
  std::deque<Instance> running;
  for (auto _ : state) {
    Dispatcher d(s, iterations);
    start.clear();
    d.Dispatch(&start);
    running.assign(start.begin(), start.end());
    while (!running.empty()) {
      Instance i = running.front();
      running.pop_front();
      d.Complete(i);
      start.clear();
      d.Dispatch(&start);
      running.insert(running.end(), start.begin(), start.end());
    }
    if (!d.done()) state.SkipWithError("dispatcher did not finish");
    instances += d.total();
  }
  state.counters["dispatches_per_s"] = benchmark::Counter(static_cast<double>(instances), benchmark::Counter::kIsRate);
  state.counters["tasks_per_iteration"] = layers * 5;
}
BENCHMARK(BM_Dispatch)->Args({80, 1})->Args({80, 100})->Args({1000, 10})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tierflow

BENCHMARK_MAIN();
