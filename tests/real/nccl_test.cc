// The NCCL communicator with one rank on GPU 0: each collective of one rank is a copy (all-gather,
// reduce-scatter) or the identity sum (all-reduce, in place too), in fp32 and bf16. Skips, with the
// reason, without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "tierflow/real/cuda_compute.h"
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

}  // namespace
}  // namespace tierflow::real
