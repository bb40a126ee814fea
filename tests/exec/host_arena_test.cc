// exec::HostArena (real/exec/host_arena.h): a pool's memory made once, its buffers cut from it by
// best fit, pieces rounded up to kDirectAlignment, freed pieces joined with their neighbours.
#include "host_arena.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tierflow::real::exec
