// The tensor store: random sizes 1 B – 64 MiB, random placement over three directories,
// concurrent submitters, aligned and unaligned buffers — bit-exact on io_uring, posix and memory,
// and again after reopening from the manifest. Faults (EIO, ENOSPC, short writes, corruption, a
// full device) surface as errors naming the tensor and the device.
#include <cmath>
#include <cstring>
#include <thread>

#include "test_util.h"
#include "tierflow/real/tensor_store.h"

namespace tierflow::real {
namespace {

using testing::MakeStorage;
using testing::RandomBytes;
using testing::TempDir;

std::vector<StoreDevice> ThreeDevices(const std::string& root, int64_t capacity) {
  return {StoreDevice{"nvme0", root + "/d0", capacity, 2e9, false},
          StoreDevice{"nvme1", root + "/d1", capacity, 1e9, false},
          StoreDevice{"remote0", root + "/d2", capacity, 0.5e9, true}};
}

struct Item {
  std::string name;
  int64_t size;
  uint64_t seed;
  Placement placement;
  int64_t misalign;  // offset of the buffer from a 4 KiB boundary
};

std::vector<Item> RandomItems(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Item> items;
  std::vector<int64_t> fixed = {1, 7, 4095, 4096, 4097, 65536 + 3, int64_t{64} << 20};
  for (int i = 0; i < n; ++i) {
    int64_t size = i < static_cast<int>(fixed.size())
                       ? fixed[i]
                       : static_cast<int64_t>(std::exp(std::uniform_real_distribution<double>(0, std::log(64.0 * (1 << 20)))(rng)));
    Placement p;
    switch (rng() % 4) {
      case 0: p.policy = PlacementPolicy::kRoundRobin; break;
      case 1: p.policy = PlacementPolicy::kWeighted; break;
      case 2: p.policy = PlacementPolicy::kStriped; p.stripe_threshold_bytes = 1 << 20; p.stripe_bytes = 256 << 10; break;
      default: p.policy = PlacementPolicy::kExplicit; p.device = static_cast<int32_t>(rng() % 3); break;
    }
    int64_t mis = (rng() % 3 == 0) ? static_cast<int64_t>(1 + rng() % 4095) : 0;
    items.push_back(Item{"t" + std::to_string(i), std::max<int64_t>(1, size), seed * 100 + i, p, mis});
  }
  return items;
}

// A buffer at `misalign` bytes past a 4 KiB boundary.
struct Buf {
  Buf(int64_t n, int64_t misalign) : raw(static_cast<char*>(std::aligned_alloc(4096, AlignUp(n + misalign, 4096)))), p(raw + misalign) {}
  ~Buf() { std::free(raw); }
  char* raw;
  char* p;
};

class TensorStoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    StorageOptions o;
    o.queue_depth = 16;
    o.request_bytes = 1 << 20;
    std::string why;
    storage_ = MakeStorage(GetParam(), o, &why);
    if (!storage_) GTEST_SKIP() << why;
    root_ = GetParam() == "memory" ? "/mem" : tmp_.path();
  }
  std::unique_ptr<Storage> storage_;
  TempDir tmp_;
  std::string root_;
};

TEST_P(TensorStoreTest, RandomSizesAndPlacementsRoundTripBitExactlyFromConcurrentSubmitters) {
  auto store = TensorStore::Create(storage_.get(), ThreeDevices(root_, int64_t{512} << 20));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto items = RandomItems(28, 7);
  const int kThreads = 4;
  std::vector<std::string> errors(kThreads);
  auto worker = [&](int t, bool write) {
    for (size_t i = t; i < items.size(); i += kThreads) {
      const Item& it = items[i];
      auto data = RandomBytes(it.size, it.seed);
      Buf buf(it.size, it.misalign);
      if (write) {
        std::memcpy(buf.p, data.data(), it.size);
        Status s = (*store)->Put(it.name, "u8", buf.p, it.size, it.placement);
        if (!s.ok()) errors[t] += s.ToString() + "\n";
      } else {
        std::memset(buf.p, 0xAB, it.size);
        Status s = (*store)->Get(it.name, buf.p, it.size);
        if (!s.ok()) errors[t] += s.ToString() + "\n";
        else if (std::memcmp(buf.p, data.data(), it.size) != 0) errors[t] += it.name + ": bytes differ\n";
      }
    }
  };
  for (bool write : {true, false}) {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t, write);
    for (auto& th : threads) th.join();
    for (auto& e : errors) ASSERT_EQ(e, "");
  }
  // Every device got something, and the striped tensors span several devices.
  for (int32_t d = 0; d < 3; ++d) EXPECT_GT((*store)->DeviceUsedBytes(d), 0) << "device " << d;
  bool striped = false;
  for (auto& e : (*store)->List()) striped |= e.extents.size() > 1;
  EXPECT_TRUE(striped);
  // Reopen from the manifest and read everything again.
  TF_ASSERT_OK((*store)->SaveManifest());
  store->reset();
  auto reopened = TensorStore::Open(storage_.get(), root_ + "/d0");
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  for (const Item& it : items) {
    auto data = RandomBytes(it.size, it.seed);
    std::vector<char> out(it.size);
    TF_ASSERT_OK((*reopened)->Get(it.name, out.data(), it.size));
    ASSERT_EQ(0, std::memcmp(out.data(), data.data(), it.size)) << it.name;
  }
}

TEST_P(TensorStoreTest, ReplaceAndRemoveReuseExtents) {
  auto store = TensorStore::Create(storage_.get(), {StoreDevice{"nvme0", root_ + "/r", 1 << 20}});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto a = RandomBytes(600 << 10, 1), b = RandomBytes(700 << 10, 2);
  TF_ASSERT_OK((*store)->Put("x", "u8", a.data(), a.size()));
  // A replacement is written before the old extent is released (a failed write keeps the old
  // tensor), so 600 KiB + 700 KiB do not fit in 1 MiB: an error naming tensor and device.
  Status full = (*store)->Put("x", "u8", b.data(), b.size());
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("'x'"), std::string::npos) << full.ToString();
  EXPECT_NE(full.message().find("nvme0"), std::string::npos) << full.ToString();
  std::vector<char> out(b.size());
  TF_ASSERT_OK((*store)->Get("x", out.data(), out.size()));
  EXPECT_TRUE(std::equal(a.begin(), a.end(), out.begin()));
  TF_ASSERT_OK((*store)->Remove("x"));
  EXPECT_EQ((*store)->DeviceUsedBytes(0), 0);
  TF_ASSERT_OK((*store)->Put("x", "u8", b.data(), b.size()));
  TF_ASSERT_OK((*store)->Get("x", out.data(), out.size()));
  EXPECT_EQ(out, b);
  auto small = RandomBytes(300 << 10, 3);
  TF_ASSERT_OK((*store)->Put("x", "u8", small.data(), small.size()));  // 700 + 300 KiB fit
  EXPECT_EQ((*store)->DeviceUsedBytes(0), 300 << 10);
}

INSTANTIATE_TEST_SUITE_P(Backends, TensorStoreTest, ::testing::Values("uring", "posix", "memory"),
                         [](const auto& info) { return info.param; });

// ---- faults, on the in-memory back-end behind the fault-injecting wrapper ----

class TensorStoreFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mem_ = NewMemoryStorage();
    fault_ = NewFaultInjectingStorage(mem_.get());
    auto s = TensorStore::Create(fault_.get(), ThreeDevices("/mem", 64 << 20));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
    data_ = RandomBytes((1 << 20) + 123, 9);
  }
  Status PutOn(int32_t device, const std::string& name) {
    Placement p;
    p.policy = PlacementPolicy::kExplicit;
    p.device = device;
    return store_->Put(name, "bf16", data_.data(), data_.size(), p);
  }
  std::unique_ptr<Storage> mem_;
  std::unique_ptr<FaultInjectingStorage> fault_;
  std::unique_ptr<TensorStore> store_;
  std::vector<char> data_;
};

TEST_F(TensorStoreFaultTest, EioNamesTensorAndDevice) {
  FaultRule r;
  r.ops = static_cast<uint32_t>(FaultOpMask::kWrite);
  r.path_contains = "/d1/";
  r.error = EIO;
  fault_->AddRule(r);
  TF_ASSERT_OK(PutOn(0, "ok.weight"));
  Status s = PutOn(1, "layers.3.mlp.weight");
  ASSERT_EQ(s.code(), StatusCode::kIoError) << s.ToString();
  EXPECT_NE(s.message().find("layers.3.mlp.weight"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("nvme1"), std::string::npos) << s.ToString();
  // The failed put left no entry, and its extent was returned.
  EXPECT_FALSE(store_->Find("layers.3.mlp.weight").ok());
  EXPECT_EQ(store_->DeviceUsedBytes(1), 0);
}

TEST_F(TensorStoreFaultTest, EnospcNamesTensorAndDevice) {
  FaultRule r;
  r.ops = static_cast<uint32_t>(FaultOpMask::kWrite);
  r.error = ENOSPC;
  fault_->AddRule(r);
  Status s = PutOn(2, "adam.m.7");
  ASSERT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("adam.m.7"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("remote0"), std::string::npos) << s.ToString();
}

TEST_F(TensorStoreFaultTest, ShortWriteIsAnErrorNotSilentCorruption) {
  FaultRule r;
  r.kind = FaultKind::kShort;
  r.ops = static_cast<uint32_t>(FaultOpMask::kWrite);
  r.short_bytes = 8192;
  fault_->AddRule(r);
  Status s = PutOn(0, "emb");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("emb"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("nvme0"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("short write"), std::string::npos) << s.ToString();
}

TEST_F(TensorStoreFaultTest, CorruptedBytesAreDataLossNamingTensorAndDevice) {
  TF_ASSERT_OK(PutOn(1, "head.weight"));
  auto e = store_->Find("head.weight");
  ASSERT_TRUE(e.ok());
  // Flip a byte in the store file behind the store's back.
  OpenOptions o;
  o.direct = false;
  auto f = mem_->Open("/mem/d1/tensors.tfstore", o);
  ASSERT_TRUE(f.ok());
  char byte;
  TF_ASSERT_OK(ReadAt(*mem_, f->id, e->extents[0].offset_bytes + 5000, &byte, 1));
  byte ^= 1;
  TF_ASSERT_OK(WriteAt(*mem_, f->id, e->extents[0].offset_bytes + 5000, &byte, 1));
  std::vector<char> out(data_.size());
  Status s = store_->Get("head.weight", out.data(), out.size());
  ASSERT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("head.weight"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("nvme1"), std::string::npos) << s.ToString();
}

TEST_F(TensorStoreFaultTest, ReadErrorNamesTensorAndDevice) {
  TF_ASSERT_OK(PutOn(2, "v.1"));
  FaultRule r;
  r.ops = static_cast<uint32_t>(FaultOpMask::kRead);
  r.error = EIO;
  fault_->AddRule(r);
  std::vector<char> out(data_.size());
  Status s = store_->Get("v.1", out.data(), out.size());
  ASSERT_EQ(s.code(), StatusCode::kIoError) << s.ToString();
  EXPECT_NE(s.message().find("v.1"), std::string::npos);
  EXPECT_NE(s.message().find("remote0"), std::string::npos);
}

TEST(ExtentAllocatorTest, FirstFitCoalescesAndClaims) {
  ExtentAllocator a(40960, 4096);
  auto x = a.Allocate(1);
  auto y = a.Allocate(8193);
  ASSERT_TRUE(x.ok() && y.ok());
  EXPECT_EQ(*x, 0);
  EXPECT_EQ(*y, 4096);
  EXPECT_EQ(a.used_bytes(), 4096 + 12288);
  a.Free(*x, 1);
  a.Free(*y, 8193);
  EXPECT_EQ(a.used_bytes(), 0);
  EXPECT_EQ(a.free_ranges().size(), 1u);
  EXPECT_TRUE(a.Claim(8192, 4096));
  EXPECT_FALSE(a.Claim(8192, 1));
  EXPECT_EQ(a.largest_free_bytes(), 40960 - 12288);
  EXPECT_FALSE(a.Allocate(40960).ok());
}

}  // namespace
}  // namespace tierflow::real
