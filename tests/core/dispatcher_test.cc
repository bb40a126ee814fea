#include "tierflow/core/dispatcher.h"

#include <gtest/gtest.h>

#include "test_schedules.h"

namespace tierflow {
namespace {

using testing::Builder;
using testing::RunTimed;

TEST(Dispatcher, ChainRunsInDependencyOrder) {
  Builder b;
  b.Resource("r", 4).Task("a", "r").Task("b", "r", {"a"}).Task("c", "r", {"b"});
  auto r = RunTimed(b.s, 1, {{"a", 1}, {"b", 2}, {"c", 3}});
  ASSERT_TRUE(r.status.ok());
  EXPECT_DOUBLE_EQ(r.at("b").start, 1);
  EXPECT_DOUBLE_EQ(r.at("c").start, 3);
  EXPECT_DOUBLE_EQ(r.makespan, 6);
}

TEST(Dispatcher, ConcurrencyLimitSerialisesAResource) {
  for (int concurrency : {1, 2, 3}) {
    Builder b;
    b.Resource("r", concurrency).Task("a", "r").Task("b", "r").Task("c", "r");
    auto r = RunTimed(b.s, 1, {{"a", 1}, {"b", 1}, {"c", 1}});
    // ceil(3 / concurrency) waves of one second.
    EXPECT_DOUBLE_EQ(r.makespan, (3 + concurrency - 1) / concurrency) << concurrency;
  }
}

TEST(Dispatcher, LowerPriorityValueStartsFirstThenScheduleOrder) {
  Builder b;
  b.Resource("r", 1).Task("gate", "r");
  b.Task("x", "r", {"gate"}, {}, {}, 5).Task("y", "r", {"gate"}, {}, {}, -1).Task("z", "r", {"gate"}, {}, {}, 5);
  auto r = RunTimed(b.s, 1, {{"gate", 1}, {"x", 1}, {"y", 1}, {"z", 1}});
  EXPECT_DOUBLE_EQ(r.at("y").start, 1);
  EXPECT_DOUBLE_EQ(r.at("x").start, 2);
  EXPECT_DOUBLE_EQ(r.at("z").start, 3);
}

TEST(Dispatcher, EarlierIterationGoesFirstWhateverThePriority) {
  // All six instances (two iterations of hold, b, a) are queued on r from the start. Priority
  // orders one iteration's tasks; it must not let iteration 1's hold and b overtake iteration
  // 0's low-priority a.
  Builder b;
  b.Resource("r", 1).Task("hold", "r", {}, {}, {}, 0).Task("a", "r", {}, {}, {}, 9).Task("b", "r", {}, {}, {}, 0);
  b.s.iteration_window = 2;
  auto r = RunTimed(b.s, 2, {{"hold", 1}, {"a", 1}, {"b", 1}});
  ASSERT_TRUE(r.status.ok());
  EXPECT_DOUBLE_EQ(r.at("hold", 0).start, 0);
  EXPECT_DOUBLE_EQ(r.at("b", 0).start, 1);  // same priority as hold: schedule order
  EXPECT_DOUBLE_EQ(r.at("a", 0).start, 2);
  EXPECT_DOUBLE_EQ(r.at("hold", 1).start, 3);
  EXPECT_DOUBLE_EQ(r.at("a", 1).start, 5);
}

TEST(Dispatcher, CarriedDepWaitsForTheEarlierIteration) {
  // write (slow, on its own resource) of iteration t must finish before read of t+1.
  Builder b;
  b.Resource("io", 1).Resource("disk_w", 1).Task("read", "io").Task("write", "disk_w", {"read"});
  b.Carried("read", "write", 1);
  auto r = RunTimed(b.s, 3, {{"read", 1}, {"write", 5}});
  ASSERT_TRUE(r.status.ok());
  EXPECT_DOUBLE_EQ(r.at("read", 1).start, r.at("write", 0).end);
  EXPECT_DOUBLE_EQ(r.at("read", 2).start, r.at("write", 1).end);
  EXPECT_DOUBLE_EQ(r.makespan, 3 * 6);
}

TEST(Dispatcher, WithoutCarriedDepsIterationsOverlapUpToTheWindow) {
  Builder b;
  b.Resource("r", 8).Task("a", "r");
  b.s.iteration_window = 2;
  auto r = RunTimed(b.s, 4, {{"a", 1}});
  EXPECT_DOUBLE_EQ(r.at("a", 1).start, 0);  // two at once
  EXPECT_DOUBLE_EQ(r.at("a", 2).start, 1);  // the third waits for the first to retire
  EXPECT_DOUBLE_EQ(r.makespan, 2);
  b.s.iteration_window = 1;
  r = RunTimed(b.s, 4, {{"a", 1}});
  EXPECT_DOUBLE_EQ(r.makespan, 4);
}

TEST(Dispatcher, ReadComputePipelineTakesTheSlowerStagePerStepPlusFillAndDrain) {
  // k reads (2 s each) feed k computes (3 s each) through 2 buffers: the classic double buffer.
  const int k = 6;
  const double read_s = 2, compute_s = 3;
  Builder b;
  b.Resource("disk", 1).Resource("gpu", 1).Pool("pinned", 2 * 100);
  std::map<std::string, double> dur;
  for (int i = 0; i < k; ++i) {
    std::string n = std::to_string(i);
    b.Buffer("buf" + n, "pinned", 100);
    b.Task("read" + n, "disk", {}, {"buf" + n});
    b.s.mutable_tasks().back().uses.push_back(b.s.FindBuffer("buf" + n));
    std::vector<std::string> deps = {"read" + n};
    if (i > 0) deps.push_back("compute" + std::to_string(i - 1));
    b.Task("compute" + n, "gpu", deps, {}, {"buf" + n});
    dur["read" + n] = read_s;
    dur["compute" + n] = compute_s;
  }
  ASSERT_TRUE(b.s.Validate().ok()) << b.s.Validate().ToString();
  auto r = RunTimed(b.s, 1, dur);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  // fill (first read) + k steps of the slower stage.
  EXPECT_DOUBLE_EQ(r.makespan, read_s + k * std::max(read_s, compute_s));
  EXPECT_EQ(r.peaks[0], 200);
  // Pool gating: read2 must wait until compute0 frees buf0.
  EXPECT_DOUBLE_EQ(r.at("read2").start, r.at("compute0").end);
}

TEST(Dispatcher, PoolGatingDelaysATaskUntilAFree) {
  Builder b;
  b.Resource("r", 2).Pool("p", 100).Buffer("x", "p", 60).Buffer("y", "p", 60);
  b.Task("ax", "r", {}, {"x"}).Task("fx", "", {"ax"}, {}, {"x"});
  b.Task("ay", "r", {}, {"y"}).Task("fy", "", {"ay"}, {}, {"y"});
  auto r = RunTimed(b.s, 1, {{"ax", 4}, {"ay", 1}});
  ASSERT_TRUE(r.status.ok());
  EXPECT_DOUBLE_EQ(r.at("ay").start, 4);  // the second allocation waits for the first free
  EXPECT_EQ(r.peaks[0], 60);
}

TEST(Dispatcher, APoolTooSmallYieldsADeadlockReportNamingThePoolAndTheShortfall) {
  Builder b;
  b.Resource("r", 2).Pool("host.pinned", 100).Buffer("x", "host.pinned", 60).Buffer("y", "host.pinned", 60);
  // Each task holds one buffer, but y is allocated while x is still held: x is freed only after
  // y's task (no task holds both, so Validate cannot tell; the dispatcher finds it).
  b.Task("ax", "r", {}, {"x"}).Task("ay", "r", {"ax"}, {"y"});
  b.Task("fx", "", {"ay"}, {}, {"x"}).Task("fy", "", {"fx"}, {}, {"y"});
  ASSERT_TRUE(b.s.Validate().ok());
  auto r = RunTimed(b.s, 1, {{"ax", 1}, {"ay", 1}});
  ASSERT_FALSE(r.status.ok());
  EXPECT_EQ(r.status.code(), StatusCode::kDeadlock);
  EXPECT_NE(r.status.message().find("task 'ay' (iteration 0) waits for pool 'host.pinned': needs 60 bytes, 40 of 100 free, short by 20 bytes"),
            std::string::npos)
      << r.status.message();
}

TEST(Dispatcher, PersistentBuffersCountFromTheStart) {
  Builder b;
  b.Resource("r", 1).Pool("p", 100).Buffer("cache", "p", 70, /*persistent=*/true).Buffer("x", "p", 20);
  b.Task("ax", "r", {}, {"x"}).Task("fx", "", {"ax"}, {}, {"x"});
  auto r = RunTimed(b.s, 3, {{"ax", 1}});
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.peaks[0], 90);
}

TEST(Dispatcher, ManyIterationsCompleteWithBoundedState) {
  Builder b;
  b.Resource("a", 1).Resource("c", 1).Task("x", "a").Task("y", "c", {"x"});
  b.Carried("x", "y", 1);
  auto r = RunTimed(b.s, 5000, {{"x", 1}, {"y", 1}});
  ASSERT_TRUE(r.status.ok());
  EXPECT_DOUBLE_EQ(r.makespan, 10000);
}

}  // namespace
}  // namespace tierflow
