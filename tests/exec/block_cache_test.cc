// BlockCache (tierflow/real/block_cache.h): blocks reused by size, the allocated and reserved
// counts and their peaks, and the reserved limit, over a counting allocator.
#include "tierflow/real/block_cache.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>

namespace tierflow::real {
namespace {

// malloc and free, counted: which blocks exist, and how many bytes.
struct Counting {
  std::set<void*> live;
  int64_t bytes = 0, made = 0;
  int64_t refuse_above = -1;  // new blocks refused once `bytes` would pass it (-1: never)

  BlockCache Cache() {
    return BlockCache(
        [this](int64_t n) -> void* {
          if (refuse_above >= 0 && bytes + n > refuse_above) return nullptr;
          void* p = std::malloc(static_cast<size_t>(n));
          live.insert(p);
          bytes += n;
          ++made;
          sizes[p] = n;
          return p;
        },
        [this](void* p, int64_t n) {
          EXPECT_EQ(n, sizes[p]) << "released with the size it was made with";
          live.erase(p);
          bytes -= sizes[p];
          std::free(p);
        });
  }
  std::map<void*, int64_t> sizes;
};

TEST(BlockCache, ReusesABlockOfTheSameSizeAndCountsAllocatedAndReserved) {
  Counting c;
  {
    BlockCache cache = c.Cache();
    void* a = cache.Take(100);
    cache.Give(a);
    EXPECT_EQ(cache.Take(100), a);  // the same block, not a fresh one
    EXPECT_EQ(c.made, 1);
    void* b = cache.Take(40);
    EXPECT_EQ(cache.in_use_bytes(), 140);
    EXPECT_EQ(cache.reserved_bytes(), 140);
    cache.Give(a);
    EXPECT_EQ(cache.in_use_bytes(), 40);
    EXPECT_EQ(cache.reserved_bytes(), 140);  // kept for reuse
    cache.Release(b);
    EXPECT_EQ(cache.reserved_bytes(), 100);
    EXPECT_EQ(cache.peak_bytes(), 140);
    EXPECT_EQ(cache.peak_reserved_bytes(), 140);
    EXPECT_EQ(c.bytes, 100);
  }
  EXPECT_TRUE(c.live.empty());  // the cache frees what it kept
}

// Past the limit, kept blocks of other sizes are freed before a fresh one is made, so the
// reserved bytes stay within it while the blocks in use do.
TEST(BlockCache, TheLimitFreesKeptBlocksBeforeGrowing) {
  Counting c;
  BlockCache cache = c.Cache();
  cache.set_limit(100);
  void* a = cache.Take(60);
  cache.Give(a);
  void* b = cache.Take(50);  // 60 kept + 50 would pass 100: the 60 goes first
  EXPECT_EQ(c.bytes, 50);
  EXPECT_EQ(cache.reserved_bytes(), 50);
  EXPECT_LE(cache.peak_reserved_bytes(), 100);
  // Blocks in use are not refused: the limit only decides what is kept.
  void* d = cache.Take(70);
  EXPECT_NE(d, nullptr);
  EXPECT_EQ(cache.reserved_bytes(), 120);
  cache.Release(b);
  cache.Release(d);
  EXPECT_TRUE(c.live.empty());
}

// Where the allocator has no room, kept blocks are freed and the allocation tried once more;
// null only when that fails too.
TEST(BlockCache, NoRoomFreesKeptBlocksThenGivesNull) {
  Counting c;
  c.refuse_above = 100;
  BlockCache cache = c.Cache();
  void* a = cache.Take(80);
  cache.Give(a);
  void* b = cache.Take(60);  // 80 kept: refused, then the 80 freed and the 60 made
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(c.bytes, 60);
  EXPECT_EQ(cache.Take(50), nullptr);  // 60 in use + 50 > 100, nothing kept to free
  EXPECT_EQ(cache.in_use_bytes(), 60);
  cache.Release(b);
}

}  // namespace
}  // namespace tierflow::real
