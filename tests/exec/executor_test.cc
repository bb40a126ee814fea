// The real executor end to end on the tiny model: the math does not depend on the schedule
// (weights bit-identical to the in-memory loop under zero-infinity on one disk and ioc on two),
// and a schedule that would train on stale state, deadlock, or has no disk stops with an error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include <nlohmann/json.hpp>

#include "tierflow/policies/policy.h"
#include "tierflow/policies/scenario.h"
#include "tierflow/real/checkpoint.h"
#include "tierflow/real/collective.h"
#include "tierflow/real/dir_lock.h"
#include "tierflow/real/hf_model.h"
#include "tierflow/real/executor.h"
#include "tierflow/real/llama.h"
#include "tierflow/real/safetensors.h"
#include "tierflow/real/storage.h"
#include "tierflow/real/tokenizer.h"
#include "ranks.h"
#include "tiny_run.h"

namespace tierflow::real {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(fs::temp_directory_path() / ("tierflow-exec-" + name + "-" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

Schedule PlanOrDie(const policies::Scenario& s) {
  auto schedule = policies::Plan(s);
  EXPECT_TRUE(schedule.ok()) << schedule.status().ToString();
  return std::move(schedule).value();
}

// `s` with the first `from` after `anchor` in its JSON replaced by `to` (each of `more` too, in
// the same text): the schedule edited as a user would edit its file, loaded once.
struct Edit {
  std::string anchor, from, to;
};
Schedule EditedOrDie(const Schedule& s, const std::string& anchor, const std::string& from, const std::string& to,
                     const std::vector<Edit>& more = {}) {
  std::string json = ScheduleToJson(s);
  std::vector<Edit> edits = {{anchor, from, to}};
  edits.insert(edits.end(), more.begin(), more.end());
  for (const Edit& e : edits) {
    const size_t at = json.find(e.from, json.find(e.anchor));
    EXPECT_NE(at, std::string::npos) << "'" << e.from << "' after '" << e.anchor << "'";
    if (at != std::string::npos) json.replace(at, e.from.size(), e.to);
  }
  auto edited = ScheduleFromJson(json);
  EXPECT_TRUE(edited.ok()) << edited.status().ToString();
  return edited.ok() ? std::move(edited).value() : s;
}

// One iteration of `s` on a fresh temporary disk directory.
StatusOr<RunResult> RunOnce(const Schedule& s, const policies::Scenario& scenario, const std::string& tag) {
  TempDir d0(tag);
  RunOptions options;
  options.iterations = 1;
  options.disks = {d0.str()};
  return RunSchedule(s, ConfigFor(scenario), options);
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

constexpr int64_t kIterations = 3;

// Plans the tiny scenario with `sets`, runs it kIterations on fresh disk directories and expects
// `reference`'s losses and weights bit for bit; returns the schedule.
// Its disks are under `root` when one is given (for checks after the run), else a fresh one.
Schedule ExpectReproduces(const std::vector<std::string>& sets, const TrainConfig& config, const RunResult& reference, const std::string& label,
                          const TempDir* root = nullptr) {
  const Schedule schedule = PlanOrDie(LoadTiny(sets));
  TempDir fresh("reproduces");
  RunOptions options;
  options.iterations = kIterations;
  options.disk_root = (root != nullptr ? *root : fresh).str();
  auto run = RunSchedule(schedule, config, options);
  EXPECT_TRUE(run.ok()) << label << ": " << run.status().ToString();
  if (run.ok()) {
    EXPECT_EQ(run->loss, reference.loss) << label;
    EXPECT_TRUE(SameBits(run->master, reference.master)) << label;
  }
  return schedule;
}

// "k=v k=v ": a case's label.
std::string Label(const std::vector<std::string>& sets) {
  std::string label;
  for (const std::string& set : sets) label += set + " ";
  return label;
}

// `sets` planned and run against the in-memory loop of its own training set-up (ExpectReproduces).
Schedule ExpectReproducesItsReference(const std::vector<std::string>& sets) {
  const TrainConfig config = ConfigFor(LoadTiny(sets));
  auto reference = RunInMemory(config, kIterations);
  EXPECT_TRUE(reference.ok()) << reference.status().ToString();
  if (!reference.ok()) return Schedule{};
  return ExpectReproduces(sets, config, *reference, Label(sets));
}

TEST(Executor, WeightsAreBitIdenticalWhateverTheSchedule) {
  const policies::Scenario zi = LoadTiny({});
  const TrainConfig config = ConfigFor(zi);
  auto reference = RunInMemory(config, kIterations);
  ASSERT_TRUE(reference.ok()) << reference.status().ToString();
  ASSERT_EQ(reference->loss.size(), static_cast<size_t>(kIterations));
  EXPECT_LT(reference->loss.back(), reference->loss.front());  // it trains
  ASSERT_EQ(reference->iteration_end_s.size(), static_cast<size_t>(kIterations));  // the steady state's input
  EXPECT_TRUE(std::is_sorted(reference->iteration_end_s.begin(), reference->iteration_end_s.end()));
  EXPECT_GT(reference->iteration_end_s.front(), 0);
  EXPECT_LE(reference->iteration_end_s.back(), reference->wall_s);

  TempDir d0("zi0");
  RunOptions options;
  options.iterations = kIterations;
  options.disks = {d0.str()};
  auto run = RunSchedule(PlanOrDie(zi), config, options);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(run->loss, reference->loss);
  EXPECT_TRUE(SameBits(run->master, reference->master)) << "zero-infinity, one disk";
  EXPECT_EQ(run->tasks, kIterations * static_cast<int64_t>(PlanOrDie(zi).tasks().size()));
  EXPECT_EQ(run->records.size(), static_cast<size_t>(run->tasks));
  for (const TraceRecord& r : run->records) {  // the emulated GPU has no GPU-side times
    EXPECT_EQ(r.device_start_s, 0) << r.task;
    EXPECT_EQ(r.device_end_s, 0) << r.task;
  }

  const policies::Scenario ioc = LoadTiny({"policy.name=ioc", "policy.disk_layout=split"});
  TempDir e0("ioc0"), e1("ioc1");
  options.disks = {e0.str(), e1.str()};
  auto run2 = RunSchedule(PlanOrDie(ioc), config, options);
  ASSERT_TRUE(run2.ok()) << run2.status().ToString();
  EXPECT_EQ(run2->loss, reference->loss);
  EXPECT_TRUE(SameBits(run2->master, reference->master)) << "ioc, two disks";
  // The state really went to both disks.
  EXPECT_GT(fs::file_size(e0.str() + "/tierflow-run.store"), 0u);
  EXPECT_GT(fs::file_size(e1.str() + "/tierflow-run.store"), 0u);

  // Striped: parameters and sub-groups alternate over both disks (the placement whose gradient
  // writes once went to a disk the update did not read them from).
  const policies::Scenario striped = LoadTiny({"policy.name=ioc", "policy.sub_group_size=1000000"});
  TempDir f0("striped0"), f1("striped1");
  options.disks = {f0.str(), f1.str()};
  auto run3 = RunSchedule(PlanOrDie(striped), config, options);
  ASSERT_TRUE(run3.ok()) << run3.status().ToString();
  EXPECT_TRUE(SameBits(run3->master, reference->master)) << "ioc striped over two disks";
}

// Whether any task of `s` has this op and an id starting with `prefix`.
bool HasTask(const Schedule& s, Op op, const std::string& prefix) {
  for (const TaskSpec& t : s.tasks()) {
    if (t.op == op && t.id.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

bool HasPersistentBuffer(const Schedule& s, const std::string& prefix) {
  for (const BufferSpec& b : s.buffers()) {
    if (b.persistent && b.name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

// Every policy with its own defaults runs the tiny scenario — mlp-offload with its remote tier,
// cached sub-groups, tier locks and gradients kept in host memory; hitrain and fuyou with the
// update overlapped with backward; parameters resident on the GPU — and ends with the in-memory
// loop's weights, bit for bit.
TEST(Executor, EveryPolicyWithItsOwnDefaultsReproducesTheInMemoryWeights) {
  const policies::Scenario zi = LoadTiny({});
  const TrainConfig config = ConfigFor(zi);
  auto reference = RunInMemory(config, kIterations);
  ASSERT_TRUE(reference.ok()) << reference.status().ToString();
  for (const std::string& policy : policies::PolicyNames()) {
    const Schedule schedule = ExpectReproduces({"policy.name=" + policy}, config, *reference, policy);
    if (policy == "mlp-offload") {  // what its defaults really exercised (tiny is one sub-group, cached)
      EXPECT_TRUE(HasPersistentBuffer(schedule, "states.")) << "optimizer states cached in host memory";
      EXPECT_TRUE(HasTask(schedule, Op::kConvert, "convert.grad.")) << "gradients kept in host memory";
      EXPECT_FALSE(HasTask(schedule, Op::kWrite, "write.grad.")) << "no gradient flush";
      EXPECT_FALSE(HasTask(schedule, Op::kRead, "read.p16.")) << "parameters on the GPU";
    }
  }
}

// Optimizer states cached in host memory across iterations (one sub-group of several), the
// update overlapped with backward, and parameters resident on the GPU (refreshed by their h2d
// after each update), alone and together.
TEST(Executor, CachedStatesOverlapAndGpuResidentParametersReproduceTheInMemoryWeights) {
  const policies::Scenario zi = LoadTiny({});
  const TrainConfig config = ConfigFor(zi);
  auto reference = RunInMemory(config, kIterations);
  ASSERT_TRUE(reference.ok()) << reference.status().ToString();
  const std::vector<std::vector<std::string>> cases = {
      {"policy.name=tierflow", "policy.sub_group_size=1e6", "policy.cached_sub_groups=2"},
      {"policy.name=tierflow", "policy.sub_group_size=1e6", "policy.overlap_optimizer=true"},
      {"policy.name=tierflow", "policy.offload_param=none"},
      // States read ahead without semi-asynchronous write-back: the next iteration's read must
      // still wait for this one's write (it read stale states once), and with gradients on disk.
      {"policy.name=tierflow", "policy.semi_async_writeback=false", "policy.overlap_optimizer=true"},
      {"policy.name=tierflow", "policy.sub_group_size=1e6", "policy.host_gradients=false"},
      {"policy.name=tierflow", "policy.sub_group_size=1e6", "policy.cached_sub_groups=2", "policy.overlap_optimizer=true",
       "policy.offload_param=none", "policy.host_gradients=false"},
      {"policy.name=mlp-offload", "policy.sub_group_size=1e6", "policy.cache_mode=alternate", "policy.offload_param=nvme"},
      // 17 sub-groups: every third on the remote tier, the last five of each path cached.
      {"policy.name=mlp-offload", "policy.sub_group_size=2e5"},
      // zero-infinity as ZeRO-Offload: every state and fp32 gradient in host memory, with the
      // parameters on NVMe and on the GPU.
      {"policy.name=zero-infinity", "policy.offload_optimizer=cpu"},
      {"policy.name=zero-infinity", "policy.offload_optimizer=cpu", "policy.offload_param=none"},
  };
  for (const auto& sets : cases) {
    TempDir root("mechanisms");
    const Schedule schedule = ExpectReproduces(sets, config, *reference, Label(sets), &root);
    if (std::find(sets.begin(), sets.end(), "policy.offload_optimizer=cpu") != sets.end()) {
      EXPECT_FALSE(HasTask(schedule, Op::kRead, "read.states")) << "no state is read from the disk";
      EXPECT_FALSE(HasTask(schedule, Op::kWrite, "write.grad.")) << "no gradient is flushed to it";
      EXPECT_TRUE(HasPersistentBuffer(schedule, "states.")) << "host memory holds the states";
    }
    if (sets.back() == "policy.sub_group_size=2e5") {
      EXPECT_GT(fs::file_size(root.str() + "/remote0/tierflow-run.store"), 0u) << "the remote tier holds state";
      EXPECT_TRUE(HasPersistentBuffer(schedule, "states.")) << "and host memory caches some";
    }
  }
}

// Whether the schedule updates a sub-group on the GPU: an optimizer task on a GPU's resource, its
// states in a persistent buffer of a GPU pool.
bool UpdatesOnTheGpu(const Schedule& s) {
  auto on_gpu = [&s](int32_t device) { return s.devices()[static_cast<size_t>(device)].kind == DeviceKind::kGpu; };
  for (const TaskSpec& t : s.tasks()) {
    if (t.op != Op::kOptimizer || !on_gpu(s.resources()[static_cast<size_t>(t.resource)].device)) continue;
    for (int32_t b : t.uses) {
      const BufferSpec& buf = s.buffers()[static_cast<size_t>(b)];
      if (buf.persistent && on_gpu(s.pools()[static_cast<size_t>(buf.pool)].device)) return true;
    }
  }
  return false;
}

// The update where the schedule puts it (docs/schedule-format.md "Where a sub-group is
// updated"): every sub-group's states on the GPU (tierflow's gpu_sub_groups all, zero-infinity's
// offload_optimizer none); a three-way split — the first sub-group on the GPU, the last cached in
// host memory, the rest on NVMe — with gradients in host memory or flushed to disk, the update
// overlapped with backward; ZeRO-Offload++'s ratio; micro-steps and tied embeddings; parameters on
// NVMe (the update's rounded parameters sent home). Each bit for bit the in-memory loop's weights
// and losses.
TEST(Executor, OptimizerStatesOnTheGpuOrSplitReproduceTheInMemoryWeights) {
  const std::vector<std::vector<std::string>> cases = {
      {"policy.name=tierflow", "policy.offload_param=none", "policy.gpu_sub_groups=all"},
      {"policy.name=tierflow", "policy.offload_param=none", "policy.sub_group_size=1e6", "policy.gpu_sub_groups=1", "policy.cached_sub_groups=1"},
      {"policy.name=tierflow", "policy.offload_param=none", "policy.sub_group_size=1e6", "policy.gpu_sub_groups=2", "policy.host_gradients=false",
       "policy.overlap_optimizer=true"},
      {"policy.name=tierflow", "policy.offload_param=none", "policy.sub_group_size=1e6", "policy.gpu_sub_groups=1",
       "training.gradient_accumulation_steps=2", "model.tied_embeddings=true"},
      // Parameters on NVMe: the update's rounded parameters leave the GPU for their disk.
      {"policy.name=tierflow", "policy.sub_group_size=1e6", "policy.gpu_sub_groups=2", "policy.cached_sub_groups=1"},
      {"policy.name=tierflow", "policy.gpu_sub_groups=all", "policy.semi_async_writeback=false", "policy.host_gradients=false"},
      {"policy.name=zero-infinity", "policy.offload_param=none", "policy.offload_optimizer=none"},
      {"policy.name=zero-infinity", "policy.offload_param=none", "policy.offload_optimizer=cpu", "policy.ratio=0.5", "policy.sub_group_size=1e6"},
  };
  for (const auto& sets : cases) {
    const std::string label = Label(sets);
    const Schedule schedule = ExpectReproducesItsReference(sets);
    EXPECT_TRUE(UpdatesOnTheGpu(schedule)) << label;
    if (std::find(sets.begin(), sets.end(), "policy.offload_param=none") == sets.end()) {
      EXPECT_TRUE(HasTask(schedule, Op::kD2H, "d2h.p16.")) << label << "sends the rounded parameters home";
    }
    if (sets.size() > 3 && sets[3] == "policy.gpu_sub_groups=1" && sets.back() == "policy.cached_sub_groups=1") {  // all three tiers
      EXPECT_TRUE(HasTask(schedule, Op::kRead, "read.states")) << "NVMe holds some states";
      EXPECT_TRUE(HasTask(schedule, Op::kOptimizer, "adam.sg")) << label;
      int on_cpu = 0;
      for (const TaskSpec& t : schedule.tasks()) on_cpu += t.op == Op::kOptimizer && schedule.resources()[static_cast<size_t>(t.resource)].name.rfind("cpu", 0) == 0;
      EXPECT_GE(on_cpu, 2) << "the host updates the cached one and those on NVMe";
    }
  }
}

// zero-infinity's backward epilogue in DeepSpeed's order on a tiny model whose gradients reach
// DeepSpeed's swap minimum (ffn 1024: 1 MiB of fp32 per MLP weight): on the emulated GPU each
// gradient widened into a buffer of its own, then copied into the pinned staging and written; as
// planned for a GPU, widened into the staging by the swap-out. One bucket, several, and with
// micro-steps, each bit for bit the in-memory loop's.
TEST(Executor, ZeroInfinitysSwappedGradientsReproduceTheInMemoryWeights) {
  const std::vector<std::vector<std::string>> cases = {
      {"model.ffn=1024"},
      {"model.ffn=1024", "policy.reduce_bucket_size=3e5"},
      {"model.ffn=1024", "training.gradient_accumulation_steps=2"},
      {"model.ffn=1024", "policy.reduce_bucket_size=3e5", "hardware.node.gpu.shares_host_cores=false"},
  };
  for (const auto& sets : cases) {
    const std::string label = Label(sets);
    const Schedule schedule = ExpectReproducesItsReference(sets);
    int copies = 0, writes = 0;
    for (const TaskSpec& t : schedule.tasks()) {
      copies += t.op == Op::kConvert && t.kernel == Kernel::kCopy;
      writes += t.op == Op::kWrite && t.id.rfind("write.grad.", 0) == 0;
    }
    EXPECT_GT(writes, 0) << label << "writes gradients";
    EXPECT_EQ(copies > 0, sets.back() != "hardware.node.gpu.shares_host_cores=false") << label;
  }
}

// The h2d of a sub-group's updated parameters names what it refreshes on the GPU (the planner once
// moved the list away before copying it): without tensors the GPU keeps iteration 0's values.
TEST(Executor, GpuResidentParametersAreRefreshedByTheirH2d) {
  const Schedule s = PlanOrDie(LoadTiny({"policy.name=tierflow", "policy.offload_param=none"}));
  int refreshes = 0;
  for (const TaskSpec& t : s.tasks()) {
    if (t.op != Op::kH2D || t.id.rfind("h2d.p16.", 0) != 0) continue;
    ++refreshes;
    EXPECT_FALSE(t.tensors.empty()) << t.id;
    for (int32_t ti : t.tensors) EXPECT_EQ(s.devices()[static_cast<size_t>(s.tensors()[static_cast<size_t>(ti)].device)].name, "gpu0") << t.id;
  }
  EXPECT_GT(refreshes, 0);
}

// Clipping by the global norm: the executor clips exactly as the in-memory loop, and clipping
// changes the loss curve (the tiny model's gradient norm is above 0.05 from the start).
TEST(Executor, GradientClippingMatchesTheReferenceAndChangesTraining) {
  const policies::Scenario zi = LoadTiny({"training.gradient_clipping=0.05"});
  const TrainConfig clipped = ConfigFor(zi);
  ASSERT_EQ(clipped.gradient_clipping, 0.05);
  auto reference = RunInMemory(clipped, kIterations);
  ASSERT_TRUE(reference.ok()) << reference.status().ToString();
  auto unclipped = RunInMemory(ConfigFor(LoadTiny({})), kIterations);
  ASSERT_TRUE(unclipped.ok()) << unclipped.status().ToString();
  EXPECT_EQ(reference->loss.front(), unclipped->loss.front());  // the first forward is before any update
  EXPECT_NE(reference->loss.back(), unclipped->loss.back());
  for (const std::string policy : {"zero-infinity", "mlp-offload"}) {
    TempDir root(std::string("clip-") + policy);
    RunOptions options;
    options.iterations = kIterations;
    options.disk_root = root.str();
    auto run = RunSchedule(PlanOrDie(LoadTiny({"training.gradient_clipping=0.05", std::string("policy.name=") + policy})), clipped, options);
    ASSERT_TRUE(run.ok()) << policy << ": " << run.status().ToString();
    EXPECT_EQ(run->loss, reference->loss) << policy;
    EXPECT_TRUE(SameBits(run->master, reference->master)) << policy;
  }
}

// Weight decay (on the matrices only) and a warmed-up cosine schedule: every policy's updates,
// sub-group by sub-group, take the in-memory reference's, bit for bit, and the training differs
// from a constant rate without decay.
TEST(Executor, WeightDecayAndTheRateScheduleMatchTheReference) {
  const std::vector<std::string> sets = {"training.optimizer={lr: 2e-3, weight_decay: 0.1}",
                                         "training.lr_schedule={type: cosine, warmup_steps: 1, total_steps: 3, min_lr_ratio: 0.1}"};
  const TrainConfig config = ConfigFor(LoadTiny(sets));
  ASSERT_EQ(config.adam.weight_decay, 0.1f);
  ASSERT_EQ(config.lr_schedule.type, "cosine");
  auto reference = RunInMemory(config, kIterations);
  ASSERT_TRUE(reference.ok()) << reference.status().ToString();
  auto plain = RunInMemory(ConfigFor(LoadTiny({})), kIterations);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(SameBits(plain->master, reference->master));
  for (const std::string policy : {"zero-infinity", "mlp-offload", "ioc"}) {
    TempDir root(std::string("decay-") + policy);
    RunOptions options;
    options.iterations = kIterations;
    options.disk_root = root.str();
    std::vector<std::string> planned = sets;
    planned.push_back("policy.name=" + policy);
    auto run = RunSchedule(PlanOrDie(LoadTiny(planned)), config, options);
    ASSERT_TRUE(run.ok()) << policy << ": " << run.status().ToString();
    EXPECT_EQ(run->loss, reference->loss) << policy;
    EXPECT_TRUE(SameBits(run->master, reference->master)) << policy;
  }
}

// An update overlapped with backward cannot wait for the global check: with dynamic loss scaling
// or clipping the planner refuses it, naming the knob, and so does the executor for a schedule
// planned without them but run with them.
TEST(Executor, AnOverlappedUpdateIsRefusedWhenTheMathNeedsTheGlobalCheck) {
  for (const std::string set : {"training.loss_scaling=dynamic", "training.gradient_clipping=1.0"}) {
    auto planned = policies::Plan(LoadTiny({"policy.name=hitrain", set}));
    ASSERT_FALSE(planned.ok()) << set;
    EXPECT_NE(planned.status().message().find("policy.overlap_optimizer"), std::string::npos) << planned.status().ToString();
    EXPECT_NE(planned.status().message().find(set.substr(0, set.find('='))), std::string::npos) << planned.status().ToString();
  }
  const policies::Scenario fuyou = LoadTiny({"policy.name=fuyou"});
  TrainConfig dynamic = ConfigFor(fuyou);
  dynamic.dynamic_loss_scaling = true;
  const Status st = CheckRunnable(PlanOrDie(fuyou), dynamic);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("without a global gradient check"), std::string::npos) << st.ToString();
}

// A run checkpointed after each iteration and resumed ends where an uninterrupted run does, for a
// schedule whose optimizer states live in host memory (mlp-offload's cache: the checkpoint reads
// them from there), on the GPU (tierflow's gpu_sub_groups: read back from gpu0's memory, and
// written there again by the resume), as for one that streams them from disk.
TEST(Executor, AResumedRunEndsWhereAnUninterruptedOneDoes) {
  for (const std::string policy : {"zero-infinity", "mlp-offload", "tierflow"}) {
    const policies::Scenario s =
        LoadTiny(policy == "tierflow" ? std::vector<std::string>{"policy.name=tierflow", "policy.offload_param=none", "policy.gpu_sub_groups=all"}
                                      : std::vector<std::string>{"policy.name=" + policy});
    const Schedule schedule = PlanOrDie(s);
    const TrainConfig config = ConfigFor(s);
    TempDir root("resume-" + policy), ckpt("resume-ckpt-" + policy);
    RunOptions options;
    options.disk_root = root.str();
    options.iterations = kIterations;
    auto whole = RunSchedule(schedule, config, options);
    ASSERT_TRUE(whole.ok()) << policy << ": " << whole.status().ToString();
    options.iterations = kIterations - 1;
    options.checkpoint_dir = ckpt.str();
    options.checkpoint_every = 1;
    auto first = RunSchedule(schedule, config, options);
    ASSERT_TRUE(first.ok()) << policy << ": " << first.status().ToString();
    options.iterations = kIterations;
    options.resume = true;
    auto resumed = RunSchedule(schedule, config, options);
    ASSERT_TRUE(resumed.ok()) << policy << ": " << resumed.status().ToString();
    EXPECT_EQ(resumed->first_iteration, kIterations - 1) << policy;
    EXPECT_TRUE(SameBits(resumed->master, whole->master)) << policy;
  }
}

// `iterations` with the disks under `root` and a checkpoint in `ckpt` after each.
RunOptions CheckpointedEachIteration(const TempDir& root, const TempDir& ckpt, int64_t iterations) {
  RunOptions options;
  options.disk_root = root.str();
  options.iterations = iterations;
  options.checkpoint_dir = ckpt.str();
  options.checkpoint_every = 1;
  return options;
}

// The run's checkpoint in `dir` with its meta record's `key` set to `value` (JSON), saved again as
// a committed checkpoint: what a damaged or hand-edited checkpoint looks like to a resume.
void EditCheckpointMeta(const std::string& dir, const std::string& key, const std::string& value) {
  auto storage = NewPosixStorage();
  CheckpointOptions o;
  o.dirs = {dir};
  o.name = "tierflow-run";
  std::map<std::string, std::vector<char>> bytes;
  ASSERT_TRUE(LoadCheckpoint(*storage, o, [&](const CheckpointEntry& e) {
                auto& b = bytes[e.name];
                b.resize(static_cast<size_t>(e.size_bytes));
                return static_cast<void*>(b.data());
              }).ok());
  auto meta = nlohmann::json::parse(std::string(bytes["meta"].begin(), bytes["meta"].end()));
  meta[key] = nlohmann::json::parse(value);
  const std::string text = meta.dump();
  bytes["meta"].assign(text.begin(), text.end());
  std::vector<CheckpointTensor> tensors;
  for (const auto& [name, b] : bytes) tensors.push_back({name, name == "meta" ? "u8" : "fp32", 0, b.data(), static_cast<int64_t>(b.size())});
  ASSERT_TRUE(SaveCheckpoint(*storage, tensors, o).ok());
}

// A resume checks the checkpoint's meta record field by field before anything else: a damaged
// value is named, and a checkpoint claiming more iterations than asked for is refused at once
// (it skipped 1e10 batches for minutes first).
TEST(Executor, ADamagedCheckpointMetaIsRefusedNamingTheField) {
  const policies::Scenario zi = LoadTiny({});
  const Schedule schedule = PlanOrDie(zi);
  TempDir root("meta"), ckpt("meta-ckpt");
  RunOptions options = CheckpointedEachIteration(root, ckpt, 1);
  ASSERT_TRUE(RunSchedule(schedule, ConfigFor(zi), options).ok());
  options.iterations = 3;
  options.resume = true;
  EditCheckpointMeta(ckpt.str(), "iterations_done", "10000000000");
  auto run = RunSchedule(schedule, ConfigFor(zi), options);
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("already has 10000000000 iterations"), std::string::npos) << run.status().ToString();
  for (const auto& [key, value, why] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"iterations_done", "-1", "'iterations_done' is -1, not an integer in [0, 1099511627776]"},
           {"updates", "\"many\"", "'updates' is \"many\", not an integer in [0, 1]"},
           {"good_steps", "7", "'good_steps' is 7, not an integer in [0, 1]"},
           {"loss_scale", "1e300", "'loss_scale' is 1e+300, not a finite number > 0"}}) {
    EditCheckpointMeta(ckpt.str(), "iterations_done", "1");
    EditCheckpointMeta(ckpt.str(), key, value);
    auto damaged = RunSchedule(schedule, ConfigFor(zi), options);
    ASSERT_FALSE(damaged.ok()) << key;
    EXPECT_EQ(damaged.status().code(), StatusCode::kDataLoss) << damaged.status().ToString();
    EXPECT_NE(damaged.status().message().find(why), std::string::npos) << damaged.status().ToString();
    EditCheckpointMeta(ckpt.str(), key, key == "loss_scale" ? "1.0" : "0");
  }
}

// A diverged run (a learning rate of infinity makes the weights NaN) stops at its checkpoint
// instead of replacing the last good one with NaN weights.
TEST(Executor, ANonFiniteStateIsNeverCheckpointed) {
  const policies::Scenario zi = LoadTiny({});
  TempDir root("diverge"), ckpt("diverge-ckpt");
  RunOptions options = CheckpointedEachIteration(root, ckpt, 1);
  ASSERT_TRUE(RunSchedule(PlanOrDie(zi), ConfigFor(zi), options).ok());
  const auto manifest = fs::last_write_time(ckpt.str() + "/tierflow-run.manifest.json");
  TrainConfig diverging = ConfigFor(zi);
  diverging.adam.lr = std::numeric_limits<float>::infinity();
  options.iterations = 2;
  options.resume = true;
  auto run = RunSchedule(PlanOrDie(zi), diverging, options);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), StatusCode::kDataLoss) << run.status().ToString();
  EXPECT_NE(run.status().message().find("not written after iteration 1: master element"), std::string::npos) << run.status().ToString();
  EXPECT_EQ(fs::last_write_time(ckpt.str() + "/tierflow-run.manifest.json"), manifest) << "the good checkpoint is kept";
}

// The run's checkpoints go through the run's storage: a fault injected there stops the run with
// the checkpoint named (before, checkpoints opened their own posix storage and never saw it).
TEST(Executor, ACheckpointThatCannotBeWrittenStopsTheRunNamingIt) {
  const policies::Scenario zi = LoadTiny({});
  TempDir root("ckpt-fault"), ckpt("ckpt-fault-dir");
  RunOptions options = CheckpointedEachIteration(root, ckpt, 2);
  FaultRule broken;
  broken.ops = static_cast<uint32_t>(FaultOpMask::kWrite);
  broken.path_contains = ckpt.str();
  broken.error = EIO;
  broken.count = -1;
  options.faults = {broken};
  auto run = RunSchedule(PlanOrDie(zi), ConfigFor(zi), options);
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("checkpoint '" + ckpt.str() + "'"), std::string::npos) << run.status().ToString();
  EXPECT_NE(run.status().message().find("Input/output error"), std::string::npos) << run.status().ToString();
}

// A long run keeps the records of its last keep_iterations iterations only, and hands every
// record to on_record exactly once: the same records a run that keeps all of them returns. An
// error from on_record stops the run with it.
TEST(Executor, TheRecordWindowKeepsTheLastIterationsAndHandsOnEveryRecordOnce) {
  const policies::Scenario zi = LoadTiny({});
  const Schedule schedule = PlanOrDie(zi);
  const TrainConfig config = ConfigFor(zi);
  constexpr int64_t kRun = 7, kKeep = 2;
  auto key = [](const TraceRecord& r) { return std::make_tuple(r.iteration, r.task, r.op, r.resource); };
  using Key = decltype(key(TraceRecord{}));
  TempDir all_root("window-all");
  RunOptions options;
  options.iterations = kRun;
  options.disk_root = all_root.str();
  auto all = RunSchedule(schedule, config, options);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  std::vector<Key> every;
  for (const TraceRecord& r : all->records) every.push_back(key(r));
  std::sort(every.begin(), every.end());
  ASSERT_EQ(static_cast<int64_t>(every.size()), kRun * static_cast<int64_t>(schedule.tasks().size()));

  TempDir window_root("window");
  options.disk_root = window_root.str();
  options.keep_iterations = kKeep;
  std::vector<Key> handed;
  options.on_record = [&](const TraceRecord& r) {
    handed.push_back(key(r));
    return Status::Ok();
  };
  auto windowed = RunSchedule(schedule, config, options);
  ASSERT_TRUE(windowed.ok()) << windowed.status().ToString();
  std::sort(handed.begin(), handed.end());
  EXPECT_EQ(handed, every);  // each once: sorted lists of distinct instances are equal
  EXPECT_EQ(static_cast<int64_t>(windowed->records.size()), kKeep * static_cast<int64_t>(schedule.tasks().size()));
  for (const TraceRecord& r : windowed->records) EXPECT_GE(r.iteration, kRun - kKeep) << r.task;
  EXPECT_TRUE(SameBits(windowed->master, all->master));

  TempDir failing_root("window-fail");
  options.disk_root = failing_root.str();
  int64_t calls = 0;
  options.on_record = [&](const TraceRecord&) { return ++calls == 10 ? Internal("the records file is full") : Status::Ok(); };
  auto failed = RunSchedule(schedule, config, options);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("the records file is full"), std::string::npos) << failed.status().ToString();
}

// A directory another run (or checkpoint, or probe) holds is refused with the holder's pid,
// before anything in it is truncated; once the holder lets go, the run goes ahead.
TEST(Executor, ADirectoryInUseIsRefusedNamingItsHolder) {
  const policies::Scenario zi = LoadTiny({});
  TempDir d0("locked"), ckpt("locked-ckpt");
  std::ofstream(d0.str() + "/tierflow-run.store") << "another run's state";
  RunOptions options;
  options.iterations = 1;
  options.disks = {d0.str()};
  {
    auto held = DirLock::Acquire(d0.str(), "test");
    ASSERT_TRUE(held.ok()) << held.status().ToString();
    auto run = RunSchedule(PlanOrDie(zi), ConfigFor(zi), options);
    ASSERT_FALSE(run.ok());
    EXPECT_EQ(run.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(run.status().message().find("--disk '" + d0.str() + "' (nvme0): in use by another tierflow process (pid " +
                                          std::to_string(::getpid()) + ")"),
              std::string::npos)
        << run.status().ToString();
    EXPECT_EQ(fs::file_size(d0.str() + "/tierflow-run.store"), std::string("another run's state").size()) << "left as it was";
  }
  {
    auto held = DirLock::Acquire(ckpt.str(), "test");
    ASSERT_TRUE(held.ok());
    options.checkpoint_dir = ckpt.str();
    options.checkpoint_every = 1;
    auto run = RunSchedule(PlanOrDie(zi), ConfigFor(zi), options);
    ASSERT_FALSE(run.ok());
    EXPECT_NE(run.status().message().find("checkpoint '" + ckpt.str() + "': in use by another tierflow process"), std::string::npos)
        << run.status().ToString();
  }
  auto run = RunSchedule(PlanOrDie(zi), ConfigFor(zi), options);
  EXPECT_TRUE(run.ok()) << run.status().ToString();
}

// The O_DIRECT alignment a file in `dir` needs, or 0 when its file system refuses O_DIRECT.
int64_t DirectAlignment(const std::string& dir) {
  auto io = NewPosixStorage();
  OpenOptions o;
  o.create = true;
  o.direct_fallback = true;
  auto f = io->Open(dir + "/direct-probe", o);
  if (!f.ok()) return 0;
  const int64_t alignment = f->direct ? f->alignment : 0;
  (void)io->Close(f->id);
  (void)io->Remove(dir + "/direct-probe");
  return alignment;
}

TEST(Executor, TaskIoRunsWithTheSchedulesShapeAndBypassesThePageCache) {
  // Every tensor of the tiny model is aligned as the store file's O_DIRECT needs (its
  // STATX_DIOALIGN, else 4 KiB), so no byte goes through the page cache, which would run at
  // memory speed; and each read or write records the request shape the schedule gave it.
  const policies::Scenario zi = LoadTiny({"policy.block_size=16KiB", "policy.queue_depth=2"});
  TempDir d0("shape");
  const int64_t alignment = DirectAlignment(d0.str());
  if (alignment == 0) GTEST_SKIP() << "the temporary directory's file system refuses O_DIRECT";
  // tiny's tensors start and end on 512-byte boundaries (units of 256 bf16 elements), not all on
  // 4 KiB ones: a disk with 4 KiB logical blocks sends some through the page cache (run says so).
  if (alignment > 512) GTEST_SKIP() << "O_DIRECT here needs " << alignment << "-byte alignment; tiny's tensors have 512";
  RunOptions options;
  options.iterations = 1;
  options.disks = {d0.str()};
  auto run = RunSchedule(PlanOrDie(zi), ConfigFor(zi), options);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_GT(run->direct_io_bytes, 0);
  EXPECT_EQ(run->buffered_io_bytes, 0);
  int io = 0;
  for (const TraceRecord& r : run->records) {
    if (r.op != Op::kRead && r.op != Op::kWrite) continue;
    ++io;
    EXPECT_EQ(r.block_bytes, 16384) << r.task;
    EXPECT_EQ(r.queue_depth, 2) << r.task;
  }
  EXPECT_GT(io, 0);
}

// A host buffer's memory is cut from its pool's arena, made at set-up: before, each was mapped
// and faulted in when a task first took it, on the dispatch thread, and every task in flight
// waited (a quarter of a second for one of ioc's 200 MB parameter slots). Pools of one buffer
// size cannot fragment, and each instance in an arena that holds them all has its own piece:
// zero-infinity's and ioc split's pools are one or the other. (Pools of several sizes that
// cannot hold them all can fragment, as the dispatcher's timing falls: ioc with sub-groups of
// 1e6 elements made 5 MB mid-run in one CI run, none in others.)
TEST(Executor, HostBuffersAreCutFromMemoryMadeAtSetUp) {
  for (const std::vector<std::string>& sets : std::vector<std::vector<std::string>>{{}, {"policy.name=ioc", "policy.disk_layout=split"}}) {
    const policies::Scenario sc = LoadTiny(sets);
    const std::string label = sets.empty() ? "zero-infinity" : sets.back();
    TempDir root("arena");
    RunOptions options;
    options.iterations = 4;
    options.disk_root = root.str();
    auto run = RunSchedule(PlanOrDie(sc), ConfigFor(sc), options);
    ASSERT_TRUE(run.ok()) << label << ": " << run.status().ToString();
    EXPECT_EQ(run->host_bytes_made_in_run, 0) << label;
  }
}

// Removing the deps that order a layer's reduce-scatters (and so its gradient copies) after its
// backward would make them read gradients the backward has not produced. They use the GPU buffer
// the backward allocates, so the schedule's own rules already refuse it, naming the task.
TEST(Executor, GradientCopiesBeforeTheirBackwardAreRefusedByTheSchedulesRules) {
  const policies::Scenario zi = LoadTiny({});
  Schedule s = PlanOrDie(zi);
  for (TaskSpec& t : s.mutable_tasks()) {
    if (t.op == Op::kReduceScatter) t.deps.clear();
  }
  const Status st = s.Validate();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("task 'reducescatter."), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("uses buffer 'grad.gpu."), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("without depending on"), std::string::npos) << st.ToString();
}

// Without the carried deps that hold an iteration back until the previous one's update, the next
// iteration's first compute (the GPU-resident embedding) runs while the update is still to come:
// the version check stops the run, naming the task, instead of training on stale weights. The
// reads are slowed so that the first iteration is still fetching when the second could start.
TEST(Executor, StaleStateIsAnErrorNotSilentTraining) {
  const policies::Scenario zi = LoadTiny({});
  Schedule s = PlanOrDie(zi);
  for (TaskSpec& t : s.mutable_tasks()) t.carried.clear();
  ASSERT_TRUE(s.Validate().ok());
  TempDir d0("stale");
  RunOptions options;
  options.iterations = 2;
  options.disks = {d0.str()};
  options.storage = "memory";
  FaultRule slow;
  slow.kind = FaultKind::kDelay;
  slow.ops = static_cast<uint32_t>(FaultOpMask::kRead);
  slow.count = -1;
  slow.delay_s = 0.05;
  options.faults = {slow};
  auto run = RunSchedule(s, ConfigFor(zi), options);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), StatusCode::kFailedPrecondition) << run.status().ToString();
  EXPECT_NE(run.status().message().find("(iteration 1)"), std::string::npos) << run.status().ToString();
  EXPECT_NE(run.status().message().find("a dependency is missing"), std::string::npos) << run.status().ToString();
}

// gpu0 holds what the schedule's GPU pool holds: the gathered parameters and a reduce bucket's
// gradients while their tasks hold them, and the GPU-resident parameters, never more: the device's
// peak is within the pool's, and what it keeps for reuse within the pool's capacity. A pool of
// 8 MiB, with every unit offloaded (no persistent parameters) and reduce buckets of 1e5 elements
// (at DeepSpeed's 5e8 one bucket holds all of tiny's 13 MB of fp32 gradients), and no parameter
// kept gathered from the forward to the backward (at DeepSpeed's reuse distance of 1e9 all of
// tiny's are: 6.6 MB of bf16), holds less than the 6 bytes per parameter of a whole-model copy
// (19.8 MB for tiny), and the weights are those of the run with room to spare.
TEST(Executor, GpuMemoryIsBoundedByTheSchedulesGpuPool) {
  std::vector<float> roomy;
  for (const std::string hbm : {"80GiB", "8MiB"}) {
    SCOPED_TRACE("gpu hbm " + hbm);
    const policies::Scenario zi =
        LoadTiny({"policy.param_persistence_threshold=0", "policy.reduce_bucket_size=100000", "policy.max_reuse_distance=0",
                  "hardware.node.gpu.hbm=" + hbm});
    const Schedule s = PlanOrDie(zi);
    TempDir d0("gpu-memory");
    RunOptions options;
    options.iterations = 2;
    options.disks = {d0.str()};
    auto run = RunSchedule(s, ConfigFor(zi), options);
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    const int32_t pool = s.FindPool("gpu0.hbm");
    ASSERT_NE(pool, kNoIndex);
    const int64_t capacity = s.pools()[static_cast<size_t>(pool)].capacity_bytes;
    EXPECT_GT(run->gpu_memory.allocated, 0);
    EXPECT_LE(run->gpu_memory.allocated, run->pool_peak_bytes[static_cast<size_t>(pool)]);
    EXPECT_GE(run->gpu_memory.reserved, run->gpu_memory.allocated);
    EXPECT_LE(run->gpu_memory.reserved, capacity);
    if (roomy.empty()) {
      roomy = run->master;
      continue;
    }
    const int64_t whole = MakeParamLayout(ConfigFor(zi).spec.config).total * 6;
    EXPECT_LT(capacity, whole);
    EXPECT_TRUE(SameBits(run->master, roomy)) << "the weights differ from the run with room to spare";
  }
}

// A task that works on host memory (here a read) given a buffer in a GPU pool is one clear error
// naming the buffer and the pool: on a real GPU that memory is not the host's to address.
TEST(Executor, AHostTaskGivenAGpuBufferIsAnError) {
  const policies::Scenario zi = LoadTiny({"policy.name=memascend"});
  const Schedule planned = PlanOrDie(zi);
  // The first parameter slot moves from its pinned pool to the GPU's.
  const int32_t slot = planned.FindBuffer("slot.model.layers.0.mlp.gate_proj.weight.f0.r0");
  ASSERT_NE(slot, kNoIndex);
  const std::string pinned = planned.pools()[static_cast<size_t>(planned.buffers()[static_cast<size_t>(slot)].pool)].name;
  const Schedule s = EditedOrDie(planned, "\"slot.model.layers.0.mlp.gate_proj.weight.f0.r0\"", "\"pool\":\"" + pinned + "\"",
                                 "\"pool\":\"gpu0.hbm\"");
  const Status st = CheckRunnable(s, ConfigFor(zi));  // refused when loaded, before anything runs
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("buffer 'slot.model.layers.0.mlp.gate_proj.weight.f0.r0' is not in host memory, and a read task on a CPU or disk works on host memory"),
            std::string::npos)
      << st.ToString();
  EXPECT_EQ(RunOnce(s, zi, "gpu-buffer").status().message(), st.message());
}

// What no op can do is refused when the schedule is loaded, naming the task and the rule: a
// compute without a kernel, an h2d of master weights, a conversion on a GPU's resource, an update
// on the GPU naming parameters off it, a disk write of state homed in host memory, a copy of two
// tensors.
TEST(Executor, WhatTheExecutorCannotRunIsRefusedWhenLoaded) {
  const policies::Scenario zi = LoadTiny({});
  const TrainConfig config = ConfigFor(zi);
  const Schedule planned = PlanOrDie(zi);
  const Schedule no_kernel = EditedOrDie(planned, "\"id\":\"fwd.", "\"kernel\":\"fwd\",", "");
  Status st = CheckRunnable(no_kernel, config);
  EXPECT_NE(st.message().find("(compute): names no kernel (fwd, bwd)"), std::string::npos) << st.ToString();
  // (its bytes with the master's 3295488 fp32 elements added: a copy moves exactly its tensors)
  const Schedule master_to_gpu = EditedOrDie(planned, "\"id\":\"h2d.", "\"tensors\":[\"param16",
                                             "\"tensors\":[\"master.r0[0+3295488]@nvme0\",\"param16",
                                             {{"\"id\":\"h2d.", "\"bytes\":352256,", "\"bytes\":" + std::to_string(352256 + 3295488 * 4) + ","}});
  st = CheckRunnable(master_to_gpu, config);
  EXPECT_NE(st.message().find("(h2d): copies 'master.r0[0+3295488]@nvme0' (master) to the GPU; only param16, and gradients (grad16, grad) for an update there, go there"),
            std::string::npos)
      << st.ToString();
  // Host work on a GPU's resource; an update on the GPU naming host state (a bf16 gradient).
  const Schedule convert_on_gpu = EditedOrDie(planned, "\"id\":\"convert.p16.sg0.r0.c0\"", "\"resource\":\"cpu.r0\"", "\"resource\":\"gpu0.compute\"");
  st = CheckRunnable(convert_on_gpu, config);
  EXPECT_NE(st.message().find("task 'convert.p16.sg0.r0.c0' (convert): runs on resource 'gpu0.compute', a GPU's; a convert task runs on the host"),
            std::string::npos)
      << st.ToString();
  const policies::Scenario on_gpu = LoadTiny({"policy.name=tierflow", "policy.offload_param=none", "policy.gpu_sub_groups=all"});
  const Schedule host_state = EditedOrDie(PlanOrDie(on_gpu), "\"id\":\"adam.sg0.r0\"", "\"param16.r0[0+328192]@gpu0\"", "\"grad16.r0[3229952+65536]@host\"");
  st = CheckRunnable(host_state, ConfigFor(on_gpu));
  EXPECT_NE(st.message().find("task 'adam.sg0.r0' (optimizer): names 'grad16.r0[3229952+65536]@host' (grad16); an update on a GPU names its "
                              "states and the param16 it refreshes only"),
            std::string::npos)
      << st.ToString();
  const Schedule write_to_host = EditedOrDie(planned, "\"name\":\"param16.r0[", "\"device\":\"nvme0\"", "\"device\":\"host\"");
  // A copy of two tensors into one buffer (zero-infinity's swap-out, on a model whose gradients
  // are written: tiny with ffn 1024).
  const policies::Scenario swapped = LoadTiny({"model.ffn=1024"});
  const std::string head = "\"grad.r0[4262144+65536]@host\"";
  const Schedule two = EditedOrDie(PlanOrDie(swapped), "\"id\":\"copy.grad.lm_head.weight.b0.r0\"", "\"tensors\":[" + head + "]",
                                   "\"tensors\":[" + head + "," + head + "]");
  st = CheckRunnable(two, ConfigFor(swapped));
  EXPECT_NE(st.message().find("(convert): copy names one tensor and allocates one buffer, the one it copies the tensor into"), std::string::npos)
      << st.ToString();
  st = CheckRunnable(write_to_host, config);
  EXPECT_NE(st.message().find("not a storage device"), std::string::npos) << st.ToString();
}

// A disk's store file is read and written either all with O_DIRECT or all through the page
// cache, never both: the two are not coherent on shared pages (a unit's tail page written
// buffered next to its sub-group's direct write lost bytes of it). Wherever the temporary
// directory's file system needs more alignment than tiny's tensors have, everything is buffered.
TEST(Executor, ADiskFileIsReadAndWrittenOneWayOnly) {
  const policies::Scenario zi = LoadTiny({});
  auto run = RunOnce(PlanOrDie(zi), zi, "one-way");
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_GT(run->direct_io_bytes + run->buffered_io_bytes, 0);
  EXPECT_TRUE(run->direct_io_bytes == 0 || run->buffered_io_bytes == 0)
      << run->direct_io_bytes << " bytes direct and " << run->buffered_io_bytes << " through the page cache";
}

// A model whose tensors are multiples of 2048 elements (hidden 2048), cut into sub-groups and
// parameter chunks whose sizes are not: the planners put those boundaries on 4 KiB
// (docs/policies.md "I/O alignment"), so on a store that needs 4 KiB for O_DIRECT (the memory
// back-end checks it as such a file system would) every byte moves direct — before, every byte
// went through the page cache — with the in-memory run's weights. tiny, whose norms are 512
// bytes, stays buffered on the same store.
TEST(Executor, AModelOf4KiBTensorsIsReadAndWrittenAllDirect) {
  const policies::Scenario aligned = LoadTiny({"model.hidden=2048", "model.ffn=2048", "model.layers=1", "model.heads=16",
                                               "model.kv_heads=16", "policy.sub_group_size=3000000",
                                               "policy.buffer_size=5000000"});
  TempDir d0("aligned");
  RunOptions options;
  options.iterations = 1;
  options.disks = {d0.str()};
  options.storage = "memory";
  auto run = RunSchedule(PlanOrDie(aligned), ConfigFor(aligned), options);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_GT(run->direct_io_bytes, 0);
  EXPECT_EQ(run->buffered_io_bytes, 0);
  EXPECT_TRUE(run->buffered_disks.empty()) << run->buffered_disks.front();
  auto reference = RunInMemory(ConfigFor(aligned), 1);
  ASSERT_TRUE(reference.ok()) << reference.status().ToString();
  EXPECT_TRUE(SameBits(run->master, reference->master));

  const policies::Scenario tiny = LoadTiny({});
  auto unaligned = RunSchedule(PlanOrDie(tiny), ConfigFor(tiny), options);
  ASSERT_TRUE(unaligned.ok()) << unaligned.status().ToString();
  EXPECT_EQ(unaligned->direct_io_bytes, 0);
  EXPECT_GT(unaligned->buffered_io_bytes, 0);
  // Why, naming a tensor that is not aligned (tiny's first unaligned one on disk) and the rule.
  ASSERT_EQ(unaligned->buffered_disks.size(), 1u);
  EXPECT_NE(unaligned->buffered_disks[0].find("nvme0: tensor '"), std::string::npos) << unaligned->buffered_disks[0];
  EXPECT_NE(unaligned->buffered_disks[0].find("is not aligned to the 4096 bytes its O_DIRECT needs"), std::string::npos)
      << unaligned->buffered_disks[0];
}

// The optimizer's pinned pool cut to a sub-group's states alone: the optimizer step holds its
// gradient as well, so the schedule is refused when loaded, naming the task and the pool.
TEST(Executor, APoolTooSmallForOneTaskIsRefusedBeforeRunning) {
  const policies::Scenario zi = LoadTiny({"policy.name=memascend"});
  const Schedule s = PlanOrDie(zi);
  const int32_t pool = s.FindPool("host.pinned.opt.r0");
  const int32_t states = s.FindBuffer("states.sg0.r0");
  ASSERT_NE(pool, kNoIndex);
  ASSERT_NE(states, kNoIndex);
  std::string json = ScheduleToJson(s);
  const std::string from = "\"capacity_bytes\":" + std::to_string(s.pools()[pool].capacity_bytes);
  const size_t at = json.find(from, json.find("\"host.pinned.opt.r0\""));
  ASSERT_NE(at, std::string::npos);
  json.replace(at, from.size(), "\"capacity_bytes\":" + std::to_string(s.buffers()[states].size_bytes));
  auto small = ScheduleFromJson(json);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.status().code(), StatusCode::kResourceExhausted) << small.status().ToString();
  EXPECT_NE(small.status().message().find("task 'adam.sg0.r0' holds 2 buffers of pool 'host.pinned.opt.r0' at once"),
            std::string::npos)
      << small.status().ToString();
}

// Every task's buffers fit their pool, but a gradient buffer is held until the step's state
// write: the optimizer's pinned pool, exactly a sub-group's states and gradient, then cannot
// take both besides it. Whatever the timing, one of the two reads waits for ever: the
// dispatcher's deadlock report, not a hang.
TEST(Executor, HoldAndWaitGetsTheDeadlockReport) {
  const policies::Scenario zi = LoadTiny({"policy.name=memascend", "hardware.preset=cpu-host-1disk"});
  Schedule s = PlanOrDie(zi);
  const int32_t pool = s.FindPool("host.pinned.opt.r0");
  const int32_t states = s.FindBuffer("states.sg0.r0"), gradin = s.FindBuffer("gradin.sg0.r0");
  const int32_t grad = s.FindBuffer("grad.lm_head.weight.b0.r0");
  const int32_t write_grad = s.FindTask("write.grad.lm_head.weight.b0.r0"), write_states = s.FindTask("write.states.sg0.r0");
  ASSERT_TRUE(pool != kNoIndex && states != kNoIndex && gradin != kNoIndex && grad != kNoIndex);
  ASSERT_TRUE(write_grad != kNoIndex && write_states != kNoIndex);
  ASSERT_EQ(s.pools()[pool].capacity_bytes, s.buffers()[states].size_bytes + s.buffers()[gradin].size_bytes);
  IndexList& frees = s.mutable_tasks()[write_grad].frees;
  ASSERT_EQ(frees, std::vector<int32_t>{grad});
  frees.clear();
  s.mutable_tasks()[write_states].frees.push_back(grad);
  ASSERT_TRUE(s.Validate().ok()) << s.Validate().ToString();
  auto run = RunOnce(s, zi, "deadlock");
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), StatusCode::kDeadlock) << run.status().ToString();
  EXPECT_NE(run.status().message().find("waits for pool 'host.pinned.opt.r0'"), std::string::npos) << run.status().ToString();
}

// The optimizer and the conversions run on the threads the schedule gives them (their `ranks`:
// what sim times them with), at most this machine's cores; --threads overrides; each difference
// from the schedule is a note of the run.
// The thread counts the run's records of `op` carry.
std::set<int32_t> ThreadsOfOp(const RunResult& r, Op op) {
  std::set<int32_t> seen;
  for (const TraceRecord& x : r.records) {
    if (x.op == op) seen.insert(x.threads);
  }
  return seen;
}

TEST(Executor, CpuTasksRunOnTheThreadsTheScheduleGives) {
  const int32_t cores = std::max(1, static_cast<int32_t>(std::thread::hardware_concurrency()));
  TempDir d0("threads");
  RunOptions options;
  options.iterations = 1;
  options.disks = {d0.str()};
  const policies::Scenario one_core = LoadTiny({"hardware.node.cpu.cores=1"});
  TrainConfig unset = ConfigFor(one_core);
  unset.threads = 0;  // no --threads (ConfigFor fixes two)
  auto run = RunSchedule(PlanOrDie(one_core), unset, options);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(ThreadsOfOp(*run, Op::kOptimizer), std::set<int32_t>{1});
  EXPECT_EQ(ThreadsOfOp(*run, Op::kConvert), std::set<int32_t>{1});
  EXPECT_TRUE(run->notes.empty()) << run->notes.front();
  // Planned for more cores than this machine has: every core, and a note that says so.
  const policies::Scenario more = LoadTiny({"hardware.node.cpu.cores=" + std::to_string(cores + 7)});
  run = RunSchedule(PlanOrDie(more), unset, options);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(ThreadsOfOp(*run, Op::kOptimizer), std::set<int32_t>{cores});
  ASSERT_EQ(run->notes.size(), 1u);
  EXPECT_NE(run->notes[0].find("cpu.r0: the schedule gives its optimizer and conversions " + std::to_string(cores + 7) + " threads"),
            std::string::npos) << run->notes[0];
  EXPECT_NE(run->notes[0].find("hardware.node.cpu.cores " + std::to_string(cores)), std::string::npos) << run->notes[0];
  // --threads (TrainConfig::threads) overrides the schedule.
  TrainConfig three = unset;
  three.threads = 3;
  run = RunSchedule(PlanOrDie(one_core), three, options);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(ThreadsOfOp(*run, Op::kConvert), std::set<int32_t>{3});
  ASSERT_EQ(run->notes.size(), 1u);
  EXPECT_NE(run->notes[0].find("this run gives them 3 (--threads)"), std::string::npos) << run->notes[0];
  // One resource's tasks with different counts: the largest, and a note.
  const Schedule mixed = EditedOrDie(PlanOrDie(one_core), "\"id\":\"convert.", "\"ranks\":1", "\"ranks\":2");
  run = RunSchedule(mixed, unset, options);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const int32_t two = std::min(2, cores);
  EXPECT_EQ(ThreadsOfOp(*run, Op::kOptimizer), std::set<int32_t>{two});
  ASSERT_EQ(run->notes.size(), 1u);
  EXPECT_NE(run->notes[0].find("cpu.r0: the schedule gives its optimizer and conversions 1 to 2 threads; this run gives each of them " +
                               std::to_string(two)),
            std::string::npos)
      << run->notes[0];
}

TEST(Executor, TheComputeDeviceIsCheckedBeforeTraining) {
  const policies::Scenario zi = LoadTiny({});
  TempDir d0("device");
  RunOptions options;
  options.disks = {d0.str()};
  options.compute = "tpu";
  auto run = RunSchedule(PlanOrDie(zi), ConfigFor(zi), options);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(run.status().message().find("'tpu' (known: cpu, cuda)"), std::string::npos) << run.status().ToString();
  // cuda: runs where there is a GPU (CudaExecutor below); elsewhere says what is missing.
  options.compute = "cuda";
  run = RunSchedule(PlanOrDie(zi), ConfigFor(zi), options);
  if (!run.ok()) {
    EXPECT_EQ(run.status().code(), StatusCode::kUnavailable) << run.status().ToString();
    EXPECT_NE(run.status().message().find("CUDA"), std::string::npos) << run.status().ToString();
  }
}

#ifdef TIERFLOW_TEST_CUDA
// gpu0 on GPU 0: the tiny model trains, and two schedules that move its state differently (one
// disk, zero-infinity; two disks, ioc) and the plain loop with everything in GPU memory end with
// bit-identical weights, as on the CPU.
TEST(CudaExecutor, WeightsAreBitIdenticalWhateverTheSchedule) {
  const policies::Scenario zi = LoadTiny({});
  const TrainConfig config = ConfigFor(zi);
  TempDir d0("cuda-zi0"), e0("cuda-ioc0"), e1("cuda-ioc1");
  RunOptions options;
  options.iterations = kIterations;
  options.compute = "cuda";
  options.disks = {d0.str()};
  auto run = RunSchedule(PlanOrDie(zi), config, options);
  if (!run.ok() && run.status().code() == StatusCode::kUnavailable) GTEST_SKIP() << "no GPU: " << run.status().ToString();
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_LT(run->loss.back(), run->loss.front());  // it trains
  // Every copy and every layer step carries its GPU-side span, inside the host's view of the task.
  int64_t spans = 0;
  for (const TraceRecord& r : run->records) {
    if (r.device_end_s == 0) {
      EXPECT_TRUE(r.op != Op::kH2D && r.op != Op::kD2H) << r.task << " has no GPU-side span";
      continue;
    }
    ++spans;
    EXPECT_LE(r.start_s, r.device_start_s) << r.task;
    EXPECT_LE(r.device_start_s, r.device_end_s) << r.task;
    EXPECT_LE(r.device_end_s, r.end_s) << r.task;
  }
  EXPECT_GE(spans, kIterations * 2 * (zi.model.layers + 2)) << "a span per layer step at least";
  options.disks = {e0.str(), e1.str()};
  auto run2 = RunSchedule(PlanOrDie(LoadTiny({"policy.name=ioc", "policy.disk_layout=split"})), config, options);
  ASSERT_TRUE(run2.ok()) << run2.status().ToString();
  EXPECT_EQ(run2->loss, run->loss);
  EXPECT_TRUE(SameBits(run2->master, run->master)) << "ioc on two disks against zero-infinity on one";
  // And everything in GPU memory, in a plain loop: the same weights.
  auto in_memory = RunInMemory(config, kIterations, {}, "cuda");
  ASSERT_TRUE(in_memory.ok()) << in_memory.status().ToString();
  EXPECT_EQ(in_memory->loss, run->loss);
  EXPECT_TRUE(SameBits(in_memory->master, run->master)) << "offloaded against in GPU memory";
}
#endif

TEST(Executor, AMissingDiskIsAnErrorBeforeTraining) {
  const policies::Scenario zi = LoadTiny({});
  RunOptions options;
  options.disks = {"/nonexistent/tierflow-disk"};
  auto run = RunSchedule(PlanOrDie(zi), ConfigFor(zi), options);
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("/nonexistent/tierflow-disk"), std::string::npos) << run.status().ToString();
  EXPECT_NE(run.status().message().find("does not exist"), std::string::npos) << run.status().ToString();
  options.disks = {};
  run = RunSchedule(PlanOrDie(zi), ConfigFor(zi), options);
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("nvme0"), std::string::npos) << run.status().ToString();
}

// The disk fills up during training (ENOSPC on a store write after the initial state is in): the
// run stops with the error, naming the task, after the work in flight drains; it does not hang.
TEST(Executor, ADiskThatFillsUpStopsTheRunWithTheTaskNamed) {
  const policies::Scenario zi = LoadTiny({});
  TempDir d0("enospc");
  RunOptions options;
  options.iterations = 3;
  options.disks = {d0.str()};
  FaultRule full;
  full.kind = FaultKind::kError;
  full.ops = static_cast<uint32_t>(FaultOpMask::kWrite);
  full.path_contains = "tierflow-run.store";
  full.error = ENOSPC;
  full.skip = 100;  // the initial state's writes and some of training's go through
  full.count = -1;
  options.faults = {full};
  auto run = RunSchedule(PlanOrDie(zi), ConfigFor(zi), options);
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("task 'write."), std::string::npos) << run.status().ToString();
  EXPECT_NE(run.status().message().find("No space left"), std::string::npos) << run.status().ToString();
}

// Each rank's part of one schedule on a local group of ranks (threads of this process, the
// collectives' fake: tests/real collective_test checks the MPI back-end against it bit for bit),
// each with `threads` CPU threads (0: as the schedule says), and `base`'s other options.
std::vector<StatusOr<RunResult>> RunRanks(const Schedule& schedule, const TrainConfig& config, const std::string& root, int64_t iterations,
                                          int cpu_threads = 1, const RunOptions& base = {},
                                          const std::function<void(int rank, RunOptions*)>& per_rank = {}) {
  std::vector<std::unique_ptr<Collective>> group = MakeLocalGroup(config.ranks);
  std::vector<StatusOr<RunResult>> results(group.size(), Internal("not run"));
  TrainConfig one_thread = config;  // the ranks share this host's cores
  one_thread.threads = cpu_threads;
  std::vector<std::thread> threads;
  for (size_t r = 0; r < group.size(); ++r) {
    threads.emplace_back([&, r] {
      RunOptions options = base;
      if (per_rank) per_rank(static_cast<int>(r), &options);
      options.iterations = iterations;
      options.disk_root = root;
      options.collective = group[r].get();
      results[r] = RunSchedule(schedule, one_thread, options);
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

// Ranks on one machine share its cores: each rank's optimizer and conversions get at most its
// share, however many threads the schedule gives them, and the run says so.
TEST(Executor, RanksOnOneMachineShareItsCores) {
  const int32_t cores = std::max(1, static_cast<int32_t>(std::thread::hardware_concurrency()));
  const policies::Scenario two = LoadTiny({"training.data_parallel=2", "hardware.node.gpu_count=2",
                                           "hardware.node.cpu.cores=" + std::to_string(16 * cores)});  // 8 x cores per rank
  TempDir root("share");
  auto results = RunRanks(PlanOrDie(two), ConfigFor(two), root.str(), 1, /*cpu_threads=*/0);
  const int32_t share = std::max(1, cores / 2);
  for (size_t r = 0; r < results.size(); ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].status().ToString();
    EXPECT_EQ(ThreadsOfOp(*results[r], Op::kOptimizer), std::set<int32_t>{share}) << "rank " << r;
    EXPECT_EQ(ThreadsOfOp(*results[r], Op::kConvert), std::set<int32_t>{share}) << "rank " << r;
    ASSERT_EQ(results[r]->notes.size(), 1u) << "rank " << r;
    EXPECT_NE(results[r]->notes[0].find("this run gives them " + std::to_string(share) + " (this machine's cores, " + std::to_string(cores) +
                                        " shared by 2 ranks: plan with hardware.node.cpu.cores " + std::to_string(cores)),
              std::string::npos)
        << results[r]->notes[0];
  }
}

// Several ranks train to the weights and losses of one process training the global batch (the
// data-parallel reference), bit for bit, under the policies whose partitions go to disk; with
// gradient clipping, the norm is every rank's part combined as the reference combines it. The
// 4-rank runs of ioc and mlp-offload are the cli tests' (mpirun). One case per policy and rank
// count, so that scripts/sanitize.sh can keep the TSan pass to the first.
struct RanksCase {
  std::string name;  // the test's name suffix
  std::string policy;
  int ranks;
  bool clipped;
  bool tied = false;  // model.tied_embeddings
};

// ctest's name of a case ends "# GetParam() = " and this.
void PrintTo(const RanksCase& c, std::ostream* os) { *os << c.name; }

class Ranks : public ::testing::TestWithParam<RanksCase> {};

TEST_P(Ranks, TrainToTheDataParallelReference) {
  const RanksCase& c = GetParam();
  // A shorter sequence: the same paths, a quarter of the math (the test runs under TSan).
  const policies::Scenario s = LoadTiny({"policy.name=" + c.policy, "hardware.node.gpu_count=4",
                                         "training.data_parallel=" + std::to_string(c.ranks), "training.sequence_length=32",
                                         "training.gradient_clipping=" + std::string(c.clipped ? "0.05" : "0"),
                                         "model.tied_embeddings=" + std::string(c.tied ? "true" : "false")});
  const TrainConfig config = ConfigFor(s);
  auto reference = RunInMemory(config, kIterations);
  ASSERT_TRUE(reference.ok()) << reference.status().ToString();
  TempDir root("ranks");
  const auto results = RunRanks(PlanOrDie(s), config, root.str(), kIterations);
  ASSERT_EQ(results.size(), static_cast<size_t>(c.ranks));
  for (size_t r = 0; r < results.size(); ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].status().ToString();
    EXPECT_EQ(results[r]->loss, reference->loss) << "rank " << r;
    EXPECT_TRUE(SameBits(results[r]->master, reference->master)) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Executor, Ranks,
                         ::testing::Values(RanksCase{"zero_infinity_2", "zero-infinity", 2, false},
                                           RanksCase{"zero_infinity_tied_2", "zero-infinity", 2, false, true},
                                           RanksCase{"mlp_offload_tied_2", "mlp-offload", 2, false, true},
                                           RanksCase{"ioc_2", "ioc", 2, false},
                                           RanksCase{"mlp_offload_2", "mlp-offload", 2, false},
                                           RanksCase{"zero_infinity_clipped_2", "zero-infinity", 2, true},
                                           RanksCase{"zero_infinity_4", "zero-infinity", 4, false}),
                         [](const ::testing::TestParamInfo<RanksCase>& info) { return info.param.name; });

// An overflow skips the step on the GPU too: the master and moments stay, and with the parameters
// on NVMe the update still sends the sub-group's bf16 parameters (of the unchanged master) home,
// as the host's conversion does (before, the d2h sent the update's GPU buffer unwritten, and the
// next forward read whatever it held). An infinite loss scale overflows every backward: every
// step is skipped, in the in-memory loop as in the run, whose losses then say which parameters
// each forward read.
TEST(Executor, AnUpdateOnTheGpuThatAnOverflowSkipsKeepsTheWeights) {
  for (const std::string params : {"nvme", "none"}) {
    const std::vector<std::string> sets = {"policy.name=tierflow", "policy.offload_param=" + params, "policy.gpu_sub_groups=all",
                                           "training.loss_scaling=dynamic"};
    TrainConfig config = ConfigFor(LoadTiny(sets));
    config.dynamic_loss_scaling = true;
    config.initial_loss_scale = std::numeric_limits<float>::infinity();
    auto reference = RunInMemory(config, kIterations);
    ASSERT_TRUE(reference.ok()) << reference.status().ToString();
    auto first = RunInMemory(config, 1);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    ASSERT_TRUE(SameBits(reference->master, first->master)) << "every step was skipped";
    const Schedule schedule = ExpectReproduces(sets, config, *reference, Label(sets) + "(overflowing)");
    EXPECT_EQ(HasTask(schedule, Op::kD2H, "d2h.p16."), params == "nvme") << params;
  }
}

// Every design policy that can place the update on the GPU (all but memascend's chunked
// write-back) does, with its own defaults otherwise: every sub-group there, and the first one
// there beside the policy's own placement of the others (mlp-offload's cached and remote ones).
TEST(Executor, EveryDesignPolicyUpdatesOnTheGpuToTheInMemoryWeights) {
  const TrainConfig config = ConfigFor(LoadTiny({}));
  auto reference = RunInMemory(config, kIterations);
  ASSERT_TRUE(reference.ok()) << reference.status().ToString();
  for (const std::string policy : {"ioc", "mlp-offload", "hitrain", "fuyou"}) {
    for (const std::string on_gpu : {"all", "1"}) {
      const std::vector<std::string> sets = {"policy.name=" + policy, "policy.sub_group_size=1e6", "policy.gpu_sub_groups=" + on_gpu};
      const Schedule schedule = ExpectReproduces(sets, config, *reference, policy + " gpu_sub_groups " + on_gpu);
      EXPECT_TRUE(UpdatesOnTheGpu(schedule)) << policy;
    }
  }
}

// Two ranks with every sub-group's states on their GPU train to the data-parallel reference, with
// the parameters on the GPUs and on NVMe.
TEST(Executor, OptimizerStatesOnEachRanksGpuReproduceTheDataParallelReference) {
  for (const std::string params : {"none", "nvme"}) {
    const policies::Scenario s = LoadTiny({"policy.name=tierflow", "policy.offload_param=" + params, "policy.gpu_sub_groups=all",
                                           "hardware.node.gpu_count=2", "training.data_parallel=2", "training.sequence_length=32"});
    const TrainConfig config = ConfigFor(s);
    auto reference = RunInMemory(config, kIterations);
    ASSERT_TRUE(reference.ok()) << reference.status().ToString();
    TempDir root("gpu-states-ranks");
    const Schedule schedule = PlanOrDie(s);
    EXPECT_TRUE(UpdatesOnTheGpu(schedule));
    const auto results = RunRanks(schedule, config, root.str(), kIterations);
    ASSERT_EQ(results.size(), 2u);
    for (size_t r = 0; r < results.size(); ++r) {
      ASSERT_TRUE(results[r].ok()) << params << ", rank " << r << ": " << results[r].status().ToString();
      EXPECT_EQ(results[r]->loss, reference->loss) << params << ", rank " << r;
      EXPECT_TRUE(SameBits(results[r]->master, reference->master)) << params << ", rank " << r;
    }
  }
}

// A run of several ranks reports every rank: the I/O bytes summed over the ranks, each rank's own
// (and its GPU's memory), and every rank's pool peaks on the schedule's pools.
TEST(Executor, ARunOfSeveralRanksReportsEveryRank) {
  const policies::Scenario s = LoadTiny({"hardware.node.gpu_count=2", "training.data_parallel=2", "training.sequence_length=32"});
  const Schedule schedule = PlanOrDie(s);
  TempDir root("report-ranks");
  const auto results = RunRanks(schedule, ConfigFor(s), root.str(), 2);
  ASSERT_EQ(results.size(), 2u);
  for (size_t r = 0; r < results.size(); ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].status().ToString();
    const RunResult& got = *results[r];
    ASSERT_EQ(got.ranks.size(), 2u);
    int64_t io = 0;
    for (size_t q = 0; q < got.ranks.size(); ++q) {
      EXPECT_EQ(got.ranks[q].rank, static_cast<int32_t>(q));
      EXPECT_EQ(got.ranks[q].node, 0) << "one machine";
      EXPECT_GT(got.ranks[q].direct_io_bytes + got.ranks[q].buffered_io_bytes, 0) << "rank " << q << " reads and writes its states";
      io += got.ranks[q].direct_io_bytes + got.ranks[q].buffered_io_bytes;
    }
    EXPECT_EQ(got.direct_io_bytes + got.buffered_io_bytes, io) << "the run's I/O is every rank's";
    EXPECT_EQ(got.ranks[0].direct_io_bytes + got.ranks[0].buffered_io_bytes, got.ranks[1].direct_io_bytes + got.ranks[1].buffered_io_bytes)
        << "the ranks move the same bytes (tiny splits evenly)";
    ASSERT_EQ(got.pool_peak_bytes.size(), schedule.pools().size());
    for (const char* pool : {"host.pinned.opt.r0", "host.pinned.opt.r1"}) {
      const int32_t p = schedule.FindPool(pool);
      ASSERT_NE(p, kNoIndex) << pool;
      EXPECT_GT(got.pool_peak_bytes[static_cast<size_t>(p)], 0) << pool << ": each rank's pools, on every rank's report";
    }
  }
}

// Two ranks checkpoint after every iteration: each rank writes its own shard, and rank 0 commits
// both in one manifest; resumed on two ranks, the run ends at the data-parallel reference's
// weights, bit for bit. On one rank the checkpoint is refused, naming both counts.
TEST(Executor, RanksCheckpointAndResumeToTheDataParallelReference) {
  const policies::Scenario s = LoadTiny({"hardware.node.gpu_count=2", "training.data_parallel=2"});
  const TrainConfig config = ConfigFor(s);
  auto reference = RunInMemory(config, kIterations);
  ASSERT_TRUE(reference.ok()) << reference.status().ToString();
  const Schedule schedule = PlanOrDie(s);
  TempDir root("ckpt-ranks"), ckpt("ckpt-ranks-dir");
  RunOptions options;
  options.checkpoint_dir = ckpt.str();
  options.checkpoint_every = 1;
  for (const auto& first : RunRanks(schedule, config, root.str(), kIterations - 1, 1, options)) {
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    ASSERT_EQ(first->checkpoints.size(), static_cast<size_t>(kIterations - 1));
  }
  auto storage = NewPosixStorage();
  CheckpointOptions o;
  o.dirs = {ckpt.str()};
  o.name = "tierflow-run";
  auto entries = ReadCheckpointManifest(*storage, o);
  ASSERT_TRUE(entries.ok()) << entries.status().ToString();
  std::set<std::pair<int32_t, std::string>> listed;
  for (const CheckpointEntry& e : *entries) listed.insert({e.rank, e.name});
  for (int32_t rank : {0, 1}) {
    for (const char* name : {"master", "adam_m", "adam_v", "meta"}) EXPECT_TRUE(listed.count({rank, name})) << "rank " << rank << "'s " << name;
  }
  size_t files = 0;
  for (const auto& f : fs::directory_iterator(ckpt.str())) files += f.path().filename().string().rfind("tierflow-run-g", 0) == 0 ? 1 : 0;
  EXPECT_EQ(files, 2u) << "one file per rank, of the committed generation only";

  options.resume = true;
  const auto resumed = RunRanks(schedule, config, root.str(), kIterations, 1, options);
  for (size_t r = 0; r < resumed.size(); ++r) {
    ASSERT_TRUE(resumed[r].ok()) << "rank " << r << ": " << resumed[r].status().ToString();
    EXPECT_EQ(resumed[r]->first_iteration, kIterations - 1);
    EXPECT_EQ(resumed[r]->loss, std::vector<double>{reference->loss.back()}) << "rank " << r;
    EXPECT_TRUE(SameBits(resumed[r]->master, reference->master)) << "rank " << r;
  }
  const policies::Scenario one = LoadTiny({"hardware.node.gpu_count=2"});
  RunOptions alone = options;
  alone.disk_root = root.str();
  alone.iterations = kIterations;
  auto refused = RunSchedule(PlanOrDie(one), ConfigFor(one), alone);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("holds the state of 2 ranks, this run has 1 (training.data_parallel): resume it on 2 ranks, mpirun -np 2"),
            std::string::npos)
      << refused.status().ToString();
  // On four ranks, those beyond the checkpoint's two say so too (they have no shard of their own).
  const policies::Scenario four = LoadTiny({"hardware.node.gpu_count=4", "training.data_parallel=4"});
  TempDir root4("ckpt-ranks4");
  for (const auto& r : RunRanks(PlanOrDie(four), ConfigFor(four), root4.str(), kIterations, 1, options)) {
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("holds the state of 2 ranks, this run has 4"), std::string::npos) << r.status().ToString();
  }
  // Ranks that do not share the checkpoint's directory (each node's own, say) are refused, every
  // one of them, before anything is saved.
  TempDir apart0("ckpt-apart0"), apart1("ckpt-apart1");
  RunOptions apart = options;
  apart.resume = false;
  const auto own_dir = [&](int rank, RunOptions* o) { o->checkpoint_dir = (rank == 0 ? apart0 : apart1).str(); };
  for (const auto& r : RunRanks(schedule, config, root.str(), 1, 1, apart, own_dir)) {
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("rank 1 does not see rank 0's directory"), std::string::npos) << r.status().ToString();
  }
  EXPECT_TRUE(fs::is_empty(apart0.str()) && fs::is_empty(apart1.str())) << "nothing saved, rank 0's mark removed";
}

// A plain loop of several ranks (each its part in the whole schedule's topological order, so that
// they meet the collectives alike) trains to the data-parallel reference too.
TEST(Executor, APlainLoopOfRanksTrainsToTheDataParallelReference) {
  const policies::Scenario s = LoadTiny({"policy.name=ioc", "hardware.node.gpu_count=2", "training.data_parallel=2"});
  const TrainConfig config = ConfigFor(s);
  auto reference = RunInMemory(config, kIterations);
  ASSERT_TRUE(reference.ok()) << reference.status().ToString();
  TempDir root("plain-ranks");
  RunOptions options;
  options.plain_loop = true;
  const auto results = RunRanks(PlanOrDie(s), config, root.str(), kIterations, 1, options);
  for (size_t r = 0; r < results.size(); ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].status().ToString();
    EXPECT_EQ(results[r]->loss, reference->loss) << "rank " << r;
    EXPECT_TRUE(SameBits(results[r]->master, reference->master)) << "rank " << r;
  }
}

// MLP-Offload's one reader and one writer per tier hold among every rank of the node, as the
// schedule holds them among its ranks: two ranks (threads, each locking its own opens of the lock
// files, as processes do) on one disk never run two tasks of a shared queue at once, and still
// train to the data-parallel reference; the lock files are gone after the run.
TEST(Executor, RanksHoldTheirSharedQueuesNodeWide) {
  const policies::Scenario s = LoadTiny({"policy.name=mlp-offload", "policy.sub_group_size=2e5", "hardware.node.gpu_count=2",
                                         "training.data_parallel=2"});
  const TrainConfig config = ConfigFor(s);
  auto reference = RunInMemory(config, kIterations);
  ASSERT_TRUE(reference.ok()) << reference.status().ToString();
  const Schedule schedule = PlanOrDie(s);
  const std::vector<std::string> shared = exec::NodeSharedResources(schedule);
  ASSERT_FALSE(shared.empty()) << "mlp-offload's tier locks are device-wide";
  TempDir root("tier-locks");
  const auto results = RunRanks(schedule, config, root.str(), kIterations);
  std::map<std::string, std::vector<std::tuple<double, double, int32_t>>> runs;  // per shared resource: (start, end, rank)
  for (size_t r = 0; r < results.size(); ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].status().ToString();
    EXPECT_EQ(results[r]->loss, reference->loss) << "rank " << r;
    EXPECT_TRUE(SameBits(results[r]->master, reference->master)) << "rank " << r;
  }
  for (const TraceRecord& rec : results[0]->records) {  // every rank's, gathered; each on its rank's clock
    if (std::find(shared.begin(), shared.end(), rec.resource) == shared.end()) continue;
    const double origin = results[static_cast<size_t>(rec.rank)]->clock_origin_s;
    runs[rec.resource].emplace_back(origin + rec.start_s, origin + rec.end_s, rec.rank);
  }
  for (auto& [resource, tasks] : runs) {
    std::sort(tasks.begin(), tasks.end());
    std::set<int32_t> ranks;
    for (size_t i = 0; i < tasks.size(); ++i) {
      ranks.insert(std::get<2>(tasks[i]));
      if (i > 0) {
        EXPECT_LE(std::get<1>(tasks[i - 1]), std::get<0>(tasks[i]))
            << resource << ": two tasks at once, ranks " << std::get<2>(tasks[i - 1]) << " and " << std::get<2>(tasks[i]);
      }
    }
    EXPECT_EQ(ranks.size(), 2u) << resource << " is both ranks'";
    EXPECT_GE(tasks.size(), 4u) << resource;
  }
  EXPECT_FALSE(runs.empty());
  for (const auto& f : fs::recursive_directory_iterator(root.str())) {
    EXPECT_EQ(f.path().filename().string().rfind(".tierflow-lock.", 0), std::string::npos) << f.path() << " is left";
  }
}

// Two ranks train to the weights of one rank with two micro-steps, bit for bit (the sum of two
// bf16 gradients rounded once either way: DataParallelReferenceAveragesOneBatchPerRank). The
// collectives of gpu0's buffers go through `gpu0_group` where given (RunOptions::device_collective:
// their parts packed in gpu0 memory, as NCCL's are), else through the ranks' group, staged through
// host memory by the compute device (`compute`: on a GPU both ranks share GPU 0, or have one each
// and the run opens NCCL). Returns rank 0's note of which it was ("" for none); nothing where
// `compute` is unavailable here (no GPU).
std::optional<std::string> ExpectTwoRanksTrainAsTwoMicroSteps(const std::string& compute, bool gpu0_group = false) {
  const policies::Scenario two = LoadTiny({"hardware.node.gpu_count=2", "training.data_parallel=2"});
  const policies::Scenario accumulated = LoadTiny({"training.gradient_accumulation_steps=2"});
  TempDir one("two-steps-" + compute), root("two-ranks-" + compute);
  RunOptions options;
  options.compute = compute;
  options.iterations = kIterations;
  options.disk_root = one.str();
  auto reference = RunSchedule(PlanOrDie(accumulated), ConfigFor(accumulated), options);
  if (!reference.ok() && reference.status().code() == StatusCode::kUnavailable) return std::nullopt;
  EXPECT_TRUE(reference.ok()) << reference.status().ToString();
  if (!reference.ok()) return "";
  RunOptions base;
  base.compute = compute;
  std::vector<std::unique_ptr<Collective>> on_gpu0 = MakeLocalGroup(2, /*device_memory=*/true);
  const auto results = RunRanks(PlanOrDie(two), ConfigFor(two), root.str(), kIterations, 1, base, [&](int rank, RunOptions* o) {
    if (gpu0_group) o->device_collective = on_gpu0[static_cast<size_t>(rank)].get();
  });
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_TRUE(results[r].ok()) << compute << ", rank " << r << ": " << results[r].status().ToString();
    if (!results[r].ok()) return "";
    EXPECT_EQ(results[r]->loss, reference->loss) << compute << ", rank " << r;
    EXPECT_TRUE(SameBits(results[r]->master, reference->master)) << compute << ", rank " << r;
  }
  for (const std::string& note : results[0]->notes) {
    if (note.rfind("collectives of gpu0's buffers: ", 0) == 0) return note;
  }
  return "";
}

TEST(Executor, TwoRanksTrainAsOneRankWithTwoMicroSteps) { EXPECT_EQ(ExpectTwoRanksTrainAsTwoMicroSteps("cpu"), ""); }

// The path NCCL takes, on the CPU: parts packed in gpu0 memory (D2D), the sum rounded there.
TEST(Executor, TwoRanksWithCollectivesOnGpu0MemoryTrainAsTwoMicroSteps) {
  EXPECT_EQ(ExpectTwoRanksTrainAsTwoMicroSteps("cpu", /*gpu0_group=*/true), "collectives of gpu0's buffers: local, on gpu0's memory");
}

TEST(Executor, ACollectiveOnGpu0MemoryMustBeTheRanksOwn) {
  const policies::Scenario two = LoadTiny({"hardware.node.gpu_count=2", "training.data_parallel=2"});
  TempDir root("gpu0-group");
  std::vector<std::unique_ptr<Collective>> host = MakeLocalGroup(2);
  const auto results = RunRanks(PlanOrDie(two), ConfigFor(two), root.str(), 1, 1, {}, [&](int rank, RunOptions* o) {
    o->device_collective = host[static_cast<size_t>(rank)].get();  // on host memory
  });
  for (const auto& r : results) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("RunOptions::device_collective"), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find("on host memory"), std::string::npos) << r.status().ToString();
  }
}

#ifdef TIERFLOW_TEST_CUDA
// On one GPU the two ranks share it and stage through host memory; on two or more each has its
// own and the run opens NCCL. Either way the bits are the one rank's.
TEST(CudaExecutor, TwoRanksOnGpusTrainAsOneRankWithTwoMicroSteps) {
  const std::optional<std::string> ran = ExpectTwoRanksTrainAsTwoMicroSteps("cuda");
  if (!ran.has_value()) GTEST_SKIP() << "no GPU";
  const std::string& note = *ran;
  std::printf("  %s\n", note.c_str());
  EXPECT_TRUE(note == "collectives of gpu0's buffers: nccl, on the GPUs" ||
              note.find("staged through host memory (rank 1: its GPU 0 is another rank's too)") != std::string::npos)
      << note;
}
#endif

TEST(Executor, RankCountsMustAgree) {
  const policies::Scenario two = LoadTiny({"training.data_parallel=2", "hardware.node.gpu_count=2"});
  TempDir d("rank-count");
  RunOptions options;
  options.disk_root = d.str();
  auto one_process = RunSchedule(PlanOrDie(two), ConfigFor(two), options);
  ASSERT_FALSE(one_process.ok());
  EXPECT_NE(one_process.status().message().find("mpirun -np 2"), std::string::npos) << one_process.status().ToString();
  std::vector<std::unique_ptr<Collective>> three = MakeLocalGroup(3);
  options.collective = three[0].get();
  auto mismatch = RunSchedule(PlanOrDie(two), ConfigFor(two), options);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("this run has 3"), std::string::npos) << mismatch.status().ToString();
}

// The data-parallel reference (--in-memory with training.data_parallel N): per micro-step one
// batch per rank, their gradients summed in rank order and rounded once to bf16. With two
// contributions that is exactly what accumulating two micro-steps in bf16 does (each sum rounded
// once, the same batches, the same 1/2 in the backward's seed), so two ranks train to the weights
// of one rank with two micro-steps, bit for bit; four ranks average the same four batches as four
// micro-steps (the same first loss) but round once where accumulation rounds three times.
TEST(Executor, DataParallelReferenceAveragesOneBatchPerRank) {
  const TrainConfig two_ranks = ConfigFor(LoadTiny({"hardware.node.gpu_count=4", "training.data_parallel=2"}));
  ASSERT_EQ(two_ranks.ranks, 2);
  const TrainConfig two_steps = ConfigFor(LoadTiny({"training.gradient_accumulation_steps=2"}));
  auto dp = RunInMemory(two_ranks, kIterations);
  auto gas = RunInMemory(two_steps, kIterations);
  auto one = RunInMemory(ConfigFor(LoadTiny({})), kIterations);
  ASSERT_TRUE(dp.ok() && gas.ok() && one.ok()) << dp.status().ToString() << gas.status().ToString() << one.status().ToString();
  EXPECT_EQ(dp->loss, gas->loss);
  EXPECT_TRUE(SameBits(dp->master, gas->master)) << "two ranks = two micro-steps accumulated in bf16";
  EXPECT_FALSE(SameBits(dp->master, one->master));
  EXPECT_NE(dp->loss.front(), one->loss.front()) << "the first loss is the mean over two batches";

  const TrainConfig four_ranks = ConfigFor(LoadTiny({"hardware.node.gpu_count=4", "training.data_parallel=4"}));
  const TrainConfig four_steps = ConfigFor(LoadTiny({"training.gradient_accumulation_steps=4"}));
  auto dp4 = RunInMemory(four_ranks, kIterations);
  auto gas4 = RunInMemory(four_steps, kIterations);
  ASSERT_TRUE(dp4.ok() && gas4.ok());
  EXPECT_EQ(dp4->loss.front(), gas4->loss.front()) << "the same four batches from the same weights";
  EXPECT_FALSE(SameBits(dp4->master, gas4->master)) << "one rounding of the rank sum, not three of accumulation";
  // Any thread count gives the same weights.
  TrainConfig one_thread = four_ranks;
  one_thread.threads = 1;
  auto dp4_one_thread = RunInMemory(one_thread, kIterations);
  ASSERT_TRUE(dp4_one_thread.ok());
  EXPECT_TRUE(SameBits(dp4->master, dp4_one_thread->master));
}

// Gradient accumulation: the reference sums four micro-steps' gradients in bf16 and averages
// their losses, which is not one micro-step's training. Every policy with its defaults reproduces
// it bit for bit — the flushed path (zero-infinity: an accumulator in host memory, flushed once
// per iteration), gradients kept in host memory (mlp-offload), an update overlapped with backward
// (hitrain, fuyou) — and with clipping the two gradient paths do.
TEST(Executor, GradientAccumulationReproducesTheInMemoryWeights) {
  for (const std::string clip : {"0", "0.05"}) {
    const std::vector<std::string> training = {"training.gradient_accumulation_steps=4", "training.gradient_clipping=" + clip};
    const TrainConfig config = ConfigFor(LoadTiny(training));
    ASSERT_EQ(config.micro_steps, 4);
    auto reference = RunInMemory(config, kIterations);
    ASSERT_TRUE(reference.ok()) << reference.status().ToString();
    TrainConfig one_step = config;
    one_step.micro_steps = 1;
    auto single = RunInMemory(one_step, kIterations);
    ASSERT_TRUE(single.ok()) << single.status().ToString();
    EXPECT_NE(reference->loss.front(), single->loss.front()) << "the first loss is the mean over four batches";
    EXPECT_FALSE(SameBits(reference->master, single->master));
    const std::vector<std::string> policies = clip == "0" ? policies::PolicyNames() : std::vector<std::string>{"zero-infinity", "mlp-offload"};
    for (const std::string& policy : policies) {
      std::vector<std::string> sets = training;
      sets.push_back("policy.name=" + policy);
      const Schedule schedule = ExpectReproduces(sets, config, *reference, policy + " clip " + clip);
      EXPECT_EQ(schedule.MicroSteps(), 4);
      if (policy == "zero-infinity") {  // widened once per iteration, from the accumulator
        EXPECT_TRUE(HasPersistentBuffer(schedule, "grad.accum.")) << "an accumulator in host memory";
        int widened = 0;  // into the staging buffer of a write, or (tiny's, below DeepSpeed's swap minimum) into host memory
        for (const TaskSpec& t : schedule.tasks()) widened += t.op == Op::kConvert && t.id.rfind("convert.grad.", 0) == 0;
        int units = 0;
        for (const TaskSpec& t : schedule.tasks()) units += t.op == Op::kD2H && t.micro_step == 0;
        EXPECT_EQ(widened, units) << "one widening per unit and iteration, not per micro-step";
      }
    }
  }
}

// Tied embeddings (the Llama-3.2-1B shape): the head computes with the embedding table, which
// stays on the GPU; its part of the table's gradient leaves first and the embedding's is added
// to it in bf16. Every policy reproduces the reference, which differs from the untied model's
// training, and so do the gradient paths with four micro-steps too.
TEST(Executor, TiedEmbeddingsReproduceTheInMemoryWeights) {
  for (const std::string micro_steps : {"1", "4"}) {
    const std::vector<std::string> model = {"model.tied_embeddings=true", "training.gradient_accumulation_steps=" + micro_steps};
    const TrainConfig config = ConfigFor(LoadTiny(model));
    ASSERT_TRUE(config.spec.config.tied_embeddings);
    auto reference = RunInMemory(config, kIterations);
    ASSERT_TRUE(reference.ok()) << reference.status().ToString();
    TrainConfig untied = config;
    untied.spec.config.tied_embeddings = false;
    auto untied_run = RunInMemory(untied, kIterations);
    ASSERT_TRUE(untied_run.ok()) << untied_run.status().ToString();
    EXPECT_NE(reference->master.size(), untied_run->master.size()) << "no lm_head of its own";
    EXPECT_NE(reference->loss.back(), untied_run->loss.back());
    const std::vector<std::string> policies = micro_steps == "1" ? policies::PolicyNames() : std::vector<std::string>{"zero-infinity", "mlp-offload"};
    for (const std::string& policy : policies) {
      std::vector<std::string> sets = model;
      sets.push_back("policy.name=" + policy);
      const Schedule schedule = ExpectReproduces(sets, config, *reference, policy + " micro-steps " + micro_steps);
      EXPECT_TRUE(HasTask(schedule, Op::kD2H, "d2h.grad.model.embed_tokens.weight.head.")) << policy << ": the head's part of the table's gradient";
    }
  }
  // A schedule planned for the untied model has no place for the head's part: refused when loaded.
  const Status st = CheckRunnable(PlanOrDie(LoadTiny({})), ConfigFor(LoadTiny({"model.tied_embeddings=true"})));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("tied"), std::string::npos) << st.ToString();
}

// The loss scale is a power of two, so dynamic loss scaling (fp16's, scale 2^16) gives the very
// weights of none wherever nothing overflows: the accumulated micro-steps, and the tied table's
// two parts, keep one scale until the update unscales them.
TEST(Executor, AccumulationUnderDynamicLossScalingEqualsNone) {
  for (const std::string extra : {"training.gradient_accumulation_steps=2", "model.tied_embeddings=true"}) {
    const TrainConfig none = ConfigFor(LoadTiny({extra}));
    TrainConfig dynamic = none;
    dynamic.dynamic_loss_scaling = true;
    auto unscaled = RunInMemory(none, kIterations);
    auto scaled = RunInMemory(dynamic, kIterations);
    ASSERT_TRUE(unscaled.ok() && scaled.ok());
    EXPECT_TRUE(SameBits(scaled->master, unscaled->master)) << extra;
    ExpectReproduces({extra, "training.loss_scaling=dynamic"}, dynamic, *scaled, extra + " zero-infinity, dynamic loss scaling");
  }
}

// A schedule planned for one number of micro-steps and run with another is refused, naming both.
TEST(Executor, MicroStepsThatDifferFromTheTrainingSetUpAreRefused) {
  const policies::Scenario two = LoadTiny({"training.gradient_accumulation_steps=2"});
  TrainConfig config = ConfigFor(two);
  config.micro_steps = 3;
  const Status st = CheckRunnable(PlanOrDie(two), config);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("2 micro-steps per iteration"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("gradient_accumulation_steps is 3"), std::string::npos) << st.ToString();
}

// Initial weights from a safetensors file under Hugging Face names (tierflow run --init: another
// system's starting point, bench/deepspeed/fidelity.py's) train as the same weights initialised
// here: a file of the weights seed 99 makes gives the weights and losses of init_seed 99, and
// the file's other tensors are ignored.
TEST(Executor, InitialWeightsFromASafetensorsFileTrainAsTheirOwn) {
  TrainConfig seeded = ConfigFor(LoadTiny({}));
  seeded.init_seed = 99;
  const ParamLayout layout = MakeParamLayout(seeded.spec.config);
  std::vector<float> weights(static_cast<size_t>(layout.total));
  InitLlamaParams(layout, weights.data(), 99);
  const std::string path = ::testing::TempDir() + "/tierflow-init-test.safetensors";
  ASSERT_TRUE(SaveLlamaWeights(path, layout, weights.data(), StDtype::kF32).ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  TrainConfig loaded = ConfigFor(LoadTiny({}));
  loaded.initial_weights.assign(weights.size(), 0.0f);
  ASSERT_TRUE(LoadLlamaWeights(*file, layout, loaded.initial_weights.data()).ok());
  std::remove(path.c_str());
  auto a = RunInMemory(seeded, 2), b = RunInMemory(loaded, 2);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << b.status().ToString();
  EXPECT_TRUE(SameBits(a->master, b->master));
  EXPECT_EQ(a->loss, b->loss);
  TrainConfig other = ConfigFor(LoadTiny({}));  // init_seed 1234: not the file's weights
  auto c = RunInMemory(other, 2);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->loss.front(), c->loss.front());
}

// Each Hugging Face family through an offloaded schedule (zero-infinity, its states on a disk),
// started from the family's weights on the golden tokens: tests/train/make_golden.py chains its
// rows (each starts with the last token of the one before), so that they are the windows the token
// loader cuts from the chain at sequence T - 1, and the run's first loss is the loss transformers
// computed (within train_golden_test's tolerance, 1e-4 relative); after two iterations the weights
// are the in-memory run's bit for bit.
class OffloadedGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(OffloadedGolden, TheFirstLossIsTransformersAndTheWeightsTheInMemoryRuns) {
  const std::string dir = std::string(TIERFLOW_SOURCE_DIR) + "/tests/train/data/" + GetParam();
  auto golden = SafetensorsFile::Open(dir + "/golden.safetensors");
  ASSERT_TRUE(golden.ok()) << golden.status().ToString();
  auto info = golden->Info("tokens");
  ASSERT_TRUE(info.ok() && info->shape.size() == 2);
  const int64_t batch = info->shape[0], seq = info->shape[1];
  auto rows = golden->ReadInts("tokens");
  ASSERT_TRUE(rows.ok());
  std::vector<int32_t> chain(rows->begin(), rows->begin() + seq);
  for (int64_t b = 1; b < batch; ++b) {
    ASSERT_EQ((*rows)[static_cast<size_t>(b * seq)], chain.back()) << "make_golden.py chains its rows";
    chain.insert(chain.end(), rows->begin() + b * seq + 1, rows->begin() + (b + 1) * seq);
  }
  auto scenario = policies::LoadScenarioFile(std::string(TIERFLOW_SOURCE_DIR) + "/scenarios/tiny-cpu.yaml",
                                             {"model={hf_dir: " + dir + "}", "training.micro_batch_size=" + std::to_string(batch),
                                              "training.sequence_length=" + std::to_string(seq - 1)});
  ASSERT_TRUE(scenario.ok()) << scenario.status().ToString();
  TrainConfig config = TrainConfigFor(scenario->model, scenario->training);
  config.threads = 2;
  config.tokens = chain;
  const ParamLayout layout = MakeParamLayout(config.spec.config);
  config.initial_weights.assign(static_cast<size_t>(layout.total), 0.0f);
  ASSERT_TRUE(LoadHfWeights(dir, layout, config.initial_weights.data()).ok());
  auto reference = RunInMemory(config, 2);
  ASSERT_TRUE(reference.ok()) << reference.status().ToString();
  TempDir disks("golden-" + GetParam());
  RunOptions options;
  options.iterations = 2;
  options.disk_root = disks.str();
  auto run = RunSchedule(PlanOrDie(*scenario), config, options);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(run->loss, reference->loss);
  EXPECT_TRUE(SameBits(run->master, reference->master));
  float want = 0;
  ASSERT_TRUE(golden->ReadF32("loss", &want, 1).ok());
  const double error = std::abs(run->loss.front() - want) / want;
  std::printf("%s through zero-infinity on a disk: first loss %.7f, transformers' %.7f, relative %.2e (tolerance 1e-4)\n",
              GetParam().c_str(), run->loss.front(), want, error);
  EXPECT_LE(error, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Families, OffloadedGolden, ::testing::Values("llama", "llama3", "mistral", "qwen2"));

}  // namespace
}  // namespace tierflow::real
