#include "tierflow/real/disk_probe.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace tierflow::real {
namespace {

// A directory of this process's own under the temporary directory: two checkouts' tests at once
// do not share it.
std::filesystem::path ScratchDir(const std::string& name) {
  return std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
}

// A probe of one small file in `dir` (made here) on the posix back-end, one repetition per
// point and pass; each test sets its points and windows.
DiskProbeOptions SmallProbe(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  DiskProbeOptions o;
  o.dirs = {dir.string()};
  o.device_counts = {1};
  o.file_bytes = 16 << 20;
  o.repetitions = 1;
  o.backend = "posix";
  return o;
}

// Options that would measure nothing are refused before any file is made (--reps 0 segfaulted
// taking the median of no repetitions).
TEST(DiskProbeOptions, ZeroRepetitionsOrPassesOrAnEmptyWindowAreRefused) {
  DiskProbeOptions o;
  o.dirs = {std::filesystem::temp_directory_path().string()};
  EXPECT_TRUE(CheckDiskProbeOptions(o).ok()) << CheckDiskProbeOptions(o).ToString();
  o.repetitions = 0;
  EXPECT_EQ(CheckDiskProbeOptions(o).message(), "probe disk: --reps 0 must be at least 1");
  o.repetitions = 1;
  o.passes = 0;
  EXPECT_EQ(CheckDiskProbeOptions(o).message(), "probe disk: --passes 0 must be at least 1");
  o.passes = 1;
  o.duration_s = 0;
  EXPECT_FALSE(CheckDiskProbeOptions(o).ok());
}

TEST(DiskProbeOptions, ReaderAndWriterStreamCountsAreChecked) {
  DiskProbeOptions o;
  o.dirs = {std::filesystem::temp_directory_path().string()};
  o.ops = {"rw"};
  EXPECT_TRUE(CheckDiskProbeOptions(o).ok()) << CheckDiskProbeOptions(o).ToString();
  for (const auto& [readers, writers] : std::vector<std::pair<int32_t, int32_t>>{{0, 0}, {-1, 2}, {40, 40}}) {
    o.streams = {{1, 1}, {readers, writers}};
    const std::string pair = std::to_string(readers) + ":" + std::to_string(writers);
    EXPECT_EQ(CheckDiskProbeOptions(o).message(),
              "probe disk: streams " + pair + ": readers and writers must be >= 0, together 1..64");
  }
  o.streams.clear();
  EXPECT_EQ(CheckDiskProbeOptions(o).message(), "probe disk: op rw needs at least one readers:writers pair (--streams)");
  o.ops = {"read"};  // the counts matter to "rw" only
  EXPECT_TRUE(CheckDiskProbeOptions(o).ok());
}

// One reader and two writer streams at once on a real file: each direction's rate is measured
// and verified (#wrong counts reads whose pattern does not match), the window's records name the
// streams of each direction, and the point's rate is the two directions' sum.
TEST(DiskProbe, ReaderAndWriterStreamsAreMeasuredApart) {
  const std::filesystem::path dir = ScratchDir("tierflow-disk-probe-rw");
  DiskProbeOptions o = SmallProbe(dir);
  o.ops = {"rw"};
  o.streams = {{1, 2}};
  o.block_bytes = {64 << 10};
  o.queue_depths = {2};
  o.warmup_s = 0.02;
  o.duration_s = 0.1;
  std::vector<TraceRecord> trace;
  auto results = RunDiskProbe(o, &trace);
  ASSERT_TRUE(results.ok()) << results.status().ToString();
  ASSERT_EQ(results->size(), 1u);
  const DiskProbeResult& r = results->front();
  EXPECT_EQ(r.op, "rw");
  EXPECT_EQ(r.readers, 1);
  EXPECT_EQ(r.writers, 2);
  EXPECT_EQ(r.wrong, 0);
  EXPECT_GT(r.read_bytes_per_s, 0);
  EXPECT_GT(r.write_bytes_per_s, 0);
  EXPECT_DOUBLE_EQ(r.bytes_per_s, r.read_bytes_per_s + r.write_bytes_per_s);  // one repetition: no medians apart
  EXPECT_GT(r.sync_s, 0) << "its writer streams' bytes are synced before the probe goes on";
  ASSERT_EQ(trace.size(), 2u);
  for (const TraceRecord& t : trace) {
    EXPECT_EQ(t.task, "probe.disk.rw");
    EXPECT_EQ(t.queue_depth, 2);
    EXPECT_EQ(t.tasks, t.op == Op::kRead ? 1 : 2) << t.resource;
    EXPECT_EQ(t.resource, t.op == Op::kRead ? "nvme0.read" : "nvme0.write");
    EXPECT_GT(t.bytes, 0);
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "the probe file is removed";
  std::filesystem::remove_all(dir);
}

// Three passes over two points, the middle one backwards: every point gets one window per pass,
// numbered apart (pass * repetitions + repetition), the windows of a pass in its order, and the
// result of a point is the median of its three; progress hears of every pass of every point
// and gets the results only in the last pass; the results come back in sweep order.
TEST(DiskProbe, PassesSpreadAPointsWindowsOverTheSweep) {
  const std::filesystem::path dir = ScratchDir("tierflow-disk-probe-passes");
  DiskProbeOptions o = SmallProbe(dir);
  o.ops = {"read"};
  o.block_bytes = {64 << 10};
  o.queue_depths = {1, 2};
  o.warmup_s = 0.01;
  o.duration_s = 0.05;
  o.passes = 3;
  std::vector<TraceRecord> trace;
  std::vector<std::pair<int32_t, bool>> heard;  // (queue depth, final)
  auto results = RunDiskProbe(o, &trace, [&](const DiskProbeResult& r, bool final) { heard.emplace_back(r.queue_depth, final); });
  ASSERT_TRUE(results.ok()) << results.status().ToString();
  ASSERT_EQ(results->size(), 2u);
  EXPECT_EQ((*results)[0].queue_depth, 1);
  EXPECT_EQ((*results)[1].queue_depth, 2);
  const std::vector<std::pair<int32_t, bool>> want = {{0, false}, {0, false}, {0, false}, {0, false}, {1, true}, {2, true}};
  EXPECT_EQ(heard, want);
  // One read record per window: depth 1, 2 | 2, 1 | 1, 2, at iterations 0, 0 | 1, 1 | 2, 2.
  ASSERT_EQ(trace.size(), 6u);
  const std::vector<int32_t> depths = {1, 2, 2, 1, 1, 2};
  for (size_t i = 0; i < trace.size(); ++i) {
    EXPECT_EQ(trace[i].queue_depth, depths[i]) << i;
    EXPECT_EQ(trace[i].iteration, static_cast<int32_t>(i / 2)) << i;
    EXPECT_LE(trace[i].end_s, i + 1 < trace.size() ? trace[i + 1].start_s : trace[i].end_s) << "in pass order";
  }
  for (const DiskProbeResult& r : *results) {
    std::vector<double> rates;
    for (const TraceRecord& t : trace) {
      if (t.queue_depth == r.queue_depth) rates.push_back(static_cast<double>(t.bytes) / (t.end_s - t.start_s));
    }
    ASSERT_EQ(rates.size(), 3u);
    std::sort(rates.begin(), rates.end());
    EXPECT_DOUBLE_EQ(r.bytes_per_s, rates[1]) << "the median of the three passes";
    EXPECT_DOUBLE_EQ(r.bytes_per_s_min, rates[0]);
    EXPECT_DOUBLE_EQ(r.bytes_per_s_max, rates[2]);
    EXPECT_EQ(r.wrong, 0);
    EXPECT_EQ(r.sync_s, 0) << "a point that only read has nothing to sync";
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "the probe file is removed";
  std::filesystem::remove_all(dir);
}

// A point that wrote is synced after each of its passes (a sync that fails fails the probe,
// naming the file) and the time that took is reported; one that only read (op read, or rw with
// no writer stream) is not synced at all.
TEST(DiskProbe, PointsThatWroteAreSyncedAndReadOnlyOnesAreNot) {
  const std::filesystem::path dir = ScratchDir("tierflow-disk-probe-sync");
  DiskProbeOptions o = SmallProbe(dir);
  o.streams = {{2, 0}, {1, 1}};
  o.block_bytes = {64 << 10};
  o.queue_depths = {2};
  o.warmup_s = 0.01;
  o.duration_s = 0.03;
  o.passes = 2;
  o.ops = {"read", "write", "mix", "rw"};
  auto results = RunDiskProbe(o, nullptr);
  ASSERT_TRUE(results.ok()) << results.status().ToString();
  ASSERT_EQ(results->size(), 5u);
  for (const DiskProbeResult& r : *results) {
    const bool wrote = r.op == "write" || r.op == "mix" || (r.op == "rw" && r.writers > 0);
    const std::string point = r.op + " " + std::to_string(r.readers) + ":" + std::to_string(r.writers);
    if (wrote) {
      EXPECT_GT(r.sync_s, 0) << point;
    } else {
      EXPECT_EQ(r.sync_s, 0) << point;
    }
  }
  // Every sync of a measured point fails: the points that only read never sync, the others do.
  FaultRule failed_sync;
  failed_sync.ops = static_cast<uint32_t>(FaultOpMask::kSync);
  failed_sync.count = -1;
  o.faults = {failed_sync};
  o.ops = {"read", "rw"};
  o.streams = {{2, 0}};
  auto reads = RunDiskProbe(o, nullptr);
  EXPECT_TRUE(reads.ok()) << reads.status().ToString();
  for (const std::string op : {"write", "mix"}) {
    o.ops = {op};
    auto wrote = RunDiskProbe(o, nullptr);
    ASSERT_FALSE(wrote.ok()) << op;
    EXPECT_NE(wrote.status().message().find("fsync '" + ProbeFilePath(dir.string()) + "'"), std::string::npos)
        << op << ": " << wrote.status().ToString();
  }
  o.ops = {"rw"};
  o.streams = {{1, 1}};
  EXPECT_FALSE(RunDiskProbe(o, nullptr).ok()) << "a writer stream's bytes are synced too";
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "the probe file is removed after a failed sync too";
  std::filesystem::remove_all(dir);
}

TEST(IoScheduler, TheActiveOneIsTheBracketedName) {
  EXPECT_EQ(ActiveIoScheduler("none [mq-deadline] kyber bfq\n"), "mq-deadline");
  EXPECT_EQ(ActiveIoScheduler("[none] mq-deadline\n"), "none");
  EXPECT_EQ(ActiveIoScheduler("none\n"), "none");  // a device with no choice
  EXPECT_EQ(ActiveIoScheduler("none mq-deadline\n"), "");
  EXPECT_EQ(ActiveIoScheduler(""), "");
  EXPECT_EQ(ActiveIoScheduler("[mq-deadline"), "");
}

TEST(IoScheduler, OfADirectoryIsOneNameOrNothing) {
  EXPECT_EQ(IoSchedulerOf("/nonexistent/tierflow/dir"), "");
  EXPECT_EQ(IoSchedulerNote("nvme0", "/nonexistent/tierflow/dir"), "");  // nothing known, nothing said
  // Whatever this machine's disk uses (or "" on an overlay or tmpfs): a bare name.
  const std::string s = IoSchedulerOf(std::filesystem::temp_directory_path().string());
  EXPECT_EQ(s.find_first_of("[] \t\n"), std::string::npos) << s;
  const std::string note = IoSchedulerNote("nvme0", std::filesystem::temp_directory_path().string());
  EXPECT_EQ(note.empty(), s.empty() || s == "none") << note;
  if (!note.empty()) {
    EXPECT_NE(note.find("'" + s + "'"), std::string::npos) << note;
  }
}

}  // namespace
}  // namespace tierflow::real
