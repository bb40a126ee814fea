// Checkpoints: both strategies round-trip bit-exactly over several directories on every
// back-end; a save interrupted at each of its I/Os in turn leaves the previous checkpoint
// loadable and verified; corruption and injected errors name the tensor or device.
#include <algorithm>
#include <cstring>
#include <map>

#include "test_util.h"
#include "tierflow/real/checkpoint.h"

namespace tierflow::real {
namespace {

using testing::MakeStorage;
using testing::RandomBytes;
using testing::TempDir;

struct Set {
  std::vector<std::vector<char>> data;
  std::vector<CheckpointTensor> tensors;
};

Set MakeSet(uint64_t seed, int ranks, const std::vector<int64_t>& sizes) {
  Set s;
  for (int r = 0; r < ranks; ++r) {
    for (size_t i = 0; i < sizes.size(); ++i) s.data.push_back(RandomBytes(sizes[i], seed * 1000 + r * 100 + i));
  }
  size_t k = 0;
  for (int r = 0; r < ranks; ++r) {
    for (size_t i = 0; i < sizes.size(); ++i, ++k) {
      s.tensors.push_back(CheckpointTensor{"layer." + std::to_string(i) + ".w", "bf16", r, s.data[k].data(), sizes[i]});
    }
  }
  return s;
}

// Loads and compares with `expect`; returns "" when identical.
std::string LoadAndCompare(Storage& storage, const CheckpointOptions& o, const Set& expect) {
  std::map<std::pair<int32_t, std::string>, std::vector<char>> got;
  auto stats = LoadCheckpoint(storage, o, [&](const CheckpointEntry& e) {
    auto& v = got[{e.rank, e.name}];
    v.assign(e.size_bytes, 0);
    return static_cast<void*>(v.data());
  });
  if (!stats.ok()) return stats.status().ToString();
  if (got.size() != expect.tensors.size()) return "tensor count differs";
  for (auto& t : expect.tensors) {
    auto it = got.find({t.rank, t.name});
    if (it == got.end()) return "missing " + t.name;
    if (static_cast<int64_t>(it->second.size()) != t.size_bytes || std::memcmp(it->second.data(), t.data, t.size_bytes) != 0) {
      return "bytes differ in " + t.name;
    }
  }
  return "";
}

struct Param {
  std::string backend;
  CheckpointStrategy strategy;
};

class CheckpointTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    std::string why;
    StorageOptions so;
    so.request_bytes = 256 << 10;
    storage_ = MakeStorage(GetParam().backend, so, &why);
    if (!storage_) GTEST_SKIP() << why;
    std::string root = GetParam().backend == "memory" ? "/mem" : tmp_.path();
    opts_.dirs = {root + "/a", root + "/b", root + "/c"};
    opts_.strategy = GetParam().strategy;
    opts_.staging_bytes = 1 << 20;  // small, so files span several staging buffers
  }
  std::unique_ptr<Storage> storage_;
  TempDir tmp_;
  CheckpointOptions opts_;
};

TEST_P(CheckpointTest, SaveLoadRoundTripAndReplace) {
  Set first = MakeSet(1, 2, {1, 4095, 4096, 5000, 300000, 3 << 20, 17});
  auto s1 = SaveCheckpoint(*storage_, first.tensors, opts_);
  ASSERT_TRUE(s1.ok()) << s1.status().ToString();
  EXPECT_EQ(s1->generation, 1);
  EXPECT_EQ(LoadAndCompare(*storage_, opts_, first), "");
  Set second = MakeSet(2, 2, {10, 8192, 2 << 20});
  auto s2 = SaveCheckpoint(*storage_, second.tensors, opts_);
  ASSERT_TRUE(s2.ok()) << s2.status().ToString();
  EXPECT_EQ(s2->generation, 2);
  EXPECT_EQ(LoadAndCompare(*storage_, opts_, second), "");
  // The first generation's files are gone: only generation 2 and the manifest remain.
  for (auto& d : opts_.dirs) {
    auto names = storage_->List(d);
    ASSERT_TRUE(names.ok());
    for (auto& n : *names) EXPECT_TRUE(n.find("-g2") != std::string::npos || n.find("manifest") != std::string::npos) << n;
  }
  TF_ASSERT_OK(RemoveCheckpoint(*storage_, opts_));
}

// The write shapes of the checkpoint study's matrix (docs/checkpoint-study.md): O_DIRECT or the
// page cache, coalesced or one request per tensor, tensors 4 KiB-aligned or packed; each
// round-trips, and each does what it says.
class CheckpointShapeTest : public CheckpointTest {};

TEST_P(CheckpointShapeTest, EveryWriteShapeRoundTrips) {
  const std::vector<int64_t> sizes = {1, 4095, 4096, 5000, 300000, 3 << 20, 17, 70000};
  Set set = MakeSet(3, 2, sizes);
  struct Shape {
    bool direct, coalesce;
    int64_t align;
  };
  int64_t coalesced_requests = 0;
  for (const Shape& shape : {Shape{true, true, 4096}, Shape{false, true, 64}, Shape{true, false, 4096}, Shape{false, false, 1},
                             Shape{true, true, 64}, Shape{true, false, 8192}, Shape{false, false, 4096}}) {
    SCOPED_TRACE("direct " + std::to_string(shape.direct) + " coalesce " + std::to_string(shape.coalesce) + " align " + std::to_string(shape.align));
    CheckpointOptions o = opts_;
    o.direct = shape.direct;
    o.coalesce = shape.coalesce;
    o.align_bytes = shape.align;
    auto saved = SaveCheckpoint(*storage_, set.tensors, o);
    ASSERT_TRUE(saved.ok()) << saved.status().ToString();
    EXPECT_EQ(LoadAndCompare(*storage_, o, set), "");
    if (!shape.direct) {
      EXPECT_FALSE(saved->direct) << "buffered files are never O_DIRECT";
      EXPECT_EQ(LoadAndCompare(*storage_, opts_, set), "") << "an O_DIRECT load of the unpadded file";
    }
    if (shape.coalesce && shape.direct && shape.align == 4096) coalesced_requests = saved->requests;
    // Uncoalesced: every tensor ends a request (the 3 MiB one spans several 1 MiB staging slots).
    if (!shape.coalesce) {
      EXPECT_GE(saved->requests, static_cast<int64_t>(set.tensors.size()) + 2 * 2);
    }
  }
  EXPECT_GT(coalesced_requests, 0);
  EXPECT_LT(coalesced_requests, static_cast<int64_t>(set.tensors.size())) << "small tensors share requests when coalesced";
  // O_DIRECT requests that start at each tensor need 4 KiB-aligned tensors.
  CheckpointOptions o = opts_;
  o.coalesce = false;
  o.align_bytes = 64;
  auto refused = SaveCheckpoint(*storage_, set.tensors, o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("align_bytes must be a multiple of 4096"), std::string::npos) << refused.status().ToString();
  EXPECT_EQ(LoadAndCompare(*storage_, opts_, set), "") << "the refused save kept the committed checkpoint";
  TF_ASSERT_OK(RemoveCheckpoint(*storage_, opts_));
}

INSTANTIATE_TEST_SUITE_P(Aggregated, CheckpointShapeTest,
                         ::testing::Values(Param{"uring", CheckpointStrategy::kAggregated}, Param{"posix", CheckpointStrategy::kAggregated},
                                           Param{"memory", CheckpointStrategy::kAggregated}),
                         [](const auto& info) { return info.param.backend; });

INSTANTIATE_TEST_SUITE_P(
    All, CheckpointTest,
    ::testing::Values(Param{"uring", CheckpointStrategy::kAggregated}, Param{"posix", CheckpointStrategy::kAggregated},
                      Param{"memory", CheckpointStrategy::kAggregated}, Param{"uring", CheckpointStrategy::kFilePerTensor},
                      Param{"posix", CheckpointStrategy::kFilePerTensor}, Param{"memory", CheckpointStrategy::kFilePerTensor}),
    [](const auto& info) {
      return info.param.backend + (info.param.strategy == CheckpointStrategy::kAggregated ? "_aggregated" : "_file_per_tensor");
    });

// A save interrupted at its n-th I/O (and failing every later one, as a crash would) for every n:
// the previous checkpoint stays loadable and verified, or — if the crash came after the commit —
// the new one is complete. Then a fresh save succeeds and cleans up the leftovers.
void CrashAtEveryIo(Storage& base, const std::vector<std::string>& dirs, CheckpointStrategy strategy) {
  auto fault = NewFaultInjectingStorage(&base);
  CheckpointOptions o;
  o.dirs = dirs;
  o.strategy = strategy;
  o.staging_bytes = 1 << 20;
  Set old_set = MakeSet(3, 2, {100, 5000, 2 << 20, 4096});
  Set new_set = MakeSet(4, 2, {200, 6000, 3 << 20, 4096, 77});
  auto s = SaveCheckpoint(*fault, old_set.tensors, o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  int64_t crashes = 0, committed = 0;
  for (int64_t n = 0;; ++n) {
    fault->ClearRules();
    FaultRule r;
    r.kind = FaultKind::kCrash;
    r.skip = n;
    fault->AddRule(r);
    int64_t before = fault->faults_injected();
    auto save = SaveCheckpoint(*fault, new_set.tensors, o);
    bool fired = fault->faults_injected() > before;
    fault->ClearRules();
    if (!fired) {
      ASSERT_TRUE(save.ok()) << save.status().ToString();
      break;  // n exceeds the number of I/Os of a save
    }
    ASSERT_FALSE(save.ok()) << "crash at I/O " << n << " was not reported";
    ++crashes;
    std::string as_old = LoadAndCompare(base, o, old_set);
    if (!as_old.empty()) {
      ++committed;
      ASSERT_EQ(LoadAndCompare(base, o, new_set), "") << "crash at I/O " << n << ": neither checkpoint loads (old: " << as_old << ")";
      // Put the old one back for the next round.
      auto again = SaveCheckpoint(base, old_set.tensors, o);
      ASSERT_TRUE(again.ok()) << again.status().ToString();
    }
  }
  EXPECT_GT(crashes, 10);
  EXPECT_LT(committed, crashes);
  EXPECT_EQ(LoadAndCompare(base, o, new_set), "");
  // Only the committed generation is left behind.
  std::string gen = "-g";
  auto entries = ReadCheckpointManifest(base, o);
  ASSERT_TRUE(entries.ok());
  for (auto& d : dirs) {
    auto names = base.List(d);
    ASSERT_TRUE(names.ok());
    for (auto& n : *names) {
      bool ok = n.find("manifest.json") != std::string::npos && n.find(".tmp") == std::string::npos;
      for (auto& e : *entries) ok |= e.file.rfind(n, 0) == 0;
      EXPECT_TRUE(ok) << "leftover " << d << "/" << n;
    }
  }
}

TEST(CheckpointCrashTest, MemoryAggregated) {
  auto mem = NewMemoryStorage();
  CrashAtEveryIo(*mem, {"/m/a", "/m/b"}, CheckpointStrategy::kAggregated);
}
TEST(CheckpointCrashTest, MemoryFilePerTensor) {
  auto mem = NewMemoryStorage();
  CrashAtEveryIo(*mem, {"/m/a", "/m/b"}, CheckpointStrategy::kFilePerTensor);
}
TEST(CheckpointCrashTest, PosixAggregatedOnDisk) {
  TempDir tmp;
  auto posix = NewPosixStorage();
  CrashAtEveryIo(*posix, {tmp.path() + "/a", tmp.path() + "/b"}, CheckpointStrategy::kAggregated);
}

TEST(CheckpointFaultTest, CorruptionIsDataLossNamingTensorAndDevice) {
  auto mem = NewMemoryStorage();
  CheckpointOptions o;
  o.dirs = {"/m/a", "/m/b"};
  Set set = MakeSet(5, 1, {10000, 20000});
  ASSERT_TRUE(SaveCheckpoint(*mem, set.tensors, o).ok());
  auto entries = ReadCheckpointManifest(*mem, o);
  ASSERT_TRUE(entries.ok());
  const CheckpointEntry& e = (*entries)[1];
  OpenOptions oo;
  oo.direct = false;
  auto f = mem->Open(o.dirs[e.device] + "/" + e.file, oo);
  ASSERT_TRUE(f.ok());
  char c;
  TF_ASSERT_OK(ReadAt(*mem, f->id, e.offset_bytes + 7, &c, 1));
  c ^= 0x40;
  TF_ASSERT_OK(WriteAt(*mem, f->id, e.offset_bytes + 7, &c, 1));
  auto loaded = LoadCheckpoint(*mem, o, [](const CheckpointEntry&) { return nullptr; });
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(loaded.status().message().find(e.name), std::string::npos) << loaded.status().ToString();
  EXPECT_NE(loaded.status().message().find(o.dirs[e.device]), std::string::npos) << loaded.status().ToString();
}

// Names become file names only inside the checkpoint's directories, and a save of nothing never
// replaces the committed checkpoint; a manifest naming a file outside them is refused as damaged.
TEST(CheckpointFaultTest, HostileNamesAndEmptySavesLeaveTheCheckpointAlone) {
  auto mem = NewMemoryStorage();
  CheckpointOptions o;
  o.dirs = {"/m/a"};
  Set set = MakeSet(6, 1, {5000});
  ASSERT_TRUE(SaveCheckpoint(*mem, set.tensors, o).ok());
  const auto empty = SaveCheckpoint(*mem, {}, o);
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(empty.status().message().find("no tensors to save"), std::string::npos) << empty.status().ToString();
  EXPECT_EQ(LoadAndCompare(*mem, o, set), "");
  for (const std::string& name : std::vector<std::string>{"../x", "a/b", ".hidden", "", "bad\xff", std::string(300, 'n')}) {
    CheckpointOptions hostile = o;
    hostile.name = name;
    const auto saved = SaveCheckpoint(*mem, set.tensors, hostile);
    EXPECT_EQ(saved.status().code(), StatusCode::kInvalidArgument) << name;
    EXPECT_NE(saved.status().message().find("use letters, digits"), std::string::npos) << saved.status().ToString();
    EXPECT_EQ(LoadCheckpoint(*mem, hostile, [](const CheckpointEntry&) { return nullptr; }).status().code(), StatusCode::kInvalidArgument) << name;
  }
  // A manifest edited to point outside the directory.
  OpenOptions oo;
  oo.direct = false;
  auto m = mem->Open("/m/a/ckpt.manifest.json", oo);
  ASSERT_TRUE(m.ok());
  auto size = mem->FileSize(m->id);
  ASSERT_TRUE(size.ok());
  std::string text(static_cast<size_t>(*size), '\0');
  TF_ASSERT_OK(ReadAt(*mem, m->id, 0, text.data(), *size));
  const std::string file = "ckpt-g1.rank0.dev0.tfckpt";
  for (size_t at = text.find(file); at != std::string::npos; at = text.find(file)) text.replace(at, file.size(), "../../etc/evil");
  TF_ASSERT_OK(mem->Truncate(m->id, 0));
  TF_ASSERT_OK(WriteAt(*mem, m->id, 0, text.data(), static_cast<int64_t>(text.size())));
  TF_ASSERT_OK(mem->Close(m->id));
  const auto loaded = LoadCheckpoint(*mem, o, [](const CheckpointEntry&) { return nullptr; });
  EXPECT_EQ(loaded.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(loaded.status().message().find("file '../../etc/evil': part '..'"), std::string::npos) << loaded.status().ToString();
}

// Checkpoints whose names share a prefix live side by side: saving and removing `ckpt` never
// touches `ckpt-gold` (a name matching `ckpt-g*`).
TEST(CheckpointFaultTest, ACheckpointLeavesItsNeighboursAlone) {
  auto mem = NewMemoryStorage();
  CheckpointOptions gold, plain;
  gold.dirs = plain.dirs = {"/m/a"};
  gold.name = "ckpt-gold";
  plain.name = "ckpt";
  Set a = MakeSet(7, 1, {3000}), b = MakeSet(8, 1, {5000});
  ASSERT_TRUE(SaveCheckpoint(*mem, a.tensors, gold).ok());
  ASSERT_TRUE(SaveCheckpoint(*mem, b.tensors, plain).ok());
  ASSERT_TRUE(SaveCheckpoint(*mem, b.tensors, plain).ok());  // a second generation removes the first of its own only
  EXPECT_EQ(LoadAndCompare(*mem, gold, a), "");
  ASSERT_TRUE(RemoveCheckpoint(*mem, plain).ok());
  EXPECT_EQ(LoadAndCompare(*mem, gold, a), "");
}

// A disk that fills during a save: ENOSPC from the n-th write on (and on every later one), for
// every n. The process lives on, so the save must clean up itself: right after the error the
// directories hold the previous checkpoint's files and nothing else (no temporary manifest, no
// file of the failed generation), and that checkpoint loads.
TEST(CheckpointFaultTest, ADiskThatFillsLeavesOnlyThePreviousCheckpoint) {
  for (CheckpointStrategy strategy : {CheckpointStrategy::kAggregated, CheckpointStrategy::kFilePerTensor}) {
    auto mem = NewMemoryStorage();
    auto fault = NewFaultInjectingStorage(mem.get());
    CheckpointOptions o;
    o.dirs = {"/m/a", "/m/b"};
    o.strategy = strategy;
    o.staging_bytes = 1 << 20;
    Set old_set = MakeSet(3, 2, {100, 5000, 2 << 20, 4096});
    Set new_set = MakeSet(4, 2, {200, 6000, 3 << 20, 4096, 77});
    ASSERT_TRUE(SaveCheckpoint(*mem, old_set.tensors, o).ok());
    std::map<std::string, std::vector<std::string>> before;
    for (const auto& d : o.dirs) {
      auto names = mem->List(d);
      ASSERT_TRUE(names.ok());
      before[d] = *names;
      std::sort(before[d].begin(), before[d].end());
    }
    int64_t fills = 0;
    for (int64_t n = 0;; ++n) {
      fault->ClearRules();
      FaultRule r;
      r.ops = static_cast<uint32_t>(FaultOpMask::kWrite);
      r.error = ENOSPC;
      r.skip = n;
      r.count = -1;
      fault->AddRule(r);
      const int64_t injected = fault->faults_injected();
      auto save = SaveCheckpoint(*fault, new_set.tensors, o);
      fault->ClearRules();
      if (fault->faults_injected() == injected) {
        ASSERT_TRUE(save.ok()) << save.status().ToString();
        break;  // past the last write of a save
      }
      ++fills;
      ASSERT_FALSE(save.ok()) << "a full disk at write " << n << " was not reported";
      EXPECT_EQ(save.status().code(), StatusCode::kResourceExhausted) << save.status().ToString();
      ASSERT_EQ(LoadAndCompare(*mem, o, old_set), "") << "full at write " << n << ": the previous checkpoint does not load";
      for (const auto& d : o.dirs) {
        auto names = mem->List(d);
        ASSERT_TRUE(names.ok());
        std::sort(names->begin(), names->end());
        EXPECT_EQ(*names, before[d]) << "full at write " << n << ": " << d << " holds other files than the previous checkpoint's";
      }
    }
    EXPECT_GT(fills, 2) << CheckpointStrategyName(strategy);
  }
}

TEST(CheckpointFaultTest, InjectedErrorsNameTheDevice) {
  for (int err : {EIO, ENOSPC}) {
    auto mem = NewMemoryStorage();
    auto fault = NewFaultInjectingStorage(mem.get());
    CheckpointOptions o;
    o.dirs = {"/m/a", "/m/b"};
    FaultRule r;
    r.ops = static_cast<uint32_t>(FaultOpMask::kWrite);
    r.path_contains = "/m/b/";
    r.error = err;
    fault->AddRule(r);
    Set set = MakeSet(6, 1, {10000, 20000, 30000});
    auto s = SaveCheckpoint(*fault, set.tensors, o);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find("/m/b"), std::string::npos) << s.status().ToString();
    EXPECT_EQ(s.status().code(), err == ENOSPC ? StatusCode::kResourceExhausted : StatusCode::kIoError);
  }
}

// A checkpoint of several processes: each saves its rank's shard, one commit lists them all, and
// each rank loads its own files only. A save whose commit never comes (a process killed between)
// leaves the previous checkpoint the committed one; the next commit removes its files, and leaves
// alone a later generation still being written.
TEST(CheckpointShardTest, ShardsOfEveryRankCommitInOneManifest) {
  auto mem = NewMemoryStorage();
  CheckpointOptions o;
  o.dirs = {"/m/a", "/m/b"};
  const Set first = MakeSet(7, 2, {10000, 70000});
  auto shards_of = [&](const Set& set, int64_t generation) {
    std::vector<CheckpointShard> shards;
    for (int32_t rank : {0, 1}) {
      std::vector<CheckpointTensor> mine;
      for (const CheckpointTensor& t : set.tensors) {
        if (t.rank == rank) mine.push_back(t);
      }
      auto shard = SaveCheckpointShard(*mem, mine, o, generation);
      EXPECT_TRUE(shard.ok()) << shard.status().ToString();
      auto text = CheckpointShardFromJson(CheckpointShardToJson(*shard), 2);  // as it travels to the committing rank
      EXPECT_TRUE(text.ok()) << text.status().ToString();
      shards.push_back(*text);
    }
    return shards;
  };
  auto g = NextCheckpointGeneration(*mem, o);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(*g, 1);
  TF_ASSERT_OK(CommitCheckpoint(*mem, o, shards_of(first, *g)));
  EXPECT_EQ(LoadAndCompare(*mem, o, first), "");
  // Rank 1 alone: rank 0's files are not read.
  CheckpointOptions rank1 = o;
  rank1.rank = 1;
  auto loaded = LoadCheckpoint(*mem, rank1, [](const CheckpointEntry& e) -> void* {
    EXPECT_EQ(e.rank, 1) << e.name;
    static std::vector<char> sink(1 << 20);
    return sink.data();
  });
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->bytes, 80000);

  // Generation 2 written but never committed; generation 3 still being written by another rank.
  const Set lost = MakeSet(8, 2, {10000, 70000});
  (void)shards_of(lost, 2);
  EXPECT_EQ(LoadAndCompare(*mem, o, first), "") << "an uncommitted save changes nothing";
  const Set later_set = MakeSet(9, 1, {5000});
  ASSERT_TRUE(SaveCheckpointShard(*mem, {later_set.tensors[0]}, o, 4).ok());
  const Set second = MakeSet(10, 2, {10000, 70000});
  TF_ASSERT_OK(CommitCheckpoint(*mem, o, shards_of(second, 3)));
  EXPECT_EQ(LoadAndCompare(*mem, o, second), "");
  std::vector<std::string> files;
  for (const std::string& d : o.dirs) {
    auto names = mem->List(d);
    ASSERT_TRUE(names.ok());
    for (const std::string& n : *names) files.push_back(n);
  }
  for (const std::string& f : files) {
    EXPECT_TRUE(f.rfind("ckpt-g3.", 0) == 0 || f.rfind("ckpt-g4.", 0) == 0 || f == "ckpt.manifest.json") << f << " should be gone";
  }
  EXPECT_TRUE(std::any_of(files.begin(), files.end(), [](const std::string& f) { return f.rfind("ckpt-g4.", 0) == 0; })) << "a later save is left alone";

  // Shards of two generations are not one checkpoint; a damaged shard text is named.
  auto mixed = shards_of(MakeSet(11, 2, {1000}), 5);
  mixed[1].generation = 6;
  const Status refused = CommitCheckpoint(*mem, o, mixed);
  EXPECT_NE(refused.message().find("shards of generations 5 and 6"), std::string::npos) << refused.ToString();
  EXPECT_EQ(LoadAndCompare(*mem, o, second), "");
  for (const std::string& damaged : {std::string("[]"), std::string(R"({"generation": 1.5, "files": [], "tensors": []})"),
                                     std::string(R"({"generation": 1, "files": [{"device": 9, "name": "x"}], "tensors": []})")}) {
    EXPECT_EQ(CheckpointShardFromJson(damaged, 2).status().code(), StatusCode::kDataLoss) << damaged;
  }
}

}  // namespace
}  // namespace tierflow::real
