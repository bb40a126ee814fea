// Storage back-ends: the same cases on io_uring, posix and memory — round trips with request
// splitting, concurrent submitters with per-request tags, alignment and end-of-file errors, reads
// ahead of writes — and the fault-injecting wrapper's errors, short writes and crashes.
#include <atomic>
#include <cstring>
#include <thread>

#include "test_util.h"

namespace tierflow::real {
namespace {

using testing::MakeStorage;
using testing::RandomBytes;
using testing::TempDir;

class StorageTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    StorageOptions o;
    o.queue_depth = 8;
    o.request_bytes = 64 << 10;  // small, so that requests are split into pieces
    o.threads = 3;
    std::string why;
    storage_ = MakeStorage(GetParam(), o, &why);
    if (!storage_) GTEST_SKIP() << why;
    dir_ = GetParam() == "memory" ? "/mem" : tmp_.path();
  }
  StatusOr<OpenFile> OpenDirect(const std::string& name, int32_t device = 0) {
    OpenOptions o;
    o.device = device;
    o.create = true;
    o.direct = true;
    o.direct_fallback = true;
    return storage_->Open(dir_ + "/" + name, o);
  }
  std::unique_ptr<Storage> storage_;
  TempDir tmp_;
  std::string dir_;
};

struct Aligned {
  explicit Aligned(int64_t n) : p(static_cast<char*>(std::aligned_alloc(4096, AlignUp(n, 4096)))), size(n) {}
  ~Aligned() { std::free(p); }
  char* p;
  int64_t size;
};

TEST_P(StorageTest, RoundTripWithSplitRequests) {
  auto f = OpenDirect("a.bin");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const int64_t n = 8 << 20;
  Aligned src(n), dst(n);
  auto bytes = RandomBytes(n, 1);
  std::memcpy(src.p, bytes.data(), n);
  // Eight requests of 1 MiB each, split into 64 KiB pieces by the back-end.
  std::vector<IoRequest> w;
  for (int i = 0; i < 8; ++i) w.push_back(IoRequest{IoOp::kWrite, f->id, i * (int64_t{1} << 20), 1 << 20, src.p + i * (1 << 20), static_cast<uint64_t>(i)});
  TF_ASSERT_OK(RunRequests(*storage_, w));
  TF_ASSERT_OK(storage_->Sync(f->id));
  std::memset(dst.p, 0, n);
  TF_ASSERT_OK(ReadAt(*storage_, f->id, 0, dst.p, n));
  ASSERT_EQ(0, std::memcmp(src.p, dst.p, n));
  TF_ASSERT_OK(storage_->Close(f->id));
}

TEST_P(StorageTest, ConcurrentSubmittersGetTheirOwnTaggedCompletions) {
  auto f = OpenDirect("c.bin");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const int kThreads = 4, kBlocks = 32;
  const int64_t block = 16 << 10;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Aligned src(block * kBlocks), dst(block * kBlocks);
      auto bytes = RandomBytes(block * kBlocks, 100 + t);
      std::memcpy(src.p, bytes.data(), bytes.size());
      const int64_t base = t * block * kBlocks;
      CompletionQueue q;
      std::vector<IoRequest> reqs;
      for (int i = 0; i < kBlocks; ++i) {
        reqs.push_back(IoRequest{IoOp::kWrite, f->id, base + i * block, block, src.p + i * block, static_cast<uint64_t>(t * 1000 + i)});
      }
      if (!storage_->Submit(reqs, &q).ok()) ++failures;
      std::vector<IoCompletion> done;
      while (done.size() < reqs.size()) q.Wait(&done, 1);
      std::vector<bool> seen(kBlocks, false);
      for (auto& c : done) {
        int i = static_cast<int>(c.tag) - t * 1000;
        if (!c.status.ok() || i < 0 || i >= kBlocks || seen[i] || c.bytes != block) ++failures;
        else seen[i] = true;
      }
      for (auto& r : reqs) r.op = IoOp::kRead, r.buffer = dst.p + (r.offset_bytes - base);
      if (!RunRequests(*storage_, reqs).ok()) ++failures;
      if (std::memcmp(src.p, dst.p, block * kBlocks) != 0) ++failures;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_P(StorageTest, MisalignedDirectRequestIsAnErrorNamingTheFile) {
  auto f = OpenDirect("m.bin");
  ASSERT_TRUE(f.ok());
  if (!f->direct) GTEST_SKIP() << "O_DIRECT refused by the file system here; alignment is not enforced";
  Aligned buf(8192);
  Status s = WriteAt(*storage_, f->id, 100, buf.p, 4096);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("m.bin"), std::string::npos) << s.ToString();
}

TEST_P(StorageTest, DirectRequestsAtTheFilesOwnAlignmentRoundTrip) {
  auto f = OpenDirect("a.bin");
  ASSERT_TRUE(f.ok());
  if (!f->direct) GTEST_SKIP() << "O_DIRECT refused by the file system here; alignment is not enforced";
  // A power of two no larger than a page (what the kernel reports, or the 4 KiB default).
  ASSERT_GT(f->alignment, 0);
  EXPECT_EQ(f->alignment & (f->alignment - 1), 0) << f->alignment;
  EXPECT_LE(f->alignment, kDirectAlignment);
  const int64_t a = f->alignment;
  Aligned out(3 * kDirectAlignment), in(3 * kDirectAlignment);
  for (int64_t i = 0; i < 3 * kDirectAlignment; ++i) out.p[i] = static_cast<char>(i * 7 + 1);
  // Offset, length and buffer at the file's alignment, and off a page where it is smaller.
  TF_ASSERT_OK(WriteAt(*storage_, f->id, a, out.p + a, 2 * a));
  CompletionQueue q;
  IoRequest r{IoOp::kRead, f->id, a, 2 * a, in.p + a, 1};
  TF_ASSERT_OK(storage_->Submit({&r, 1}, &q));
  std::vector<IoCompletion> done;
  q.Wait(&done, 1);
  TF_ASSERT_OK(done[0].status);
  EXPECT_EQ(std::memcmp(in.p + a, out.p + a, static_cast<size_t>(2 * a)), 0);
  if (a > 1) {
    Status s = WriteAt(*storage_, f->id, a / 2, out.p, a);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("aligned to " + std::to_string(a) + " bytes"), std::string::npos) << s.ToString();
  }
}

TEST_P(StorageTest, ReadPastEndOfFileIsAnErrorNotZeros) {
  auto f = OpenDirect("e.bin");
  ASSERT_TRUE(f.ok());
  Aligned buf(16384);
  std::memset(buf.p, 7, 16384);
  TF_ASSERT_OK(WriteAt(*storage_, f->id, 0, buf.p, 4096));
  CompletionQueue q;
  IoRequest r{IoOp::kRead, f->id, 0, 16384, buf.p, 42};
  TF_ASSERT_OK(storage_->Submit({&r, 1}, &q));
  std::vector<IoCompletion> done;
  q.Wait(&done, 1);
  EXPECT_EQ(done[0].tag, 42u);
  EXPECT_FALSE(done[0].status.ok());
  EXPECT_LT(done[0].bytes, 16384);
  EXPECT_NE(done[0].status.message().find("e.bin"), std::string::npos) << done[0].status.ToString();
}

TEST_P(StorageTest, QueuedReadsAreServedAheadOfQueuedWrites) {
  if (GetParam() == "memory") GTEST_SKIP() << "the memory back-end completes inside Submit (no queue)";
  StorageOptions o;
  o.queue_depth = 1;
  o.threads = 1;
  o.request_bytes = 1 << 20;
  std::string why;
  auto s = MakeStorage(GetParam(), o, &why);
  ASSERT_TRUE(s);
  OpenOptions oo;
  oo.create = true;
  oo.direct_fallback = true;
  auto f = s->Open(dir_ + "/rw.bin", oo);
  ASSERT_TRUE(f.ok());
  const int kWrites = 24;
  Aligned buf((kWrites + 1) << 20);
  std::memset(buf.p, 1, (kWrites + 1) << 20);
  TF_ASSERT_OK(WriteAt(*s, f->id, 0, buf.p, 1 << 20));
  std::vector<IoRequest> reqs;
  for (int i = 0; i < kWrites; ++i) reqs.push_back(IoRequest{IoOp::kWrite, f->id, int64_t{i + 1} << 20, 1 << 20, buf.p + (int64_t{i + 1} << 20), static_cast<uint64_t>(i)});
  reqs.push_back(IoRequest{IoOp::kRead, f->id, 0, 1 << 20, buf.p, 999});
  CompletionQueue q;
  TF_ASSERT_OK(s->Submit(reqs, &q));
  std::vector<IoCompletion> done;
  while (done.size() < reqs.size()) q.Wait(&done, 1);
  size_t read_pos = 0;
  for (size_t i = 0; i < done.size(); ++i) {
    EXPECT_TRUE(done[i].status.ok()) << done[i].status.ToString();
    if (done[i].tag == 999) read_pos = i;
  }
  // Submitted last but in one batch with the writes, all queued together: the read goes first.
  EXPECT_EQ(read_pos, 0u) << "read completed at position " << read_pos;
}

INSTANTIATE_TEST_SUITE_P(Backends, StorageTest, ::testing::Values("uring", "posix", "memory"),
                         [](const auto& info) { return info.param; });

// ---- fault injection ----

class FaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mem_ = NewMemoryStorage();
    fault_ = NewFaultInjectingStorage(mem_.get());
    OpenOptions o;
    o.create = true;
    o.device = 2;
    auto f = fault_->Open("/nvme2/store.bin", o);
    ASSERT_TRUE(f.ok());
    file_ = f->id;
    buf_.reset(static_cast<char*>(std::aligned_alloc(4096, 1 << 20)));
    std::memset(buf_.get(), 3, 1 << 20);
  }
  struct Free { void operator()(char* p) const { std::free(p); } };
  std::unique_ptr<Storage> mem_;
  std::unique_ptr<FaultInjectingStorage> fault_;
  FileId file_ = -1;
  std::unique_ptr<char, Free> buf_;
};

TEST_F(FaultTest, InjectedEioNamesFileAndDevice) {
  FaultRule r;
  r.ops = static_cast<uint32_t>(FaultOpMask::kWrite);
  r.error = EIO;
  r.skip = 1;
  fault_->AddRule(r);
  TF_ASSERT_OK(WriteAt(*fault_, file_, 0, buf_.get(), 4096));  // skipped by the rule
  Status s = WriteAt(*fault_, file_, 4096, buf_.get(), 4096);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("/nvme2/store.bin"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("device 2"), std::string::npos) << s.ToString();
  EXPECT_EQ(fault_->faults_injected(), 1);
  TF_ASSERT_OK(WriteAt(*fault_, file_, 8192, buf_.get(), 4096));  // count 1: only once
}

TEST_F(FaultTest, InjectedEnospcIsResourceExhausted) {
  FaultRule r;
  r.ops = static_cast<uint32_t>(FaultOpMask::kWrite);
  r.error = ENOSPC;
  fault_->AddRule(r);
  Status s = WriteAt(*fault_, file_, 0, buf_.get(), 4096);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
}

TEST_F(FaultTest, ShortWriteWritesAPrefixAndFails) {
  FaultRule r;
  r.kind = FaultKind::kShort;
  r.ops = static_cast<uint32_t>(FaultOpMask::kWrite);
  r.short_bytes = 4096;
  fault_->AddRule(r);
  CompletionQueue q;
  IoRequest req{IoOp::kWrite, file_, 0, 65536, buf_.get(), 7};
  TF_ASSERT_OK(fault_->Submit({&req, 1}, &q));
  std::vector<IoCompletion> done;
  q.Wait(&done, 1);
  EXPECT_EQ(done[0].tag, 7u);
  EXPECT_FALSE(done[0].status.ok());
  EXPECT_EQ(done[0].bytes, 4096);
  EXPECT_NE(done[0].status.message().find("short write"), std::string::npos) << done[0].status.ToString();
  auto size = mem_->FileSize(file_);
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, 4096);
}

TEST_F(FaultTest, CrashFailsEveryLaterOperation) {
  FaultRule r;
  r.kind = FaultKind::kCrash;
  r.skip = 2;
  fault_->AddRule(r);
  TF_ASSERT_OK(WriteAt(*fault_, file_, 0, buf_.get(), 4096));
  TF_ASSERT_OK(fault_->Sync(file_));
  EXPECT_FALSE(WriteAt(*fault_, file_, 0, buf_.get(), 4096).ok());
  EXPECT_FALSE(fault_->Sync(file_).ok());
  EXPECT_FALSE(fault_->Rename("/nvme2/store.bin", "/nvme2/x").ok());
  fault_->ClearRules();
  TF_ASSERT_OK(fault_->Sync(file_));
}

TEST_F(FaultTest, DelayStillCompletes) {
  FaultRule r;
  r.kind = FaultKind::kDelay;
  r.delay_s = 0.02;
  r.ops = static_cast<uint32_t>(FaultOpMask::kWrite);
  fault_->AddRule(r);
  double t0 = MonotonicSeconds();
  TF_ASSERT_OK(WriteAt(*fault_, file_, 0, buf_.get(), 4096));
  EXPECT_GE(MonotonicSeconds() - t0, 0.02);
}

TEST(UringAvailability, FactoryReportsUnavailableInsteadOfFailing) {
  auto s = NewUringStorage();
  if (!s.ok()) {
    EXPECT_EQ(s.status().code(), StatusCode::kUnavailable) << s.status().ToString();
    GTEST_SKIP() << s.status().ToString();
  }
  EXPECT_EQ((*s)->name(), "uring");
}

}  // namespace
}  // namespace tierflow::real
