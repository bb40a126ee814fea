// zero-infinity's defining behaviours, pinned on a small model: the coupling of all-gathers to
// unrelated NVMe reads, DeepSpeed's slot sizing, the serial or pipelined optimizer swapper, and
// the blocking step.
#include <gtest/gtest.h>

#include "../core/test_schedules.h"
#include "tierflow/policies/policy.h"

namespace tierflow::policies {
namespace {

const char* kSmall = R"(
name: small
model: {preset: tiny, layers: 2, hidden: 512, ffn: 1024, heads: 4, kv_heads: 4, vocab: 1024}
hardware: {preset: a100x4-1nvme}
training: {micro_batch_size: 1, sequence_length: 128, data_parallel: 2}
policy: {name: zero-infinity, buffer_size: 1e6, sub_group_size: 2e6, param_persistence_threshold: 1000}
)";

Schedule PlanOrDie(const std::vector<std::string>& sets = {}) {
  auto scenario = LoadScenarioText(kSmall, sets, "small.yaml");
  EXPECT_TRUE(scenario.ok()) << scenario.status().ToString();
  auto s = Plan(*scenario);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

bool DependsOn(const Schedule& s, const std::string& task, const std::string& dep) {
  int32_t t = s.FindTask(task), d = s.FindTask(dep);
  EXPECT_NE(t, kNoIndex) << task;
  EXPECT_NE(d, kNoIndex) << dep;
  for (int32_t x : s.tasks()[t].deps) {
    if (x == d) return true;
  }
  return false;
}

// The GPU's persistent buffer in closed form (hidden h 512, ffn f 1024, 4 heads a, vocab V 1024,
// 2 layers L, 128 tokens T of sequence s 128, bf16): the five norms (below the persistence
// threshold), and per token each layer's input (2h), one layer's full activations while it is
// recomputed (2 x (4h + 4h + 3f + a s): norms in and out, q, k, v, the attention output, the MLP
// and the softmax) and the head's logits (2V); without checkpointing, every layer's full
// activations instead.
TEST(ZeroInfinity, TheGpuBufferHoldsTheActivationsAtTheTrainingSequence) {
  const int64_t h = 512, f = 1024, a = 4, V = 1024, L = 2, T = 128, s = 128;
  const int64_t norms = 5 * h * 2, full = 2 * (8 * h + 3 * f + a * s);
  for (const bool ckpt : {true, false}) {
    const Schedule sched = PlanOrDie({std::string("training.activation_checkpointing=") + (ckpt ? "true" : "false")});
    const int32_t b = sched.FindBuffer("gpu.resident.r0");
    ASSERT_NE(b, kNoIndex);
    const int64_t want = norms + T * ((ckpt ? L * 2 * h + full : L * full) + 2 * V);
    EXPECT_EQ(sched.buffers()[b].size_bytes, want) << (ckpt ? "with" : "without") << " checkpointing";
  }
}

TEST(ZeroInfinity, AllGatherWaitsForReadsOfOtherParameters) {
  Schedule s = PlanOrDie();
  const std::string q = "model.layers.0.self_attn.q_proj.weight";
  const std::string k = "model.layers.0.self_attn.k_proj.weight";
  EXPECT_TRUE(DependsOn(s, "allgather." + q + ".f0", "h2d." + q + ".f0.r0"));
  EXPECT_TRUE(DependsOn(s, "h2d." + q + ".f0.r0", "read." + q + ".f0.r0"));
  // The defining weakness: q's all-gather also waits for k's read (all reads on the handle).
  EXPECT_TRUE(DependsOn(s, "allgather." + q + ".f0", "read." + k + ".f0.r0"));
  EXPECT_TRUE(DependsOn(s, "allgather." + q + ".f0", "read." + k + ".f0.r1"));

  // In time: a slow read of k delays q's all-gather although q's own data is there.
  std::map<std::string, double> durations;
  for (const TaskSpec& t : s.tasks()) durations[t.id] = t.op == Op::kRead ? 1.0 : 0.01;
  durations["read." + k + ".f0.r1"] = 50.0;
  auto r = testing::RunTimed(s, 1, durations);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_GE(r.at("allgather." + q + ".f0").start, r.at("read." + k + ".f0.r1").end);
}

TEST(ZeroInfinity, SlotsAreSizedByBufferSizeAndBoundTheReadAhead) {
  Schedule s = PlanOrDie({"policy.buffer_count=3"});
  const PoolSpec& pool = s.pools()[s.FindPool("host.pinned.param.r0")];
  EXPECT_EQ(pool.capacity_bytes, 3 * 1000000 * 2);
  // Every slot costs buffer_size elements whatever the partition (DeepSpeed's slot pool).
  const BufferSpec& slot = s.buffers()[s.FindBuffer("slot.model.layers.0.self_attn.q_proj.weight.f0.r0")];
  EXPECT_EQ(slot.size_bytes, 1000000 * 2);
  std::map<std::string, double> durations;
  for (const TaskSpec& t : s.tasks()) durations[t.id] = 1.0;
  auto r = testing::RunTimed(s, 1, durations);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.peaks[s.FindPool("host.pinned.param.r0")], 3 * 1000000 * 2);
}

TEST(ZeroInfinity, PartitionLargerThanBufferSizeIsRejectedLikeDeepSpeed) {
  auto scenario = LoadScenarioText(kSmall, {"policy.buffer_size=1000"}, "small.yaml");
  ASSERT_TRUE(scenario.ok());
  auto s = Plan(*scenario);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("policy.buffer_size: the partition of 'model.embed_tokens.weight'"),
            std::string::npos)
      << s.status().message();
  EXPECT_NE(s.status().message().find("raise policy.buffer_size"), std::string::npos);
}

TEST(ZeroInfinity, OptimizerSwapperIsSerialByDefaultAndPipelinedOnRequest) {
  Schedule serial = PlanOrDie();
  ASSERT_NE(serial.FindTask("read.states.sg1.r0"), kNoIndex);
  EXPECT_TRUE(DependsOn(serial, "read.states.sg1.r0", "write.states.sg0.r0"));
  EXPECT_TRUE(DependsOn(serial, "read.grad.sg0.r0", "read.states.sg0.r0"));

  Schedule piped = PlanOrDie({"policy.pipeline_read=true", "policy.pipeline_write=true"});
  EXPECT_FALSE(DependsOn(piped, "read.states.sg1.r0", "write.states.sg0.r0"));
  EXPECT_TRUE(DependsOn(piped, "read.states.sg1.r0", "read.grad.sg0.r0"));

  // Same durations: the pipelined swapper finishes the step sooner.
  auto timed = [](const Schedule& s) {
    std::map<std::string, double> d;
    for (const TaskSpec& t : s.tasks()) d[t.id] = (t.op == Op::kRead || t.op == Op::kWrite || t.op == Op::kOptimizer) ? 1.0 : 0.01;
    return testing::RunTimed(s, 1, d);
  };
  auto a = timed(serial), b = timed(piped);
  ASSERT_TRUE(a.status.ok() && b.status.ok()) << a.status.ToString() << b.status.ToString();
  EXPECT_LT(b.makespan, a.makespan);
}

TEST(ZeroInfinity, StepIsBlockingAndTheNextIterationWaitsForIt) {
  Schedule s = PlanOrDie();
  const int32_t step_end = s.FindTask("step.end");
  ASSERT_NE(step_end, kNoIndex);
  const TaskSpec& first_read = s.tasks()[s.FindTask("read.model.embed_tokens.weight.f0.r0")];
  ASSERT_EQ(first_read.carried.size(), 1u);
  EXPECT_EQ(first_read.carried[0].task, step_end);
  std::map<std::string, double> d;
  for (const TaskSpec& t : s.tasks()) d[t.id] = 1.0;
  auto r = testing::RunTimed(s, 2, d);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_GE(r.at("read.model.embed_tokens.weight.f0.r0", 1).start, r.at("step.end", 0).end);
}

TEST(ZeroInfinity, UnknownKnobIsAnError) {
  auto scenario = LoadScenarioText(kSmall, {"policy.bufer_count=3"}, "small.yaml");
  ASSERT_TRUE(scenario.ok());
  auto s = Plan(*scenario);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("policy.bufer_count: unknown knob for policy 'zero-infinity'"), std::string::npos)
      << s.status().message();
}

TEST(ZeroInfinity, PlannedScheduleRoundTripsThroughItsFile) {
  Schedule s = PlanOrDie({"policy.pipeline_read=true"});
  const std::string text = ScheduleToJson(s);
  auto back = ScheduleFromJson(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == s);
  EXPECT_EQ(ScheduleToJson(*back), text);
}

}  // namespace
}  // namespace tierflow::policies
