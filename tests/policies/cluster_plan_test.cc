// Plans for a cluster (hardware.nodes > 1): ranks fill the nodes in order, and every device a
// rank's tasks, pools and state use is on its own node — its GPU, its host's CPU and pinned
// memory, its node's disks and remote tier — named node{n}.<device> (docs/hardware-format.md
// "Device names"); one node's plans keep the bare names.
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>

#include "tierflow/models/hardware.h"
#include "tierflow/policies/policy.h"

namespace tierflow::policies {
namespace {

const char* kCluster = R"(
name: cluster
model: {preset: tiny, layers: 2, hidden: 512, ffn: 1024, heads: 4, kv_heads: 4, vocab: 1024}
hardware:
  preset: a100x4-4nvme
  nodes: 2
  node:
    remote: [{name: pfs, read_bw: 1 GB/s, write_bw: 1 GB/s, latency: 1 ms}]
training: {micro_batch_size: 1, sequence_length: 128, data_parallel: 8}
policy: {name: zero-infinity, sub_group_size: 2e5}
)";

// The node a rank-suffixed name (".r5", ".r5.param", "[...]" tensors aside) belongs to, or -1.
int32_t RankOf(const std::string& name) {
  static const std::regex rank(R"(\.r(\d+)(\.|\[|$))");
  std::smatch m;
  if (!std::regex_search(name, m, rank)) return -1;
  return std::stoi(m[1]);
}

std::string NodeOfDevice(const std::string& device) {
  if (device == "net") return "net";
  EXPECT_EQ(device.rfind("node", 0), 0u) << "a device of a cluster names its node: " << device;
  return device.substr(0, device.find('.'));
}

TEST(ClusterPlans, EveryRankUsesTheDevicesOfItsOwnNode) {
  for (const std::string& policy : PolicyNames()) {
    auto scenario = LoadScenarioText(kCluster, {"policy.name=" + policy}, "cluster.yaml");
    ASSERT_TRUE(scenario.ok()) << policy << ": " << scenario.status().ToString();
    auto planned = Plan(*scenario);
    if (policy == "fuyou") {  // one GPU by design (Fuyou's setting): refused, naming the knob
      ASSERT_FALSE(planned.ok());
      EXPECT_NE(planned.status().message().find("training.data_parallel"), std::string::npos) << planned.status().ToString();
      continue;
    }
    ASSERT_TRUE(planned.ok()) << policy << ": " << planned.status().ToString();
    const Schedule& s = *planned;
    std::set<std::string> nodes_used;
    for (const TaskSpec& t : s.tasks()) {
      if (t.resource < 0) continue;
      const std::string device = s.devices()[s.resources()[t.resource].device].name;
      const int32_t r = RankOf(t.id);
      if (IsCollectiveOp(t.op)) {
        EXPECT_EQ(device, "net") << policy << ": " << t.id;
        EXPECT_EQ(t.ranks, 8) << policy << ": " << t.id;
        continue;
      }
      ASSERT_GE(r, 0) << policy << ": task '" << t.id << "' names no rank";
      const std::string node = "node" + std::to_string(r / 4);
      EXPECT_EQ(NodeOfDevice(device), node) << policy << ": task '" << t.id << "' on " << device;
      nodes_used.insert(NodeOfDevice(device));
      if (t.op == Op::kCompute || t.op == Op::kH2D || t.op == Op::kD2H) {
        EXPECT_EQ(device, node + ".gpu" + std::to_string(r % 4)) << policy << ": " << t.id;
      }
      for (int32_t ti : t.tensors) {
        const TensorSpec& ts = s.tensors()[ti];
        const std::string home = s.devices()[ts.device].name;
        EXPECT_EQ(NodeOfDevice(home), node) << policy << ": task '" << t.id << "' names " << ts.name;
      }
    }
    EXPECT_EQ(nodes_used, (std::set<std::string>{"node0", "node1"})) << policy;
    for (const PoolSpec& p : s.pools()) {
      const int32_t r = RankOf(p.name);
      if (r < 0) continue;  // device-wide pools (none today)
      EXPECT_EQ(NodeOfDevice(s.devices()[p.device].name), "node" + std::to_string(r / 4)) << policy << ": pool " << p.name;
    }
    // The host's cores are shared by the node's four ranks, not the cluster's eight.
    for (const TaskSpec& t : s.tasks()) {
      if (t.op == Op::kOptimizer) {
        EXPECT_EQ(t.ranks, scenario->hardware.node.cpu.cores / 4) << policy << ": " << t.id;
        break;
      }
    }
  }
}

TEST(ClusterPlans, OneNodeKeepsTheBareDeviceNames) {
  auto scenario = LoadScenarioText(kCluster, {"hardware.nodes=1", "training.data_parallel=4"}, "cluster.yaml");
  ASSERT_TRUE(scenario.ok()) << scenario.status().ToString();
  auto s = Plan(*scenario);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::set<std::string> names;
  for (const DeviceSpec& d : s->devices()) names.insert(d.name);
  EXPECT_EQ(names, (std::set<std::string>{"host", "nvme0", "gpu0", "gpu1", "gpu2", "gpu3", "net"}));
}

}  // namespace
}  // namespace tierflow::policies
