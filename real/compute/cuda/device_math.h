// The per-element math of the CUDA kernels, as functions that compile for the GPU (nvcc) and for
// the host (any C++ compiler). The kernels call them for every element; tests/real
// cuda_device_math_test calls the same functions on the CPU against the CPU reference, so their
// formulas and bf16 rounding are checked on a machine without a GPU.
//
// bf16 is carried as its 16 bits (uint16_t), converted with the same round-to-nearest-even rule as
// tierflow::real::Fp32ToBf16, so a GPU-rounded value is bit-identical to the CPU's.
#pragma once

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define TF_HD __host__ __device__ __forceinline__
#else
#define TF_HD inline
#endif

#include <cmath>

namespace tierflow::real::cuda::math {

TF_HD uint32_t FloatBits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
#endif
}

TF_HD float BitsFloat(uint32_t b) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(b);
#else
  float x;
  std::memcpy(&x, &b, 4);
  return x;
#endif
}

// Round to nearest even; a NaN stays a (quiet) NaN. The rule of tierflow::real::Fp32ToBf16.
TF_HD uint16_t Fp32ToBf16Bits(float x) {
  const uint32_t bits = FloatBits(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

TF_HD float Bf16BitsToFp32(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

// Loads widen to fp32 and stores round from fp32, for both storage types a kernel is built for.
TF_HD float Load(const float* p, int64_t i) { return p[i]; }
TF_HD float Load(const uint16_t* p, int64_t i) { return Bf16BitsToFp32(p[i]); }
TF_HD void Store(float* p, int64_t i, float v) { p[i] = v; }
TF_HD void Store(uint16_t* p, int64_t i, float v) { p[i] = Fp32ToBf16Bits(v); }

TF_HD float Exp(float x) {
#ifdef __CUDA_ARCH__
  return expf(x);
#else
  return std::exp(x);
#endif
}

TF_HD float Sigmoid(float g) { return 1.0f / (1.0f + Exp(-g)); }

// silu(g) * up, as cpu::SwiGluForward.
TF_HD float SwiGlu(float g, float up) { return g / (1.0f + Exp(-g)) * up; }

// The two gradients of silu(g) * up for an output gradient d, as cpu::SwiGluBackward:
// d silu / dg = sig * (1 + g * (1 - sig)).
struct SwiGluGrad {
  float d_gate, d_up;
};
TF_HD SwiGluGrad SwiGluBackward(float d, float g, float up) {
  const float sig = Sigmoid(g);
  return {d * up * sig * (1.0f + g * (1.0f - sig)), d * (g * sig)};
}

// One rotary pair (x1 from the first half of a head, x2 from the second) rotated by the angle of
// (cos, sin); sign -1 applies the transposed rotation (backward). As cpu::RopeForward/Backward.
struct Pair {
  float x1, x2;
};
TF_HD Pair Rotate(float x1, float x2, float c, float s, float sign) {
  const float sn = sign * s;
  return {x1 * c - x2 * sn, x2 * c + x1 * sn};
}

// Where rotary pair i of x[n_rows, heads * 2 * half] lives: pairs are numbered row by row, head
// by head, j = 0..half-1 within a head; the pair's first element is x[first], its second
// x[first + half], and its angle is table[table] of position t = row % seq.
struct RopeAt {
  int64_t first, table;
};
TF_HD RopeAt RopePair(int64_t i, int64_t seq, int64_t heads, int64_t half) {
  const int64_t j = i % half;
  const int64_t nh = i / half;  // row * heads + head
  const int64_t t = (nh / heads) % seq;
  return {nh * 2 * half + j, t * half + j};
}

// Single operations rounded to nearest on their own: nvcc may fuse a multiply and an add into one
// FMA (-fmad=true, its default), which the CPU reference, compiled with -ffp-contract=off, never
// does. The _rn intrinsics are never fused; on the host, plain operators in a file compiled with
// -ffp-contract=off.
TF_HD float MulRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
TF_HD float AddRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
TF_HD float SubRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
TF_HD float DivRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
TF_HD float SqrtRn(float a) {
#ifdef __CUDA_ARCH__
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

// One element of AdamW (tierflow::real::AdamWStep states the formula and the scalars): the same
// operations in the same order as cpu::AdamW, each rounded on its own, so that the GPU's update is
// the CPU's bit for bit.
struct AdamWElementOut {
  float p, m, v;
};
TF_HD AdamWElementOut AdamWElement(float p, float m, float v, float grad, float grad_scale, float beta1, float beta2,
                                   float one_minus_beta1, float one_minus_beta2, float eps, float decay_factor, float step_size,
                                   float inv_sqrt_bc2) {
  const float g = MulRn(grad, grad_scale);
  const float mi = AddRn(MulRn(beta1, m), MulRn(one_minus_beta1, g));
  const float vi = AddRn(MulRn(beta2, v), MulRn(one_minus_beta2, MulRn(g, g)));
  const float denom = AddRn(MulRn(SqrtRn(vi), inv_sqrt_bc2), eps);
  return {SubRn(MulRn(p, decay_factor), MulRn(step_size, DivRn(mi, denom))), mi, vi};
}

// The element of a causal row's softmax backward: p * (dp - sum_s p dp) * scale.
TF_HD float SoftmaxGrad(float p, float dp, float weighted, float scale) { return p * (dp - weighted) * scale; }

}  // namespace tierflow::real::cuda::math
