#include "tierflow/real/io_window.h"

#include <algorithm>
#include <utility>

namespace tierflow::real {

std::vector<IoRequest> CutRequests(const std::vector<IoRequest>& requests, int64_t block_bytes) {
  std::vector<IoRequest> pieces;
  for (const IoRequest& r : requests) {
    const int64_t block = block_bytes > 0 ? AlignUp(block_bytes, kDirectAlignment) : std::max<int64_t>(r.length_bytes, 1);
    for (int64_t at = 0; at < r.length_bytes; at += block) {
      IoRequest p = r;
      p.offset_bytes = r.offset_bytes + at;
      p.length_bytes = std::min(block, r.length_bytes - at);
      p.buffer = static_cast<char*>(r.buffer) + at;
      pieces.push_back(p);
    }
  }
  return pieces;
}

IoWindow::IoWindow(Storage* io, std::vector<IoRequest> pieces, size_t window, std::function<void(Status)> done)
    : io_(io), pieces_(std::move(pieces)), window_(window > 0 ? window : std::max<size_t>(1, pieces_.size())), done_(std::move(done)) {}

// The completion and the pumping are one critical section: were the lock let go between them,
// another thread's completion could end the window, and its owner destroy it, while this thread
// waits to take the lock again (ThreadSanitizer found it: two devices' completion threads).
void IoWindow::Push(IoCompletion c) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!c.status.ok() && status_.ok()) status_ = c.status;
  --in_flight_;
  Pump(lock);
}

void IoWindow::Start() {
  std::unique_lock<std::mutex> lock(mu_);
  Pump(lock);
}

void IoWindow::Pump(std::unique_lock<std::mutex>& lock) {
  if (pumping_) return;  // the pumping thread sees this completion when it takes the lock again
  pumping_ = true;
  while (status_.ok() && next_ < pieces_.size() && in_flight_ < window_) {
    const size_t from = next_, count = std::min(pieces_.size() - next_, window_ - in_flight_);
    next_ += count;
    in_flight_ += count;
    lock.unlock();
    Status submitted = io_->Submit({pieces_.data() + from, count}, this);
    lock.lock();
    if (!submitted.ok()) {
      in_flight_ -= count;
      if (status_.ok()) status_ = std::move(submitted);
    }
  }
  pumping_ = false;
  if (reported_ || in_flight_ > 0 || (status_.ok() && next_ < pieces_.size())) return;
  reported_ = true;
  Status result = status_;
  std::function<void(Status)> done = std::move(done_);
  lock.unlock();
  done(std::move(result));  // this window may be destroyed from here on
}

}  // namespace tierflow::real
