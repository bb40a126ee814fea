// The request shape of one read or write task, as the schedule gives it (docs/executor.md):
// each transfer cut into pieces of the task's block_bytes, at most its queue_depth of them in
// flight — DeepSpeed's aio handle (block_size, queue_depth). The executor runs every read and
// write task through one IoWindow, so that `tierflow run` executes the I/O the simulator timed.
//
// Thread safety: Push is called by storage back-end threads (or inside Submit, re-entrantly,
// by a back-end that completes synchronously); one thread submits at a time, and the loop, not
// the stack, takes the next pieces. `done` runs once, on whichever thread completes the window;
// the window may be destroyed from then on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "tierflow/core/status.h"
#include "tierflow/real/storage.h"

namespace tierflow::real {

// Cuts each request into pieces of `block_bytes` (rounded up to kDirectAlignment, so the pieces
// of an O_DIRECT request stay aligned; <= 0: whole requests), in order.
std::vector<IoRequest> CutRequests(const std::vector<IoRequest>& requests, int64_t block_bytes);

class IoWindow final : public CompletionSink {
 public:
  // `window` pieces in flight at most (0: all at once). `done` gets OK, or the first failure:
  // a piece's status or a Submit error, after which nothing more is submitted and done waits
  // for the pieces already in flight.
  IoWindow(Storage* io, std::vector<IoRequest> pieces, size_t window, std::function<void(Status)> done);
  IoWindow(const IoWindow&) = delete;
  IoWindow& operator=(const IoWindow&) = delete;

  void Start();
  void Push(IoCompletion c) override;

 private:
  // With the lock held; returns with it let go or still held, touching nothing after the window
  // is done.
  void Pump(std::unique_lock<std::mutex>& lock);

  Storage* io_;
  std::vector<IoRequest> pieces_;
  size_t window_;
  std::function<void(Status)> done_;
  std::mutex mu_;
  size_t next_ = 0, in_flight_ = 0;
  bool pumping_ = false, reported_ = false;
  Status status_;
};

}  // namespace tierflow::real
