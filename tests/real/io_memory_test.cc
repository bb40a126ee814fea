// I/O memory (tierflow/real/io_memory.h): aligned for O_DIRECT, zero-filled, and from 2 MiB up a
// mapping of its own, kHugePage-aligned and advised for transparent huge pages; freed for good.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "tierflow/real/io_memory.h"
#include "tierflow/real/pinned_arena.h"
#include "tierflow/real/storage.h"

namespace tierflow::real {
namespace {

struct Vma {
  bool found = false;
  uintptr_t start = 0, end = 0;
  int thp_eligible = -1;  // smaps' THPeligible, -1 where the kernel does not say
  int64_t rss_kb = -1;    // smaps' Rss: what of it is in memory
};

// The mapping of this process that holds `p`, from /proc/self/smaps.
Vma MappingOf(const void* p) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::ifstream in("/proc/self/smaps");
  Vma vma;
  std::string line;
  bool in_it = false;
  while (std::getline(in, line)) {
    unsigned long long s = 0, e = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &s, &e) == 2 && line.find(':') > line.find('-')) {
      if (in_it) break;  // the next mapping
      in_it = at >= s && at < e;
      if (in_it) vma = {true, static_cast<uintptr_t>(s), static_cast<uintptr_t>(e), -1, -1};
      continue;
    }
    if (in_it && line.rfind("THPeligible:", 0) == 0) vma.thp_eligible = std::stoi(line.substr(12));
    if (in_it && line.rfind("Rss:", 0) == 0) vma.rss_kb = std::stoll(line.substr(4));
  }
  return vma;
}

bool AllZero(const char* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

// A mapping left unpopulated (the executor's pool arenas) is in memory only as far as it is
// touched, and reads as zeros; a populated one is in memory whole when it is handed out.
TEST(IoMemory, AnUnpopulatedMappingIsFaultedInWhereTouched) {
  const int64_t bytes = 32 * kHugePage;
  for (const bool populate : {false, true}) {
    auto* p = static_cast<char*>(AllocateIoMemory(bytes, populate));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePage, 0u);
    const Vma before = MappingOf(p);
    ASSERT_TRUE(before.found);
    ASSERT_GE(before.rss_kb, 0) << "smaps gives no Rss";
    if (populate) {
      EXPECT_EQ(before.rss_kb, bytes / 1024) << "faulted in whole";
    } else {
      EXPECT_EQ(before.rss_kb, 0) << "nothing touched yet";
      EXPECT_TRUE(AllZero(p + kHugePage, kHugePage));  // one huge page read (a zero page or a fault)
      p[0] = 1;
      const Vma after = MappingOf(p);
      EXPECT_GT(after.rss_kb, 0);
      EXPECT_LE(after.rss_kb, 2 * kHugePage / 1024) << "the touched pages only";
    }
    FreeIoMemory(p, bytes);
  }
}

TEST(IoMemory, BelowAHugePageABlockIsDirectAlignedAndZeroed) {
  for (int64_t bytes : {int64_t{1}, int64_t{4095}, int64_t{4096}, int64_t{1} << 20, kHugePage - kDirectAlignment}) {
    auto* p = static_cast<char*>(AllocateIoMemory(bytes));
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kDirectAlignment, 0u) << bytes;
    EXPECT_TRUE(AllZero(p, bytes)) << bytes;
    p[bytes - 1] = 1;
    FreeIoMemory(p, bytes);
  }
}

TEST(IoMemory, FromAHugePageUpABufferIsAMappingOfItsOwnAlignedToHugePagesAndAdvisedForThem) {
  const std::string mode = TransparentHugePageMode();
  for (int64_t bytes : {kHugePage, 13 * kHugePage / 2 + 5}) {
    auto* p = static_cast<char*>(AllocateIoMemory(bytes));
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePage, 0u) << bytes;
    EXPECT_TRUE(AllZero(p, bytes)) << bytes;
    p[0] = 1;
    p[bytes - 1] = 1;
    const Vma vma = MappingOf(p);
    ASSERT_TRUE(vma.found);
    // Its own mapping, the slack around the boundary unmapped: it starts at the buffer and ends at
    // its last page (mappings advised differently do not merge).
    EXPECT_EQ(vma.start, reinterpret_cast<uintptr_t>(p)) << bytes;
    EXPECT_EQ(vma.end, reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(AlignUp(bytes, kDirectAlignment))) << bytes;
    if (vma.thp_eligible >= 0 && (mode == "madvise" || mode == "always")) {
      EXPECT_EQ(vma.thp_eligible, 1) << "transparent huge pages '" << mode << "': the mapping is advised for them";
    }
    FreeIoMemory(p, bytes);
    EXPECT_FALSE(MappingOf(p).found) << "unmapped for good";
  }
  if (mode != "madvise" && mode != "always") {
    GTEST_SKIP() << "transparent huge pages are '" << mode << "' here: the advice is not checked";
  }
}

TEST(IoMemory, UsersAreToldWhenTheKernelLeavesDiskBuffersInSmallPages) {
  EXPECT_EQ(HugePageNote("madvise"), "");
  EXPECT_EQ(HugePageNote("always"), "");
  EXPECT_NE(HugePageNote("never").find("transparent huge pages are 'never' here"), std::string::npos) << HugePageNote("never");
  EXPECT_NE(HugePageNote("").find("not in this kernel"), std::string::npos) << HugePageNote("");
  EXPECT_NE(HugePageNote("never").find("4 KiB pages"), std::string::npos);
}

TEST(IoMemory, ThePinnedArenaIsIoMemory) {
  ArenaOptions o;
  o.allow_unlocked = true;
  auto arena = PinnedArena::Create(3 * kHugePage, o);
  ASSERT_TRUE(arena.ok()) << arena.status().ToString();
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*arena)->base()) % kHugePage, 0u);
  // Alignment alone would not tell: the kernel aligns a large anonymous mapping by itself. The
  // advice does (a plain mapping is not eligible under "madvise").
  const std::string mode = TransparentHugePageMode();
  const Vma vma = MappingOf((*arena)->base());
  ASSERT_TRUE(vma.found);
  if (mode != "madvise" && mode != "always") {
    GTEST_SKIP() << "transparent huge pages are '" << mode << "' here";
  }
  if (vma.thp_eligible >= 0) {
    EXPECT_EQ(vma.thp_eligible, 1);
  }
}

}  // namespace
}  // namespace tierflow::real
