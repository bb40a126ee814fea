// Tests of traces/: every expected figure is computed here by a different (brute-force or
// hand-derived) route than the library's sweep, so a wrong sweep fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "tierflow/core/schedule.h"
#include "tierflow/core/trace_record.h"
#include "tierflow/traces/chrome_trace.h"
#include "tierflow/traces/compare.h"
#include "tierflow/traces/iteration_report.h"
#include "tierflow/traces/occupancy.h"
#include "tierflow/traces/summary.h"

namespace tierflow::traces {
namespace {

using Json = nlohmann::json;

TraceRecord Rec(int64_t iteration, const std::string& task, Op op, const std::string& resource,
                double start_s, double end_s, Phase phase = Phase::kOther, int64_t bytes = 0,
                const std::string& source = "sim") {
  TraceRecord r;
  r.iteration = iteration;
  r.task = task;
  r.op = op;
  r.resource = resource;
  r.start_s = start_s;
  r.end_s = end_s;
  r.phase = phase;
  r.bytes = bytes;
  r.source = source;
  return r;
}

const ResourceSummary& FindResource(const TraceSummary& s, const std::string& name) {
  for (const auto& r : s.resources) {
    if (r.name == name) return r;
  }
  ADD_FAILURE() << "no resource " << name;
  static ResourceSummary none;
  return none;
}

// A schedule with the devices and resources the tests use.
Schedule BaseSchedule() {
  Schedule s;
  s.name = "test";
  int32_t gpu = s.AddDevice({"gpu0", DeviceKind::kGpu});
  int32_t host = s.AddDevice({"host", DeviceKind::kHost});
  int32_t nvme = s.AddDevice({"nvme0", DeviceKind::kNvme});
  s.AddResource({"gpu0.compute", gpu, 1});
  s.AddResource({"gpu0.h2d", gpu, 1});
  s.AddResource({"nvme0.read", nvme, 4});
  s.AddResource({"nvme0.write", nvme, 4});
  s.AddResource({"cpu.optimizer", host, 1});
  return s;
}

int32_t AddTask(Schedule* s, const std::string& id, Op op, const std::string& resource,
                std::vector<int32_t> deps = {}, std::vector<CarriedDep> carried = {}) {
  TaskSpec t;
  t.id = id;
  t.op = op;
  t.resource = resource.empty() ? kNoIndex : s->FindResource(resource);
  t.deps = std::move(deps);
  t.carried = std::move(carried);
  return s->AddTask(std::move(t));
}

// ---------------------------------------------------------------------------------------------
// Busy time, utilization, exposed time.

TEST(SummaryTest, BusyTimeIsTheUnionOfOverlappingIntervals) {
  std::vector<TraceRecord> records = {
      Rec(0, "r0", Op::kRead, "nvme0.read", 0, 2, Phase::kForward, 2000),
      Rec(0, "r1", Op::kRead, "nvme0.read", 1, 3, Phase::kForward, 2000),  // overlaps r0
      Rec(0, "r2", Op::kRead, "nvme0.read", 5, 6, Phase::kForward, 1000),
      Rec(0, "r3", Op::kRead, "nvme0.read", 5.5, 5.7, Phase::kForward, 200),  // inside r2
      Rec(0, "c0", Op::kCompute, "gpu0.compute", 0, 10, Phase::kForward),
  };
  TraceSummary s = Summarize(records, nullptr);
  const ResourceSummary& read = FindResource(s, "nvme0.read");
  EXPECT_DOUBLE_EQ(read.busy_s, 3.0 + 1.0);            // [0,3] and [5,6]
  EXPECT_DOUBLE_EQ(read.request_s, 2 + 2 + 1 + 0.2);   // overlapping requests counted each
  EXPECT_EQ(read.records, 4);
  EXPECT_EQ(read.bytes, 5200);
  EXPECT_DOUBLE_EQ(read.utilization, 4.0 / 10.0);
  EXPECT_DOUBLE_EQ(read.bytes_per_s, 5200 / 4.0);
  EXPECT_EQ(read.device, "nvme0");  // from the name, without a schedule
  EXPECT_TRUE(FindResource(s, "gpu0.compute").is_compute);
  EXPECT_FALSE(read.is_compute);
  EXPECT_DOUBLE_EQ(s.span_s, 10.0);
}

// Without a schedule, a resource's device is its name up to the first '.', a cluster node's
// device keeping its node.
TEST(SummaryTest, DeviceFromTheResourceNameKeepsTheNode) {
  std::vector<TraceRecord> records = {
      Rec(0, "a", Op::kRead, "node12.nvme0.r50.param", 0, 1, Phase::kForward, 10),
      Rec(0, "b", Op::kCompute, "node3.gpu1.compute", 0, 1, Phase::kForward),
      Rec(0, "c", Op::kRead, "nodes.read", 0, 1, Phase::kForward, 10),
      Rec(0, "d", Op::kAllReduce, "dp.comm", 0, 1, Phase::kStep, 8),
  };
  TraceSummary s = Summarize(records, nullptr);
  EXPECT_EQ(FindResource(s, "node12.nvme0.r50.param").device, "node12.nvme0");
  EXPECT_EQ(FindResource(s, "node3.gpu1.compute").device, "node3.gpu1");
  EXPECT_EQ(FindResource(s, "nodes.read").device, "nodes");
  EXPECT_EQ(FindResource(s, "dp.comm").device, "dp");
}

// DeepSpeed's timers cut the iteration back to back at rank 0's GPU work: forward to its last
// forward compute, backward to its last backward compute, gradient copy or conversion (its hooks
// run those inside the backward call), the step to the end. Here forward [0, 1], backward to the
// end of the conversion after the d2h, 3.5, the step [3.5, 6]; the backward's disk
// write [3, 5] runs 1.5 s past its timer (the overlap it hides), and a read of the next
// iteration's kind during forward [0.5, 2] spills 1 s past forward's.
TEST(SummaryTest, TimerPhasesAreBackToBackAndTheOverlapIsShownApart) {
  std::vector<TraceRecord> records = {
      Rec(0, "rd", Op::kRead, "nvme0.read", 0.5, 2, Phase::kForward, 10),
      Rec(0, "f", Op::kCompute, "gpu0.compute", 0, 1, Phase::kForward),
      Rec(0, "b", Op::kCompute, "gpu0.compute", 1, 3, Phase::kBackward),
      Rec(0, "w", Op::kWrite, "nvme0.write", 3, 5, Phase::kBackward, 10),
      Rec(0, "g", Op::kD2H, "gpu0.d2h", 3, 3.25, Phase::kBackward, 10),
      Rec(0, "c", Op::kConvert, "cpu.r0", 3.25, 3.5, Phase::kBackward, 10),
      Rec(0, "s", Op::kOptimizer, "cpu.r0", 3.5, 6, Phase::kStep),
  };
  const TraceSummary s = Summarize(records, nullptr);
  ASSERT_EQ(s.iterations.size(), 1u);
  const IterationSummary& it = s.iterations[0];
  EXPECT_DOUBLE_EQ(it.timer_s[static_cast<int>(Phase::kForward)], 1.0);
  EXPECT_DOUBLE_EQ(it.timer_s[static_cast<int>(Phase::kBackward)], 2.5);
  EXPECT_DOUBLE_EQ(it.timer_s[static_cast<int>(Phase::kStep)], 2.5);
  EXPECT_DOUBLE_EQ(it.overlap_s[static_cast<int>(Phase::kForward)], 1.0);
  EXPECT_DOUBLE_EQ(it.overlap_s[static_cast<int>(Phase::kBackward)], 1.5);
  EXPECT_DOUBLE_EQ(it.overlap_s[static_cast<int>(Phase::kStep)], 0.0);
  // The spans overlap: backward's runs from 1 to 5.
  EXPECT_DOUBLE_EQ(it.phase(Phase::kBackward).span_s, 4.0);
}

// With micro-steps each forward and backward call is a timer segment of its own, summed per
// phase as DeepSpeed's timers sum its calls; another rank's work does not cut them.
TEST(SummaryTest, TimerPhasesSumTheMicroStepsOfRankZero) {
  std::vector<TraceRecord> records = {
      Rec(0, "f0", Op::kCompute, "gpu0.compute", 0, 1, Phase::kForward),
      Rec(0, "b0", Op::kCompute, "gpu0.compute", 1, 2, Phase::kBackward),
      Rec(0, "f1", Op::kCompute, "gpu0.compute", 2, 3.5, Phase::kForward),
      Rec(0, "b1", Op::kCompute, "gpu0.compute", 3.5, 4, Phase::kBackward),
      Rec(0, "s", Op::kOptimizer, "cpu.r0", 4, 7, Phase::kStep),
  };
  TraceRecord other = Rec(0, "f1.r1", Op::kCompute, "gpu1.compute", 1.5, 1.6, Phase::kForward);
  other.rank = 1;
  records.push_back(other);
  const TraceSummary s = Summarize(records, nullptr);
  const IterationSummary& it = s.iterations[0];
  EXPECT_DOUBLE_EQ(it.timer_s[static_cast<int>(Phase::kForward)], 2.5);
  EXPECT_DOUBLE_EQ(it.timer_s[static_cast<int>(Phase::kBackward)], 1.5);
  EXPECT_DOUBLE_EQ(it.timer_s[static_cast<int>(Phase::kStep)], 3.0);
}

TEST(SummaryTest, ExposedTimeIsBusyTimeThatNoComputeHides) {
  std::vector<TraceRecord> records = {
      Rec(0, "c0", Op::kCompute, "gpu0.compute", 0, 4),
      Rec(0, "c1", Op::kCompute, "gpu0.compute", 6, 8),
      Rec(0, "rd", Op::kRead, "nvme0.read", 3, 7),    // exposed on [4,6]
      Rec(0, "wr", Op::kWrite, "nvme0.write", 5, 10), // exposed on [5,6] and [8,10]
      Rec(0, "h", Op::kH2D, "gpu0.h2d", 1, 2),        // fully hidden
  };
  TraceSummary s = Summarize(records, nullptr);
  EXPECT_DOUBLE_EQ(FindResource(s, "nvme0.read").exposed_s, 2.0);
  EXPECT_DOUBLE_EQ(FindResource(s, "nvme0.write").exposed_s, 3.0);
  EXPECT_DOUBLE_EQ(FindResource(s, "gpu0.h2d").exposed_s, 0.0);
  EXPECT_DOUBLE_EQ(FindResource(s, "gpu0.compute").exposed_s, 0.0);
  EXPECT_DOUBLE_EQ(s.compute_busy_s, 6.0);
  // Any non-compute busy while compute idle: [4,6] and [8,10].
  EXPECT_DOUBLE_EQ(s.exposed_s, 4.0);
}

// Brute force on a grid: integer endpoints make unit cells exact.
TEST(SummaryTest, BusyAndExposedMatchAGridReferenceOnRandomIntervals) {
  std::mt19937 rng(7);
  const std::vector<std::string> resources = {"gpu0.compute", "gpu1.compute", "nvme0.read", "nvme1.write", "gpu0.h2d"};
  for (int round = 0; round < 20; ++round) {
    std::vector<TraceRecord> records;
    std::uniform_int_distribution<int> start(0, 190), len(0, 15), pick(0, 4);
    const int count = 5 + round * 10;
    for (int i = 0; i < count; ++i) {
      int r = pick(rng);
      int a = start(rng), b = a + len(rng);
      records.push_back(Rec(0, "t" + std::to_string(i), r <= 1 ? Op::kCompute : Op::kRead, resources[r], a, b));
    }
    // Make sure every resource appears and the span is known.
    for (int r = 0; r < 5; ++r) records.push_back(Rec(0, "edge" + std::to_string(r), r <= 1 ? Op::kCompute : Op::kRead, resources[r], 0, 0));
    records.push_back(Rec(0, "last", Op::kCompute, "gpu0.compute", 205, 205));
    std::map<std::string, std::vector<int>> cells;  // per resource, 0/1 per unit cell
    for (const auto& name : resources) cells[name].assign(210, 0);
    for (const auto& rec : records) {
      for (int c = static_cast<int>(rec.start_s); c < static_cast<int>(rec.end_s); ++c) cells[rec.resource][c] = 1;
    }
    TraceSummary s = Summarize(records, nullptr);
    ASSERT_DOUBLE_EQ(s.span_s, 205.0);
    double total_exposed = 0;
    for (int c = 0; c < 210; ++c) {
      bool compute = cells["gpu0.compute"][c] || cells["gpu1.compute"][c];
      bool other = cells["nvme0.read"][c] || cells["nvme1.write"][c] || cells["gpu0.h2d"][c];
      total_exposed += (other && !compute) ? 1 : 0;
    }
    EXPECT_DOUBLE_EQ(s.exposed_s, total_exposed) << "round " << round;
    for (const auto& name : resources) {
      double busy = 0, exposed = 0;
      for (int c = 0; c < 210; ++c) {
        busy += cells[name][c];
        exposed += cells[name][c] && !cells["gpu0.compute"][c] && !cells["gpu1.compute"][c];
      }
      const ResourceSummary& r = FindResource(s, name);
      EXPECT_DOUBLE_EQ(r.busy_s, busy) << name << " round " << round;
      EXPECT_DOUBLE_EQ(r.utilization, busy / 205.0) << name;
      EXPECT_DOUBLE_EQ(r.exposed_s, r.is_compute ? 0.0 : exposed) << name << " round " << round;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Iterations and phases.

TEST(SummaryTest, IterationTimesPhasesAndSteadyStateMean) {
  std::vector<TraceRecord> records;
  // Iteration i runs forward [s, s+3], backward [s+3, s+7] (two overlapping tasks), step
  // [s+7, end]; iteration 0 is a slow warm-up.
  const std::vector<double> starts = {0, 12, 20, 28};
  const std::vector<double> ends = {12, 20, 28, 37};
  for (int i = 0; i < 4; ++i) {
    double s0 = starts[i];
    records.push_back(Rec(i, "fwd", Op::kCompute, "gpu0.compute", s0, s0 + 3, Phase::kForward));
    records.push_back(Rec(i, "bwd", Op::kCompute, "gpu0.compute", s0 + 3, s0 + 6, Phase::kBackward));
    records.push_back(Rec(i, "bwd_io", Op::kWrite, "nvme0.write", s0 + 5, s0 + 7, Phase::kBackward));
    records.push_back(Rec(i, "step", Op::kOptimizer, "cpu.optimizer", s0 + 7, ends[i], Phase::kStep));
  }
  std::shuffle(records.begin(), records.end(), std::mt19937(3));  // order must not matter
  TraceSummary s = Summarize(records, nullptr);
  ASSERT_EQ(s.iterations.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const IterationSummary& it = s.iterations[i];
    EXPECT_EQ(it.iteration, i);
    EXPECT_DOUBLE_EQ(it.time_s, ends[i] - starts[i]);
    EXPECT_DOUBLE_EQ(it.period_s, i == 0 ? 0.0 : ends[i] - ends[i - 1]);
    EXPECT_DOUBLE_EQ(it.phase(Phase::kForward).span_s, 3.0);
    EXPECT_DOUBLE_EQ(it.phase(Phase::kBackward).span_s, 4.0);
    EXPECT_DOUBLE_EQ(it.phase(Phase::kBackward).busy_s, 4.0);  // [3,6] u [5,7]
    EXPECT_DOUBLE_EQ(it.phase(Phase::kStep).span_s, ends[i] - starts[i] - 7);
    EXPECT_FALSE(it.phase(Phase::kOther).present);
  }
  // Mean of the differences of consecutive ends, iteration 0 (warm-up) and the last (nothing
  // after it) skipped: the last period here is 9, the steady ones 8.
  EXPECT_DOUBLE_EQ(s.mean_iteration_s, ((20.0 - 12) + (28.0 - 20)) / 2);
  // Two iterations: the one period there is.
  std::vector<TraceRecord> two(records.begin(), records.end());
  std::erase_if(two, [](const TraceRecord& r) { return r.iteration > 1; });
  EXPECT_DOUBLE_EQ(Summarize(two, nullptr).mean_iteration_s, 20.0 - 12);
  // One iteration: its own time.
  std::vector<TraceRecord> one(records.begin(), records.end());
  std::erase_if(one, [](const TraceRecord& r) { return r.iteration != 2; });
  EXPECT_DOUBLE_EQ(Summarize(one, nullptr).mean_iteration_s, 8.0);
  // The same rule from the iterations' ends alone (a run without records: run --in-memory).
  EXPECT_DOUBLE_EQ(SteadyIterationTime(ends, starts[0]), s.mean_iteration_s);
  EXPECT_DOUBLE_EQ(SteadyIterationTime({ends[0], ends[1]}, starts[0]), 20.0 - 12);
  EXPECT_DOUBLE_EQ(SteadyIterationTime({ends[2]}, starts[2]), 8.0);
  EXPECT_EQ(SteadyIterationTime({}, 0.0), 0.0);
}

TEST(SummaryTest, EmptyAndMixedSourcesSaySo) {
  TraceSummary empty = Summarize({}, nullptr);
  EXPECT_EQ(empty.records, 0);
  EXPECT_FALSE(empty.notes.empty());
  EXPECT_FALSE(empty.critical_path.available);
  TraceSummary mixed = Summarize({Rec(0, "a", Op::kCompute, "gpu0.compute", 0, 1, Phase::kForward, 0, "sim"),
                                  Rec(0, "a", Op::kCompute, "gpu0.compute", 0, 1, Phase::kForward, 0, "real")},
                                 nullptr);
  EXPECT_EQ(mixed.sources, (std::vector<std::string>{"real", "sim"}));
  EXPECT_FALSE(mixed.notes.empty());
}

// ---------------------------------------------------------------------------------------------
// Pool occupancy.

struct PoolCase {
  Schedule schedule;
  std::vector<TraceRecord> records;
};

// Buffers A (30), B (40), C (20) in host.pinned (persistent P = 10). Per iteration:
// load_a allocs A, load_b allocs B, use_a frees A, load_c allocs C, use_b frees B, use_c frees C.
PoolCase MakePoolCase() {
  PoolCase pc;
  Schedule& s = pc.schedule;
  s = BaseSchedule();
  int32_t host = s.FindDevice("host");
  int32_t gpu = s.FindDevice("gpu0");
  int32_t pinned = s.AddPool({"host.pinned", host, 100});
  s.AddPool({"gpu0.hbm", gpu, 1000});
  s.AddBuffer({"P", pinned, 10, true});
  int32_t a = s.AddBuffer({"A", pinned, 30, false});
  int32_t b = s.AddBuffer({"B", pinned, 40, false});
  int32_t c = s.AddBuffer({"C", pinned, 20, false});
  auto task = [&](const std::string& id, std::vector<int32_t> allocs, std::vector<int32_t> frees,
                  std::vector<int32_t> deps = {}) {
    TaskSpec t;
    t.id = id;
    t.deps = std::move(deps);
    t.op = Op::kRead;
    t.resource = s.FindResource("nvme0.read");
    t.allocs = std::move(allocs);
    t.frees = std::move(frees);
    return s.AddTask(std::move(t));
  };
  int32_t load_a = task("load_a", {a}, {});
  int32_t load_b = task("load_b", {b}, {});
  task("use_a", {}, {a}, {load_a});
  int32_t load_c = task("load_c", {c}, {});
  task("use_b", {}, {b}, {load_b});
  task("use_c", {}, {c}, {load_c});
  // Iteration 0 from t = 0, iteration 1 from t = 10. use_a frees A at 3 exactly when load_c
  // allocates C: they must not count together.
  for (int it = 0; it < 2; ++it) {
    double o = it * 10;
    pc.records.push_back(Rec(it, "load_a", Op::kRead, "nvme0.read", o + 0, o + 1));
    pc.records.push_back(Rec(it, "load_b", Op::kRead, "nvme0.read", o + 1, o + 2));
    pc.records.push_back(Rec(it, "use_a", Op::kRead, "nvme0.read", o + 2, o + 3));
    pc.records.push_back(Rec(it, "load_c", Op::kRead, "nvme0.read", o + 3, o + 4));
    pc.records.push_back(Rec(it, "use_b", Op::kRead, "nvme0.read", o + 4, o + 5));
    pc.records.push_back(Rec(it, "use_c", Op::kRead, "nvme0.read", o + 5, o + 6));
  }
  return pc;
}

// Independent reference: bytes held at time t = persistent + buffers with alloc <= t < free.
int64_t HeldAt(const PoolCase& pc, double t) {
  int64_t held = 0;
  const Schedule& s = pc.schedule;
  for (const auto& b : s.buffers()) {
    if (b.pool == s.FindPool("host.pinned") && b.persistent) held += b.size_bytes;
  }
  for (const auto& r : pc.records) {
    const TaskSpec& task = s.tasks()[s.FindTask(r.task)];
    for (int32_t b : task.allocs) {
      // Find the matching free in the same iteration.
      for (const auto& f : pc.records) {
        const TaskSpec& ft = s.tasks()[s.FindTask(f.task)];
        if (f.iteration == r.iteration && std::count(ft.frees.begin(), ft.frees.end(), b)) {
          if (r.start_s <= t && t < f.end_s) held += s.buffers()[b].size_bytes;
        }
      }
    }
  }
  return held;
}

TEST(OccupancyTest, PeakAndSamplesMatchAnIndependentReplay) {
  PoolCase pc = MakePoolCase();
  ASSERT_TRUE(pc.schedule.Validate().ok()) << pc.schedule.Validate().ToString();
  OccupancyResult occ = ReconstructPoolOccupancy(pc.records, pc.schedule, true);
  ASSERT_EQ(occ.pools.size(), 2u);
  const PoolOccupancy& pinned = occ.pools[0];
  EXPECT_EQ(pinned.name, "host.pinned");
  EXPECT_EQ(pinned.persistent_bytes, 10);
  EXPECT_EQ(pinned.peak_bytes, 10 + 30 + 40);  // A and B at t = 1; not A + B + C at t = 3
  EXPECT_DOUBLE_EQ(pinned.peak_time_s, 1.0);
  EXPECT_EQ(occ.unmatched_records, 0);
  // Every sample agrees with the replay, and every change point has a sample.
  std::set<double> change_points = {0};
  for (const auto& r : pc.records) {
    change_points.insert(r.start_s);
    change_points.insert(r.end_s);
  }
  int64_t peak = 0;
  for (double t : change_points) peak = std::max(peak, HeldAt(pc, t));
  EXPECT_EQ(pinned.peak_bytes, peak);
  for (const auto& sample : pinned.samples) {
    EXPECT_EQ(sample.bytes, HeldAt(pc, sample.time_s)) << "at t = " << sample.time_s;
  }
  for (size_t k = 1; k < pinned.samples.size(); ++k) EXPECT_LT(pinned.samples[k - 1].time_s, pinned.samples[k].time_s);
  EXPECT_EQ(pinned.samples.back().bytes, 10);  // everything freed at the end
  // The GPU pool never changed: one sample, empty.
  ASSERT_EQ(occ.pools[1].samples.size(), 1u);
  EXPECT_EQ(occ.pools[1].peak_bytes, 0);
}

TEST(OccupancyTest, SummaryReportsPoolPeaksAndUnmatchedRecords) {
  PoolCase pc = MakePoolCase();
  pc.records.push_back(Rec(0, "probe.disk", Op::kRead, "nvme0.read", 20, 21));
  TraceSummary s = Summarize(pc.records, &pc.schedule);
  ASSERT_EQ(s.pools.size(), 2u);
  EXPECT_EQ(s.pools[0].name, "host.pinned");
  EXPECT_EQ(s.pools[0].device, "host");
  EXPECT_EQ(s.pools[0].capacity_bytes, 100);
  EXPECT_EQ(s.pools[0].peak_bytes, 80);
  bool noted = false;
  for (const auto& n : s.notes) noted |= n.find("1 records name tasks the schedule lacks") != std::string::npos;
  EXPECT_TRUE(noted);
  // Resources come in schedule order, with their device from the schedule.
  ASSERT_GE(s.resources.size(), 5u);
  EXPECT_EQ(s.resources[0].name, "gpu0.compute");
  EXPECT_EQ(s.resources[2].device, "nvme0");
}

// ---------------------------------------------------------------------------------------------
// Critical path.

TEST(CriticalPathTest, DiamondFollowsTheDepThatEndedLast) {
  Schedule s = BaseSchedule();
  int32_t a = AddTask(&s, "A", Op::kRead, "nvme0.read");
  int32_t b = AddTask(&s, "B", Op::kH2D, "gpu0.h2d", {a});
  int32_t c = AddTask(&s, "C", Op::kOptimizer, "cpu.optimizer", {a});
  AddTask(&s, "D", Op::kCompute, "gpu0.compute", {b, c});
  ASSERT_TRUE(s.Validate().ok());
  for (bool b_longer : {true, false}) {
    std::vector<TraceRecord> records = {
        Rec(0, "A", Op::kRead, "nvme0.read", 0, 1),
        Rec(0, "B", Op::kH2D, "gpu0.h2d", 1, b_longer ? 3 : 2),
        Rec(0, "C", Op::kOptimizer, "cpu.optimizer", 1, b_longer ? 2 : 3),
        Rec(0, "D", Op::kCompute, "gpu0.compute", 3, 4),
    };
    TraceSummary sum = Summarize(records, &s);
    const CriticalPath& cp = sum.critical_path;
    ASSERT_TRUE(cp.available) << cp.explanation;
    ASSERT_EQ(cp.steps.size(), 3u);
    EXPECT_EQ(cp.steps[0].task, "A");
    EXPECT_EQ(cp.steps[0].reason, CriticalReason::kFirst);
    EXPECT_EQ(cp.steps[1].task, b_longer ? "B" : "C");
    EXPECT_EQ(cp.steps[1].reason, CriticalReason::kDep);
    EXPECT_EQ(cp.steps[2].task, "D");
    EXPECT_EQ(cp.steps[2].reason, CriticalReason::kDep);
    EXPECT_DOUBLE_EQ(cp.length_s, 4.0);
    EXPECT_DOUBLE_EQ(cp.gap_s, 0.0);
    EXPECT_DOUBLE_EQ(cp.time_by_op_s[static_cast<int>(Op::kRead)], 1.0);
    EXPECT_DOUBLE_EQ(cp.time_by_op_s[static_cast<int>(b_longer ? Op::kH2D : Op::kOptimizer)], 2.0);
    EXPECT_DOUBLE_EQ(cp.time_by_op_s[static_cast<int>(b_longer ? Op::kOptimizer : Op::kH2D)], 0.0);
    EXPECT_DOUBLE_EQ(cp.time_by_op_s[static_cast<int>(Op::kCompute)], 1.0);
  }
}

TEST(CriticalPathTest, CrossesIterationsThroughACarriedDep) {
  Schedule s = BaseSchedule();
  int32_t read = AddTask(&s, "read", Op::kRead, "nvme0.read");
  int32_t fwd = AddTask(&s, "fwd", Op::kCompute, "gpu0.compute", {read});
  int32_t write = AddTask(&s, "write", Op::kWrite, "nvme0.write", {fwd});
  s.mutable_tasks()[read].carried.push_back({write, 1});
  ASSERT_TRUE(s.Validate().ok()) << s.Validate().ToString();
  std::vector<TraceRecord> records;
  for (int it = 0; it < 3; ++it) {
    // Iteration i starts at 3.5 i; read(i) for i > 0 starts 1 s after write(i-1) ended: a gap.
    double o = it * 3.5;
    records.push_back(Rec(it, "read", Op::kRead, "nvme0.read", o + (it ? 0.5 : 0), o + 1));
    records.push_back(Rec(it, "fwd", Op::kCompute, "gpu0.compute", o + 1, o + 2));
    records.push_back(Rec(it, "write", Op::kWrite, "nvme0.write", o + 2, o + 3));
  }
  TraceSummary sum = Summarize(records, &s);
  const CriticalPath& cp = sum.critical_path;
  ASSERT_TRUE(cp.available);
  ASSERT_EQ(cp.steps.size(), 9u);
  for (size_t k = 0; k < 9; ++k) {
    EXPECT_EQ(cp.steps[k].iteration, static_cast<int64_t>(k / 3));
    EXPECT_EQ(cp.steps[k].task, (std::vector<std::string>{"read", "fwd", "write"})[k % 3]);
    EXPECT_EQ(cp.steps[k].reason, k == 0 ? CriticalReason::kFirst : CriticalReason::kDep) << k;
  }
  // write(0) ends at 3, read(1) starts at 4.
  EXPECT_DOUBLE_EQ(cp.steps[3].gap_s, 4.0 - 3.0);
  EXPECT_DOUBLE_EQ(cp.gap_s, 2 * 1.0);
  EXPECT_DOUBLE_EQ(cp.length_s, 2 * 3.5 + 3);
  EXPECT_DOUBLE_EQ(cp.time_by_op_s[static_cast<int>(Op::kCompute)], 3.0);
  EXPECT_DOUBLE_EQ(cp.time_by_op_s[static_cast<int>(Op::kRead)], 1.0 + 0.5 + 0.5);
}

TEST(CriticalPathTest, ResourceWaitWhenTheQueueWasBusyLongerThanTheDeps) {
  Schedule s = BaseSchedule();
  int32_t x = AddTask(&s, "X", Op::kCompute, "gpu0.compute");
  int32_t z = AddTask(&s, "Z", Op::kH2D, "gpu0.h2d");
  AddTask(&s, "Y", Op::kCompute, "gpu0.compute", {z});
  (void)x;
  ASSERT_TRUE(s.Validate().ok());
  std::vector<TraceRecord> records = {
      Rec(0, "X", Op::kCompute, "gpu0.compute", 0, 2),
      Rec(0, "Z", Op::kH2D, "gpu0.h2d", 0, 1),          // Y's dep ends at 1 ...
      Rec(0, "Y", Op::kCompute, "gpu0.compute", 2, 3),  // ... but Y waits for X on the queue
  };
  TraceSummary sum = Summarize(records, &s);
  const CriticalPath& cp = sum.critical_path;
  ASSERT_EQ(cp.steps.size(), 2u);
  EXPECT_EQ(cp.steps[0].task, "X");
  EXPECT_EQ(cp.steps[0].reason, CriticalReason::kFirst);
  EXPECT_EQ(cp.steps[1].task, "Y");
  EXPECT_EQ(cp.steps[1].reason, CriticalReason::kResource);
  EXPECT_DOUBLE_EQ(cp.time_by_op_s[static_cast<int>(Op::kCompute)], 3.0);
  EXPECT_DOUBLE_EQ(cp.time_by_op_s[static_cast<int>(Op::kH2D)], 0.0);
  // When the dep ends last, the dep wins.
  records[1].end_s = 2;
  records[0].end_s = 1.5;
  TraceSummary sum2 = Summarize(records, &s);
  ASSERT_EQ(sum2.critical_path.steps.size(), 2u);
  EXPECT_EQ(sum2.critical_path.steps[0].task, "Z");
  EXPECT_EQ(sum2.critical_path.steps[1].reason, CriticalReason::kDep);
}

TEST(CriticalPathTest, UnavailableWithoutASchedule) {
  TraceSummary s = Summarize({Rec(0, "a", Op::kCompute, "gpu0.compute", 0, 1)}, nullptr);
  EXPECT_FALSE(s.critical_path.available);
  EXPECT_NE(s.critical_path.explanation.find("schedule"), std::string::npos);
  EXPECT_TRUE(s.pools.empty());
}

// ---------------------------------------------------------------------------------------------
// Chrome export.

TEST(ChromeTraceTest, TracksProcessesEventsAndCountersParse) {
  PoolCase pc = MakePoolCase();
  TaskSpec barrier;
  barrier.id = "end";
  barrier.op = Op::kBarrier;
  pc.schedule.AddTask(barrier);
  std::vector<TraceRecord> records = pc.records;
  records.push_back(Rec(0, "end", Op::kBarrier, "", 6, 6));
  records.push_back(Rec(0, "fwd", Op::kCompute, "gpu0.compute", 1, 1.5, Phase::kForward));
  records.back().device_start_s = 1.125;  // its work on the GPU: 0.25 s of the 0.5
  records.back().device_end_s = 1.375;
  records[0].bytes = 3'000'000'000;  // load_a: 3 GB in 1 s
  std::string text = ChromeTraceToString(records, &pc.schedule);
  Json j = Json::parse(text);
  ASSERT_TRUE(j.contains("traceEvents"));
  EXPECT_EQ(j["displayTimeUnit"], "ms");
  std::map<int, std::string> process_name;
  std::map<std::pair<int, int>, std::string> thread_name;
  int complete = 0, instant = 0;
  std::map<std::string, std::vector<std::pair<double, int64_t>>> counters;
  for (const auto& e : j["traceEvents"]) {
    std::string ph = e["ph"];
    if (ph == "M" && e["name"] == "process_name") process_name[e["pid"]] = e["args"]["name"];
    if (ph == "M" && e["name"] == "thread_name") thread_name[{e["pid"], e["tid"]}] = e["args"]["name"];
    if (ph == "X") ++complete;
    if (ph == "i") ++instant;
    if (ph == "C") counters[e["name"]].push_back({e["ts"].get<double>(), e["args"]["bytes"].get<int64_t>()});
  }
  // A process per device (with the source), a track per schedule resource in its device.
  std::set<std::string> names;
  for (auto& [pid, n] : process_name) names.insert(n);
  EXPECT_TRUE(names.count("gpu0 (sim)"));
  EXPECT_TRUE(names.count("nvme0 (sim)"));
  EXPECT_TRUE(names.count("host (sim)"));
  EXPECT_TRUE(names.count("schedule (sim)"));
  std::map<std::string, std::string> track_process;
  for (auto& [key, n] : thread_name) track_process[n] = process_name[key.first];
  EXPECT_EQ(track_process["gpu0.compute"], "gpu0 (sim)");
  EXPECT_EQ(track_process["nvme0.read"], "nvme0 (sim)");
  EXPECT_EQ(track_process["cpu.optimizer"], "host (sim)");
  EXPECT_EQ(track_process["instant"], "schedule (sim)");
  EXPECT_EQ(complete, static_cast<int>(records.size()) - 1);
  EXPECT_EQ(instant, 1);
  // Events: microseconds, and the fields asked for.
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X" && e["name"] == "fwd") {
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 1e6);
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 0.5e6);
      EXPECT_EQ(e["cat"], "compute");
      EXPECT_EQ(e["args"]["phase"], "forward");
      EXPECT_DOUBLE_EQ(e["args"]["device_start_us"].get<double>(), 1.125e6);
      EXPECT_DOUBLE_EQ(e["args"]["device_us"].get<double>(), 0.25e6);
      std::pair<int, int> key(e["pid"], e["tid"]);
      EXPECT_EQ(thread_name[key], "gpu0.compute");
    }
    if (e["ph"] == "X" && e["name"] == "load_a" && e["args"]["iteration"] == 0) {
      EXPECT_DOUBLE_EQ(e["args"]["gb_per_s"].get<double>(), 3.0);
      EXPECT_EQ(e["args"]["bytes"].get<int64_t>(), 3'000'000'000);
      EXPECT_FALSE(e["args"].contains("device_us"));  // no GPU-side span
    }
  }
  // Counters: one track per pool; values replay the occupancy reconstruction.
  ASSERT_TRUE(counters.count("host.pinned"));
  OccupancyResult occ = ReconstructPoolOccupancy(pc.records, pc.schedule, true);
  const auto& pinned = counters["host.pinned"];
  ASSERT_EQ(pinned.size(), occ.pools[0].samples.size());
  int64_t peak = 0;
  for (size_t k = 0; k < pinned.size(); ++k) {
    EXPECT_DOUBLE_EQ(pinned[k].first, occ.pools[0].samples[k].time_s * 1e6);
    EXPECT_EQ(pinned[k].second, HeldAt(pc, occ.pools[0].samples[k].time_s));
    peak = std::max(peak, pinned[k].second);
  }
  EXPECT_EQ(peak, 80);
}

TEST(ChromeTraceTest, SimAndRealSideBySideAsSeparateProcessGroups) {
  std::vector<TraceRecord> records = {
      Rec(0, "fwd", Op::kCompute, "gpu0.compute", 0, 1, Phase::kForward, 0, "sim"),
      Rec(0, "fwd", Op::kCompute, "gpu0.compute", 0, 1.2, Phase::kForward, 0, "real"),
      Rec(0, "rd", Op::kRead, "nvme0.read", 0, 1, Phase::kForward, 10, "real"),
  };
  Json j = Json::parse(ChromeTraceToString(records, nullptr));
  std::map<std::string, int> pid_of;
  std::map<int, int> events_per_pid;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") pid_of[e["args"]["name"]] = e["pid"];
    if (e["ph"] == "X") ++events_per_pid[e["pid"]];
    EXPECT_NE(e["ph"], "C");  // no schedule, no counters
  }
  ASSERT_TRUE(pid_of.count("gpu0 (sim)"));
  ASSERT_TRUE(pid_of.count("gpu0 (real)"));
  ASSERT_TRUE(pid_of.count("nvme0 (real)"));
  EXPECT_FALSE(pid_of.count("nvme0 (sim)"));
  EXPECT_NE(pid_of["gpu0 (sim)"], pid_of["gpu0 (real)"]);
  EXPECT_EQ(events_per_pid[pid_of["gpu0 (sim)"]], 1);
  EXPECT_EQ(events_per_pid[pid_of["gpu0 (real)"]], 1);
}

TEST(ChromeTraceTest, OverlappingRequestsOnOneQueueGetLanesThatNeverOverlap) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> start(0, 50), len(0.1, 8);
  std::vector<TraceRecord> records;
  for (int i = 0; i < 200; ++i) {
    double s0 = start(rng);
    records.push_back(Rec(0, "rd" + std::to_string(i), Op::kRead, "nvme0.read", s0, s0 + len(rng)));
  }
  // Back-to-back compute shares one track.
  for (int i = 0; i < 10; ++i) records.push_back(Rec(0, "c" + std::to_string(i), Op::kCompute, "gpu0.compute", i, i + 1));
  Json j = Json::parse(ChromeTraceToString(records, nullptr));
  std::map<std::pair<int, int>, std::string> thread_name;
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> events;
  for (const auto& e : j["traceEvents"]) {
    std::pair<int, int> key(e["pid"], e["tid"]);
    if (e["ph"] == "M" && e["name"] == "thread_name") thread_name[key] = e["args"]["name"];
    if (e["ph"] == "X") events[key].push_back({e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()});
  }
  // The most requests in flight at once (brute force at every start) = the lanes needed.
  size_t most = 0;
  for (const auto& r : records) {
    if (r.resource != "nvme0.read") continue;
    size_t in_flight = 0;
    for (const auto& q : records) in_flight += q.resource == "nvme0.read" && q.start_s <= r.start_s && r.start_s < q.end_s;
    most = std::max(most, in_flight);
  }
  size_t read_tracks = 0, compute_tracks = 0, total = 0;
  for (auto& [key, v] : events) {
    const std::string& name = thread_name[key];
    read_tracks += name.rfind("nvme0.read", 0) == 0;
    compute_tracks += name.rfind("gpu0.compute", 0) == 0;
    total += v.size();
    std::sort(v.begin(), v.end());
    for (size_t k = 1; k < v.size(); ++k) EXPECT_LE(v[k - 1].second, v[k].first) << name;
  }
  EXPECT_EQ(total, records.size());
  EXPECT_EQ(read_tracks, most);
  EXPECT_EQ(compute_tracks, 1u);
  EXPECT_GT(most, 1u);
}

TEST(ChromeTraceTest, WritesAFileAndReportsAnUnwritablePath) {
  std::string path = std::string(TIERFLOW_BINARY_DIR) + "/traces_test_chrome.json";
  std::vector<TraceRecord> records = {Rec(0, "t\"quoted\"", Op::kCompute, "gpu0.compute", 0, 1)};
  ASSERT_TRUE(WriteChromeTrace(path, records, nullptr).ok());
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  Json j = Json::parse(ss.str());
  bool found = false;
  for (const auto& e : j["traceEvents"]) found |= e["name"] == "t\"quoted\"";
  EXPECT_TRUE(found);
  // A path whose directory cannot be made (a file is in the way; a missing directory is created).
  const std::string under_a_file = path + "/x/out.json";
  Status bad = WriteChromeTrace(under_a_file, records, nullptr);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find(under_a_file), std::string::npos) << bad.ToString();
  std::remove(path.c_str());
}

// ---------------------------------------------------------------------------------------------
// Comparison.

TEST(CompareTest, ErrorsMatchAnIndependentComputation) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> dur(0.1, 2.0), noise(0.8, 1.3);
  const std::vector<std::pair<std::string, Op>> tasks = {
      {"read", Op::kRead}, {"h2d", Op::kH2D}, {"fwd", Op::kCompute}, {"bwd", Op::kCompute}, {"adam", Op::kOptimizer}};
  std::vector<TraceRecord> a, b;
  for (int it = 0; it < 4; ++it) {
    double ta = it * 100, tb = it * 100;
    for (const auto& [task, op] : tasks) {
      double da = dur(rng), db = da * noise(rng);
      a.push_back(Rec(it, task, op, "r." + task, ta, ta + da, Phase::kOther, 0, "real"));
      b.push_back(Rec(it, task, op, "r." + task, tb, tb + db, Phase::kOther, 0, "sim"));
      ta += da;
      tb += db;
    }
  }
  // Unmatched: one only in a, two only in b.
  a.push_back(Rec(9, "only_a", Op::kWrite, "w", 500, 501));
  b.push_back(Rec(9, "only_b", Op::kWrite, "w", 500, 501));
  std::shuffle(b.begin(), b.end(), rng);
  b.push_back(Rec(0, "read", Op::kRead, "r.read", 0, 5));  // a later duplicate in b matches nothing

  TraceComparison c = Compare(a, b, {.worst_count = 3});
  EXPECT_EQ(c.matched, 20);
  EXPECT_EQ(c.a_unmatched, 1);
  EXPECT_EQ(c.b_unmatched, 2);
  EXPECT_EQ(c.op_mismatches, 0);

  // Expected per op, straight from the definitions.
  std::map<Op, std::tuple<int, double, double>> expected;
  std::vector<std::tuple<double, int64_t, std::string>> errors;
  for (const auto& ra : a) {
    if (ra.iteration == 9) continue;
    const TraceRecord* rb = nullptr;
    for (const auto& x : b) {
      if (x.iteration == ra.iteration && x.task == ra.task && x.end_s - x.start_s != 5) rb = &x;
    }
    ASSERT_NE(rb, nullptr);
    auto& [n, sa, sb] = expected[ra.op];
    ++n;
    sa += ra.end_s - ra.start_s;
    sb += rb->end_s - rb->start_s;
    errors.push_back({std::fabs((rb->end_s - rb->start_s) - (ra.end_s - ra.start_s)), ra.iteration, ra.task});
  }
  ASSERT_EQ(c.ops.size(), expected.size());
  for (const auto& o : c.ops) {
    auto [n, sa, sb] = expected[o.op];
    EXPECT_EQ(o.count, n) << OpName(o.op);
    EXPECT_NEAR(o.a_sum_s, sa, 1e-12);
    EXPECT_NEAR(o.b_sum_s, sb, 1e-12);
    EXPECT_NEAR(o.rel_error, (sb - sa) / sa, 1e-12);
  }
  // Worst tasks: the three largest absolute errors, largest first.
  std::sort(errors.begin(), errors.end(), [](auto& x, auto& y) { return std::get<0>(x) > std::get<0>(y); });
  ASSERT_EQ(c.worst.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_NEAR(c.worst[k].abs_error_s, std::get<0>(errors[k]), 1e-12);
    EXPECT_EQ(c.worst[k].iteration, std::get<1>(errors[k]));
    EXPECT_EQ(c.worst[k].task, std::get<2>(errors[k]));
  }
  // Iterations: both traces have 0..3 and 9 (the unmatched records form iteration 9 on each
  // side), each iteration's time computed here from its own records.
  ASSERT_EQ(c.iterations.size(), 5u);
  for (const auto& it : c.iterations) {
    auto time_of = [&](const std::vector<TraceRecord>& v) {
      double lo = 1e300, hi = -1e300;
      for (const auto& r : v) {
        if (r.iteration == it.iteration) {
          lo = std::min(lo, r.start_s);
          hi = std::max(hi, r.end_s);
        }
      }
      return hi - lo;
    };
    EXPECT_NEAR(it.a_time_s, time_of(a), 1e-12);
    EXPECT_NEAR(it.b_time_s, time_of(b), 1e-12);
    EXPECT_NEAR(it.rel_error, (time_of(b) - time_of(a)) / time_of(a), 1e-12);
  }
}

// Records of several ranks match by rank; sim's record of a collective (no rank) stands for every
// rank's and is compared with each.
TEST(CompareTest, EveryRankIsMatched) {
  auto ranked = [](TraceRecord r, int32_t rank) {
    r.rank = rank;
    return r;
  };
  const std::vector<TraceRecord> real = {
      ranked(Rec(0, "h2d.u.r0", Op::kH2D, "gpu0.h2d", 0, 1, Phase::kForward, 0, "real"), 0),
      ranked(Rec(0, "h2d.u.r1", Op::kH2D, "gpu1.h2d", 0, 2, Phase::kForward, 0, "real"), 1),
      ranked(Rec(0, "allgather.u", Op::kAllGather, "dp.comm", 2, 3, Phase::kForward, 0, "real"), 0),
      ranked(Rec(0, "allgather.u", Op::kAllGather, "dp.comm", 2, 4, Phase::kForward, 0, "real"), 1)};
  const std::vector<TraceRecord> sim = {ranked(Rec(0, "h2d.u.r0", Op::kH2D, "gpu0.h2d", 0, 1), 0),
                                        ranked(Rec(0, "h2d.u.r1", Op::kH2D, "gpu1.h2d", 0, 1), 1),
                                        Rec(0, "allgather.u", Op::kAllGather, "dp.comm", 1, 2)};
  for (const bool real_first : {true, false}) {
    const TraceComparison c = real_first ? Compare(real, sim) : Compare(sim, real);
    EXPECT_EQ(c.matched, 4);
    EXPECT_EQ(c.a_unmatched, 0);
    EXPECT_EQ(c.b_unmatched, 0);
  }
  // A rank's record never stands for another's.
  std::vector<TraceRecord> one_rank = sim;
  one_rank[2].rank = 0;
  const TraceComparison c = Compare(real, one_rank);
  EXPECT_EQ(c.matched, 3);
  EXPECT_EQ(c.a_unmatched, 1);
}

// validate's judgement: the run of median steady-state iteration time is the one compared,
// whatever the runs' order; its compute grouped per layer carries the whole comparison's
// iteration figures.
TEST(CompareTest, ValidationComparesTheMedianRunWithSim) {
  // A run of 5 iterations whose every iteration lasts `period`: one compute task per layer and
  // phase of layer 1 split in two tasks (which GroupComputeByLayer joins), then a write.
  auto run = [](double period, const std::string& source) {
    std::vector<TraceRecord> r;
    for (int it = 0; it < 5; ++it) {
      const double t = it * period;
      r.push_back(Rec(it, "compute.forward.layer1.a", Op::kCompute, "gpu0.compute", t, t + 0.2 * period, Phase::kForward, 0, source));
      r.push_back(Rec(it, "compute.forward.layer1.b", Op::kCompute, "gpu0.compute", t + 0.2 * period, t + 0.5 * period, Phase::kForward, 0, source));
      r.push_back(Rec(it, "write", Op::kWrite, "nvme0.write", t + 0.5 * period, t + period, Phase::kOther, 4096, source));
    }
    for (TraceRecord& x : r) x.layer = 1;
    return r;
  };
  const std::vector<TraceRecord> slow = run(3.0, "real"), fast = run(1.0, "real"), middle = run(2.0, "real");
  const std::vector<TraceRecord> sim = run(2.2, "sim");
  const SimValidation v = ValidateAgainstRuns({&slow, &fast, &middle}, sim);
  ASSERT_EQ(v.real_iteration_s.size(), 3u);
  EXPECT_DOUBLE_EQ(v.real_iteration_s[0], 3.0);
  EXPECT_DOUBLE_EQ(v.real_iteration_s[1], 1.0);
  EXPECT_DOUBLE_EQ(v.real_iteration_s[2], 2.0);
  EXPECT_EQ(v.median, 2u) << "the 2 s run";
  EXPECT_DOUBLE_EQ(v.whole.a_mean_iteration_s, 2.0);
  EXPECT_DOUBLE_EQ(v.whole.b_mean_iteration_s, 2.2);
  EXPECT_NEAR(v.whole.mean_iteration_rel_error, 0.1, 1e-12);
  EXPECT_EQ(v.whole.matched, 15);
  EXPECT_EQ(v.grouped.matched, 10) << "a layer's two forward tasks compared as one";
  EXPECT_EQ(v.grouped.a_mean_iteration_s, v.whole.a_mean_iteration_s);
  EXPECT_EQ(v.grouped.mean_iteration_rel_error, v.whole.mean_iteration_rel_error);
}

TEST(CompareTest, RelativeErrorEdgeCases) {
  EXPECT_DOUBLE_EQ(RelativeError(2.0, 3.0), 0.5);
  EXPECT_DOUBLE_EQ(RelativeError(0.0, 0.0), 0.0);
  EXPECT_TRUE(std::isinf(RelativeError(0.0, 1.0)));
}

// ---------------------------------------------------------------------------------------------
// Renderers.

TEST(ReportTest, JsonAndTextCarryTheFigures) {
  PoolCase pc = MakePoolCase();
  TraceSummary s = Summarize(pc.records, &pc.schedule);
  Json j = Json::parse(SummaryToJson(s));
  EXPECT_DOUBLE_EQ(j["mean_iteration_s"].get<double>(), s.mean_iteration_s);
  EXPECT_EQ(j["iterations"].size(), s.iterations.size());
  EXPECT_EQ(j["pools"][0]["peak_bytes"].get<int64_t>(), 80);
  EXPECT_EQ(j["critical_path"]["available"], true);
  EXPECT_EQ(j["critical_path"]["steps"].size(), s.critical_path.steps.size());
  std::string text = SummaryToText(s);
  EXPECT_NE(text.find("host.pinned"), std::string::npos);
  EXPECT_NE(text.find("nvme0.read"), std::string::npos);
  EXPECT_NE(text.find("critical path"), std::string::npos);

  std::vector<TraceRecord> b = pc.records;
  for (auto& r : b) r.end_s += 0.5;
  TraceComparison c = Compare(pc.records, b);
  Json jc = Json::parse(ComparisonToJson(c));
  EXPECT_EQ(jc["matched"].get<int64_t>(), static_cast<int64_t>(pc.records.size()));
  EXPECT_NEAR(jc["ops"][0]["rel_error"].get<double>(), 0.5, 1e-12);  // every read 1 s -> 1.5 s
  EXPECT_NE(ComparisonToText(c).find("+50.00 %"), std::string::npos);
  // Infinite errors are written as null, not as invalid JSON.
  std::vector<TraceRecord> z = {Rec(0, "x", Op::kCompute, "g", 0, 0)};
  std::vector<TraceRecord> zb = {Rec(0, "x", Op::kCompute, "g", 0, 1)};
  Json jz = Json::parse(ComparisonToJson(Compare(z, zb)));
  EXPECT_TRUE(jz["ops"][0]["rel_error"].is_null());
}

// MFU is against the hardware's GPU peak; a run faster than that peak (a profile that is not this
// machine's) gets no percentage, but the peak it outran; a run with no peak, none.
TEST(ReportTest, MfuIsAPercentageOnlyBelowThePeak) {
  PoolCase pc = MakePoolCase();
  RunFacts facts;
  facts.scenario = "pool-case";
  facts.policy = "none";
  facts.iterations = 2;
  facts.pool_peak_bytes = {80, 0};
  facts.setting = {.model = "m", .hardware = "h", .sequence_length = 8, .micro_batch = 1, .accumulation = 1, .ranks = 1};
  const double it = Summarize(pc.records, &pc.schedule).mean_iteration_s;
  ASSERT_GT(it, 0);
  facts.setting.flops_per_iteration = 3e12 * it;  // 3 TFLOP/s
  facts.setting.peak_flops_per_gpu = 10e12;
  nlohmann::ordered_json r = BuildReport(pc.schedule, pc.records, facts);
  EXPECT_NEAR(r["throughput"]["mfu"].get<double>(), 0.3, 1e-12);
  EXPECT_EQ(r["throughput"]["peak_flops_per_gpu"].get<double>(), 10e12);
  EXPECT_NE(ReportToText(pc.schedule, r).find("MFU 30.0 %"), std::string::npos) << ReportToText(pc.schedule, r);
  facts.setting.peak_flops_per_gpu = 1e12;
  r = BuildReport(pc.schedule, pc.records, facts);
  EXPECT_NEAR(r["throughput"]["mfu"].get<double>(), 3.0, 1e-12);
  const std::string text = ReportToText(pc.schedule, r);
  EXPECT_EQ(text.find("MFU 300"), std::string::npos) << text;
  EXPECT_NE(text.find("MFU - (above the hardware's GPU peak of 1"), std::string::npos) << text;
  facts.setting.peak_flops_per_gpu = 0;  // the caller knows no peak of the device that ran
  r = BuildReport(pc.schedule, pc.records, facts);
  EXPECT_EQ(r["throughput"]["mfu"].get<double>(), 0.0);
  EXPECT_NE(ReportToText(pc.schedule, r).find("MFU - (no GPU peak of the device that ran)"), std::string::npos);
}

TEST(GroupComputeByLayerTest, OneRecordPerLayerAndPhaseWithSummedTime) {
  // Layer 1's forward split over three tasks, only the last with real time (as the executor
  // records it); a read and a layer-less compute pass through unchanged.
  auto c = [](const std::string& task, int32_t layer, double start, double end, double flops) {
    TraceRecord r = Rec(0, task, Op::kCompute, "gpu0.compute", start, end, Phase::kForward, 100, "real");
    r.layer = layer;
    r.flops = flops;
    return r;
  };
  const std::vector<TraceRecord> in = {c("fwd.a", 1, 0.0, 0.001, 10), Rec(0, "read.x", Op::kRead, "nvme0.r", 0.0, 0.5),
                                       c("fwd.b", 1, 0.001, 0.002, 20), c("fwd.c", 1, 0.002, 0.302, 30),
                                       c("fwd.free", -1, 0.4, 0.5, 0)};
  std::vector<TraceRecord> with_counts = in;
  with_counts[3].tasks = 2;  // a record that already stands for two tasks counts as two
  const std::vector<TraceRecord> out = GroupComputeByLayer(with_counts);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].task, "compute.forward.layer1");
  EXPECT_DOUBLE_EQ(out[0].start_s, 0.0);
  EXPECT_NEAR(out[0].duration_s(), 0.302, 1e-12);
  EXPECT_EQ(out[0].flops, 60);
  EXPECT_EQ(out[0].bytes, 300);
  EXPECT_EQ(out[1].task, "read.x");
  EXPECT_EQ(out[2].task, "fwd.free");
  EXPECT_EQ(out[0].tasks, 4);  // 1 + 1 + 2
  EXPECT_EQ(out[1].tasks, 0);  // passed through as they were
  EXPECT_EQ(out[2].tasks, 0);
}

}  // namespace
}  // namespace tierflow::traces
