// Directory ownership: one holder at a time, the second refused with the holder's pid, the lock
// file gone once the holder lets go, and a moved lock handed over.
#include "tierflow/real/dir_lock.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace tierflow::real {
namespace {

namespace fs = std::filesystem;

TEST(DirLock, OneHolderAtATimeAndNothingLeftBehind) {
  std::string tmpl = (fs::temp_directory_path() / "tierflow-dir-lock-XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const std::string dir = tmpl;
  {
    auto first = DirLock::Acquire(dir, "--dir '" + dir + "'");
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    auto second = DirLock::Acquire(dir, "--dir '" + dir + "'");
    ASSERT_FALSE(second.ok());
    EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(second.status().message(), "--dir '" + dir + "': in use by another tierflow process (pid " + std::to_string(::getpid()) +
                                             "); one run, checkpoint or probe at a time may write a directory (its lock: '" + dir +
                                             "/.tierflow.lock')");
    DirLock moved = std::move(first).value();  // the move hands the lock over, it does not let go
    EXPECT_FALSE(DirLock::Acquire(dir, "again").ok());
  }
  EXPECT_FALSE(fs::exists(dir + "/.tierflow.lock"));
  auto third = DirLock::Acquire(dir, "--dir '" + dir + "'");
  EXPECT_TRUE(third.ok()) << third.status().ToString();
  EXPECT_FALSE(DirLock::Acquire(dir + "/missing", "--dir missing").ok());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tierflow::real
