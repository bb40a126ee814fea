// The CUDA back-end against the CPU reference. Without a GPU (or its driver) every test skips
// with the reason Context::Open gives.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <tuple>
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

// bf16 inputs, fp32 accumulation: within 1e-2 of the fp32 reference on the same (bf16-rounded)
// inputs, relative to the largest output, at a Llama-like shape and an odd one.
TEST(CudaLinear, ForwardBf16MatchesTheCpuReference) {
  std::string reason;
  auto ctx = OpenOrSkipReason(&reason);
  if (ctx == nullptr) GTEST_SKIP() << "no GPU: " << reason;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  CpuThreads threads(2);
  for (auto [n, in, out_dim] : {std::tuple<int64_t, int64_t, int64_t>{256, 2048, 8192}, {37, 300, 129}}) {
    std::vector<uint16_t> xb(static_cast<size_t>(n * in)), wb(static_cast<size_t>(out_dim * in));
    std::vector<float> xf(xb.size()), wf(wb.size());
    for (size_t i = 0; i < xb.size(); ++i) xf[i] = Bf16ToFp32(xb[i] = Fp32ToBf16(normal(rng)));
    for (size_t i = 0; i < wb.size(); ++i) wf[i] = Bf16ToFp32(wb[i] = Fp32ToBf16(0.02f * normal(rng)));
    std::vector<float> want(static_cast<size_t>(n * out_dim)), got(want.size());
    cpu::LinearForward(want.data(), xf.data(), wf.data(), n, in, out_dim, threads);

    auto dx = ctx->Allocate(static_cast<int64_t>(xb.size() * 2));
    auto dw = ctx->Allocate(static_cast<int64_t>(wb.size() * 2));
    auto dout = ctx->Allocate(static_cast<int64_t>(got.size() * 4));
    ASSERT_TRUE(dx.ok() && dw.ok() && dout.ok());
    ASSERT_TRUE(dx->CopyFromHost(*ctx, xb.data(), dx->size_bytes()).ok());
    ASSERT_TRUE(dw->CopyFromHost(*ctx, wb.data(), dw->size_bytes()).ok());
    const Status st = ctx->LinearForwardBf16(static_cast<float*>(dout->data()), static_cast<const uint16_t*>(dx->data()),
                                             static_cast<const uint16_t*>(dw->data()), n, in, out_dim);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_TRUE(ctx->Synchronize().ok());
    ASSERT_TRUE(dout->CopyToHost(*ctx, got.data(), dout->size_bytes()).ok());

    double scale = 0, worst = 0;
    size_t at = 0;
    for (float v : want) scale = std::max(scale, std::fabs(static_cast<double>(v)));
    for (size_t i = 0; i < want.size(); ++i) {
      const double err = std::fabs(static_cast<double>(got[i]) - want[i]) / scale;
      if (err > worst) worst = err, at = i;
    }
    std::printf("linear %lldx%lld -> %lld on %s: worst element [%zu] gpu %.6g cpu %.6g (%.2e of the largest)\n",
                static_cast<long long>(n), static_cast<long long>(in), static_cast<long long>(out_dim),
                ctx->device_name().c_str(), at, got[at], want[at], worst);
    EXPECT_LE(worst, 1e-2);
  }
  // Bad shapes are refused before cuBLAS sees them.
  EXPECT_EQ(ctx->LinearForwardBf16(nullptr, nullptr, nullptr, 0, 4, 4).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tierflow::real
