// The CUDA back-end (cuda_ops.h) op by op against the CPU reference (cpu_ops.h) on the same
// bf16-rounded inputs, printing each op's worst element; the contract is 1e-2 of the largest
// reference value. Without a GPU (or its driver) every test skips with the reason
// Context::Open gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "tierflow/models/llm.h"
#include "tierflow/real/adamw.h"
#include "tierflow/real/cpu_ops.h"
#include "tierflow/real/cpu_threads.h"
#include "tierflow/real/cuda_compute.h"
#include "tierflow/real/cuda_ops.h"

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

// Random bf16 values: their bits (the GPU's input) and fp32 images (the CPU reference's).
struct Bf16Array {
  std::vector<uint16_t> bits;
  std::vector<float> values;
};
Bf16Array RandomBf16(int64_t n, float scale, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, scale);
  Bf16Array a{std::vector<uint16_t>(static_cast<size_t>(n)), std::vector<float>(static_cast<size_t>(n))};
  for (size_t i = 0; i < a.bits.size(); ++i) a.values[i] = Bf16ToFp32(a.bits[i] = Fp32ToBf16(normal(rng)));
  return a;
}
std::vector<float> Widen(const std::vector<uint16_t>& bits) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = Bf16ToFp32(bits[i]);
  return out;
}

// The worst difference relative to the largest reference value, printed with its element.
double WorstRelative(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  double scale = 0, worst = 0;
  size_t at = 0;
  for (float v : want) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  if (scale == 0) scale = 1;
  for (size_t i = 0; i < want.size(); ++i) {
    double err = std::fabs(static_cast<double>(got[i]) - want[i]) / scale;
    if (std::isnan(err)) err = INFINITY;  // a NaN anywhere is the worst, and stays so
    if (err > worst) worst = err, at = i;
  }
  std::printf("%s: worst element [%zu] gpu %.6g cpu %.6g (%.2e of the largest, %.4g)\n", what.c_str(), at, got[at],
              want[at], worst, scale);
  return worst;
}

constexpr double kTolerance = 1e-2;

// Each test on GPU 0, skipped with the reason where there is none; device arrays up and down.
class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason;
    ctx_ = OpenOrSkipReason(&reason);
    if (ctx_ == nullptr) GTEST_SKIP() << "no GPU: " << reason;
  }

  template <typename V>
  V* Up(const std::vector<V>& host) {
    auto b = ctx_->Allocate(static_cast<int64_t>(std::max<size_t>(host.size(), 1) * sizeof(V)));
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    if (!b.ok()) return nullptr;
    if (!host.empty()) {
      EXPECT_TRUE(b->CopyFromHost(*ctx_, host.data(), static_cast<int64_t>(host.size() * sizeof(V))).ok());
    }
    buffers_.push_back(std::move(*b));
    return static_cast<V*>(buffers_.back().data());
  }
  template <typename V>
  V* Zeros(int64_t n) {
    return Up(std::vector<V>(static_cast<size_t>(n)));
  }
  template <typename V>
  std::vector<V> Down(const V* device, int64_t n) {
    std::vector<V> host(static_cast<size_t>(n));
    EXPECT_TRUE(ctx_->Synchronize().ok());
    const Status st = [&] {
      for (const auto& b : buffers_) {
        if (b.data() == device) return b.CopyToHost(*ctx_, host.data(), n * static_cast<int64_t>(sizeof(V)));
      }
      return InvalidArgument("not a test buffer");
    }();
    EXPECT_TRUE(st.ok()) << st.ToString();
    return host;
  }
  std::vector<float> DownBf16(const uint16_t* device, int64_t n) { return Widen(Down(device, n)); }

  std::unique_ptr<cuda::Context> ctx_;
  std::vector<cuda::DeviceBuffer> buffers_;
  CpuThreads threads_{2};
  std::mt19937 rng_{7};
};

#define ASSERT_OK(expr)                                 \
  do {                                                  \
    const Status tf_st = (expr);                        \
    ASSERT_TRUE(tf_st.ok()) << #expr << ": " << tf_st.ToString(); \
  } while (0)

TEST_F(CudaOps, LinearForwardAndBackward) {
  // A Llama-3.2-1B MLP up-projection, and an odd shape.
  for (auto [n, in, out_dim] : {std::tuple<int64_t, int64_t, int64_t>{256, 2048, 8192}, {37, 300, 129}}) {
    const std::string shape = std::to_string(n) + "x" + std::to_string(in) + "->" + std::to_string(out_dim);
    const Bf16Array x = RandomBf16(n * in, 1.0f, rng_), w = RandomBf16(out_dim * in, 0.02f, rng_);
    const Bf16Array dout = RandomBf16(n * out_dim, 0.1f, rng_);
    const Bf16Array dx0 = RandomBf16(n * in, 0.5f, rng_), dw0 = RandomBf16(out_dim * in, 0.5f, rng_);
    std::vector<float> want(static_cast<size_t>(n * out_dim)), want_dx = dx0.values, want_dw = dw0.values;
    cpu::LinearForward(want.data(), x.values.data(), w.values.data(), n, in, out_dim, threads_);
    cpu::LinearBackward(want_dx.data(), want_dw.data(), dout.values.data(), x.values.data(), w.values.data(), n, in,
                        out_dim, threads_);

    uint16_t *d_x = Up(x.bits), *d_w = Up(w.bits), *d_dout = Up(dout.bits), *d_out = Zeros<uint16_t>(n * out_dim);
    float *d_dx = Up(dx0.values), *d_dw = Up(dw0.values);
    ASSERT_OK(cuda::LinearForward(*ctx_, d_out, d_x, d_w, n, in, out_dim));
    ASSERT_OK(cuda::LinearBackward(*ctx_, d_dx, d_dw, d_dout, d_x, d_w, n, in, out_dim));
    EXPECT_LE(WorstRelative(DownBf16(d_out, n * out_dim), want, "linear forward " + shape + " on " + ctx_->device_name()),
              kTolerance);
    EXPECT_LE(WorstRelative(Down(d_dx, n * in), want_dx, "linear backward dx " + shape), kTolerance);
    EXPECT_LE(WorstRelative(Down(d_dw, out_dim * in), want_dw, "linear backward dw " + shape), kTolerance);
    // Overwritten instead: what was there (NaN here) is not read.
    std::vector<float> set_dx(static_cast<size_t>(n * in), 0.0f), set_dw(static_cast<size_t>(out_dim * in), 0.0f);
    cpu::LinearBackward(set_dx.data(), set_dw.data(), dout.values.data(), x.values.data(), w.values.data(), n, in,
                        out_dim, threads_);
    d_dx = Up(std::vector<float>(set_dx.size(), NAN));
    d_dw = Up(std::vector<float>(set_dw.size(), NAN));
    ASSERT_OK(cuda::LinearBackward(*ctx_, d_dx, d_dw, d_dout, d_x, d_w, n, in, out_dim, cuda::GradMode::kOverwrite,
                                   cuda::GradMode::kOverwrite));
    EXPECT_LE(WorstRelative(Down(d_dx, n * in), set_dx, "linear backward dx overwritten " + shape), kTolerance);
    EXPECT_LE(WorstRelative(Down(d_dw, out_dim * in), set_dw, "linear backward dw overwritten " + shape), kTolerance);
  }
  EXPECT_EQ(cuda::LinearForward<uint16_t>(*ctx_, nullptr, nullptr, nullptr, 0, 4, 4).code(), StatusCode::kInvalidArgument);
}

// The fp32 instantiations: cuBLAS in fp32 (no TF32) against the same math, to fp32 rounding.
TEST_F(CudaOps, Fp32LinearAndAttention) {
  const int64_t n = 45, in = 96, out_dim = 70;
  const Bf16Array x = RandomBf16(n * in, 1.0f, rng_), w = RandomBf16(out_dim * in, 0.1f, rng_);
  const Bf16Array dout = RandomBf16(n * out_dim, 0.1f, rng_);
  std::vector<float> want(n * out_dim), want_dx(n * in, 0.0f);
  cpu::LinearForward(want.data(), x.values.data(), w.values.data(), n, in, out_dim, threads_);
  cpu::LinearBackward(want_dx.data(), static_cast<float*>(nullptr), dout.values.data(), x.values.data(),
                      w.values.data(), n, in, out_dim, threads_);
  float *d_x = Up(x.values), *d_w = Up(w.values), *d_out = Zeros<float>(n * out_dim), *d_dx = Zeros<float>(n * in);
  ASSERT_OK(cuda::LinearForward(*ctx_, d_out, d_x, d_w, n, in, out_dim));
  ASSERT_OK(cuda::LinearBackward(*ctx_, d_dx, nullptr, Up(dout.values), d_x, d_w, n, in, out_dim));  // dw skipped
  EXPECT_LE(WorstRelative(Down(d_out, n * out_dim), want, "fp32 linear forward"), 1e-5);
  EXPECT_LE(WorstRelative(Down(d_dx, n * in), want_dx, "fp32 linear backward dx only"), 1e-5);

  const int64_t batch = 2, seq = 19, heads = 4, kv = 2, d = 8, nq = batch * seq * heads * d, nkv = batch * seq * kv * d;
  const Bf16Array q = RandomBf16(nq, 1.0f, rng_), k = RandomBf16(nkv, 1.0f, rng_), v = RandomBf16(nkv, 1.0f, rng_);
  const Bf16Array g = RandomBf16(nq, 1.0f, rng_);
  std::vector<float> want_o(nq), want_p(batch * heads * seq * seq), want_dq(nq, 0.0f), want_dv(nkv, 0.0f);
  cpu::AttentionForward(want_o.data(), want_p.data(), q.values.data(), k.values.data(), v.values.data(), batch, seq,
                        heads, kv, d, threads_);
  cpu::AttentionBackward(want_dq.data(), static_cast<float*>(nullptr), want_dv.data(), g.values.data(), q.values.data(),
                         k.values.data(), v.values.data(), want_p.data(), batch, seq, heads, kv, d, threads_);
  float *d_q = Up(q.values), *d_k = Up(k.values), *d_v = Up(v.values), *d_o = Zeros<float>(nq);
  float *d_p = Zeros<float>(static_cast<int64_t>(want_p.size())), *d_dq = Zeros<float>(nq), *d_dv = Zeros<float>(nkv);
  ASSERT_OK(cuda::AttentionForward(*ctx_, d_o, d_p, d_q, d_k, d_v, batch, seq, heads, kv, d));
  ASSERT_OK(cuda::AttentionBackward(*ctx_, d_dq, nullptr, d_dv, Up(g.values), d_q, d_k, d_v, d_p, batch, seq, heads, kv,
                                    d));  // dk skipped
  EXPECT_LE(WorstRelative(Down(d_o, nq), want_o, "fp32 attention forward"), 1e-5);
  EXPECT_LE(WorstRelative(Down(d_dq, nq), want_dq, "fp32 attention dq"), 1e-5);
  EXPECT_LE(WorstRelative(Down(d_dv, nkv), want_dv, "fp32 attention dv"), 1e-5);
}

TEST_F(CudaOps, EmbeddingForwardAndBackward) {
  const int64_t rows = 300, channels = 200, vocab = 50;
  std::vector<int32_t> tokens(rows);
  for (int64_t n = 0; n < rows; ++n) tokens[n] = static_cast<int32_t>((n * 7) % vocab);  // every token repeats
  const Bf16Array table = RandomBf16(vocab * channels, 1.0f, rng_), dout = RandomBf16(rows * channels, 1.0f, rng_);
  const Bf16Array dtable0 = RandomBf16(vocab * channels, 1.0f, rng_);
  std::vector<float> want(rows * channels), want_d = dtable0.values;
  cpu::EmbeddingForward(want.data(), tokens.data(), table.values.data(), rows, channels, threads_);
  cpu::EmbeddingBackward(want_d.data(), tokens.data(), dout.values.data(), rows, channels, threads_);
  int32_t* d_tokens = Up(tokens);
  uint16_t* d_out = Zeros<uint16_t>(rows * channels);
  float* d_dtable = Up(dtable0.values);
  ASSERT_OK(cuda::EmbeddingForward(*ctx_, d_out, d_tokens, Up(table.bits), rows, channels));
  ASSERT_OK(cuda::EmbeddingBackward(*ctx_, d_dtable, d_tokens, Up(dout.bits), rows, channels));
  EXPECT_EQ(WorstRelative(DownBf16(d_out, rows * channels), want, "embedding forward"), 0.0);  // a copy
  // Rows added in the same order as the CPU: the same fp32 sums.
  EXPECT_EQ(WorstRelative(Down(d_dtable, vocab * channels), want_d, "embedding backward"), 0.0);
}

TEST_F(CudaOps, RmsNormForwardAndBackward) {
  const int64_t rows = 75, channels = 2048;  // the weight gradient's last row block is partial
  const Bf16Array x = RandomBf16(rows * channels, 1.0f, rng_), w = RandomBf16(channels, 1.0f, rng_);
  const Bf16Array dout = RandomBf16(rows * channels, 1.0f, rng_);
  const Bf16Array dx0 = RandomBf16(rows * channels, 1.0f, rng_), dw0 = RandomBf16(channels, 1.0f, rng_);
  std::vector<float> want(rows * channels), want_rstd(rows), want_dx = dx0.values, want_dw = dw0.values;
  cpu::RmsNormForward(want.data(), want_rstd.data(), x.values.data(), w.values.data(), rows, channels, 1e-5, threads_);
  cpu::RmsNormBackward(want_dx.data(), want_dw.data(), dout.values.data(), x.values.data(), w.values.data(),
                       want_rstd.data(), rows, channels, threads_);
  uint16_t *d_x = Up(x.bits), *d_w = Up(w.bits), *d_out = Zeros<uint16_t>(rows * channels);
  float *d_rstd = Zeros<float>(rows), *d_dx = Up(dx0.values), *d_dw = Up(dw0.values);
  ASSERT_OK(cuda::RmsNormForward(*ctx_, d_out, d_rstd, d_x, d_w, rows, channels, 1e-5));
  ASSERT_OK(cuda::RmsNormBackward(*ctx_, d_dx, d_dw, Up(dout.bits), d_x, d_w, d_rstd, rows, channels));
  EXPECT_LE(WorstRelative(DownBf16(d_out, rows * channels), want, "rmsnorm forward"), kTolerance);
  EXPECT_LE(WorstRelative(Down(d_rstd, rows), want_rstd, "rmsnorm rstd"), 1e-5);
  EXPECT_LE(WorstRelative(Down(d_dx, rows * channels), want_dx, "rmsnorm backward dx"), kTolerance);
  EXPECT_LE(WorstRelative(Down(d_dw, channels), want_dw, "rmsnorm backward dw"), kTolerance);

  // More row blocks than a grid's 65535 in y: the weight gradient's blocks are grid-strided.
  const int64_t many = 65535 * cuda::kRmsNormRowBlock + 77, narrow = 8;
  const Bf16Array mx = RandomBf16(many * narrow, 1.0f, rng_), mw = RandomBf16(narrow, 1.0f, rng_);
  const Bf16Array mdout = RandomBf16(many * narrow, 1.0f, rng_);
  std::vector<float> m_out(many * narrow), m_rstd(many), m_dw(narrow, 0.0f);
  cpu::RmsNormForward(m_out.data(), m_rstd.data(), mx.values.data(), mw.values.data(), many, narrow, 1e-5, threads_);
  cpu::RmsNormBackward(static_cast<float*>(nullptr), m_dw.data(), mdout.values.data(), mx.values.data(), mw.values.data(),
                       m_rstd.data(), many, narrow, threads_);
  float* d_mdw = Zeros<float>(narrow);
  ASSERT_OK(cuda::RmsNormBackward(*ctx_, static_cast<float*>(nullptr), d_mdw, Up(mdout.bits), Up(mx.bits), Up(mw.bits),
                                  Up(m_rstd), many, narrow));
  EXPECT_LE(WorstRelative(Down(d_mdw, narrow), m_dw, "rmsnorm backward dw over 2M rows"), kTolerance);
}

TEST_F(CudaOps, RopeForwardAndBackward) {
  const int64_t batch = 2, seq = 128, heads = 8, head_dim = 64, rows = batch * seq, n = rows * heads * head_dim;
  std::vector<float> cos_table(seq * head_dim / 2), sin_table(cos_table.size());
  cpu::RopeTables(cos_table.data(), sin_table.data(), seq, models::RopeInverseFrequencies(head_dim, 500000.0));
  const Bf16Array x = RandomBf16(n, 1.0f, rng_), dx = RandomBf16(n, 1.0f, rng_);
  std::vector<float> want = x.values, want_d = dx.values;
  cpu::RopeForward(want.data(), cos_table.data(), sin_table.data(), rows, seq, heads, head_dim, threads_);
  cpu::RopeBackward(want_d.data(), cos_table.data(), sin_table.data(), rows, seq, heads, head_dim, threads_);
  const float *d_cos = Up(cos_table), *d_sin = Up(sin_table);
  uint16_t* d_x = Up(x.bits);
  float* d_dx = Up(dx.values);
  ASSERT_OK(cuda::RopeForward(*ctx_, d_x, d_cos, d_sin, rows, seq, heads, head_dim));
  ASSERT_OK(cuda::RopeBackward(*ctx_, d_dx, d_cos, d_sin, rows, seq, heads, head_dim));
  EXPECT_LE(WorstRelative(DownBf16(d_x, n), want, "rope forward"), kTolerance);
  EXPECT_LE(WorstRelative(Down(d_dx, n), want_d, "rope backward"), 1e-5);  // fp32 throughout
}

// Both attentions against the CPU reference on the same inputs: the materialised one (batched
// GEMMs and the [B, H, S, S] probabilities) and the fused kernels, over GQA, one kv head and plain
// heads, sequences that end mid-tile, every head_dim the fused kernels take and Llama-1B's heads;
// each backward twice, from gradients that hold values (they are added to), bit-identical.
TEST_F(CudaOps, AttentionForwardAndBackward) {
  struct Shape {
    int64_t batch, seq, heads, kv_heads, head_dim;
  };
  // 1x37 with 3/1 heads: an odd batch * heads * seq (the fused backward's scratch alignment).
  for (const Shape s : {Shape{2, 37, 4, 2, 16}, Shape{2, 33, 4, 1, 32}, Shape{1, 40, 4, 4, 32}, Shape{1, 37, 3, 1, 64},
                        Shape{1, 200, 4, 4, 64}, Shape{1, 256, 32, 8, 64}, Shape{2, 130, 4, 2, 128}}) {
    const std::string name = std::to_string(s.batch) + "x" + std::to_string(s.seq) + " heads " + std::to_string(s.heads) +
                             "/" + std::to_string(s.kv_heads) + " d " + std::to_string(s.head_dim);
    const int64_t rows = s.batch * s.seq, nq = rows * s.heads * s.head_dim, nkv = rows * s.kv_heads * s.head_dim;
    const int64_t np = s.batch * s.heads * s.seq * s.seq;
    const Bf16Array q = RandomBf16(nq, 1.0f, rng_), k = RandomBf16(nkv, 1.0f, rng_), v = RandomBf16(nkv, 1.0f, rng_);
    const Bf16Array dout = RandomBf16(nq, 1.0f, rng_);
    const Bf16Array dq0 = RandomBf16(nq, 0.1f, rng_), dk0 = RandomBf16(nkv, 0.1f, rng_), dv0 = RandomBf16(nkv, 0.1f, rng_);
    std::vector<float> want(nq), want_p(np), want_dq = dq0.values, want_dk = dk0.values, want_dv = dv0.values;
    cpu::AttentionForward(want.data(), want_p.data(), q.values.data(), k.values.data(), v.values.data(), s.batch, s.seq,
                          s.heads, s.kv_heads, s.head_dim, threads_);
    cpu::AttentionBackward(want_dq.data(), want_dk.data(), want_dv.data(), dout.values.data(), q.values.data(),
                           k.values.data(), v.values.data(), want_p.data(), s.batch, s.seq, s.heads, s.kv_heads,
                           s.head_dim, threads_);
    uint16_t *d_q = Up(q.bits), *d_k = Up(k.bits), *d_v = Up(v.bits), *d_dout = Up(dout.bits);
    // One implementation: its forward into d_out, then its backward twice.
    auto check = [&](const std::string& kind, uint16_t* d_out, const std::function<Status()>& forward,
                     const std::function<Status(float*, float*, float*)>& backward) {
      ASSERT_OK(forward());
      EXPECT_LE(WorstRelative(DownBf16(d_out, nq), want, kind + " forward " + name), kTolerance);
      std::vector<float> first[3];
      for (int run = 0; run < 2; ++run) {
        float *d_dq = Up(dq0.values), *d_dk = Up(dk0.values), *d_dv = Up(dv0.values);
        ASSERT_OK(backward(d_dq, d_dk, d_dv));
        std::vector<float> got[3] = {Down(d_dq, nq), Down(d_dk, nkv), Down(d_dv, nkv)};
        if (run == 0) {
          EXPECT_LE(WorstRelative(got[0], want_dq, kind + " dq " + name), kTolerance);
          EXPECT_LE(WorstRelative(got[1], want_dk, kind + " dk " + name), kTolerance);
          EXPECT_LE(WorstRelative(got[2], want_dv, kind + " dv " + name), kTolerance);
          for (int i = 0; i < 3; ++i) first[i] = got[i];
        } else {
          for (int i = 0; i < 3; ++i) {
            EXPECT_EQ(std::memcmp(got[i].data(), first[i].data(), got[i].size() * 4), 0)
                << kind << " " << name << ": run-to-run difference " << i;
          }
        }
      }
    };
    uint16_t* d_out = Zeros<uint16_t>(nq);
    float* d_p = Zeros<float>(np);
    check(
        "attention", d_out,
        [&] { return cuda::AttentionForward(*ctx_, d_out, d_p, d_q, d_k, d_v, s.batch, s.seq, s.heads, s.kv_heads, s.head_dim); },
        [&](float* dq, float* dk, float* dv) {
          return cuda::AttentionBackward(*ctx_, dq, dk, dv, d_dout, d_q, d_k, d_v, d_p, s.batch, s.seq, s.heads, s.kv_heads,
                                         s.head_dim);
        });
    EXPECT_LE(WorstRelative(Down(d_p, np), want_p, "attention probabilities " + name), kTolerance);
    uint16_t* d_flash_out = Zeros<uint16_t>(nq);
    float* d_lse = Zeros<float>(s.batch * s.heads * s.seq);
    check(
        "flash attention", d_flash_out,
        [&] {
          return cuda::FlashAttentionForward(*ctx_, d_flash_out, d_lse, d_q, d_k, d_v, s.batch, s.seq, s.heads, s.kv_heads,
                                             s.head_dim);
        },
        [&](float* dq, float* dk, float* dv) {
          return cuda::FlashAttentionBackward(*ctx_, dq, dk, dv, d_dout, d_q, d_k, d_v, d_flash_out, d_lse, s.batch, s.seq,
                                              s.heads, s.kv_heads, s.head_dim);
        });
    // One gradient at a time (the others null): each the same as with all three.
    const std::vector<float>* starts[3] = {&dq0.values, &dk0.values, &dv0.values};
    std::vector<float> all[3];
    for (int pass = -1; pass < 3; ++pass) {
      float* d[3];
      for (int i = 0; i < 3; ++i) d[i] = (pass < 0 || pass == i) ? Up(*starts[i]) : nullptr;
      ASSERT_OK(cuda::FlashAttentionBackward(*ctx_, d[0], d[1], d[2], d_dout, d_q, d_k, d_v, d_flash_out, d_lse, s.batch,
                                             s.seq, s.heads, s.kv_heads, s.head_dim));
      for (int i = 0; i < 3; ++i) {
        if (d[i] == nullptr) continue;
        std::vector<float> got = Down(d[i], static_cast<int64_t>(starts[i]->size()));
        if (pass < 0) {
          all[i] = std::move(got);
        } else {
          EXPECT_EQ(std::memcmp(got.data(), all[i].data(), got.size() * 4), 0) << name << ": gradient " << i << " alone";
        }
      }
    }
  }
  EXPECT_EQ(cuda::AttentionForward<uint16_t>(*ctx_, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 8, 6, 4, 16).code(),
            StatusCode::kInvalidArgument);  // 6 heads over 4 kv heads
  EXPECT_EQ(cuda::FlashAttentionForward(*ctx_, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 8, 6, 4, 64).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::FlashAttentionForward(*ctx_, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 8, 4, 4, 48).code(),
            StatusCode::kInvalidArgument);  // head_dim 48
}

TEST_F(CudaOps, SwiGluAndResidual) {
  const int64_t n = 100003;
  const Bf16Array gate = RandomBf16(n, 2.0f, rng_), up = RandomBf16(n, 1.0f, rng_), dout = RandomBf16(n, 1.0f, rng_);
  std::vector<float> want(n), want_dg(n, 0.5f), want_du(n, -0.5f), want_sum(n);
  cpu::SwiGluForward(want.data(), gate.values.data(), up.values.data(), n, threads_);
  cpu::SwiGluBackward(want_dg.data(), want_du.data(), dout.values.data(), gate.values.data(), up.values.data(), n,
                      threads_);
  cpu::ResidualAdd(want_sum.data(), gate.values.data(), up.values.data(), n, threads_);
  uint16_t *d_gate = Up(gate.bits), *d_up = Up(up.bits), *d_out = Zeros<uint16_t>(n);
  float *d_dg = Up(std::vector<float>(n, 0.5f)), *d_du = Up(std::vector<float>(n, -0.5f));
  ASSERT_OK(cuda::SwiGluForward(*ctx_, d_out, d_gate, d_up, n));
  ASSERT_OK(cuda::SwiGluBackward(*ctx_, d_dg, d_du, Up(dout.bits), d_gate, d_up, n));
  EXPECT_LE(WorstRelative(DownBf16(d_out, n), want, "swiglu forward"), kTolerance);
  EXPECT_LE(WorstRelative(Down(d_dg, n), want_dg, "swiglu backward dgate"), 1e-5);
  EXPECT_LE(WorstRelative(Down(d_du, n), want_du, "swiglu backward dup"), 1e-5);
  ASSERT_OK(cuda::ResidualAdd(*ctx_, d_out, d_gate, d_up, n));
  EXPECT_LE(WorstRelative(DownBf16(d_out, n), want_sum, "residual add"), kTolerance);
  // The bf16 backward: the bits of the fp32 gradients (added to zero) rounded, in one pass.
  float *d_dg0 = Zeros<float>(n), *d_du0 = Zeros<float>(n);
  uint16_t *d_dg16 = Zeros<uint16_t>(n), *d_du16 = Zeros<uint16_t>(n), *d_want16 = Zeros<uint16_t>(n);
  ASSERT_OK(cuda::SwiGluBackward(*ctx_, d_dg0, d_du0, Up(dout.bits), d_gate, d_up, n));
  ASSERT_OK(cuda::SwiGluBackwardBf16(*ctx_, d_dg16, d_du16, Up(dout.bits), d_gate, d_up, n));
  for (auto [fp32, bf16, what] : {std::tuple{d_dg0, d_dg16, "dgate"}, std::tuple{d_du0, d_du16, "dup"}}) {
    ASSERT_OK(cuda::Fp32ToBf16(*ctx_, d_want16, fp32, n));
    const std::vector<float> want16 = DownBf16(d_want16, n), got16 = DownBf16(bf16, n);
    EXPECT_EQ(WorstRelative(got16, want16, std::string("swiglu backward bf16 ") + what), 0.0);
  }
}

// Mean cross-entropy with ignored targets, dlogits written over the logits (they may alias).
TEST_F(CudaOps, CrossEntropy) {
  const int64_t rows = 48, vocab = 32000;
  const Bf16Array logits = RandomBf16(rows * vocab, 3.0f, rng_);
  std::vector<int32_t> targets(rows);
  for (int64_t n = 0; n < rows; ++n) targets[n] = n % 5 == 4 ? -100 : static_cast<int32_t>((n * 7919) % vocab);
  std::vector<float> want_d(rows * vocab);
  const double want = cpu::CrossEntropyForwardBackward(want_d.data(), logits.values.data(), targets.data(), rows, vocab,
                                                       1024.0, threads_);
  uint16_t* d_logits = Up(logits.bits);
  auto loss = cuda::CrossEntropyForwardBackward(*ctx_, d_logits, d_logits, Up(targets), rows, vocab, 1024.0);
  ASSERT_TRUE(loss.ok()) << loss.status().ToString();
  std::printf("cross-entropy: gpu %.9g cpu %.9g\n", *loss, want);
  EXPECT_NEAR(*loss, want, 1e-4 * want);
  EXPECT_LE(WorstRelative(DownBf16(d_logits, rows * vocab), want_d, "cross-entropy dlogits"), kTolerance);
  // Forward only (no dlogits), and every target ignored: the loss is 0.
  auto forward_only = cuda::CrossEntropyForwardBackward<uint16_t>(*ctx_, nullptr, Up(logits.bits), Up(targets), rows,
                                                                  vocab, 1.0);
  ASSERT_TRUE(forward_only.ok()) << forward_only.status().ToString();
  EXPECT_NEAR(*forward_only, want, 1e-4 * want);
  auto none = cuda::CrossEntropyForwardBackward(*ctx_, d_logits, Up(logits.bits), Up(std::vector<int32_t>(rows, -100)),
                                                rows, vocab, 1.0);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(*none, 0.0);
  EXPECT_EQ(WorstRelative(DownBf16(d_logits, rows * vocab), std::vector<float>(rows * vocab, 0.0f), "ignored rows"), 0.0);
}

TEST_F(CudaOps, OverflowCheckConversions) {
  const int64_t n = 1'000'003;
  const Bf16Array g = RandomBf16(n, 3.0f, rng_);
  std::vector<float> grad = g.values;
  for (int64_t i = 0; i < n; i += 97) grad[i] *= 1.0009765625f;  // values that are not bf16
  float* d_grad = Up(grad);
  const cpu::GradCheck want = cpu::OverflowCheckAndNorm(grad.data(), n, 1.0f / 1024, threads_);
  auto got = cuda::OverflowCheckAndNorm(*ctx_, d_grad, n, 1.0f / 1024);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->finite);
  EXPECT_NEAR(got->sum_sq, want.sum_sq, 1e-6 * want.sum_sq);
  // fp32 -> bf16 bit for bit as the CPU; back exactly.
  std::vector<uint16_t> want_bits(n);
  cpu::Fp32ToBf16(want_bits.data(), grad.data(), n, threads_);
  uint16_t* d_bits = Zeros<uint16_t>(n);
  ASSERT_OK(cuda::Fp32ToBf16(*ctx_, d_bits, d_grad, n));
  EXPECT_EQ(Down(d_bits, n), want_bits);
  float* d_wide = Zeros<float>(n);
  ASSERT_OK(cuda::Bf16ToFp32(*ctx_, d_wide, d_bits, n));
  EXPECT_EQ(Down(d_wide, n), Widen(want_bits));
  // One inf or NaN anywhere is found.
  for (float bad : {INFINITY, NAN}) {
    std::vector<float> with_bad = grad;
    with_bad[n - 2] = bad;
    auto check = cuda::OverflowCheckAndNorm(*ctx_, Up(with_bad), n, 1.0f);
    ASSERT_TRUE(check.ok());
    EXPECT_FALSE(check->finite) << bad;
  }
}

// The GPU's AdamW is the CPU's bit for bit (issue 56: an update on the GPU must leave the weights
// --in-memory leaves): 10^7 elements over three steps with weight decay, a loss scale and a clip
// factor in the gradient scale, parameters, moments and the bf16 copy compared as bits.
TEST_F(CudaOps, AdamWIsTheCpuAdamWBitForBit) {
  const int64_t n = 10'000'000;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> param(n), m(n), v(n), grad(n);
  for (int64_t i = 0; i < n; ++i) {
    param[i] = normal(rng_) * 0.02f;
    m[i] = normal(rng_) * 1e-3f;
    v[i] = std::abs(normal(rng_)) * 1e-6f;
    grad[i] = normal(rng_) * 65536.0f * 1e-3f;  // scaled by the loss scale, as the d2h leaves them
  }
  for (int64_t i = 0; i < n; i += 4099) grad[i] = 0.0f;          // a zero gradient
  for (int64_t i = 1; i < n; i += 8191) grad[i] = 1e-40f;        // a subnormal one
  AdamWConfig config;
  config.lr = 3e-4f;
  config.weight_decay = 0.1f;
  const float clip = 0.37f;
  const float grad_scale = 1.0f / 65536.0f * clip;  // UpdateGradScale(loss scale, clip)
  float *d_param = Up(param), *d_m = Up(m), *d_v = Up(v), *d_grad = Up(grad);
  uint16_t* d_bf16 = Zeros<uint16_t>(n);
  std::vector<uint16_t> bf16(n);
  for (int64_t step : {1, 2, 1000}) {
    cpu::AdamW(param.data(), m.data(), v.data(), grad.data(), bf16.data(), n, step, grad_scale, config, threads_);
    ASSERT_OK(cuda::AdamW(*ctx_, d_param, d_m, d_v, d_grad, d_bf16, n, step, grad_scale, config));
    const std::vector<float> got_param = Down(d_param, n), got_m = Down(d_m, n), got_v = Down(d_v, n);
    int64_t differ = 0, first = -1;
    for (int64_t i = 0; i < n; ++i) {
      const bool same = std::memcmp(&got_param[i], &param[i], 4) == 0 && std::memcmp(&got_m[i], &m[i], 4) == 0 &&
                        std::memcmp(&got_v[i], &v[i], 4) == 0;
      if (!same && differ++ == 0) first = i;
    }
    EXPECT_EQ(differ, 0) << "step " << step << ": first at " << first << " on " << ctx_->device_name();
    EXPECT_EQ(Down(d_bf16, n), bf16) << "step " << step;
  }
  EXPECT_EQ(cuda::AdamW(*ctx_, d_param, d_m, d_v, d_grad, nullptr, n, 0, grad_scale, config).code(), StatusCode::kInvalidArgument);
}

// The update of a sub-group whose bf16 gradients went up as they are (docs/schedule-format.md,
// "Where a sub-group is updated"): the GPU's AdamW over bf16 gradients is the CPU's AdamW over
// the widened gradients, bit for bit, on 10^7 elements with a loss scale and a clip factor.
TEST_F(CudaOps, AdamWOfBf16GradientsIsTheCpuAdamWOfTheWidened) {
  const int64_t n = 10'000'000;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> param(n), m(n), v(n), widened(n);
  std::vector<uint16_t> grad16(n);
  for (int64_t i = 0; i < n; ++i) {
    param[i] = normal(rng_) * 0.02f;
    m[i] = normal(rng_) * 1e-3f;
    v[i] = std::abs(normal(rng_)) * 1e-6f;
    grad16[i] = Fp32ToBf16(normal(rng_) * 65536.0f * 1e-3f);
  }
  for (int64_t i = 0; i < n; i += 4099) grad16[i] = 0;      // a zero gradient
  for (int64_t i = 1; i < n; i += 8191) grad16[i] = 0x0001;  // a subnormal one
  for (int64_t i = 0; i < n; ++i) widened[i] = Bf16ToFp32(grad16[i]);
  AdamWConfig config;
  config.lr = 3e-4f;
  config.weight_decay = 0.1f;
  const float grad_scale = 1.0f / 65536.0f * 0.37f;
  float *d_param = Up(param), *d_m = Up(m), *d_v = Up(v);
  uint16_t* d_grad = Up(grad16);
  uint16_t* d_bf16 = Zeros<uint16_t>(n);
  std::vector<uint16_t> bf16(n);
  for (int64_t step : {1, 2, 1000}) {
    cpu::AdamW(param.data(), m.data(), v.data(), widened.data(), bf16.data(), n, step, grad_scale, config, threads_);
    ASSERT_OK(cuda::AdamW(*ctx_, d_param, d_m, d_v, d_grad, d_bf16, n, step, grad_scale, config));
    EXPECT_EQ(std::memcmp(Down(d_param, n).data(), param.data(), n * 4), 0) << "step " << step << " on " << ctx_->device_name();
    EXPECT_EQ(std::memcmp(Down(d_m, n).data(), m.data(), n * 4), 0) << "step " << step;
    EXPECT_EQ(std::memcmp(Down(d_v, n).data(), v.data(), n * 4), 0) << "step " << step;
    EXPECT_EQ(Down(d_bf16, n), bf16) << "step " << step;
  }
}

}  // namespace
}  // namespace tierflow::real
