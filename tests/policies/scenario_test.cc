#include "tierflow/policies/scenario.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "tierflow/policies/policy.h"

namespace tierflow::policies {
namespace {

const char* kBase = R"(
name: t
model: {preset: llama2-7b}
hardware: {preset: a100x4-1nvme}
training: {micro_batch_size: 1, sequence_length: 2048}
policy: {name: zero-infinity, pipeline_read: true}
)";

std::string ErrorOf(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  auto s = LoadScenarioText(yaml, sets, "s.yaml");
  return s.ok() ? "OK" : s.status().ToString();
}

TEST(Scenario, LoadsPresetsTrainingAndKnobs) {
  auto s = LoadScenarioText(kBase, {}, "s.yaml");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->model.name, "llama2-7b");
  EXPECT_EQ(s->training.sequence_length, 2048);
  EXPECT_EQ(s->training.data_parallel, s->hardware.node.gpu_count);  // 0 = every GPU
  EXPECT_EQ(s->policy, "zero-infinity");
  EXPECT_EQ(s->knobs.values().at("pipeline_read"), "true");
}

TEST(Scenario, SetOverridesApplyBeforeReading) {
  auto s = LoadScenarioText(kBase, {"policy.name=other", "policy.sub_group_size=1e8", "training.sequence_length=512",
                                    "model.layers=3"}, "s.yaml");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->policy, "other");
  EXPECT_EQ(s->knobs.values().at("sub_group_size"), "1e8");
  EXPECT_EQ(s->training.sequence_length, 512);
  EXPECT_EQ(s->model.layers, 3);
  EXPECT_NE(s->yaml.find("512"), std::string::npos);  // the effective scenario is kept
}

TEST(Scenario, MalformedFilesGetOneClearErrorNamingTheKey) {
  EXPECT_NE(ErrorOf("name: [").find("not valid YAML"), std::string::npos);
  EXPECT_NE(ErrorOf(std::string(kBase) + "colour: red\n").find("unknown key 'colour'"), std::string::npos);
  EXPECT_NE(ErrorOf(kBase, {"training.sequence_length=-5"}).find("training.sequence_length: '-5' is below 1 (an integer from 1 to 16777216)"),
            std::string::npos);
  EXPECT_NE(ErrorOf(kBase, {"training.sequence_length=long"}).find("training.sequence_length: 'long' is not an integer"),
            std::string::npos);
  EXPECT_NE(ErrorOf(kBase, {"training.batch=4"}).find("training: unknown key 'batch'"), std::string::npos);
  EXPECT_NE(ErrorOf(kBase, {"training.activation_checkpointing=maybe"}).find("is not true or false"), std::string::npos);
  const std::string unknown_model = ErrorOf(kBase, {"model.preset=llama9-1t"});
  EXPECT_NE(unknown_model.find("llama9-1t"), std::string::npos) << unknown_model;
  const std::string unknown_hw = ErrorOf(kBase, {"hardware.preset=cray-1"});
  EXPECT_NE(unknown_hw.find("cray-1"), std::string::npos) << unknown_hw;
  EXPECT_NE(ErrorOf(kBase, {"training.data_parallel=64"}).find("exceeds the 4 GPUs"), std::string::npos);
  EXPECT_NE(ErrorOf(kBase, {"nonsense"}).find("expected key.path=value"), std::string::npos);
  EXPECT_NE(ErrorOf("model: {preset: llama2-7b}\n").find("missing key 'hardware'"), std::string::npos);
}

TEST(Knobs, TypedGettersAndUnknownKnobs) {
  Knobs k({{"a", "1e8"}, {"b", "true"}, {"c", "4 MiB"}, {"typo", "1"}});
  EXPECT_EQ(k.Int("a", 0).value(), 100000000);
  EXPECT_TRUE(k.Bool("b", false).value());
  EXPECT_EQ(k.Bytes("c", 0).value(), 4 << 20);
  EXPECT_EQ(k.Int("absent", 7).value(), 7);
  Status s = k.Finish("p");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("policy.typo: unknown knob for policy 'p'"), std::string::npos) << s.message();
  Knobs bad({{"a", "1.5"}, {"c", "4096"}});
  EXPECT_FALSE(bad.Int("a", 0).ok());
  auto unitless = bad.Bytes("c", 0);
  ASSERT_FALSE(unitless.ok());
  EXPECT_NE(unitless.status().message().find("policy.c"), std::string::npos);
}

// A policy's defaults, as its plan reads them: what tune shows beside a change to or from one.
TEST(Knobs, DefaultsAreWhatThePlanReads) {
  std::map<std::string, std::string> recorded;
  Knobs k(std::map<std::string, std::string>{{"a", "3"}});
  k.RecordDefaultsIn(&recorded);
  Knobs copy = k;  // a policy reads a copy
  EXPECT_EQ(copy.Int("a", 0).value(), 3);
  EXPECT_EQ(copy.Int("n", 7).value(), 7);
  EXPECT_TRUE(copy.Bool("flag", true).value());
  EXPECT_EQ(copy.Bytes("size", 1 << 20).value(), 1 << 20);
  EXPECT_EQ(copy.String("mode", "nvme", {"nvme", "none"}).value(), "nvme");
  EXPECT_EQ(recorded, (std::map<std::string, std::string>{{"flag", "true"}, {"mode", "nvme"}, {"n", "7"}, {"size", "1048576 B"}}))
      << "set knobs are not defaults";

  auto s = LoadScenarioText(kBase, {"policy.buffer_count=9"}, "s.yaml");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const std::map<std::string, std::string> defaults = KnobDefaults(*s);
  EXPECT_EQ(defaults.at("optimizer_buffer_count"), "4") << "DeepSpeed's";
  EXPECT_EQ(defaults.at("pipeline_write"), "false");
  EXPECT_EQ(defaults.at("block_size"), "1048576 B");
  EXPECT_EQ(defaults.count("buffer_count"), 0u) << "set in the scenario";
  EXPECT_EQ(defaults.count("pipeline_read"), 0u) << "set in the scenario";
  EXPECT_TRUE(s->knobs.values().count("buffer_count")) << "the scenario itself is not changed";
}

}  // namespace
}  // namespace tierflow::policies
