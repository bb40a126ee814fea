// Closed-form checks of the SimGrid executor: every expectation is computed here from the
// hardware numbers, independently of sim/ (the few that use a models/ function say so).
#include "tierflow/sim/simulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>

#include "tierflow/core/schedule.h"
#include "tierflow/models/perf.h"

namespace tierflow::sim {
namespace {

constexpr double kRelTol = 1e-6;
constexpr int64_t kMiB = 1 << 20;

#define EXPECT_REL(actual, expected)                                                   \
  EXPECT_NEAR((actual), (expected), kRelTol * std::max(1e-9, std::fabs(expected)))    \
      << "relative error " << ((actual) - (expected)) / (expected)

models::HardwareSpec TestHardware() {
  models::HardwareSpec hw;
  models::NodeSpec& n = hw.node;
  n.name = "testnode";
  n.gpu_count = 2;
  n.gpu = {"testgpu", 80LL << 30, 100e12, 2e12, 0.5, 0.0};
  n.pcie.h2d_bw_bytes_per_s = 20e9;
  n.pcie.d2h_bw_bytes_per_s = 18e9;
  n.pcie.latency_s = 5e-6;
  n.pcie.root_complex_bw_bytes_per_s = 64e9;
  n.cpu.cores = 16;
  n.cpu.host_memory_bytes = 512LL << 30;
  n.cpu.memory_bw_bytes_per_s = 100e9;
  n.cpu.adam_elements_per_s_per_core = 1e8;
  n.cpu.convert_bytes_per_s_per_core = 2e9;
  n.interconnect = {"pcie", 10e9, 1e-5};
  models::NvmeSpec disk;
  disk.name = "testssd";
  disk.capacity_bytes = 4LL << 40;
  disk.read_bw_bytes_per_s = 3e9;
  disk.write_bw_bytes_per_s = 2e9;
  disk.read_latency_s = 1e-4;
  disk.write_latency_s = 2e-5;
  disk.mixed_efficiency = 0.9;
  n.nvme.push_back(disk);
  return hw;
}

// Little's law with a saturating peak, as documented in models/hardware.h.
double StreamBandwidth(double peak, double latency_s, double block, double depth) {
  return std::min(peak, depth * block / (latency_s + block / peak));
}

// Builds small schedules by name.
class Builder {
 public:
  explicit Builder(std::vector<std::string> devices = {"gpu0", "gpu1", "host", "nvme0"}) {
    s.name = "test";
    for (const std::string& d : devices) Device(d);
  }
  int32_t Device(const std::string& name) {
    int32_t i = s.FindDevice(name);
    if (i != kNoIndex) return i;
    // A device of node n of a cluster is node{n}.<its name on the node>.
    const std::string local = name.rfind("node", 0) == 0 ? name.substr(name.find('.') + 1) : name;
    DeviceKind kind = local.rfind("gpu", 0) == 0      ? DeviceKind::kGpu
                      : local.rfind("nvme", 0) == 0   ? DeviceKind::kNvme
                      : local.rfind("remote", 0) == 0 ? DeviceKind::kRemote
                      : name == "net"                 ? DeviceKind::kNetwork
                                                      : DeviceKind::kHost;
    return s.AddDevice({name, kind});
  }
  int32_t Resource(const std::string& name, const std::string& device, int32_t concurrency = 1) {
    int32_t i = s.FindResource(name);
    if (i != kNoIndex) return i;
    return s.AddResource({name, Device(device), concurrency});
  }
  int32_t Pool(const std::string& name, int64_t capacity) { return s.AddPool({name, s.FindDevice("host"), capacity}); }
  int32_t Buffer(const std::string& name, const std::string& pool, int64_t size) {
    return s.AddBuffer({name, s.FindPool(pool), size, false});
  }
  // A task on `resource` (empty for instant ops).
  TaskSpec& Task(const std::string& id, Op op, const std::string& resource, int64_t bytes = 0,
                 std::vector<std::string> deps = {}) {
    TaskSpec t;
    t.id = id;
    t.op = op;
    t.resource = resource.empty() ? kNoIndex : s.FindResource(resource);
    t.bytes = bytes;
    for (const auto& d : deps) t.deps.push_back(s.FindTask(d));
    int32_t i = s.AddTask(std::move(t));
    return s.mutable_tasks()[i];
  }
  Schedule s;
};

const TraceRecord& Find(const SimResult& r, const std::string& task, int64_t iteration = 0) {
  for (const TraceRecord& rec : r.records) {
    if (rec.task == task && rec.iteration == iteration) return rec;
  }
  ADD_FAILURE() << "no record for " << task << " iteration " << iteration;
  static TraceRecord none;
  return none;
}

SimResult MustSimulate(const Schedule& s, const models::HardwareSpec& hw, int64_t iterations = 1) {
  SimOptions o;
  o.iterations = iterations;
  auto r = Simulate(s, hw, o);
  if (!r.ok()) {
    ADD_FAILURE() << r.status().ToString();
    return SimResult{};
  }
  return std::move(r).value();
}

TEST(SimTest, OneReadTakesBytesOverBandwidthPlusLatency) {
  const auto hw = TestHardware();
  Builder b;
  b.Resource("nvme0.read", "nvme0");
  const int64_t n = 3'000'000'000;
  b.Task("r", Op::kRead, "nvme0.read", n);
  SimResult r = MustSimulate(b.s, hw);
  const auto& d = hw.node.nvme[0];
  const double bw = StreamBandwidth(d.read_bw_bytes_per_s, d.read_latency_s, kMiB, 8);
  const TraceRecord& rec = Find(r, "r");
  EXPECT_EQ(rec.start_s, 0.0);
  EXPECT_REL(rec.end_s, n / bw + d.read_latency_s);
  EXPECT_EQ(rec.source, "sim");
  EXPECT_EQ(rec.block_bytes, kMiB);
  EXPECT_EQ(rec.queue_depth, 8);
  EXPECT_EQ(rec.resource, "nvme0.read");
  EXPECT_REL(r.makespan_s, rec.end_s);
  EXPECT_EQ(r.tasks_simulated, 1);
}

TEST(SimTest, SmallRequestsAreCappedByLittlesLaw) {
  const auto hw = TestHardware();
  Builder b;
  b.Resource("nvme0.read", "nvme0");
  const int64_t n = 100'000'000;
  TaskSpec& t = b.Task("r", Op::kRead, "nvme0.read", n);
  t.block_bytes = 4096;
  t.queue_depth = 4;
  SimResult r = MustSimulate(b.s, hw);
  const auto& d = hw.node.nvme[0];
  const double bw = StreamBandwidth(d.read_bw_bytes_per_s, d.read_latency_s, 4096, 4);
  ASSERT_LT(bw, d.read_bw_bytes_per_s / 10);  // the case is worth testing only if capped
  EXPECT_REL(Find(r, "r").end_s, n / bw + d.read_latency_s);
}

TEST(SimTest, TwoConcurrentReadsShareOneSsd) {
  const auto hw = TestHardware();
  Builder b;
  b.Resource("nvme0.read", "nvme0", 2);
  const int64_t n = 1'500'000'000;
  b.Task("r0", Op::kRead, "nvme0.read", n);
  b.Task("r1", Op::kRead, "nvme0.read", n);
  SimResult r = MustSimulate(b.s, hw);
  const auto& d = hw.node.nvme[0];
  for (const char* id : {"r0", "r1"}) EXPECT_REL(Find(r, id).end_s, 2.0 * n / d.read_bw_bytes_per_s + d.read_latency_s);
  EXPECT_EQ(r.disk_sharing_mismatches, 0);
  EXPECT_EQ(r.activities, 0) << "alone on their device: timed, no SimGrid comm";
}

TEST(SimTest, TwoDirectoriesOnOneDeviceShareItsMediaLink) {
  // nvme0 and nvme1 alike; one read on each at once. Independent, each takes n / bw; on one
  // device (same_device_as), they share its media link and take twice that.
  auto hw = TestHardware();
  hw.node.nvme.push_back(hw.node.nvme[0]);
  Builder b;
  b.Resource("nvme0.read", "nvme0");
  b.Resource("nvme1.read", "nvme1");
  const int64_t n = 1'500'000'000;
  b.Task("r0", Op::kRead, "nvme0.read", n);
  b.Task("r1", Op::kRead, "nvme1.read", n);
  const auto& d = hw.node.nvme[0];
  SimResult apart = MustSimulate(b.s, hw);
  for (const char* id : {"r0", "r1"}) EXPECT_REL(Find(apart, id).end_s, 1.0 * n / d.read_bw_bytes_per_s + d.read_latency_s);
  hw.node.nvme[1].same_device_as = 0;
  SimResult shared = MustSimulate(b.s, hw);
  for (const char* id : {"r0", "r1"}) EXPECT_REL(Find(shared, id).end_s, 2.0 * n / d.read_bw_bytes_per_s + d.read_latency_s);
  EXPECT_EQ(shared.disk_sharing_mismatches, 0);
}

TEST(SimTest, StreamsShareTheSsdInProportionToTheirBytesInFlight) {
  // A deep stream (8 x 1 MiB queued) and a shallow one (1 x 1 MiB) on one disk: the device
  // serves the requests queued on it, so the shallow one gets 1/9 of it, far below its own cap,
  // until the deep one ends; then it runs at its cap alone.
  const auto hw = TestHardware();
  const auto& d = hw.node.nvme[0];
  const double block = 1 << 20;
  const auto deep_and_shallow = [&](double deep_bytes, double shallow_bytes) {
    Builder b;
    b.Resource("nvme0.read", "nvme0", 2);
    for (const auto& [id, bytes, depth] : {std::tuple{"deep", deep_bytes, 8}, std::tuple{"shallow", shallow_bytes, 1}}) {
      TaskSpec& t = b.Task(id, Op::kRead, "nvme0.read", static_cast<int64_t>(bytes));
      t.block_bytes = static_cast<int64_t>(block);
      t.queue_depth = depth;
    }
    return MustSimulate(b.s, hw);
  };
  const double peak = d.read_bw_bytes_per_s, t_r = d.read_latency_s;
  const double deep_cap = StreamBandwidth(peak, t_r, block, 8), shallow_cap = StreamBandwidth(peak, t_r, block, 1);
  ASSERT_GE(deep_cap, peak * 8 / 9);  // the deep one takes its whole share
  ASSERT_GT(shallow_cap, peak / 2);   // equal shares would leave the shallow one at its cap
  SimResult r = deep_and_shallow(2e9, 1e9);
  const double deep_done = t_r + 2e9 / (peak * 8 / 9);
  EXPECT_REL(Find(r, "deep").end_s, deep_done);
  EXPECT_REL(Find(r, "shallow").end_s, deep_done + (1e9 - (deep_done - t_r) * peak / 9) / shallow_cap);

  // A transfer smaller than its window keeps only its bytes queued: 2 MiB against 1 MiB, 2:1.
  SimResult s = deep_and_shallow(2 * block, 2 * block);
  const double small_done = t_r + 2 * block / (peak * 2 / 3);
  EXPECT_REL(Find(s, "deep").end_s, small_done);
  EXPECT_REL(Find(s, "shallow").end_s, small_done + (2 * block - (small_done - t_r) * peak / 3) / shallow_cap);
  EXPECT_EQ(r.disk_sharing_mismatches + s.disk_sharing_mismatches, 0);
  EXPECT_EQ(r.activities + s.activities, 0) << "timed alone, each at its share";
}

TEST(SimTest, ReadAndWriteShareTheSsdAsDiskSharedCapacity) {
  // As measured per stream count too (mixed_efficiency_by_streams: 2 streams here). With an I/O
  // path's CPU for reads (`io_read_cores`: one core, which the node has), the read is a SimGrid
  // comm beside its load and the write is timed alone: the device is shared the same way.
  for (const auto& [by_streams, read_load] : {std::pair{false, false}, std::pair{true, false}, std::pair{false, true}}) {
    auto hw = TestHardware();
    if (by_streams) hw.node.nvme[0].mixed_efficiency_by_streams = {{2, 0.5}, {8, 0.25}};
    if (read_load) hw.node.cpu.io_read_cores = {{kMiB, 8, 1.0}};
    Builder b;
    b.Resource("nvme0.read", "nvme0");
    b.Resource("nvme0.write", "nvme0");
    const double n = 1e9;
    b.Task("r", Op::kRead, "nvme0.read", static_cast<int64_t>(n));
    b.Task("w", Op::kWrite, "nvme0.write", static_cast<int64_t>(n));
    SimResult r = MustSimulate(b.s, hw);
    const auto& d = hw.node.nvme[0];
    // Mixed capacity: harmonic mean of the peaks weighted by the stream mix, times the
    // efficiency (models/hardware.h), split equally between the two streams.
    const double efficiency = by_streams ? 0.5 : d.mixed_efficiency;
    const double mixed = efficiency / (0.5 / d.read_bw_bytes_per_s + 0.5 / d.write_bw_bytes_per_s);
    EXPECT_REL(models::DiskSharedCapacity(d, 1, 1), mixed);
    // The write's latency (20 us) ends first: alone until the read's (100 us) ends.
    const double t_w = d.write_latency_s, t_r = d.read_latency_s;
    const double w_alone = (t_r - t_w) * d.write_bw_bytes_per_s;
    const double w_done = t_r + (n - w_alone) / (mixed / 2);                   // write finishes first
    const double r_done = w_done + (n - (w_done - t_r) * mixed / 2) / d.read_bw_bytes_per_s;
    EXPECT_REL(Find(r, "w").end_s, w_done);
    EXPECT_REL(Find(r, "r").end_s, r_done);
    EXPECT_EQ(r.disk_sharing_mismatches, 0);
    EXPECT_EQ(r.activities, read_load ? 3 : 0) << "the read's comm and its load, restarted at the read's new rate once the "
                                                  "write has ended; the write timed alone";
  }
}

// A disk stream timed alone goes on as a SimGrid comm of its bytes left once another flow would
// take the root complex past its capacity, and shares it from then on. A read alone at the disk's
// 3 GB/s; a copy (20 GB/s) begins after a compute, through a root complex of 4: 2 GB/s each until
// the read ends, then the copy alone at 4. The read has moved 3e8 + 0.3 bytes by then: SimGrid
// counts in 1/1024 bytes, so the fraction is kept (rounded to a byte, the read would end 0.15 ns
// off, 1e-10 of its time, and the copy after it).
TEST(SimTest, AStreamTimedAloneIsHandedToSimGridWhenTheRootComplexFills) {
  auto hw = TestHardware();
  hw.node.pcie.root_complex_bw_bytes_per_s = 4e9;
  const auto& d = hw.node.nvme[0];
  const double t_r = d.read_latency_s, read_bw = d.read_bw_bytes_per_s, pcie_lat = hw.node.pcie.latency_s;
  const double read_bytes = 3e9, copy_bytes = 4e9;
  const double moved = 3e8 + 0.3;                    // by the read when the copy begins
  const double t_c = t_r + moved / read_bw;          // the copy begins
  Builder b;
  b.Resource("nvme0.read", "nvme0");
  b.Resource("gpu0.compute", "gpu0");
  b.Resource("gpu0.h2d", "gpu0");
  b.Task("r", Op::kRead, "nvme0.read", static_cast<int64_t>(read_bytes));
  b.Task("x", Op::kCompute, "gpu0.compute", 0).flops = (t_c - pcie_lat) * hw.node.gpu.peak_flops * hw.node.gpu.compute_efficiency;
  b.Task("c", Op::kH2D, "gpu0.h2d", static_cast<int64_t>(copy_bytes), {"x"});
  SimResult r = MustSimulate(b.s, hw);
  const double shared = hw.node.pcie.root_complex_bw_bytes_per_s / 2;
  const double r_done = t_c + (read_bytes - moved) / shared;
  const double c_done = r_done + (copy_bytes - (r_done - t_c) * shared) / (2 * shared);
  EXPECT_NEAR(Find(r, "r").end_s, r_done, 1e-12 * r_done);
  EXPECT_NEAR(Find(r, "c").end_s, c_done, 1e-12 * c_done);
  EXPECT_EQ(r.activities, 2) << "the read handed to SimGrid when the copy began, and the copy";
  EXPECT_EQ(r.disk_sharing_mismatches, 0);
}

TEST(SimTest, CopiesAndNvmeDmaShareTheRootComplex) {
  auto hw = TestHardware();
  hw.node.pcie.latency_s = 0;
  hw.node.nvme[0].read_latency_s = 0;
  hw.node.pcie.root_complex_bw_bytes_per_s = 8e9;  // below h2d (20) + read (3)
  Builder b;
  b.Resource("nvme0.read", "nvme0");
  b.Resource("gpu0.h2d", "gpu0");
  const double read_bytes = 3e9, copy_bytes = 6e9;
  b.Task("r", Op::kRead, "nvme0.read", static_cast<int64_t>(read_bytes));
  b.Task("c", Op::kH2D, "gpu0.h2d", static_cast<int64_t>(copy_bytes));
  SimResult r = MustSimulate(b.s, hw);
  // Max-min: the read keeps its 3 GB/s, the copy gets the 5 GB/s left, then all 8 GB/s.
  const double root = hw.node.pcie.root_complex_bw_bytes_per_s, read_bw = hw.node.nvme[0].read_bw_bytes_per_s;
  const double r_done = read_bytes / read_bw;
  const double c_done = r_done + (copy_bytes - r_done * (root - read_bw)) / root;
  EXPECT_REL(Find(r, "r").end_s, r_done);
  EXPECT_REL(Find(r, "c").end_s, c_done);
  EXPECT_GT(c_done, copy_bytes / root * 1.2);  // slower than alone: the root complex is shared
}

// Flows of different latencies share a bottleneck equally once both transfer (SimGrid's CM02
// would weigh them by route latency if latency were a link property).
TEST(SimTest, FlowsOfDifferentLatenciesShareTheRootComplexEqually) {
  auto hw = TestHardware();
  hw.node.pcie.root_complex_bw_bytes_per_s = 4e9;  // fair share 2 GB/s, below both caps
  Builder b;
  b.Resource("nvme0.read", "nvme0");
  b.Resource("gpu0.h2d", "gpu0");
  const double read_bytes = 1e9, copy_bytes = 2e9;
  b.Task("r", Op::kRead, "nvme0.read", static_cast<int64_t>(read_bytes));
  b.Task("c", Op::kH2D, "gpu0.h2d", static_cast<int64_t>(copy_bytes));
  SimResult r = MustSimulate(b.s, hw);
  const double root = hw.node.pcie.root_complex_bw_bytes_per_s;
  const double t_c = hw.node.pcie.latency_s, t_r = hw.node.nvme[0].read_latency_s;
  const double c_alone = (t_r - t_c) * root;        // the copy transfers alone until the read starts
  const double r_done = t_r + read_bytes / (root / 2);
  const double c_done = r_done + (copy_bytes - c_alone - read_bytes) / root;
  EXPECT_REL(Find(r, "r").end_s, r_done);
  EXPECT_REL(Find(r, "c").end_s, c_done);
}

// A copy whose links have room for every flow on them is timed without SimGrid (no activity);
// once another flow would take a link past its capacity, it goes on as a SimGrid comm of its
// bytes left and shares the link. Two GPUs' copies of 20 GB/s each through a root complex of
// 30: A alone until B begins, then 15 GB/s each, then B alone again.
TEST(SimTest, CopiesRunAloneUntilTheirLinkFillsThenShareIt) {
  auto hw = TestHardware();
  const double latency = hw.node.pcie.latency_s, h2d = hw.node.pcie.h2d_bw_bytes_per_s;
  const double compute_s = 0.05, bytes = 2e9;
  {
    Builder b;
    b.Resource("gpu0.h2d", "gpu0");
    b.Task("a", Op::kH2D, "gpu0.h2d", static_cast<int64_t>(bytes));
    SimResult r = MustSimulate(b.s, hw);
    EXPECT_REL(Find(r, "a").end_s, latency + bytes / h2d);
    EXPECT_EQ(r.activities, 0) << "alone: timed, no SimGrid comm";
  }
  hw.node.pcie.root_complex_bw_bytes_per_s = 30e9;
  Builder b;
  b.Resource("gpu0.h2d", "gpu0");
  b.Resource("gpu1.compute", "gpu1");
  b.Resource("gpu1.h2d", "gpu1");
  b.Task("a", Op::kH2D, "gpu0.h2d", static_cast<int64_t>(bytes));
  b.Task("x", Op::kCompute, "gpu1.compute", 0).flops = compute_s * hw.node.gpu.peak_flops * hw.node.gpu.compute_efficiency;
  b.Task("b", Op::kH2D, "gpu1.h2d", static_cast<int64_t>(bytes), {"x"});
  SimResult r = MustSimulate(b.s, hw);
  const double shared = hw.node.pcie.root_complex_bw_bytes_per_s / 2;
  const double b_begins = compute_s + latency;
  const double a_left = bytes - (b_begins - latency) * h2d;
  const double a_end = b_begins + a_left / shared;
  const double b_end = a_end + (bytes - a_left) / h2d;
  EXPECT_REL(Find(r, "a").end_s, a_end);
  EXPECT_REL(Find(r, "b").end_s, b_end);
  EXPECT_EQ(r.activities, 2) << "a handed to SimGrid when b began, and b";
}

// A device's streams take no more of the root complex at once than the device can move, however
// many there are: three reads of one disk (3 GB/s, each capped at 3) beside three copies (20 +
// 20 + 18 GB/s) through a root complex of 64 count 3 GB/s there, not 9, so every flow fits and is
// timed alone (counted at their caps, 67 GB/s, they were SimGrid comms; the dates were the same).
TEST(SimTest, ARootComplexCountsADevicesStreamsAtMostAtTheDevicesCapacity) {
  const auto hw = TestHardware();
  const auto& d = hw.node.nvme[0];
  const auto& pcie = hw.node.pcie;
  ASSERT_GT(2 * pcie.h2d_bw_bytes_per_s + pcie.d2h_bw_bytes_per_s + 3 * d.read_bw_bytes_per_s, pcie.root_complex_bw_bytes_per_s);
  ASSERT_LE(2 * pcie.h2d_bw_bytes_per_s + pcie.d2h_bw_bytes_per_s + d.read_bw_bytes_per_s, pcie.root_complex_bw_bytes_per_s);
  Builder b;
  b.Resource("nvme0.read", "nvme0", 3);
  b.Resource("gpu0.h2d", "gpu0");
  b.Resource("gpu1.h2d", "gpu1");
  b.Resource("gpu0.d2h", "gpu0");
  const double read_bytes = 3e8, copy_bytes = 4e9;
  for (const char* id : {"r0", "r1", "r2"}) b.Task(id, Op::kRead, "nvme0.read", static_cast<int64_t>(read_bytes));
  b.Task("h0", Op::kH2D, "gpu0.h2d", static_cast<int64_t>(copy_bytes));
  b.Task("h1", Op::kH2D, "gpu1.h2d", static_cast<int64_t>(copy_bytes));
  b.Task("d0", Op::kD2H, "gpu0.d2h", static_cast<int64_t>(copy_bytes));
  SimResult r = MustSimulate(b.s, hw);
  for (const char* id : {"r0", "r1", "r2"}) EXPECT_REL(Find(r, id).end_s, d.read_latency_s + 3 * read_bytes / d.read_bw_bytes_per_s);
  for (const char* id : {"h0", "h1"}) EXPECT_REL(Find(r, id).end_s, pcie.latency_s + copy_bytes / pcie.h2d_bw_bytes_per_s);
  EXPECT_REL(Find(r, "d0").end_s, pcie.latency_s + copy_bytes / pcie.d2h_bw_bytes_per_s);
  EXPECT_EQ(r.activities, 0) << "every stream and copy timed alone";
  EXPECT_EQ(r.disk_sharing_mismatches, 0);
}

TEST(SimTest, RemoteTierReadsShareItsBandwidthThroughTheNic) {
  auto hw = TestHardware();
  hw.node.remote.push_back({"pfs", 2e9, 1e9, 5e-4});
  hw.node.nic_bw_bytes_per_s = 25e9;
  Builder b;
  b.Device("remote0");
  b.Resource("remote0.read", "remote0", 2);
  const double n = 1e9;
  b.Task("a", Op::kRead, "remote0.read", static_cast<int64_t>(n));
  b.Task("b", Op::kRead, "remote0.read", static_cast<int64_t>(n));
  SimResult r = MustSimulate(b.s, hw);
  const auto& tier = hw.node.remote[0];
  for (const char* id : {"a", "b"}) EXPECT_REL(Find(r, id).end_s, 2 * n / tier.read_bw_bytes_per_s + tier.latency_s);
}

// Over a PCIe interconnect a collective's bus bytes cross the root complex; over NVLink not.
TEST(SimTest, PcieCollectivesLoadTheRootComplex) {
  for (const char* kind : {"pcie", "nvlink"}) {
    auto hw = TestHardware();
    hw.node.pcie.latency_s = 0;
    hw.node.pcie.root_complex_bw_bytes_per_s = 8e9;
    hw.node.interconnect = {kind, 10e9, 0.0};
    Builder b;
    b.Resource("gpu0.h2d", "gpu0");
    b.Resource("dp.comm", "net");
    const double copy_bytes = 8e9, reduce_bytes = 4e9;
    b.Task("c", Op::kH2D, "gpu0.h2d", static_cast<int64_t>(copy_bytes));
    b.Task("ar", Op::kAllReduce, "dp.comm", static_cast<int64_t>(reduce_bytes)).ranks = 2;
    SimResult r = MustSimulate(b.s, hw);
    const double root = hw.node.pcie.root_complex_bw_bytes_per_s;
    const double bus_bytes = 2 * 0.5 * reduce_bytes;  // all-reduce on 2 ranks: 2 (n-1)/n bytes
    if (std::string(kind) == "pcie") {
      const double ar_done = bus_bytes / (root / 2);  // fair half of the root complex
      EXPECT_REL(Find(r, "ar").end_s, ar_done) << kind;
      EXPECT_REL(Find(r, "c").end_s, ar_done + (copy_bytes - bus_bytes) / root) << kind;
    } else {
      EXPECT_REL(Find(r, "ar").end_s, bus_bytes / hw.node.interconnect.bus_bw_bytes_per_s) << kind;
      EXPECT_REL(Find(r, "c").end_s, copy_bytes / root) << kind;
    }
  }
}

TEST(SimTest, CopyTakesLatencyPlusBytesOverPinnedBandwidth) {
  const auto hw = TestHardware();
  Builder b;
  b.Resource("gpu1.h2d", "gpu1");
  b.Resource("gpu1.d2h", "gpu1");
  const int64_t n = 512 * kMiB;
  b.Task("up", Op::kH2D, "gpu1.h2d", n);
  b.Task("down", Op::kD2H, "gpu1.d2h", n, {"up"});
  SimResult r = MustSimulate(b.s, hw);
  const auto& p = hw.node.pcie;
  const double up = p.latency_s + n / p.h2d_bw_bytes_per_s;
  EXPECT_REL(Find(r, "up").end_s, up);
  EXPECT_REL(Find(r, "down").end_s, up + p.latency_s + n / p.d2h_bw_bytes_per_s);
}

TEST(SimTest, ComputeOptimizerAndCollectivesTakeTheirModelTimes) {
  const auto hw = TestHardware();
  Builder b;
  b.Resource("gpu0.compute", "gpu0");
  b.Resource("cpu.optimizer", "host");
  b.Resource("dp.comm", "net");
  TaskSpec& x = b.Task("x", Op::kCompute, "gpu0.compute", 0);
  x.flops = 1e13;
  TaskSpec& o = b.Task("adam", Op::kOptimizer, "cpu.optimizer", 400'000'000);
  o.ranks = 8;
  TaskSpec& c = b.Task("ar", Op::kAllReduce, "dp.comm", 1'000'000'000);
  c.ranks = 2;
  SimResult r = MustSimulate(b.s, hw);
  const auto& n = hw.node;
  EXPECT_REL(Find(r, "x").end_s, 1e13 / (n.gpu.peak_flops * n.gpu.compute_efficiency));
  const double elements = 400'000'000 / 4.0;
  EXPECT_REL(Find(r, "adam").end_s,
             elements / std::min(8 * n.cpu.adam_elements_per_s_per_core, n.cpu.memory_bw_bytes_per_s / 28.0));
  EXPECT_EQ(Find(r, "adam").threads, 8);
  const double ring = 2 * (1 * n.interconnect.latency_s + 0.5 * 1e9 / n.interconnect.bus_bw_bytes_per_s);
  EXPECT_REL(Find(r, "ar").end_s, ring);
}

// An emulated GPU (gpu.shares_host_cores) computes with every core of its node and copies with
// one, beside the optimizer: SimGrid shares the cores in proportion to the threads in flight.
// Compute (2 threads) with a copy (1) on 2 cores: each at 2/3 of its speed while both run.
// Compute with Adam (2 and 2): each at half. On a GPU of its own, none slows another.
TEST(SimTest, AnEmulatedGpuSharesTheHostCores) {
  auto hw = TestHardware();
  hw.node.cpu.cores = 2;
  const double compute_s = 1.0;
  const int64_t copy_bytes = 512 * kMiB;
  const double copy_s = hw.node.pcie.latency_s + static_cast<double>(copy_bytes) / hw.node.pcie.h2d_bw_bytes_per_s;
  const double adam_s = 1e8 / (2 * hw.node.cpu.adam_elements_per_s_per_core);
  ASSERT_LT(copy_s, compute_s);
  ASSERT_LT(adam_s, compute_s);
  for (const bool shared : {false, true}) {
    hw.node.gpu.shares_host_cores = shared;
    Builder b;
    b.Resource("gpu0.compute", "gpu0");
    b.Resource("gpu0.h2d", "gpu0");
    b.Task("x", Op::kCompute, "gpu0.compute", 0).flops = compute_s * hw.node.gpu.peak_flops * hw.node.gpu.compute_efficiency;
    b.Task("c", Op::kH2D, "gpu0.h2d", copy_bytes);
    SimResult r = MustSimulate(b.s, hw);
    EXPECT_REL(Find(r, "c").end_s, shared ? 1.5 * copy_s : copy_s) << shared;
    EXPECT_REL(Find(r, "x").end_s, shared ? compute_s + 0.5 * copy_s : compute_s) << shared;

    Builder o;
    o.Resource("gpu0.compute", "gpu0");
    o.Resource("cpu.optimizer", "host");
    o.Task("x", Op::kCompute, "gpu0.compute", 0).flops = compute_s * hw.node.gpu.peak_flops * hw.node.gpu.compute_efficiency;
    o.Task("adam", Op::kOptimizer, "cpu.optimizer", 400'000'000).ranks = 2;
    SimResult q = MustSimulate(o.s, hw);
    EXPECT_REL(Find(q, "adam").end_s, shared ? 2 * adam_s : adam_s) << shared;
    EXPECT_REL(Find(q, "x").end_s, shared ? compute_s + adam_s : compute_s) << shared;
  }
}

// The engine times an exec without SimGrid when its host can never run more threads than it
// has cores (TaskPlan::alone); otherwise SimGrid shares the host. Two computes of 1 s each on one
// GPU: one resource of concurrency 1 runs them one after the other (alone: ends at 1 s and 2 s);
// of concurrency 2, or two resources on that GPU, they share it (both end at 2 s). Two optimizer
// tasks of 8 threads each on 16 cores run at their full rate; on 8 cores, at half. A delay
// before an exec alone (cpu.task_overhead) still comes first.
TEST(SimTest, ExecsShareTheirHostOnlyWhenItsResourcesCanOutnumberItsCores) {
  auto hw = TestHardware();
  const double compute_s = 1.0;
  const double flops = compute_s * hw.node.gpu.peak_flops * hw.node.gpu.compute_efficiency;
  struct Case {
    int32_t concurrency;
    bool two_resources;
    double x_end, y_end;
    int64_t activities;  // SimGrid activities: none when the execs are timed alone
  };
  for (const Case& c : {Case{1, false, 1.0, 2.0, 0}, Case{2, false, 2.0, 2.0, 2}, Case{1, true, 2.0, 2.0, 2}}) {
    Builder b;
    b.Resource("gpu0.compute", "gpu0", c.concurrency);
    b.Resource("gpu0.side", "gpu0");
    b.Task("x", Op::kCompute, "gpu0.compute", 0).flops = flops;
    b.Task("y", Op::kCompute, c.two_resources ? "gpu0.side" : "gpu0.compute", 0).flops = flops;
    SimResult r = MustSimulate(b.s, hw);
    EXPECT_REL(Find(r, "x").end_s, c.x_end) << c.concurrency << c.two_resources;
    EXPECT_REL(Find(r, "y").end_s, c.y_end) << c.concurrency << c.two_resources;
    EXPECT_EQ(r.activities, c.activities) << c.concurrency << c.two_resources;
  }
  const double adam_s = 1e8 / (8 * hw.node.cpu.adam_elements_per_s_per_core);
  for (const int32_t cores : {16, 8}) {
    hw.node.cpu.cores = cores;
    Builder b;
    b.Resource("cpu.r0", "host");
    b.Resource("cpu.r1", "host");
    b.Task("a0", Op::kOptimizer, "cpu.r0", 400'000'000).ranks = 8;
    b.Task("a1", Op::kOptimizer, "cpu.r1", 400'000'000).ranks = 8;
    SimResult r = MustSimulate(b.s, hw);
    EXPECT_REL(Find(r, "a0").end_s, cores == 16 ? adam_s : 2 * adam_s) << cores;
    EXPECT_REL(Find(r, "a1").end_s, cores == 16 ? adam_s : 2 * adam_s) << cores;
    EXPECT_EQ(r.activities, cores == 16 ? 0 : 2) << cores;
  }
  hw.node.cpu.task_overhead_s = 1e-3;
  Builder b;
  b.Resource("gpu0.compute", "gpu0");
  b.Resource("cpu.r0", "host");
  b.Task("x", Op::kCompute, "gpu0.compute", 0).flops = flops;
  b.Task("a", Op::kOptimizer, "cpu.r0", 400'000'000).ranks = 8;
  b.Task("y", Op::kCompute, "gpu0.compute", 0, {"x", "a"}).flops = flops;
  SimResult r = MustSimulate(b.s, hw);
  EXPECT_REL(Find(r, "x").end_s, 1e-3 + compute_s);
  EXPECT_REL(Find(r, "a").end_s, 1e-3 + adam_s);
  EXPECT_REL(Find(r, "y").end_s, 2e-3 + 2 * compute_s);
  EXPECT_EQ(r.activities, 0) << "a delay before an exec alone is a timer too";
}

// A d2h into bf16 gradients narrows fp32 ones on the way: it takes the measured narrowing rate
// (pcie.d2h_bf16_bw), on an emulated GPU with every core of the node; one that does not, the
// plain copy's; with no narrowing rate measured, a narrowing d2h is a plain one.
TEST(SimTest, ANarrowingD2HTakesTheNarrowingRate) {
  auto hw = TestHardware();
  hw.node.cpu.cores = 2;
  const int64_t bytes = 64 * kMiB;
  const auto& p = hw.node.pcie;
  for (const bool shared : {false, true}) {
    for (const double narrow_bw : {0.0, p.d2h_bw_bytes_per_s / 4}) {
      hw.node.gpu.shares_host_cores = shared;
      hw.node.pcie.d2h_bf16_bw_bytes_per_s = narrow_bw;
      Builder b;
      b.Resource("gpu0.d2h", "gpu0");
      b.Resource("gpu0.compute", "gpu0");
      const int32_t grad16 = b.s.AddTensor({"g16", StateKind::kGrad16, "bf16", {bytes / 2}, 0, b.s.FindDevice("host"), 0, bytes, 0});
      const int32_t grad32 = b.s.AddTensor({"g32", StateKind::kGrad, "fp32", {bytes / 4}, 0, b.s.FindDevice("host"), bytes, bytes, 0});
      b.Task("narrow", Op::kD2H, "gpu0.d2h", bytes).tensors = {grad16};
      b.Task("plain", Op::kD2H, "gpu0.d2h", bytes, {"narrow"}).tensors = {grad32};
      const double narrow_s = p.latency_s + static_cast<double>(bytes) / (narrow_bw > 0 ? narrow_bw : p.d2h_bw_bytes_per_s);
      const double plain_s = p.latency_s + static_cast<double>(bytes) / p.d2h_bw_bytes_per_s;
      SimResult r = MustSimulate(b.s, hw);
      EXPECT_REL(Find(r, "narrow").end_s, narrow_s) << shared << " " << narrow_bw;
      EXPECT_REL(Find(r, "plain").end_s - Find(r, "plain").start_s, plain_s) << shared << " " << narrow_bw;
    }
  }
  // On the emulated GPU the narrowing runs on both cores: beside a two-thread compute it gets
  // half of them (2 threads of 4), where a one-thread plain copy would get a third.
  hw.node.gpu.shares_host_cores = true;
  hw.node.pcie.d2h_bf16_bw_bytes_per_s = p.d2h_bw_bytes_per_s / 4;
  Builder b;
  b.Resource("gpu0.d2h", "gpu0");
  b.Resource("gpu0.compute", "gpu0");
  const int32_t grad16 = b.s.AddTensor({"g16", StateKind::kGrad16, "bf16", {bytes / 2}, 0, b.s.FindDevice("host"), 0, bytes, 0});
  b.Task("narrow", Op::kD2H, "gpu0.d2h", bytes).tensors = {grad16};
  const double narrow_s = p.latency_s + static_cast<double>(bytes) / p.d2h_bf16_bw_bytes_per_s;
  b.Task("x", Op::kCompute, "gpu0.compute", 0).flops = 10 * narrow_s * hw.node.gpu.peak_flops * hw.node.gpu.compute_efficiency;
  SimResult r = MustSimulate(b.s, hw);
  EXPECT_REL(Find(r, "narrow").end_s, 2 * narrow_s);
}

// The executor hands every task but reads and writes to a worker and is told back
// (cpu.task_overhead): a delay before each, which uses no resource, so two tasks on different
// resources wait it out at once.
TEST(SimTest, TheTaskOverheadDelaysEveryTaskButReadsAndWrites) {
  auto hw = TestHardware();
  const double overhead = 1e-3;
  const double compute_s = 0.25;
  const int64_t copy_bytes = 64 * kMiB, io_bytes = 64 * kMiB;
  const auto& p = hw.node.pcie;
  const auto& d = hw.node.nvme[0];
  const double copy_s = p.latency_s + static_cast<double>(copy_bytes) / p.h2d_bw_bytes_per_s;
  const double io_s = d.read_latency_s + static_cast<double>(io_bytes) / models::DiskReadBandwidth(d, 0, 0);
  for (const double delay : {0.0, overhead}) {
    hw.node.cpu.task_overhead_s = delay;
    Builder b;
    b.Resource("gpu0.compute", "gpu0");
    b.Resource("gpu0.h2d", "gpu0");
    b.Resource("nvme0.read", "nvme0");
    b.Task("x", Op::kCompute, "gpu0.compute", 0).flops = compute_s * hw.node.gpu.peak_flops * hw.node.gpu.compute_efficiency;
    b.Task("c", Op::kH2D, "gpu0.h2d", copy_bytes);
    b.Task("r", Op::kRead, "nvme0.read", io_bytes);
    b.Task("y", Op::kCompute, "gpu0.compute", 0, {"x", "c"}).flops = compute_s * hw.node.gpu.peak_flops * hw.node.gpu.compute_efficiency;
    SimResult r = MustSimulate(b.s, hw);
    EXPECT_REL(Find(r, "x").end_s, delay + compute_s) << delay;
    EXPECT_REL(Find(r, "c").end_s, delay + copy_s) << delay;
    EXPECT_REL(Find(r, "r").end_s, io_s) << "a read is submitted by the dispatch thread itself";
    EXPECT_REL(Find(r, "y").end_s, 2 * delay + 2 * compute_s) << delay;
  }
}

// The I/O path's CPU (cpu.io_read_cores): a read keeps its class's cores busy while it runs,
// ahead of user threads, so a compute on every core of an emulated GPU beside it runs at
// (cores - f) / cores, and the read itself keeps its pace; a class's load counts from the
// measured class nearest to the stream's (block, depth).
TEST(SimTest, TheIoPathsCpuSlowsComputeBesideAReadButNotTheRead) {
  auto hw = TestHardware();
  hw.node.cpu.cores = 2;
  hw.node.gpu.shares_host_cores = true;
  const auto& d = hw.node.nvme[0];
  const int64_t block = kMiB, bytes = 64 * kMiB;
  const int32_t depth = 8;
  const double transfer_s = static_cast<double>(bytes) / models::DiskReadBandwidth(d, block, depth);
  const double compute_s = 4 * transfer_s;
  for (const double f : {0.0, 0.5, 1.0}) {
    // Measured at 2 MiB x 8 and 16 KiB x 1: the 1 MiB x 8 stream is nearer the first.
    hw.node.cpu.io_read_cores = {{16 * 1024, 1, 0.9}, {2 * kMiB, 8, f}};
    Builder b;
    b.Resource("gpu0.compute", "gpu0");
    b.Resource("nvme0.read", "nvme0");
    b.Task("x", Op::kCompute, "gpu0.compute", 0).flops = compute_s * hw.node.gpu.peak_flops * hw.node.gpu.compute_efficiency;
    TaskSpec& r = b.Task("r", Op::kRead, "nvme0.read", bytes);
    r.block_bytes = block;
    r.queue_depth = depth;
    SimResult res = MustSimulate(b.s, hw);
    EXPECT_REL(Find(res, "r").end_s, d.read_latency_s + transfer_s) << f;
    EXPECT_REL(Find(res, "x").end_s, compute_s + f / 2 * transfer_s) << f << " of the compute's two cores, for the transfer";
  }
}

// What compute on every core takes from a stream (cpu.io_read_beside_compute): while the compute
// holds the node's cores a read keeps its class's share of its rate (the nearest measured class),
// and its full rate once the compute has ended. Compute on a GPU holds no core.
TEST(SimTest, AStreamBesideComputeOnEveryCoreKeepsItsClassShareOfItsRate) {
  auto hw = TestHardware();
  hw.node.cpu.cores = 2;
  hw.node.cpu.io_read_beside_compute = {{16 * 1024, 1, 0.9}, {2 * kMiB, 8, 0.5}};
  const auto& d = hw.node.nvme[0];
  const int64_t block = kMiB, bytes = 64 * kMiB;
  const int32_t depth = 8;
  const double lat = d.read_latency_s;
  const double transfer_s = static_cast<double>(bytes) / models::DiskReadBandwidth(d, block, depth);
  const double compute_s = transfer_s / 2;
  for (const bool on_cores : {true, false}) {
    hw.node.gpu.shares_host_cores = on_cores;
    Builder b;
    b.Resource("gpu0.compute", "gpu0");
    b.Resource("nvme0.read", "nvme0");
    b.Task("x", Op::kCompute, "gpu0.compute", 0).flops = compute_s * hw.node.gpu.peak_flops * hw.node.gpu.compute_efficiency;
    TaskSpec& r = b.Task("r", Op::kRead, "nvme0.read", bytes);
    r.block_bytes = block;
    r.queue_depth = depth;
    SimResult res = MustSimulate(b.s, hw);
    EXPECT_REL(Find(res, "x").end_s, compute_s) << on_cores;
    // From its latency to the compute's end at half its rate, then at its rate: the half it did
    // not move then, (compute_s - lat) / 2 of its time alone, comes after.
    EXPECT_REL(Find(res, "r").end_s, on_cores ? lat + transfer_s + (compute_s - lat) / 2 : lat + transfer_s) << on_cores;
  }
}

// One device's I/O path serves its streams together: two reads of one class (one core alone)
// splitting the disk keep one core busy, not two, and once the shorter has ended the other keeps
// the whole core for the rest of its bytes.
TEST(SimTest, TwoStreamsSharingADiskLoadTheCoresAsOneDoes) {
  auto hw = TestHardware();
  hw.node.cpu.cores = 2;
  hw.node.gpu.shares_host_cores = true;
  hw.node.cpu.io_read_cores = {{kMiB, 8, 1.0}};
  const auto& d = hw.node.nvme[0];
  const int64_t bytes = 64 * kMiB;
  ASSERT_EQ(models::DiskReadBandwidth(d, kMiB, 8), d.read_bw_bytes_per_s) << "each stream alone fills the disk";
  const double t = static_cast<double>(bytes) / d.read_bw_bytes_per_s;  // one stream alone
  const double lat = d.read_latency_s;
  Builder b;
  b.Resource("gpu0.compute", "gpu0");
  b.Resource("nvme0.read", "nvme0", 2);
  // Compute of t core-seconds on both cores, beside the reads from their start.
  b.Task("x", Op::kCompute, "gpu0.compute", 0).flops = t / 2 * hw.node.gpu.peak_flops * hw.node.gpu.compute_efficiency;
  for (const auto& [id, n] : {std::pair{"a", 2 * bytes}, std::pair{"b", bytes}}) {
    TaskSpec& r = b.Task(id, Op::kRead, "nvme0.read", n);
    r.block_bytes = kMiB;
    r.queue_depth = 8;
  }
  SimResult res = MustSimulate(b.s, hw);
  // Half the disk each until b has moved its bytes, then a alone.
  EXPECT_REL(Find(res, "b").end_s, lat + 2 * t);
  EXPECT_REL(Find(res, "a").end_s, lat + 3 * t);
  // Both cores until the reads begin, then one: half a core each, then a's one. Each load at its
  // full core from the start would leave the compute none until b's load ended (at lat + t), and
  // the compute would end at 2 t - lat.
  EXPECT_REL(Find(res, "x").end_s, t - lat);
  EXPECT_EQ(res.disk_sharing_mismatches, 0);
}

// A read and a write that each keep their own rate on the device (shallow 16 KiB requests, far
// below its capacity). Through one disk entry's ring they load the cores by the larger of their
// class figures, not the sum; the write on a second entry, a directory on the same device
// (same_device_as), runs through a ring of its own, as the executor's, and the two loads add. Each
// stream keeps its pace either way.
TEST(SimTest, StreamsThroughOneRingLoadTheCoresByTheBusiestClassThroughTwoByBoth) {
  for (const bool two_rings : {false, true}) {
    SCOPED_TRACE(two_rings ? "the write on a second entry of the device" : "both on one entry");
    auto hw = TestHardware();
    hw.node.cpu.cores = 2;
    hw.node.gpu.shares_host_cores = true;
    hw.node.cpu.io_read_cores = {{16 * 1024, 1, 0.8}};
    hw.node.cpu.io_write_cores = {{16 * 1024, 1, 0.6}};
    hw.node.nvme.push_back(hw.node.nvme[0]);
    hw.node.nvme[1].same_device_as = 0;
    const auto& d = hw.node.nvme[0];
    const int64_t block = 16 * 1024, bytes = 64 * kMiB;
    const double read_bw = models::DiskReadBandwidth(d, block, 1), write_bw = models::DiskWriteBandwidth(d, block, 1);
    ASSERT_LT(read_bw + write_bw, models::DiskSharedCapacity(d, 1, 1)) << "each keeps its own rate";
    const double lat_r = d.read_latency_s, lat_w = d.write_latency_s;
    ASSERT_LT(lat_w, lat_r);
    // Compute on both cores: both until the write begins, then 2 - 0.6 until the read does, then
    // for `x` while both flow 2 - 0.8 (one ring) or 2 - 1.4 (two).
    const double x = 0.01, both = two_rings ? 0.6 : 1.2;
    ASSERT_LT(lat_r + x, static_cast<double>(bytes) / write_bw) << "both still flow when the compute ends";
    const double work = 2 * lat_w + 1.4 * (lat_r - lat_w) + both * x;  // core-seconds
    const std::string writes = two_rings ? "nvme1" : "nvme0";
    Builder b;
    b.Resource("gpu0.compute", "gpu0");
    b.Resource("nvme0.read", "nvme0");
    b.Resource(writes + ".write", writes);
    b.Task("c", Op::kCompute, "gpu0.compute", 0).flops = work / 2 * hw.node.gpu.peak_flops * hw.node.gpu.compute_efficiency;
    for (const auto& [id, op] : {std::pair{"r", Op::kRead}, std::pair{"w", Op::kWrite}}) {
      TaskSpec& t = b.Task(id, op, op == Op::kRead ? "nvme0.read" : writes + ".write", bytes);
      t.block_bytes = block;
      t.queue_depth = 1;
    }
    SimResult res = MustSimulate(b.s, hw);
    EXPECT_REL(Find(res, "c").end_s, lat_r + x) << "the other rule would leave the compute " << 2 - (two_rings ? 0.8 : 1.4) << " cores";
    EXPECT_REL(Find(res, "r").end_s, lat_r + static_cast<double>(bytes) / read_bw);
    EXPECT_REL(Find(res, "w").end_s, lat_w + static_cast<double>(bytes) / write_bw);
    EXPECT_EQ(res.disk_sharing_mismatches, 0);
  }
}

// A hand-over's load on the cores (cpu.task_overhead_cpu) runs from the task's launch, beside its
// delay, at most one core and ahead of user threads: a chain of copies handed over beside an
// optimizer on every core slows it by what the hand-overs take (a real GPU's copies cross PCIe:
// their hand-overs are all they take from the cores).
TEST(SimTest, TheHandOversLoadSlowsWorkOnTheCoresBesideIt) {
  auto hw = TestHardware();
  hw.node.cpu.cores = 2;
  const double delay = 40e-6;
  hw.node.cpu.task_overhead_s = delay;
  const int copies = 20;
  const int64_t copy_bytes = 4096, adam_bytes = 4 * 1000000;
  const double copy_s = hw.node.pcie.latency_s + static_cast<double>(copy_bytes) / hw.node.pcie.h2d_bw_bytes_per_s;
  const double adam_s = models::AdamTime(hw.node.cpu, adam_bytes / 4, 2);
  ASSERT_GT(adam_s, copies * 2 * delay) << "the optimizer outlasts the chain";
  for (const double cpu_s : {0.0, 20e-6, 60e-6}) {
    hw.node.cpu.task_overhead_cpu_s = cpu_s;
    Builder b;
    b.Resource("cpu.optimizer", "host");
    b.Resource("gpu0.h2d", "gpu0");
    b.Task("adam", Op::kOptimizer, "cpu.optimizer", adam_bytes);
    std::string prev;
    for (int i = 0; i < copies; ++i) {
      const std::string id = "c" + std::to_string(i);
      b.Task(id, Op::kH2D, "gpu0.h2d", copy_bytes, prev.empty() ? std::vector<std::string>{} : std::vector<std::string>{prev});
      prev = id;
    }
    SimResult r = MustSimulate(b.s, hw);
    // A copy ends when its transfer (after the delay) and its hand-over's load (cpu_s at
    // min(1, cpu_s / delay) cores) both have.
    const double step = std::max(delay + copy_s, std::max(delay, cpu_s));
    EXPECT_REL(Find(r, "c0").end_s, step) << cpu_s;
    EXPECT_REL(Find(r, "c" + std::to_string(copies - 1)).end_s, copies * step) << cpu_s;
    // The optimizer begins after its own delay; the first copy's hand-over runs beside that
    // delay (beside it too, its own: together they hold both cores until max(delay, cpu_s)),
    // and each later one takes cpu_s of its two cores while it runs.
    const double late_start = std::max(0.0, cpu_s - delay);  // both cores held past the delay
    const double lost = (copies - 1) * cpu_s / 2 + late_start;
    EXPECT_REL(Find(r, "adam").end_s, delay + adam_s + lost) << cpu_s;
  }
}

// An update on the GPU (an optimizer task on gpu0's compute resource) streams its states at the
// card's measured update rate (gpu.adam_bw; hbm_bw where none was measured) and holds the GPU:
// a compute after it on the same resource starts when it ends; beside it, the CPU's update of
// another sub-group runs on the host's cores as ever. On an emulated GPU it is the CPU's AdamW.
TEST(SimTest, AnUpdateOnTheGpuStreamsAtTheCardsUpdateRate) {
  const int64_t adam_bytes = 4 * 10000000;  // 10^7 elements
  for (const double adam_bw : {0.0, 1.5e12}) {
    auto hw = TestHardware();
    hw.node.gpu.adam_bw_bytes_per_s = adam_bw;
    const double rate = adam_bw > 0 ? adam_bw : hw.node.gpu.hbm_bw_bytes_per_s;
    const double gpu_s = hw.node.gpu.kernel_overhead_s + 1e7 * models::kGpuAdamBytesPerElement / rate;
    EXPECT_REL(models::GpuAdamTime(hw.node.gpu, 10000000), gpu_s);
    Builder b;
    b.Resource("gpu0.compute", "gpu0");
    b.Resource("cpu.optimizer", "host");
    b.Task("adam.gpu", Op::kOptimizer, "gpu0.compute", adam_bytes);
    b.Task("adam.cpu", Op::kOptimizer, "cpu.optimizer", adam_bytes);
    b.Task("c", Op::kCompute, "gpu0.compute", 0, {"adam.gpu"}).flops = 1e12;
    SimResult r = MustSimulate(b.s, hw);
    EXPECT_REL(Find(r, "adam.gpu").end_s, gpu_s) << adam_bw;
    EXPECT_REL(Find(r, "adam.cpu").end_s, models::AdamTime(hw.node.cpu, 10000000, hw.node.cpu.cores)) << "the host's update beside it";
    EXPECT_REL(Find(r, "c").start_s, gpu_s) << "the GPU is the update's while it runs";
  }
  auto emulated = TestHardware();
  emulated.node.gpu.shares_host_cores = true;
  Builder b;
  b.Resource("gpu0.compute", "gpu0");
  b.Task("adam.gpu", Op::kOptimizer, "gpu0.compute", adam_bytes);
  SimResult r = MustSimulate(b.s, emulated);
  EXPECT_REL(Find(r, "adam.gpu").end_s, models::AdamTime(emulated.node.cpu, 10000000, emulated.node.cpu.cores)) << "the CPU's AdamW";
}

// Streams whose I/O paths need more cores than the node has share them, and are held back.
TEST(SimTest, IoPathsThatNeedMoreThanTheCoresHoldTheirStreamsBack) {
  auto hw = TestHardware();
  hw.node.cpu.cores = 2;
  hw.node.nvme.resize(3, hw.node.nvme[0]);  // three devices: no stream slows another on a disk
  hw.node.cpu.io_read_cores = {{kMiB, 8, 1.0}};
  const auto& d = hw.node.nvme[0];
  const int64_t bytes = 64 * kMiB;
  const double transfer_s = static_cast<double>(bytes) / models::DiskReadBandwidth(d, kMiB, 8);
  Builder b;
  for (int i = 0; i < 3; ++i) {
    const std::string dev = "nvme" + std::to_string(i);
    b.Resource(dev + ".read", dev);
    TaskSpec& r = b.Task("r" + std::to_string(i), Op::kRead, dev + ".read", bytes);
    r.block_bytes = kMiB;
    r.queue_depth = 8;
  }
  SimResult res = MustSimulate(b.s, hw);
  // Three paths of one core each on two cores: each gets 2/3 of a core, so each read's path
  // needs 1.5x its transfer.
  for (int i = 0; i < 3; ++i) EXPECT_REL(Find(res, "r" + std::to_string(i)).end_s, d.read_latency_s + 1.5 * transfer_s) << i;
}

// Loads short of cores fall behind their streams, and a load re-bounded when its device's streams
// change keeps what it is behind. One core; on nvme0 reads a (2 S) and b (S), on nvme1 read c
// (4 S), each class one core alone, each read alone filling its disk (t = S at its rate):
// - until b's flow ends (2 t), a and b share nvme0 (half a core each), c has nvme1 (one), and the
//   three get a third of the core each: a and b fall t / 3 behind, c 4 t / 3;
// - then a has nvme0 alone (one core, its last S in t, plus its t / 3), b finishes its t / 3
//   (at 3 t, a third of the core each), and a's flow ends at 3 t too;
// - a's last t and c's 3 t share the core: a ends at 5 t, c at 7 t (7 t of work on one core).
TEST(SimTest, ALoadShortOfCoresKeepsWhatItIsBehindWhenItsDevicesStreamsChange) {
  auto hw = TestHardware();
  hw.node.cpu.cores = 1;
  hw.node.nvme.resize(2, hw.node.nvme[0]);
  hw.node.cpu.io_read_cores = {{kMiB, 8, 1.0}};
  const auto& d = hw.node.nvme[0];
  const int64_t s = 64 * kMiB;
  ASSERT_EQ(models::DiskReadBandwidth(d, kMiB, 8), d.read_bw_bytes_per_s);
  const double t = static_cast<double>(s) / d.read_bw_bytes_per_s, lat = d.read_latency_s;
  Builder b;
  b.Resource("nvme0.read", "nvme0", 2);
  b.Resource("nvme1.read", "nvme1");
  for (const auto& [id, dev, n] : {std::tuple{"a", "nvme0.read", 2 * s}, std::tuple{"b", "nvme0.read", s}, std::tuple{"c", "nvme1.read", 4 * s}}) {
    TaskSpec& r = b.Task(id, Op::kRead, dev, n);
    r.block_bytes = kMiB;
    r.queue_depth = 8;
  }
  SimResult res = MustSimulate(b.s, hw);
  EXPECT_REL(Find(res, "b").end_s, lat + 3 * t);
  EXPECT_REL(Find(res, "a").end_s, lat + 5 * t);
  EXPECT_REL(Find(res, "c").end_s, lat + 7 * t);
}

// ---- Clusters (hardware.nodes > 1) ----

models::HardwareSpec TestCluster(int32_t nodes, int32_t gpus_per_node) {
  auto hw = TestHardware();
  hw.nodes = nodes;
  hw.node.gpu_count = gpus_per_node;
  hw.node.interconnect = {"nvlink", 10e9, 1e-5};
  hw.node.nic_bw_bytes_per_s = 5e9;
  hw.node.nic_latency_s = 2e-5;
  return hw;
}

// A collective over ranks on two nodes: the ring within each node (its interconnect), then the
// ring between the nodes (their NICs), one after the other.
TEST(SimTest, CollectiveAcrossNodesTakesTheNodeLevelThenTheNetworkLevel) {
  const auto hw = TestCluster(2, 2);
  const auto& ic = hw.node.interconnect;
  const double nic = hw.node.nic_bw_bytes_per_s, nic_alpha = hw.node.nic_latency_s;
  const double bytes = 1e9;
  // Two ranks per node, two nodes: each ring has n - 1 = 1 step and moves (n - 1) / n = 1/2.
  const double intra = ic.latency_s + 0.5 * bytes / ic.bus_bw_bytes_per_s;
  const double inter = nic_alpha + 0.5 * bytes / nic;
  for (const Op op : {Op::kAllReduce, Op::kAllGather, Op::kReduceScatter}) {
    Builder one;
    one.Resource("dp.comm", "net");
    one.Task("c", op, "dp.comm", static_cast<int64_t>(bytes)).ranks = 4;
    SimResult r = MustSimulate(one.s, hw);
    const double passes = op == Op::kAllReduce ? 2 : 1;
    EXPECT_REL(Find(r, "c").end_s, passes * (intra + inter)) << OpName(op);
    EXPECT_EQ(Find(r, "c").threads, 4) << "collective records carry the rank count";
    const models::Collective kind = op == Op::kAllReduce   ? models::Collective::kAllReduce
                                    : op == Op::kAllGather ? models::Collective::kAllGather
                                                           : models::Collective::kReduceScatter;
    const models::ClusterCollective model = models::ClusterCollectiveTime(hw, kind, static_cast<int64_t>(bytes), 4);
    EXPECT_EQ(model.nodes, 2);
    EXPECT_EQ(model.ranks_per_node, 2);
    EXPECT_REL(model.intra_s + model.inter_s, passes * (intra + inter)) << OpName(op);
  }
  // Ranks that fit one node never cross the NICs.
  Builder local;
  local.Resource("dp.comm", "net");
  local.Task("ar", Op::kAllReduce, "dp.comm", static_cast<int64_t>(bytes)).ranks = 2;
  EXPECT_REL(Find(MustSimulate(local.s, hw), "ar").end_s, 2 * intra);
}

// A collective of one rank in all takes its library's local copy, bytes / interconnect.local_bw,
// and nothing without local_bw; its record carries the one rank.
TEST(SimTest, OneRankCollectiveTakesTheLocalCopy) {
  auto hw = TestCluster(1, 2);
  const double bytes = 1e9;
  for (const double local_bw : {0.0, 2e9}) {
    hw.node.interconnect.local_bw_bytes_per_s = local_bw;
    Builder one;
    one.Resource("dp.comm", "net");
    one.Task("rs", Op::kReduceScatter, "dp.comm", static_cast<int64_t>(bytes)).ranks = 1;
    SimResult r = MustSimulate(one.s, hw);
    EXPECT_REL(Find(r, "rs").end_s - Find(r, "rs").start_s, local_bw > 0 ? bytes / local_bw : 0.0) << local_bw;
    if (local_bw > 0) {
      EXPECT_EQ(Find(r, "rs").threads, 1);
    }
  }
}

// A node's NIC carries its remote-tier traffic and its share of collectives between nodes: a
// remote read on node 1 halves what node 1's NIC gives the collective, and the collective ends
// when its slowest node does.
TEST(SimTest, CollectivesBetweenNodesShareTheNicWithTheRemoteTier) {
  auto hw = TestCluster(2, 1);
  hw.node.nic_bw_bytes_per_s = 2e9;
  hw.node.nic_latency_s = 0;
  hw.node.remote.push_back({"pfs", 4e9, 4e9, 0.0});
  const double nic = hw.node.nic_bw_bytes_per_s;
  Builder b(std::vector<std::string>{});
  b.Resource("dp.comm", "net");
  b.Resource("node1.remote0.read", "node1.remote0");
  const double gather = 4e9, read = 2e9;
  b.Task("ag", Op::kAllGather, "dp.comm", static_cast<int64_t>(gather)).ranks = 2;  // one rank per node
  b.Task("rd", Op::kRead, "node1.remote0.read", static_cast<int64_t>(read));
  SimResult r = MustSimulate(b.s, hw);
  const double per_nic = 0.5 * gather;  // (n - 1) / n of the message through each node's NIC
  ASSERT_EQ(per_nic, read);             // so both flows on node 1's NIC end together
  EXPECT_REL(Find(r, "ag").end_s, per_nic / (nic / 2));
  EXPECT_REL(Find(r, "rd").end_s, read / (nic / 2));
  Builder alone(std::vector<std::string>{});
  alone.Resource("dp.comm", "net");
  alone.Task("ag", Op::kAllGather, "dp.comm", static_cast<int64_t>(gather)).ranks = 2;
  EXPECT_REL(Find(MustSimulate(alone.s, hw), "ag").end_s, per_nic / nic);
}

// Each node has its own disks, PCIe and CPU: the same work on two nodes' disks and GPUs runs in
// parallel, where on one node's disk it shares it.
TEST(SimTest, EachNodeHasItsOwnDisksGpusAndCpu) {
  const auto hw = TestCluster(2, 2);
  const int64_t n = 512 * kMiB;
  Builder b;
  for (const std::string node : {"node0.", "node1."}) {
    b.Resource(node + "nvme0.read", node + "nvme0");
    b.Resource(node + "gpu1.h2d", node + "gpu1");
    b.Resource(node + "cpu", node + "host");
    b.Task(node + "read", Op::kRead, node + "nvme0.read", n);
    b.Task(node + "copy", Op::kH2D, node + "gpu1.h2d", n);
    b.Task(node + "adam", Op::kOptimizer, node + "cpu", 400'000'000).ranks = 16;
  }
  SimResult r = MustSimulate(b.s, hw);
  const auto& d = hw.node.nvme[0];
  const auto& p = hw.node.pcie;
  const double read = n / StreamBandwidth(d.read_bw_bytes_per_s, d.read_latency_s, kMiB, 8) + d.read_latency_s;
  const double adam = 1e8 / std::min(16 * hw.node.cpu.adam_elements_per_s_per_core, hw.node.cpu.memory_bw_bytes_per_s / 28.0);
  for (const std::string node : {"node0.", "node1."}) {
    EXPECT_REL(Find(r, node + "read").end_s, read) << node;
    EXPECT_REL(Find(r, node + "copy").end_s, p.latency_s + n / p.h2d_bw_bytes_per_s) << node;
    EXPECT_REL(Find(r, node + "adam").end_s, adam) << node;
  }
}

TEST(SimTest, DeviceOfANodeTheClusterDoesNotHaveIsAnInvalidArgumentNamingIt) {
  const auto hw = TestCluster(2, 2);
  for (const char* device : {"node2.nvme0", "node1.gpu2", "node1.nvme1", "nodeX.gpu0", "node01.gpu0"}) {
    Builder b;
    b.Device(device);
    auto r = Simulate(b.s, hw, SimOptions{});
    ASSERT_FALSE(r.ok()) << device;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << device;
    EXPECT_NE(r.status().message().find(device), std::string::npos) << r.status().message();
  }
  Builder c;
  c.Resource("dp.comm", "net");
  c.Task("ar", Op::kAllReduce, "dp.comm", 1 << 20).ranks = 5;
  auto r = Simulate(c.s, hw, SimOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("5 ranks, more than the 4 GPUs"), std::string::npos) << r.status().message();
}

// k steps of read -> compute with two buffers: fill + (k - 1) x max(read, compute) + drain.
void CheckPipeline(double compute_flops) {
  const auto hw = TestHardware();
  Builder b;
  b.Resource("nvme0.read", "nvme0");
  b.Resource("gpu0.compute", "gpu0");
  const int64_t n = 256 * kMiB;
  b.Pool("host.pinned", 2 * n);
  const int k = 6;
  for (int i = 0; i < k; ++i) {
    const std::string si = std::to_string(i);
    const int32_t buf = b.Buffer("buf" + si, "host.pinned", n);
    b.Task("read" + si, Op::kRead, "nvme0.read", n).allocs = {buf};
    TaskSpec& c = b.Task("fwd" + si, Op::kCompute, "gpu0.compute", 0, {"read" + si});
    c.flops = compute_flops;
    c.uses = {buf};
    c.frees = {buf};
  }
  SimResult r = MustSimulate(b.s, hw);
  const auto& d = hw.node.nvme[0];
  const double read = n / StreamBandwidth(d.read_bw_bytes_per_s, d.read_latency_s, kMiB, 8) + d.read_latency_s;
  const double compute = compute_flops / (hw.node.gpu.peak_flops * hw.node.gpu.compute_efficiency);
  EXPECT_REL(r.makespan_s, read + (k - 1) * std::max(read, compute) + compute);
  ASSERT_EQ(r.pool_peak_bytes.size(), 1u);
  EXPECT_EQ(r.pool_peak_bytes[0], 2 * n);
}

TEST(SimTest, PipelineBoundByReads) { CheckPipeline(2e12); }
TEST(SimTest, PipelineBoundByCompute) { CheckPipeline(8e12); }

TEST(SimTest, PoolGatingDelaysATaskUntilAFree) {
  const auto hw = TestHardware();
  Builder b;
  b.Resource("nvme0.read", "nvme0");
  b.Resource("nvme0.read2", "nvme0");
  b.Resource("gpu0.compute", "gpu0");
  const int64_t n = 64 * kMiB;
  b.Pool("host.pinned", n);
  const int32_t a = b.Buffer("a", "host.pinned", n);
  const int32_t c = b.Buffer("c", "host.pinned", n);
  b.Task("ra", Op::kRead, "nvme0.read", n).allocs = {a};
  TaskSpec& x = b.Task("xa", Op::kCompute, "gpu0.compute", 0, {"ra"});
  x.flops = 1e12;
  x.uses = {a};
  x.frees = {a};
  TaskSpec& rc = b.Task("rc", Op::kRead, "nvme0.read2", n);  // independent, but needs the pool
  rc.allocs = {c};
  b.Task("fc", Op::kFree, "", 0, {"rc"}).frees = {c};
  SimResult r = MustSimulate(b.s, hw);
  EXPECT_EQ(Find(r, "ra").start_s, 0.0);
  EXPECT_EQ(Find(r, "rc").start_s, Find(r, "xa").end_s);
  EXPECT_GT(Find(r, "rc").start_s, 0.0);
}

TEST(SimTest, PoolTooSmallIsADeadlockNamingThePool) {
  const auto hw = TestHardware();
  Builder b;
  b.Resource("nvme0.read", "nvme0");
  const int64_t n = 64 * kMiB;
  b.Pool("host.pinned", n + n / 2);
  const int32_t x = b.Buffer("x", "host.pinned", n);
  const int32_t y = b.Buffer("y", "host.pinned", n);
  // Each task holds one buffer, but y is read while x is held: x is freed only after y's read.
  b.Task("rx", Op::kRead, "nvme0.read", n).allocs = {x};
  b.Task("ry", Op::kRead, "nvme0.read", n, {"rx"}).allocs = {y};
  b.Task("fx", Op::kFree, "", 0, {"ry"}).frees = {x};
  b.Task("fy", Op::kFree, "", 0, {"fx"}).frees = {y};
  ASSERT_TRUE(b.s.Validate().ok());
  SimOptions o;
  auto r = Simulate(b.s, hw, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlock) << r.status().ToString();
  EXPECT_NE(r.status().message().find("host.pinned"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("short by " + std::to_string(n / 2) + " bytes"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("task 'ry' (iteration 0) waits for pool 'host.pinned'"), std::string::npos)
      << r.status().message();
}

TEST(SimTest, CarriedDepOrdersIterations) {
  const auto hw = TestHardware();
  Builder b;
  b.Resource("nvme0.read", "nvme0");
  b.Resource("nvme0.write", "nvme0");
  b.Resource("gpu0.compute", "gpu0");
  const int64_t n = 128 * kMiB;
  b.Task("r", Op::kRead, "nvme0.read", n);
  b.Task("x", Op::kCompute, "gpu0.compute", 0, {"r"}).flops = 1e12;
  b.Task("w", Op::kWrite, "nvme0.write", n, {"x"});
  b.s.mutable_tasks()[0].carried = {{b.s.FindTask("w"), 1}};
  SimResult r = MustSimulate(b.s, hw, 3);
  ASSERT_EQ(r.records.size(), 9u);
  for (int it = 1; it < 3; ++it) EXPECT_EQ(Find(r, "r", it).start_s, Find(r, "w", it - 1).end_s);

  // Without the carried dep, the second read starts as soon as the first one ends.
  b.s.mutable_tasks()[0].carried.clear();
  SimResult free_running = MustSimulate(b.s, hw, 3);
  EXPECT_EQ(Find(free_running, "r", 1).start_s, Find(free_running, "r", 0).end_s);
  EXPECT_LT(free_running.makespan_s, r.makespan_s);
}

Schedule PipelineSchedule(int layers) {
  Builder b;
  b.Resource("nvme0.read", "nvme0", 2);
  b.Resource("nvme0.write", "nvme0", 2);
  b.Resource("gpu0.h2d", "gpu0");
  b.Resource("gpu0.d2h", "gpu0");
  b.Resource("gpu0.compute", "gpu0");
  const int64_t n = 16 * kMiB;
  b.Pool("host.pinned", 4 * n);
  for (int i = 0; i < layers; ++i) {
    const std::string s = std::to_string(i);
    const int32_t buf = b.Buffer("b" + s, "host.pinned", n);
    b.Task("read" + s, Op::kRead, "nvme0.read", n).allocs = {buf};
    b.Task("h2d" + s, Op::kH2D, "gpu0.h2d", n, {"read" + s}).uses = {buf};
    b.Task("fwd" + s, Op::kCompute, "gpu0.compute", n, {"h2d" + s}).flops = 2e11;
    b.Task("d2h" + s, Op::kD2H, "gpu0.d2h", n, {"fwd" + s}).uses = {buf};
    TaskSpec& w = b.Task("write" + s, Op::kWrite, "nvme0.write", n, {"d2h" + s});
    w.uses = {buf};
    w.frees = {buf};
  }
  return b.s;
}

TEST(SimTest, SimulatingTwiceGivesIdenticalResults) {
  const auto hw = TestHardware();
  const Schedule s = PipelineSchedule(50);
  SimResult a = MustSimulate(s, hw, 3);
  SimResult b = MustSimulate(s, hw, 3);
  ASSERT_EQ(a.records.size(), 750u);
  EXPECT_EQ(a.records, b.records);
  EXPECT_EQ(a.makespan_s, b.makespan_s);
  EXPECT_EQ(a.pool_peak_bytes, b.pool_peak_bytes);
  EXPECT_EQ(a.disk_sharing_mismatches, 0);
}

TEST(SimTest, WallTimeIsLinearInIterations) {
  const auto hw = TestHardware();
  const Schedule s = PipelineSchedule(200);  // 1000 tasks per iteration
  SimResult small = MustSimulate(s, hw, 5);
  SimResult large = MustSimulate(s, hw, 50);
  ASSERT_EQ(large.tasks_simulated, 50'000);
  const double per_task_small = small.wall_s / small.tasks_simulated;
  const double per_task_large = large.wall_s / large.tasks_simulated;
  std::printf("wall per task: %.2f us (5 iterations), %.2f us (50 iterations)\n", per_task_small * 1e6,
              per_task_large * 1e6);
  EXPECT_LT(per_task_large, 3 * per_task_small);
  EXPECT_REL(large.makespan_s / small.makespan_s, 10.0 * large.makespan_s / small.makespan_s / 10.0);
  EXPECT_GT(large.makespan_s, 9 * small.makespan_s);
}

TEST(SimTest, DeviceMissingOnTheHardwareIsAnInvalidArgumentNamingIt) {
  const auto hw = TestHardware();
  Builder b;
  b.Resource("nvme3.read", "nvme3");
  b.Task("r", Op::kRead, "nvme3.read", 1 << 20);
  auto r = Simulate(b.s, hw, SimOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("nvme3"), std::string::npos) << r.status().message();

  Builder c;
  c.Device("tpu0");
  auto r2 = Simulate(c.s, hw, SimOptions{});
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("tpu0"), std::string::npos) << r2.status().message();

  Builder g;
  g.Resource("gpu0.read", "gpu0");
  g.Task("r", Op::kRead, "gpu0.read", 1 << 20);
  auto r3 = Simulate(g.s, hw, SimOptions{});
  ASSERT_FALSE(r3.ok());
  EXPECT_EQ(r3.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r3.status().message().find("'r'"), std::string::npos) << r3.status().message();
}

TEST(SimTest, ProgressIsReportedAndTracesCanBeSkipped) {
  const auto hw = TestHardware();
  const Schedule s = PipelineSchedule(20);
  SimOptions o;
  o.iterations = 4;
  o.record_trace = false;
  int64_t last = 0, calls = 0;
  o.progress = [&](const SimProgress& p) {
    EXPECT_GE(p.instances_completed, last);
    last = p.instances_completed;
    EXPECT_EQ(p.instances_total, 400);
    ++calls;
  };
  auto r = Simulate(s, hw, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->records.empty());
  EXPECT_EQ(r->tasks_simulated, 400);
  EXPECT_EQ(last, 400);
  EXPECT_GE(calls, 10);
}

TEST(SimTest, SimGridFailureBecomesAStatus) {
  const auto hw = TestHardware();
  const Schedule s = PipelineSchedule(2);
  SimOptions o;
  o.simgrid_config = {"no/such-option:1"};
  auto r = Simulate(s, hw, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal) << r.status().ToString();
}

// In-process runs match forked ones, and a second in-process run is refused, not wrong. Runs in
// a child process (a death test) because it uses up this process's one SimGrid engine.
TEST(SimDeathTest, InProcessRunsOnceAndMatchesFork) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto hw = TestHardware();
  const Schedule s = PipelineSchedule(10);
  EXPECT_EXIT(
      {
        SimOptions fork_options;
        fork_options.iterations = 2;
        auto forked = Simulate(s, hw, fork_options);
        SimOptions in_options = fork_options;
        in_options.isolation = SimIsolation::kInProcess;
        auto first = Simulate(s, hw, in_options);
        auto second = Simulate(s, hw, in_options);
        const bool ok = forked.ok() && first.ok() && first->records == forked->records &&
                        !second.ok() && second.status().code() == StatusCode::kFailedPrecondition;
        std::_Exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace tierflow::sim
