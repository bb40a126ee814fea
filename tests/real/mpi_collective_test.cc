// The MPI back-end against the local one (collective.h): run under mpirun (ctest starts it with 2
// and with 3 ranks), every rank performs each operation over MPI and compares the result, bit for
// bit, with what a local group of as many ranks gives for the same inputs in this process.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tierflow/real/adamw.h"
#include "tierflow/real/collective.h"

namespace tierflow::real {
namespace {

Collective& Mpi() {
  static std::unique_ptr<Collective> mpi = [] {
    auto c = OpenCollective("mpi");
    TF_CHECK(c.ok());
    return std::move(c).value();
  }();
  return *mpi;
}

// Rank r's input: values whose sums depend on the order of the ranks.
std::vector<float> Input(int rank, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  const float pattern[] = {1e8f, 3.0f, -1e8f, 0.5f, 1e-3f};
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = pattern[(rank * 3 + i) % 5] * (1.0f + 1e-4f * static_cast<float>(i));
  return v;
}

std::vector<uint16_t> AsBf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Fp32ToBf16(v[i]);
  return out;
}

// `op` on every rank of a local group of Mpi().ranks(), rank r given Input(r): this rank's output.
template <typename T, typename Op>
std::vector<T> LocalResult(const std::vector<std::vector<T>>& inputs, size_t out_elements, Op op) {
  const int ranks = Mpi().ranks();
  auto group = MakeLocalGroup(ranks);
  std::vector<std::vector<T>> outs(static_cast<size_t>(ranks), std::vector<T>(out_elements));
  std::vector<std::unique_ptr<Pending>> pending;
  for (int r = 0; r < ranks; ++r) pending.push_back(op(*group[static_cast<size_t>(r)], inputs[static_cast<size_t>(r)].data(), outs[static_cast<size_t>(r)].data()).value());
  for (auto& p : pending) TF_CHECK(p->Wait().ok());
  return outs[static_cast<size_t>(Mpi().rank())];
}

TEST(MpiCollective, EveryOperationEqualsTheLocalBackEndBitForBit) {
  Collective& mpi = Mpi();
  const int ranks = mpi.ranks(), me = mpi.rank();
  ASSERT_GE(ranks, 2) << "run under mpirun -np 2 or more";
  const int64_t n = 1000;  // per rank
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < ranks; ++r) inputs.push_back(Input(r, n * ranks));
  const std::vector<float>& mine = inputs[static_cast<size_t>(me)];

  std::vector<float> gathered(static_cast<size_t>(n * ranks));
  ASSERT_TRUE(Complete(mpi.AllGather(mine.data(), gathered.data(), n, ElementType::kFloat32)).ok());
  EXPECT_EQ(gathered, LocalResult<float>(inputs, gathered.size(), [&](Collective& c, const float* s, float* r) {
              return c.AllGather(s, r, n, ElementType::kFloat32);
            }));

  std::vector<float> scattered(static_cast<size_t>(n));
  ASSERT_TRUE(Complete(mpi.ReduceScatter(mine.data(), scattered.data(), n, ElementType::kFloat32)).ok());
  const auto want_scattered = LocalResult<float>(inputs, scattered.size(), [&](Collective& c, const float* s, float* r) {
    return c.ReduceScatter(s, r, n, ElementType::kFloat32);
  });
  EXPECT_EQ(std::memcmp(scattered.data(), want_scattered.data(), scattered.size() * 4), 0);

  std::vector<float> reduced = mine;
  ASSERT_TRUE(Complete(mpi.AllReduce(reduced.data(), reduced.data(), n * ranks, ElementType::kFloat32)).ok());
  const auto want_reduced = LocalResult<float>(inputs, reduced.size(), [&](Collective& c, const float* s, float* r) {
    return c.AllReduce(s, r, n * ranks, ElementType::kFloat32);
  });
  EXPECT_EQ(std::memcmp(reduced.data(), want_reduced.data(), reduced.size() * 4), 0);

  std::vector<std::vector<uint16_t>> inputs16;
  for (const auto& v : inputs) inputs16.push_back(AsBf16(v));
  std::vector<uint16_t> scattered16(static_cast<size_t>(n));
  ASSERT_TRUE(Complete(mpi.ReduceScatter(inputs16[static_cast<size_t>(me)].data(), scattered16.data(), n, ElementType::kBf16)).ok());
  EXPECT_EQ(scattered16, LocalResult<uint16_t>(inputs16, scattered16.size(), [&](Collective& c, const uint16_t* s, uint16_t* r) {
              return c.ReduceScatter(s, r, n, ElementType::kBf16);
            }));

  std::vector<char> bytes(7, me == ranks - 1 ? 'x' : '.');
  ASSERT_TRUE(Complete(mpi.Broadcast(bytes.data(), 7, ranks - 1)).ok());
  EXPECT_EQ(std::string(bytes.data(), 7), "xxxxxxx");
  EXPECT_TRUE(mpi.Barrier().ok());
}

// mpirun starts every rank on this machine: they share its cores (the executor sizes each rank's
// CPU pools by its share).
TEST(MpiCollective, EveryRankOfOneMachineIsOnItsHost) {
  Collective& mpi = Mpi();
  ASSERT_GE(mpi.ranks(), 2) << "run under mpirun -np 2 or more";
  EXPECT_EQ(mpi.ranks_on_host(), mpi.ranks());
  EXPECT_EQ(MakeLocalGroup(3)[0]->ranks_on_host(), 3);
}

TEST(MpiCollective, OversizedAndEmptyTransfersAreRefused) {
  float x = 0;
  EXPECT_EQ(Mpi().AllReduce(&x, &x, 0, ElementType::kFloat32).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Mpi().AllGather(&x, &x, int64_t{1} << 30, ElementType::kFloat32).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Mpi().Broadcast(&x, 4, Mpi().ranks()).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tierflow::real
