// A schedule's typed sections (Schedule::Sections) are written from the structs directly
// (LlmToJson, HardwareToJson, TrainingToJson): the same JSON values that the scenario's YAML
// (LlmToYaml, ...) read as a tree and written as JSON (YamlToJson) gives, for every preset, a
// hardware with every optional field, names that need escapes, and random training setups.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>
#include <random>

#include "tierflow/models/hardware.h"
#include "tierflow/models/llm.h"
#include "tierflow/models/training.h"
#include "tierflow/models/yaml_tree.h"

namespace tierflow::models {
namespace {

// The JSON written directly equals the YAML's as JSON values (numbers of the same type and
// value, the same strings), which is what the schedule file's writer keeps.
void ExpectSameValues(const std::string& yaml, const std::string& json, const std::string& what) {
  const nlohmann::json via_yaml = nlohmann::json::parse(YamlToJson(YAML::Load(yaml)));
  const nlohmann::json direct = nlohmann::json::parse(json);
  EXPECT_TRUE(direct.is_object()) << what;
  EXPECT_EQ(direct.dump(), via_yaml.dump()) << what << "\n" << yaml;
}

TEST(SectionsTest, EveryModelPresetAndANameThatNeedsEscapes) {
  for (const std::string& name : LlmPresetNames()) {
    auto c = LlmPreset(name);
    ASSERT_TRUE(c.ok());
    ExpectSameValues(LlmToYaml(*c), LlmToJson(*c), name);
    c->name = "we\"ird\\ name\n\t\x01 \xc3\xa9";
    c->sliding_window = 4096;
    ExpectSameValues(LlmToYaml(*c), LlmToJson(*c), name + " renamed");
  }
}

TEST(SectionsTest, EveryHardwarePresetWithAndWithoutItsOptionalFields) {
  for (const std::string& name : HardwarePresetNames()) {
    auto h = HardwarePreset(name);
    ASSERT_TRUE(h.ok());
    ExpectSameValues(HardwareToYaml(*h), HardwareToJson(*h), name);
    HardwareSpec x = *h;
    NodeSpec& n = x.node;
    n.gpu.forward_efficiency = 0.5;
    n.gpu.backward_efficiency = 0.25;
    n.gpu.adam_bw_bytes_per_s = 1e12;
    n.gpu.shares_host_cores = true;
    n.pcie.d2h_bf16_bw_bytes_per_s = 3e9;
    n.cpu.host_reserve_bytes = 1 << 20;
    n.cpu.task_overhead_s = 1e-5;
    n.cpu.task_overhead_cpu_s = 2e-6;
    n.cpu.io_read_cores = {{4096, 1, 0.5}, {1 << 20, 8, 1.25}};
    n.cpu.io_write_beside_compute = {{4096, 1, 0.9}};
    n.interconnect.local_bw_bytes_per_s = 5e10;
    n.nic_bw_bytes_per_s = 1e10;
    n.nic_latency_s = 2e-6;
    n.remote.push_back({"pfs", 1e9, 2e9, 1e-3});
    for (NvmeSpec& d : n.nvme) {
      d.read_iops = 1e6;
      d.write_iops = 5e5;
      d.mixed_efficiency_by_streams = {{1, 0.9}, {2, 0.8}};
      d.read_bw_by_request = {{4096, 1, 1e8}};
      d.same_device_as = 0;
    }
    ExpectSameValues(HardwareToYaml(x), HardwareToJson(x), name + " with every optional field");
    n.nvme.clear();
    n.remote.clear();
    ExpectSameValues(HardwareToYaml(x), HardwareToJson(x), name + " without disks");
  }
}

TEST(SectionsTest, TrainingSetups) {
  ExpectSameValues(TrainingToYaml(TrainingSetup{}), TrainingToJson(TrainingSetup{}), "defaults");
  std::mt19937 rng(3);
  for (int i = 0; i < 200; ++i) {
    TrainingSetup t;
    t.micro_batch_size = 1 + static_cast<int64_t>(rng() % 64);
    t.sequence_length = 1 + static_cast<int64_t>(rng() % 9000);
    t.activation_checkpointing = rng() % 2 == 0;
    t.gradient_clipping = std::uniform_real_distribution<double>(0, 3)(rng);
    t.optimizer.lr = std::uniform_real_distribution<double>(1e-7, 1e-2)(rng);
    t.optimizer.beta2 = 0.95;
    t.seed = rng() % 2 == 0 ? -1 : static_cast<int64_t>(rng() % 100000);
    t.lr_schedule.warmup_steps = static_cast<int64_t>(rng() % 100);
    ExpectSameValues(TrainingToYaml(t), TrainingToJson(t), "draw " + std::to_string(i));
  }
}

}  // namespace
}  // namespace tierflow::models
