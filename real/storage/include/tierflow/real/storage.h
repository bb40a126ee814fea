// Storage: how the real executor reaches files — the one interface behind which every back-end
// (io_uring, posix threads, in-memory, fault-injecting wrapper) sits, in the manner of leveldb's Env.
//
// A Storage owns open files, named by a FileId, each opened on a *device* (a small integer: one
// per SSD or tier; the io_uring back-end keeps one ring per device). Data moves asynchronously:
// Submit() queues requests and returns at once; each request later produces exactly one
// IoCompletion, carrying the request's tag, in the CompletionQueue the submitter named. A
// completion's status is OK only when all `length_bytes` were transferred: back-ends resubmit
// short transfers and -EAGAIN themselves and report an error only when the OS fails the request
// or a resubmission makes no progress (a read past the end of a file, a full disk). Requests
// longer than the back-end's request size are cut into pieces that run in parallel; the request
// still completes once. Queued reads are started ahead of queued writes; one Submit's requests
// are queued together (per device), so a read in it goes ahead of every write in it.
//
// Files opened with `direct` (O_DIRECT) require buffers, offsets and lengths aligned to the
// file's direct-I/O alignment (OpenFile::alignment: what the kernel reports for the file, often
// the device's 512-byte logical block, else kDirectAlignment); a misaligned request completes
// with InvalidArgument. When the file system
// refuses O_DIRECT (tmpfs: EINVAL), Open() fails with Unavailable unless `direct_fallback` is set,
// in which case the file is opened buffered and OpenFile reports `direct == false`.
//
// File-system operations (Allocate, Sync, Rename, Remove, ...) are synchronous.
//
// Thread safety: every method of every back-end may be called from any thread at once, including
// Submit() from several submitters with their own completion queues. A FileId must not be closed
// while requests on it are in flight. CompletionQueue is thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "tierflow/core/status.h"

namespace tierflow::real {

// The direct-I/O alignment assumed where a file does not report its own (and the memory
// back-end's): a page, which every device accepts.
inline constexpr int64_t kDirectAlignment = 4096;

inline int64_t AlignUp(int64_t n, int64_t a) { return (n + a - 1) / a * a; }
inline bool IsAligned(int64_t n, int64_t a) { return n % a == 0; }
inline bool IsAlignedPtr(const void* p, int64_t a) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(a) == 0;
}

// Seconds on a monotonic clock shared by every back-end (for latencies and trace records).
double MonotonicSeconds();

enum class IoOp : uint8_t { kRead, kWrite };
const char* IoOpName(IoOp op);

using FileId = int32_t;

struct OpenOptions {
  int32_t device = 0;            // which device (ring, queue) serves this file
  bool create = false;           // create if missing
  bool truncate = false;         // truncate to 0 on open
  bool direct = true;            // O_DIRECT
  bool direct_fallback = false;  // open buffered when the file system refuses O_DIRECT
  bool read_only = false;
};

struct OpenFile {
  FileId id = -1;
  bool direct = false;  // whether O_DIRECT is actually in effect
  // With `direct`: the alignment of offsets, lengths and buffers the file needs, the larger of
  // the kernel's direct-I/O offset and memory alignments (statx STATX_DIOALIGN), or
  // kDirectAlignment where the kernel does not say.
  int64_t alignment = kDirectAlignment;
};

struct IoRequest {
  IoOp op = IoOp::kRead;
  FileId file = -1;
  int64_t offset_bytes = 0;
  int64_t length_bytes = 0;
  void* buffer = nullptr;  // caller-owned; must stay valid until the completion arrives
  uint64_t tag = 0;        // returned in the completion
};

struct IoCompletion {
  uint64_t tag = 0;
  Status status;            // OK iff all length_bytes were transferred
  int64_t bytes = 0;        // bytes transferred
  double submit_s = 0;      // MonotonicSeconds() when the back-end accepted the request
  double complete_s = 0;    // ... and when its last piece completed
};

// Where completions are delivered. Push() is called on a back-end thread (or inside Submit for
// the memory back-end); it must be short and must not block on I/O. It may call Submit() again
// (a closed loop that keeps a queue depth without a thread hand-off, as the disk probe does).
class CompletionSink {
 public:
  virtual ~CompletionSink() = default;
  virtual void Push(IoCompletion completion) = 0;
};

// The usual sink: completions wait here until the submitter collects them. One per submitter
// (or shared, since tags tell them apart).
class CompletionQueue final : public CompletionSink {
 public:
  void Push(IoCompletion completion) override;
  // Blocks until at least `min_count` completions are available (or timeout), then moves up to
  // `max_count` of them to `out` (appending). Returns how many were moved.
  size_t Wait(std::vector<IoCompletion>* out, size_t min_count, size_t max_count = SIZE_MAX,
              double timeout_s = -1);
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<IoCompletion> ready_;
};

class Storage {
 public:
  virtual ~Storage() = default;
  // "uring", "posix", "memory", "fault(<inner>)".
  virtual std::string name() const = 0;

  virtual StatusOr<OpenFile> Open(const std::string& path, const OpenOptions& options) = 0;
  virtual Status Close(FileId file) = 0;
  // The path a FileId was opened with (for messages); "" when unknown.
  virtual std::string PathOf(FileId file) const = 0;
  virtual int32_t DeviceOf(FileId file) const = 0;

  // Queues requests; each produces one completion in `queue`. Returns an error only when the
  // back-end cannot accept requests at all (then none of them were queued).
  virtual Status Submit(std::span<const IoRequest> requests, CompletionSink* queue) = 0;

  // Lets a back-end pre-register memory for faster I/O (io_uring fixed buffers). Optional:
  // requests work on any buffer. `data` must stay valid until UnregisterMemory or destruction.
  virtual Status RegisterMemory(void* data, int64_t size_bytes) {
    (void)data, (void)size_bytes;
    return Status::Ok();
  }
  virtual void UnregisterMemory(void* data) { (void)data; }

  // Synchronous file and directory operations.
  virtual Status Allocate(FileId file, int64_t size_bytes) = 0;  // preallocate (fallocate)
  virtual Status Truncate(FileId file, int64_t size_bytes) = 0;
  virtual StatusOr<int64_t> FileSize(FileId file) = 0;
  virtual Status Sync(FileId file) = 0;                             // fsync
  virtual Status DropCache(FileId file) { (void)file; return Status::Ok(); }  // fadvise DONTNEED
  virtual Status CreateDir(const std::string& path) = 0;            // mkdir -p
  virtual Status SyncDir(const std::string& path) = 0;
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  virtual Status Remove(const std::string& path) = 0;               // a file or an empty dir
  virtual StatusOr<bool> Exists(const std::string& path) = 0;
  virtual StatusOr<std::vector<std::string>> List(const std::string& dir) = 0;  // names only
};

struct StorageOptions {
  int32_t queue_depth = 32;              // in-flight requests per device
  int64_t request_bytes = 1 << 20;       // requests longer than this are split
  int32_t threads = 4;                   // posix: worker threads per device
  bool register_buffers = true;          // uring: fixed buffers for RegisterMemory'd memory
  bool register_files = true;            // uring: fixed files
};

// The io_uring back-end. Unavailable when liburing was not compiled in or io_uring_queue_init
// fails at run time (kernel too old, blocked by seccomp or io_uring_disabled).
StatusOr<std::unique_ptr<Storage>> NewUringStorage(const StorageOptions& options = {});
// The reference back-end: pread/pwrite on worker threads (per device), always available.
std::unique_ptr<Storage> NewPosixStorage(const StorageOptions& options = {});
// Files in memory; paths are keys. Honors `direct` alignment checks so that callers' alignment
// handling is tested. Requests complete synchronously inside Submit().
std::unique_ptr<Storage> NewMemoryStorage();
// The back-end by name: "uring", "posix", "memory"; "auto" = uring when available, else posix.
StatusOr<std::unique_ptr<Storage>> NewStorage(const std::string& name, const StorageOptions& options);
// Names of back-ends compiled in and usable here.
std::vector<std::string> AvailableStorageNames();

// ---- Fault injection ----------------------------------------------------------------------

enum class FaultKind : uint8_t {
  kError,  // the operation fails with `error` (an errno: EIO, ENOSPC, ...)
  kShort,  // a read/write transfers only `short_bytes` and then fails as a persistent short I/O
  kDelay,  // the operation is delayed by `delay_s`, then proceeds
  kCrash,  // this operation and every later one fails with EIO (a process crash at this point)
};

// Which operations a rule matches. Every operation the wrapper sees (open, each read or write
// request, allocate, sync, rename, remove, create/sync dir) counts as one "I/O".
enum class FaultOpMask : uint32_t {
  kRead = 1,
  kWrite = 2,
  kSync = 4,      // Sync and SyncDir
  kMetadata = 8,  // Open, Allocate, Truncate, Rename, Remove, CreateDir
  kAll = 15,
};

struct FaultRule {
  FaultKind kind = FaultKind::kError;
  uint32_t ops = static_cast<uint32_t>(FaultOpMask::kAll);
  std::string path_contains;   // "" matches every path
  int64_t skip = 0;            // let this many matching operations through first
  int64_t count = 1;           // then fault this many (-1: all later ones)
  int error = 5;               // EIO
  int64_t short_bytes = 0;
  double delay_s = 0;
};

class FaultInjectingStorage : public Storage {
 public:
  // Adds a rule; rules are checked in order, the first that fires applies.
  virtual void AddRule(const FaultRule& rule) = 0;
  virtual void ClearRules() = 0;
  // How many operations (as counted for FaultRule::skip) have been seen, and how many faulted.
  virtual int64_t operations_seen() const = 0;
  virtual int64_t faults_injected() const = 0;
};

// Wraps `inner` (not owned; must outlive the wrapper).
std::unique_ptr<FaultInjectingStorage> NewFaultInjectingStorage(Storage* inner);

// ---- Helpers built on the interface ------------------------------------------------------

// Submits `requests` and waits for all of them; returns the first error (all are waited for).
// `context` prefixes error messages.
Status RunRequests(Storage& storage, std::span<const IoRequest> requests);
// Reads or writes one whole range synchronously.
Status ReadAt(Storage& storage, FileId file, int64_t offset_bytes, void* buffer, int64_t length_bytes);
Status WriteAt(Storage& storage, FileId file, int64_t offset_bytes, const void* buffer,
               int64_t length_bytes);

}  // namespace tierflow::real
