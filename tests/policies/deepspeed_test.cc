// DeepSpeed configs in and out: each key mapped onto the zero-infinity scenario, noted when
// ignored or taken at DeepSpeed's default, refused with its rule; an exported scenario imports
// back to the same knobs and training.
#include "tierflow/policies/deepspeed.h"
#include "tierflow/policies/policy.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace tierflow::policies {
namespace {

std::map<std::string, std::string> Sets(const DeepSpeedImport& d) { return {d.sets.begin(), d.sets.end()}; }

bool HasNote(const DeepSpeedImport& d, const std::string& text) {
  return std::any_of(d.notes.begin(), d.notes.end(), [&](const std::string& n) { return n.find(text) != std::string::npos; });
}

const char* kNvme = R"("zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/n"},
                                             "offload_optimizer": {"device": "nvme", "nvme_path": "/n"}})";

DeepSpeedImport ImportOk(const std::string& json) {
  auto d = ImportDeepSpeedConfig(json, "ds.json");
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return d.ok() ? *d : DeepSpeedImport{};
}

TEST(DeepSpeedImport, MapsTheBatchPrecisionAndKnobs) {
  const DeepSpeedImport d = ImportOk(std::string(R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
      "train_batch_size": 64, "fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 12, "hysteresis": 2},
      "aio": {"block_size": 2097152, "queue_depth": 32, "thread_count": 2}, )") +
                                     R"("zero_optimization": {"stage": 3, "stage3_max_reuse_distance": 0,
                                         "offload_param": {"device": "nvme", "nvme_path": "/n"},
                                         "offload_optimizer": {"device": "nvme", "nvme_path": "/n"}}})");
  const auto sets = Sets(d);
  EXPECT_EQ(d.sets.front().first, "policy.name");
  EXPECT_EQ(sets.at("policy.name"), "zero-infinity");
  EXPECT_EQ(sets.at("training.micro_batch_size"), "2");
  EXPECT_EQ(sets.at("training.gradient_accumulation_steps"), "4");
  EXPECT_EQ(sets.at("training.data_parallel"), "8") << "64 / (2 x 4)";
  EXPECT_EQ(sets.at("training.dtype"), "fp16");
  EXPECT_EQ(sets.at("training.loss_scaling"), "dynamic");
  EXPECT_EQ(sets.at("policy.block_size"), "2097152 B");
  EXPECT_EQ(sets.at("policy.queue_depth"), "32");
  EXPECT_EQ(sets.at("policy.offload_param"), "nvme");
  EXPECT_EQ(sets.at("policy.max_reuse_distance"), "0") << "0 is a distance: nothing kept across the turn";
  EXPECT_EQ(sets.at("training.gradient_clipping"), "1") << "absent: DeepSpeed's default";
  EXPECT_TRUE(HasNote(d, "default: gradient_clipping absent: DeepSpeed's default, 1.0"));
  EXPECT_TRUE(HasNote(d, "ignored: fp16.initial_scale_power 12"));
  EXPECT_TRUE(HasNote(d, "ignored: fp16.hysteresis"));
  EXPECT_TRUE(HasNote(d, "ignored: aio.thread_count"));
  EXPECT_FALSE(HasNote(d, "queue_depth")) << "a mapped key is not noted";
}

// Adam's hyper-parameters become the scenario's training.optimizer; "auto" (the HF Trainer's) and
// what AdamW does not take are noted.
TEST(DeepSpeedImport, TheOptimizersParametersBecomeTheScenarios) {
  const DeepSpeedImport d = ImportOk(std::string(R"({"bf16": {"enabled": true}, "optimizer": {"type": "AdamW", "params": {"lr": 3e-5, "betas": [0.9, 0.999],
      "eps": "auto", "weight_decay": 0.01, "torch_adam": true}}, )") + kNvme + "}");
  const auto sets = Sets(d);
  EXPECT_EQ(sets.at("training.optimizer.lr"), "3e-05");
  EXPECT_EQ(sets.at("training.optimizer.betas"), "[0.9, 0.999]");
  EXPECT_EQ(sets.at("training.optimizer.weight_decay"), "0.01");
  EXPECT_EQ(sets.at("training.optimizer.eps"), "1e-08") << "\"auto\": the Trainer's adam_epsilon default";
  EXPECT_TRUE(HasNote(d, "auto: optimizer.params.eps = 1e-08 (as the Hugging Face Trainer fills it: adam_epsilon 1e-08, the Trainer's default)"));
  EXPECT_TRUE(HasNote(d, "ignored: optimizer.params.torch_adam: not modelled"));
  auto bad = ImportDeepSpeedConfig(std::string(R"({"bf16": {"enabled": true}, "optimizer": {"type": "Adam", "params": {"betas": 0.9}}, )") + kNvme + "}", "ds.json");
  EXPECT_EQ(bad.status().message(), "ds.json: optimizer.params.betas: expected [beta1, beta2], got '0.9'");
}

// DeepSpeed's WarmupLR, WarmupDecayLR and WarmupCosineLR become the scenario's schedule of the same
// name, with DeepSpeed's defaults for what is left out; warmup_max_lr sets the rate.
TEST(DeepSpeedImport, TheSchedulerBecomesTheScenarios) {
  const std::string opt = R"("bf16": {"enabled": true}, "optimizer": {"type": "AdamW", "params": {"lr": 3e-5}}, )";
  const DeepSpeedImport decay = ImportOk("{" + opt + R"("scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 500,
      "warmup_min_lr": 1e-5, "warmup_max_lr": 4e-5, "warmup_num_steps": 50}}, )" + kNvme + "}");
  auto sets = Sets(decay);
  EXPECT_EQ(sets.at("training.lr_schedule.type"), "WarmupDecayLR");
  EXPECT_EQ(sets.at("training.lr_schedule.warmup_steps"), "50");
  EXPECT_EQ(sets.at("training.lr_schedule.total_steps"), "500");
  EXPECT_EQ(sets.at("training.lr_schedule.min_lr_ratio"), "0.25");
  EXPECT_EQ(sets.at("training.lr_schedule.warmup_type"), "log") << "DeepSpeed's default";
  EXPECT_EQ(sets.at("training.optimizer.lr"), "4e-05") << "warmup_max_lr is the rate";
  EXPECT_EQ(std::count_if(decay.sets.begin(), decay.sets.end(), [](const auto& kv) { return kv.first == "training.optimizer.lr"; }), 1);
  EXPECT_TRUE(HasNote(decay, "replaced: optimizer.params.lr 3e-05 by scheduler.params.warmup_max_lr 4e-05"));

  const DeepSpeedImport cosine = ImportOk("{" + opt + R"("scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 300,
      "warmup_type": "linear", "warmup_min_ratio": 0.1, "last_batch_iteration": -1}}, )" + kNvme + "}");
  sets = Sets(cosine);
  EXPECT_EQ(sets.at("training.lr_schedule.type"), "WarmupCosineLR");
  EXPECT_EQ(sets.at("training.lr_schedule.warmup_steps"), "1000") << "DeepSpeed's default";
  EXPECT_EQ(sets.at("training.lr_schedule.min_lr_ratio"), "0.0001") << "DeepSpeed's cos_min_ratio default";
  EXPECT_EQ(sets.at("training.lr_schedule.warmup_min_ratio"), "0.1");
  EXPECT_EQ(sets.at("training.lr_schedule.warmup_type"), "linear");
  EXPECT_EQ(sets.at("training.optimizer.lr"), "3e-05") << "the cosine scales the optimizer's rate";
  EXPECT_TRUE(HasNote(cosine, "ignored: scheduler.params.last_batch_iteration: not a parameter of WarmupCosineLR"));

  const DeepSpeedImport automatic = ImportOk("{" + opt + R"("scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": "auto"}}, )" +
                                             kNvme + "}");
  EXPECT_EQ(Sets(automatic).count("training.lr_schedule.type"), 0u);
  EXPECT_TRUE(HasNote(automatic, "ignored: scheduler WarmupDecayLR: total_num_steps is \"auto\", and its decay needs it"));
  // "auto" (the Hugging Face Trainer's) keeps the scenario's value, as elsewhere: no DeepSpeed default.
  const DeepSpeedImport filled = ImportOk("{" + opt + R"("scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": "auto",
      "warmup_max_lr": "auto"}}, )" + kNvme + "}");
  EXPECT_EQ(Sets(filled).at("training.lr_schedule.type"), "WarmupLR");
  EXPECT_EQ(Sets(filled).count("training.lr_schedule.warmup_steps"), 0u);
  EXPECT_EQ(Sets(filled).at("training.optimizer.lr"), "3e-05") << "the optimizer's rate stays";
  EXPECT_TRUE(HasNote(filled, "ignored: scheduler.params.warmup_num_steps is \"auto\""));
  const DeepSpeedImport other = ImportOk("{" + opt + R"("scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0}}, )" + kNvme + "}");
  EXPECT_EQ(Sets(other).count("training.lr_schedule.type"), 0u);
  EXPECT_TRUE(HasNote(other, "ignored: scheduler.type 'OneCycle'"));
  auto bad = ImportDeepSpeedConfig("{" + opt + R"("scheduler": {"type": "WarmupLR", "params": {"warmup_type": "exp"}}, )" + kNvme + "}", "ds.json");
  EXPECT_EQ(bad.status().message(), "ds.json: scheduler.params.warmup_type 'exp': log or linear");
}

TEST(DeepSpeedImport, AutoValuesAndUnknownKeysAreNamedOnceEach) {
  const DeepSpeedImport d = ImportOk(std::string(R"({"train_micro_batch_size_per_gpu": "auto", "gradient_clipping": "auto",
      "bf16": {"enabled": true}, "flops_profiler": {"enabled": true}, "comms_logger": {}, )") + kNvme + "}");
  EXPECT_EQ(Sets(d).at("training.micro_batch_size"), "8") << "the Trainer's per_device_train_batch_size default";
  EXPECT_EQ(Sets(d).at("training.gradient_clipping"), "1") << "the Trainer's max_grad_norm default";
  EXPECT_TRUE(HasNote(d, "auto: train_micro_batch_size_per_gpu = 8 (as the Hugging Face Trainer fills it: per_device_train_batch_size 8, the Trainer's default)"));
  EXPECT_TRUE(HasNote(d, "auto: gradient_clipping = 1.0"));
  EXPECT_FALSE(HasNote(d, "default: gradient_clipping")) << "auto is not absent";
  for (const char* key : {"ignored: flops_profiler:", "ignored: comms_logger:"}) {
    EXPECT_EQ(std::count_if(d.notes.begin(), d.notes.end(), [&](const std::string& n) { return n.find(key) == 0; }), 1) << key;
  }
}

// "auto" as the Hugging Face Trainer fills it at launch (transformers' HfTrainerDeepSpeedConfig):
// from the arguments given, else from what the config's explicit keys say they were, else the
// Trainer's defaults; the buckets from the model's hidden size, the batch from the world size.
TEST(DeepSpeedImport, AutoIsWhatTheTrainerWouldWrite) {
  const std::string config = R"({"train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto", "gradient_accumulation_steps": 4,
      "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"},
      "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
      "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                    "warmup_num_steps": "auto", "total_num_steps": "auto"}},
      "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_param_persistence_threshold": "auto",
          "stage3_prefetch_bucket_size": "auto",
          "offload_param": {"device": "nvme", "nvme_path": "/n"}, "offload_optimizer": {"device": "nvme", "nvme_path": "/n"}}})";
  HfTrainerArgs trainer;
  trainer.hidden_size = 4096;
  trainer.world_size = 4;
  trainer.arguments = {{"per_device_train_batch_size", "2"}, {"learning_rate", "2e-5"}, {"max_steps", "1000"}, {"warmup_ratio", "0.03"}};
  auto d = ImportDeepSpeedConfig(config, "ds.json", trainer);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  const auto sets = Sets(*d);
  EXPECT_EQ(sets.at("training.micro_batch_size"), "2");
  EXPECT_EQ(sets.at("training.gradient_accumulation_steps"), "4");
  EXPECT_EQ(sets.at("training.data_parallel"), "4") << "train_batch_size = 4 ranks x 2 x 4 = 32";
  EXPECT_EQ(sets.at("training.dtype"), "bf16") << "\"auto\" with neither --bf16 nor --fp16: bf16, said";
  EXPECT_TRUE(HasNote(*d, "auto: bf16.enabled = true (as the Hugging Face Trainer fills it: taken as launched with --bf16"));
  EXPECT_EQ(sets.at("training.optimizer.lr"), "2e-05");
  EXPECT_EQ(sets.at("training.optimizer.betas"), "[0.9, 0.999]");
  EXPECT_EQ(sets.at("training.optimizer.weight_decay"), "0");
  EXPECT_EQ(sets.at("training.lr_schedule.type"), "WarmupDecayLR");
  EXPECT_EQ(sets.at("training.lr_schedule.total_steps"), "1000");
  EXPECT_EQ(sets.at("training.lr_schedule.warmup_steps"), "30") << "ceil(0.03 x 1000)";
  EXPECT_EQ(sets.at("training.lr_schedule.min_lr_ratio"), "0") << "the Trainer writes warmup_min_lr 0";
  EXPECT_EQ(sets.at("policy.reduce_bucket_size"), "16777216") << "hidden_size squared";
  EXPECT_EQ(sets.at("policy.param_persistence_threshold"), "40960") << "10 x hidden_size";
  EXPECT_TRUE(HasNote(*d, "ignored: zero_optimization.stage3_prefetch_bucket_size \"auto\" = 15099494 (as the Hugging Face Trainer fills it: "
                          "int(0.9 x hidden_size x hidden_size), the model's hidden size 4096): not modelled"));
  EXPECT_TRUE(HasNote(*d, "auto: train_batch_size = 32 (as the Hugging Face Trainer fills it: world size 4 x per_device_train_batch_size 2 x "
                          "gradient_accumulation_steps 4)"));

  // Without the arguments, the config's explicit keys say what they were: its optimizer's rate is
  // the Trainer's learning_rate, which warmup_max_lr "auto" takes; the step count stays unknown.
  const std::string explicit_lr = R"({"bf16": {"enabled": true}, "optimizer": {"type": "AdamW", "params": {"lr": 3e-4}},
      "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": "auto", "warmup_num_steps": "auto"}}, )" + std::string(kNvme) + "}";
  const DeepSpeedImport inferred = ImportOk(explicit_lr);
  EXPECT_EQ(Sets(inferred).at("training.optimizer.lr"), "0.0003");
  EXPECT_TRUE(HasNote(inferred, "auto: scheduler.params.warmup_max_lr = 0.0003 (as the Hugging Face Trainer fills it: learning_rate 0.0003, as your "
                                "optimizer.params.lr says)"));
  EXPECT_EQ(Sets(inferred).count("training.lr_schedule.warmup_steps"), 0u);
  EXPECT_TRUE(HasNote(inferred, "ignored: scheduler.params.warmup_num_steps is \"auto\""));

  // The Trainer refuses a config that disagrees with its arguments, and so does the import.
  HfTrainerArgs other;
  other.arguments = {{"learning_rate", "1e-5"}};
  auto mismatch = ImportDeepSpeedConfig(explicit_lr, "ds.json", other);
  EXPECT_EQ(mismatch.status().message(), "ds.json: optimizer.params.lr is 0.0003 in the config and --hf learning_rate=1e-5: the Trainer refuses a "
                                         "config that disagrees with its arguments; make them equal, or write \"auto\"");
  other.arguments = {{"learning_rat", "1e-5"}};
  EXPECT_NE(ImportDeepSpeedConfig(explicit_lr, "ds.json", other).status().message().find("--hf learning_rat: not a TrainingArguments field"),
            std::string::npos);
  other.arguments = {{"max_steps", "1.5"}};
  EXPECT_EQ(ImportDeepSpeedConfig(explicit_lr, "ds.json", other).status().message(), "ds.json: --hf max_steps=1.5: expected an integer");
  other.arguments = {{"bf16", "yes"}};
  EXPECT_EQ(ImportDeepSpeedConfig(explicit_lr, "ds.json", other).status().message(), "ds.json: --hf bf16=yes: expected true or false");
  // --hf fp16=true with both "auto": fp16, as the Trainer launched with --fp16.
  other.arguments = {{"fp16", "true"}};
  auto fp16 = ImportDeepSpeedConfig(std::string(R"({"bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"}, )") + kNvme + "}", "ds.json", other);
  ASSERT_TRUE(fp16.ok()) << fp16.status().ToString();
  EXPECT_EQ(Sets(*fp16).at("training.dtype"), "fp16");
}

TEST(DeepSpeedImport, RefusesWhatZeroInfinityIsNot) {
  const std::string nvme = kNvme;
  const std::string bf16 = R"("bf16": {"enabled": true}, )";
  struct Case {
    std::string json, message;
  };
  for (const Case& c : std::vector<Case>{
           {"[1, 2]", "ds.json: expected a JSON object"},
           {R"({"bf16": {"enabled": true}})", "zero_optimization: missing"},
           {"{" + bf16 + R"("zero_optimization": {"stage": 1}})", "zero_optimization.stage 1: tierflow's zero-infinity is ZeRO stage 3"},
           {"{" + nvme + "}", "neither bf16.enabled nor fp16.enabled"},
           {R"({"bf16": {"enabled": true}, "fp16": {"enabled": true}, )" + nvme + "}", "both true"},
           {R"({"fp16": {"enabled": true, "loss_scale": 128}, )" + nvme + "}", "fp16.loss_scale 128: a static loss scale"},
           {"{" + bf16 + R"("train_micro_batch_size_per_gpu": 3, "train_batch_size": 8, )" + nvme + "}",
            "train_batch_size 8 is not a multiple of train_micro_batch_size_per_gpu x gradient_accumulation_steps = 3"},
           {"{" + bf16 + R"("zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "nvme"}}})",
            "offload_param.device 'cpu': zero-infinity keeps parameters on NVMe ('nvme') or on the GPU ('none'); parameters in CPU memory"},
           {"{" + bf16 + R"("zero_optimization": {"stage": 3, "offload_optimizer": {"device": "gpu"}}})",
            "offload_optimizer.device 'gpu': zero-infinity keeps the optimizer states on NVMe ('nvme'), in host memory ('cpu', with ratio: "
            "part of them on the GPU) or on the GPU ('none')"},
           {"{" + bf16 + R"("zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 1.5}}})",
            "zero_optimization.offload_optimizer.ratio 1.5: a share, in [0, 1]"},
           {"{" + bf16 + R"("zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/a"},
              "offload_optimizer": {"device": "nvme", "nvme_path": "/b"}}})",
            "offload_param.nvme_path '/a' and offload_optimizer.nvme_path '/b' differ"},
           {"{" + bf16 + R"("zero_optimization": {"stage": 3, "sub_group_size": 1.5, "offload_optimizer": {"device": "nvme"}}})",
            "zero_optimization.sub_group_size: '1.5' is not an integer (an integer of at least 1)"},
           {"{" + bf16 + R"("optimizer": {"type": "SGD"}, )" + nvme + "}", "optimizer.type 'SGD'"},
           {"{" + bf16 + R"("zero_optimization": {"stage": 3, "offload_optimizer": []}})", "zero_optimization.offload_optimizer: expected an object"},
       }) {
    auto d = ImportDeepSpeedConfig(c.json, "ds.json");
    ASSERT_FALSE(d.ok()) << c.json;
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(d.status().message().rfind("ds.json: ", 0), 0u) << d.status().message();
    EXPECT_NE(d.status().message().find(c.message), std::string::npos) << d.status().message();
  }
}

// ZeRO-Offload (offload_optimizer.device cpu) is zero-infinity with every sub-group's states in
// host memory: imported as policy.offload_optimizer cpu (the nvme-only keys said ignored, a ratio
// of 1 taken), planned with no optimizer state or gradient on the disk, exported back as device cpu.
TEST(DeepSpeedImport, ZeroOffloadsCpuOptimizerIsPlannedInHostMemoryAndExportedBack) {
  const std::string json = R"({"bf16": {"enabled": true}, "zero_optimization": {"stage": 3,
      "offload_param": {"device": "nvme", "nvme_path": "/n"},
      "offload_optimizer": {"device": "cpu", "pin_memory": true, "ratio": 1.0, "buffer_count": 4}}})";
  const DeepSpeedImport d = ImportOk(json);
  EXPECT_EQ(Sets(d).at("policy.offload_optimizer"), "cpu");
  EXPECT_EQ(Sets(d).count("policy.optimizer_buffer_count"), 0u);
  EXPECT_TRUE(HasNote(d, "ignored: zero_optimization.offload_optimizer.buffer_count: DeepSpeed reads it with device 'nvme' only"));
  std::vector<std::string> sets;
  for (const auto& [k, v] : d.sets) sets.push_back(k + "=" + v);
  auto s = LoadScenarioText("name: t\nmodel: {preset: tiny}\nhardware: {preset: a100x4-1nvme}\n", sets);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto cpu = Plan(*s);
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  auto nvme_scenario = *s;
  nvme_scenario.knobs = Knobs(std::map<std::string, std::string>{{"offload_optimizer", "nvme"}});
  auto nvme = Plan(nvme_scenario);
  ASSERT_TRUE(nvme.ok()) << nvme.status().ToString();
  // The control: the same model with states on NVMe moves them; with cpu nothing of the step
  // touches the disk.
  auto step_io = [](const Schedule& schedule) {
    int64_t n = 0;
    for (const TaskSpec& t : schedule.tasks()) {
      if ((t.op == Op::kRead || t.op == Op::kWrite) && (t.id.find("states") != std::string::npos || t.id.find("grad") != std::string::npos)) ++n;
    }
    return n;
  };
  EXPECT_GT(step_io(*nvme), 0);
  EXPECT_EQ(step_io(*cpu), 0);
  std::vector<std::string> notes;
  auto back = ExportDeepSpeedConfig(*s, "/n", &notes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const auto exported = nlohmann::json::parse(*back);
  EXPECT_EQ(exported["zero_optimization"]["offload_optimizer"]["device"], "cpu");
  EXPECT_FALSE(exported["zero_optimization"]["offload_optimizer"].contains("nvme_path"));
  EXPECT_EQ(Sets(ImportOk(*back)).at("policy.offload_optimizer"), "cpu");
}

// ZeRO-3 without optimizer offload (device none) and ZeRO-Offload++ (device cpu, ratio below 1)
// plan the update on the GPU: every sub-group's states there, or the first int((1 - ratio) *
// sub-groups) of them (DeepSpeed's stage 3 subgroup_to_device), the rest in host memory; both
// export back as DeepSpeed wrote them.
TEST(DeepSpeedImport, OptimizerStatesOnTheGpuAndZeroOffloadPlusPlusArePlannedAndExportedBack) {
  struct Case {
    std::string optimizer;  // the offload_optimizer object
    std::string device;
    double ratio;
  };
  for (const Case& c : std::vector<Case>{{R"({"device": "none"})", "none", 1.0},
                                         {R"({"device": "cpu", "pin_memory": true, "ratio": 0.5})", "cpu", 0.5},
                                         {R"({"device": "cpu", "pin_memory": true, "ratio": 0.7})", "cpu", 0.7}}) {
    const std::string json = R"({"bf16": {"enabled": true}, "zero_optimization": {"stage": 3, "sub_group_size": 200000,
        "offload_param": {"device": "none"}, "offload_optimizer": )" + c.optimizer + "}}";
    const DeepSpeedImport d = ImportOk(json);
    EXPECT_EQ(Sets(d).at("policy.offload_optimizer"), c.device);
    EXPECT_EQ(Sets(d).count("policy.ratio"), c.ratio != 1.0 ? 1u : 0u) << c.optimizer;
    std::vector<std::string> sets;
    for (const auto& [k, v] : d.sets) sets.push_back(k + "=" + v);
    auto s = LoadScenarioText("name: t\nmodel: {preset: tiny}\nhardware: {preset: a100x4-1nvme}\n", sets);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    auto planned = Plan(*s);
    ASSERT_TRUE(planned.ok()) << planned.status().ToString();
    int on_gpu = 0, on_cpu = 0;
    for (const TaskSpec& t : planned->tasks()) {
      if (t.op != Op::kOptimizer || t.rank != 0) continue;
      const bool gpu = planned->devices()[static_cast<size_t>(planned->resources()[static_cast<size_t>(t.resource)].device)].kind == DeviceKind::kGpu;
      (gpu ? on_gpu : on_cpu) += 1;
    }
    ASSERT_GE(on_gpu + on_cpu, 3) << "sub-groups enough to split";
    const int want = c.device == "none" ? on_gpu + on_cpu : static_cast<int>((1 - c.ratio) * (on_gpu + on_cpu));
    EXPECT_EQ(on_gpu, want) << c.optimizer;
    EXPECT_GT(on_gpu, 0) << c.optimizer;
    std::vector<std::string> notes;
    auto back = ExportDeepSpeedConfig(*s, "/n", &notes);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    const auto exported = nlohmann::json::parse(*back)["zero_optimization"]["offload_optimizer"];
    EXPECT_EQ(exported["device"], c.device) << *back;
    EXPECT_EQ(exported.contains("ratio"), c.ratio != 1.0) << *back;
    if (c.ratio != 1.0) {
      EXPECT_EQ(exported["ratio"].get<double>(), c.ratio);
    }
    const auto again = Sets(ImportOk(*back));
    EXPECT_EQ(again.at("policy.offload_optimizer"), c.device) << "round trip";
    EXPECT_EQ(again.count("policy.ratio") ? again.at("policy.ratio") : "1", Sets(d).count("policy.ratio") ? Sets(d).at("policy.ratio") : "1");
  }
}

TEST(DeepSpeedExport, ImportsBackToTheSameKnobsAndTraining) {
  auto s = LoadScenarioText(R"(
name: t
model: {preset: tiny}
hardware: {preset: a100x4-1nvme}
training: {micro_batch_size: 2, gradient_accumulation_steps: 3, data_parallel: 4, gradient_clipping: 0.25}
policy: {name: zero-infinity, buffer_count: 7, buffer_size: 3e6, sub_group_size: 2e6, pipeline_write: true, block_size: 512 KiB,
         queue_depth: 4, param_persistence_threshold: 2000, optimizer_buffer_count: 6, cpu_threads: 3, reduce_bucket_size: 3e7,
         max_reuse_distance: 4e6}
)");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<std::string> notes;
  auto json = ExportDeepSpeedConfig(*s, "/mnt/nvme", &notes);
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("policy.cpu_threads 3"), std::string::npos) << notes[0];
  const DeepSpeedImport back = ImportOk(*json);
  for (const std::string& n : back.notes) EXPECT_NE(n.find(".pin_memory: tierflow's buffers are pinned"), std::string::npos) << n;
  std::vector<std::string> sets;
  for (const auto& [k, v] : back.sets) sets.push_back(k + "=" + v);
  sets.push_back("policy.cpu_threads=3");
  auto again = LoadScenarioText(R"(
name: t
model: {preset: tiny}
hardware: {preset: a100x4-1nvme}
)", sets);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->training, s->training);
  for (const auto& [k, v] : s->knobs.values()) {
    auto it = again->knobs.values().find(k);
    ASSERT_NE(it, again->knobs.values().end()) << k;
    Knobs a(std::map<std::string, std::string>{{k, v}}), b(std::map<std::string, std::string>{{k, it->second}});
    if (k == "block_size") {
      EXPECT_EQ(*a.Bytes(k, 0), *b.Bytes(k, 0)) << k;
    } else if (v == "true" || v == "false") {
      EXPECT_EQ(*a.Bool(k, false), *b.Bool(k, false)) << k;
    } else {
      EXPECT_EQ(*a.Number(k, 0), *b.Number(k, 0)) << k << ": " << v << " against " << it->second;
    }
  }
  s->policy = "mlp-offload";
  auto refused = ExportDeepSpeedConfig(*s, "/mnt/nvme", &notes);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("policy 'mlp-offload' has no DeepSpeed config"), std::string::npos);
}

// Every leaf of a config, by dotted path.
void Leaves(const nlohmann::ordered_json& j, const std::string& path, std::map<std::string, nlohmann::ordered_json>* out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) Leaves(it.value(), path.empty() ? it.key() : path + "." + it.key(), out);
  } else {
    (*out)[path] = j;
  }
}

// A Hugging Face-style config with "auto" values, tuned to more swap buffers: the export onto it
// changes that key alone, and every other key (its "auto"s, optimizer, scheduler, overlap_comm)
// stays as written.
TEST(DeepSpeedExport, OntoTheUsersConfigChangesOnlyTheTunedKeys) {
  const std::string base = R"({"train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto", "gradient_accumulation_steps": 4,
      "gradient_clipping": 1.0, "bf16": {"enabled": "auto"},
      "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
      "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": "auto", "warmup_num_steps": "auto"}},
      "zero_optimization": {"stage": 3, "overlap_comm": true, "reduce_bucket_size": "auto", "stage3_param_persistence_threshold": "auto",
          "sub_group_size": 1e9, "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9,
          "offload_param": {"device": "nvme", "nvme_path": "/local_nvme", "pin_memory": true, "buffer_count": 5, "buffer_size": 1e8},
          "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme", "pin_memory": true}},
      "aio": {"block_size": 1048576, "queue_depth": 8, "thread_count": 1}, "steps_per_print": 2000})";
  HfTrainerArgs trainer;
  trainer.hidden_size = 4096;
  trainer.world_size = 4;
  auto imported = ImportDeepSpeedConfig(base, "ds.json", trainer);
  ASSERT_TRUE(imported.ok()) << imported.status().ToString();
  std::vector<std::string> sets;
  for (const auto& [k, v] : imported->sets) sets.push_back(k + "=" + v);
  const std::string yaml = "name: t\nmodel: {preset: llama2-7b}\nhardware: {preset: a100x4-1nvme}\n";
  auto as_written = LoadScenarioText(yaml, sets);
  ASSERT_TRUE(as_written.ok()) << as_written.status().ToString();
  std::vector<std::string> notes, changed;
  auto same = ExportDeepSpeedConfigOnto(*as_written, base, "ds.json", {}, &notes, &changed);
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_TRUE(changed.empty()) << changed.front() << ": the scenario imported from the config changes nothing";
  EXPECT_EQ(nlohmann::ordered_json::parse(*same), nlohmann::ordered_json::parse(base));

  sets.push_back("policy.buffer_count=9");
  sets.push_back("policy.pipeline_read=true");
  auto tuned = LoadScenarioText(yaml, sets);
  ASSERT_TRUE(tuned.ok()) << tuned.status().ToString();
  auto out = ExportDeepSpeedConfigOnto(*tuned, base, "ds.json", {}, &notes, &changed);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(changed, (std::vector<std::string>{"zero_optimization.offload_param.buffer_count: 5 -> 9",
                                               "zero_optimization.offload_optimizer.pipeline_read: absent (DeepSpeed's default false) -> true"}));
  std::map<std::string, nlohmann::ordered_json> before, after;
  Leaves(nlohmann::ordered_json::parse(base), "", &before);
  Leaves(nlohmann::ordered_json::parse(*out), "", &after);
  for (const auto& [path, value] : before) {
    if (path == "zero_optimization.offload_param.buffer_count") {
      EXPECT_EQ(after.at(path), 9) << path;
    } else {
      ASSERT_TRUE(after.count(path)) << path << " is gone";
      EXPECT_EQ(after.at(path), value) << path;
    }
  }
  EXPECT_EQ(after.size(), before.size() + 1) << "one key added: pipeline_read";
  EXPECT_EQ(after.at("zero_optimization.offload_optimizer.pipeline_read"), true);

  // A base that import refuses is refused with its reason.
  auto bad = ExportDeepSpeedConfigOnto(*tuned, R"({"bf16": {"enabled": true}, "zero_optimization": {"stage": 2}})", "mine.json", {}, &notes, &changed);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("mine.json: zero_optimization.stage 2"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace tierflow::policies
