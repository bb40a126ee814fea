// Performance models against their closed forms (docs/performance-models.md), on hand-made specs
// with round numbers so that each expected value can be worked by hand.
#include "tierflow/models/perf.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tierflow::models {
namespace {

constexpr double kRel = 1e-12;

void ExpectRel(double actual, double expected) {
  EXPECT_NEAR(actual, expected, std::fabs(expected) * kRel + 1e-300)
      << "actual " << actual << " expected " << expected;
}

NvmeSpec Disk() {
  NvmeSpec d;
  d.name = "test";
  d.capacity_bytes = int64_t{1} << 40;
  d.read_bw_bytes_per_s = 7e9;
  d.write_bw_bytes_per_s = 4e9;
  d.read_latency_s = 80e-6;
  d.write_latency_s = 20e-6;
  d.mixed_efficiency = 0.8;
  return d;
}

TEST(PerfDiskTest, QueueDepthOneIsOneRequestAtATime) {
  const NvmeSpec d = Disk();
  for (int64_t block : {int64_t{4096}, int64_t{1} << 20, int64_t{8} << 20}) {
    const double b = static_cast<double>(block);
    ExpectRel(DiskReadBandwidth(d, block, 1), b / (80e-6 + b / 7e9));
    ExpectRel(DiskWriteBandwidth(d, block, 1), b / (20e-6 + b / 4e9));
  }
}

// Streams on one device together keep the busiest class's figure busy, shared in proportion to
// their figures.
TEST(PerfDiskTest, TheIoPathsOfOneDevicesStreamsTogetherTakeWhatTheBusiestDoes) {
  EXPECT_DOUBLE_EQ(IoPathScale({}), 1.0);
  EXPECT_DOUBLE_EQ(IoPathScale({0.8}), 1.0) << "a stream alone";
  EXPECT_DOUBLE_EQ(IoPathScale({0.8, 0.8}), 0.5) << "two of one class: 0.8 in all";
  EXPECT_DOUBLE_EQ(IoPathScale({0.8, 0.6}), 0.8 / 1.4) << "0.8 in all, not 1.4";
  EXPECT_DOUBLE_EQ(IoPathScale({0.8, 0.0}), 1.0) << "a stream whose class takes nothing";
}

TEST(PerfDiskTest, LittlesLawBelowSaturation) {
  const NvmeSpec d = Disk();
  // 4 KiB at qd 32: 32 x 4096 / (80 us + 4096 / 7e9) = 1.62 GB/s, far below the peak.
  const double b = 4096;
  ExpectRel(DiskReadBandwidth(d, 4096, 32), 32 * b / (80e-6 + b / 7e9));
}

TEST(PerfDiskTest, AnIopsLimitCapsSmallRequestsWhateverTheDepth) {
  NvmeSpec d = Disk();
  d.read_iops = 100e3;
  // 4 KiB: Little's law allows 1.62 GB/s at qd 32, the limit 100 k x 4096 = 0.41 GB/s.
  ExpectRel(DiskReadBandwidth(d, 4096, 32), 100e3 * 4096);
  ExpectRel(DiskReadBandwidth(d, 4096, 1024), 100e3 * 4096);
  // Depth 1 stays latency-bound (4096 / 80.6 us = 51 MB/s < 0.41 GB/s); 1 MiB stays at the peak.
  ExpectRel(DiskReadBandwidth(d, 4096, 1), 4096 / (80e-6 + 4096 / 7e9));
  EXPECT_DOUBLE_EQ(DiskReadBandwidth(d, 1 << 20, 1024), 7e9);
  // Writes have their own limit (none here).
  ExpectRel(DiskWriteBandwidth(d, 4096, 32), DiskWriteBandwidth(Disk(), 4096, 32));
}

TEST(PerfDiskTest, SaturatesAtPeak) {
  const NvmeSpec d = Disk();
  // 1 MiB: one request takes 80 us + 149.8 us; qd 2 already exceeds the 7 GB/s peak.
  EXPECT_DOUBLE_EQ(DiskReadBandwidth(d, 1 << 20, 2), 7e9);
  EXPECT_DOUBLE_EQ(DiskReadBandwidth(d, 1 << 20, 1024), 7e9);
  EXPECT_DOUBLE_EQ(DiskWriteBandwidth(d, 1 << 20, 1024), 4e9);
  // Monotone in queue depth up to the peak.
  double last = 0;
  for (int qd = 1; qd <= 256; qd *= 2) {
    const double bw = DiskReadBandwidth(d, 64 << 10, qd);
    EXPECT_GE(bw, last);
    EXPECT_LE(bw, 7e9);
    last = bw;
  }
  EXPECT_DOUBLE_EQ(last, 7e9);
}

TEST(PerfDiskTest, MeasuredStreamsAreInterpolatedWhereTheySurroundTheRequest) {
  NvmeSpec d = Disk();
  const double peak = d.read_bw_bytes_per_s;
  // A 2 x 2 grid: 16 KiB and 1 MiB, depths 1 and 4.
  d.read_bw_by_request = {{16384, 1, 2.5e8}, {16384, 4, 4e8}, {1 << 20, 1, 1e9}, {1 << 20, 4, 1.6e9}};
  EXPECT_DOUBLE_EQ(DiskReadBandwidth(d, 16384, 1), 2.5e8);  // a measured point as measured
  EXPECT_DOUBLE_EQ(DiskReadBandwidth(d, 1 << 20, 4), std::min(1.6e9, peak));
  // Halfway in log2 depth (2 between 1 and 4): the geometric mean; likewise in log2 block
  // (128 KiB between 16 KiB and 1 MiB).
  EXPECT_NEAR(DiskReadBandwidth(d, 16384, 2), std::sqrt(2.5e8 * 4e8), 1);
  EXPECT_NEAR(DiskReadBandwidth(d, 128 << 10, 1), std::sqrt(2.5e8 * 1e9), 1);
  // Outside the grid (a deeper queue, a smaller block) or with a corner missing: Little's law.
  NvmeSpec fit = Disk();
  EXPECT_DOUBLE_EQ(DiskReadBandwidth(d, 16384, 8), DiskReadBandwidth(fit, 16384, 8));
  EXPECT_DOUBLE_EQ(DiskReadBandwidth(d, 4096, 1), DiskReadBandwidth(fit, 4096, 1));
  // DiskStreamMeasured says which (`tierflow hardware` marks it).
  EXPECT_TRUE(DiskStreamMeasured(d, /*write=*/false, 128 << 10, 2));
  EXPECT_FALSE(DiskStreamMeasured(d, /*write=*/false, 16384, 8));
  EXPECT_FALSE(DiskStreamMeasured(d, /*write=*/true, 16384, 1));
  d.read_bw_by_request.pop_back();
  EXPECT_FALSE(DiskStreamMeasured(d, /*write=*/false, 128 << 10, 2));
  EXPECT_DOUBLE_EQ(DiskReadBandwidth(d, 128 << 10, 2), DiskReadBandwidth(fit, 128 << 10, 2));
  // Writes take their own points; none here.
  EXPECT_DOUBLE_EQ(DiskWriteBandwidth(d, 16384, 1), DiskWriteBandwidth(fit, 16384, 1));
  // Never above the device's peak, which the device's sharing takes as its capacity.
  d.read_bw_by_request = {{16384, 1, 10 * peak}};
  EXPECT_DOUBLE_EQ(DiskReadBandwidth(d, 16384, 1), peak);
}

TEST(PerfDiskTest, NoRequestsNoBandwidth) {
  EXPECT_EQ(DiskReadBandwidth(Disk(), 4096, 0), 0.0);
  EXPECT_EQ(DiskReadBandwidth(Disk(), 0, 8), 0.0);
}

TEST(PerfDiskTest, SharedCapacityIsTheHarmonicMixWithEfficiency) {
  const NvmeSpec d = Disk();
  EXPECT_DOUBLE_EQ(DiskSharedCapacity(d, 3, 0), 7e9);  // reads only: the read peak
  EXPECT_DOUBLE_EQ(DiskSharedCapacity(d, 0, 2), 4e9);  // writes only: the write peak
  EXPECT_EQ(DiskSharedCapacity(d, 0, 0), 0.0);
  // One read and one write stream, each half the streams: 0.8 / (0.5/7e9 + 0.5/4e9).
  ExpectRel(DiskSharedCapacity(d, 1, 1), 0.8 / (0.5 / 7e9 + 0.5 / 4e9));
  // Three readers, one writer.
  ExpectRel(DiskSharedCapacity(d, 3, 1), 0.8 / (0.75 / 7e9 + 0.25 / 4e9));
  // With efficiency 1 and equal peaks the mix is the peak itself.
  NvmeSpec e = d;
  e.write_bw_bytes_per_s = e.read_bw_bytes_per_s;
  e.mixed_efficiency = 1.0;
  ExpectRel(DiskSharedCapacity(e, 5, 3), 7e9);
}

TEST(PerfDiskTest, MixedEfficiencyByStreamsIsLinearInLog2OfTheCount) {
  NvmeSpec d = Disk();
  EXPECT_EQ(MixedEfficiency(d, 6), 0.8);  // no points: mixed_efficiency whatever the count
  d.mixed_efficiency_by_streams = {{2, 0.9}, {8, 0.6}};
  EXPECT_DOUBLE_EQ(MixedEfficiency(d, 2), 0.9);
  EXPECT_DOUBLE_EQ(MixedEfficiency(d, 4), 0.75);  // halfway in log2 between 2 and 8
  EXPECT_DOUBLE_EQ(MixedEfficiency(d, 8), 0.6);
  EXPECT_DOUBLE_EQ(MixedEfficiency(d, 32), 0.6);  // beyond the points: the nearest
  // Two readers and two writers: the harmonic mix at the efficiency of 4 streams.
  ExpectRel(DiskSharedCapacity(d, 2, 2), 0.75 / (0.5 / 7e9 + 0.5 / 4e9));
  EXPECT_DOUBLE_EQ(DiskSharedCapacity(d, 4, 0), 7e9);  // one direction only: its peak, no mixing
}

GpuSpec Gpu() {
  GpuSpec g;
  g.peak_flops = 300e12;
  g.hbm_bw_bytes_per_s = 2e12;
  g.compute_efficiency = 0.5;
  g.kernel_overhead_s = 10e-6;
  return g;
}

TEST(PerfComputeTest, Roofline) {
  const GpuSpec g = Gpu();
  // Compute-bound: 1.5e14 FLOPs at 150 TFLOP/s effective = 1 s; 1 GB at 2 TB/s = 0.5 ms.
  ExpectRel(ComputeTime(g, 1.5e14, 1e9), 1.0 + 10e-6);
  // Memory-bound: 1e9 FLOPs = 6.7 us, 4 GB = 2 ms.
  ExpectRel(ComputeTime(g, 1e9, 4e9), 4e9 / 2e12 + 10e-6);
  // Nothing to do still costs the overhead.
  ExpectRel(ComputeTime(g, 0, 0), 10e-6);
}

TEST(PerfComputeTest, PhaseEfficiencyOverridesTheDefault) {
  GpuSpec g = Gpu();
  g.backward_efficiency = 0.25;
  // Backward at 75 TFLOP/s effective; forward (no override) and other phases at 150.
  ExpectRel(ComputeTime(g, 1.5e14, 0, Phase::kBackward), 2.0 + 10e-6);
  ExpectRel(ComputeTime(g, 1.5e14, 0, Phase::kForward), 1.0 + 10e-6);
  ExpectRel(ComputeTime(g, 1.5e14, 0, Phase::kStep), 1.0 + 10e-6);
  EXPECT_EQ(ComputeEfficiency(g, Phase::kBackward), 0.25);
  EXPECT_EQ(ComputeEfficiency(g, Phase::kForward), 0.5);
}

TEST(PerfCopyTest, PinnedPageableAndDirection) {
  PcieSpec p;
  p.h2d_bw_bytes_per_s = 25e9;
  p.d2h_bw_bytes_per_s = 20e9;
  p.pageable_factor = 0.5;
  p.latency_s = 10e-6;
  const int64_t bytes = 1 << 30;
  const double b = static_cast<double>(bytes);
  ExpectRel(CopyTime(p, true, bytes, true), 10e-6 + b / 25e9);
  ExpectRel(CopyTime(p, false, bytes, true), 10e-6 + b / 20e9);
  ExpectRel(CopyTime(p, true, bytes, false), 10e-6 + b / (25e9 * 0.5));
  EXPECT_EQ(CopyTime(p, true, 0, true), 0.0);
}

TEST(PerfCollectiveTest, RingAlphaBeta) {
  InterconnectSpec ic;
  ic.kind = "pcie";
  ic.bus_bw_bytes_per_s = 12e9;
  ic.latency_s = 10e-6;
  const int64_t bytes = 400'000'000;
  const double b = static_cast<double>(bytes);
  // 4 ranks: 3 steps of alpha, and 3/4 of the buffer over the bus bandwidth.
  const double ag = 3 * 10e-6 + 0.75 * b / 12e9;
  ExpectRel(CollectiveTime(ic, Collective::kAllGather, bytes, 4), ag);
  ExpectRel(CollectiveTime(ic, Collective::kReduceScatter, bytes, 4), ag);
  ExpectRel(CollectiveTime(ic, Collective::kAllReduce, bytes, 4), 2 * ag);
  // 8 ranks.
  ExpectRel(CollectiveTime(ic, Collective::kAllGather, bytes, 8), 7 * 10e-6 + 7.0 / 8 * b / 12e9);
  EXPECT_EQ(CollectiveTime(ic, Collective::kAllReduce, bytes, 1), 0.0);
  EXPECT_EQ(CollectiveTime(ic, Collective::kAllReduce, bytes, 0), 0.0);
}

// A reduction of one rank in all costs its library's local copy (interconnect.local_bw), free
// when that is unset; a one-rank all-gather is free; one rank per node of a collective over
// nodes adds no local copy.
TEST(PerfCollectiveTest, OneRankCostsItsLocalCopy) {
  HardwareSpec hw = HardwarePreset("cpu-host").value();
  const int64_t bytes = 400'000'000;
  EXPECT_EQ(ClusterCollectiveTime(hw, Collective::kReduceScatter, bytes, 1).intra_s, 0.0);
  hw.node.interconnect.local_bw_bytes_per_s = 0.5e9;
  ExpectRel(ClusterCollectiveTime(hw, Collective::kReduceScatter, bytes, 1).intra_s, 0.8);
  ExpectRel(ClusterCollectiveTime(hw, Collective::kAllReduce, bytes, 1).intra_s, 0.8);
  EXPECT_EQ(ClusterCollectiveTime(hw, Collective::kAllGather, bytes, 1).intra_s, 0.0);
  EXPECT_EQ(ClusterCollectiveTime(hw, Collective::kReduceScatter, 0, 1).intra_s, 0.0);
  hw.nodes = 2;
  hw.node.nic_bw_bytes_per_s = 10e9;
  const ClusterCollective two = ClusterCollectiveTime(hw, Collective::kReduceScatter, bytes, 2);
  EXPECT_EQ(two.intra_s, 0.0);
  EXPECT_GT(two.inter_s, 0.0);
}

CpuSpec Cpu() {
  CpuSpec c;
  c.cores = 32;
  c.host_memory_bytes = int64_t{512} << 30;
  c.memory_bw_bytes_per_s = 280e9;  // 10e9 Adam elements/s at 28 B each
  c.adam_elements_per_s_per_core = 1e9 / 8;
  c.convert_bytes_per_s_per_core = 5e9;
  return c;
}

TEST(PerfCpuTest, AdamIsBoundedByCoresThenMemory) {
  const CpuSpec c = Cpu();
  const int64_t n = 1'000'000'000;
  // 4 threads: 0.5e9 elements/s compute, memory allows 10e9: compute-bound, 2 s.
  ExpectRel(AdamTime(c, n, 4), 1e9 / (4 * 1e9 / 8));
  // 32 threads: 4e9 elements/s, still compute-bound.
  ExpectRel(AdamTime(c, n, 32), 1e9 / (32 * 1e9 / 8));
  // Threads beyond the cores do not help.
  ExpectRel(AdamTime(c, n, 64), AdamTime(c, n, 32));
  // A faster core makes memory the bound: 28 B x 1e9 / 280 GB/s = 0.1 s.
  CpuSpec fast = c;
  fast.adam_elements_per_s_per_core = 1e9;
  ExpectRel(AdamTime(fast, n, 32), 1e9 * kAdamBytesPerElement / 280e9);
  EXPECT_EQ(AdamTime(c, 0, 4), 0.0);
  EXPECT_EQ(kAdamBytesPerElement, 28.0);
}

TEST(PerfCpuTest, ConvertIsBoundedByCoresThenMemory) {
  const CpuSpec c = Cpu();
  const int64_t bytes = int64_t{10} << 30;
  const double b = static_cast<double>(bytes);
  ExpectRel(ConvertTime(c, bytes, 2), b / (2 * 5e9));
  ExpectRel(ConvertTime(c, bytes, 32), b / 160e9);  // 32 x 5 GB/s < 280 GB/s
  CpuSpec fast = c;
  fast.convert_bytes_per_s_per_core = 20e9;
  ExpectRel(ConvertTime(fast, bytes, 32), b / 280e9);  // memory-bound
  ExpectRel(ConvertTime(c, bytes, 0), b / 5e9);        // at least one thread
}

// One iteration's bytes per device at peak rates, reads plus writes on an NVMe device, the larger
// of the two on a remote tier; a directory on another's device counts on that device.
TEST(StorageLowerBound, SumsReadAndWriteTimePerDeviceAndTakesTheBusiest) {
  HardwareSpec hw;
  hw.node.name = "test";
  hw.node.nvme = {Disk(), Disk(), Disk()};   // 7 GB/s read, 4 GB/s write
  hw.node.nvme[2].same_device_as = 1;        // nvme2 is a directory on nvme1's device
  RemoteTierSpec remote;
  remote.name = "pfs";
  remote.read_bw_bytes_per_s = 2e9;
  remote.write_bw_bytes_per_s = 1e9;
  hw.node.remote = {remote};
  Schedule s;
  s.name = "bound";
  for (const char* d : {"nvme0", "nvme1", "nvme2", "remote0"}) {
    s.AddDevice({d, std::string(d).starts_with("nvme") ? DeviceKind::kNvme : DeviceKind::kRemote});
    s.AddResource({std::string(d) + ".io", s.FindDevice(d), 4});
  }
  int n = 0;
  auto io = [&](const std::string& device, Op op, int64_t bytes) {
    TaskSpec t;
    t.id = "t" + std::to_string(n++);
    t.op = op;
    t.resource = s.FindResource(device + ".io");
    t.bytes = bytes;
    s.AddTask(std::move(t));
  };
  io("nvme0", Op::kRead, 14'000'000'000);  // 2 s
  io("nvme0", Op::kWrite, 4'000'000'000);  // 1 s
  io("nvme1", Op::kRead, 7'000'000'000);   // 1 s
  io("nvme2", Op::kWrite, 8'000'000'000);  // 2 s, on nvme1's device
  io("remote0", Op::kRead, 2'000'000'000);  // 1 s
  io("remote0", Op::kWrite, 1'500'000'000);  // 1.5 s, a link of its own
  auto b = StorageLowerBound(s, hw);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_EQ(b->devices.size(), 3u);  // nvme2 folded into nvme1
  EXPECT_EQ(b->devices[0].device, "nvme0");
  ExpectRel(b->devices[0].seconds, 3.0);
  EXPECT_EQ(b->devices[1].device, "nvme1");
  EXPECT_EQ(b->devices[1].write_bytes, 8'000'000'000);
  ExpectRel(b->devices[1].seconds, 3.0);
  EXPECT_EQ(b->devices[2].device, "remote0");
  ExpectRel(b->devices[2].seconds, 1.5);
  ExpectRel(b->seconds, 3.0);
  EXPECT_EQ(b->busiest, "nvme0");  // the first of the tied busiest

  hw.node.remote[0].write_bw_bytes_per_s = 0;
  auto refused = StorageLowerBound(s, hw);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("remote0 has no write bandwidth"), std::string::npos)
      << refused.status().ToString();
  hw.node.remote.clear();
  auto missing = StorageLowerBound(s, hw);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("device 'remote0', which hardware 'test' does not have"), std::string::npos)
      << missing.status().ToString();
}

}  // namespace
}  // namespace tierflow::models

