// exec::HostArena (real/exec/host_arena.h): a pool's memory made once, its buffers cut from it by
// best fit, pieces rounded up to kDirectAlignment, freed pieces joined with their neighbours.
#include "host_arena.h"

#include <gtest/gtest.h>

#include <random>
#include <utility>
#include <vector>

namespace tierflow::real::exec {
namespace {

constexpr int64_t kA = kDirectAlignment;

TEST(HostArena, PiecesAreAlignedAndRoundedUpAndTheArenaRefusesWhatItCannotHold) {
  std::vector<char> memory(10 * kA);
  HostArena arena(memory.data(), 10 * kA);
  char* a = arena.Take(1);
  char* b = arena.Take(kA + 1);  // two places
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a, memory.data());
  EXPECT_EQ(b - a, kA);
  EXPECT_EQ(arena.in_use_bytes(), 3 * kA);
  EXPECT_EQ(arena.Take(8 * kA), nullptr) << "7 places left";
  char* c = arena.Take(7 * kA);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c - a, 3 * kA);
  EXPECT_EQ(arena.Take(1), nullptr) << "full";
  EXPECT_TRUE(arena.Holds(c + 7 * kA - 1));
  EXPECT_FALSE(arena.Holds(memory.data() + 10 * kA));
}

TEST(HostArena, APieceGoesToTheShortestFreeRunThatHoldsIt) {
  std::vector<char> memory(10 * kA);
  HostArena arena(memory.data(), 10 * kA);
  std::vector<char*> p;
  for (const int64_t places : {3, 1, 2, 1, 3}) p.push_back(arena.Take(places * kA));  // [0,3) [3,4) [4,6) [6,7) [7,10)
  arena.Give(p[0]);  // free [0,3)
  arena.Give(p[2]);  // free [4,6)
  // Two places: [4,6) holds it exactly; first fit would have split [0,3).
  EXPECT_EQ(arena.Take(2 * kA), memory.data() + 4 * kA);
  EXPECT_EQ(arena.Take(3 * kA), memory.data());
}

TEST(HostArena, FreedPiecesJoinTheirNeighbours) {
  std::vector<char> memory(6 * kA);
  HostArena arena(memory.data(), 6 * kA);
  char* a = arena.Take(2 * kA);
  char* b = arena.Take(2 * kA);
  char* c = arena.Take(2 * kA);
  arena.Give(a);
  arena.Give(c);
  EXPECT_EQ(arena.Take(3 * kA), nullptr) << "two runs of two places, apart";
  arena.Give(b);  // joins both
  EXPECT_EQ(arena.in_use_bytes(), 0);
  EXPECT_EQ(arena.Take(6 * kA), memory.data());
}

// A long random sequence of takes and gives, each take checked against best fit found the plain
// way (every free run scanned), from the free runs that the pieces still taken leave.
TEST(HostArena, EveryTakeIsTheBestFitOfTheRunsLeftFree) {
  constexpr int64_t kPlaces = 64;
  std::vector<char> memory(kPlaces * kA);
  HostArena arena(memory.data(), kPlaces * kA);
  std::vector<std::pair<char*, int64_t>> held;  // piece, places
  std::mt19937 rng(7);
  int takes = 0, refusals = 0;
  for (int step = 0; step < 5000; ++step) {
    if (!held.empty() && rng() % 2 == 0) {
      const size_t i = rng() % held.size();
      arena.Give(held[i].first);
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    const int64_t places = 1 + static_cast<int64_t>(rng() % 8);
    std::vector<bool> used(kPlaces, false);
    for (const auto& [p, n] : held) {
      for (int64_t k = 0; k < n; ++k) used[static_cast<size_t>((p - memory.data()) / kA + k)] = true;
    }
    int64_t best = -1, best_length = 0;
    for (int64_t at = 0; at < kPlaces;) {
      if (used[static_cast<size_t>(at)]) {
        ++at;
        continue;
      }
      int64_t end = at;
      while (end < kPlaces && !used[static_cast<size_t>(end)]) ++end;
      if (end - at >= places && (best < 0 || end - at < best_length)) best = at, best_length = end - at;
      at = end;
    }
    char* got = arena.Take(places * kA - kA / 2);  // rounded up to `places`
    if (best < 0) {
      EXPECT_EQ(got, nullptr) << "step " << step;
      ++refusals;
      continue;
    }
    ASSERT_EQ(got, memory.data() + best * kA) << "step " << step;
    held.emplace_back(got, places);
    ++takes;
  }
  int64_t in_use = 0;
  for (const auto& [p, n] : held) in_use += n * kA;
  EXPECT_EQ(arena.in_use_bytes(), in_use);
  EXPECT_GT(takes, 1000);
  EXPECT_GT(refusals, 10) << "the sequence fills the arena at times";
}

}  // namespace
}  // namespace tierflow::real::exec
