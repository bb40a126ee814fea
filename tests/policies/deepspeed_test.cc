// DeepSpeed configs in and out: each key mapped onto the zero-infinity scenario, noted when
// ignored or taken at DeepSpeed's default, refused with its rule; an exported scenario imports
// back to the same knobs and training.
#include "tierflow/policies/deepspeed.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

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
  EXPECT_EQ(sets.count("training.optimizer.eps"), 0u);
  EXPECT_TRUE(HasNote(d, "ignored: optimizer.params.eps is \"auto\""));
  EXPECT_TRUE(HasNote(d, "ignored: optimizer.params.torch_adam: not modelled"));
  auto bad = ImportDeepSpeedConfig(std::string(R"({"bf16": {"enabled": true}, "optimizer": {"type": "Adam", "params": {"betas": 0.9}}, )") + kNvme + "}", "ds.json");
  EXPECT_EQ(bad.status().message(), "ds.json: optimizer.params.betas: expected [beta1, beta2], got 0.9");
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
  EXPECT_EQ(Sets(d).count("training.micro_batch_size"), 0u);
  EXPECT_TRUE(HasNote(d, "ignored: train_micro_batch_size_per_gpu is \"auto\""));
  EXPECT_TRUE(HasNote(d, "ignored: gradient_clipping is \"auto\""));
  EXPECT_FALSE(HasNote(d, "default: gradient_clipping")) << "auto is not absent";
  for (const char* key : {"ignored: flops_profiler:", "ignored: comms_logger:"}) {
    EXPECT_EQ(std::count_if(d.notes.begin(), d.notes.end(), [&](const std::string& n) { return n.find(key) == 0; }), 1) << key;
  }
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
           {"{" + bf16 + R"("zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}})",
            "offload_optimizer.device 'cpu': zero-infinity keeps the optimizer states on NVMe ('nvme'); states in CPU memory"},
           {"{" + bf16 + R"("zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/a"},
              "offload_optimizer": {"device": "nvme", "nvme_path": "/b"}}})",
            "offload_param.nvme_path '/a' and offload_optimizer.nvme_path '/b' differ"},
           {"{" + bf16 + R"("zero_optimization": {"stage": 3, "sub_group_size": 1.5, "offload_optimizer": {"device": "nvme"}}})",
            "zero_optimization.sub_group_size: 1.5 is not an integer"},
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

}  // namespace
}  // namespace tierflow::policies
