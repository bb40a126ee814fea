// The training setup's reader and writer, a model written out in full, and the YAML tree helpers
// behind a schedule file's typed sections: what is written reads back to the same value.
#include "tierflow/models/training.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "tierflow/models/hardware.h"
#include "tierflow/models/llm.h"
#include "tierflow/models/yaml_tree.h"

namespace tierflow::models {
namespace {

StatusOr<TrainingSetup> TrainingOf(const std::string& yaml) { return TrainingFromYaml(YAML::Load(yaml)); }

TEST(TrainingSetupTest, DefaultsAndTheLossScalingThatFollowsTheDtype) {
  auto none = TrainingFromYaml(YAML::Node());
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, TrainingSetup{});
  auto fp16 = TrainingOf("{dtype: fp16}");
  ASSERT_TRUE(fp16.ok()) << fp16.status().ToString();
  EXPECT_EQ(fp16->loss_scaling, "dynamic");
  EXPECT_TRUE(fp16->UpdateNeedsGlobalCheck());
}

TEST(TrainingSetupTest, WrittenAndReadBackIsTheSame) {
  auto defaults = TrainingOf(TrainingToYaml(TrainingSetup{}));
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString() << "\n" << TrainingToYaml(TrainingSetup{});
  EXPECT_EQ(*defaults, TrainingSetup{});
  TrainingSetup t;
  t.micro_batch_size = 3;
  t.sequence_length = 2048;
  t.gradient_accumulation_steps = 8;
  t.data_parallel = 4;
  t.activation_checkpointing = false;
  t.dtype = "fp16";
  t.loss_scaling = "none";
  t.gradient_clipping = 1.0 / 3.0;
  t.optimizer = {.lr = 2e-5, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-6, .weight_decay = 0.01};
  t.lr_schedule = {.type = "cosine", .warmup_steps = 100, .total_steps = 1000, .min_lr_ratio = 0.1};
  t.seed = 42;
  auto back = TrainingOf(TrainingToYaml(t));
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << TrainingToYaml(t);
  EXPECT_EQ(*back, t);
  // And through the JSON of a schedule's section.
  auto via_json = TrainingOf(YamlToJson(YAML::Load(TrainingToYaml(t))));
  ASSERT_TRUE(via_json.ok()) << via_json.status().ToString();
  EXPECT_EQ(*via_json, t);
}

TEST(TrainingSetupTest, TheOptimizerAndItsScheduleAreChecked) {
  auto t = TrainingOf("{optimizer: {lr: 3e-4, betas: [0.9, 0.95]}, lr_schedule: {type: linear, warmup_steps: 10, total_steps: 100}}");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->optimizer.lr, 3e-4);
  EXPECT_EQ(t->optimizer.weight_decay, 0);
  EXPECT_EQ(t->lr_schedule.type, "linear");
  EXPECT_EQ(t->seed, -1);
  EXPECT_EQ(TrainingOf("{optimizer: {lr: 0}}").status().message(), "training.optimizer.lr: '0' must be a finite number > 0");
  EXPECT_EQ(TrainingOf("{optimizer: {lr: .inf}}").status().message(), "training.optimizer.lr: '.inf' is above 1000 (a number from 0 to 1000)");
  EXPECT_EQ(TrainingOf("{optimizer: {betas: [0.9]}}").status().message(), "training.optimizer.betas: expected [beta1, beta2]");
  EXPECT_EQ(TrainingOf("{optimizer: {betas: [0.9, 1]}}").status().message(), "training.optimizer.betas: each must be in [0, 1)");
  EXPECT_EQ(TrainingOf("{optimizer: {weight_decay: 2}}").status().message(), "training.optimizer.weight_decay: '2' is above 1 (a number from 0 to 1)");
  EXPECT_EQ(TrainingOf("{optimizer: {momentum: 0.9}}").status().message().substr(0, 48), "training.optimizer: unknown key 'momentum' (know");
  EXPECT_EQ(TrainingOf("{lr_schedule: {type: polynomial}}").status().message(),
            "training.lr_schedule.type: 'polynomial' (constant, linear or cosine; DeepSpeed's WarmupLR, WarmupDecayLR or WarmupCosineLR)");
  EXPECT_EQ(TrainingOf("{lr_schedule: {type: cosine, warmup_steps: 10}}").status().message(),
            "training.lr_schedule: a cosine schedule needs total_steps above warmup_steps (0 <= 10)");
  EXPECT_EQ(TrainingOf("{seed: -3}").status().message(), "training.seed: '-3' is below 0 (an integer from 0 to 9007199254740992)");
}

// DeepSpeed's schedules by its names: a log warm-up unless told, their own keys, and back through
// the YAML a schedule carries.
TEST(TrainingSetupTest, DeepSpeedsSchedulesKeepTheirKeys) {
  auto t = TrainingOf("{lr_schedule: {type: WarmupCosineLR, warmup_steps: 10, total_steps: 100, min_lr_ratio: 0.0001, warmup_min_ratio: 0.2}}");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->lr_schedule.warmup_type, "log");
  EXPECT_EQ(t->lr_schedule.warmup_min_ratio, 0.2);
  auto back = TrainingOf(TrainingToYaml(*t));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, *t);
  auto linear = TrainingOf("{lr_schedule: {type: WarmupLR, warmup_steps: 5, warmup_type: linear}}");
  ASSERT_TRUE(linear.ok()) << linear.status().ToString();
  EXPECT_EQ(linear->lr_schedule.warmup_type, "linear");
  EXPECT_EQ(TrainingOf("{lr_schedule: {type: WarmupDecayLR, warmup_steps: 5}}").status().message(),
            "training.lr_schedule: WarmupDecayLR needs total_steps (DeepSpeed's total_num_steps)");
  EXPECT_EQ(TrainingOf("{lr_schedule: {type: cosine, total_steps: 9, warmup_type: log}}").status().message(),
            "training.lr_schedule.warmup_type: DeepSpeed's schedules take it (WarmupLR, WarmupDecayLR, WarmupCosineLR), not 'cosine' "
            "(its warm-up is linear from 0)");
  EXPECT_EQ(TrainingOf("{lr_schedule: {type: WarmupLR, warmup_type: exp}}").status().message(),
            "training.lr_schedule.warmup_type: 'exp' (log or linear)");
}

TEST(TrainingSetupTest, BadValuesNameTheKey) {
  EXPECT_EQ(TrainingOf("{sequence_length: -5}").status().message(), "training.sequence_length: '-5' is below 1 (an integer from 1 to 16777216)");
  EXPECT_EQ(TrainingOf("{gradient_accumulation_steps: 2000}").status().message(), "training.gradient_accumulation_steps: '2000' is above 1024 (an integer from 1 to 1024)");
  EXPECT_EQ(TrainingOf("{data_parallel: 4294967297}").status().message(), "training.data_parallel: '4294967297' is above 1048576 (an integer from 0 to 1048576)");
  EXPECT_EQ(TrainingOf("{sequence_length: 1e300}").status().message(), "training.sequence_length: '1e300' is above 16777216 (an integer from 1 to 16777216)");
  EXPECT_NE(TrainingOf("{micro_batch: 2}").status().message().find("training: unknown key 'micro_batch'"), std::string::npos);
  EXPECT_EQ(TrainingOf("{gradient_clipping: .nan}").status().message(),
            "training.gradient_clipping: '.nan' is not a number (a number of at least 0)");
}

// Every preset, written out dimension by dimension, reads back to itself, as YAML and as the
// JSON of a schedule's model section.
TEST(LlmYamlTest, EveryPresetWrittenOutReadsBackTheSame) {
  for (const std::string& name : LlmPresetNames()) {
    auto preset = LlmPreset(name);
    ASSERT_TRUE(preset.ok());
    const std::string yaml = LlmToYaml(*preset);
    for (const std::string& text : {yaml, YamlToJson(YAML::Load(yaml))}) {
      auto back = LlmFromYamlText(text);
      ASSERT_TRUE(back.ok()) << name << ": " << back.status().ToString() << "\n" << text;
      EXPECT_EQ(LlmToYaml(*back), yaml) << name;
      EXPECT_EQ(ParameterCount(*back), ParameterCount(*preset)) << name;
    }
  }
}

// The JSON of a tree loads back as the same tree: numbers and booleans stay plain, everything
// else (units, quoted digits, text needing escapes) is a string.
TEST(YamlTreeTest, JsonOfATreeLoadsBackTheSame) {
  const YAML::Node tree = YAML::Load("{a: 1, b: 2.5e9, c: \"007\", d: 25 GB/s, e: [true, null, 'x\"y\\z'], f: {g: -3}}");
  const std::string json = YamlToJson(tree);
  EXPECT_EQ(json, R"({"a": 1, "b": 2.5e9, "c": "007", "d": "25 GB/s", "e": [true, null, "x\"y\\z"], "f": {"g": -3}})");
  const YAML::Node back = YAML::Load(json);
  EXPECT_EQ(back["c"].as<std::string>(), "007");
  EXPECT_EQ(back["d"].as<std::string>(), "25 GB/s");
  EXPECT_EQ(back["e"][2].as<std::string>(), "x\"y\\z");
  EXPECT_EQ(back["f"]["g"].as<int>(), -3);
}

TEST(YamlTreeTest, OverridesCreateMapsAndNameWhatIsWrong) {
  YAML::Node root = YAML::Load("{node: {cpu: {cores: 2}}}");
  ASSERT_TRUE(ApplyYamlOverride(root, "node.cpu.cores=8").ok());
  ASSERT_TRUE(ApplyYamlOverride(root, "node.gpu.name=x").ok());
  EXPECT_EQ(root["node"]["cpu"]["cores"].as<int>(), 8);
  EXPECT_EQ(root["node"]["gpu"]["name"].as<std::string>(), "x");
  EXPECT_EQ(ApplyYamlOverride(root, "node").message(), "--set 'node': expected key.path=value");
  EXPECT_EQ(ApplyYamlOverride(root, "node..x=1").message(), "--set 'node..x=1': empty key in path 'node..x'");
  EXPECT_EQ(ApplyYamlOverride(root, "node.cpu.cores.x=1").message(), "--set 'node.cpu.cores.x=1': 'cores' is not a section");
  EXPECT_EQ(CheckYamlKeys(root, "hardware", {"node"}).ok(), true);
  EXPECT_EQ(CheckYamlKeys(root, "hardware", {"nodes"}).message(), "hardware: unknown key 'node' (known: nodes)");
}

}  // namespace
}  // namespace tierflow::models
