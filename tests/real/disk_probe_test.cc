#include "tierflow/real/disk_probe.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace tierflow::real {
namespace {

// Options that would measure nothing are refused before any file is made (--reps 0 segfaulted
// taking the median of no repetitions).
TEST(DiskProbeOptions, ZeroRepetitionsOrAnEmptyWindowAreRefused) {
  DiskProbeOptions o;
  o.dirs = {std::filesystem::temp_directory_path().string()};
  EXPECT_TRUE(CheckDiskProbeOptions(o).ok()) << CheckDiskProbeOptions(o).ToString();
  o.repetitions = 0;
  EXPECT_EQ(CheckDiskProbeOptions(o).message(), "probe disk: --reps 0 must be at least 1");
  o.repetitions = 1;
  o.duration_s = 0;
  EXPECT_FALSE(CheckDiskProbeOptions(o).ok());
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
