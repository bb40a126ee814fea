#include "tierflow/real/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace tierflow::real {

StatusOr<DirLock> DirLock::Acquire(const std::string& dir, const std::string& label) {
  const std::string path = dir + "/.tierflow.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return FromErrno(errno, label + ": creating the lock file '" + path + "'");
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char text[32] = {};
    const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
    ::close(fd);
    if (err != EWOULDBLOCK) return FromErrno(err, label + ": locking '" + path + "'");
    std::string holder = n > 0 ? std::string(text, static_cast<size_t>(n)) : "";
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    return FailedPrecondition(label + ": in use by another tierflow process" + (holder.empty() ? "" : " (pid " + holder + ")") +
                              "; one run, checkpoint or probe at a time may write a directory (its lock: '" + path + "')");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    const int err = errno;
    ::close(fd);
    return FromErrno(err, label + ": writing the lock file '" + path + "'");
  }
  return DirLock(fd);
}

DirLock& DirLock::operator=(DirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

}  // namespace tierflow::real
