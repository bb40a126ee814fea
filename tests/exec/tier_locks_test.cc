// Node-wide locks (tier_locks.h) between processes: processes that take one resource's lock in
// turn never hold more of it at once than its slots, each marking in a shared log when it takes
// and lets go of it; a process that exits holding a lock blocks no other.
#include "tier_locks.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <string>

#include <gtest/gtest.h>

namespace tierflow::real::exec {
namespace {

namespace fs = std::filesystem;

constexpr int32_t kResource = 3;

// Takes the lock `rounds` times, appending "+PID" when it has it and "-PID" before letting go.
// Returns false on any error.
bool Hold(const std::string& dir, int32_t slots, int rounds, const std::string& log) {
  TierLocks locks;
  if (!locks.Add(kResource, "nvme0.read", dir, slots).ok()) return false;
  const int fd = ::open(log.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
  if (fd < 0) return false;
  const std::string me = std::to_string(::getpid());
  bool ok = true;
  for (int i = 0; i < rounds && ok; ++i) {
    std::promise<int32_t> taken;
    locks.Acquire(kResource, [&taken](int32_t slot, Status st) { taken.set_value(st.ok() ? slot : -1); });
    const int32_t slot = taken.get_future().get();
    if (slot < 0) {
      ok = false;
      break;
    }
    const std::string in = "+" + me + "\n", out = "-" + me + "\n";
    ok = ::write(fd, in.data(), in.size()) == static_cast<ssize_t>(in.size());
    ::usleep(300);
    ok = ok && ::write(fd, out.data(), out.size()) == static_cast<ssize_t>(out.size());
    locks.Release(kResource, slot);
  }
  ::close(fd);
  return ok;
}

// `processes` processes (this one and the rest forked) take the lock of `slots` slots 40 times
// each; returns the most that held it at once, by the log, and every process's count of takes.
int MostAtOnce(int processes, int32_t slots, const std::string& dir, std::map<std::string, int>* takes) {
  const std::string log = dir + "/log";
  std::vector<pid_t> children;
  for (int p = 1; p < processes; ++p) {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(Hold(dir, slots, 40, log) ? 0 : 1);
    children.push_back(pid);
  }
  EXPECT_TRUE(Hold(dir, slots, 40, log));
  for (const pid_t pid : children) {
    int status = 0;
    EXPECT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child " << pid;
  }
  std::ifstream in(log);
  int holding = 0, most = 0;
  for (std::string line; std::getline(in, line);) {
    if (line[0] == '+') ++(*takes)[line.substr(1)];
    holding += line[0] == '+' ? 1 : -1;
    most = std::max(most, holding);
  }
  EXPECT_EQ(holding, 0);
  return most;
}

TEST(TierLocks, TwoProcessesNeverHoldOneQueueAtOnce) {
  const fs::path dir = fs::temp_directory_path() / ("tierflow-tier-locks-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::map<std::string, int> takes;
  EXPECT_EQ(MostAtOnce(2, 1, dir.string(), &takes), 1);
  EXPECT_EQ(takes.size(), 2u);
  for (const auto& [pid, n] : takes) EXPECT_EQ(n, 40) << pid;
  fs::remove_all(dir);
}

TEST(TierLocks, ThreeProcessesHoldAQueueOfTwoSlotsTwoAtATimeAtMost) {
  const fs::path dir = fs::temp_directory_path() / ("tierflow-tier-locks2-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::map<std::string, int> takes;
  EXPECT_LE(MostAtOnce(3, 2, dir.string(), &takes), 2);
  EXPECT_EQ(takes.size(), 3u);
  fs::remove_all(dir);
}

// A holder killed outright (as kill -9 leaves it) lets go: the kernel drops its flock.
TEST(TierLocks, AHolderThatDiesLetsGo) {
  const fs::path dir = fs::temp_directory_path() / ("tierflow-tier-locks3-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    TierLocks locks;
    if (!locks.Add(kResource, "nvme0.read", dir.string(), 1).ok()) ::_exit(1);
    std::promise<int32_t> taken;
    locks.Acquire(kResource, [&taken](int32_t slot, Status) { taken.set_value(slot); });
    const char c = taken.get_future().get() == 0 ? 'y' : 'n';
    (void)::write(ready[1], &c, 1);
    ::_exit(0);  // holding it
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  TierLocks locks;
  ASSERT_TRUE(locks.Add(kResource, "nvme0.read", dir.string(), 1).ok());
  std::promise<int32_t> taken;
  locks.Acquire(kResource, [&taken](int32_t slot, Status) { taken.set_value(slot); });
  auto got = taken.get_future();
  ASSERT_EQ(got.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(got.get(), 0);
  locks.Release(kResource, 0);
  locks.RemoveFiles();
  EXPECT_FALSE(fs::exists(dir / ".tierflow-lock.nvme0.read.0"));
  ::close(ready[0]);
  ::close(ready[1]);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tierflow::real::exec
