// AdamW against a scalar fp64 transcription of torch.optim.AdamW, the bf16 rounding, the fused
// overflow check and norm, and the loss scaler.
#include <bit>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <random>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tierflow/real/adamw.h"
#include "tierflow/real/train_config.h"

namespace tierflow::real {
namespace {

CpuThreads& Threads() {
  static CpuThreads threads(2);
  return threads;
}

TEST(TrainAdamW, MatchesTorchFormulaInFp64) {
  const int64_t n = 1000;  // not a multiple of the 16-element chunks
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> p(n), m(n, 0.0f), v(n, 0.0f), g(n);
  for (auto& x : p) x = dist(rng);
  std::vector<double> p64(p.begin(), p.end()), m64(n, 0.0), v64(n, 0.0);
  std::vector<uint16_t> bf16(n);
  AdamWConfig c;
  c.lr = 1e-2f;
  c.weight_decay = 0.1f;
  const float loss_scale = 1024.0f;
  double worst = 0;
  for (int64_t step = 1; step <= 5; ++step) {
    for (auto& x : g) x = dist(rng) * loss_scale;
    cpu::AdamW(p.data(), m.data(), v.data(), g.data(), bf16.data(), n, step, 1.0f / loss_scale,
               c, Threads());
    // torch.optim.AdamW (single tensor): p *= 1 - lr*wd; m, v moments; p -= lr/bc1 * m /
    // (sqrt(v)/sqrt(bc2) + eps).
    const double bc1 = 1 - std::pow(0.9, step), bc2 = 1 - std::pow(0.999, step);
    for (int64_t i = 0; i < n; ++i) {
      const double grad = static_cast<double>(g[i]) / loss_scale;
      p64[i] *= 1 - static_cast<double>(c.lr) * c.weight_decay;
      m64[i] = 0.9 * m64[i] + 0.1 * grad;
      v64[i] = 0.999 * v64[i] + 0.001 * grad * grad;
      p64[i] -= c.lr / bc1 * m64[i] / (std::sqrt(v64[i]) / std::sqrt(bc2) + 1e-8);
      worst = std::max(worst, std::fabs(p[i] - p64[i]) / std::max(1.0, std::fabs(p64[i])));
      EXPECT_EQ(bf16[i], Fp32ToBf16(p[i]));
    }
  }
  std::printf("adamw vs fp64 torch formula: worst |p - p64| / max(1, |p64|) = %.3e\n", worst);
  EXPECT_LE(worst, 1e-5);
}

TEST(TrainAdamW, AnySplitIntoRangesIsBitIdentical) {
  const int64_t n = 10007;
  std::vector<float> p(n), g(n);
  for (int64_t i = 0; i < n; ++i) {
    p[i] = std::sin(static_cast<float>(i));
    g[i] = std::cos(static_cast<float>(i) * 0.37f);
  }
  std::vector<float> p1 = p, m1(n, 0), v1(n, 0), p2 = p, m2(n, 0), v2(n, 0);
  AdamWConfig c;
  CpuThreads one(1);
  cpu::AdamW(p1.data(), m1.data(), v1.data(), g.data(), nullptr, n, 3, 1.0f, c, one);
  for (int64_t begin : {0, 17, 5000}) {  // sub-groups [0,17), [17,5000), [5000,n)
    const int64_t end = begin == 0 ? 17 : begin == 17 ? 5000 : n;
    cpu::AdamW(p2.data() + begin, m2.data() + begin, v2.data() + begin, g.data() + begin, nullptr,
               end - begin, 3, 1.0f, c, Threads());
  }
  EXPECT_TRUE(p1 == p2 && m1 == m2 && v1 == v2);
}

TEST(TrainAdamW, Bf16RoundsToNearestEven) {
  EXPECT_EQ(Fp32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Fp32ToBf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(Fp32ToBf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(Fp32ToBf16(std::bit_cast<float>(0x3f808001u)), 0x3f81);  // above the tie
  EXPECT_EQ(Fp32ToBf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(Fp32ToBf16(std::bit_cast<float>(0x7f7fffffu)), 0x7f80);  // max float rounds to inf
  const uint16_t nan = Fp32ToBf16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(Bf16ToFp32(nan)));
  EXPECT_EQ(Bf16ToFp32(0xc040), -3.0f);
}

TEST(TrainAdamW, Fp16ConversionRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0) continue;  // NaN payloads
    EXPECT_EQ(Fp32ToFp16(Fp16ToFp32(static_cast<uint16_t>(h))), h) << h;
  }
  EXPECT_EQ(Fp32ToFp16(65520.0f), 0x7c00);  // rounds to inf
  EXPECT_EQ(Fp32ToFp16(1.0f + 1.0f / 2048), 0x3c00);  // tie to even
}

TEST(TrainAdamW, OverflowCheckAndNorm) {
  const int64_t n = 3 * cpu::kNormBlock + 5;
  std::vector<float> g(n);
  double expect = 0;
  for (int64_t i = 0; i < n; ++i) {
    g[i] = static_cast<float>((i % 7) - 3) * 8.0f;
    const double x = g[i] / 8.0;
    expect += x * x;
  }
  const cpu::GradCheck check = cpu::OverflowCheckAndNorm(g.data(), n, 1.0f / 8, Threads());
  EXPECT_TRUE(check.finite);
  EXPECT_DOUBLE_EQ(check.sum_sq, expect);  // small integers: exact in any order
  CpuThreads one(1);
  const cpu::GradCheck single = cpu::OverflowCheckAndNorm(g.data(), n, 1.0f / 8, one);
  EXPECT_EQ(single.sum_sq, check.sum_sq);
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    std::vector<float> h = g;
    h[n - 2] = bad;
    EXPECT_FALSE(cpu::OverflowCheckAndNorm(h.data(), n, 1.0f, Threads()).finite);
  }
  // Combining the checks of several ranges: one non-finite range makes the whole non-finite.
  const cpu::GradCheck both = cpu::CombineGradChecks(check, {false, 1.0});
  EXPECT_FALSE(both.finite);
}

// The vectorised rounding equals the scalar pair for every sign, exponent and rounding case:
// ties, carries into the exponent, infinities, NaNs (kept NaN), subnormals.
TEST(TrainAdamW, RoundToBf16EqualsTheScalarConversionPair) {
  std::vector<uint32_t> bits = {0x3f808000u, 0x3f818000u, 0x3f808001u, 0x7f7fffffu, 0x7f800000u, 0xff800000u,
                                0x7fc00000u, 0x7f800001u, 0xffbfffffu, 0x00000001u, 0x807fffffu, 0x00000000u, 0x80000000u};
  std::mt19937 random(7);
  for (int i = 0; i < 100000; ++i) bits.push_back(random());
  std::vector<float> x(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) x[i] = std::bit_cast<float>(bits[i]);
  std::vector<float> rounded = x;
  cpu::RoundToBf16(rounded.data(), static_cast<int64_t>(rounded.size()), Threads());
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t want = std::bit_cast<uint32_t>(Bf16ToFp32(Fp32ToBf16(x[i])));
    ASSERT_EQ(std::bit_cast<uint32_t>(rounded[i]), want) << std::hex << "input 0x" << bits[i];
  }
}

// Gradient accumulation adds in fp32 and rounds each sum once to bf16, keeping the loss scale;
// its check is the one OverflowCheckAndNorm makes of the sums times grad_scale, whatever the
// thread count, and an infinity anywhere makes it not finite.
TEST(TrainAdamW, AccumulateBf16RoundsEachSumOnceAndChecksTheSums) {
  const int64_t n = 3 * cpu::kNormBlock + 77;  // several norm blocks and a ragged end
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1e-2f);
  std::vector<uint16_t> acc(static_cast<size_t>(n));
  std::vector<float> grad(static_cast<size_t>(n));
  for (auto& a : acc) a = Fp32ToBf16(dist(rng));
  for (auto& g : grad) g = dist(rng);
  const float scale = 0.5f;
  std::vector<uint16_t> want(acc.size());
  std::vector<float> sums(acc.size());
  for (size_t i = 0; i < acc.size(); ++i) {
    want[i] = Fp32ToBf16(Bf16ToFp32(acc[i]) + grad[i]);  // still scaled, as the copies off the GPU keep it
    sums[i] = Bf16ToFp32(want[i]);
  }
  CpuThreads one(1);
  std::vector<uint16_t> two_threads = acc, one_thread = acc;
  const cpu::GradCheck check = cpu::AccumulateBf16(two_threads.data(), grad.data(), n, scale, Threads());
  const cpu::GradCheck check1 = cpu::AccumulateBf16(one_thread.data(), grad.data(), n, scale, one);
  EXPECT_EQ(two_threads, want);
  EXPECT_EQ(one_thread, want);
  const cpu::GradCheck of_sums = cpu::OverflowCheckAndNorm(sums.data(), n, scale, Threads());
  EXPECT_TRUE(check.finite);
  EXPECT_EQ(check.sum_sq, of_sums.sum_sq);
  EXPECT_EQ(check1.sum_sq, of_sums.sum_sq);
  EXPECT_GT(check.sum_sq, 0.0);
  grad[static_cast<size_t>(n - 1)] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(cpu::AccumulateBf16(acc.data(), grad.data(), n, scale, Threads()).finite);
}

// Clipping to the global norm: the factor max_norm / (norm + 1e-6) when below 1, else 1; off at
// 0 and for non-finite gradients.
TEST(TrainAdamW, ClipCoefficient) {
  const cpu::GradCheck norm5{true, 25.0};
  EXPECT_FLOAT_EQ(cpu::ClipCoefficient(norm5, 1.0), static_cast<float>(1.0 / (5.0 + 1e-6)));
  EXPECT_EQ(cpu::ClipCoefficient(norm5, 10.0), 1.0f);
  EXPECT_EQ(cpu::ClipCoefficient(norm5, 0.0), 1.0f);
  EXPECT_EQ(cpu::ClipCoefficient({false, 25.0}, 1.0), 1.0f);
}

TEST(TrainAdamW, LossScalerHalvesOnOverflowAndGrows) {
  LossScaler scaler(1024.0f, 2, 1.0f);
  EXPECT_FALSE(scaler.Update(false));
  EXPECT_EQ(scaler.scale(), 512.0f);
  EXPECT_TRUE(scaler.Update(true));
  EXPECT_TRUE(scaler.Update(true));
  EXPECT_EQ(scaler.scale(), 1024.0f);
  for (int i = 0; i < 20; ++i) scaler.Update(false);
  EXPECT_EQ(scaler.scale(), 1.0f);
  // Without loss scaling (bf16): scale 1, every step taken, overflow or not.
  LossScaler none = LossScaler::None();
  EXPECT_FALSE(none.dynamic());
  EXPECT_TRUE(none.Update(false));
  EXPECT_EQ(none.scale(), 1.0f);
}

// Hugging Face's schedules (transformers' optimization.py), factor at scheduler step s = step - 1:
// warm-up s / warmup; linear (total - s) / (total - warmup); cosine 0.5 (1 + cos(pi progress)),
// both ending at min_lr_ratio x lr, and staying there past total_steps.
TEST(LearningRate, HuggingFacesSchedulesStepByStep) {
  const float lr = 1e-3f;
  const double d = lr;  // the rate times the factor, in double, rounded once
  const models::LrScheduleSetup constant{};
  EXPECT_EQ(LearningRate(constant, lr, 1), lr);
  EXPECT_EQ(LearningRate(constant, lr, 1000), lr);
  const models::LrScheduleSetup warm{.type = "constant", .warmup_steps = 4};
  EXPECT_EQ(LearningRate(warm, lr, 1), 0.0f);  // the first update, at factor(0)
  EXPECT_EQ(LearningRate(warm, lr, 3), static_cast<float>(d * 2 / 4));
  EXPECT_EQ(LearningRate(warm, lr, 5), lr);
  const models::LrScheduleSetup linear{.type = "linear", .warmup_steps = 2, .total_steps = 10};
  EXPECT_EQ(LearningRate(linear, lr, 2), static_cast<float>(d * 0.5));
  EXPECT_EQ(LearningRate(linear, lr, 3), lr);
  EXPECT_EQ(LearningRate(linear, lr, 7), static_cast<float>(d * ((10 - 6) / 8.0)));
  EXPECT_EQ(LearningRate(linear, lr, 11), 0.0f);
  EXPECT_EQ(LearningRate(linear, lr, 50), 0.0f);
  const models::LrScheduleSetup cosine{.type = "cosine", .warmup_steps = 2, .total_steps = 10, .min_lr_ratio = 0.1};
  for (int64_t step = 3; step <= 11; ++step) {
    const double progress = (static_cast<double>(step - 1) - 2) / 8;
    const double shape = 0.5 * (1 + std::cos(3.14159265358979323846 * progress));
    const double factor = 0.1 + (1 - 0.1) * shape;
    EXPECT_EQ(LearningRate(cosine, lr, step), static_cast<float>(d * factor)) << step;
  }
  EXPECT_EQ(LearningRate(cosine, lr, 40), static_cast<float>(d * (0.1 + 0.9 * 0.0)));
}

// DeepSpeed's schedules against DeepSpeed itself: tests/train/data/deepspeed_lr.json holds the rate
// of each of 40 updates as its engine applies them (made by tests/train/make_deepspeed_lr.py from
// deepspeed.runtime.lr_schedules). DeepSpeed forms min_lr + delta x gamma in fp64, tierflow lr x
// factor: the two may part in the last fp64 bit, so each must round to the same fp32 value or its
// neighbour (a relative 2^-23).
TEST(LearningRate, DeepSpeedsSchedulesAsItsEngineStepsThem) {
  std::ifstream in(std::string(TIERFLOW_SOURCE_DIR) + "/tests/train/data/deepspeed_lr.json");
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json golden = nlohmann::json::parse(text.str());
  ASSERT_EQ(golden["cases"].size(), 6u);
  double worst = 0;
  for (const auto& c : golden["cases"]) {
    const auto& p = c["params"];
    models::LrScheduleSetup s{.type = c["type"].get<std::string>()};
    s.warmup_steps = p["warmup_num_steps"].get<int64_t>();
    s.total_steps = p.value("total_num_steps", int64_t{0});
    s.warmup_type = p["warmup_type"].get<std::string>();
    const float lr = c["lr"].get<float>();
    if (s.type == "WarmupCosineLR") {
      s.min_lr_ratio = p["cos_min_ratio"].get<double>();
      s.warmup_min_ratio = p["warmup_min_ratio"].get<double>();
    } else {
      s.min_lr_ratio = p["warmup_min_lr"].get<double>() / p["warmup_max_lr"].get<double>();
    }
    for (size_t k = 0; k < c["rates"].size(); ++k) {
      const double want = c["rates"][k].get<double>();
      const float got = LearningRate(s, lr, static_cast<int64_t>(k) + 1);
      const double error = want == 0 ? std::abs(got) : std::abs(got - want) / want;
      worst = std::max(worst, error);
      EXPECT_LE(error, std::ldexp(1.0, -23)) << s.type << " update " << k + 1 << ": " << got << " vs DeepSpeed's " << want;
    }
  }
  std::printf("DeepSpeed's schedules: worst relative error %.3g (tolerance 2^-23)\n", worst);
}

}  // namespace
}  // namespace tierflow::real
