// The simulator on a cluster, end to end: the quickstart (Llama-2-70B under zero-infinity, 4 x
// A100 and one NVMe SSD per node) planned for one node and for four, 16 ranks. Every node's
// disk and GPUs work, each disk moves a quarter of what one node's does (each node's disk holds a
// quarter of the states), so the step is faster; every record names its node.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "tierflow/policies/policy.h"
#include "tierflow/sim/simulator.h"

namespace tierflow::sim {
namespace {

struct Simulated {
  Schedule schedule;
  SimResult result;
};

Simulated SimulateQuickstart(const std::vector<std::string>& sets) {
  auto scenario = policies::LoadScenarioFile(std::string(TIERFLOW_SOURCE_DIR) + "/scenarios/quickstart.yaml", sets);
  EXPECT_TRUE(scenario.ok()) << scenario.status().ToString();
  auto schedule = policies::Plan(*scenario);
  EXPECT_TRUE(schedule.ok()) << schedule.status().ToString();
  SimOptions o;
  o.iterations = 2;
  auto r = Simulate(*schedule, scenario->hardware, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return {std::move(*schedule), std::move(*r)};
}

// The schedule device of a record's resource ("" for instant ops).
std::string DeviceOf(const Simulated& s, const TraceRecord& rec) {
  if (rec.resource.empty()) return "";
  const int32_t r = s.schedule.FindResource(rec.resource);
  EXPECT_NE(r, kNoIndex) << rec.resource;
  return r == kNoIndex ? "" : s.schedule.devices()[s.schedule.resources()[r].device].name;
}

// Bytes read and written per storage device.
std::map<std::string, int64_t> DiskBytes(const Simulated& s) {
  std::map<std::string, int64_t> bytes;
  for (const TraceRecord& rec : s.result.records) {
    if (rec.op == Op::kRead || rec.op == Op::kWrite) bytes[DeviceOf(s, rec)] += rec.bytes;
  }
  return bytes;
}

TEST(ClusterSim, FourNodesShareTheWorkAndEachNodesDiskHoldsAQuarter) {
  const Simulated one = SimulateQuickstart({});
  const Simulated four = SimulateQuickstart({"hardware.nodes=4", "training.data_parallel=16"});
  const std::map<std::string, int64_t> one_disk = DiskBytes(one);
  const std::map<std::string, int64_t> four_disks = DiskBytes(four);
  ASSERT_EQ(one_disk.size(), 1u);
  ASSERT_EQ(one_disk.count("nvme0"), 1u);
  ASSERT_EQ(four_disks.size(), 4u);
  for (int n = 0; n < 4; ++n) {
    const std::string disk = "node" + std::to_string(n) + ".nvme0";
    ASSERT_EQ(four_disks.count(disk), 1u) << disk << " does no I/O";
    // A quarter of one node's bytes, up to the rounding of 16 partitions instead of 4.
    EXPECT_NEAR(static_cast<double>(four_disks.at(disk)), one_disk.at("nvme0") / 4.0, 0.01 * one_disk.at("nvme0") / 4.0) << disk;
  }
  // Every GPU of every node computes; every record's device is on a node (or the network).
  std::set<std::string> computing;
  for (const TraceRecord& rec : four.result.records) {
    const std::string device = DeviceOf(four, rec);
    if (rec.op == Op::kCompute) computing.insert(device);
    if (device != "net" && !device.empty()) {
      EXPECT_EQ(device.rfind("node", 0), 0u) << rec.task << " on " << device;
      EXPECT_EQ(rec.resource.rfind(device.substr(0, device.find('.') + 1), 0), 0u) << "the resource names its node: " << rec.resource;
    }
  }
  EXPECT_EQ(computing.size(), 16u);
  // The step, bound by the optimizer states' I/O, gets four disks instead of one.
  EXPECT_LT(four.result.makespan_s, 0.5 * one.result.makespan_s) << "one node " << one.result.makespan_s << " s, four " << four.result.makespan_s << " s";
}

}  // namespace
}  // namespace tierflow::sim
