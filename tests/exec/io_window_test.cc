// IoWindow, the request shape of the executor's reads and writes: pieces of block_bytes, at most
// queue_depth in flight, one completion event — checked against a storage whose completions the
// test delivers by hand (and against the memory back-end, which completes inside Submit).
#include "tierflow/real/io_window.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace tierflow::real {
namespace {

// One file (id 0) and no file-system operations: what the fakes below share; each decides how
// Submit completes.
class OneFileStorage : public Storage {
 public:
  StatusOr<OpenFile> Open(const std::string&, const OpenOptions&) override { return OpenFile{0, false}; }
  Status Close(FileId) override { return Status::Ok(); }
  std::string PathOf(FileId) const override { return name() + ".bin"; }
  int32_t DeviceOf(FileId) const override { return 0; }
  Status Allocate(FileId, int64_t) override { return Status::Ok(); }
  Status Truncate(FileId, int64_t) override { return Status::Ok(); }
  StatusOr<int64_t> FileSize(FileId) override { return int64_t{0}; }
  Status Sync(FileId) override { return Status::Ok(); }
  Status CreateDir(const std::string&) override { return Status::Ok(); }
  Status SyncDir(const std::string&) override { return Status::Ok(); }
  Status Rename(const std::string&, const std::string&) override { return Status::Ok(); }
  Status Remove(const std::string&) override { return Status::Ok(); }
  StatusOr<bool> Exists(const std::string&) override { return false; }
  StatusOr<std::vector<std::string>> List(const std::string&) override { return std::vector<std::string>{}; }
};

// Holds every submitted request until the test completes it; records the most in flight.
class HeldStorage final : public OneFileStorage {
 public:
  std::string name() const override { return "held"; }
  Status Submit(std::span<const IoRequest> requests, CompletionSink* sink) override {
    if (refuse) return Unavailable("held: refusing requests");
    for (const IoRequest& r : requests) held.push_back({r, sink});
    most_in_flight = std::max(most_in_flight, held.size());
    submitted.insert(submitted.end(), requests.begin(), requests.end());
    return Status::Ok();
  }
  // Completes the oldest held request (with `status`).
  void CompleteOne(Status status = Status::Ok()) {
    ASSERT_FALSE(held.empty());
    auto [r, sink] = held.front();
    held.pop_front();
    IoCompletion c;
    c.tag = r.tag;
    c.bytes = status.ok() ? r.length_bytes : 0;
    c.status = std::move(status);
    sink->Push(std::move(c));
  }

  std::deque<std::pair<IoRequest, CompletionSink*>> held;
  std::vector<IoRequest> submitted;
  size_t most_in_flight = 0;
  bool refuse = false;
};

TEST(IoWindowTest, CutsRequestsIntoBlocksInOrder) {
  std::vector<char> a(40960), b(8192);
  const std::vector<IoRequest> requests = {{IoOp::kRead, 3, 8192, 40960, a.data(), 0}, {IoOp::kRead, 3, 0, 8192, b.data(), 0}};
  const std::vector<IoRequest> pieces = CutRequests(requests, 16384);
  ASSERT_EQ(pieces.size(), 4u);  // 16 + 16 + 8 KiB, then 8 KiB
  EXPECT_EQ(pieces[0].offset_bytes, 8192);
  EXPECT_EQ(pieces[1].offset_bytes, 8192 + 16384);
  EXPECT_EQ(pieces[2].length_bytes, 8192);
  EXPECT_EQ(pieces[2].buffer, a.data() + 32768);
  EXPECT_EQ(pieces[3].buffer, b.data());
  // A block that is not a page multiple is rounded up, so O_DIRECT pieces stay aligned.
  EXPECT_EQ(CutRequests(requests, 5000)[0].length_bytes, 8192);
  EXPECT_EQ(CutRequests(requests, 0).size(), 2u);  // no block: whole requests
}

TEST(IoWindowTest, KeepsAtMostQueueDepthInFlightAndReportsOnceAtTheEnd) {
  HeldStorage io;
  std::vector<char> buf(10 * 4096);
  std::vector<IoRequest> pieces = CutRequests({{IoOp::kWrite, 0, 0, 10 * 4096, buf.data(), 0}}, 4096);
  int reports = 0;
  std::optional<Status> result;
  IoWindow w(&io, pieces, 3, [&](Status s) {
    ++reports;
    result = std::move(s);
  });
  w.Start();
  EXPECT_EQ(io.held.size(), 3u);
  for (int i = 0; i < 9; ++i) {
    io.CompleteOne();
    EXPECT_EQ(reports, 0) << "after " << i + 1 << " completions";
  }
  io.CompleteOne();
  EXPECT_EQ(reports, 1);
  ASSERT_TRUE(result.has_value());
  EXPECT_TRUE(result->ok()) << result->ToString();
  EXPECT_EQ(io.most_in_flight, 3u);
  ASSERT_EQ(io.submitted.size(), 10u);
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(io.submitted[i].offset_bytes, static_cast<int64_t>(i) * 4096) << "in order";
}

TEST(IoWindowTest, AFailureStopsSubmittingAndIsReportedAfterThePiecesInFlight) {
  HeldStorage io;
  std::vector<char> buf(10 * 4096);
  int reports = 0;
  std::optional<Status> result;
  IoWindow w(&io, CutRequests({{IoOp::kRead, 0, 0, 10 * 4096, buf.data(), 0}}, 4096), 2, [&](Status s) {
    ++reports;
    result = std::move(s);
  });
  w.Start();
  io.CompleteOne(IoError("held.bin: EIO"));
  EXPECT_EQ(io.held.size(), 1u) << "nothing submitted after the failure";
  EXPECT_EQ(reports, 0) << "one piece still in flight";
  io.CompleteOne();
  EXPECT_EQ(reports, 1);
  ASSERT_TRUE(result.has_value());
  EXPECT_NE(result->message().find("EIO"), std::string::npos) << result->ToString();
  EXPECT_EQ(io.submitted.size(), 2u);
}

TEST(IoWindowTest, ASubmitErrorIsTheResult) {
  HeldStorage io;
  io.refuse = true;
  std::vector<char> buf(4096);
  std::optional<Status> result;
  IoWindow w(&io, CutRequests({{IoOp::kRead, 0, 0, 4096, buf.data(), 0}}, 4096), 1, [&](Status s) { result = std::move(s); });
  w.Start();
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->code(), StatusCode::kUnavailable) << result->ToString();
}

// Completes every request inside Submit, as the memory back-end does, and records how deeply
// Submit calls nest (a completion that submitted the next piece itself would nest them).
class SyncStorage final : public OneFileStorage {
 public:
  std::string name() const override { return "sync"; }
  Status Submit(std::span<const IoRequest> requests, CompletionSink* sink) override {
    deepest = std::max(deepest, ++depth);
    for (const IoRequest& r : requests) {
      ++completed;
      IoCompletion c;
      c.tag = r.tag;
      c.bytes = r.length_bytes;
      sink->Push(std::move(c));
    }
    --depth;
    return Status::Ok();
  }

  int depth = 0, deepest = 0;
  int64_t completed = 0;
};

TEST(IoWindowTest, ABackEndCompletingInsideSubmitDoesNotNestSubmits) {
  // 1000 pieces at depth 1 would be 1000 nested Submit/Push frames if each completion submitted
  // the next piece itself; the pumping loop takes them one after another instead.
  SyncStorage io;
  std::vector<char> buf(1000 * 4096);
  std::optional<Status> result;
  IoWindow w(&io, CutRequests({{IoOp::kRead, 0, 0, 1000 * 4096, buf.data(), 0}}, 4096), 1,
             [&](Status s) { result = std::move(s); });
  w.Start();
  ASSERT_TRUE(result.has_value());
  EXPECT_TRUE(result->ok()) << result->ToString();
  EXPECT_EQ(io.completed, 1000);
  EXPECT_EQ(io.deepest, 1);
}

// Two completion threads, as two devices' io_uring rings are: Submit hands the requests to them
// in turn, and each pushes its completions as soon as it takes them.
class TwoThreadStorage final : public OneFileStorage {
 public:
  TwoThreadStorage() {
    for (int i = 0; i < 2; ++i) threads_[i] = std::thread([this, i] { Loop(i); });
  }
  ~TwoThreadStorage() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  std::string name() const override { return "two-threads"; }
  Status Submit(std::span<const IoRequest> requests, CompletionSink* sink) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const IoRequest& r : requests) queues_[next_++ % 2].push_back({r, sink});
    }
    cv_.notify_all();
    return Status::Ok();
  }

 private:
  void Loop(int i) {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || !queues_[i].empty(); });
      if (queues_[i].empty()) return;
      auto [r, sink] = queues_[i].front();
      queues_[i].pop_front();
      lock.unlock();
      IoCompletion c;
      c.tag = r.tag;
      c.bytes = r.length_bytes;
      sink->Push(std::move(c));
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<IoRequest, CompletionSink*>> queues_[2];
  size_t next_ = 0;
  bool stop_ = false;
  std::thread threads_[2];
};

TEST(IoWindowTest, ItsOwnerMayDestroyItTheMomentItReportsWhileTwoThreadsComplete) {
  // The executor destroys a window as soon as its completion event is popped. Each window here
  // has one piece on each thread, completing together; a thread still inside Push after the
  // other one reported would touch a destroyed window (ThreadSanitizer and AddressSanitizer
  // name it; the executor's data-parallel test met it under ThreadSanitizer).
  TwoThreadStorage io;
  std::vector<char> buf(2 * 4096);
  for (int i = 0; i < 20000; ++i) {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<Status> result;
    auto w = std::make_unique<IoWindow>(&io, CutRequests({{IoOp::kRead, 0, 0, 2 * 4096, buf.data(), 0}}, 4096), 0, [&](Status s) {
      std::lock_guard<std::mutex> lock(mu);
      result = std::move(s);
      cv.notify_one();
    });
    w->Start();
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return result.has_value(); });
    w.reset();
    ASSERT_TRUE(result->ok()) << "window " << i << ": " << result->ToString();
  }
}

TEST(IoWindowTest, TheMemoryBackEndRoundTripsEveryPiece) {
  // The memory back-end completes each request inside Submit too: 20000 pieces written and read
  // back at depth 1 arrive whole.
  auto io = NewMemoryStorage();
  OpenOptions o;
  o.create = true;
  o.direct = false;
  auto f = io->Open("/held/m.bin", o);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const int64_t n = 20000 * int64_t{4096};
  std::vector<char> out(static_cast<size_t>(n)), in(static_cast<size_t>(n));
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<char>(i * 131 + 7);
  for (IoOp op : {IoOp::kWrite, IoOp::kRead}) {
    std::optional<Status> result;
    IoWindow w(io.get(), CutRequests({{op, f->id, 0, n, op == IoOp::kWrite ? out.data() : in.data(), 0}}, 4096), 1,
               [&](Status s) { result = std::move(s); });
    w.Start();
    ASSERT_TRUE(result.has_value());
    ASSERT_TRUE(result->ok()) << result->ToString();
  }
  EXPECT_EQ(std::memcmp(in.data(), out.data(), out.size()), 0);
}

}  // namespace
}  // namespace tierflow::real
