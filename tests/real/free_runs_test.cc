// FreeRuns (tierflow/real/free_runs.h), where every ExactPool cuts its pieces: best fit, freed
// pieces joined with their neighbours; and the executor's way through it (an ExactPool of 4 KiB
// places: pieces rounded up, refusals empty).
#include "tierflow/real/free_runs.h"

#include <gtest/gtest.h>

#include <random>
#include <utility>
#include <vector>

#include "tierflow/real/pinned_arena.h"

namespace tierflow::real {
namespace {

constexpr int64_t kA = 4096;

TEST(FreeRuns, PiecesAreCutInOrderAndWhatNoRunHoldsIsRefused) {
  FreeRuns runs(10);
  EXPECT_EQ(runs.Take(1), 0);
  EXPECT_EQ(runs.Take(2), 1);
  EXPECT_EQ(runs.Take(8), -1) << "7 left";
  EXPECT_EQ(runs.Take(7), 3);
  EXPECT_EQ(runs.Take(1), -1) << "full";
  EXPECT_EQ(runs.largest(), 0);
}

TEST(FreeRuns, APieceGoesToTheShortestFreeRunThatHoldsIt) {
  FreeRuns runs(10);
  std::vector<int64_t> at;
  for (const int64_t n : {3, 1, 2, 1, 3}) at.push_back(runs.Take(n));  // [0,3) [3,4) [4,6) [6,7) [7,10)
  runs.Give(at[0], 3);  // free [0,3)
  runs.Give(at[2], 2);  // free [4,6)
  // Two: [4,6) holds it exactly; first fit would have split [0,3).
  EXPECT_EQ(runs.Take(2), 4);
  EXPECT_EQ(runs.Take(3), 0);
}

TEST(FreeRuns, FreedPiecesJoinTheirNeighbours) {
  FreeRuns runs(6);
  const int64_t a = runs.Take(2), b = runs.Take(2), c = runs.Take(2);
  runs.Give(a, 2);
  runs.Give(c, 2);
  EXPECT_EQ(runs.Take(3), -1) << "two runs of two, apart";
  EXPECT_EQ(runs.largest(), 2);
  runs.Give(b, 2);  // joins both
  EXPECT_EQ(runs.largest(), 6);
  EXPECT_EQ(runs.Take(6), 0);
}

// A long random sequence of takes and gives, each take checked against best fit found the plain
// way (every free run scanned), from the free runs that the pieces still taken leave.
TEST(FreeRuns, EveryTakeIsTheBestFitOfTheRunsLeftFree) {
  constexpr int64_t kPlaces = 64;
  FreeRuns runs(kPlaces);
  std::vector<std::pair<int64_t, int64_t>> held;  // at, length
  std::mt19937 rng(7);
  int takes = 0, refusals = 0;
  for (int step = 0; step < 5000; ++step) {
    if (!held.empty() && rng() % 2 == 0) {
      const size_t i = rng() % held.size();
      runs.Give(held[i].first, held[i].second);
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    const int64_t length = 1 + static_cast<int64_t>(rng() % 8);
    std::vector<bool> used(kPlaces, false);
    for (const auto& [at, n] : held) {
      for (int64_t k = 0; k < n; ++k) used[static_cast<size_t>(at + k)] = true;
    }
    int64_t best = -1, best_length = 0;
    for (int64_t at = 0; at < kPlaces;) {
      if (used[static_cast<size_t>(at)]) {
        ++at;
        continue;
      }
      int64_t end = at;
      while (end < kPlaces && !used[static_cast<size_t>(end)]) ++end;
      if (end - at >= length && (best < 0 || end - at < best_length)) best = at, best_length = end - at;
      at = end;
    }
    const int64_t got = runs.Take(length);
    if (best < 0) {
      EXPECT_EQ(got, -1) << "step " << step;
      ++refusals;
      continue;
    }
    ASSERT_EQ(got, best) << "step " << step;
    held.emplace_back(got, length);
    ++takes;
  }
  EXPECT_GT(takes, 1000);
  EXPECT_GT(refusals, 10) << "the sequence fills the runs at times";
}

// The executor's host pool: one ExactPool of 4 KiB places in an arena mapped, not faulted in,
// not locked; TryAllocate rounds up and answers empty, not an error, when the pool is full.
TEST(FreeRuns, AnExecutorHostPoolRoundsUpToPlacesAndRefusesWithAnEmptyBuffer) {
  ArenaOptions o;
  o.lock = false;
  o.populate = false;
  o.cuda_register = false;
  auto arena = PinnedArena::Create(10 * kA, o);
  ASSERT_TRUE(arena.ok()) << arena.status().ToString();
  auto pool = (*arena)->CreateExactPool("host.pool", 10 * kA, kA);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  PinnedBuffer a = (*pool)->TryAllocate(1);
  PinnedBuffer b = (*pool)->TryAllocate(kA + 1);  // two places
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  EXPECT_EQ(a.bytes(), static_cast<char*>((*arena)->base()));
  EXPECT_EQ(b.bytes() - a.bytes(), kA);
  EXPECT_EQ((*pool)->stats().in_use_bytes, 3 * kA);
  EXPECT_TRUE((*pool)->TryAllocate(8 * kA).empty()) << "7 places left";
  PinnedBuffer c = (*pool)->TryAllocate(7 * kA);
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(c.bytes() - a.bytes(), 3 * kA);
  EXPECT_TRUE((*pool)->TryAllocate(1).empty()) << "full";
  EXPECT_TRUE((*pool)->TryAllocate(0).empty());
  c.Release();
  b.Release();
  EXPECT_EQ((*pool)->largest_free_bytes(), 9 * kA) << "freed pieces joined";
}

}  // namespace
}  // namespace tierflow::real
