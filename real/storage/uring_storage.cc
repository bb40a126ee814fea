// The io_uring back-end: one ring and one service thread per device. The thread runs the loop of
// liburing's examples — fill the submission queue to the queue depth (reads first), submit once,
// reap — with each piece's state in user_data. Short transfers and -EAGAIN are requeued at the
// front of their queue; a transfer that makes no progress fails naming file, device and offset.
// Submitters wake the thread through an eventfd that the ring itself polls, so the thread only
// ever blocks inside io_uring_submit_and_wait.
//
// Fixed buffers: RegisterMemory'd regions go into a sparse buffer table (READ_FIXED/WRITE_FIXED
// for pieces inside one); fixed files: every open file is installed in a sparse file table at
// its FileId. Both fall back to the plain ops when the kernel refuses (old kernel, memlock).
#include <liburing.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <thread>

#include "fd_storage.h"
#include "io_common.h"

namespace tierflow::real {
namespace internal {
namespace {

constexpr uint64_t kWakeTag = 1;  // user_data of the eventfd poll (pieces are pointers, never 1)
constexpr unsigned kFixedFiles = 4096;
constexpr unsigned kFixedBuffers = 64;

struct Region {
  char* data = nullptr;
  int64_t size_bytes = 0;
};

class UringStorage;

class Ring {
 public:
  Ring(int32_t device, const StorageOptions& options) : device_(device), options_(options) {}
  ~Ring() {
    if (thread_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
      }
      Wake();
      thread_.join();
    }
    if (ring_ok_) io_uring_queue_exit(&ring_);
    if (efd_ >= 0) ::close(efd_);
  }

  // Starts the ring's thread, which creates the ring itself: the ring is set up single-issuer
  // with deferred task running (completions are processed only when the thread waits), falling
  // back to cooperative task running, then to plain, on older kernels.
  Status Init() {
    efd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (efd_ < 0) return FromErrno(errno, "eventfd for device " + std::to_string(device_));
    std::promise<Status> ready;
    auto started = ready.get_future();
    thread_ = std::thread([this, &ready] {
      Status st = CreateRing();
      bool ok = st.ok();
      ready.set_value(st);
      if (ok) Loop();
    });
    Status st = started.get();
    if (!st.ok()) {
      thread_.join();
      return st;
    }
    return Status::Ok();
  }

  void InstallFile(FileId id, int fd) {
    if (!fixed_files_ || id < 0 || static_cast<unsigned>(id) >= kFixedFiles) return;
    RunOnRing([this, id, fd] {
      int f = fd;
      if (io_uring_register_files_update(&ring_, id, &f, 1) == 1) {
        if (static_cast<size_t>(id) >= installed_.size()) installed_.resize(id + 1, false);
        installed_[id] = true;
      }
    });
  }
  void RemoveFile(FileId id) {
    RunOnRing([this, id] {
      if (static_cast<size_t>(id) < installed_.size() && installed_[id]) {
        int f = -1;
        io_uring_register_files_update(&ring_, id, &f, 1);
        installed_[id] = false;
      }
    });
  }
  // Installs a buffer in the fixed-buffer table slot (when the kernel accepts it).
  void InstallBuffer(int slot, const Region& r) {
    if (!fixed_buffers_ || slot >= static_cast<int>(kFixedBuffers)) return;
    RunOnRing([this, slot, r] {
      iovec iov{r.data, static_cast<size_t>(r.size_bytes)};
      __u64 tag = 0;
      if (io_uring_register_buffers_update_tag(&ring_, slot, &iov, &tag, 1) != 1) return;
      if (static_cast<size_t>(slot) >= buffers_.size()) buffers_.resize(slot + 1);
      buffers_[slot] = r;
    });
  }
  void RemoveBuffer(int slot) {
    RunOnRing([this, slot] {
      if (slot < 0 || static_cast<size_t>(slot) >= buffers_.size() || buffers_[slot].data == nullptr) return;
      iovec iov{nullptr, 0};
      __u64 tag = 0;
      io_uring_register_buffers_update_tag(&ring_, slot, &iov, &tag, 1);
      buffers_[slot] = Region{};
    });
  }

  // One Submit's pieces for this device, queued together: the thread sees all or none of them,
  // so a read in the batch goes ahead of every write in it.
  void Enqueue(const PieceBatch& batch) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      reads_.insert(reads_.end(), batch.reads.begin(), batch.reads.end());
      writes_.insert(writes_.end(), batch.writes.begin(), batch.writes.end());
    }
    Wake();
  }

 private:
  Status CreateRing() {
    unsigned entries = 1;
    while (entries < static_cast<unsigned>(options_.queue_depth) + 1) entries <<= 1;
    int rc = -EINVAL;
    for (unsigned flags : {unsigned{IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN},
                           unsigned{IORING_SETUP_COOP_TASKRUN}, 0u}) {
      io_uring_params params{};
      params.flags = flags;
      rc = io_uring_queue_init_params(entries, &ring_, &params);
      if (rc != -EINVAL) break;
    }
    if (rc < 0) return Unavailable("io_uring_queue_init for device " + std::to_string(device_) + ": " + std::strerror(-rc));
    ring_ok_ = true;
    if (options_.register_files) fixed_files_ = io_uring_register_files_sparse(&ring_, kFixedFiles) == 0;
    if (options_.register_buffers) fixed_buffers_ = io_uring_register_buffers_sparse(&ring_, kFixedBuffers) == 0;
    return Status::Ok();
  }

  // Runs `fn` on the ring's thread (the ring's only issuer) and waits for it.
  void RunOnRing(std::function<void()> fn) {
    // Shared, so that the ring thread never touches the waiter's stack after waking it.
    auto done = std::make_shared<std::promise<void>>();
    auto f = done->get_future();
    {
      std::lock_guard<std::mutex> lock(mu_);
      commands_.push_back([fn = std::move(fn), done] {
        fn();
        done->set_value();
      });
    }
    Wake();
    f.wait();
  }

  void Wake() {
    uint64_t one = 1;
    ssize_t rc = ::write(efd_, &one, sizeof one);
    (void)rc;  // EAGAIN means the counter is already non-zero: the thread will wake anyway
  }

  int FindBuffer(const char* p, int64_t n) const {
    for (size_t i = 0; i < buffers_.size(); ++i) {
      const Region& r = buffers_[i];
      if (r.data != nullptr && p >= r.data && p + n <= r.data + r.size_bytes) return static_cast<int>(i);
    }
    return -1;
  }

  void Prep(io_uring_sqe* sqe, Piece* p) {
    bool read = p->parent->request.op == IoOp::kRead;
    char* buf = p->buffer + p->done_bytes;
    unsigned len = static_cast<unsigned>(p->length_bytes - p->done_bytes);
    uint64_t off = static_cast<uint64_t>(p->offset_bytes + p->done_bytes);
    FileId id = p->parent->request.file;
    p->fixed_file = static_cast<size_t>(id) < installed_.size() && installed_[id] ? id : -1;
    int fd = p->fixed_file >= 0 ? p->fixed_file : p->fd;
    int slot = FindBuffer(buf, len);
    if (slot >= 0) {
      if (read) io_uring_prep_read_fixed(sqe, fd, buf, len, off, slot);
      else io_uring_prep_write_fixed(sqe, fd, buf, len, off, slot);
    } else {
      if (read) io_uring_prep_read(sqe, fd, buf, len, off);
      else io_uring_prep_write(sqe, fd, buf, len, off);
    }
    if (p->fixed_file >= 0) sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data(sqe, p);
  }

  void Loop() {
    bool wake_armed = false;
    int inflight = 0;
    uint64_t drained;
    std::vector<std::pair<Piece*, Status>> finished;
    for (;;) {
      // 0. Registration commands from other threads.
      std::vector<std::function<void()>> commands;
      {
        std::lock_guard<std::mutex> lock(mu_);
        commands.swap(commands_);
      }
      for (auto& c : commands) c();
      // 1. Fill to the queue depth, reads first.
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stop_ && inflight == 0 && reads_.empty() && writes_.empty() && commands_.empty()) break;
        if (!wake_armed) {
          io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
          io_uring_prep_poll_add(sqe, efd_, POLLIN);
          io_uring_sqe_set_data64(sqe, kWakeTag);
          wake_armed = true;
        }
        while (inflight < options_.queue_depth && (!reads_.empty() || !writes_.empty())) {
          io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
          if (sqe == nullptr) break;
          auto& q = !reads_.empty() ? reads_ : writes_;
          Piece* p = q.front();
          q.pop_front();
          Prep(sqe, p);
          ++inflight;
        }
      }
      // 2. Submit once and wait for at least one completion.
      int rc = io_uring_submit_and_wait(&ring_, 1);
      if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
        // The ring itself failed: fail everything queued here rather than hang.
        Status s = IoError(std::string("io_uring_submit on device ") + std::to_string(device_) + ": " + std::strerror(-rc));
        std::lock_guard<std::mutex> lock(mu_);
        for (auto* q : {&reads_, &writes_}) {
          for (Piece* p : *q) finished.emplace_back(p, s);
          q->clear();
        }
      }
      // 3. Reap.
      io_uring_cqe* cqe;
      unsigned head, seen = 0;
      std::vector<Piece*> requeue;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        ++seen;
        if (cqe->user_data == kWakeTag) {
          wake_armed = false;
          while (::read(efd_, &drained, sizeof drained) > 0) {}
          continue;
        }
        auto* p = reinterpret_cast<Piece*>(io_uring_cqe_get_data(cqe));
        --inflight;
        int res = cqe->res;
        if (res == -EAGAIN || res == -EINTR) {
          if (++p->retries < 1000) {
            requeue.push_back(p);
          } else {
            finished.emplace_back(p, FromErrno(-res, DescribePiece(*p) + " (retried 1000 times)"));
          }
        } else if (res < 0) {
          finished.emplace_back(p, FromErrno(-res, DescribePiece(*p)));
        } else if (res == 0 && p->done_bytes < p->length_bytes) {
          finished.emplace_back(p, p->parent->request.op == IoOp::kRead
              ? DataLoss(DescribePiece(*p) + ": end of file after " + std::to_string(p->done_bytes) + " bytes")
              : IoError(DescribePiece(*p) + ": no progress after " + std::to_string(p->done_bytes) + " bytes"));
        } else {
          p->done_bytes += res;
          if (p->done_bytes < p->length_bytes) requeue.push_back(p);  // short: resume
          else finished.emplace_back(p, Status::Ok());
        }
      }
      io_uring_cq_advance(&ring_, seen);
      if (!requeue.empty()) {
        std::lock_guard<std::mutex> lock(mu_);
        for (auto it = requeue.rbegin(); it != requeue.rend(); ++it) {
          auto& q = (*it)->parent->request.op == IoOp::kRead ? reads_ : writes_;
          q.push_front(*it);
        }
      }
      for (auto& [p, s] : finished) FinishPiece(p, s);
      finished.clear();
    }
  }

  int32_t device_;
  StorageOptions options_;
  io_uring ring_{};
  bool ring_ok_ = false;
  int efd_ = -1;
  bool fixed_files_ = false;
  bool fixed_buffers_ = false;
  std::thread thread_;
  std::mutex mu_;  // queues, stop_, commands_
  std::deque<Piece*> reads_, writes_;
  std::vector<std::function<void()>> commands_;
  bool stop_ = false;
  std::vector<bool> installed_;
  std::vector<Region> buffers_;
};

class UringStorage final : public FdStorage {
 public:
  explicit UringStorage(const StorageOptions& options) : options_(options) {
    if (options_.queue_depth < 1) options_.queue_depth = 1;
    if (options_.request_bytes < kDirectAlignment) options_.request_bytes = kDirectAlignment;
  }
  ~UringStorage() override { rings_.clear(); }
  std::string name() const override { return "uring"; }

  // Creates the ring of device 0 so that construction fails when io_uring is unusable.
  Status Init() { return RingFor(0).status(); }

  // The whole batch is split first and then queued once per device (Ring::Enqueue).
  Status Submit(std::span<const IoRequest> requests, CompletionSink* queue) override {
    double now = MonotonicSeconds();
    std::map<Ring*, PieceBatch> batches;
    Status status;
    for (const IoRequest& r : requests) {
      Entry e = Lookup(r.file);
      if (e.fd < 0) {
        CompleteNow(r, queue, InvalidArgument(std::string(IoOpName(r.op)) + ": file id " + std::to_string(r.file) + " is not open"), 0);
        continue;
      }
      Status v = ValidateRequest(r, e.path, e.direct, e.alignment);
      if (!v.ok()) {
        CompleteNow(r, queue, v, 0);
        continue;
      }
      auto ring = RingFor(e.device);
      if (!ring.ok()) {
        status = ring.status();  // this and the later requests are not queued; the earlier are
        break;
      }
      auto* parent = new Parent;
      parent->request = r;
      parent->queue = queue;
      parent->path = e.path;
      parent->device = e.device;
      parent->submit_s = now;
      batches[*ring].Add(parent, e.fd, options_.request_bytes);
    }
    for (auto& [ring, batch] : batches) ring->Enqueue(batch);
    return status;
  }

  // The rings are told outside mu_: a ring thread may be inside a sink that calls Submit.
  Status RegisterMemory(void* data, int64_t size_bytes) override {
    std::vector<Ring*> rings;
    int slot;
    Region region{static_cast<char*>(data), size_bytes};
    {
      std::lock_guard<std::mutex> lock(mu_);
      slot = static_cast<int>(regions_.size());
      for (size_t i = 0; i < regions_.size(); ++i) {
        if (regions_[i].data == nullptr) { slot = static_cast<int>(i); break; }
      }
      if (slot >= static_cast<int>(kFixedBuffers)) return Status::Ok();  // table full: plain ops
      if (static_cast<size_t>(slot) >= regions_.size()) regions_.resize(slot + 1);
      regions_[slot] = region;
      for (auto& [dev, ring] : rings_) rings.push_back(ring.get());
    }
    for (Ring* ring : rings) ring->InstallBuffer(slot, region);
    return Status::Ok();
  }
  void UnregisterMemory(void* data) override {
    std::vector<Ring*> rings;
    std::vector<int> slots;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < regions_.size(); ++i) {
        if (regions_[i].data == data) slots.push_back(static_cast<int>(i));
      }
      for (auto& [dev, ring] : rings_) rings.push_back(ring.get());
    }
    for (Ring* ring : rings) {
      for (int slot : slots) ring->RemoveBuffer(slot);
    }
    // Only now may the slots be reused.
    std::lock_guard<std::mutex> lock(mu_);
    for (int slot : slots) regions_[slot] = Region{};
  }

 protected:
  void OnOpen(FileId id, const Entry& e) override {
    auto ring = RingFor(e.device);
    if (ring.ok()) (*ring)->InstallFile(id, e.fd);
  }
  void OnClose(FileId id, const Entry& e) override {
    auto ring = RingFor(e.device);
    if (ring.ok()) (*ring)->RemoveFile(id);
  }

 private:
  StatusOr<Ring*> RingFor(int32_t device) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = rings_.find(device);
    if (it != rings_.end()) return it->second.get();
    auto ring = std::make_unique<Ring>(device, options_);
    TF_RETURN_IF_ERROR(ring->Init());
    for (size_t i = 0; i < regions_.size(); ++i) {
      if (regions_[i].data != nullptr) ring->InstallBuffer(static_cast<int>(i), regions_[i]);
    }
    Ring* raw = ring.get();
    rings_[device] = std::move(ring);
    return raw;
  }

  StorageOptions options_;
  std::mutex mu_;
  std::map<int32_t, std::unique_ptr<Ring>> rings_;
  std::vector<Region> regions_;
};

}  // namespace
}  // namespace internal

StatusOr<std::unique_ptr<Storage>> NewUringStorage(const StorageOptions& options) {
  auto s = std::make_unique<internal::UringStorage>(options);
  TF_RETURN_IF_ERROR(s->Init());
  return std::unique_ptr<Storage>(std::move(s));
}

}  // namespace tierflow::real
