// Private to real/storage: the part of the posix and io_uring back-ends that deals with real file
// descriptors and the file system (open, fallocate, fsync, rename, ...). Thread-safe.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "tierflow/real/storage.h"

namespace tierflow::real::internal {

class FdStorage : public Storage {
 public:
  ~FdStorage() override;
  StatusOr<OpenFile> Open(const std::string& path, const OpenOptions& options) override;
  Status Close(FileId file) override;
  std::string PathOf(FileId file) const override;
  int32_t DeviceOf(FileId file) const override;
  Status Allocate(FileId file, int64_t size_bytes) override;
  Status Truncate(FileId file, int64_t size_bytes) override;
  StatusOr<int64_t> FileSize(FileId file) override;
  Status Sync(FileId file) override;
  Status DropCache(FileId file) override;
  Status CreateDir(const std::string& path) override;
  Status SyncDir(const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status Remove(const std::string& path) override;
  StatusOr<bool> Exists(const std::string& path) override;
  StatusOr<std::vector<std::string>> List(const std::string& dir) override;

 protected:
  struct Entry {
    int fd = -1;
    std::string path;
    int32_t device = 0;
    bool direct = false;
    int64_t alignment = kDirectAlignment;  // with direct: OpenFile::alignment
  };
  // A copy of the entry of an open file; fd == -1 when `file` is not open.
  Entry Lookup(FileId file) const;
  // Called after a file is opened / before it is closed (registered files).
  virtual void OnOpen(FileId, const Entry&) {}
  virtual void OnClose(FileId, const Entry&) {}

 private:
  mutable std::mutex mu_;
  std::vector<Entry> files_;
  std::vector<FileId> free_ids_;
};

}  // namespace tierflow::real::internal
