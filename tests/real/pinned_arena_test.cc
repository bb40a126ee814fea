// The pinned arena: exact accounting (reserve / use / free sequences with known peaks), no
// power-of-two rounding, and exceeding any budget is an error naming the pool — never an
// allocation.
#include <gtest/gtest.h>

#include "tierflow/real/pinned_arena.h"

namespace tierflow::real {
namespace {

std::unique_ptr<PinnedArena> MakeArena(int64_t budget) {
  ArenaOptions o;
  o.allow_unlocked = true;  // the test checks accounting, not the memlock limit
  auto a = PinnedArena::Create(budget, o);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return a.ok() ? std::move(*a) : nullptr;
}

TEST(PinnedArenaTest, ExactPoolPeakAccountingIsExact) {
  auto arena = MakeArena(1 << 20);
  ASSERT_TRUE(arena);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(arena->base()) % 4096, 0u);
  auto pool = arena->CreateExactPool("params", 400 << 10);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  EXPECT_EQ(arena->stats().reserved_bytes, 400 << 10);
  {
    auto a = (*pool)->Allocate(100 << 10);  // 100 KiB
    auto b = (*pool)->Allocate(5000);       // footprint 8 KiB, not 8 KiB rounded to a power of two beyond
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(b->size_bytes(), 5000);
    EXPECT_EQ((*pool)->stats().in_use_bytes, (100 << 10) + 8192);
    a->Release();
    auto c = (*pool)->Allocate(200 << 10);  // peak = 8 KiB + 200 KiB
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(c->data()) % 4096, 0u);
    auto d = (*pool)->Allocate(60 << 10);   // peak = 8 + 200 + 60 KiB
    ASSERT_TRUE(d.ok());
    PoolStats s = (*pool)->stats();
    EXPECT_EQ(s.in_use_bytes, (268 << 10));
    EXPECT_EQ(s.peak_bytes, (268 << 10));
    EXPECT_EQ(s.allocations, 3);
  }
  PoolStats s = (*pool)->stats();
  EXPECT_EQ(s.in_use_bytes, 0);
  EXPECT_EQ(s.peak_bytes, 268 << 10);
  EXPECT_EQ(arena->stats().peak_bytes, 268 << 10);
  EXPECT_EQ(arena->stats().in_use_bytes, 0);
  // Freed blocks coalesce back into one range.
  EXPECT_EQ((*pool)->largest_free_bytes(), 400 << 10);
}

TEST(PinnedArenaTest, NoPowerOfTwoRoundingWithFineAlignment) {
  auto arena = MakeArena(1 << 20);
  ASSERT_TRUE(arena);
  auto pool = arena->CreateExactPool("grads", 100000, 64);
  ASSERT_TRUE(pool.ok());
  auto a = (*pool)->Allocate(65537);  // a power-of-two allocator would take 128 KiB
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ((*pool)->stats().in_use_bytes, 65600);  // 65537 rounded to 64
  auto b = (*pool)->Allocate(100000 - 65600);       // exactly the rest
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  auto c = (*pool)->Allocate(1);
  EXPECT_EQ(c.status().code(), StatusCode::kResourceExhausted);
}

TEST(PinnedArenaTest, ExceedingAPoolIsAnErrorNotAnAllocation) {
  auto arena = MakeArena(1 << 20);
  ASSERT_TRUE(arena);
  auto pool = arena->CreateExactPool("opt", 64 << 10);
  ASSERT_TRUE(pool.ok());
  auto a = (*pool)->Allocate(40 << 10);
  ASSERT_TRUE(a.ok());
  auto b = (*pool)->Allocate(40 << 10);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(b.status().message().find("'opt'"), std::string::npos) << b.status().ToString();
  EXPECT_EQ((*pool)->stats().in_use_bytes, 40 << 10);  // unchanged by the failure
  EXPECT_EQ((*pool)->stats().allocations, 1);
}

TEST(PinnedArenaTest, ReservingBeyondTheBudgetIsAnError) {
  auto arena = MakeArena(256 << 10);
  ASSERT_TRUE(arena);
  ASSERT_TRUE(arena->CreateSlotPool("swap", 64 << 10, 3).ok());
  auto too_much = arena->CreateExactPool("more", 128 << 10);
  ASSERT_FALSE(too_much.ok());
  EXPECT_EQ(too_much.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(too_much.status().message().find("'more'"), std::string::npos);
  EXPECT_EQ(arena->stats().reserved_bytes, 192 << 10);
  EXPECT_TRUE(arena->CreateExactPool("rest", 64 << 10).ok());
  EXPECT_EQ(arena->stats().reserved_bytes, 256 << 10);
}

TEST(PinnedArenaTest, SlotPoolExhaustsAndTracksPeak) {
  auto arena = MakeArena(1 << 20);
  ASSERT_TRUE(arena);
  auto pool = arena->CreateSlotPool("param.swap", 10000, 3);  // each slot starts 4 KiB-aligned
  ASSERT_TRUE(pool.ok());
  EXPECT_EQ(arena->stats().reserved_bytes, 3 * 12288);
  auto a = (*pool)->Acquire();
  auto b = (*pool)->Acquire();
  auto c = (*pool)->Acquire();
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->size_bytes(), 10000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % 4096, 0u);
  auto d = (*pool)->Acquire();
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(d.status().message().find("param.swap"), std::string::npos);
  b->Release();
  EXPECT_EQ((*pool)->stats().in_use_bytes, 2 * 12288);
  EXPECT_EQ((*pool)->stats().peak_bytes, 3 * 12288);
  auto e = (*pool)->Acquire();
  EXPECT_TRUE(e.ok());
}

TEST(PinnedArenaTest, ArenaPeakSpansPools) {
  auto arena = MakeArena(1 << 20);
  ASSERT_TRUE(arena);
  auto p1 = arena->CreateExactPool("a", 256 << 10);
  auto p2 = arena->CreateExactPool("b", 256 << 10);
  ASSERT_TRUE(p1.ok() && p2.ok());
  auto x = (*p1)->Allocate(100 << 10);
  auto y = (*p2)->Allocate(50 << 10);  // footprint 52 KiB (4 KiB alignment)
  x->Release();
  auto z = (*p2)->Allocate(20 << 10);
  ArenaStats s = arena->stats();
  EXPECT_EQ(s.peak_bytes, 152 << 10);
  EXPECT_EQ(s.in_use_bytes, 72 << 10);
  ASSERT_EQ(s.pools.size(), 2u);
  EXPECT_EQ(s.pools[0].peak_bytes, 100 << 10);
  EXPECT_EQ(s.pools[1].peak_bytes, 72 << 10);
}

TEST(PinnedArenaTest, LockedWhenTheLimitAllows) {
  ArenaOptions o;  // lock required
  auto a = PinnedArena::Create(64 << 10, o);
  if (!a.ok()) {
    EXPECT_EQ(a.status().code(), StatusCode::kResourceExhausted);
    EXPECT_NE(a.status().message().find("RLIMIT_MEMLOCK"), std::string::npos);
    GTEST_SKIP() << "mlock refused here: " << a.status().ToString();
  }
  EXPECT_TRUE((*a)->locked());
}

}  // namespace
}  // namespace tierflow::real
