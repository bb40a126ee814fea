// The reference back-end: per device, a few worker threads doing pread/pwrite. Reads are taken
// ahead of writes; short transfers continue where they stopped; a transfer that makes no
// progress (end of file, full disk) fails naming the file, device and offset.
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <map>
#include <thread>
#include <vector>

#include "fd_storage.h"
#include "io_common.h"

namespace tierflow::real {
namespace internal {
namespace {

class PosixStorage final : public FdStorage {
 public:
  explicit PosixStorage(const StorageOptions& options) : options_(options) {
    if (options_.threads < 1) options_.threads = 1;
    if (options_.request_bytes < kDirectAlignment) options_.request_bytes = kDirectAlignment;
  }
  ~PosixStorage() override {
    for (auto& [id, dev] : devices_) {
      {
        std::lock_guard<std::mutex> lock(dev->mu);
        dev->stop = true;
      }
      dev->cv.notify_all();
      for (auto& t : dev->workers) t.join();
    }
  }
  std::string name() const override { return "posix"; }

  // The whole batch is split first and then queued once per device, under its lock: a worker
  // sees all of a batch's pieces or none, so a read in it goes ahead of every write in it.
  Status Submit(std::span<const IoRequest> requests, CompletionSink* queue) override {
    double now = MonotonicSeconds();
    std::map<Device*, PieceBatch> batches;
    for (const IoRequest& r : requests) {
      Entry e = Lookup(r.file);
      if (e.fd < 0) {
        CompleteNow(r, queue, InvalidArgument(std::string(IoOpName(r.op)) + ": file id " +
                                              std::to_string(r.file) + " is not open"), 0);
        continue;
      }
      Status v = ValidateRequest(r, e.path, e.direct, e.alignment);
      if (!v.ok()) {
        CompleteNow(r, queue, v, 0);
        continue;
      }
      auto* parent = new Parent;
      parent->request = r;
      parent->queue = queue;
      parent->path = e.path;
      parent->device = e.device;
      parent->submit_s = now;
      batches[DeviceFor(e.device)].Add(parent, e.fd, options_.request_bytes);
    }
    for (auto& [dev, batch] : batches) {
      {
        std::lock_guard<std::mutex> lock(dev->mu);
        dev->reads.insert(dev->reads.end(), batch.reads.begin(), batch.reads.end());
        dev->writes.insert(dev->writes.end(), batch.writes.begin(), batch.writes.end());
      }
      if (batch.reads.size() + batch.writes.size() == 1) dev->cv.notify_one(); else dev->cv.notify_all();
    }
    return Status::Ok();
  }

 private:
  struct Device {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Piece*> reads, writes;
    bool stop = false;
    std::vector<std::thread> workers;
  };

  Device* DeviceFor(int32_t id) {
    std::lock_guard<std::mutex> lock(devices_mu_);
    auto& dev = devices_[id];
    if (!dev) {
      dev = std::make_unique<Device>();
      for (int i = 0; i < options_.threads; ++i) dev->workers.emplace_back([d = dev.get()] { Work(d); });
    }
    return dev.get();
  }

  static void Work(Device* dev) {
    for (;;) {
      Piece* p = nullptr;
      {
        std::unique_lock<std::mutex> lock(dev->mu);
        dev->cv.wait(lock, [&] { return dev->stop || !dev->reads.empty() || !dev->writes.empty(); });
        if (!dev->reads.empty()) {
          p = dev->reads.front();
          dev->reads.pop_front();
        } else if (!dev->writes.empty()) {
          p = dev->writes.front();
          dev->writes.pop_front();
        } else {
          return;  // stop, nothing queued
        }
      }
      FinishPiece(p, Transfer(p));
    }
  }

  static Status Transfer(Piece* p) {
    bool read = p->parent->request.op == IoOp::kRead;
    while (p->done_bytes < p->length_bytes) {
      ssize_t n = read ? ::pread(p->fd, p->buffer + p->done_bytes, p->length_bytes - p->done_bytes,
                                 p->offset_bytes + p->done_bytes)
                       : ::pwrite(p->fd, p->buffer + p->done_bytes, p->length_bytes - p->done_bytes,
                                  p->offset_bytes + p->done_bytes);
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return FromErrno(errno, DescribePiece(*p));
      }
      if (n == 0) {
        return read ? DataLoss(DescribePiece(*p) + ": end of file after " + std::to_string(p->done_bytes) + " bytes")
                    : IoError(DescribePiece(*p) + ": no progress after " + std::to_string(p->done_bytes) + " bytes");
      }
      p->done_bytes += n;
    }
    return Status::Ok();
  }

  StorageOptions options_;
  std::mutex devices_mu_;
  std::map<int32_t, std::unique_ptr<Device>> devices_;
};

}  // namespace
}  // namespace internal

std::unique_ptr<Storage> NewPosixStorage(const StorageOptions& options) {
  return std::make_unique<internal::PosixStorage>(options);
}

}  // namespace tierflow::real
