// AdamW on the CPU over any element range of flat fp32 buffers (a ZeRO "sub-group"), with the
// mixed-precision pieces around it: the fused overflow check and gradient norm of (loss-)scaled
// gradients, a bf16 copy of the updated parameters, and a dynamic loss scaler.
//
// The update is PyTorch's torch.optim.AdamW (decoupled weight decay, bias correction), for step
// t >= 1 and the gradient g = grad * grad_scale:
//   m = beta1 m + (1 - beta1) g
//   v = beta2 v + (1 - beta2) g^2
//   p = p (1 - lr wd) - lr / (1 - beta1^t) * m / (sqrt(v / (1 - beta2^t)) + eps)
// docs/training-math.md derives the byte counts used by the benchmark (28 B per element, 30 with
// the bf16 copy).
//
// Every function is elementwise or reduces in fixed-size blocks combined in order, so results
// are bit-identical for any thread count and any split of a buffer into ranges whose boundaries
// are multiples of kNormBlock (for the norm; AdamW and bf16 conversion for any split).
// Thread safety: each call uses `threads` for its duration; distinct ranges may be updated
// concurrently from distinct calls.
#pragma once

#include <cstdint>

#include "tierflow/real/cpu_threads.h"

namespace tierflow::real {

struct AdamWConfig {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
};

// One step's scalars, the same for every back-end (cpu::AdamW, cuda::AdamW): the bias
// corrections in double, rounded once to float; the decay factor and the betas' complements in
// float. The update of each element is then, every operation rounded on its own (no fused
// multiply-add):
//   g = grad * grad_scale;  m = beta1 m + one_minus_beta1 g;  v = beta2 v + one_minus_beta2 (g g)
//   p = p decay_factor - step_size (m / (sqrt(v) inv_sqrt_bc2 + eps))
struct AdamWStep {
  float beta1, beta2, eps;
  float one_minus_beta1, one_minus_beta2;
  float step_size;     // lr / (1 - beta1^t)
  float inv_sqrt_bc2;  // 1 / sqrt(1 - beta2^t)
  float decay_factor;  // 1 - lr wd
};
AdamWStep AdamWStepScalars(int64_t step, const AdamWConfig& config);

// Round-to-nearest-even fp32 -> bf16 (NaN stays a quiet NaN), and the exact widening.
uint16_t Fp32ToBf16(float x);
float Bf16ToFp32(uint16_t x);
// The fp16 (IEEE binary16) conversions, for reading and writing checkpoints.
uint16_t Fp32ToFp16(float x);
float Fp16ToFp32(uint16_t x);

namespace cpu {

// Elements per block of the norm's fixed reduction tree.
inline constexpr int64_t kNormBlock = 4096;

struct GradCheck {
  bool finite = true;   // no inf or nan in grad * grad_scale
  double sum_sq = 0;    // sum of (grad * grad_scale)^2, meaningful only when finite
};

// One read-only pass over grad[0, n): the overflow check and the squared norm of the unscaled
// gradient (grad_scale = 1 / loss_scale), no temporaries. Combine ranges with CombineGradChecks.
GradCheck OverflowCheckAndNorm(const float* grad, int64_t n, float grad_scale,
                               CpuThreads& threads);
GradCheck CombineGradChecks(const GradCheck& a, const GradCheck& b);

// One AdamW step (t >= 1) on n elements: reads param, m, v, grad; writes param, m, v and, when
// bf16_param is not null, the rounded copy. grad_scale multiplies the gradient first (the
// inverse loss scale times any clipping factor). grad is not modified.
void AdamW(float* param, float* m, float* v, const float* grad, uint16_t* bf16_param, int64_t n,
           int64_t step, float grad_scale, const AdamWConfig& config, CpuThreads& threads);

// dst[i] = Fp32ToBf16(src[i]).
void Fp32ToBf16(uint16_t* dst, const float* src, int64_t n, CpuThreads& threads);
// dst[i] = Bf16ToFp32(src[i]) (exact).
void Bf16ToFp32(float* dst, const uint16_t* src, int64_t n, CpuThreads& threads);
// n bytes from src to dst (not overlapping), split over the threads.
void CopyBytes(char* dst, const char* src, int64_t n, CpuThreads& threads);

// x[i] = Bf16ToFp32(Fp32ToBf16(x[i])): fp32 values rounded to what bf16 holds. A bf16 model's
// gradients have bf16 precision wherever they are kept (fp32 staging or bf16 in host memory),
// so that the gradient path a schedule chooses never changes the math.
void RoundToBf16(float* x, int64_t n, CpuThreads& threads);

// One micro-step's gradients added into the bf16 gradients accumulated so far (gradient
// accumulation, as DeepSpeed accumulates a bf16 model's partitions):
// acc[i] = Fp32ToBf16(Bf16ToFp32(acc[i]) + grad[i]), each sum rounded once. Like the copies off
// the GPU, the values stay scaled by the loss scale (the update unscales them); grad_scale
// (1 / loss scale) only feeds the returned overflow check and squared norm of the new sums,
// over the same fixed blocks as OverflowCheckAndNorm (any thread count gives the same result).
GradCheck AccumulateBf16(uint16_t* acc, const float* grad, int64_t n, float grad_scale, CpuThreads& threads);

// The factor that clips the gradients to the global L2 norm `max_norm` (torch's
// clip_grad_norm_: max_norm / (norm + 1e-6) when that is below 1), from the check over every
// gradient; 1 when max_norm is 0 (off) or the gradients are not finite.
float ClipCoefficient(const GradCheck& total, double max_norm);

}  // namespace cpu

// Dynamic loss scaling as in DeepSpeed/Megatron: on an overflow the step is skipped and the scale
// halves (not below min_scale); after `growth_interval` finite steps in a row it doubles.
class LossScaler {
 public:
  explicit LossScaler(float initial_scale = 65536.0f, int64_t growth_interval = 1000,
                      float min_scale = 1.0f)
      : scale_(initial_scale), growth_interval_(growth_interval), min_scale_(min_scale) {}
  // No loss scaling (DeepSpeed's bf16 optimizer): the scale stays 1 and every step runs.
  static LossScaler None() {
    LossScaler s(1.0f);
    s.dynamic_ = false;
    return s;
  }
  bool dynamic() const { return dynamic_; }
  float scale() const { return scale_; }
  int64_t good_steps() const { return good_steps_; }
  // Restores a saved state (scale() and good_steps() of a checkpoint).
  void Restore(float scale, int64_t good_steps) {
    scale_ = scale;
    good_steps_ = good_steps;
  }
  // Records one step's overflow check; returns true when the optimizer step should run.
  bool Update(bool finite);

 private:
  float scale_;
  int64_t growth_interval_;
  float min_scale_;
  int64_t good_steps_ = 0;
  bool dynamic_ = true;
};

}  // namespace tierflow::real
