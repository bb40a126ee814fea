#include "tierflow/core/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>

namespace tierflow {
namespace {

std::string Named(std::string_view what, const std::string& path) { return std::string(what) + " '" + path + "'"; }

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

StatusOr<std::string> ReadFileToString(const std::string& path, std::string_view what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return FromErrno(errno, "open " + Named(what, path));
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return FromErrno(err, "read " + Named(what, path));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

std::string TemporaryPath(const std::string& path) { return path + ".tmp-" + std::to_string(::getpid()); }

Status CreateParentDirectories(const std::string& path, std::string_view what) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) return Status::Ok();
  std::error_code ec;
  std::filesystem::create_directories(parent, ec);
  if (ec) return FromErrno(ec.value(), "create the directory '" + parent.string() + "' of " + Named(what, path));
  return Status::Ok();
}

Status WriteFileAtomically(const std::string& path, std::string_view contents, std::string_view what) {
  TF_RETURN_IF_ERROR(CreateParentDirectories(path, what));
  const std::string tmp = TemporaryPath(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return FromErrno(errno, "write " + Named(what, path) + " (creating '" + tmp + "')");
  auto fail = [&](int err, const std::string& step) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return FromErrno(err, "write " + Named(what, path) + " (" + step + "); the previous file, if any, is kept");
  };
  for (size_t done = 0; done < contents.size();) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(errno, "writing");
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return FromErrno(err, "write " + Named(what, path) + " (close)");
  }
  return ReplaceWith(tmp, path, what);
}

Status ReplaceWith(const std::string& tmp, const std::string& path, std::string_view what) {
  const int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    return FromErrno(err, "write " + Named(what, path) + " (fsync); the previous file, if any, is kept");
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return FromErrno(err, "write " + Named(what, path) + " (rename)");
  }
  (void)SyncDirectory(DirectoryOf(path));  // the rename durable; a directory that cannot be opened is not an error
  return Status::Ok();
}

Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return FromErrno(errno, "open directory '" + dir + "' to sync it");
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  return rc == 0 ? Status::Ok() : FromErrno(err, "fsync directory '" + dir + "'");
}

Status RefuseOutputOverInput(const std::string& output, const std::string& input, std::string_view flag) {
  struct stat out {}, in {};
  if (::stat(output.c_str(), &out) != 0 || ::stat(input.c_str(), &in) != 0) return Status::Ok();  // nothing to destroy
  if (out.st_dev == in.st_dev && out.st_ino == in.st_ino) {
    return InvalidArgument(std::string(flag) + " '" + output + "' is the input '" + input + "': writing it would destroy it; choose another file");
  }
  return Status::Ok();
}

}  // namespace tierflow
