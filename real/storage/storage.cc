#include <chrono>
#include <cstring>

#include "tierflow/core/text.h"
#include "tierflow/real/storage.h"

namespace tierflow::real {

double MonotonicSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

const char* IoOpName(IoOp op) { return op == IoOp::kRead ? "read" : "write"; }

void CompletionQueue::Push(IoCompletion completion) {
  // Notify under the lock: the waiter may destroy the queue as soon as it sees the completion.
  std::lock_guard<std::mutex> lock(mu_);
  ready_.push_back(std::move(completion));
  cv_.notify_all();
}

size_t CompletionQueue::Wait(std::vector<IoCompletion>* out, size_t min_count, size_t max_count,
                             double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  auto ready = [&] { return ready_.size() >= min_count; };
  if (timeout_s < 0) {
    cv_.wait(lock, ready);
  } else {
    cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), ready);
  }
  size_t n = std::min(max_count, ready_.size());
  for (size_t i = 0; i < n; ++i) {
    out->push_back(std::move(ready_.front()));
    ready_.pop_front();
  }
  return n;
}

size_t CompletionQueue::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ready_.size();
}

Status RunRequests(Storage& storage, std::span<const IoRequest> requests) {
  if (requests.empty()) return Status::Ok();
  CompletionQueue q;
  TF_RETURN_IF_ERROR(storage.Submit(requests, &q));
  std::vector<IoCompletion> done;
  done.reserve(requests.size());
  while (done.size() < requests.size()) q.Wait(&done, 1);
  for (const IoCompletion& c : done) {
    if (!c.status.ok()) return c.status;
  }
  return Status::Ok();
}

Status ReadAt(Storage& storage, FileId file, int64_t offset_bytes, void* buffer, int64_t length_bytes) {
  IoRequest r{IoOp::kRead, file, offset_bytes, length_bytes, buffer, 0};
  return RunRequests(storage, {&r, 1});
}

Status WriteAt(Storage& storage, FileId file, int64_t offset_bytes, const void* buffer, int64_t length_bytes) {
  IoRequest r{IoOp::kWrite, file, offset_bytes, length_bytes, const_cast<void*>(buffer), 0};
  return RunRequests(storage, {&r, 1});
}

#ifndef TIERFLOW_HAVE_URING
StatusOr<std::unique_ptr<Storage>> NewUringStorage(const StorageOptions&) {
  return Unavailable("the io_uring back-end was not compiled in (liburing-dev missing at build time)");
}
#endif

StatusOr<std::unique_ptr<Storage>> NewStorage(const std::string& name, const StorageOptions& options) {
  if (name == "uring") return NewUringStorage(options);
  if (name == "posix") return NewPosixStorage(options);
  if (name == "memory") return NewMemoryStorage();
  if (name == "auto") {
    auto u = NewUringStorage(options);
    if (u.ok()) return u;
    return NewPosixStorage(options);
  }
  return InvalidArgument("unknown storage back-end " + Quoted(name) + " (known: uring, posix, memory, auto)");
}

std::vector<std::string> AvailableStorageNames() {
  std::vector<std::string> names;
  if (NewUringStorage(StorageOptions{}).ok()) names.push_back("uring");
  names.push_back("posix");
  names.push_back("memory");
  return names;
}

}  // namespace tierflow::real
