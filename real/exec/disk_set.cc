#include "tierflow/real/disk_set.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
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
  // Unique per process and per check: ranks of one run that share a directory (threads of one
  // process in tests, or processes) check it at once.
  static std::atomic<int64_t> checks{0};
  const std::string probe = dir + "/.tierflow-disk-probe-" + std::to_string(::getpid()) + "-" + std::to_string(checks.fetch_add(1));
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

StatusOr<std::vector<DiskDir>> DiskDirsForSchedule(const Schedule& schedule, const std::vector<std::string>& dirs,
                                                   const std::string& root) {
  std::vector<std::string> devices;  // nvme* in name order, then remote* in name order
  for (const DeviceSpec& dev : schedule.devices()) {
    if (dev.kind == DeviceKind::kNvme || dev.kind == DeviceKind::kRemote) devices.push_back(dev.name);
  }
  auto kind_of = [&](const std::string& name) { return schedule.devices()[static_cast<size_t>(schedule.FindDevice(name))].kind; };
  std::stable_sort(devices.begin(), devices.end(), [&](const std::string& a, const std::string& b) {
    const bool ra = kind_of(a) == DeviceKind::kRemote, rb = kind_of(b) == DeviceKind::kRemote;
    return std::make_pair(ra, NaturalKey(a)) < std::make_pair(rb, NaturalKey(b));
  });
  std::string all;
  for (const std::string& n : devices) all += (all.empty() ? "" : ", ") + n;
  std::map<std::string, std::string> named;  // device -> --disk NAME=DIR
  std::vector<std::string> positional;
  for (const std::string& d : dirs) {
    const size_t eq = d.find('=');
    const std::string name = eq == std::string::npos ? "" : d.substr(0, eq);
    const auto key = NaturalKey(name);
    const bool is_name = (std::get<0>(key) == "nvme" || std::get<0>(key) == "remote") && std::get<1>(key) >= 0;
    if (!is_name) {
      positional.push_back(d);
      continue;
    }
    if (std::find(devices.begin(), devices.end(), name) == devices.end()) {
      return InvalidArgument("--disk '" + d + "': the schedule has no storage device '" + name + "' (it has " +
                             (devices.empty() ? std::string("none") : all) + ")");
    }
    if (!named.emplace(name, d.substr(eq + 1)).second) return InvalidArgument("--disk '" + d + "': " + name + " is given twice");
  }
  std::vector<DiskDir> out;
  size_t next = 0;
  for (const std::string& device : devices) {
    if (auto it = named.find(device); it != named.end()) {
      out.push_back({device, it->second, 0});
    } else if (next < positional.size()) {
      out.push_back({device, positional[next++], 0});
    } else if (!root.empty()) {
      out.push_back({device, root + "/" + device, 0});
    } else {
      const std::string given = dirs.empty() ? "no --disk was given"
                                             : "only " + Plural(dirs.size(), "--disk was", "--disks were") + " given";
      return InvalidArgument("schedule uses " + device + " but " + given + " (one --disk per storage device, in order: " + all +
                             "; or --disk NAME=DIR, or --disk-root DIR for a subdirectory each)");
    }
  }
  if (next < positional.size()) {
    const std::string has = devices.empty() ? "no storage devices" : "only " + Plural(devices.size(), "storage device", "storage devices");
    return InvalidArgument("--disk '" + positional[next] + "': the schedule has " + has + " (" + (devices.empty() ? "none" : all) +
                           ") and each already has a directory; remove the extra --disk (an unused directory is an error, not ignored)");
  }
  return out;
}

Status MakeRootDirs(const std::vector<DiskDir>& disks, const std::string& root) {
  if (root.empty()) return Status::Ok();
  struct stat st {};
  if (::stat(root.c_str(), &st) != 0) return FromErrno(errno, "--disk-root '" + root + "'");
  if (!S_ISDIR(st.st_mode)) return InvalidArgument("--disk-root '" + root + "': not a directory");
  for (const DiskDir& d : disks) {
    if (d.dir != root + "/" + d.device) continue;
    if (::mkdir(d.dir.c_str(), 0755) != 0 && errno != EEXIST) return FromErrno(errno, Label(d) + ": creating it under --disk-root");
  }
  return Status::Ok();
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
