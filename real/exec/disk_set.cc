#include "tierflow/real/disk_set.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <tuple>

#include "tierflow/core/units.h"

namespace tierflow::real {
namespace {

// "--disk 'DIR' (nvme0)": how every error names the directory.
std::string Label(const DiskDir& d) { return "--disk '" + d.dir + "' (" + d.device + ")"; }

// "nvme10" -> {"nvme", 10}: so that nvme2 sorts before nvme10.
std::tuple<std::string, int64_t, std::string> NaturalKey(const std::string& name) {
  size_t digits = name.size();
  while (digits > 0 && std::isdigit(static_cast<unsigned char>(name[digits - 1])) != 0) --digits;
  const std::string suffix = name.substr(digits);
  const int64_t number = suffix.empty() || suffix.size() > 18 ? -1 : std::stoll(suffix);
  return {name.substr(0, digits), number, name};
}

std::string Plural(size_t n, const std::string& one, const std::string& many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

StatusOr<std::string> RealPath(const DiskDir& d) {
  char* resolved = ::realpath(d.dir.c_str(), nullptr);
  if (resolved == nullptr) return FromErrno(errno, Label(d) + ": realpath");
  std::string out(resolved);
  std::free(resolved);
  return out;
}

// Exists and is a directory; returns its stat for the file-system grouping.
StatusOr<struct stat> StatDir(const DiskDir& d) {
  if (d.dir.empty()) return InvalidArgument(Label(d) + ": empty path");
  struct stat st {};
  if (::stat(d.dir.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) return NotFound(Label(d) + ": directory does not exist");
    return FromErrno(err, Label(d) + ": stat");
  }
  if (!S_ISDIR(st.st_mode)) return InvalidArgument(Label(d) + ": not a directory");
  return st;
}

StatusOr<int64_t> FreeBytes(const DiskDir& d) {
  struct statvfs vfs {};
  if (::statvfs(d.dir.c_str(), &vfs) != 0) return FromErrno(errno, Label(d) + ": statvfs");
  // f_bavail, not f_bfree: what an unprivileged writer may use, so a run that fits as root also
  // fits as a user.
  return static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
}

// `name` starts every message: "--disk 'DIR' (nvme0)" or "'DIR'".
Status Probe(const std::string& dir, const std::string& name) {
  // FailedPrecondition whatever the errno: ENOENT from a pseudo file system means "cannot write
  // here", not "missing" (StatDir has already found the directory).
  auto fail = [&](int err, const std::string& step) {
    return FailedPrecondition(FromErrno(err, name + ": not writable (" + step + ")").message());
  };
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return fail(errno, "access W_OK");
  const std::string probe = dir + "/.tierflow-disk-probe-" + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) return fail(errno, "creating probe file '" + probe + "'");
  const char byte = 0;
  const ssize_t n = ::write(fd, &byte, 1);
  const int write_err = n == 1 ? 0 : (n < 0 ? errno : EIO);
  const int close_err = ::close(fd) == 0 ? 0 : errno;
  const int unlink_err = ::unlink(probe.c_str()) == 0 ? 0 : errno;
  if (write_err != 0) return fail(write_err, "writing probe file '" + probe + "'");
  if (close_err != 0) return fail(close_err, "closing probe file '" + probe + "'");
  if (unlink_err != 0) return fail(unlink_err, "removing probe file '" + probe + "'");
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<DiskDir>> DiskDirsForSchedule(const Schedule& schedule,
                                                   const std::vector<std::string>& dirs) {
  std::vector<std::string> nvme;
  for (const DeviceSpec& dev : schedule.devices()) {
    if (dev.kind == DeviceKind::kRemote) {
      return InvalidArgument("schedule uses remote device '" + dev.name +
                             "'; tierflow run supports local NVMe directories only");
    }
    if (dev.kind == DeviceKind::kNvme) nvme.push_back(dev.name);
  }
  std::stable_sort(nvme.begin(), nvme.end(), [](const std::string& a, const std::string& b) {
    return NaturalKey(a) < NaturalKey(b);
  });
  if (dirs.size() < nvme.size()) {
    std::string all;
    for (const std::string& n : nvme) all += (all.empty() ? "" : ", ") + n;
    const std::string given = dirs.empty() ? "no --disk was given"
                                           : "only " + Plural(dirs.size(), "--disk was", "--disks were") + " given";
    return InvalidArgument("schedule uses " + nvme[dirs.size()] + " but " + given +
                           " (one --disk per NVMe device, in order: " + all + ")");
  }
  if (dirs.size() > nvme.size()) {
    const std::string extra = "nvme" + std::to_string(nvme.size());
    const std::string has = nvme.empty() ? "no NVMe devices"
                                         : "only " + Plural(nvme.size(), "NVMe device", "NVMe devices");
    return InvalidArgument("--disk '" + dirs[nvme.size()] + "' (" + extra + "): the schedule has " + has +
                           "; remove the extra --disk (an unused directory is an error, not ignored)");
  }
  std::vector<DiskDir> out;
  for (size_t i = 0; i < nvme.size(); ++i) out.push_back({nvme[i], dirs[i], 0});
  return out;
}

Status ProbeWritable(const std::string& dir) { return Probe(dir, "'" + dir + "'"); }

Status CheckDiskDirs(const std::vector<DiskDir>& disks) {
  struct FileSystem {
    int64_t free_bytes = 0;
    int64_t required_bytes = 0;
    std::vector<size_t> disks;
  };
  std::map<dev_t, FileSystem> file_systems;  // keyed by st_dev, in first-use order of devices
  std::vector<dev_t> fs_order;
  std::map<std::string, size_t> by_realpath;
  for (size_t i = 0; i < disks.size(); ++i) {
    const DiskDir& d = disks[i];
    TF_CHECK(d.required_bytes >= 0);
    TF_ASSIGN_OR_RETURN(const struct stat st, StatDir(d));
    TF_RETURN_IF_ERROR(Probe(d.dir, Label(d)));
    TF_ASSIGN_OR_RETURN(const std::string real, RealPath(d));
    const auto [it, inserted] = by_realpath.emplace(real, i);
    if (!inserted) {
      return InvalidArgument(Label(d) + ": same directory as " + Label(disks[it->second]) + " (both are '" +
                             real + "'); each NVMe device needs its own directory");
    }
    TF_ASSIGN_OR_RETURN(const int64_t free_bytes, FreeBytes(d));
    if (d.required_bytes > free_bytes) {
      return ResourceExhausted(Label(d) + ": the run needs " + FormatBytes(static_cast<double>(d.required_bytes)) +
                               " there but its file system has only " +
                               FormatBytes(static_cast<double>(free_bytes)) + " free");
    }
    auto [fs, fresh] = file_systems.try_emplace(st.st_dev);
    if (fresh) fs_order.push_back(st.st_dev);
    fs->second.free_bytes = free_bytes;
    fs->second.required_bytes += d.required_bytes;
    fs->second.disks.push_back(i);
  }
  // Directories on one file system share its free space.
  for (dev_t id : fs_order) {
    const FileSystem& fs = file_systems[id];
    if (fs.disks.size() < 2 || fs.required_bytes <= fs.free_bytes) continue;
    std::string names;
    for (size_t i : fs.disks) names += (names.empty() ? "" : " and ") + Label(disks[i]);
    return ResourceExhausted(names + " share one file system: together the run needs " +
                             FormatBytes(static_cast<double>(fs.required_bytes)) + " there but it has only " +
                             FormatBytes(static_cast<double>(fs.free_bytes)) + " free");
  }
  return Status::Ok();
}

}  // namespace tierflow::real
