// The CUDA back-end against the CPU reference. Without a GPU (or its driver) every test skips
// with the reason Context::Open gives.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <random>
#include <tuple>
#include <algorithm>
#include <vector>

#include "tierflow/real/adamw.h"
#include "tierflow/real/cpu_ops.h"
#include "tierflow/real/cpu_threads.h"
#include "tierflow/real/cuda_compute.h"

namespace tierflow::real {
namespace {

std::unique_ptr<cuda::Context> OpenOrSkipReason(std::string* reason) {
  auto ctx = cuda::Context::Open(0);
  if (!ctx.ok()) {
    *reason = ctx.status().ToString();
    return nullptr;
  }
  return std::move(*ctx);
}

TEST(CudaContext, OpensOrSaysWhatIsMissing) {
  std::string reason;
  auto ctx = OpenOrSkipReason(&reason);
  if (ctx == nullptr) {
    EXPECT_NE(reason.find("CUDA"), std::string::npos) << reason;  // the reason names what is missing
    GTEST_SKIP() << "no GPU: " << reason;
  }
  EXPECT_FALSE(ctx->device_name().empty());
  EXPECT_GE(ctx->compute_capability(), 50);
  auto too_far = cuda::Context::Open(1 << 20);
  ASSERT_FALSE(too_far.ok());
  EXPECT_NE(too_far.status().message().find("no CUDA device"), std::string::npos) << too_far.status().ToString();
}

// Random bf16 values (and their fp32 images, the CPU reference's inputs).
struct Bf16Array {
  std::vector<uint16_t> bits;
  std::vector<float> values;
};
Bf16Array RandomBf16(size_t n, float scale, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, scale);
  Bf16Array a{std::vector<uint16_t>(n), std::vector<float>(n)};
  for (size_t i = 0; i < n; ++i) a.values[i] = Bf16ToFp32(a.bits[i] = Fp32ToBf16(normal(rng)));
  return a;
}

StatusOr<cuda::DeviceBuffer> Upload(const cuda::Context& ctx, const void* data, int64_t bytes) {
  TF_ASSIGN_OR_RETURN(cuda::DeviceBuffer b, ctx.Allocate(bytes));
  TF_RETURN_IF_ERROR(b.CopyFromHost(ctx, data, bytes));
  return b;
}

// The worst difference relative to the largest reference value, printed with its element; the
// ops' contract is 1e-2 for bf16 inputs with fp32 accumulation.
double WorstRelative(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  double scale = 0, worst = 0;
  size_t at = 0;
  for (float v : want) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]) / scale;
    if (err > worst) worst = err, at = i;
  }
  std::printf("%s: worst element [%zu] gpu %.6g cpu %.6g (%.2e of the largest)\n", what.c_str(), at, got[at], want[at], worst);
  return worst;
}

// Each test on GPU 0, skipped with the reason where there is none.
class CudaLinear : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason;
    ctx_ = OpenOrSkipReason(&reason);
    if (ctx_ == nullptr) GTEST_SKIP() << "no GPU: " << reason;
  }
  std::unique_ptr<cuda::Context> ctx_;
  CpuThreads threads_{2};
};

using Shape = std::tuple<int64_t, int64_t, int64_t>;  // rows, in, out
const Shape kShapes[] = {{256, 2048, 8192}, {37, 300, 129}};  // a Llama-1B MLP up-projection, and an odd one

// bf16 inputs, fp32 accumulation: within 1e-2 of the fp32 reference on the same (bf16-rounded)
// inputs, relative to the largest output.
TEST_F(CudaLinear, ForwardBf16MatchesTheCpuReference) {
  std::mt19937 rng(11);
  for (auto [n, in, out_dim] : kShapes) {
    const Bf16Array x = RandomBf16(static_cast<size_t>(n * in), 1.0f, rng);
    const Bf16Array w = RandomBf16(static_cast<size_t>(out_dim * in), 0.02f, rng);
    std::vector<float> want(static_cast<size_t>(n * out_dim)), got(want.size());
    cpu::LinearForward(want.data(), x.values.data(), w.values.data(), n, in, out_dim, threads_);

    auto dx = Upload(*ctx_, x.bits.data(), static_cast<int64_t>(x.bits.size() * 2));
    auto dw = Upload(*ctx_, w.bits.data(), static_cast<int64_t>(w.bits.size() * 2));
    auto dout = ctx_->Allocate(static_cast<int64_t>(got.size() * 4));
    ASSERT_TRUE(dx.ok() && dw.ok() && dout.ok());
    const Status st = ctx_->LinearForwardBf16(static_cast<float*>(dout->data()), static_cast<const uint16_t*>(dx->data()),
                                             static_cast<const uint16_t*>(dw->data()), n, in, out_dim);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_TRUE(ctx_->Synchronize().ok());
    ASSERT_TRUE(dout->CopyToHost(*ctx_, got.data(), dout->size_bytes()).ok());
    EXPECT_LE(WorstRelative(got, want, "linear forward " + std::to_string(n) + "x" + std::to_string(in) + "->" +
                                           std::to_string(out_dim) + " on " + ctx_->device_name()),
              1e-2);
  }
  // Bad shapes are refused before cuBLAS sees them.
  EXPECT_EQ(ctx_->LinearForwardBf16(nullptr, nullptr, nullptr, 0, 4, 4).code(), StatusCode::kInvalidArgument);
}

// dx += dout W, dw += dout^T x into accumulators that already hold values (the += matters: a
// layer's gradient adds over micro-batches).
TEST_F(CudaLinear, BackwardBf16AccumulatesAsTheCpuReference) {
  std::mt19937 rng(12);
  for (auto [n, in, out_dim] : kShapes) {
    const Bf16Array x = RandomBf16(static_cast<size_t>(n * in), 1.0f, rng);
    const Bf16Array w = RandomBf16(static_cast<size_t>(out_dim * in), 0.02f, rng);
    const Bf16Array dout = RandomBf16(static_cast<size_t>(n * out_dim), 0.1f, rng);
    const Bf16Array dx0 = RandomBf16(x.values.size(), 0.5f, rng);
    const Bf16Array dw0 = RandomBf16(w.values.size(), 0.5f, rng);
    std::vector<float> want_dx = dx0.values, want_dw = dw0.values;
    cpu::LinearBackward(want_dx.data(), want_dw.data(), dout.values.data(), x.values.data(), w.values.data(), n, in,
                        out_dim, threads_);

    auto d_x = Upload(*ctx_, x.bits.data(), static_cast<int64_t>(x.bits.size() * 2));
    auto d_w = Upload(*ctx_, w.bits.data(), static_cast<int64_t>(w.bits.size() * 2));
    auto d_dout = Upload(*ctx_, dout.bits.data(), static_cast<int64_t>(dout.bits.size() * 2));
    auto d_dx = Upload(*ctx_, dx0.values.data(), static_cast<int64_t>(dx0.values.size() * 4));
    auto d_dw = Upload(*ctx_, dw0.values.data(), static_cast<int64_t>(dw0.values.size() * 4));
    ASSERT_TRUE(d_x.ok() && d_w.ok() && d_dout.ok() && d_dx.ok() && d_dw.ok());
    const Status st = ctx_->LinearBackwardBf16(
        static_cast<float*>(d_dx->data()), static_cast<float*>(d_dw->data()), static_cast<const uint16_t*>(d_dout->data()),
        static_cast<const uint16_t*>(d_x->data()), static_cast<const uint16_t*>(d_w->data()), n, in, out_dim);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_TRUE(ctx_->Synchronize().ok());
    std::vector<float> got_dx(want_dx.size()), got_dw(want_dw.size());
    ASSERT_TRUE(d_dx->CopyToHost(*ctx_, got_dx.data(), d_dx->size_bytes()).ok());
    ASSERT_TRUE(d_dw->CopyToHost(*ctx_, got_dw.data(), d_dw->size_bytes()).ok());
    const std::string shape = std::to_string(n) + "x" + std::to_string(in) + "->" + std::to_string(out_dim);
    EXPECT_LE(WorstRelative(got_dx, want_dx, "linear backward dx " + shape), 1e-2);
    EXPECT_LE(WorstRelative(got_dw, want_dw, "linear backward dw " + shape), 1e-2);
  }
}

}  // namespace
}  // namespace tierflow::real
