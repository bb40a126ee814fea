// zero-infinity's defining behaviours, pinned on a small model: the coupling of all-gathers to
// unrelated NVMe reads, DeepSpeed's slot sizing, the serial or pipelined optimizer swapper, the
// blocking step, DeepSpeed's sub-groups and what it keeps off the disk. The model's partitions
// are 1 MiB of bf16 and more (DeepSpeed's swap minimum) and max_in_cpu is 0, so that its
// parameters are on NVMe, and max_reuse_distance is 0, so that DeepSpeed keeps none of them
// gathered across the forward-backward turn (at its default 1e9 it would keep all 16, more than
// its 5 swap buffers hold: a refusal, tested below) and both passes fetch every one.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "../core/test_schedules.h"
#include "tierflow/policies/policy.h"

namespace tierflow::policies {
namespace {

const char* kSmall = R"(
name: small
model: {preset: tiny, layers: 2, hidden: 1024, ffn: 2048, heads: 8, kv_heads: 8, vocab: 1024}
hardware: {preset: a100x4-1nvme}
training: {micro_batch_size: 1, sequence_length: 128, data_parallel: 2}
policy: {name: zero-infinity, buffer_size: 2e6, sub_group_size: 2e6, param_persistence_threshold: 2000, max_in_cpu: 0,
         max_reuse_distance: 0}
)";

Schedule PlanOrDie(const std::vector<std::string>& sets = {}) {
  auto scenario = LoadScenarioText(kSmall, sets, "small.yaml");
  EXPECT_TRUE(scenario.ok()) << scenario.status().ToString();
  auto s = Plan(*scenario);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

// The scenario with `sets` must be refused: its error message.
std::string RefusalOf(const std::vector<std::string>& sets) {
  auto scenario = LoadScenarioText(kSmall, sets, "small.yaml");
  EXPECT_TRUE(scenario.ok()) << scenario.status().ToString();
  if (!scenario.ok()) return "";
  auto s = Plan(*scenario);
  EXPECT_FALSE(s.ok()) << "planned, where a refusal was expected";
  return s.ok() ? "" : s.status().message();
}

// Every task of `s` taking one second, over `iterations`.
testing::RunResult RunUnitDurations(const Schedule& s, int64_t iterations = 1) {
  std::map<std::string, double> d;
  for (const TaskSpec& t : s.tasks()) d[t.id] = 1.0;
  return testing::RunTimed(s, iterations, d);
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

// The GPU's persistent buffer in closed form (hidden h 1024, ffn f 2048, 8 heads a, vocab V 1024,
// 2 layers L, 128 tokens T of sequence s 128, bf16): the five norms (below the persistence
// threshold), and per token each layer's input (2h), one layer's full activations while it is
// recomputed (2 x (4h + 4h + 3f + a s): norms in and out, q, k, v, the attention output, the MLP
// and the softmax) and the head's logits (2V); without checkpointing, every layer's full
// activations instead.
TEST(ZeroInfinity, TheGpuBufferHoldsTheActivationsAtTheTrainingSequence) {
  const int64_t h = 1024, f = 2048, a = 8, V = 1024, L = 2, T = 128, s = 128;
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
  EXPECT_EQ(pool.capacity_bytes, 3 * 2000000 * 2);
  // Every slot costs buffer_size elements whatever the partition (DeepSpeed's slot pool).
  const BufferSpec& slot = s.buffers()[s.FindBuffer("slot.model.layers.0.self_attn.q_proj.weight.f0.r0")];
  EXPECT_EQ(slot.size_bytes, 2000000 * 2);
  auto r = RunUnitDurations(s);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.peaks[s.FindPool("host.pinned.param.r0")], 3 * 2000000 * 2);
}

TEST(ZeroInfinity, PartitionLargerThanBufferSizeIsRejectedLikeDeepSpeed) {
  const std::string refusal = RefusalOf({"policy.buffer_size=1000"});
  EXPECT_NE(refusal.find("policy.buffer_size: the partition of 'model.embed_tokens.weight'"), std::string::npos)
      << refusal;
  EXPECT_NE(refusal.find("raise policy.buffer_size"), std::string::npos);
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
  auto r = RunUnitDurations(s, 2);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_GE(r.at("read.model.embed_tokens.weight.f0.r0", 1).start, r.at("step.end", 0).end);
}

// Gradients are reduced in buckets of reduce_bucket_size elements (stage3.py
// reduce_independent_p_g_buckets_and_remove_grads): at DeepSpeed's 5e8 the model's 23 M
// elements make one bucket, reduced, copied and written only after the whole backward (the
// epilogue); with buckets smaller than a layer, the first layer's gradients leave while the next
// layer's backward runs. The reduce-scatter reads the whole bucket, so a bucket larger than the
// GPU pool is refused when planned, naming the task and the pool.
TEST(ZeroInfinity, GradientsAreReducedInDeepSpeedsBuckets) {
  const auto last_backward = [](const Schedule& s, const testing::RunResult& r) {
    double end = 0;
    for (const TaskSpec& t : s.tasks()) {
      if (t.op == Op::kCompute && t.phase == Phase::kBackward) end = std::max(end, r.at(t.id).end);
    }
    return end;
  };
  const std::string first = "reducescatter.model.layers.1.mlp.down_proj.weight.b0";
  const Schedule whole = PlanOrDie();
  auto r = RunUnitDurations(whole);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  const double backward_end = last_backward(whole, r);
  for (const TaskSpec& t : whole.tasks()) {
    if (t.op == Op::kReduceScatter) {
      EXPECT_GE(r.at(t.id).start, backward_end) << t.id;
    }
  }
  const Schedule split = PlanOrDie({"policy.reduce_bucket_size=1e6"});
  auto q = RunUnitDurations(split);
  ASSERT_TRUE(q.status.ok()) << q.status.ToString();
  EXPECT_LT(q.at(first).end, last_backward(split, q));
  EXPECT_LT(q.at("write.grad.model.layers.1.mlp.down_proj.weight.b0.r0").end, last_backward(split, q));

  const std::string refused = RefusalOf({"hardware.node.gpu.hbm=80MiB"});
  EXPECT_NE(refused.find("task 'reducescatter."), std::string::npos) << refused;
  EXPECT_NE(refused.find("'gpu0.hbm'"), std::string::npos) << refused;
  PlanOrDie({"hardware.node.gpu.hbm=80MiB", "policy.reduce_bucket_size=1e6"});  // buckets of 1e6 fit
  const std::string empty = RefusalOf({"policy.reduce_bucket_size=0"});
  EXPECT_NE(empty.find("policy.reduce_bucket_size: '0' is below 1 (an integer from 1 to 1125899906842624)"), std::string::npos) << empty;
}

int64_t OpBytes(const Schedule& s, Op op, const std::string& prefix = "") {
  int64_t sum = 0;
  for (const TaskSpec& t : s.tasks()) {
    if (t.op == op && t.id.rfind(prefix, 0) == 0) sum += t.bytes;
  }
  return sum;
}

// _create_fp16_sub_groups: whole parameters in order, a group closed once it holds at least
// sub_group_size elements. Per rank: the embedding, the layer's input norm (512, GPU-resident
// but in the flat partition all the same), q, k and v (524,288 each) reach 2e6 together; then o,
// the second norm, gate and up (2 x 1,048,576) close the next.
TEST(ZeroInfinity, SubGroupsAreWholeParametersClosedOnceTheyReachTheSize) {
  const Schedule s = PlanOrDie();
  const int32_t sg0 = s.FindTask("adam.sg0.r0"), sg1 = s.FindTask("adam.sg1.r0");
  ASSERT_NE(sg0, kNoIndex);
  ASSERT_NE(sg1, kNoIndex);
  EXPECT_EQ(s.tasks()[sg0].bytes, (4 * 524288 + 512) * 4);
  EXPECT_EQ(s.tasks()[sg1].bytes, (524288 + 512 + 2 * 1048576) * 4);
  // sub_group_size above the partition: one group of all of it.
  const Schedule one = PlanOrDie({"policy.sub_group_size=1e9"});
  EXPECT_NE(one.FindTask("adam.sg0.r0"), kNoIndex);
  EXPECT_EQ(one.FindTask("adam.sg1.r0"), kNoIndex);
}

// With DeepSpeed's default max_in_cpu (1e9 elements) a partition this small keeps every
// parameter in a pinned flat host buffer: nothing of them is read or written, the h2d copies
// from that buffer (after the previous step) and the update converts into it in place.
TEST(ZeroInfinity, MaxInCpuKeepsTheParametersInHostMemory) {
  // The control: with max_in_cpu 0 (this file's scenario) the same task names move bytes.
  const Schedule disk = PlanOrDie();
  ASSERT_GT(OpBytes(disk, Op::kRead, "read.model."), 0);
  ASSERT_GT(OpBytes(disk, Op::kWrite, "write.p16"), 0);
  const Schedule s = PlanOrDie({"policy.max_in_cpu=1e9"});
  EXPECT_EQ(OpBytes(s, Op::kRead, "read.model."), 0);
  EXPECT_EQ(OpBytes(s, Op::kWrite, "write.p16"), 0);
  const int32_t host = s.FindBuffer("p16.host.r0");
  ASSERT_NE(host, kNoIndex);
  const TaskSpec& h2d = s.tasks()[s.FindTask("h2d.model.embed_tokens.weight.f0.r0")];
  EXPECT_EQ(h2d.uses, std::vector<int32_t>{host});
  ASSERT_EQ(h2d.carried.size(), 1u);
  EXPECT_EQ(h2d.carried[0].task, s.FindTask("step.end"));
  const TaskSpec& conv = s.tasks()[s.FindTask("convert.p16.sg0.r0")];
  EXPECT_TRUE(conv.allocs.empty());
  EXPECT_NE(std::find(conv.uses.begin(), conv.uses.end(), host), conv.uses.end());
  // The states and gradients (1 MiB and more each) still go to the disk.
  EXPECT_GT(OpBytes(s, Op::kRead, "read.states"), 0);
  EXPECT_GT(OpBytes(s, Op::kWrite, "write.grad"), 0);
  // max_in_cpu covering only the first sub-group (2,097,152 elements) keeps its parameters
  // in host memory and sends the rest to the disk.
  const Schedule part = PlanOrDie({"policy.max_in_cpu=3000000"});
  EXPECT_EQ(part.FindTask("read.model.embed_tokens.weight.f0.r0"), kNoIndex);
  EXPECT_NE(part.FindTask("read.model.layers.0.self_attn.o_proj.weight.f0.r0"), kNoIndex);
}

// Below the swap minimum, max(1 MiB, aio block size), DeepSpeed swaps nothing (at it, it does:
// this model's 1 MiB partitions go to the disk at the default block size). With 8 MiB blocks,
// the sub-groups' states (8 MiB and more) are still swapped, but every gradient (2 or 4 MiB)
// and parameter partition stays in host memory; with one parameter a sub-group, no sub-group's
// states reach 8 MiB either, and nothing touches the disk.
TEST(ZeroInfinity, TheSwapMinimumKeepsSmallTensorsOffTheDisk) {
  const Schedule disk = PlanOrDie();  // the control, at 1 MiB blocks
  ASSERT_GT(OpBytes(disk, Op::kRead, "read.model."), 0);
  ASSERT_GT(OpBytes(disk, Op::kWrite, "write.grad"), 0);
  ASSERT_GT(OpBytes(disk, Op::kRead, "read.grad"), 0);
  const Schedule s = PlanOrDie({"policy.block_size=8 MiB"});
  EXPECT_EQ(OpBytes(s, Op::kRead, "read.model."), 0);
  EXPECT_EQ(OpBytes(s, Op::kWrite, "write.grad"), 0);
  EXPECT_EQ(OpBytes(s, Op::kRead, "read.grad"), 0);
  EXPECT_NE(s.FindTask("read.states.sg0.r0"), kNoIndex);  // 8,390,656 bytes of each state
  EXPECT_GT(OpBytes(s, Op::kRead, "read.states"), 0);
  const int32_t grads = s.FindBuffer("grad.host.r0");
  ASSERT_NE(grads, kNoIndex);
  const TaskSpec& adam = s.tasks()[s.FindTask("adam.sg0.r0")];
  EXPECT_NE(std::find(adam.uses.begin(), adam.uses.end(), grads), adam.uses.end());

  const Schedule none = PlanOrDie({"policy.block_size=8 MiB", "policy.sub_group_size=1"});
  EXPECT_EQ(OpBytes(none, Op::kRead), 0);
  EXPECT_EQ(OpBytes(none, Op::kWrite), 0);
  EXPECT_NE(none.FindTask("adam.sg0.r0"), kNoIndex);
}

// DeepSpeed's stage 3 allocates grad_partitions_flat_buffer (the rank's whole gradient
// partition, bf16) whenever the optimizer is offloaded, and partition_grads copies every reduced
// partition into it before widening it to fp32 for the swap-out: at one micro-step too, each
// d2h moves 2 bytes per element into the rank's persistent buffer, and each gradient write
// waits for the widening into the staging buffer it writes from.
// DeepSpeed's emulated GPU (its CPU accelerator, tierflow's CPU executor) keeps its device
// memory in host memory.
const std::string kEmulatedGpu = "hardware.node.gpu.shares_host_cores=true";

// Every gradient passes through DeepSpeed's bf16 partition buffer, then is widened to fp32 and
// written. On a GPU the swap-out widens it straight into the pinned staging; on an emulated GPU
// DeepSpeed's widened tensor is host memory, widened into a buffer of its own in the loop and
// copied into the staging by the swap-out.
TEST(ZeroInfinity, GradientsPassThroughDeepSpeedsBf16PartitionBuffer) {
  for (const bool emulated : {false, true}) {
    SCOPED_TRACE(emulated ? "emulated GPU" : "GPU");
    const Schedule s = emulated ? PlanOrDie({kEmulatedGpu}) : PlanOrDie();
    ASSERT_EQ(s.MicroSteps(), 1);
    EXPECT_EQ(s.FindPool("host.grad32.r0") != kNoIndex, emulated);
    for (int r = 0; r < 2; ++r) {
      const std::string R = ".r" + std::to_string(r);
      const int32_t buffer = s.FindBuffer("grad.accum" + R);
      ASSERT_NE(buffer, kNoIndex);
      const BufferSpec& b = s.buffers()[buffer];
      EXPECT_TRUE(b.persistent);
      EXPECT_EQ(s.pools()[b.pool].name, "host.pinned.grad_accum" + R);
      EXPECT_EQ(s.pools()[b.pool].capacity_bytes, b.size_bytes);
      int64_t copied = 0, writes = 0;
      for (const TaskSpec& t : s.tasks()) {
        if (t.rank != r) continue;
        if (t.op == Op::kD2H && t.id.rfind("d2h.grad.", 0) == 0) {
          copied += t.bytes;  // bf16: 2 bytes per element of the unit's partition
          EXPECT_NE(std::find(t.uses.begin(), t.uses.end(), buffer), t.uses.end()) << t.id;
        }
        if (t.op != Op::kWrite || t.id.rfind("write.grad.", 0) != 0) continue;
        ++writes;
        const std::string unit = t.id.substr(std::string("write.grad.").size());
        const std::string convert = "convert.grad." + unit, copy = "copy.grad." + unit;
        const TaskSpec& widen = s.tasks()[s.FindTask(convert)];
        EXPECT_EQ(widen.kernel, Kernel::kBf16ToFp32);
        EXPECT_EQ(widen.bytes, t.bytes / 4 * 6) << "reads 2 and writes 4 bytes per element";
        ASSERT_EQ(widen.allocs.size(), 1u);
        if (!emulated) {
          EXPECT_TRUE(DependsOn(s, t.id, convert)) << t.id;
          EXPECT_EQ(widen.allocs, t.frees) << "into the pinned staging the write reads";
          EXPECT_EQ(s.FindTask(copy), kNoIndex);
          continue;
        }
        // Widened into a buffer of its own (`.to(fp32)`), copied into the pinned staging, written.
        EXPECT_TRUE(DependsOn(s, t.id, copy)) << t.id;
        EXPECT_TRUE(DependsOn(s, copy, convert)) << t.id;
        EXPECT_EQ(s.pools()[s.buffers()[widen.allocs[0]].pool].name, "host.grad32" + R);
        const TaskSpec& c = s.tasks()[s.FindTask(copy)];
        EXPECT_EQ(c.kernel, Kernel::kCopy);
        EXPECT_EQ(c.bytes, t.bytes * 2) << "reads and writes 4 bytes per element";
        EXPECT_EQ(c.frees, widen.allocs);
        ASSERT_EQ(c.allocs.size(), 1u);
        EXPECT_EQ(c.allocs, t.frees);
        EXPECT_EQ(s.pools()[s.buffers()[c.allocs[0]].pool].name, "host.pinned.opt" + R);
      }
      EXPECT_EQ(copied, b.size_bytes) << "every gradient of the rank passes through it once";
      EXPECT_GT(writes, 0);
    }
  }
}

// DeepSpeed's backward epilogue (partition_grads, then swap_out_gradients) runs in a gradient
// hook, on one thread: the bucket is reduced at once; then each gradient is copied into the
// partition buffer (and, on an emulated GPU, widened to fp32), one after the other; only then is
// each put into the pinned staging and written; the backward (or the next micro-step's forward)
// goes on after that. With every task taking one second, rank 0's epilogue tasks never overlap
// each other, a reduce-scatter, or a compute, and in the one bucket of the whole model every
// gradient is in the partition buffer before the first is staged.
TEST(ZeroInfinity, TheBackwardEpilogueRunsInDeepSpeedsOrder) {
  for (const bool emulated : {false, true}) {
    int64_t whole_held = 0;
    for (const std::string bucket : {"5e8", "1e6", "5e8 over two micro-steps"}) {
      SCOPED_TRACE(std::string(emulated ? "emulated GPU" : "GPU") + ", reduce_bucket_size " + bucket);
      const bool micro_steps = bucket.size() > 3;
      std::vector<std::string> sets = {"policy.reduce_bucket_size=" + bucket.substr(0, 3)};
      if (micro_steps) sets.push_back("training.gradient_accumulation_steps=2");
      if (emulated) sets.push_back(kEmulatedGpu);
      const Schedule s = PlanOrDie(sets);
      auto r = RunUnitDurations(s);
      ASSERT_TRUE(r.status.ok()) << r.status.ToString();
      std::vector<std::pair<double, std::string>> epilogue;  // (start, task) of rank 0
      double last_loop = 0, first_staged = 1e30;
      int64_t held = 0;
      for (const TaskSpec& t : s.tasks()) {
        const bool d2h = t.id.rfind("d2h.grad.", 0) == 0, widen = t.id.rfind("convert.grad.", 0) == 0,
                   copy = t.id.rfind("copy.grad.", 0) == 0;
        if (t.rank != 0 || !(d2h || widen || copy)) continue;
        epilogue.emplace_back(r.at(t.id).start, t.id);
        const bool staged = emulated ? copy : widen;  // what fills the pinned staging
        if (!staged) last_loop = std::max(last_loop, r.at(t.id).end);
        if (staged) first_staged = std::min(first_staged, r.at(t.id).start);
        if (copy) held += t.bytes / 2;
      }
      ASSERT_FALSE(epilogue.empty());
      std::sort(epilogue.begin(), epilogue.end());
      for (size_t i = 1; i < epilogue.size(); ++i) {
        EXPECT_LE(r.at(epilogue[i - 1].second).end, epilogue[i].first) << epilogue[i - 1].second << " and " << epilogue[i].second;
      }
      for (const TaskSpec& t : s.tasks()) {
        if (t.op != Op::kReduceScatter && !(t.op == Op::kCompute && t.rank == 0)) continue;
        for (const auto& [start, id] : epilogue) {
          EXPECT_TRUE(r.at(t.id).end <= start || r.at(id).end <= r.at(t.id).start) << t.id << " overlaps " << id;
        }
      }
      const int32_t pool = s.FindPool("host.grad32.r0");
      if (!emulated) {
        EXPECT_EQ(pool, kNoIndex) << "DeepSpeed's widened gradients are GPU memory";
        if (bucket == "5e8") {
          EXPECT_LE(last_loop, first_staged);
        }
        continue;
      }
      if (micro_steps) continue;
      ASSERT_NE(pool, kNoIndex);
      const int64_t capacity = s.pools()[pool].capacity_bytes;
      if (bucket == "5e8") {
        EXPECT_LE(last_loop, first_staged);
        EXPECT_EQ(capacity, held) << "the one bucket's widened gradients, all at once";
        whole_held = held;
      } else {
        EXPECT_LT(capacity, whole_held) << "the largest bucket's";
        EXPECT_GT(capacity, 0);
      }
    }
  }
}

// stage3_max_live_parameters: with every task taking one second, each unit's gathered buffer is
// admitted to the GPU ahead of its layer only when the gathered buffers still alive then, with
// it, hold at most the limit (2 bytes per element), not counting those gathered for its own
// layer. DeepSpeed fetches the module it computes whatever the count and bounds only its
// prefetch: an admission after the compute before its layer has ended is not bounded. Without
// the limit the read-ahead holds more.
TEST(ZeroInfinity, MaxLiveParametersBoundsTheGatheredParameters) {
  constexpr int64_t kLimit = 3000000;  // three of the small model's MLP-sized units
  const auto worst_excess = [](const Schedule& s) {
    auto r = RunUnitDurations(s);
    EXPECT_TRUE(r.status.ok()) << r.status.ToString();
    struct Held {
      double from = 0, to = 0;
      int64_t bytes = 0;
      const TaskSpec* first_use = nullptr;  // the first compute that reads it: the layer it is gathered for
    };
    std::map<int32_t, Held> held;  // by buffer, rank 0's gathered parameters
    std::vector<const TaskSpec*> computes;  // rank 0's
    for (const TaskSpec& t : s.tasks()) {
      for (int32_t buf : t.allocs) {
        if (s.buffers()[buf].name.rfind("gathered.", 0) == 0 && t.rank <= 0) held[buf] = {r.at(t.id).start, 0, s.buffers()[buf].size_bytes};
      }
      if (t.op == Op::kCompute && t.rank == 0) computes.push_back(&t);
    }
    for (const TaskSpec& t : s.tasks()) {
      for (int32_t buf : t.frees) {
        if (held.count(buf)) held[buf].to = r.at(t.id).end;
      }
      for (int32_t buf : t.uses) {
        auto it = held.find(buf);
        if (t.op == Op::kCompute && it != held.end() && it->second.first_use == nullptr) it->second.first_use = &t;
      }
    }
    const auto same_layer = [](const TaskSpec* a, const TaskSpec* b) {
      return a->layer == b->layer && a->phase == b->phase && a->micro_step == b->micro_step;
    };
    // The end of the compute before the layer's (the previous layer's last).
    const auto layer_before = [&](const TaskSpec* first_use) {
      double end = 0;
      for (const TaskSpec* c : computes) {
        if (!same_layer(c, first_use) && r.at(c->id).start < r.at(first_use->id).start) end = std::max(end, r.at(c->id).end);
      }
      return end;
    };
    int64_t excess = std::numeric_limits<int64_t>::min();
    for (const auto& [buf, h] : held) {
      if (h.from >= layer_before(h.first_use)) continue;  // fetched for the layer it computes, whatever the count
      int64_t alive = 0, own = 0;
      for (const auto& [other, g] : held) {
        if (g.from > h.from || (g.from == h.from && other > buf) || g.to <= h.from) continue;  // admitted later, or freed
        alive += g.bytes;
        if (same_layer(g.first_use, h.first_use)) own += g.bytes;
      }
      excess = std::max(excess, alive - std::max(kLimit * 2, own));
    }
    return excess;
  };
  EXPECT_LE(worst_excess(PlanOrDie({"policy.max_live_parameters=3e6"})), 0);
  // Units kept across the turn (the head and the last down projection, 3e6 elements together)
  // stay live until their backward frees them, after units gathered later were freed.
  EXPECT_LE(worst_excess(PlanOrDie({"policy.max_live_parameters=3e6", "training.activation_checkpointing=false",
                                    "policy.max_reuse_distance=2099201"})), 0);
  EXPECT_GT(worst_excess(PlanOrDie()), 0) << "DeepSpeed's default 1e9 does not bind the small model";
  const std::string refused = RefusalOf({"policy.max_live_parameters=0"});
  EXPECT_NE(refused.find("policy.max_live_parameters: '0' is below 1 (an integer from 1 to 1125899906842624)"), std::string::npos) << refused;
}

// The units the forward keeps gathered for the backward: gathered in the forward of micro-step
// 0 and not again in its backward.
std::set<std::string> KeptAcrossTheTurn(const Schedule& s) {
  std::set<std::string> forward, backward;
  for (const TaskSpec& t : s.tasks()) {
    if (t.op != Op::kAllGather || t.id.rfind("allgather.", 0) != 0) continue;
    const std::string unit = t.id.substr(10, t.id.size() - 13);  // allgather.<unit>.f0
    if (t.id.size() > 3 && t.id.compare(t.id.size() - 3, 3, ".f0") == 0) forward.insert(unit);
    if (t.id.size() > 3 && t.id.compare(t.id.size() - 3, 3, ".b0") == 0) backward.insert(unit);
  }
  std::set<std::string> kept;
  for (const std::string& u : forward) {
    if (backward.count(u) == 0) kept.insert(u);
  }
  return kept;
}

// stage3_max_reuse_distance (PartitionedParameterCoordinator.__params_to_release): after its
// forward a parameter stays gathered when it is used again before the distance's elements of
// the trace are traversed; the backward does not fetch it again, and its backward compute frees
// the forward's gathered buffer. The small model's units, bf16 full elements: the embedding, q,
// k, v, o and the head 1048576 each, gate, up and down 2097152, the five norms 1024 (on the GPU,
// but counted as DeepSpeed counts every module's). Without checkpointing the trace after a unit's
// forward is the rest of the forward and then the backward back to it: twice the elements after
// it. With checkpointing the backward of the last layer starts with its last module (down), then
// recomputes the layer, as DeepSpeed's trace records it: down is used again after the final norm
// and the head twice (2099200 elements, as without checkpointing), a unit before it after every
// element of the layer but its own and the final norm and head twice (14684160 less its own).
TEST(ZeroInfinity, TheReuseDistanceKeepsParametersGatheredForTheBackward) {
  const std::string head = "lm_head.weight", down = "model.layers.1.mlp.down_proj.weight";
  const std::string gate = "model.layers.1.mlp.gate_proj.weight", up = "model.layers.1.mlp.up_proj.weight";
  // Without checkpointing: the head at distance 0, the last down projection at 2 x 1049600.
  EXPECT_EQ(KeptAcrossTheTurn(PlanOrDie({"training.activation_checkpointing=false", "policy.max_reuse_distance=2099200"})),
            (std::set<std::string>{head}));
  EXPECT_EQ(KeptAcrossTheTurn(PlanOrDie({"training.activation_checkpointing=false", "policy.max_reuse_distance=2099201"})),
            (std::set<std::string>{head, down}));
  // With checkpointing: the head, the down projection, then gate and up (12587008), then the
  // attention's four (13635584).
  EXPECT_EQ(KeptAcrossTheTurn(PlanOrDie({"policy.max_reuse_distance=2099201"})), (std::set<std::string>{head, down}));
  EXPECT_EQ(KeptAcrossTheTurn(PlanOrDie({"policy.max_reuse_distance=12587008"})), (std::set<std::string>{head, down}));
  EXPECT_EQ(KeptAcrossTheTurn(PlanOrDie({"policy.max_reuse_distance=12587009"})), (std::set<std::string>{head, down, gate, up}));
  const std::set<std::string> last_layer = KeptAcrossTheTurn(PlanOrDie({"policy.max_reuse_distance=13635585", "policy.buffer_count=8"}));
  EXPECT_EQ(last_layer.size(), 8u);
  for (const std::string& u : last_layer) EXPECT_TRUE(u == head || u.rfind("model.layers.1.", 0) == 0) << u;

  // At DeepSpeed's default every parameter is kept: the backward reads, copies and gathers none,
  // and each backward compute frees the forward's gathered buffers of its unit's layer.
  const Schedule all = PlanOrDie({"policy.max_reuse_distance=1e9", "policy.buffer_count=16"});
  EXPECT_EQ(KeptAcrossTheTurn(all).size(), 16u);
  for (const TaskSpec& t : all.tasks()) {
    if (t.phase != Phase::kBackward) continue;
    EXPECT_TRUE(t.op != Op::kRead && t.op != Op::kH2D && t.op != Op::kAllGather) << t.id;
  }
  int32_t freed_by_backward = 0;
  for (const TaskSpec& t : all.tasks()) {
    for (int32_t buf : t.frees) {
      const std::string& name = all.buffers()[buf].name;
      if (name.rfind("gathered.", 0) != 0) continue;
      EXPECT_EQ(t.id.rfind("bwd.", 0), 0u) << name << " freed by " << t.id;
      EXPECT_NE(std::find(t.uses.begin(), t.uses.end(), buf), t.uses.end()) << t.id << " frees what it does not use";
      ++freed_by_backward;
    }
  }
  EXPECT_EQ(freed_by_backward, 16 * 2) << "every unit's gathered buffer on both ranks";
  EXPECT_TRUE(RunUnitDurations(all, 2).status.ok());
  // Nothing kept: both passes gather every unit.
  EXPECT_TRUE(KeptAcrossTheTurn(PlanOrDie()).empty());
}

// DeepSpeed's swapper holds a parameter's swap buffer from its swap-in until it is released, so
// each parameter on NVMe kept gathered holds one, and a swap-in with all buffer_count held fails.
// At 13635585 elements the forward keeps the last layer and the head, 8 parameters: the head's
// swap-in needs an eighth buffer. The refusal names the two ways out, and both plan, where one
// more element of distance does not; parameters kept in host memory hold no buffer.
TEST(ZeroInfinity, MoreHeldSwapBuffersThanBufferCountAreRefusedLikeDeepSpeed) {
  const std::string refused = RefusalOf({"policy.max_reuse_distance=13635585"});
  EXPECT_NE(refused.find("policy.buffer_count: DeepSpeed's parameter swapper needs 8 swap buffers at once, and has 5"), std::string::npos)
      << refused;
  EXPECT_NE(refused.find("at the swap-in of 'lm_head.weight' in the forward, 7 are held"), std::string::npos) << refused;
  EXPECT_NE(refused.find("Not enough buffers 0 for swapping 1"), std::string::npos) << refused;
  EXPECT_NE(refused.find("Raise policy.buffer_count to at least 8, or lower policy.max_reuse_distance to at most 13635584"),
            std::string::npos) << refused;
  PlanOrDie({"policy.max_reuse_distance=13635585", "policy.buffer_count=8"});
  PlanOrDie({"policy.max_reuse_distance=13635584"});
  EXPECT_FALSE(RefusalOf({"policy.max_reuse_distance=13635585", "policy.buffer_count=7"}).empty());
  EXPECT_EQ(KeptAcrossTheTurn(PlanOrDie({"policy.max_reuse_distance=1e9", "policy.max_in_cpu=1e9"})).size(), 16u);
  const std::string negative = RefusalOf({"policy.max_reuse_distance=-1"});
  EXPECT_NE(negative.find("policy.max_reuse_distance: '-1' is below 0 (an integer from 0 to 1125899906842624)"), std::string::npos) << negative;
}

TEST(ZeroInfinity, UnknownKnobIsAnError) {
  const std::string refusal = RefusalOf({"policy.bufer_count=3"});
  EXPECT_NE(refusal.find("policy.bufer_count: unknown knob for policy 'zero-infinity'"), std::string::npos) << refusal;
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
