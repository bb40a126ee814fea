// Hardware presets and the YAML format: every preset parses, validates and cites its numbers;
// overrides merge as documented; each malformed input gives one message naming the key path.
#include "tierflow/models/hardware.h"
#include "tierflow/models/perf.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cctype>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace tierflow::models {
namespace {

HardwareSpec Preset(const std::string& name) {
  auto p = HardwarePreset(name);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.value();
}

TEST(HardwareTest, RequiredPresetsExistAndValidate) {
  for (const char* name : {"a100x4-1nvme", "a100x4-4nvme", "h100x8-pcie5", "workstation-4090", "cpu-host",
                           "cpu-host-1disk"}) {
    auto p = HardwarePreset(name);
    ASSERT_TRUE(p.ok()) << name << ": " << p.status().ToString();
    EXPECT_TRUE(ValidateHardware(p.value()).ok()) << name;
    EXPECT_EQ(p->node.name, name);
    EXPECT_FALSE(p->node.source.empty()) << name;
  }
  for (const auto& name : HardwarePresetNames()) {
    EXPECT_TRUE(HardwarePreset(name).ok()) << name;
  }
}

TEST(HardwareTest, PresetValuesCarryDatasheetNumbers) {
  const double GiB = 1024.0 * 1024 * 1024;
  const HardwareSpec a = Preset("a100x4-1nvme");
  EXPECT_EQ(a.node.gpu_count, 4);
  EXPECT_EQ(a.node.gpu.hbm_bytes, static_cast<int64_t>(80 * GiB));
  EXPECT_DOUBLE_EQ(a.node.gpu.peak_flops, 312e12);
  EXPECT_DOUBLE_EQ(a.node.gpu.hbm_bw_bytes_per_s, 1935e9);
  ASSERT_EQ(a.node.nvme.size(), 1u);
  EXPECT_DOUBLE_EQ(a.node.nvme[0].read_bw_bytes_per_s, 7.0e9);
  EXPECT_DOUBLE_EQ(a.node.nvme[0].write_bw_bytes_per_s, 3.8e9);
  EXPECT_DOUBLE_EQ(a.node.pcie.h2d_bw_bytes_per_s, 25e9);

  EXPECT_EQ(Preset("a100x4-4nvme").node.nvme.size(), 4u);

  const HardwareSpec h = Preset("h100x8-pcie5");
  EXPECT_EQ(h.node.gpu_count, 8);
  EXPECT_DOUBLE_EQ(h.node.gpu.peak_flops, 756e12);
  EXPECT_DOUBLE_EQ(h.node.gpu.hbm_bw_bytes_per_s, 2.0e12);
  EXPECT_GE(h.node.nvme.size(), 2u);

  const HardwareSpec w = Preset("workstation-4090");
  EXPECT_EQ(w.node.gpu_count, 1);
  EXPECT_EQ(w.node.gpu.hbm_bytes, static_cast<int64_t>(24 * GiB));
  EXPECT_DOUBLE_EQ(w.node.gpu.peak_flops, 165.2e12);
  EXPECT_DOUBLE_EQ(w.node.gpu.hbm_bw_bytes_per_s, 1008e9);
  EXPECT_EQ(w.node.nvme.size(), 2u);
  EXPECT_DOUBLE_EQ(w.node.nvme[0].read_bw_bytes_per_s, 7.45e9);

  // The CPU-only host: one emulated device, ~20 GFLOP/s effective, one or two disk directories.
  const HardwareSpec c = Preset("cpu-host");
  EXPECT_EQ(c.node.gpu_count, 1);
  EXPECT_EQ(c.node.gpu.name, "cpu-emulated");
  EXPECT_EQ(c.node.gpu.hbm_bytes, static_cast<int64_t>(4 * GiB));
  EXPECT_NEAR(c.node.gpu.peak_flops * c.node.gpu.compute_efficiency, 20e9, 1e6);
  EXPECT_EQ(c.node.cpu.cores, 2);
  ASSERT_EQ(c.node.nvme.size(), 2u);
  EXPECT_DOUBLE_EQ(c.node.nvme[1].write_bw_bytes_per_s, 1e9);
  EXPECT_EQ(Preset("cpu-host-1disk").node.nvme.size(), 1u);
}

// Every line of a preset that sets a number says where it comes from.
TEST(HardwareTest, EveryPresetNumberCitesASource) {
  for (const auto& name : HardwarePresetNames()) {
    auto text = HardwarePresetYaml(name);
    ASSERT_TRUE(text.ok());
    std::istringstream in(text.value());
    std::string line;
    int numbers = 0;
    while (std::getline(in, line)) {
      const auto hash = line.find('#');
      const std::string code = line.substr(0, hash);
      const auto colon = code.find(':');
      if (colon == std::string::npos) continue;
      const std::string key = code.substr(0, colon);
      const std::string value = code.substr(colon + 1);
      if (key.find("name") != std::string::npos || key.find("source") != std::string::npos)
        continue;
      bool has_digit = false;
      for (char ch : value) has_digit |= std::isdigit(static_cast<unsigned char>(ch)) != 0;
      if (!has_digit) continue;
      ++numbers;
      EXPECT_NE(line.find("# source:"), std::string::npos) << name << ": " << line;
    }
    EXPECT_GT(numbers, 20) << name;
  }
}

StatusOr<HardwareSpec> FromText(const std::string& text) { return HardwareFromYamlText(text); }

// Each (YAML text, the error message's part) pair is refused with that message.
template <size_t N>
void ExpectEachRefused(const std::pair<const char*, const char*> (&bad)[N]) {
  for (const auto& [text, message] : bad) {
    auto r = FromText(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find(message), std::string::npos) << r.status().ToString();
  }
}

TEST(HardwareYamlTest, PresetWithNestedOverrides) {
  auto hw = FromText(R"(
preset: a100x4-1nvme
node:
  gpu: {compute_efficiency: 0.7}
  pcie: {latency: 5 us}
  nvme: [{}, {}, {read_bw: 6 GB/s, name: slow}]
)");
  ASSERT_TRUE(hw.ok()) << hw.status().ToString();
  const HardwareSpec base = Preset("a100x4-1nvme");
  EXPECT_DOUBLE_EQ(hw->node.gpu.compute_efficiency, 0.7);
  EXPECT_DOUBLE_EQ(hw->node.gpu.peak_flops, base.node.gpu.peak_flops);
  EXPECT_DOUBLE_EQ(hw->node.pcie.latency_s, 5e-6);
  EXPECT_DOUBLE_EQ(hw->node.pcie.h2d_bw_bytes_per_s, base.node.pcie.h2d_bw_bytes_per_s);
  ASSERT_EQ(hw->node.nvme.size(), 3u);
  EXPECT_DOUBLE_EQ(hw->node.nvme[1].read_bw_bytes_per_s, base.node.nvme[0].read_bw_bytes_per_s);
  EXPECT_DOUBLE_EQ(hw->node.nvme[2].read_bw_bytes_per_s, 6e9);
  EXPECT_DOUBLE_EQ(hw->node.nvme[2].write_bw_bytes_per_s, base.node.nvme[0].write_bw_bytes_per_s);
  EXPECT_EQ(hw->node.nvme[2].name, "slow");
}

TEST(HardwareYamlTest, AddsARemoteTier) {
  auto hw = FromText(R"(
preset: a100x4-1nvme
node:
  remote:
    - {name: pfs, read_bw: 2 GB/s, write_bw: 1.5 GB/s, latency: 1 ms}
)");
  ASSERT_TRUE(hw.ok()) << hw.status().ToString();
  ASSERT_EQ(hw->node.remote.size(), 1u);
  EXPECT_DOUBLE_EQ(hw->node.remote[0].write_bw_bytes_per_s, 1.5e9);
  EXPECT_DOUBLE_EQ(hw->node.remote[0].latency_s, 1e-3);
}

void ExpectEqual(const HardwareSpec& a, const HardwareSpec& b) {
  EXPECT_EQ(a.nodes, b.nodes);
  const NodeSpec &x = a.node, &y = b.node;
  EXPECT_EQ(x.name, y.name);
  EXPECT_EQ(x.source, y.source);
  EXPECT_EQ(x.gpu_count, y.gpu_count);
  EXPECT_EQ(x.gpu.name, y.gpu.name);
  EXPECT_EQ(x.gpu.hbm_bytes, y.gpu.hbm_bytes);
  EXPECT_EQ(x.gpu.peak_flops, y.gpu.peak_flops);
  EXPECT_EQ(x.gpu.hbm_bw_bytes_per_s, y.gpu.hbm_bw_bytes_per_s);
  EXPECT_EQ(x.gpu.compute_efficiency, y.gpu.compute_efficiency);
  EXPECT_EQ(x.gpu.forward_efficiency, y.gpu.forward_efficiency);
  EXPECT_EQ(x.gpu.backward_efficiency, y.gpu.backward_efficiency);
  EXPECT_EQ(x.gpu.kernel_overhead_s, y.gpu.kernel_overhead_s);
  EXPECT_EQ(x.gpu.shares_host_cores, y.gpu.shares_host_cores);
  EXPECT_EQ(x.pcie.h2d_bw_bytes_per_s, y.pcie.h2d_bw_bytes_per_s);
  EXPECT_EQ(x.pcie.d2h_bw_bytes_per_s, y.pcie.d2h_bw_bytes_per_s);
  EXPECT_EQ(x.pcie.d2h_bf16_bw_bytes_per_s, y.pcie.d2h_bf16_bw_bytes_per_s);
  EXPECT_EQ(x.pcie.pageable_factor, y.pcie.pageable_factor);
  EXPECT_EQ(x.pcie.latency_s, y.pcie.latency_s);
  EXPECT_EQ(x.pcie.root_complex_bw_bytes_per_s, y.pcie.root_complex_bw_bytes_per_s);
  EXPECT_EQ(x.cpu.cores, y.cpu.cores);
  EXPECT_EQ(x.cpu.host_memory_bytes, y.cpu.host_memory_bytes);
  EXPECT_EQ(x.cpu.host_reserve_bytes, y.cpu.host_reserve_bytes);
  EXPECT_EQ(x.cpu.memory_bw_bytes_per_s, y.cpu.memory_bw_bytes_per_s);
  EXPECT_EQ(x.cpu.adam_elements_per_s_per_core, y.cpu.adam_elements_per_s_per_core);
  EXPECT_EQ(x.cpu.task_overhead_s, y.cpu.task_overhead_s);
  EXPECT_EQ(x.cpu.task_overhead_cpu_s, y.cpu.task_overhead_cpu_s);
  EXPECT_EQ(x.cpu.convert_bytes_per_s_per_core, y.cpu.convert_bytes_per_s_per_core);
  EXPECT_EQ(x.cpu.io_read_cores, y.cpu.io_read_cores);
  EXPECT_EQ(x.cpu.io_write_cores, y.cpu.io_write_cores);
  EXPECT_EQ(x.cpu.io_read_beside_compute, y.cpu.io_read_beside_compute);
  EXPECT_EQ(x.cpu.io_write_beside_compute, y.cpu.io_write_beside_compute);
  EXPECT_EQ(x.interconnect.kind, y.interconnect.kind);
  EXPECT_EQ(x.interconnect.bus_bw_bytes_per_s, y.interconnect.bus_bw_bytes_per_s);
  EXPECT_EQ(x.interconnect.latency_s, y.interconnect.latency_s);
  EXPECT_EQ(x.interconnect.local_bw_bytes_per_s, y.interconnect.local_bw_bytes_per_s);
  ASSERT_EQ(x.nvme.size(), y.nvme.size());
  for (size_t i = 0; i < x.nvme.size(); ++i) {
    EXPECT_EQ(x.nvme[i].name, y.nvme[i].name);
    EXPECT_EQ(x.nvme[i].capacity_bytes, y.nvme[i].capacity_bytes);
    EXPECT_EQ(x.nvme[i].read_bw_bytes_per_s, y.nvme[i].read_bw_bytes_per_s);
    EXPECT_EQ(x.nvme[i].write_bw_bytes_per_s, y.nvme[i].write_bw_bytes_per_s);
    EXPECT_EQ(x.nvme[i].read_latency_s, y.nvme[i].read_latency_s);
    EXPECT_EQ(x.nvme[i].write_latency_s, y.nvme[i].write_latency_s);
    EXPECT_EQ(x.nvme[i].mixed_efficiency, y.nvme[i].mixed_efficiency);
    EXPECT_EQ(x.nvme[i].same_device_as, y.nvme[i].same_device_as);
    EXPECT_EQ(x.nvme[i].mixed_efficiency_by_streams, y.nvme[i].mixed_efficiency_by_streams);
    EXPECT_EQ(x.nvme[i].read_iops, y.nvme[i].read_iops);
    EXPECT_EQ(x.nvme[i].write_iops, y.nvme[i].write_iops);
    EXPECT_EQ(x.nvme[i].read_bw_by_request, y.nvme[i].read_bw_by_request);
    EXPECT_EQ(x.nvme[i].write_bw_by_request, y.nvme[i].write_bw_by_request);
  }
  ASSERT_EQ(x.remote.size(), y.remote.size());
  for (size_t i = 0; i < x.remote.size(); ++i) {
    EXPECT_EQ(x.remote[i].name, y.remote[i].name);
    EXPECT_EQ(x.remote[i].read_bw_bytes_per_s, y.remote[i].read_bw_bytes_per_s);
    EXPECT_EQ(x.remote[i].write_bw_bytes_per_s, y.remote[i].write_bw_bytes_per_s);
    EXPECT_EQ(x.remote[i].latency_s, y.remote[i].latency_s);
  }
  EXPECT_EQ(x.nic_bw_bytes_per_s, y.nic_bw_bytes_per_s);
  EXPECT_EQ(x.nic_latency_s, y.nic_latency_s);
}

TEST(HardwareYamlTest, FullDescriptionRoundTripsExactly) {
  for (const auto& name : HardwarePresetNames()) {
    HardwareSpec hw = Preset(name);
    hw.node.remote.push_back({"pfs \"quoted\": name", 1.0 / 3.0 * 1e9, 0.7e9, 1.1e-3});
    if (hw.node.nvme.size() > 1) hw.node.nvme.back().same_device_as = 0;
    hw.node.nvme[0].read_iops = 1.5e6;
    hw.node.cpu.host_reserve_bytes = hw.node.cpu.host_memory_bytes / 3;
    hw.node.nvme[0].write_iops = 1.0 / 3.0 * 1e6;
    hw.node.nvme[0].mixed_efficiency_by_streams = {{2, 0.9}, {8, 1.0 / 3.0}};
    hw.node.nvme[0].read_bw_by_request = {{16384, 1, 1.0 / 3.0 * 1e9}, {16384, 8, 9.11e8}, {1 << 20, 1, 1.779e9}};
    hw.node.nvme[0].write_bw_by_request = {{4096, 32, 7.74e8}};
    hw.node.interconnect.local_bw_bytes_per_s = 1.0 / 3.0 * 1e9;
    hw.node.pcie.d2h_bf16_bw_bytes_per_s = 1.0 / 3.0 * 1e10;
    hw.node.cpu.task_overhead_s = 1.0 / 3.0 * 1e-4;
    hw.node.cpu.task_overhead_cpu_s = 1.0 / 7.0 * 1e-4;
    hw.node.cpu.io_read_cores = {{16384, 1, 1.0 / 3.0}, {1 << 20, 8, 0.29}};
    hw.node.cpu.io_write_cores = {{262144, 4, 0.2}};
    hw.node.cpu.io_read_beside_compute = {{1 << 20, 8, 1.0 / 3.0}};
    hw.node.cpu.io_write_beside_compute = {{16384, 1, 0.5}, {262144, 4, 0.71}};
    const std::string yaml = HardwareToYaml(hw);
    auto back = FromText(yaml);
    ASSERT_TRUE(back.ok()) << name << ": " << back.status().ToString() << "\n" << yaml;
    ExpectEqual(back.value(), hw);
  }
}

// The CPU hosts' gpu0 is emulated on their cores (the CPU executor); a real GPU's is not.
TEST(HardwareYamlTest, OnlyTheCpuHostsEmulateTheirGpuOnTheHostCores) {
  for (const auto& name : HardwarePresetNames()) {
    EXPECT_EQ(Preset(name).node.gpu.shares_host_cores, name.rfind("cpu-host", 0) == 0) << name;
  }
  auto bad = FromText("{preset: cpu-host, node: {gpu: {shares_host_cores: sometimes}}}");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("shares_host_cores: 'sometimes' is not true or false"), std::string::npos)
      << bad.status().ToString();
}

TEST(HardwareYamlTest, SameDeviceAsNamesAnEarlierUnsharedEntry) {
  auto hw = FromText("{preset: cpu-host, node: {nvme: [{}, {same_device_as: nvme0}]}}");
  ASSERT_TRUE(hw.ok()) << hw.status().ToString();
  EXPECT_EQ(hw->node.nvme[0].same_device_as, -1);
  EXPECT_EQ(hw->node.nvme[1].same_device_as, 0);
  const std::pair<const char*, const char*> bad[] = {
      {"{preset: cpu-host, node: {nvme: [{same_device_as: nvme1}, {}]}}",
       "hardware.node.nvme[0].same_device_as: nvme1 must be an earlier entry than nvme0"},
      {"{preset: cpu-host, node: {nvme: [{}, {same_device_as: disk0}]}}",
       "hardware.node.nvme[1].same_device_as: 'disk0' is not nvme<N> (or none)"},
      {"{preset: cpu-host, node: {nvme: [{}, {same_device_as: nvme0}, {same_device_as: nvme1}]}}",
       "hardware.node.nvme[2].same_device_as: nvme1 itself shares nvme0's device; name nvme0"},
  };
  ExpectEachRefused(bad);
}

TEST(HardwareYamlTest, MeasuredStreamsAreAMapOfBlockByDepthToBandwidth) {
  auto hw = FromText("{preset: cpu-host, node: {nvme: [{read_bw_by_request: {65536x2: 1.0e9, 16384x1: 2.5e8}}, {}]}}");
  ASSERT_TRUE(hw.ok()) << hw.status().ToString();
  EXPECT_EQ(hw->node.nvme[0].read_bw_by_request, (std::vector<MeasuredBandwidth>{{16384, 1, 2.5e8}, {65536, 2, 1.0e9}}));
  EXPECT_TRUE(hw->node.nvme[0].write_bw_by_request.empty());
  const std::pair<const char*, const char*> bad[] = {
      {"{preset: cpu-host, node: {nvme: [{write_bw_by_request: [1.0e9]}, {}]}}",
       "hardware.node.nvme[0].write_bw_by_request: expected a map of BLOCKxDEPTH to bytes/s"},
      {"{preset: cpu-host, node: {nvme: [{read_bw_by_request: {16KiBx1: 2.5e8}}, {}]}}",
       "hardware.node.nvme[0].read_bw_by_request: '16KiBx1' is not BLOCKxDEPTH"},
      {"{preset: cpu-host, node: {nvme: [{read_bw_by_request: {16384x0: 2.5e8}}, {}]}}",
       "hardware.node.nvme[0].read_bw_by_request: '16384x0' is not BLOCKxDEPTH"},
      {"{preset: cpu-host, node: {nvme: [{read_bw_by_request: {16384x1: fast}}, {}]}}",
       "hardware.node.nvme[0].read_bw_by_request.16384x1: 'fast' is not a number of bytes/s"},
      {"{preset: cpu-host, node: {nvme: [{read_bw_by_request: {16384x1: 0}}, {}]}}",
       "hardware.node.nvme[0].read_bw_by_request.16384x1 must be positive"},
  };
  ExpectEachRefused(bad);
}

// The I/O path's load: a map of stream class to cores, each between 0 and the node's cores.
TEST(HardwareYamlTest, TheIoPathsLoadIsAMapOfBlockByDepthToCores) {
  auto hw = FromText("{preset: cpu-host, node: {cpu: {io_read_cores: {1048576x8: 0.3, 16384x1: 0.9}}}}");
  ASSERT_TRUE(hw.ok()) << hw.status().ToString();
  EXPECT_EQ(hw->node.cpu.io_read_cores, (std::vector<IoCpuPoint>{{16384, 1, 0.9}, {1 << 20, 8, 0.3}}));
  EXPECT_TRUE(hw->node.cpu.io_write_cores.empty());
  // The nearest measured class, in log2 block plus log2 depth: 256 KiB x 4 is 2 + 1 from 1 MiB x 8
  // and 4 + 2 from 16 KiB x 1; none measured, none taken.
  EXPECT_DOUBLE_EQ(IoCpuCores(hw->node.cpu, false, 262144, 4), 0.3);
  EXPECT_DOUBLE_EQ(IoCpuCores(hw->node.cpu, false, 32768, 1), 0.9);
  EXPECT_DOUBLE_EQ(IoCpuCores(hw->node.cpu, true, 16384, 1), 0.0);
  const std::pair<const char*, const char*> bad[] = {
      {"{preset: cpu-host, node: {cpu: {io_write_cores: [0.3]}}}",
       "hardware.node.cpu.io_write_cores: expected a map of BLOCKxDEPTH to cores"},
      {"{preset: cpu-host, node: {cpu: {io_read_cores: {1MiBx8: 0.3}}}}",
       "hardware.node.cpu.io_read_cores: '1MiBx8' is not BLOCKxDEPTH"},
      {"{preset: cpu-host, node: {cpu: {cores: 2, io_read_cores: {16384x1: 2.5}}}}",
       "hardware.node.cpu.io_read_cores.16384x1: 2.500000 cores, outside 0..2"},
      {"{preset: cpu-host, node: {cpu: {io_read_cores: {16384x1: -0.1}}}}",
       "hardware.node.cpu.io_read_cores.16384x1: -0.100000 cores, outside 0.."},
  };
  ExpectEachRefused(bad);
}

// What compute on every core leaves a stream: a map of stream class to the share of its rate
// kept, each within (0, 1]; a stream takes its nearest measured class's, all of it when none.
TEST(HardwareYamlTest, TheRateAStreamKeepsBesideComputeIsAMapOfBlockByDepthToAShare) {
  auto hw = FromText("{preset: cpu-host, node: {cpu: {io_write_beside_compute: {1048576x8: 0.6, 16384x1: 0.5}}}}");
  ASSERT_TRUE(hw.ok()) << hw.status().ToString();
  EXPECT_EQ(hw->node.cpu.io_write_beside_compute, (std::vector<IoRateKept>{{16384, 1, 0.5}, {1 << 20, 8, 0.6}}));
  EXPECT_TRUE(hw->node.cpu.io_read_beside_compute.empty());
  EXPECT_DOUBLE_EQ(IoRateBesideCompute(hw->node.cpu, true, 262144, 4), 0.6);
  EXPECT_DOUBLE_EQ(IoRateBesideCompute(hw->node.cpu, true, 32768, 1), 0.5);
  EXPECT_DOUBLE_EQ(IoRateBesideCompute(hw->node.cpu, false, 16384, 1), 1.0);
  const std::pair<const char*, const char*> bad[] = {
      {"{preset: cpu-host, node: {cpu: {io_read_beside_compute: [0.6]}}}",
       "hardware.node.cpu.io_read_beside_compute: expected a map of BLOCKxDEPTH to the rate kept"},
      {"{preset: cpu-host, node: {cpu: {io_read_beside_compute: {16384x1: 1.2}}}}",
       "hardware.node.cpu.io_read_beside_compute.16384x1: 1.200000 of the rate alone, outside (0, 1]"},
      {"{preset: cpu-host, node: {cpu: {io_write_beside_compute: {16384x1: 0}}}}",
       "hardware.node.cpu.io_write_beside_compute.16384x1: 0.000000 of the rate alone, outside (0, 1]"},
      {"{preset: cpu-host, node: {cpu: {io_write_beside_compute: {16384x1: 0.5, 16384x01: 0.6}}}}",
       "hardware.node.cpu.io_write_beside_compute: 16384x1 given twice"},
  };
  ExpectEachRefused(bad);
}

TEST(HardwareYamlTest, MixedEfficiencyByStreamsIsAMapOfCountsToFractions) {
  auto hw = FromText("{preset: cpu-host, node: {nvme: [{mixed_efficiency_by_streams: {8: 0.7, 2: 0.9}}, {}]}}");
  ASSERT_TRUE(hw.ok()) << hw.status().ToString();
  EXPECT_EQ(hw->node.nvme[0].mixed_efficiency_by_streams, (std::vector<std::pair<int32_t, double>>{{2, 0.9}, {8, 0.7}}));
  EXPECT_TRUE(hw->node.nvme[1].mixed_efficiency_by_streams.empty());
  const std::pair<const char*, const char*> bad[] = {
      {"{preset: cpu-host, node: {nvme: [{mixed_efficiency_by_streams: [0.9]}, {}]}}",
       "hardware.node.nvme[0].mixed_efficiency_by_streams: expected a map of stream count to efficiency"},
      {"{preset: cpu-host, node: {nvme: [{mixed_efficiency_by_streams: {1: 0.9}}, {}]}}",
       "hardware.node.nvme[0].mixed_efficiency_by_streams: '1' is not a stream count of 2 or more"},
      {"{preset: cpu-host, node: {nvme: [{mixed_efficiency_by_streams: {2: fast}}, {}]}}",
       "hardware.node.nvme[0].mixed_efficiency_by_streams.2: 'fast' is not a number"},
      {"{preset: cpu-host, node: {nvme: [{mixed_efficiency_by_streams: {2: 1.5}}, {}]}}",
       "hardware.node.nvme[0].mixed_efficiency_by_streams.2 must be in (0, 1], got 1.5"},
  };
  ExpectEachRefused(bad);
}

TEST(HardwareYamlTest, NodeTakesYamlNode) {
  YAML::Node n = YAML::Load("{preset: workstation-4090, nodes: 1}");
  auto hw = HardwareFromYaml(n);
  ASSERT_TRUE(hw.ok()) << hw.status().ToString();
  EXPECT_EQ(hw->node.gpu_count, 1);
}

void ExpectError(const std::string& text, const std::string& starts_with,
                 const std::vector<std::string>& fragments = {}) {
  auto hw = FromText(text);
  ASSERT_FALSE(hw.ok()) << text;
  const std::string& m = hw.status().message();
  EXPECT_EQ(hw.status().code(), StatusCode::kInvalidArgument) << m;
  EXPECT_EQ(m.rfind(starts_with, 0), 0u)
      << "message '" << m << "' should start with '" << starts_with << "'";
  EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: " << m;
  for (const auto& f : fragments) {
    EXPECT_NE(m.find(f), std::string::npos) << "message '" << m << "' lacks '" << f << "'";
  }
}

TEST(HardwareYamlTest, BareNumberNamesTheKeyPath) {
  ExpectError("{preset: a100x4-1nvme, node: {nvme: [{read_bw: 7}]}}",
              "hardware.node.nvme[0].read_bw: '7' has no unit", {"GB/s"});
  ExpectError("{preset: a100x4-1nvme, node: {gpu: {hbm: 80}}}",
              "hardware.node.gpu.hbm: '80' has no unit", {"GiB"});
  ExpectError("{preset: a100x4-1nvme, node: {pcie: {latency: 2}}}",
              "hardware.node.pcie.latency: '2' has no unit");
  ExpectError("{preset: a100x4-1nvme, node: {gpu: {peak_flops: 3e14}}}",
              "hardware.node.gpu.peak_flops: '3e14' has no unit");
  ExpectError("{preset: a100x4-1nvme, node: {cpu: {adam_rate_per_core: 1e8}}}",
              "hardware.node.cpu.adam_rate_per_core: '1e8' has no unit");
}

TEST(HardwareYamlTest, WrongUnitNamesTheKeyPath) {
  ExpectError("{preset: a100x4-1nvme, node: {nvme: [{read_bw: 7 GB}]}}",
              "hardware.node.nvme[0].read_bw: ", {"per second"});
}

TEST(HardwareYamlTest, UnknownKeyNamesTheKeyPath) {
  ExpectError("{preset: a100x4-1nvme, node: {gpu: {hmb: 80 GiB}}}",
              "hardware.node.gpu.hmb: unknown key", {"hbm"});
  ExpectError("{preset: a100x4-1nvme, nodez: 2}", "hardware.nodez: unknown key");
  ExpectError("{preset: a100x4-1nvme, node: {nvme: [{}, {speed: 1 GB/s}]}}",
              "hardware.node.nvme[1].speed: unknown key");
}

TEST(HardwareYamlTest, NegativeSizeNamesTheKeyPath) {
  ExpectError("{preset: a100x4-1nvme, node: {gpu: {hbm: -80 GiB}}}",
              "hardware.node.gpu.hbm: ", {"negative"});
  ExpectError("{preset: a100x4-1nvme, node: {nvme: [{write_bw: 0 GB/s}]}}",
              "hardware.node.nvme[0].write_bw: ", {"positive"});
  ExpectError("{preset: a100x4-1nvme, node: {gpu_count: 0}}", "hardware.node.gpu_count must be");
  ExpectError("{preset: a100x4-1nvme, node: {gpu: {compute_efficiency: 1.5}}}",
              "hardware.node.gpu.compute_efficiency must be in (0, 1]");
}

TEST(HardwareYamlTest, UnknownPresetListsKnownOnes) {
  ExpectError("{preset: dgx-z}",
              "hardware.preset: ", {"dgx-z", "a100x4-1nvme", "workstation-4090"});
}

TEST(HardwareYamlTest, StructuralErrors) {
  ExpectError("{preset: a100x4-1nvme, node: {gpu: 4}}", "hardware.node.gpu: expected a map");
  ExpectError("{preset: a100x4-1nvme, node: {nvme: {read_bw: 1 GB/s}}}",
              "hardware.node.nvme: expected a list");
  ExpectError("{preset: a100x4-1nvme, node: {cpu: {cores: many}}}",
              "hardware.node.cpu.cores: 'many' is not an integer");
  ExpectError("nodes: [", "hardware: not valid YAML");
  // A full description that leaves required fields out fails validation, naming the first one.
  ExpectError("{node: {gpu_count: 1}}", "hardware.node.gpu.hbm must be positive");
}

// Schedule device names: bare on one node, node{n}. on a cluster, each parsed back to its node,
// kind and index; a name of no device of the hardware is an error naming it.
TEST(HardwareDeviceNamesTest, NodeNamesRoundTripAndBadNamesAreNamed) {
  HardwareSpec hw = Preset("a100x4-4nvme");
  EXPECT_EQ(NodeDeviceName(hw, 0, "nvme2"), "nvme2");
  hw.nodes = 3;
  EXPECT_EQ(NodeDeviceName(hw, 2, "gpu3"), "node2.gpu3");
  struct Case {
    const char* name;
    HardwareDeviceKind kind;
    int32_t node, index;
  };
  for (const Case& c : {Case{"node2.gpu3", HardwareDeviceKind::kGpu, 2, 3}, Case{"node1.nvme3", HardwareDeviceKind::kNvme, 1, 3},
                        Case{"node0.host", HardwareDeviceKind::kHost, 0, 0}, Case{"gpu1", HardwareDeviceKind::kGpu, 0, 1},
                        Case{"host", HardwareDeviceKind::kHost, 0, 0}, Case{"net", HardwareDeviceKind::kNet, 0, 0}}) {
    auto d = ParseHardwareDevice(c.name, hw);
    ASSERT_TRUE(d.ok()) << c.name << ": " << d.status().ToString();
    EXPECT_EQ(d->kind, c.kind) << c.name;
    EXPECT_EQ(d->node, c.node) << c.name;
    EXPECT_EQ(d->index, c.index) << c.name;
  }
  for (const auto& [name, why] : std::vector<std::pair<std::string, std::string>>{
           {"node3.gpu0", "is on node 3, but the hardware has 3 node(s)"},
           {"node1.gpu4", "which has 4 gpu device(s) per node"},
           {"node1.remote0", "which has 0 remote device(s) per node"},
           {"node01.gpu0", "expected node{N}.{device}"},
           {"node1", "expected node{N}.{device}"},
           {"node1.tpu0", "names no hardware device"},
           {"gpu-1", "names no hardware device"}}) {
    auto d = ParseHardwareDevice(name, hw);
    ASSERT_FALSE(d.ok()) << name;
    EXPECT_NE(d.status().message().find("'" + name + "'"), std::string::npos) << d.status().message();
    EXPECT_NE(d.status().message().find(why), std::string::npos) << d.status().message();
  }
}

TEST(HardwareYamlTest, NicLatencyIsADuration) {
  auto hw = FromText("{preset: a100x4-1nvme, nodes: 2, node: {nic_latency: 3 us}}");
  ASSERT_TRUE(hw.ok()) << hw.status().ToString();
  EXPECT_DOUBLE_EQ(hw->node.nic_latency_s, 3e-6);
  ExpectError("{preset: a100x4-1nvme, node: {nic_latency: 3}}", "hardware.node.nic_latency");
}

TEST(HardwareTest, UnknownPresetIsNotFound) {
  auto p = HardwarePreset("nope");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(HardwarePresetYaml("nope").ok());
}

}  // namespace
}  // namespace tierflow::models
