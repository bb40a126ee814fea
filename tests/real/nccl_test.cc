// NCCL on GPUs. The communicator with one rank on GPU 0: each collective of one rank is a copy
// (all-gather, reduce-scatter) or the identity sum (all-reduce, in place too), in fp32 and bf16.
// The nccl back-end of collective.h (OpenNcclCollective): every operation's result equal, bit for
// bit, to the local back-end's on the same inputs — at one rank, and over every GPU of the machine
// (2 to 4 ranks, one thread each) where it has two or more; and the rank-order sum's kernel against
// SumInRankOrder for 2 to 8 parts. Skips, with the reason, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tierflow/real/adamw.h"
#include "tierflow/real/collective.h"
#include "tierflow/real/cuda_compute.h"
#include "tierflow/real/cuda_ops.h"
#include "tierflow/real/nccl_comm.h"

namespace tierflow::real {
namespace {

class NcclSingle : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ctx = cuda::Context::Open(0);
    if (!ctx.ok()) GTEST_SKIP() << "no GPU: " << ctx.status().ToString();
    ctx_ = std::move(*ctx);
    auto comm = nccl::Communicator::OpenSingle(*ctx_);
    ASSERT_TRUE(comm.ok()) << comm.status().ToString();
    comm_ = std::move(*comm);
  }
  std::unique_ptr<cuda::Context> ctx_;
  std::unique_ptr<nccl::Communicator> comm_;
};

TEST_F(NcclSingle, OneRankCollectivesCopy) {
  EXPECT_EQ(comm_->ranks(), 1);
  EXPECT_EQ(comm_->rank(), 0);
  const int64_t n = (int64_t{1} << 20) + 3;
  std::vector<float> host(static_cast<size_t>(n));
  std::iota(host.begin(), host.end(), 0.5f);
  auto send = ctx_->Allocate(n * 4), recv = ctx_->Allocate(n * 4);
  ASSERT_TRUE(send.ok() && recv.ok());
  ASSERT_TRUE(send->CopyFromHost(*ctx_, host.data(), n * 4).ok());
  using Collective = Status (nccl::Communicator::*)(const void*, void*, int64_t, nccl::DType);
  for (auto [name, op] : {std::pair<std::string, Collective>{"all-gather", &nccl::Communicator::AllGather},
                          {"reduce-scatter", &nccl::Communicator::ReduceScatter},
                          {"all-reduce", &nccl::Communicator::AllReduce}}) {
    std::vector<float> zeros(static_cast<size_t>(n), 0.0f), got(static_cast<size_t>(n));
    ASSERT_TRUE(recv->CopyFromHost(*ctx_, zeros.data(), n * 4).ok());
    const Status st = ((*comm_).*op)(send->data(), recv->data(), n, nccl::DType::kFloat32);
    ASSERT_TRUE(st.ok()) << name << ": " << st.ToString();
    ASSERT_TRUE(comm_->Synchronize().ok());
    ASSERT_TRUE(recv->CopyToHost(*ctx_, got.data(), n * 4).ok());
    EXPECT_EQ(got, host) << name;
  }
  // bf16, in place.
  std::vector<uint16_t> bits(static_cast<size_t>(n)), back(static_cast<size_t>(n));
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = static_cast<uint16_t>(0x3f80 + i % 64);
  ASSERT_TRUE(send->CopyFromHost(*ctx_, bits.data(), n * 2).ok());
  ASSERT_TRUE(comm_->AllReduce(send->data(), send->data(), n, nccl::DType::kBf16).ok());
  ASSERT_TRUE(comm_->Synchronize().ok());
  ASSERT_TRUE(send->CopyToHost(*ctx_, back.data(), n * 2).ok());
  EXPECT_EQ(back, bits);
  EXPECT_EQ(comm_->AllReduce(send->data(), recv->data(), 0, nccl::DType::kFloat32).code(), StatusCode::kInvalidArgument);
}

// Rank r's inputs of one case: `count` random values per block, in fp32 or bf16 bits, from
// magnitudes whose sums round (so that the order of the sum shows in the bits).
std::vector<char> Inputs(int rank, int64_t elements, ElementType type, uint32_t seed) {
  std::mt19937 rng(seed * 977u + static_cast<uint32_t>(rank));
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::uniform_int_distribution<int> scale(-20, 20);
  std::vector<char> out(static_cast<size_t>(elements * ElementBytes(type)));
  for (int64_t i = 0; i < elements; ++i) {
    const float v = std::ldexp(value(rng), scale(rng));
    if (type == ElementType::kFloat32) std::memcpy(out.data() + i * 4, &v, 4);
    else {
      const uint16_t b = Fp32ToBf16(v);
      std::memcpy(out.data() + i * 2, &b, 2);
    }
  }
  return out;
}

enum class Which { kAllGather, kReduceScatter, kAllReduce, kBroadcast };
const char* WhichName(Which w) {
  switch (w) {
    case Which::kAllGather: return "AllGather";
    case Which::kReduceScatter: return "ReduceScatter";
    case Which::kAllReduce: return "AllReduce";
    case Which::kBroadcast: return "Broadcast";
  }
  return "?";
}

// Elements a rank sends and receives for `count` per block over `ranks`.
int64_t SendElements(Which w, int64_t count, int ranks) { return w == Which::kReduceScatter ? count * ranks : count; }
int64_t RecvElements(Which w, int64_t count, int ranks) { return w == Which::kAllGather ? count * ranks : count; }

Status Issue(Collective& c, Which w, const void* send, void* recv, int64_t count, ElementType type) {
  switch (w) {
    case Which::kAllGather: return Complete(c.AllGather(send, recv, count, type));
    case Which::kReduceScatter: return Complete(c.ReduceScatter(send, recv, count, type));
    case Which::kAllReduce: return Complete(c.AllReduce(send, recv, count, type));
    case Which::kBroadcast: return Complete(c.Broadcast(recv, count * ElementBytes(type), 1 % c.ranks()));
  }
  return Internal("unknown operation");
}

// One case on `ranks` ranks: the local group on host memory, then NCCL on GPUs 0 .. ranks - 1
// (a thread per rank, bootstrapped through a second local group), the received bytes compared.
void ExpectNcclMatchesLocal(int ranks, Which w, ElementType type, int64_t count, uint32_t seed) {
  SCOPED_TRACE(std::string(WhichName(w)) + " of " + std::to_string(count) + " " + std::string(ElementTypeName(type)) + " on " +
               std::to_string(ranks) + " ranks");
  const int64_t eb = ElementBytes(type);
  std::vector<std::vector<char>> send(static_cast<size_t>(ranks)), want(static_cast<size_t>(ranks)), got(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    send[static_cast<size_t>(r)] = Inputs(r, SendElements(w, count, ranks), type, seed);
    want[static_cast<size_t>(r)].assign(static_cast<size_t>(RecvElements(w, count, ranks) * eb), 0);
    if (w == Which::kBroadcast) want[static_cast<size_t>(r)] = send[static_cast<size_t>(r)];
  }
  {
    std::vector<std::unique_ptr<Collective>> local = MakeLocalGroup(ranks);
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        const Status st = Issue(*local[static_cast<size_t>(r)], w, send[static_cast<size_t>(r)].data(), want[static_cast<size_t>(r)].data(), count, type);
        EXPECT_TRUE(st.ok()) << "local rank " << r << ": " << st.ToString();
      });
    }
    for (std::thread& t : threads) t.join();
  }
  // Each rank's thread goes on through every collective call whatever failed before it on that
  // rank (with null buffers the call fails there): a rank that returned early would leave the
  // others waiting in NCCL, and the test would hang instead of failing.
  std::vector<std::unique_ptr<Collective>> bootstrap = MakeLocalGroup(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      const auto R = static_cast<size_t>(r);
      auto ctx = cuda::Context::Open(r);
      EXPECT_TRUE(ctx.ok()) << ctx.status().ToString();
      auto nccl = OpenNcclCollective(*bootstrap[R], r);  // every rank returns, ready or not (the vote)
      EXPECT_TRUE(nccl.ok()) << "rank " << r << ": " << nccl.status().ToString();
      if (!ctx.ok() || !nccl.ok()) return;  // then no rank has joined NCCL
      EXPECT_TRUE((*nccl)->device_memory());
      EXPECT_EQ((*nccl)->backend(), "nccl");
      EXPECT_EQ((*nccl)->ranks(), ranks);
      EXPECT_EQ((*nccl)->rank(), r);
      const int64_t send_bytes = static_cast<int64_t>(send[R].size()), recv_bytes = static_cast<int64_t>(want[R].size());
      auto d_send = (*ctx)->Allocate(send_bytes), d_recv = (*ctx)->Allocate(recv_bytes);
      EXPECT_TRUE(d_send.ok() && d_recv.ok());
      void* send_at = d_send.ok() ? d_send->data() : nullptr;
      void* recv_at = d_recv.ok() ? d_recv->data() : nullptr;
      std::vector<char> fill(static_cast<size_t>(recv_bytes), 0x7f);  // unwritten shows
      if (send_at != nullptr) {
        EXPECT_TRUE(d_send->CopyFromHost(**ctx, send[R].data(), send_bytes).ok());
      }
      if (recv_at != nullptr) {
        EXPECT_TRUE(d_recv->CopyFromHost(**ctx, w == Which::kBroadcast ? send[R].data() : fill.data(), recv_bytes).ok());
      }
      const Status st = Issue(**nccl, w, send_at, recv_at, count, type);
      EXPECT_TRUE(st.ok()) << "rank " << r << ": " << st.ToString();
      got[R].resize(static_cast<size_t>(recv_bytes));
      if (st.ok()) {
        EXPECT_TRUE(d_recv->CopyToHost(**ctx, got[R].data(), recv_bytes).ok());
      }
      EXPECT_TRUE((*nccl)->Barrier().ok());
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) EXPECT_TRUE(got[static_cast<size_t>(r)] == want[static_cast<size_t>(r)]) << "rank " << r << "'s result differs";
}

void ExpectEveryCase(int ranks) {
  uint32_t seed = 1;
  for (Which w : {Which::kAllGather, Which::kReduceScatter, Which::kAllReduce, Which::kBroadcast}) {
    for (ElementType type : {ElementType::kFloat32, ElementType::kBf16}) {
      for (int64_t count : {int64_t{1}, int64_t{1000}, (int64_t{1} << 20) + 3}) ExpectNcclMatchesLocal(ranks, w, type, count, seed++);
    }
  }
}

// The kernel that forms every sum of the nccl back-end, against SumInRankOrder on the host: 2 to
// 8 parts on one GPU (what a machine of one GPU cannot reach through NCCL), fp32 and bf16, the
// output apart and over the first part.
TEST(NcclCollective, TheRankOrderSumIsSumInRankOrder) {
  auto ctx = cuda::Context::Open(0);
  if (!ctx.ok()) GTEST_SKIP() << "no GPU: " << ctx.status().ToString();
  const int64_t count = (int64_t{1} << 16) + 5;
  for (ElementType type : {ElementType::kFloat32, ElementType::kBf16}) {
    const int64_t eb = ElementBytes(type);
    for (int ranks = 2; ranks <= 8; ++ranks) {
      std::vector<char> parts;
      std::vector<const void*> views;
      for (int r = 0; r < ranks; ++r) {
        const std::vector<char> mine = Inputs(r, count, type, 7);
        parts.insert(parts.end(), mine.begin(), mine.end());
      }
      for (int r = 0; r < ranks; ++r) views.push_back(parts.data() + r * count * eb);
      std::vector<char> want(static_cast<size_t>(count * eb)), got(want.size()), over(want.size());
      SumInRankOrder(views, want.data(), count, type);
      auto d_parts = (*ctx)->Allocate(static_cast<int64_t>(parts.size())), d_out = (*ctx)->Allocate(count * eb);
      ASSERT_TRUE(d_parts.ok() && d_out.ok());
      ASSERT_TRUE(d_parts->CopyFromHost(**ctx, parts.data(), static_cast<int64_t>(parts.size())).ok());
      ASSERT_TRUE(cuda::SumRanksInOrder(d_out->data(), d_parts->data(), count, ranks, type == ElementType::kBf16, (*ctx)->stream()).ok());
      ASSERT_TRUE((*ctx)->Synchronize().ok());
      ASSERT_TRUE(d_out->CopyToHost(**ctx, got.data(), count * eb).ok());
      EXPECT_TRUE(got == want) << ElementTypeName(type) << ", " << ranks << " parts";
      ASSERT_TRUE(cuda::SumRanksInOrder(d_parts->data(), d_parts->data(), count, ranks, type == ElementType::kBf16, (*ctx)->stream()).ok());
      ASSERT_TRUE((*ctx)->Synchronize().ok());
      ASSERT_TRUE(d_parts->CopyToHost(**ctx, over.data(), count * eb).ok());
      EXPECT_TRUE(over == want) << ElementTypeName(type) << ", " << ranks << " parts, written over the first";
    }
  }
}

TEST(NcclCollective, OneRankGivesTheLocalBackEndsBits) {
  auto gpus = cuda::Context::Count();
  if (!gpus.ok() || *gpus < 1) GTEST_SKIP() << "no GPU: " << (gpus.ok() ? "none found" : gpus.status().ToString());
  ExpectEveryCase(1);
}

TEST(NcclCollective, EveryGpuGivesTheLocalBackEndsBits) {
  auto gpus = cuda::Context::Count();
  if (!gpus.ok() || *gpus < 2) {
    GTEST_SKIP() << "needs 2 or more GPUs: " << (gpus.ok() ? "this machine has " + std::to_string(*gpus) : gpus.status().ToString());
  }
  ExpectEveryCase(std::min(*gpus, 4));
}

}  // namespace
}  // namespace tierflow::real
