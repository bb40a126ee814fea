// InlineList: a task's index lists (IndexList, up to four kept in place), a tensor's shape and a
// task's carried deps (two in place), as std::vector behaves.
#include "tierflow/core/inline_list.h"

#include "tierflow/core/schedule.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

namespace tierflow {
namespace {

std::vector<int32_t> Of(const IndexList& l) { return {l.begin(), l.end()}; }

TEST(IndexList, GrowsPastItsInlineItemsAsAVectorWould) {
  IndexList l;
  std::vector<int32_t> v;
  EXPECT_TRUE(l.empty());
  for (int32_t i = 0; i < 40; ++i) {
    l.push_back(i * 7);
    v.push_back(i * 7);
    ASSERT_EQ(Of(l), v);
    ASSERT_EQ(l.back(), i * 7);
  }
  EXPECT_GE(l.capacity(), 40u);
  EXPECT_EQ(l.front(), 0);
  EXPECT_EQ(l[39], 273);
  l.pop_back();
  EXPECT_EQ(l.size(), 39u);
  l.clear();
  EXPECT_TRUE(l.empty());
}

TEST(IndexList, InsertsAndErasesAnywhere) {
  for (const size_t start : {size_t{0}, size_t{2}, size_t{3}, size_t{9}}) {  // inline, at the edge, on the heap
    std::vector<int32_t> v(start);
    std::iota(v.begin(), v.end(), 100);
    IndexList l(v);
    const std::vector<int32_t> more = {1, 2, 3};
    for (size_t at : {size_t{0}, start / 2, start}) {
      IndexList x = l;
      std::vector<int32_t> w = v;
      const int32_t* put = x.insert(x.begin() + at, more.begin(), more.end());
      w.insert(w.begin() + static_cast<std::ptrdiff_t>(at), more.begin(), more.end());
      EXPECT_EQ(Of(x), w) << "start " << start << " at " << at;
      EXPECT_EQ(put - x.begin(), static_cast<std::ptrdiff_t>(at));
      x.insert(x.begin(), -1);
      w.insert(w.begin(), -1);
      EXPECT_EQ(Of(x), w);
      x.erase(x.begin() + 1, x.begin() + 3);
      w.erase(w.begin() + 1, w.begin() + 3);
      EXPECT_EQ(Of(x), w);
      x.erase(x.end() - 1);
      w.erase(w.end() - 1);
      EXPECT_EQ(Of(x), w);
    }
  }
}

TEST(IndexList, CopiesAndMovesKeepTheItemsAndLeaveTheSourceEmpty) {
  for (const int32_t n : {0, 1, 4, 5, 17}) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    std::iota(v.begin(), v.end(), 1);
    IndexList a(v);
    IndexList copy = a;
    EXPECT_EQ(copy, a);
    EXPECT_EQ(copy, v);
    copy.push_back(99);  // the copy owns its items
    EXPECT_EQ(Of(a), v);
    IndexList moved = std::move(a);
    EXPECT_EQ(Of(moved), v);
    EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): a moved-from list is empty
    a.push_back(5);
    EXPECT_EQ(Of(a), std::vector<int32_t>{5});
    IndexList assigned = {7, 8};
    assigned = std::move(moved);
    EXPECT_EQ(Of(assigned), v);
    const IndexList& same = assigned;
    assigned = same;  // self-assignment keeps the items
    EXPECT_EQ(Of(assigned), v);
    assigned = {3};
    EXPECT_EQ(Of(assigned), std::vector<int32_t>{3});
  }
}

TEST(IndexList, ComparesByItemsWhereverTheyAreKept) {
  IndexList grown;
  for (int32_t i = 0; i < 9; ++i) grown.push_back(i);
  grown.erase(grown.begin() + 3, grown.end());  // three items, on the heap
  const IndexList in_place = {0, 1, 2};
  EXPECT_EQ(grown, in_place);
  EXPECT_FALSE(grown == IndexList({0, 1}));
  EXPECT_FALSE(grown == IndexList({0, 1, 3}));
  IndexList r;
  r.resize(6, 4);
  EXPECT_EQ(r, std::vector<int32_t>(6, 4));
}

// Wider items than indices, two in place: a tensor's shape, a task's carried deps.
TEST(InlineList, KeepsWiderItemsInPlaceThenOnTheHeap) {
  static_assert(sizeof(InlineList<int64_t, 2>) == sizeof(std::vector<int64_t>));
  static_assert(sizeof(InlineList<CarriedDep, 2>) == sizeof(std::vector<CarriedDep>));
  InlineList<int64_t, 2> shape = {int64_t{1} << 40, 3};
  EXPECT_EQ(shape, std::vector<int64_t>({int64_t{1} << 40, 3}));
  shape.push_back(-5);  // a third: onto the heap, the first two copied
  EXPECT_EQ(shape, std::vector<int64_t>({int64_t{1} << 40, 3, -5}));
  InlineList<CarriedDep, 2> carried;
  std::vector<CarriedDep> want;
  for (int32_t i = 0; i < 5; ++i) {
    carried.push_back({i, i + 1});
    want.push_back({i, i + 1});
    ASSERT_EQ(carried, want);
  }
  InlineList<CarriedDep, 2> moved = std::move(carried);
  EXPECT_EQ(moved, want);
  EXPECT_TRUE(carried.empty());  // NOLINT(bugprone-use-after-move): a move leaves it empty
  carried = moved;
  moved.erase(moved.begin() + 1, moved.end());  // one left, kept on the heap
  EXPECT_EQ(moved, std::vector<CarriedDep>({{0, 1}}));
  EXPECT_EQ(carried, want);
}

}  // namespace
}  // namespace tierflow
