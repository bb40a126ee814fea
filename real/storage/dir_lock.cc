#include "tierflow/real/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace tierflow::real {

StatusOr<DirLock> DirLock::Acquire(const std::string& dir, const std::string& label) {
  const std::string path = dir + "/.tierflow.lock";
  // The holder removes the file when it lets go: a lock taken on a file that is no longer the
  // one at `path` (removed, or made anew, between open and flock) is taken again.
  for (int attempt = 0;; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return FromErrno(errno, label + ": creating the lock file '" + path + "'");
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) return Refuse(fd, errno, path, label);
    struct stat held {}, now {};
    if (::fstat(fd, &held) == 0 && ::stat(path.c_str(), &now) == 0 && held.st_ino == now.st_ino && held.st_dev == now.st_dev) {
      const std::string pid = std::to_string(::getpid()) + "\n";
      if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
        const int err = errno;
        ::close(fd);
        return FromErrno(err, label + ": writing the lock file '" + path + "'");
      }
      return DirLock(fd, path);
    }
    ::close(fd);
    if (attempt == 8) return FailedPrecondition(label + ": its lock file '" + path + "' keeps changing; another tierflow process is using it");
  }
}

Status DirLock::Refuse(int fd, int err, const std::string& path, const std::string& label) {
  if (err != EWOULDBLOCK) {
    ::close(fd);
    return FromErrno(err, label + ": locking '" + path + "'");
  }
  // The holder writes its pid just after it takes the lock: a second run started at the same
  // moment waits for it (at most 200 ms), so that its one error names the holder.
  char text[32] = {};
  ssize_t n = 0;
  for (int wait = 0; wait < 100 && (n = ::pread(fd, text, sizeof text - 1, 0)) <= 0; ++wait) ::usleep(2000);
  ::close(fd);
  std::string holder = n > 0 ? std::string(text, static_cast<size_t>(n)) : "";
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
  return FailedPrecondition(label + ": in use by another tierflow process" + (holder.empty() ? "" : " (pid " + holder + ")") +
                            "; one run, checkpoint or probe at a time may write a directory (its lock: '" + path + "')");
}

void DirLock::Release() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // still holding it: whoever opened this file retries (Acquire)
  ::close(fd_);             // closing the last descriptor releases the flock
  fd_ = -1;
}

DirLock& DirLock::operator=(DirLock&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

DirLock::~DirLock() { Release(); }

}  // namespace tierflow::real
