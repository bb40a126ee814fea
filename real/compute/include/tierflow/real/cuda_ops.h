// The ops of compute_ops.h on the GPU: the same math and conventions as cpu_ops.h (row-major
// activations [N, C] with row n = b * seq + t, PyTorch weight layouts, backward ops that ADD into
// their gradients, a null gradient pointer skips it), in bf16 or fp32 with fp32 accumulation.
//
// Types, for every op:
//  - T is the storage type of activations and weights: uint16_t (the bits of a bf16) or float.
//    Our kernels round bf16 outputs from fp32 to nearest even, bit-identical to Fp32ToBf16;
//    cuBLAS rounds the bf16 outputs of the GEMMs (linear, attention output) itself.
//  - Gradients that ops accumulate into (weight and activation gradients alike) are fp32, and so
//    are the saved statistics (RMSNorm's 1/rms, attention's probabilities) and rotary tables.
//  - All pointers are device pointers (cudaMalloc); work is queued on the context's stream and
//    errors of the launch come back at once (Synchronize() to wait for the results, and to see
//    errors of the kernels themselves).
//  - Results are deterministic: no atomics, fixed reduction trees and fixed cuBLAS algorithms,
//    so a run repeated on the same GPU gives bit-identical outputs.
//  - Indices (token ids, targets) must be in range; they are the caller's to check on the host.
//  - The calling thread's current CUDA device must be the context's (Context::Open and
//    Allocate make it so on their thread).
//
// Linear layers run on cuBLAS (cublasGemmEx, CUBLAS_COMPUTE_32F). Attention comes two ways: the
// fused bf16 kernels (FlashAttention*, what the Llama steps use), and batched GEMMs
// (cublasGemmStridedBatchedEx) around a causal-softmax kernel with a [B, H, S, S] fp32 probability
// tensor saved for backward, as the CPU reference keeps (Attention*, in fp32 or bf16: the
// reference the fused kernels are checked against on the GPU). docs/executor.md "GPU back-end".
//
// Thread safety: as the Context (one thread at a time).
#pragma once

#include <cstdint>

#include "tierflow/core/status.h"
#include "tierflow/real/adamw.h"
#include "tierflow/real/cuda_compute.h"

namespace tierflow::real::cuda {

// Rows per partial sum of RmsNormBackward's weight gradient.
inline constexpr int64_t kRmsNormRowBlock = 32;

// out[n,:] = table[tokens[n],:]; tokens on the device.
template <typename T>
Status EmbeddingForward(const Context& ctx, T* out, const int32_t* tokens, const T* table, int64_t n_rows,
                        int64_t channels);
// dtable[tokens[n],:] += dout[n,:], rows added in order n = 0..N-1 (one thread per channel).
template <typename T>
Status EmbeddingBackward(const Context& ctx, float* dtable, const int32_t* tokens, const T* dout, int64_t n_rows,
                         int64_t channels);

// rstd[n] = 1 / sqrt(mean_c(x^2) + eps); out = w * x * rstd.
template <typename T>
Status RmsNormForward(const Context& ctx, T* out, float* rstd, const T* x, const T* w, int64_t n_rows,
                      int64_t channels, double eps);
// dx += rstd * (dout*w - xhat * mean_c(dout*w*xhat)), dw += sum_n dout * xhat: the rows summed in
// blocks of kRmsNormRowBlock, in order, then the blocks' sums in order (a fixed tree).
template <typename T>
Status RmsNormBackward(const Context& ctx, float* dx, float* dw, const T* dout, const T* x, const T* w,
                       const float* rstd, int64_t n_rows, int64_t channels);

// Whether a backward op adds into a gradient (the default, as every op here) or overwrites it
// (for a caller whose buffer holds nothing yet: no zeroing pass, no read of the old values).
enum class GradMode { kAdd, kOverwrite };

// out[N,O] = x[N,I] W[O,I]^T.
template <typename T>
Status LinearForward(const Context& ctx, T* out, const T* x, const T* w, int64_t n_rows, int64_t in,
                     int64_t out_dim);
// dx[N,I] += dout W, dw[O,I] += dout^T x (or =, by dx_mode and dw_mode). Either may be null.
template <typename T>
Status LinearBackward(const Context& ctx, float* dx, float* dw, const T* dout, const T* x, const T* w,
                      int64_t n_rows, int64_t in, int64_t out_dim, GradMode dx_mode = GradMode::kAdd,
                      GradMode dw_mode = GradMode::kAdd);

// In place on x[N, heads*head_dim]; tables fp32 [seq, head_dim/2] (cpu::RopeTables<float>).
template <typename T>
Status RopeForward(const Context& ctx, T* x, const float* cos_table, const float* sin_table, int64_t n_rows,
                   int64_t seq, int64_t heads, int64_t head_dim);
// In place on an fp32 gradient: the transposed rotation.
Status RopeBackward(const Context& ctx, float* dx, const float* cos_table, const float* sin_table, int64_t n_rows,
                    int64_t seq, int64_t heads, int64_t head_dim);

// Causal grouped-query attention as cpu::AttentionForward: q [N, heads*d], k and v
// [N, kv_heads*d], out [N, heads*d], probs [batch, heads, seq, seq] fp32 (0 above the diagonal).
template <typename T>
Status AttentionForward(const Context& ctx, T* out, float* probs, const T* q, const T* k, const T* v, int64_t batch,
                        int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim);
// dq, dk, dv += the gradients through attention (any may be null); query heads sharing a kv head
// add into dk and dv in head order.
template <typename T>
Status AttentionBackward(const Context& ctx, float* dq, float* dk, float* dv, const T* dout, const T* q, const T* k,
                         const T* v, const float* probs, int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads,
                         int64_t head_dim);

// Whether the fused attention kernels below take this head_dim (16, 32, 64 or 128).
constexpr bool FlashAttentionTakesHeadDim(int64_t head_dim) {
  return head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128;
}

// Fused causal grouped-query attention in bf16 (flash_attention.cu: FlashAttention-2's tiling on
// the tensor cores, the scores never stored): q [N, heads*d], k and v [N, kv_heads*d], out
// [N, heads*d], and lse [batch, heads, seq] fp32 saved for the backward (each query row's
// log-sum-exp, base 2, of its scores times scale * log2 e). head_dim 16, 32, 64 or 128; pointers
// 16-byte aligned (heads * d and kv_heads * d are multiples of 8, so every row is).
Status FlashAttentionForward(const Context& ctx, uint16_t* out, float* lse, const uint16_t* q, const uint16_t* k,
                             const uint16_t* v, int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads,
                             int64_t head_dim);
// dq, dk, dv += the gradients through it (any may be null), from the forward's out and lse.
// Without atomics: each query head's share of dk and dv by one block per key tile, the group's
// shares then added in head order; dq by one block per query tile. Repeated runs are bit-identical.
Status FlashAttentionBackward(const Context& ctx, float* dq, float* dk, float* dv, const uint16_t* dout,
                              const uint16_t* q, const uint16_t* k, const uint16_t* v, const uint16_t* out,
                              const float* lse, int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads,
                              int64_t head_dim);

// out = silu(gate) * up over n elements.
template <typename T>
Status SwiGluForward(const Context& ctx, T* out, const T* gate, const T* up, int64_t n);
// dgate, dup += the gradients (either may be null).
template <typename T>
Status SwiGluBackward(const Context& ctx, float* dgate, float* dup, const T* dout, const T* gate, const T* up,
                      int64_t n);

// The same gradients in bf16, overwritten: bf16(the fp32 gradient), the values SwiGluBackward into
// zeroed fp32 buffers and Fp32ToBf16 would give (a zero keeps its sign here, where 0 + -0 gave +0),
// in one pass (both non-null).
Status SwiGluBackwardBf16(const Context& ctx, uint16_t* dgate, uint16_t* dup, const uint16_t* dout,
                          const uint16_t* gate, const uint16_t* up, int64_t n);

// out = a + b over n elements; out may alias a or b.
template <typename T>
Status ResidualAdd(const Context& ctx, T* out, const T* a, const T* b, int64_t n);

// Mean cross-entropy of logits [N, V] against targets (< 0 ignored), and dlogits = (softmax -
// onehot) * grad_scale / count, OVERWRITTEN (0 for ignored rows; may alias logits; may be null).
// Waits for the stream: the loss comes back to the host, summed in fp64 in row order.
template <typename T>
StatusOr<double> CrossEntropyForwardBackward(const Context& ctx, T* dlogits, const T* logits, const int32_t* targets,
                                             int64_t n_rows, int64_t vocab, double grad_scale);

// The overflow check and squared norm of grad * grad_scale over n fp32 elements, in a fixed
// reduction tree (fp64 partial sums). Waits for the stream.
StatusOr<cpu::GradCheck> OverflowCheckAndNorm(const Context& ctx, const float* grad, int64_t n, float grad_scale);

// dst[i] = bf16(src[i]) (round to nearest even, as Fp32ToBf16), and back (exact).
Status Fp32ToBf16(const Context& ctx, uint16_t* dst, const float* src, int64_t n);
Status Bf16ToFp32(const Context& ctx, float* dst, const uint16_t* src, int64_t n);
// One AdamW step (t = step >= 1) on n elements of device memory, bit for bit cpu::AdamW's: the
// same scalars (AdamWStepScalars) and the same operations in the same order, none fused
// (device_math.h AdamWElement). grad_scale is the inverse loss scale times the clip factor;
// bf16_param (optional) receives the rounded parameters.
Status AdamW(const Context& ctx, float* param, float* m, float* v, const float* grad, uint16_t* bf16_param, int64_t n, int64_t step,
             float grad_scale, const AdamWConfig& config);
// The same with bf16 gradients, widened exactly as they are read: the bits of the fp32 form over
// the widened values (an update on the GPU of the gradients its copy up brought as bf16).
Status AdamW(const Context& ctx, float* param, float* m, float* v, const uint16_t* grad, uint16_t* bf16_param, int64_t n, int64_t step,
             float grad_scale, const AdamWConfig& config);
// In place: x[i] rounded to bf16 precision, kept fp32 (cpu::RoundToBf16). On the context's
// stream, or on `stream` (a cudaStream_t of the calling thread's current device).
Status RoundToBf16(const Context& ctx, float* x, int64_t n);
Status RoundToBf16(float* x, int64_t n, void* stream);
// out[i] = the sum of parts[r * count + i] over r = 0 .. ranks - 1, formed in that order in fp32
// and rounded once to the storage type (bf16 or fp32): SumInRankOrder (collective.h) of ranks
// parts laid side by side, bit for bit. Queued on `stream` (a cudaStream_t: NCCL's, whose
// transfers fill `parts`), not the context's; `out` may be any of the parts.
Status SumRanksInOrder(void* out, const void* parts, int64_t count, int ranks, bool bf16, void* stream);

}  // namespace tierflow::real::cuda
