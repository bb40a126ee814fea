// Node-wide locks of the resources several ranks share (tier_locks.h).
#include "tier_locks.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace tierflow::real::exec {

void TierLocks::Close() {
  stop_ = true;
  for (auto& [resource, lock] : locks_) {
    lock->waiter.reset();  // its waits return once they see stop_
    for (int& fd : lock->fds) {
      if (fd >= 0) ::close(fd);
      fd = -1;
    }
  }
}

Status TierLocks::Add(int32_t resource, const std::string& name, const std::string& dir, int32_t slots) {
  auto lock = std::make_unique<Lock>();
  for (int32_t k = 0; k < std::max(1, slots); ++k) {
    const std::string path = dir + "/.tierflow-lock." + name + "." + std::to_string(k);
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      const int err = errno;
      for (const int open_fd : lock->fds) ::close(open_fd);
      for (const std::string& made : lock->paths) ::unlink(made.c_str());
      return FromErrno(err, "resource '" + name + "': its node-wide lock '" + path + "'");
    }
    lock->paths.push_back(path);
    lock->fds.push_back(fd);
    lock->held.push_back(false);
  }
  lock->waiter = std::make_unique<Worker>();
  locks_[resource] = std::move(lock);
  return Status::Ok();
}

void TierLocks::Acquire(int32_t resource, std::function<void(int32_t slot, Status status)> granted) {
  Lock* lock = locks_.at(resource).get();
  lock->waiter->Post([this, lock, granted = std::move(granted)] {
    for (useconds_t backoff_us = 10;; backoff_us = std::min<useconds_t>(2 * backoff_us, 500)) {
      for (size_t k = 0; k < lock->fds.size(); ++k) {
        std::lock_guard<std::mutex> guard(lock->mu);
        if (lock->held[k]) continue;
        if (::flock(lock->fds[k], LOCK_EX | LOCK_NB) == 0) {
          lock->held[k] = true;
          return granted(static_cast<int32_t>(k), Status::Ok());
        }
        const int err = errno;
        if (err != EWOULDBLOCK && err != EINTR) return granted(-1, FromErrno(err, "taking the node-wide lock '" + lock->paths[k] + "'"));
      }
      if (stop_) return granted(-1, FailedPrecondition("the run ended while its task waited for the node-wide lock '" + lock->paths[0] + "'"));
      ::usleep(backoff_us);
    }
  });
}

void TierLocks::Release(int32_t resource, int32_t slot) {
  Lock& lock = *locks_.at(resource);
  std::lock_guard<std::mutex> guard(lock.mu);
  (void)::flock(lock.fds[static_cast<size_t>(slot)], LOCK_UN);
  lock.held[static_cast<size_t>(slot)] = false;
}

void TierLocks::RemoveFiles() {
  for (auto& [resource, lock] : locks_) {
    for (const std::string& path : lock->paths) ::unlink(path.c_str());
  }
}

}  // namespace tierflow::real::exec
