#include "tierflow/real/disk_probe.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace tierflow::real {
namespace {

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
