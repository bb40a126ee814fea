// The collective interface on the local back-end (ranks in one process): every operation against
// its definition, sums formed in rank order whatever the rank count, a rank issuing a different
// operation named on every rank, and the back-ends by name.
#include "tierflow/real/collective.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <thread>
#include <vector>

#include "tierflow/real/adamw.h"

namespace tierflow::real {
namespace {

// Issues `op` on every rank from this thread, then waits on each: the group completes an
// operation when its last rank issues it.
template <typename Op>
void OnEveryRank(std::vector<std::unique_ptr<Collective>>& group, Op op) {
  std::vector<std::unique_ptr<Pending>> pending;
  for (auto& c : group) {
    auto p = op(*c);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    pending.push_back(std::move(p).value());
  }
  for (auto& p : pending) ASSERT_TRUE(p->Wait().ok());
}

// Values whose fp32 sum depends on the order: big, small, minus big.
float Value(int rank, int64_t i) {
  const float pattern[] = {1e8f, 3.0f, -1e8f, 0.5f};
  return pattern[(rank + i) % 4] * (1.0f + 0.001f * static_cast<float>(i));
}

TEST(Collective, RankOrderSumIsTheLeftFold) {
  const float a[] = {1e8f}, b[] = {1.0f}, c[] = {-1e8f};
  float out = 0;
  SumInRankOrder({a, b, c}, &out, 1, ElementType::kFloat32);
  EXPECT_EQ(out, (1e8f + 1.0f) + -1e8f);  // 0: the 1 is lost, as in that order
  SumInRankOrder({a, c, b}, &out, 1, ElementType::kFloat32);
  EXPECT_EQ(out, 1.0f);
  const uint16_t x[] = {Fp32ToBf16(1.0f)}, y[] = {Fp32ToBf16(0.00390625f)};  // 1 + 2^-8: rounds to 1 in bf16
  uint16_t sum = 0;
  SumInRankOrder({x, y, y}, &sum, 1, ElementType::kBf16);
  EXPECT_EQ(Bf16ToFp32(sum), Bf16ToFp32(Fp32ToBf16(1.0f + 0.00390625f + 0.00390625f)));  // summed in fp32, rounded once
}

TEST(Collective, EveryOperationOnOneToFourRanks) {
  for (int ranks = 1; ranks <= 4; ++ranks) {
    auto group = MakeLocalGroup(ranks);
    const int64_t n = 5;
    std::vector<std::vector<float>> send(static_cast<size_t>(ranks)), recv(static_cast<size_t>(ranks));
    for (int r = 0; r < ranks; ++r) {
      for (int64_t i = 0; i < ranks * n; ++i) send[static_cast<size_t>(r)].push_back(Value(r, i));
      recv[static_cast<size_t>(r)].assign(static_cast<size_t>(ranks * n), -7.0f);
    }
    // AllGather: recv[r * n + i] = rank r's send[i].
    OnEveryRank(group, [&](Collective& c) {
      return c.AllGather(send[static_cast<size_t>(c.rank())].data(), recv[static_cast<size_t>(c.rank())].data(), n, ElementType::kFloat32);
    });
    for (int me = 0; me < ranks; ++me) {
      for (int r = 0; r < ranks; ++r) {
        for (int64_t i = 0; i < n; ++i) EXPECT_EQ(recv[static_cast<size_t>(me)][static_cast<size_t>(r * n + i)], Value(r, i));
      }
    }
    // ReduceScatter: rank me's recv[i] = the rank-order sum of send[me * n + i].
    OnEveryRank(group, [&](Collective& c) {
      return c.ReduceScatter(send[static_cast<size_t>(c.rank())].data(), recv[static_cast<size_t>(c.rank())].data(), n, ElementType::kFloat32);
    });
    for (int me = 0; me < ranks; ++me) {
      for (int64_t i = 0; i < n; ++i) {
        float want = Value(0, me * n + i);
        for (int r = 1; r < ranks; ++r) want += Value(r, me * n + i);
        EXPECT_EQ(recv[static_cast<size_t>(me)][static_cast<size_t>(i)], want) << ranks << " ranks, rank " << me << " element " << i;
      }
    }
    // AllReduce in place: every rank the same rank-order sum.
    auto inplace = send;
    OnEveryRank(group, [&](Collective& c) {
      float* data = inplace[static_cast<size_t>(c.rank())].data();
      return c.AllReduce(data, data, ranks * n, ElementType::kFloat32);
    });
    for (int64_t i = 0; i < ranks * n; ++i) {
      float want = Value(0, i);
      for (int r = 1; r < ranks; ++r) want += Value(r, i);
      for (int me = 0; me < ranks; ++me) EXPECT_EQ(inplace[static_cast<size_t>(me)][static_cast<size_t>(i)], want);
    }
    // Broadcast from the last rank.
    std::vector<std::vector<char>> bytes(static_cast<size_t>(ranks), std::vector<char>(3, 0));
    std::memcpy(bytes.back().data(), "abc", 3);
    OnEveryRank(group, [&](Collective& c) { return c.Broadcast(bytes[static_cast<size_t>(c.rank())].data(), 3, ranks - 1); });
    for (const auto& b : bytes) EXPECT_EQ(std::string(b.data(), 3), "abc");
  }
}

// Ranks on threads of their own, as the executor's ranks would be: a barrier holds each until all
// have come.
TEST(Collective, RanksOnThreadsMeetAtTheBarrier) {
  auto group = MakeLocalGroup(3);
  std::vector<float> sums(3, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      Collective& c = *group[static_cast<size_t>(r)];
      EXPECT_TRUE(c.Barrier().ok());
      float mine = static_cast<float>(r + 1);
      EXPECT_TRUE(Complete(c.AllReduce(&mine, &sums[static_cast<size_t>(r)], 1, ElementType::kFloat32)).ok());
    });
  }
  for (auto& t : threads) t.join();
  for (float s : sums) EXPECT_EQ(s, 6.0f);
}

TEST(Collective, RanksIssuingDifferentOperationsFailOnEveryRank) {
  auto group = MakeLocalGroup(2);
  float a[4] = {}, b[4] = {};
  auto p0 = group[0]->AllReduce(a, a, 4, ElementType::kFloat32);
  auto p1 = group[1]->AllGather(b, b, 2, ElementType::kFloat32);
  ASSERT_TRUE(p0.ok() && p1.ok());
  const Status s0 = (*p0)->Wait(), s1 = (*p1)->Wait();
  EXPECT_EQ(s0.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s0.message(), s1.message());
  EXPECT_NE(s0.message().find("rank 1 issued AllGather of 2 float32 where rank 0 issued AllReduce of 4 float32"), std::string::npos) << s0.ToString();
  EXPECT_EQ(group[0]->AllReduce(a, a, 0, ElementType::kFloat32).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(group[0]->Broadcast(a, 4, 2).status().code(), StatusCode::kInvalidArgument);
}

TEST(Collective, BackEndsByName) {
  auto local = OpenCollective("local");
  ASSERT_TRUE(local.ok());
  EXPECT_EQ((*local)->ranks(), 1);
  EXPECT_EQ((*local)->backend(), "local");
  float x = 2.5f, y = 0;
  EXPECT_TRUE(Complete((*local)->AllReduce(&x, &y, 1, ElementType::kFloat32)).ok());
  EXPECT_EQ(y, 2.5f);
  const auto unknown = OpenCollective("gloo");
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find(CollectiveBackends()), std::string::npos);
}

}  // namespace
}  // namespace tierflow::real
