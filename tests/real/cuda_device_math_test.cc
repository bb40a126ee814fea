// The CUDA kernels' per-element math (real/compute/cuda/device_math.h), run on the CPU against
// the CPU reference: bf16 rounding bit for bit, the SwiGLU and rotary formulas, the rotary
// kernel's index decomposition, and AdamW's element bit for bit. Needs no GPU and no CUDA toolkit, so it runs everywhere.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "device_math.h"
#include "tierflow/models/llm.h"
#include "tierflow/real/adamw.h"
#include "tierflow/real/cpu_ops.h"
#include "tierflow/real/cpu_threads.h"

namespace tierflow::real {
namespace {

namespace m = cuda::math;

uint32_t Bits(float x) { return m::FloatBits(x); }

// Every rounding case: exact halves (ties to even both ways), just above and below a half,
// zeros, subnormals, the largest finite values (which round to inf), inf and NaNs.
TEST(CudaDeviceMath, Bf16RoundingIsBitIdenticalToTheCpu) {
  std::vector<uint32_t> patterns = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x7f7fffffu, 0xff7fffffu,
                                    0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffc00001u, 0x3f808000u,
                                    0x3f818000u, 0x3f807fffu, 0x3f808001u};
  // A stride through all 2^32 patterns, each with the low halves that decide rounding.
  for (uint64_t hi = 0; hi < (uint64_t{1} << 32); hi += 0x10001ull * 7) {
    const uint32_t base = static_cast<uint32_t>(hi) & 0xffff0000u;
    for (uint32_t low : {0x0000u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) patterns.push_back(base | low);
  }
  int64_t checked = 0;
  for (uint32_t p : patterns) {
    const float x = m::BitsFloat(p);
    ASSERT_EQ(m::Fp32ToBf16Bits(x), Fp32ToBf16(x)) << std::hex << "pattern 0x" << p;
    ++checked;
  }
  EXPECT_GT(checked, 40000);
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    ASSERT_EQ(Bits(m::Bf16BitsToFp32(h)), Bits(Bf16ToFp32(h))) << b;
  }
  // Load and Store go through the same conversions.
  uint16_t cell = 0;
  m::Store(&cell, 0, 1.00390625f);  // exactly halfway between two bf16 values: ties to even (1.0)
  EXPECT_EQ(cell, 0x3f80u);
  EXPECT_EQ(m::Load(&cell, 0), 1.0f);
}

// The GPU's AdamW element (AdamWElement with the step's AdamWStepScalars) is cpu::AdamW's update
// bit for bit: the formula and its order of operations, checked where no GPU is. (The GPU test
// AdamWIsTheCpuAdamWBitForBit checks that nvcc's _rn operations keep it so.)
TEST(CudaDeviceMath, AdamWElementIsTheCpuUpdateBitForBit) {
  const int64_t n = 1'000'003;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> param(n), mom(n), var(n), grad(n);
  for (int64_t i = 0; i < n; ++i) {
    param[i] = normal(rng) * 0.02f;
    mom[i] = normal(rng) * 1e-3f;
    var[i] = std::abs(normal(rng)) * 1e-6f;
    grad[i] = normal(rng) * 64.0f;
  }
  grad[3] = 0.0f;
  grad[5] = 1e-40f;
  AdamWConfig config;
  config.lr = 3e-4f;
  config.weight_decay = 0.1f;
  const float grad_scale = 1.0f / 65536.0f * 0.37f;  // inverse loss scale x clip factor
  CpuThreads threads(2);
  std::vector<float> p = param, mo = mom, va = var;
  std::vector<uint16_t> bf16(n);
  for (int64_t step : {1, 2, 1000}) {
    cpu::AdamW(param.data(), mom.data(), var.data(), grad.data(), bf16.data(), n, step, grad_scale, config, threads);
    const AdamWStep s = AdamWStepScalars(step, config);
    for (int64_t i = 0; i < n; ++i) {
      const m::AdamWElementOut e = m::AdamWElement(p[i], mo[i], va[i], grad[i], grad_scale, s.beta1, s.beta2, s.one_minus_beta1,
                                                   s.one_minus_beta2, s.eps, s.decay_factor, s.step_size, s.inv_sqrt_bc2);
      p[i] = e.p;
      mo[i] = e.m;
      va[i] = e.v;
      ASSERT_EQ(Bits(p[i]), Bits(param[i])) << "step " << step << " element " << i;
      ASSERT_EQ(Bits(mo[i]), Bits(mom[i])) << "step " << step << " element " << i;
      ASSERT_EQ(Bits(va[i]), Bits(var[i])) << "step " << step << " element " << i;
      ASSERT_EQ(m::Fp32ToBf16Bits(p[i]), bf16[i]) << "step " << step << " element " << i;
    }
  }
}

TEST(CudaDeviceMath, SwiGluMatchesTheCpuReference) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const int64_t n = 4096;
  std::vector<float> gate(n), up(n), dout(n);
  for (int64_t i = 0; i < n; ++i) gate[i] = normal(rng), up[i] = normal(rng), dout[i] = normal(rng);
  gate[0] = 0.0f, gate[1] = 80.0f, gate[2] = -80.0f;  // silu's flat ends
  CpuThreads threads(1);
  std::vector<float> out(n), dgate(n, 0.0f), dup(n, 0.0f);
  cpu::SwiGluForward(out.data(), gate.data(), up.data(), n, threads);
  cpu::SwiGluBackward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), n, threads);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_FLOAT_EQ(m::SwiGlu(gate[i], up[i]), out[i]) << i;
    const m::SwiGluGrad g = m::SwiGluBackward(dout[i], gate[i], up[i]);
    EXPECT_FLOAT_EQ(g.d_gate, dgate[i]) << i;
    EXPECT_FLOAT_EQ(g.d_up, dup[i]) << i;
  }
}

// The rotary kernel's loop, run on the CPU: every pair index through RopePair and Rotate, forward
// and back, against cpu::RopeForward/RopeBackward on the same tensor.
TEST(CudaDeviceMath, RotaryPairsCoverTheTensorAsTheCpuReference) {
  const int64_t batch = 2, seq = 5, heads = 3, head_dim = 8, half = head_dim / 2, rows = batch * seq;
  std::vector<float> cos_table(seq * half), sin_table(seq * half);
  cpu::RopeTables(cos_table.data(), sin_table.data(), seq, models::RopeInverseFrequencies(head_dim, 10000.0));
  std::mt19937 rng(4);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(rows * heads * head_dim);
  for (float& v : x) v = normal(rng);
  CpuThreads threads(1);
  for (float sign : {1.0f, -1.0f}) {
    std::vector<float> want = x, got = x;
    if (sign > 0) {
      cpu::RopeForward(want.data(), cos_table.data(), sin_table.data(), rows, seq, heads, head_dim, threads);
    } else {
      cpu::RopeBackward(want.data(), cos_table.data(), sin_table.data(), rows, seq, heads, head_dim, threads);
    }
    std::vector<int> touched(x.size(), 0);
    for (int64_t i = 0; i < rows * heads * half; ++i) {
      const m::RopeAt at = m::RopePair(i, seq, heads, half);
      const m::Pair p = m::Rotate(got[at.first], got[at.first + half], cos_table[at.table], sin_table[at.table], sign);
      got[at.first] = p.x1;
      got[at.first + half] = p.x2;
      ++touched[at.first];
      ++touched[at.first + half];
    }
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(touched[i], 1) << "element " << i << " rotated " << touched[i] << " times";
      EXPECT_FLOAT_EQ(got[i], want[i]) << "sign " << sign << " element " << i;
    }
  }
}

TEST(CudaDeviceMath, SoftmaxGradIsTheCpuFormula) {
  // dscore = p * (dprob - sum_s p dprob) * scale, as cpu::AttentionBackward.
  EXPECT_FLOAT_EQ(m::SoftmaxGrad(0.25f, 2.0f, 0.5f, 0.125f), 0.25f * (2.0f - 0.5f) * 0.125f);
  EXPECT_EQ(m::SoftmaxGrad(0.0f, 7.0f, 1.0f, 1.0f), 0.0f);  // masked positions stay 0
}

}  // namespace
}  // namespace tierflow::real
