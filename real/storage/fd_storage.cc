#include "fd_storage.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace tierflow::real::internal {

FdStorage::~FdStorage() {
  for (auto& e : files_) {
    if (e.fd >= 0) ::close(e.fd);
  }
}

StatusOr<OpenFile> FdStorage::Open(const std::string& path, const OpenOptions& options) {
  int flags = O_CLOEXEC | (options.read_only ? O_RDONLY : O_RDWR);
  if (options.create) flags |= O_CREAT;
  if (options.truncate) flags |= O_TRUNC;
  bool direct = options.direct;
  int fd = ::open(path.c_str(), flags | (direct ? O_DIRECT : 0), 0644);
  if (fd < 0 && direct && errno == EINVAL) {
    if (!options.direct_fallback) {
      return Unavailable("open '" + path + "': the file system refuses O_DIRECT (EINVAL); "
                         "use a directory on a block-device file system or allow buffered fallback");
    }
    direct = false;
    fd = ::open(path.c_str(), flags, 0644);
  }
  if (fd < 0) return FromErrno(errno, "open '" + path + "'");
  Entry e{fd, path, options.device, direct, kDirectAlignment};
#ifdef STATX_DIOALIGN
  if (direct) {
    // The kernel says what O_DIRECT needs of this file (Linux 6.1+); 0 or no answer: a page.
    struct statx sx {};
    if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN) != 0 &&
        sx.stx_dio_offset_align > 0 && sx.stx_dio_mem_align > 0) {
      e.alignment = std::max<int64_t>(sx.stx_dio_offset_align, sx.stx_dio_mem_align);
    }
  }
#endif
  FileId id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_ids_.empty()) {
      id = free_ids_.back();
      free_ids_.pop_back();
      files_[id] = e;
    } else {
      id = static_cast<FileId>(files_.size());
      files_.push_back(e);
    }
  }
  OnOpen(id, e);
  return OpenFile{id, direct, e.alignment};
}

Status FdStorage::Close(FileId file) {
  Entry e = Lookup(file);
  if (e.fd < 0) return InvalidArgument("close: file id " + std::to_string(file) + " is not open");
  OnClose(file, e);
  {
    std::lock_guard<std::mutex> lock(mu_);
    files_[file] = Entry{};
    free_ids_.push_back(file);
  }
  if (::close(e.fd) != 0) return FromErrno(errno, "close '" + e.path + "'");
  return Status::Ok();
}

FdStorage::Entry FdStorage::Lookup(FileId file) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (file < 0 || static_cast<size_t>(file) >= files_.size()) return Entry{};
  return files_[file];
}

std::string FdStorage::PathOf(FileId file) const { return Lookup(file).path; }
int32_t FdStorage::DeviceOf(FileId file) const { return Lookup(file).device; }

#define TF_LOOKUP_OR_RETURN(e, file, what)                                                  \
  Entry e = Lookup(file);                                                                   \
  if (e.fd < 0) return InvalidArgument(std::string(what) + ": file id " + std::to_string(file) + " is not open")

Status FdStorage::Allocate(FileId file, int64_t size_bytes) {
  TF_LOOKUP_OR_RETURN(e, file, "allocate");
  int rc = ::posix_fallocate(e.fd, 0, size_bytes);
  if (rc == EOPNOTSUPP || rc == EINVAL) {
    if (::ftruncate(e.fd, size_bytes) != 0) return FromErrno(errno, "ftruncate '" + e.path + "'");
    return Status::Ok();
  }
  if (rc != 0) return FromErrno(rc, "fallocate '" + e.path + "' to " + std::to_string(size_bytes) + " bytes");
  return Status::Ok();
}

Status FdStorage::Truncate(FileId file, int64_t size_bytes) {
  TF_LOOKUP_OR_RETURN(e, file, "truncate");
  if (::ftruncate(e.fd, size_bytes) != 0) return FromErrno(errno, "ftruncate '" + e.path + "'");
  return Status::Ok();
}

StatusOr<int64_t> FdStorage::FileSize(FileId file) {
  TF_LOOKUP_OR_RETURN(e, file, "size");
  struct stat st;
  if (::fstat(e.fd, &st) != 0) return FromErrno(errno, "fstat '" + e.path + "'");
  return static_cast<int64_t>(st.st_size);
}

Status FdStorage::Sync(FileId file) {
  TF_LOOKUP_OR_RETURN(e, file, "fsync");
  if (::fsync(e.fd) != 0) return FromErrno(errno, "fsync '" + e.path + "'");
  return Status::Ok();
}

Status FdStorage::DropCache(FileId file) {
  TF_LOOKUP_OR_RETURN(e, file, "fadvise");
  ::fdatasync(e.fd);
  int rc = ::posix_fadvise(e.fd, 0, 0, POSIX_FADV_DONTNEED);
  if (rc != 0) return FromErrno(rc, "fadvise DONTNEED '" + e.path + "'");
  return Status::Ok();
}

Status FdStorage::CreateDir(const std::string& path) {
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    cur = path.substr(0, pos);
    if (cur.empty()) continue;
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) return FromErrno(errno, "mkdir '" + cur + "'");
  }
  return Status::Ok();
}

Status FdStorage::SyncDir(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return FromErrno(errno, "open directory '" + path + "'");
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return FromErrno(err, "fsync directory '" + path + "'");
  return Status::Ok();
}

Status FdStorage::Rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) return FromErrno(errno, "rename '" + from + "' to '" + to + "'");
  return Status::Ok();
}

Status FdStorage::Remove(const std::string& path) {
  if (::remove(path.c_str()) != 0) return FromErrno(errno, "remove '" + path + "'");
  return Status::Ok();
}

StatusOr<bool> FdStorage::Exists(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) return true;
  if (errno == ENOENT) return false;
  return FromErrno(errno, "stat '" + path + "'");
}

StatusOr<std::vector<std::string>> FdStorage::List(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return FromErrno(errno, "opendir '" + dir + "'");
  std::vector<std::string> names;
  while (struct dirent* ent = ::readdir(d)) {
    std::string n = ent->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  return names;
}

}  // namespace tierflow::real::internal
