// AdamW, the overflow check and the bf16 conversion: memory-bound loops, vectorised by GCC
// (compiled with -O3 -fno-math-errno so that sqrt becomes a vector instruction).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "tierflow/core/status.h"
#include "tierflow/real/adamw.h"

namespace tierflow::real {

uint16_t Fp32ToBf16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float Bf16ToFp32(uint16_t x) { return std::bit_cast<float>(static_cast<uint32_t>(x) << 16); }

AdamWStep AdamWStepScalars(int64_t step, const AdamWConfig& c) {
  TF_CHECK(step >= 1);
  const double bc1 = 1.0 - std::pow(static_cast<double>(c.beta1), static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(c.beta2), static_cast<double>(step));
  AdamWStep s;
  s.beta1 = c.beta1;
  s.beta2 = c.beta2;
  s.eps = c.eps;
  s.one_minus_beta1 = 1.0f - c.beta1;
  s.one_minus_beta2 = 1.0f - c.beta2;
  s.step_size = static_cast<float>(c.lr / bc1);
  s.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  s.decay_factor = 1.0f - c.lr * c.weight_decay;
  return s;
}

uint16_t Fp32ToFp16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {  // subnormal or zero in fp16: round abs * 2^24 to an integer
    const float scaled = std::bit_cast<float>(abs) * 16777216.0f;
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  const uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

float Fp16ToFp32(uint16_t x) {
  const uint32_t sign = static_cast<uint32_t>(x & 0x8000u) << 16;
  const uint32_t exponent = (x >> 10) & 0x1fu;
  const uint32_t mantissa = x & 0x3ffu;
  if (exponent == 0) {
    const float value = static_cast<float>(mantissa) / 16777216.0f;  // mantissa * 2^-24
    return sign != 0 ? -value : value;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

namespace cpu {
namespace {

// Sum of squares of one block in 16 lanes (two 8-float GCC vectors: SSE2 pairs or AVX), combined
// in a fixed order; the finite check rides along as "x * 0 == 0", false exactly for inf and nan,
// without branches. Plain loops with a 16-float accumulator array were not vectorised by GCC 12.
typedef float F32x8 __attribute__((vector_size(32)));

void BlockCheck(const float* __restrict g, int64_t n, float scale, bool* finite, double* sum_sq) {
  F32x8 acc0 = {}, acc1 = {}, zero0 = {}, zero1 = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    F32x8 a, b;
    std::memcpy(&a, g + i, sizeof(a));
    std::memcpy(&b, g + i + 8, sizeof(b));
    a *= scale;
    b *= scale;
    acc0 += a * a;
    acc1 += b * b;
    zero0 += a * 0.0f;
    zero1 += b * 0.0f;
  }
  double s = 0;
  float z = 0;
  for (int j = 0; j < 8; ++j) {
    s += static_cast<double>(acc0[j]) + static_cast<double>(acc1[j]);
    z += zero0[j] + zero1[j];
  }
  for (; i < n; ++i) {
    const float x = g[i] * scale;
    s += static_cast<double>(x * x);
    z += x * 0.0f;
  }
  *finite = (z == 0.0f);
  *sum_sq = s;
}

}  // namespace

GradCheck CombineGradChecks(const GradCheck& a, const GradCheck& b) {
  return {a.finite && b.finite, a.sum_sq + b.sum_sq};
}

GradCheck OverflowCheckAndNorm(const float* grad, int64_t n, float grad_scale,
                               CpuThreads& threads) {
  const int64_t blocks = (n + kNormBlock - 1) / kNormBlock;
  std::vector<double> block_sum(static_cast<size_t>(blocks));
  std::vector<char> block_finite(static_cast<size_t>(blocks));
  threads.ParallelFor(blocks, 16, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t first = b * kNormBlock;
      bool finite = true;
      BlockCheck(grad + first, std::min(kNormBlock, n - first), grad_scale, &finite,
                 &block_sum[b]);
      block_finite[b] = finite ? 1 : 0;
    }
  });
  GradCheck result;
  for (int64_t b = 0; b < blocks; ++b) {
    result.finite = result.finite && block_finite[b] != 0;
    result.sum_sq += block_sum[b];
  }
  return result;
}

namespace {

void AdamWRange(float* __restrict param, float* __restrict m, float* __restrict v,
                const float* __restrict grad, uint16_t* __restrict bf16, int64_t n, const AdamWStep& s, float grad_scale) {
  const float beta1 = s.beta1, beta2 = s.beta2, eps = s.eps, one_minus_beta1 = s.one_minus_beta1, one_minus_beta2 = s.one_minus_beta2;
  const float decay_factor = s.decay_factor, step_size = s.step_size, inv_sqrt_bc2 = s.inv_sqrt_bc2;
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * grad_scale;
    const float mi = beta1 * m[i] + one_minus_beta1 * g;
    const float vi = beta2 * v[i] + one_minus_beta2 * (g * g);
    const float denom = std::sqrt(vi) * inv_sqrt_bc2 + eps;
    const float p = param[i] * decay_factor - step_size * (mi / denom);
    m[i] = mi;
    v[i] = vi;
    param[i] = p;
    if (bf16 != nullptr) {
      const uint32_t bits = std::bit_cast<uint32_t>(p);
      const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
      const bool is_nan = (bits & 0x7fffffffu) > 0x7f800000u;
      bf16[i] = static_cast<uint16_t>(is_nan ? ((bits >> 16) | 0x40u) : rounded);
    }
  }
}

}  // namespace

void AdamW(float* param, float* m, float* v, const float* grad, uint16_t* bf16_param, int64_t n,
           int64_t step, float grad_scale, const AdamWConfig& c, CpuThreads& threads) {
  const AdamWStep s = AdamWStepScalars(step, c);
  // Chunks are cache-line multiples (16 floats) so that threads never share a line.
  const int64_t lines = (n + 15) / 16;
  threads.ParallelFor(lines, 1024, [&](int64_t begin, int64_t end) {
    const int64_t first = begin * 16;
    const int64_t last = std::min(n, end * 16);
    AdamWRange(param + first, m + first, v + first, grad + first,
               bf16_param != nullptr ? bf16_param + first : nullptr, last - first, s, grad_scale);
  });
}

void Fp32ToBf16(uint16_t* dst, const float* src, int64_t n, CpuThreads& threads) {
  threads.ParallelFor(n, 65536, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) dst[i] = ::tierflow::real::Fp32ToBf16(src[i]);
  });
}

void Bf16ToFp32(float* dst, const uint16_t* src, int64_t n, CpuThreads& threads) {
  threads.ParallelFor(n, 1 << 14, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) dst[i] = ::tierflow::real::Bf16ToFp32(src[i]);
  });
}

void CopyBytes(char* dst, const char* src, int64_t n, CpuThreads& threads) {
  threads.ParallelFor(n, 1 << 20, [&](int64_t begin, int64_t end) { std::memcpy(dst + begin, src + begin, static_cast<size_t>(end - begin)); });
}

GradCheck AccumulateBf16(uint16_t* acc, const float* grad, int64_t n, float grad_scale, CpuThreads& threads) {
  const int64_t blocks = (n + kNormBlock - 1) / kNormBlock;
  std::vector<double> block_sum(static_cast<size_t>(blocks));
  std::vector<char> block_finite(static_cast<size_t>(blocks));
  threads.ParallelFor(blocks, 16, [&](int64_t begin, int64_t end) {
    float sums[kNormBlock];
    for (int64_t b = begin; b < end; ++b) {
      const int64_t first = b * kNormBlock, len = std::min(kNormBlock, n - first);
      for (int64_t i = 0; i < len; ++i) {
        const uint16_t rounded = ::tierflow::real::Fp32ToBf16(::tierflow::real::Bf16ToFp32(acc[first + i]) + grad[first + i]);
        acc[first + i] = rounded;
        sums[i] = ::tierflow::real::Bf16ToFp32(rounded);
      }
      bool finite = true;
      BlockCheck(sums, len, grad_scale, &finite, &block_sum[static_cast<size_t>(b)]);
      block_finite[static_cast<size_t>(b)] = finite ? 1 : 0;
    }
  });
  GradCheck result;
  for (int64_t b = 0; b < blocks; ++b) {
    result.finite = result.finite && block_finite[static_cast<size_t>(b)] != 0;
    result.sum_sq += block_sum[static_cast<size_t>(b)];
  }
  return result;
}

void RoundToBf16(float* x, int64_t n, CpuThreads& threads) {
  // Fp32ToBf16 then Bf16ToFp32 on the bits, written without a branch so that GCC vectorises it
  // (the scalar pair costs ~10 % of a tiny iteration); a test checks it against the pair.
  threads.ParallelFor(n, 65536, [&](int64_t begin, int64_t end) {
    uint32_t* bits = reinterpret_cast<uint32_t*>(x);
    for (int64_t i = begin; i < end; ++i) {
      const uint32_t b = bits[i];
      const uint32_t rounded = (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;
      const uint32_t quiet_nan = (b | 0x400000u) & 0xffff0000u;
      bits[i] = (b & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded;
    }
  });
}

float ClipCoefficient(const GradCheck& total, double max_norm) {
  if (max_norm <= 0 || !total.finite) return 1.0f;
  const double coefficient = max_norm / (std::sqrt(total.sum_sq) + 1e-6);
  return coefficient < 1.0 ? static_cast<float>(coefficient) : 1.0f;
}

}  // namespace cpu

bool LossScaler::Update(bool finite) {
  if (!dynamic_) return true;
  if (!finite) {
    scale_ = std::max(min_scale_, scale_ * 0.5f);
    good_steps_ = 0;
    return false;
  }
  if (++good_steps_ >= growth_interval_) {
    scale_ *= 2.0f;
    good_steps_ = 0;
  }
  return true;
}

}  // namespace tierflow::real
