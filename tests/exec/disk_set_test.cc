// The --disk checks on real directories: each test breaks one rule and expects the error that
// names the directory and the rule, so removing any one check makes its test fail.
#include "tierflow/real/disk_set.h"

#include <gtest/gtest.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tierflow/core/units.h"

namespace tierflow::real {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "tierflow-disk-set-XXXXXX").string();
    TF_CHECK(::mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const {
    const std::string p = path_ + "/" + name;
    fs::create_directories(p);
    return p;
  }

 private:
  std::string path_;
};

int64_t FreeBytes(const std::string& dir) {
  struct statvfs vfs {};
  TF_CHECK(::statvfs(dir.c_str(), &vfs) == 0);
  return static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
}

Schedule WithDevices(const std::vector<std::pair<std::string, DeviceKind>>& devices) {
  Schedule s;
  for (const auto& [name, kind] : devices) s.AddDevice({name, kind});
  return s;
}

Schedule TwoNvme() {
  return WithDevices({{"gpu0", DeviceKind::kGpu}, {"host", DeviceKind::kHost},
                      {"nvme0", DeviceKind::kNvme}, {"nvme1", DeviceKind::kNvme}});
}

void ExpectError(const Status& s, StatusCode code, const std::vector<std::string>& parts) {
  ASSERT_FALSE(s.ok()) << "expected an error containing '" << parts.front() << "'";
  EXPECT_EQ(s.code(), code) << s.ToString();
  for (const std::string& p : parts) {
    EXPECT_NE(s.message().find(p), std::string::npos) << s.ToString() << "\n  lacks: " << p;
  }
}

TEST(DiskDirsForScheduleTest, MatchesNvmeDevicesInNameOrder) {
  // Listed out of order on purpose: nvme0 gets the first --disk, nvme10 the last.
  const Schedule s = WithDevices({{"nvme10", DeviceKind::kNvme}, {"host", DeviceKind::kHost},
                                  {"nvme2", DeviceKind::kNvme}, {"nvme0", DeviceKind::kNvme}});
  auto disks = DiskDirsForSchedule(s, {"/a", "/b", "/c"});
  ASSERT_TRUE(disks.ok()) << disks.status().ToString();
  ASSERT_EQ(disks->size(), 3u);
  EXPECT_EQ((*disks)[0].device, "nvme0");
  EXPECT_EQ((*disks)[0].dir, "/a");
  EXPECT_EQ((*disks)[1].device, "nvme2");
  EXPECT_EQ((*disks)[2].device, "nvme10");
  EXPECT_EQ((*disks)[2].dir, "/c");
  EXPECT_EQ((*disks)[2].required_bytes, 0);
}

TEST(DiskDirsForScheduleTest, TooFewDirectories) {
  ExpectError(DiskDirsForSchedule(TwoNvme(), {"/a"}).status(), StatusCode::kInvalidArgument,
              {"schedule uses nvme1 but only 1 --disk was given"});
  ExpectError(DiskDirsForSchedule(TwoNvme(), {}).status(), StatusCode::kInvalidArgument,
              {"schedule uses nvme0 but no --disk was given"});
}

TEST(DiskDirsForScheduleTest, TooManyDirectories) {
  ExpectError(DiskDirsForSchedule(TwoNvme(), {"/a", "/b", "/c"}).status(), StatusCode::kInvalidArgument,
              {"--disk '/c': the schedule has only 2 storage devices (nvme0, nvme1)"});
}

TEST(DiskDirsForScheduleTest, RemoteTiersComeAfterTheNvmeDevices) {
  const Schedule s = WithDevices({{"remote0", DeviceKind::kRemote}, {"nvme0", DeviceKind::kNvme}});
  auto disks = DiskDirsForSchedule(s, {"/a", "/b"});
  ASSERT_TRUE(disks.ok()) << disks.status().ToString();
  ASSERT_EQ(disks->size(), 2u);
  EXPECT_EQ((*disks)[0].device, "nvme0");
  EXPECT_EQ((*disks)[1].device, "remote0");
  EXPECT_EQ((*disks)[1].dir, "/b");
  ExpectError(DiskDirsForSchedule(s, {"/a"}).status(), StatusCode::kInvalidArgument,
              {"schedule uses remote0 but only 1 --disk was given", "--disk-root"});
}

TEST(DiskDirsForScheduleTest, NamedDirectoriesAndARootFillTheRest) {
  const Schedule s = WithDevices({{"nvme0", DeviceKind::kNvme}, {"nvme1", DeviceKind::kNvme}, {"remote0", DeviceKind::kRemote}});
  // A name takes its device; a plain directory the next device left; the root the others.
  auto disks = DiskDirsForSchedule(s, {"remote0=/r", "/a"}, "/root");
  ASSERT_TRUE(disks.ok()) << disks.status().ToString();
  ASSERT_EQ(disks->size(), 3u);
  EXPECT_EQ((*disks)[0].dir, "/a");
  EXPECT_EQ((*disks)[1].dir, "/root/nvme1");
  EXPECT_EQ((*disks)[2].dir, "/r");
  // A directory whose name has '=' but no device name before it is a plain directory.
  disks = DiskDirsForSchedule(s, {"/x=y", "/b", "/c"});
  ASSERT_TRUE(disks.ok()) << disks.status().ToString();
  EXPECT_EQ((*disks)[0].dir, "/x=y");
  ExpectError(DiskDirsForSchedule(s, {"nvme3=/a"}, "/root").status(), StatusCode::kInvalidArgument,
              {"--disk 'nvme3=/a': the schedule has no storage device 'nvme3' (it has nvme0, nvme1, remote0)"});
  ExpectError(DiskDirsForSchedule(s, {"nvme1=/a", "nvme1=/b"}, "/root").status(), StatusCode::kInvalidArgument,
              {"nvme1 is given twice"});
}

TEST(DiskDirsForScheduleTest, TheRootsSubdirectoriesAreCreated) {
  TempDir t;
  const Schedule s = WithDevices({{"nvme0", DeviceKind::kNvme}, {"remote0", DeviceKind::kRemote}});
  auto disks = DiskDirsForSchedule(s, {}, t.path());
  ASSERT_TRUE(disks.ok()) << disks.status().ToString();
  ASSERT_TRUE(MakeRootDirs(*disks, t.path()).ok());
  EXPECT_TRUE(fs::is_directory(t.path() + "/nvme0"));
  EXPECT_TRUE(fs::is_directory(t.path() + "/remote0"));
  EXPECT_TRUE(CheckDiskDirs(*disks).ok());
  const Status missing = MakeRootDirs(*DiskDirsForSchedule(s, {}, t.path() + "/none"), t.path() + "/none");
  ExpectError(missing, StatusCode::kNotFound, {"--disk-root '" + t.path() + "/none'"});
}

TEST(CheckDiskDirsTest, GoodDirectoriesPassAndLeaveNoProbeFile) {
  TempDir t;
  const std::string a = t.Sub("a"), b = t.Sub("b");
  auto disks = DiskDirsForSchedule(TwoNvme(), {a, b});
  ASSERT_TRUE(disks.ok()) << disks.status().ToString();
  (*disks)[0].required_bytes = 1 << 20;
  const Status s = CheckDiskDirs(*disks);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(fs::is_empty(a));
  EXPECT_TRUE(fs::is_empty(b));
}

TEST(CheckDiskDirsTest, MissingDirectory) {
  TempDir t;
  const std::string missing = t.path() + "/nope";
  ExpectError(CheckDiskDirs({{"nvme0", t.Sub("a"), 0}, {"nvme1", missing, 0}}), StatusCode::kNotFound,
              {"--disk '" + missing + "' (nvme1): directory does not exist"});
}

TEST(CheckDiskDirsTest, FileInsteadOfDirectory) {
  TempDir t;
  const std::string file = t.path() + "/file";
  std::ofstream(file) << "x";
  ExpectError(CheckDiskDirs({{"nvme0", file, 0}}), StatusCode::kInvalidArgument,
              {"--disk '" + file + "' (nvme0): not a directory"});
}

// /proc/self/fd exists, is a directory and passes access(W_OK) as root, yet refuses new files:
// only the probe file catches it, so this fails without the probe even when run as root.
TEST(CheckDiskDirsTest, DirectoryThatRefusesFiles) {
  const std::string dir = "/proc/self/fd";
  if (!fs::is_directory(dir)) GTEST_SKIP() << dir << " is not a directory here (no procfs)";
  ExpectError(CheckDiskDirs({{"nvme0", dir, 0}}), StatusCode::kFailedPrecondition,
              {"--disk '" + dir + "' (nvme0): not writable (creating probe file"});
  ExpectError(ProbeWritable(dir), StatusCode::kFailedPrecondition, {"'" + dir + "': not writable"});
}

TEST(CheckDiskDirsTest, SameDirectoryTwiceThroughASymlink) {
  TempDir t;
  const std::string a = t.Sub("a");
  const std::string link = t.path() + "/link";
  fs::create_directory_symlink(a, link);
  ExpectError(CheckDiskDirs({{"nvme0", a, 0}, {"nvme1", link, 0}}), StatusCode::kInvalidArgument,
              {"--disk '" + link + "' (nvme1): same directory as --disk '" + a + "' (nvme0)",
               "each NVMe device needs its own directory"});
}

TEST(CheckDiskDirsTest, TooLittleFreeSpaceNamesNeededAndFree) {
  TempDir t;
  const std::string a = t.Sub("a");
  const int64_t free_bytes = FreeBytes(a);
  const int64_t needed = free_bytes + (int64_t{1} << 40);  // 1 TiB more than there is
  const Status s = CheckDiskDirs({{"nvme0", a, needed}});
  // Free space moves while the test runs; compare the needed figure exactly, the free one loosely.
  ExpectError(s, StatusCode::kResourceExhausted,
              {"--disk '" + a + "' (nvme0): the run needs " + FormatBytes(static_cast<double>(needed)),
               "but its file system has only ", " free"});
}

TEST(CheckDiskDirsTest, DirectoriesOnOneFileSystemShareItsFreeSpace) {
  TempDir t;
  const std::string a = t.Sub("a"), b = t.Sub("b");
  const int64_t each = FreeBytes(a) / 3 * 2;  // each fits alone, both together do not
  ExpectError(CheckDiskDirs({{"nvme0", a, each}, {"nvme1", b, each}}), StatusCode::kResourceExhausted,
              {"--disk '" + a + "' (nvme0) and --disk '" + b + "' (nvme1) share one file system",
               "together the run needs " + FormatBytes(static_cast<double>(2 * each))});
}

}  // namespace
}  // namespace tierflow::real
