// The defining behaviour of each literature policy, pinned on a small model with the dispatcher
// in simulated time (testing::RunTimed): what the paper's system changes relative to
// zero-infinity is visible in the schedule and in when things start.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "../core/test_schedules.h"
#include "tierflow/policies/policy.h"

namespace tierflow::policies {
namespace {

const char* kSmall = R"(
name: small
model: {preset: tiny, layers: 2, hidden: 512, ffn: 1024, heads: 4, kv_heads: 4, vocab: 1024}
hardware:
  preset: a100x4-1nvme
  node:
    remote:
      - {name: test tier, read_bw: 2 GB/s, write_bw: 1 GB/s, latency: 1 ms}
training: {micro_batch_size: 1, sequence_length: 128, data_parallel: 2}
policy: {name: zero-infinity, buffer_size: 1e6, sub_group_size: 2e5, param_persistence_threshold: 1000}
)";

Schedule PlanOrDie(const std::vector<std::string>& sets) {
  auto scenario = LoadScenarioText(kSmall, sets, "small.yaml");
  EXPECT_TRUE(scenario.ok()) << scenario.status().ToString();
  auto s = Plan(*scenario);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

// "allgather.<unit>.<pass>" -> "<unit>"; "read.<unit>.<pass>.r<k>" -> "<unit>".
std::string UnitOf(const std::string& id, const std::string& prefix) {
  std::string rest = id.substr(prefix.size());
  for (const char* pass : {".f", ".b"}) {
    auto pos = rest.rfind(pass);
    if (pos != std::string::npos) return rest.substr(0, pos);
  }
  return rest;
}

std::map<std::string, double> UnitDurations(const Schedule& s) {
  std::map<std::string, double> d;
  for (const TaskSpec& t : s.tasks()) d[t.id] = t.op == Op::kRead || t.op == Op::kWrite ? 1.0 : 0.01;
  return d;
}

TEST(Ioc, AnAllGatherWaitsOnlyForItsOwnParameter) {
  Schedule s = PlanOrDie({"policy.name=ioc", "policy.sub_group_size=null"});
  int gathers = 0;
  for (const TaskSpec& t : s.tasks()) {
    // The parameter fetch's gathers (not the step's re-gather of the resident units).
    if (t.op != Op::kAllGather || t.id.rfind("allgather.", 0) != 0 || t.phase == Phase::kStep) continue;
    ++gathers;
    const std::string unit = UnitOf(t.id, "allgather.");
    for (int32_t d : t.deps) {
      const std::string& dep = s.tasks()[d].id;
      if (dep.rfind("read.", 0) == 0) ADD_FAILURE() << t.id << " waits for " << dep;
      if (dep.rfind("h2d.", 0) == 0) {
        EXPECT_EQ(UnitOf(dep, "h2d."), unit) << t.id << " waits for another unit's copy " << dep;
      }
    }
  }
  EXPECT_GT(gathers, 0);

  // In time: a very slow read of a later parameter does not delay an earlier gather (under
  // zero-infinity it does: ZeroInfinity.AllGatherWaitsForReadsOfOtherParameters).
  const std::string q = "model.layers.0.self_attn.q_proj.weight";
  const std::string k = "model.layers.0.self_attn.k_proj.weight";
  auto durations = UnitDurations(s);
  durations["read." + k + ".f0.r1"] = 500.0;
  auto r = testing::RunTimed(s, 1, durations);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_LT(r.at("allgather." + q + ".f0").end, r.at("read." + k + ".f0.r1").end);
}

TEST(MlpOffload, NoTwoRanksReadOneTierAtOnce) {
  Schedule s = PlanOrDie({"policy.name=mlp-offload", "policy.ratio=2"});
  auto r = testing::RunTimed(s, 2, UnitDurations(s));
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  // Every read's interval, by the tier (device) it reads from and the rank that issued it.
  struct Read {
    double start, end;
    std::string rank, id;
  };
  std::map<std::string, std::vector<Read>> by_tier;
  std::set<std::string> tiers;
  for (const auto& [key, span] : r.spans) {
    const TaskSpec& t = s.tasks()[s.FindTask(key.first)];
    if (t.op != Op::kRead) continue;
    const std::string tier = s.devices()[s.resources()[t.resource].device].name;
    const std::string rank = key.first.substr(key.first.rfind(".r"));
    by_tier[tier].push_back({span.start, span.end, rank, key.first + "@" + std::to_string(key.second)});
    tiers.insert(tier);
  }
  EXPECT_TRUE(tiers.count("remote0")) << "ratio 2 places sub-groups on the remote tier";
  for (auto& [tier, reads] : by_tier) {
    std::sort(reads.begin(), reads.end(), [](const Read& a, const Read& b) { return a.start < b.start; });
    for (size_t i = 0; i < reads.size(); ++i) {
      for (size_t j = i + 1; j < reads.size() && reads[j].start < reads[i].end; ++j) {
        EXPECT_EQ(reads[i].rank, reads[j].rank) << tier << ": " << reads[i].id << " and " << reads[j].id << " overlap";
      }
    }
  }
}

TEST(MlpOffload, GradientsStayInHostMemory) {
  Schedule s = PlanOrDie({"policy.name=mlp-offload", "policy.ratio=2"});
  for (const TaskSpec& t : s.tasks()) {
    EXPECT_FALSE(t.op == Op::kWrite && t.phase == Phase::kBackward) << t.id << " flushes a gradient";
  }
  Schedule flushing = PlanOrDie({"policy.name=zero-infinity"});
  EXPECT_TRUE(std::any_of(flushing.tasks().begin(), flushing.tasks().end(),
                          [](const TaskSpec& t) { return t.op == Op::kWrite && t.phase == Phase::kBackward; }));
}

TEST(MemAscend, ClassPoolsAreSizedExactlyAndBoundThePinnedPeak) {
  Schedule s = PlanOrDie({"policy.name=memascend", "policy.buffer_size=null", "policy.buffer_count=3"});
  // Each parameter read allocates one slot; group the slots' sizes by pool.
  std::map<int32_t, int64_t> largest;
  for (const TaskSpec& t : s.tasks()) {
    if (t.op != Op::kRead || t.phase == Phase::kStep) continue;
    for (int32_t b : t.allocs) {
      const BufferSpec& buf = s.buffers()[b];
      EXPECT_EQ(buf.size_bytes, t.bytes) << t.id << ": a slot is the exact size of its partition";
      largest[buf.pool] = std::max(largest[buf.pool], buf.size_bytes);
    }
  }
  ASSERT_GE(largest.size(), 2u) << "one pool per shape class";
  int64_t class_capacity = 0;
  for (const auto& [pool, bytes] : largest) {
    EXPECT_EQ(s.pools()[pool].capacity_bytes, 3 * bytes) << s.pools()[pool].name << ": buffer_count slots of its largest partition";
    class_capacity += s.pools()[pool].capacity_bytes;
  }
  auto r = testing::RunTimed(s, 1, UnitDurations(s));
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  int64_t class_peak = 0;
  for (const auto& [pool, bytes] : largest) class_peak += r.peaks[pool];
  // What is pinned is the pools' reserved bytes; occupancy peaks below when the classes do not
  // all fill at once.
  EXPECT_GT(class_peak, 0);
  EXPECT_LE(class_peak, class_capacity);
  // Against DeepSpeed's pool, where every slot holds buffer_size elements.
  Schedule zi = PlanOrDie({"policy.name=zero-infinity", "policy.buffer_count=3"});
  int64_t zi_param = 0;
  for (const PoolSpec& p : zi.pools()) {
    if (p.name.rfind("host.pinned.param", 0) == 0) zi_param += p.capacity_bytes;
  }
  EXPECT_LT(class_capacity, zi_param);
}

// DeepSpeed's unfused check (stage 3's has_overflow, fp16 only) masks the rank's gradient
// partition with isinf and then isnan, one statement each: one byte per element is alive at a
// time, allocated and freed by the norm task. zero-infinity's overflow_check_temporaries and
// memascend without its fused check plan the same; the fused check allocates nothing, and in
// bf16 training, where DeepSpeed runs no check, asking for the unfused one is refused.
TEST(MemAscend, TheUnfusedOverflowCheckHoldsOneByteMaskOfTheRanksGradients) {
  const std::vector<std::string> unfused_memascend = {"policy.name=memascend", "policy.buffer_size=null",
                                                      "policy.fused_overflow_check=false"};
  const std::vector<std::string> zi_temporaries = {"policy.overflow_check_temporaries=true"};
  for (std::vector<std::string> sets : {unfused_memascend, zi_temporaries}) {
    auto bf16 = LoadScenarioText(kSmall, sets, "small.yaml");
    ASSERT_TRUE(bf16.ok()) << bf16.status().ToString();
    auto refused = Plan(*bf16);
    ASSERT_FALSE(refused.ok()) << sets[0];
    EXPECT_NE(refused.status().message().find("only in fp16 training (stage 3's has_overflow), and training.dtype is bf16"),
              std::string::npos)
        << refused.status().ToString();
    sets.push_back("training.dtype=fp16");
    Schedule s = PlanOrDie(sets);
    for (int r = 0; r < 2; ++r) {
      const TaskSpec& norm = s.tasks()[s.FindTask("step.norm.r" + std::to_string(r))];
      ASSERT_EQ(norm.allocs.size(), 1u) << sets[0];
      EXPECT_EQ(norm.frees, norm.allocs);
      const BufferSpec& mask = s.buffers()[norm.allocs[0]];
      // The norm reads the rank's fp32 gradients: 4 bytes per element against the mask's 1.
      EXPECT_EQ(mask.size_bytes * 4, norm.bytes) << sets[0];
      EXPECT_EQ(s.pools()[mask.pool].name, "host.temp.r" + std::to_string(r));
      EXPECT_EQ(s.pools()[mask.pool].capacity_bytes, mask.size_bytes);
    }
  }
  Schedule fused = PlanOrDie({"policy.name=memascend", "policy.buffer_size=null", "training.dtype=fp16"});
  EXPECT_TRUE(fused.tasks()[fused.FindTask("step.norm.r0")].allocs.empty());
  for (const PoolSpec& p : fused.pools()) EXPECT_NE(p.name.rfind("host.temp", 0), 0u) << p.name;
}

// In one timed iteration: when the backward pass ends (its last compute) and when the first
// optimizer update starts.
// When backward ends, and when the first task `is_first` picks starts, in one simulated
// iteration with compute long enough for the step to overlap backward.
std::pair<double, double> BackwardEndAndFirstStart(const Schedule& s, const std::function<bool(const TaskSpec&)>& is_first) {
  auto durations = UnitDurations(s);
  for (const TaskSpec& t : s.tasks()) {
    if (t.op == Op::kCompute) durations[t.id] = 1.0;  // backward long enough to overlap
  }
  auto r = testing::RunTimed(s, 1, durations);
  EXPECT_TRUE(r.status.ok()) << r.status.ToString();
  double backward_end = 0, first = 1e300;
  for (const auto& [key, span] : r.spans) {
    const TaskSpec& t = s.tasks()[s.FindTask(key.first)];
    if (t.op == Op::kCompute && t.phase == Phase::kBackward) backward_end = std::max(backward_end, span.end);
    if (is_first(t)) first = std::min(first, span.start);
  }
  return {backward_end, first};
}

std::pair<double, double> BackwardEndAndFirstUpdate(const Schedule& s) {
  return BackwardEndAndFirstStart(s, [](const TaskSpec& t) { return t.op == Op::kOptimizer; });
}

TEST(HiTrain, AnUpdateStartsWhileBackwardStillRuns) {
  // HiTrain's reordered, asynchronous optimizer: a sub-group is updated as soon as its layers'
  // gradients are final, overlapping the rest of backward. zero-infinity updates only after the
  // whole backward and the global gradient norm.
  const auto [hi_backward, hi_update] =
      BackwardEndAndFirstUpdate(PlanOrDie({"policy.name=hitrain", "policy.buffer_size=null"}));
  EXPECT_LT(hi_update, hi_backward) << "hitrain: the first update must overlap backward";
  const auto [zi_backward, zi_update] = BackwardEndAndFirstUpdate(PlanOrDie({"policy.name=zero-infinity"}));
  EXPECT_GE(zi_update, zi_backward) << "zero-infinity: updates wait for the whole backward";
}

std::pair<double, double> BackwardEndAndFirstStatesRead(const Schedule& s) {
  return BackwardEndAndFirstStart(s, [](const TaskSpec& t) { return t.id.rfind("read.states.", 0) == 0; });
}

TEST(Tierflow, StatesAreReadAheadOfTheUpdate) {
  // With read-ahead (the default) the states stream in while forward and backward run, whether
  // the update waits for the global check or overlaps backward; without it a read waits until
  // its sub-group's update may start: after the whole backward when the global check comes first.
  for (const std::string overlap : {"false", "true"}) {
    const auto [ahead_backward, ahead_read] = BackwardEndAndFirstStatesRead(
        PlanOrDie({"policy.name=tierflow", "policy.buffer_size=null", "policy.overlap_optimizer=" + overlap}));
    EXPECT_LT(ahead_read, ahead_backward) << "overlap_optimizer " << overlap;
  }
  const auto [backward, read] = BackwardEndAndFirstStatesRead(
      PlanOrDie({"policy.name=tierflow", "policy.buffer_size=null", "policy.read_ahead=false"}));
  EXPECT_GE(read, backward) << "read_ahead false: the reads wait for the global check";
}

TEST(Tierflow, ReadAheadTakesThePoolInUpdateOrderAcrossIterations) {
  // Room for two sub-groups in the optimizer pool, cached sub-groups last in update order (their
  // gradient buffers come from the same pool): if the next iteration's reads could take the pool
  // before this iteration's last sub-groups have their buffers, those could wait for the next
  // iteration's updates, which wait for them (a deadlock, when the timing falls that way). The
  // first read of an iteration carries a dependency on the last take of the one before, and
  // three iterations complete, with and without the overlapped update.
  for (const std::string overlap : {"false", "true"}) {
    const Schedule s = PlanOrDie({"policy.name=tierflow", "policy.buffer_size=null", "policy.optimizer_buffer_count=8",
                                  "policy.cached_sub_groups=2", "policy.overlap_optimizer=" + overlap});
    auto durations = UnitDurations(s);
    for (const TaskSpec& t : s.tasks()) {
      if (t.op == Op::kCompute) durations[t.id] = 1.0;  // the first updates end long before backward does
    }
    auto r = testing::RunTimed(s, 3, durations);
    EXPECT_TRUE(r.status.ok()) << "overlap_optimizer " << overlap << ": " << r.status.ToString();
    int carried = 0;
    for (const TaskSpec& t : s.tasks()) {
      if (t.id.rfind("read.states.", 0) != 0) continue;
      for (const CarriedDep& c : t.carried) carried += s.tasks()[c.task].id.rfind("convert.grad.", 0) == 0 ? 1 : 0;
    }
    EXPECT_EQ(carried, 2) << "each rank's first read waits for its last cached sub-group's gradient buffer";
  }
}

// The optimizer split three ways per rank: the first gpu_sub_groups of the update order on the
// GPU (states in a persistent buffer of the GPU's pool, the gradient copied up, Adam on the GPU's
// compute resource, no state read or written; with parameters on NVMe the rounded ones sent home
// by a d2h), the last cached_sub_groups in host memory, the rest on NVMe; three iterations
// complete in simulated time.
TEST(Tierflow, TheOptimizerSplitsAcrossGpuHostAndNvme) {
  for (const std::string params : {"none", "nvme"}) {
    const Schedule s = PlanOrDie({"policy.name=tierflow", "policy.buffer_size=null", "policy.offload_param=" + params, "policy.gpu_sub_groups=3",
                                  "policy.cached_sub_groups=2"});
    std::map<int32_t, int> on_gpu, on_cpu;  // per rank
    std::set<std::string> gpu_groups;       // ".sg{g}.r{r}"
    for (const TaskSpec& t : s.tasks()) {
      if (t.op != Op::kOptimizer) continue;
      const bool gpu = s.devices()[s.resources()[t.resource].device].kind == DeviceKind::kGpu;
      (gpu ? on_gpu : on_cpu)[t.rank] += 1;
      if (!gpu) continue;
      gpu_groups.insert(t.id.substr(std::string("adam").size()));
      for (int32_t b : t.uses) EXPECT_EQ(s.devices()[s.pools()[s.buffers()[b].pool].device].kind, DeviceKind::kGpu) << t.id;
      ASSERT_EQ(t.deps.size(), 1u) << t.id;
      EXPECT_EQ(s.tasks()[t.deps[0]].op, Op::kH2D) << t.id << " waits for its gradient's copy up";
      EXPECT_EQ(t.allocs.size(), params == "nvme" ? 1u : 0u) << t.id << ": the rounded parameters' GPU buffer, with parameters on NVMe";
    }
    ASSERT_EQ(on_gpu.size(), 2u);
    for (const auto& [rank, n] : on_gpu) {
      EXPECT_EQ(n, 3) << "rank " << rank;
      EXPECT_GE(on_cpu[rank], 3) << "the cached ones and those on NVMe, rank " << rank;
    }
    int homeward = 0;  // parameters of GPU-updated sub-groups sent to NVMe: d2h, then write
    for (const TaskSpec& t : s.tasks()) {
      if (t.op == Op::kD2H && t.id.rfind("d2h.p16.", 0) == 0) {
        ++homeward;
        EXPECT_EQ(s.tasks()[t.deps[0]].op, Op::kOptimizer) << t.id;
      }
      if (t.op != Op::kRead && t.op != Op::kWrite) continue;
      for (const std::string& g : gpu_groups) EXPECT_EQ(t.id.find("states" + g), std::string::npos) << t.id << " moves states kept on the GPU";
    }
    EXPECT_EQ(homeward, params == "nvme" ? 6 : 0) << params;
    // The gradients go up as the backward left them in host memory (grad16): no conversion on the
    // host for a GPU-updated sub-group, and no copy up waits for an update (the sweep pipelines
    // them as it pipelines the host's conversions).
    int copies = 0;
    for (const TaskSpec& t : s.tasks()) {
      if (t.op == Op::kConvert && t.kernel == Kernel::kBf16ToFp32) {
        for (const std::string& g : gpu_groups) EXPECT_EQ(t.id.find(g), std::string::npos) << t.id << " widens a GPU-updated sub-group's gradient on the host";
      }
      if (t.op != Op::kH2D || t.id.rfind("h2d.grad.", 0) != 0) continue;
      ++copies;
      ASSERT_EQ(t.tensors.size(), 1u) << t.id;
      EXPECT_EQ(s.tensors()[t.tensors[0]].kind, StateKind::kGrad16) << t.id;
      EXPECT_EQ(t.bytes, s.tensors()[t.tensors[0]].size_bytes) << t.id << ": 2 bytes an element";
      EXPECT_TRUE(t.frees.empty()) << t.id << " frees the persistent bf16 gradients";
      for (int32_t d : t.deps) EXPECT_NE(s.tasks()[d].op, Op::kOptimizer) << t.id << " waits for " << s.tasks()[d].id;
    }
    EXPECT_EQ(copies, 6) << params;
    auto r = testing::RunTimed(s, 3, UnitDurations(s));
    EXPECT_TRUE(r.status.ok()) << r.status.ToString() << " (offload_param " << params << ")";
  }
}

// A split the GPU cannot hold is refused at plan time, naming the pool and the bytes short; so is
// a count that is not one, and a GPU update in a design that writes parameters back in chunks.
TEST(Tierflow, AnOptimizerSplitTheGpuCannotHoldIsRefused) {
  struct Case {
    std::vector<std::string> sets;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{"policy.offload_param=none", "policy.gpu_sub_groups=all", "hardware.node.gpu.hbm=30 MB"}, "pool 'gpu0.hbm' holds 28.61 MiB (hardware.node.gpu.hbm): "},
           {{"policy.offload_param=none", "policy.gpu_sub_groups=some"}, "policy.gpu_sub_groups (a count, or 'all')"},
           {{"policy.name=memascend", "policy.gpu_sub_groups=1"}, "policy 'memascend' stages them in chunks of buffer_size elements"},
       }) {
    std::vector<std::string> sets = {"policy.name=tierflow", "policy.buffer_size=null"};
    sets.insert(sets.end(), c.sets.begin(), c.sets.end());
    auto scenario = LoadScenarioText(kSmall, sets, "small.yaml");
    ASSERT_TRUE(scenario.ok()) << scenario.status().ToString();
    auto planned = Plan(*scenario);
    ASSERT_FALSE(planned.ok()) << c.message;
    EXPECT_NE(planned.status().message().find(c.message), std::string::npos) << planned.status().message();
    if (c.message.rfind("pool", 0) == 0) {
      EXPECT_NE(planned.status().message().find(" short"), std::string::npos) << planned.status().message();
    }
  }
}

TEST(Tierflow, TierLocksOrderTheRemoteTierAlsoWithIsolatedNvmeQueues) {
  // Two ranks, a remote tier. Isolation (on by default) gives NVMe one device-wide queue; the
  // tier locks must still give the remote tier one reader and one writer for both ranks.
  std::set<std::string> remote;
  Schedule locked = PlanOrDie({"policy.name=tierflow", "policy.buffer_size=null", "policy.ratio=2", "policy.tier_locks=true"});
  for (const TaskSpec& t : locked.tasks()) {
    if (t.op != Op::kRead && t.op != Op::kWrite) continue;
    const std::string& r = locked.resources()[t.resource].name;
    if (r.rfind("remote0", 0) == 0) remote.insert(r);
  }
  EXPECT_EQ(remote, (std::set<std::string>{"remote0.read", "remote0.write"}));
  remote.clear();
  Schedule unlocked = PlanOrDie({"policy.name=tierflow", "policy.buffer_size=null", "policy.ratio=2", "policy.tier_locks=false"});
  for (const TaskSpec& t : unlocked.tasks()) {
    if (t.op != Op::kRead && t.op != Op::kWrite) continue;
    const std::string& r = unlocked.resources()[t.resource].name;
    if (r.rfind("remote0", 0) == 0) remote.insert(r);
  }
  EXPECT_EQ(remote, (std::set<std::string>{"remote0.r0.read", "remote0.r0.write", "remote0.r1.read", "remote0.r1.write"}));
}

TEST(Fuyou, ReadsStripedOverTwoDisksCannotFillTheExactSizePoolOutOfOrder) {
  // Fuyou stripes sub-groups, so parameter units, over both disks of the workstation, into one
  // pinned pool of buffer_count x its largest partition whose slots are each partition's size.
  // With nvme0 slow, nvme1's reads would run ahead and fill the pool with later units while the
  // next unit the in-order all-gathers need still waits on nvme0: a deadlock (fuyou-13b's). The
  // slot ring admits at most buffer_count staged reads per pool.
  auto scenario = LoadScenarioText(R"(
name: fuyou-4-layers
model: {preset: llama2-13b, layers: 4}
hardware: {preset: workstation-4090}
training: {micro_batch_size: 1, sequence_length: 2048, data_parallel: 1, activation_checkpointing: true}
policy: {name: fuyou, prefetch_window: 4 GiB}
)",
                                   {}, "fuyou-4-layers.yaml");
  ASSERT_TRUE(scenario.ok()) << scenario.status().ToString();
  auto s = Plan(*scenario);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::map<std::string, double> durations;
  std::set<std::string> disks;
  for (const TaskSpec& t : s->tasks()) {
    const bool io = t.op == Op::kRead || t.op == Op::kWrite;
    // (alloc, free and barrier run on no resource: kNoIndex, which indexes nothing)
    const std::string resource = t.resource == kNoIndex ? "" : s->resources()[t.resource].name;
    if (io) disks.insert(resource.substr(0, resource.find('.')));
    durations[t.id] = !io ? 0.01 : resource.rfind("nvme0", 0) == 0 ? 10.0 : 0.1;
  }
  ASSERT_EQ(disks, (std::set<std::string>{"nvme0", "nvme1"})) << "the units must be spread over both disks";
  auto r = testing::RunTimed(*s, 2, durations);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  // At no time more than buffer_count (default 5) parameter reads staged in the pool: read
  // finished, the all-gather that frees its slot not yet.
  std::map<std::pair<std::string, int64_t>, double> gathered;  // (unit pass, iteration) -> end
  for (const auto& [key, span] : r.spans) {
    if (key.first.rfind("allgather.", 0) == 0) gathered[{key.first.substr(10), key.second}] = span.end;
  }
  std::vector<std::pair<double, int>> events;  // (time, +1 staged / -1 freed)
  for (const auto& [key, span] : r.spans) {
    if (key.first.rfind("read.", 0) != 0 || key.first.find(".sg") != std::string::npos) continue;
    const std::string unit_pass = key.first.substr(5, key.first.rfind(".r") - 5);
    auto g = gathered.find({unit_pass, key.second});
    if (g == gathered.end()) continue;  // not a parameter read
    events.push_back({span.end, +1});
    events.push_back({g->second, -1});
  }
  ASSERT_FALSE(events.empty());
  std::sort(events.begin(), events.end());  // at one instant, frees (-1) before new reads
  int staged = 0, most = 0;
  for (const auto& [time, change] : events) most = std::max(most, staged += change);
  EXPECT_LE(most, 5);
}

// Knobs that cannot take effect are errors naming the knob, not silently something else.
TEST(PolicyKnobs, SplitOnOneDiskAndMemAscendsIgnoredBufferSizeAreRefused) {
  for (const char* policy : {"ioc", "tierflow"}) {
    auto scenario = LoadScenarioText(kSmall, {std::string("policy.name=") + policy, "policy.buffer_size=null",
                                              "policy.disk_layout=split"}, "small.yaml");
    ASSERT_TRUE(scenario.ok()) << scenario.status().ToString();
    auto s = Plan(*scenario);
    ASSERT_FALSE(s.ok()) << policy << " planned split on one disk";
    EXPECT_NE(s.status().message().find("policy.disk_layout: split needs two or more disks"), std::string::npos)
        << s.status().ToString();
  }
  auto memascend = LoadScenarioText(kSmall, {"policy.name=memascend"}, "small.yaml");  // keeps buffer_size 1e6
  ASSERT_TRUE(memascend.ok()) << memascend.status().ToString();
  auto refused = Plan(*memascend);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("policy.buffer_size: memascend's adaptive_pools"), std::string::npos)
      << refused.status().ToString();
  auto one_pool = LoadScenarioText(kSmall, {"policy.name=memascend", "policy.adaptive_pools=false"}, "small.yaml");
  ASSERT_TRUE(one_pool.ok()) << one_pool.status().ToString();
  EXPECT_TRUE(Plan(*one_pool).ok());
}

// Every policy's boundaries in the flat space — sub-groups, parameter chunks, each rank's stretch
// — fall on 4 KiB even where sub_group_size and buffer_size are not multiples of 2048 elements,
// so a model whose per-rank partitions are such multiples (hidden 4096 over two ranks) has every
// tensor on a disk or the remote tier start and end on 4 KiB: O_DIRECT where a file system needs
// 4 KiB (docs/policies.md "I/O alignment"). zero-infinity's sub-groups end where units end, as
// DeepSpeed's do (zero_infinity_test).
TEST(PolicyLayout, EveryStoredTensorOfA4KiBModelIsOn4KiB) {
  for (const char* policy : {"zero-infinity", "ioc", "mlp-offload", "memascend", "hitrain", "fuyou", "tierflow"}) {
    std::vector<std::string> sets = {std::string("policy.name=") + policy, "model.hidden=4096", "model.ffn=4096",
                                     "policy.sub_group_size=3000000", "policy.buffer_size=10000000"};
    const std::string name = policy;
    if (name == "memascend") sets.push_back("policy.adaptive_pools=false");
    if (name == "hitrain" || name == "fuyou" || name == "tierflow") sets[4] = "policy.buffer_size=null";  // not their knob
    if (name == "fuyou") sets.push_back("training.data_parallel=1");                  // one GPU
    const Schedule s = PlanOrDie(sets);
    int stored = 0;
    for (const TensorSpec& t : s.tensors()) {
      if (s.devices()[static_cast<size_t>(t.device)].kind == DeviceKind::kGpu) continue;
      ++stored;
      EXPECT_EQ(t.offset_bytes % 4096, 0) << policy << ": " << t.name << " at " << t.offset_bytes;
      EXPECT_EQ(t.size_bytes % 4096, 0) << policy << ": " << t.name << " of " << t.size_bytes << " bytes";
    }
    EXPECT_GT(stored, 0) << policy;
  }
}

}  // namespace
}  // namespace tierflow::policies
