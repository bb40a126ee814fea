// The probe campaign (tierflow/real/probe_campaign.h): steps run in order into their record
// files, each file rewritten as each of its steps ends; a failing step stops the campaign,
// saying whether earlier steps' files are in OUT; samples interleaved before and after each step.
#include "tierflow/real/probe_campaign.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "test_util.h"

namespace tierflow::real {
namespace {

ProbeStep Records(const std::string& file, const std::string& label, int n) {
  return {file, label, [label, n](const HostProbeOptions&) -> StatusOr<std::vector<TraceRecord>> {
            std::vector<TraceRecord> r;
            for (int i = 0; i < n; ++i) r.push_back(ProbeRecord(label + "." + std::to_string(i), Op::kRead, "nvme0.read", i, 4096, i, i + 1));
            return r;
          }};
}

ProbeStep Fails(const std::string& file) {
  return {file, "broken", [](const HostProbeOptions&) -> StatusOr<std::vector<TraceRecord>> { return Internal("boom"); }};
}

TEST(ProbeCampaign, StepsWriteTheirFilesAsTheyEndAndStaleFilesGoFirst) {
  testing::TempDir out;
  const std::string stale = ProbeRecordsPath(out.path(), "y");
  std::ofstream(stale) << "not records\n";
  std::vector<std::string> ended;
  auto counts = RunProbeCampaign({Records("x", "first", 2), Records("y", "second", 1), Records("x", "third", 1)}, out.path(),
                                 [] { return HostProbeOptions(); },
                                 [&](const ProbeStep& s, size_t records, double seconds) {
                                   ended.push_back(s.label + ":" + std::to_string(records));
                                   EXPECT_GE(seconds, 0);
                                 });
  ASSERT_TRUE(counts.ok()) << counts.status().ToString();
  EXPECT_EQ(ended, (std::vector<std::string>{"first:2", "second:1", "third:1"}));
  EXPECT_EQ(counts->at("x"), 3u);
  EXPECT_EQ(counts->at("y"), 1u);
  auto x = ReadTraceFile(ProbeRecordsPath(out.path(), "x"));
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  EXPECT_EQ(x->size(), 3u) << "the third step's record joins the first's in one file";
  auto y = ReadTraceFile(stale);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(y->size(), 1u);
}

TEST(ProbeCampaign, AFailingStepStopsItAndSaysWhatOutHolds) {
  testing::TempDir out;
  auto first = RunProbeCampaign({Fails("x"), Records("y", "after", 1)}, out.path(), [] { return HostProbeOptions(); }, nullptr);
  EXPECT_EQ(first.status().code(), StatusCode::kInternal);
  EXPECT_EQ(first.status().message(), "probe all: broken: boom (no record file written)");
  EXPECT_FALSE(std::filesystem::exists(ProbeRecordsPath(out.path(), "y"))) << "no step after the failure";

  auto later = RunProbeCampaign({Records("x", "first", 1), Fails("y")}, out.path(), [] { return HostProbeOptions(); }, nullptr);
  EXPECT_EQ(later.status().message(), "probe all: broken: boom (the steps before it are in " + out.path() + ": an incomplete probe)");
  EXPECT_TRUE(std::filesystem::exists(ProbeRecordsPath(out.path(), "x")));
}

TEST(ProbeCampaign, SamplesComeBeforeTheFirstStepAndAfterEach) {
  std::vector<ProbeStep> steps = InterleaveSamples({Records("a", "a", 1), Records("b", "b", 1)}, [](int32_t k, int32_t n) {
    return Records("s", "sample " + std::to_string(k + 1) + " of " + std::to_string(n), 1);
  });
  std::vector<std::string> labels;
  for (const ProbeStep& s : steps) labels.push_back(s.label);
  EXPECT_EQ(labels, (std::vector<std::string>{"sample 1 of 3", "a", "sample 2 of 3", "b", "sample 3 of 3"}));
}

// Each directory alone, an op at a time and its stream pairs, then (with two) all at once; a
// directory's records named after its place.
TEST(ProbeCampaign, DiskStepsCoverEachDirectoryThenAllAtOnce) {
  DiskProbeOptions base;
  base.ops = {"read", "write"};
  base.passes = 2;
  const DiskCampaign one = MakeDiskCampaign(base, {"d0"});
  std::vector<std::string> labels;
  for (const ProbeStep& s : one.steps) labels.push_back(s.label);
  EXPECT_EQ(labels, (std::vector<std::string>{"disk nvme0 read", "disk nvme0 write", "disk nvme0 rw"}));
  const DiskCampaign two = MakeDiskCampaign(base, {"d0", "d1"});
  labels.clear();
  for (const ProbeStep& s : two.steps) labels.push_back(s.label);
  EXPECT_EQ(labels, (std::vector<std::string>{"disk nvme0 read", "disk nvme0 write", "disk nvme0 rw", "disk nvme1 read",
                                              "disk nvme1 write", "disk nvme1 rw", "disk all at once"}));
  EXPECT_GT(two.points, 2 * one.points) << "both alone, and the joint windows";
  DiskProbeOptions single = base;
  single.passes = 1;
  const DiskCampaign one_pass = MakeDiskCampaign(single, {"d0"});
  EXPECT_GT(one_pass.points, 0);
  EXPECT_EQ(one.points, 2 * one_pass.points) << "every point measured once per pass";
  EXPECT_TRUE(MakeDiskCampaign(base, {}).steps.empty());
}

}  // namespace
}  // namespace tierflow::real
