// Ownership of a directory a process writes: an exclusive flock(2) on DIR/.tierflow.lock, which
// holds the owner's pid. A second run, checkpoint save or probe on the same directory is refused
// with the holder named, instead of truncating the first one's store or racing its checkpoint.
// The kernel drops the lock when its holder exits, however it exits (kill -9 included), so a
// crashed run leaves nothing to clean up but the lock file, which the next holder reuses; a
// holder that lets go removes it.
//
// Thread safety: a DirLock is a value owned by one thread; locks of one directory conflict
// across processes and across separate Acquire calls within one process alike.
#pragma once

#include <string>
#include <utility>

#include "tierflow/core/status.h"

namespace tierflow::real {

class DirLock {
 public:
  // Locks `dir` (an existing directory). `label` starts every error ("--disk '/d' (nvme0)").
  // FailedPrecondition naming the holder's pid when another holds it; the errno's status when
  // the lock file cannot be created.
  static StatusOr<DirLock> Acquire(const std::string& dir, const std::string& label);

  DirLock(DirLock&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) { other.fd_ = -1; }
  DirLock& operator=(DirLock&& other) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  ~DirLock();

 private:
  DirLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  static Status Refuse(int fd, int err, const std::string& path, const std::string& label);  // closes fd
  void Release();
  int fd_ = -1;
  std::string path_;
};

}  // namespace tierflow::real
