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
  // Whatever this machine's disk uses (or "" on an overlay or tmpfs): a bare name.
  const std::string s = IoSchedulerOf(std::filesystem::temp_directory_path().string());
  EXPECT_EQ(s.find_first_of("[] \t\n"), std::string::npos) << s;
}

}  // namespace
}  // namespace tierflow::real
