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

namespace {

namespace fs = std::filesystem;

// `path` with links and `..` resolved as far as it exists (an output not made yet, under a
// directory that is), and its file's identity when it exists.
struct Resolved {
  fs::path path;
  bool exists = false;
  bool directory = false;
  dev_t dev = 0;
  ino_t ino = 0;
};

Resolved Resolve(const std::string& path) {
  Resolved r;
  std::error_code ec;
  r.path = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) r.path = fs::absolute(path, ec).lexically_normal();
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    r.exists = true;
    r.directory = S_ISDIR(st.st_mode);
    r.dev = st.st_dev;
    r.ino = st.st_ino;
  }
  return r;
}

bool SameFile(const Resolved& a, const Resolved& b) {
  if (a.exists && b.exists) return a.dev == b.dev && a.ino == b.ino;
  return a.path == b.path;
}

// `inner` is `outer` or lies under it.
bool Within(const Resolved& inner, const Resolved& outer) {
  if (SameFile(inner, outer)) return true;
  const fs::path rel = inner.path.lexically_relative(outer.path);
  return !rel.empty() && *rel.begin() != ".." && *rel.begin() != ".";
}

std::string Name(const CommandPath& p) { return p.flag + " '" + p.path + "'"; }

}  // namespace

Status CheckCommandPaths(const std::vector<CommandPath>& paths) {
  std::vector<Resolved> resolved;
  resolved.reserve(paths.size());
  for (const CommandPath& p : paths) resolved.push_back(p.path.empty() ? Resolved{} : Resolve(p.path));
  for (size_t i = 0; i < paths.size(); ++i) {
    const CommandPath& a = paths[i];
    if (a.path.empty()) continue;
    if (a.use == PathUse::kWritesIn && resolved[i].exists && !resolved[i].directory) {
      return InvalidArgument(Name(a) + " is a file, not a directory: this command writes its files into a directory");
    }
    for (size_t j = 0; j < paths.size(); ++j) {
      const CommandPath& b = paths[j];
      if (j == i || b.path.empty()) continue;
      const Resolved &ra = resolved[i], &rb = resolved[j];
      if (a.use == PathUse::kWrites && b.use == PathUse::kReads && rb.exists && SameFile(ra, rb)) {
        return InvalidArgument(Name(a) + " is the input " + (b.flag == "input" ? "" : b.flag + " ") + "'" + b.path +
                               "': writing it would destroy it; choose another file");
      }
      if (a.use == PathUse::kWrites && b.use == PathUse::kWrites && j > i && SameFile(ra, rb)) {
        return InvalidArgument(Name(a) + " and " + Name(b) + " are one file: each output needs its own");
      }
      if (a.use == PathUse::kWrites && (b.use == PathUse::kWritesIn || b.use == PathUse::kReplaces) && Within(ra, rb)) {
        return InvalidArgument(Name(a) + " is inside " + Name(b) + ", whose files this command writes: write it outside that directory");
      }
      if (a.use == PathUse::kWritesIn && b.use == PathUse::kWritesIn && j > i && SameFile(ra, rb)) {
        return InvalidArgument(Name(a) + " and " + Name(b) + " are one directory: each needs its own");
      }
      if (a.use == PathUse::kReplaces && b.use != PathUse::kWrites && (Within(ra, rb) || Within(rb, ra))) {
        return InvalidArgument(Name(a) + " overlaps " + Name(b) + ": a directory replaced as a whole neither holds nor lies in another of the "
                               "command's paths (give another directory)");
      }
    }
  }
  return Status::Ok();
}

}  // namespace tierflow
