// The CPU compute back-end: the reference implementation of every op in compute_ops.h for the
// Llama-family decoder, forward and backward, in fp32 (and fp64, used by the finite-difference
// gradient checks). docs/training-math.md has the formulas.
//
// Conventions, for every op:
//  - Activations are row-major [N, C] with N = batch * seq rows, row n = b * seq + t.
//  - Weights use PyTorch's layout: a linear weight is [out, in]; y = x W^T.
//  - Backward ops ACCUMULATE (+=) into every gradient they produce, input and weight gradients
//    alike (llm.c's convention), so residual branches and micro-batches add up for free; zero
//    the buffers first where a fresh gradient is wanted. A null gradient pointer skips it.
//  - Each output element is computed by one thread with a fixed summation order, so results are
//    bit-identical run to run and for any thread count.
//  - Pointers must not alias unless stated.
// Thread safety: each call uses `threads` for its own duration; distinct calls on distinct
// pools and buffers may run concurrently.
#pragma once

#include <cstdint>
#include <span>

#include "tierflow/real/compute_ops.h"
#include "tierflow/real/cpu_threads.h"

namespace tierflow::real::cpu {

// True for the ops this back-end implements (all of ComputeOp).
bool SupportsOp(ComputeOp op);

// out[n,:] = table[tokens[n],:]. Requires 0 <= tokens[n] < vocab.
template <typename T>
void EmbeddingForward(T* out, const int32_t* tokens, const T* table, int64_t n_rows,
                      int64_t channels, CpuThreads& threads);
// dtable[tokens[n],:] += dout[n,:], rows summed in order n = 0..N-1.
template <typename T>
void EmbeddingBackward(T* dtable, const int32_t* tokens, const T* dout, int64_t n_rows,
                       int64_t channels, CpuThreads& threads);

// rstd[n] = 1 / sqrt(mean_c(x[n,c]^2) + eps); out[n,c] = w[c] * x[n,c] * rstd[n].
template <typename T>
void RmsNormForward(T* out, T* rstd, const T* x, const T* w, int64_t n_rows, int64_t channels,
                    double eps, CpuThreads& threads);
// dx += rstd * (dout*w - xhat * mean_c(dout*w*xhat)), dw += sum_n dout * xhat, xhat = x * rstd.
template <typename T>
void RmsNormBackward(T* dx, T* dw, const T* dout, const T* x, const T* w, const T* rstd,
                     int64_t n_rows, int64_t channels, CpuThreads& threads);

// out[N,O] = x[N,I] W[O,I]^T.
template <typename T>
void LinearForward(T* out, const T* x, const T* w, int64_t n_rows, int64_t in, int64_t out_dim,
                   CpuThreads& threads);
// dx[N,I] += dout W, dw[O,I] += dout^T x (rows in order n = 0..N-1). dx or dw may be null.
template <typename T>
void LinearBackward(T* dx, T* dw, const T* dout, const T* x, const T* w, int64_t n_rows,
                    int64_t in, int64_t out_dim, CpuThreads& threads);

// x[n, c] += bias[c]: a linear layer's bias (Qwen2's q, k and v).
template <typename T>
void BiasForward(T* x, const T* bias, int64_t n_rows, int64_t dim, CpuThreads& threads);
// dbias[c] += sum over n of dout[n, c], rows in order (any thread count: the same bits).
template <typename T>
void BiasBackward(T* dbias, const T* dout, int64_t n_rows, int64_t dim, CpuThreads& threads);

// Rotary tables for positions 0..seq-1: cos/sin[t * head_dim/2 + j] of t * inv_freq[j]
// (models::RopeInverseFrequencies: theta^(-2j/head_dim), scaled as the model says), computed in
// fp64. Hugging Face's `cat(freqs, freqs)` means column j and j + head_dim/2 share the angle, so
// half a table (head_dim/2 = inv_freq.size() columns) suffices.
template <typename T>
void RopeTables(T* cos_table, T* sin_table, int64_t seq, std::span<const double> inv_freq);
// In place on x[N, heads*head_dim], position t = n % seq, rotate_half convention:
// x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin for the halves x1 = x[:d/2], x2 = x[d/2:].
template <typename T>
void RopeForward(T* x, const T* cos_table, const T* sin_table, int64_t n_rows, int64_t seq,
                 int64_t heads, int64_t head_dim, CpuThreads& threads);
// In place on the gradient: applies the transposed rotation (the rotation by -angle).
template <typename T>
void RopeBackward(T* dx, const T* cos_table, const T* sin_table, int64_t n_rows, int64_t seq,
                  int64_t heads, int64_t head_dim, CpuThreads& threads);

// Causal grouped-query attention. q [N, heads*d], k and v [N, kv_heads*d], out [N, heads*d],
// probs [batch, heads, seq, seq] (saved for backward; entries above the diagonal are 0).
// Query head h reads kv head h / (heads / kv_heads). Requires heads % kv_heads == 0.
template <typename T>
void AttentionForward(T* out, T* probs, const T* q, const T* k, const T* v, int64_t batch,
                      int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim,
                      CpuThreads& threads);
// dq, dk, dv += gradients through attention; work is split by (batch, kv head) so that the query
// heads sharing a kv head add into dk and dv in a fixed order.
template <typename T>
void AttentionBackward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                       const T* probs, int64_t batch, int64_t seq, int64_t heads,
                       int64_t kv_heads, int64_t head_dim, CpuThreads& threads);

// out = silu(gate) * up, silu(g) = g / (1 + exp(-g)); n elements.
template <typename T>
void SwiGluForward(T* out, const T* gate, const T* up, int64_t n, CpuThreads& threads);
template <typename T>
void SwiGluBackward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n,
                    CpuThreads& threads);

// out = a + b, n elements; out may alias a or b.
template <typename T>
void ResidualAdd(T* out, const T* a, const T* b, int64_t n, CpuThreads& threads);

// Mean cross-entropy of logits [N, V] against targets (a target < 0 is ignored), returned as
// the loss in fp64, and dlogits = (softmax - onehot) * grad_scale / count (OVERWRITTEN, not
// accumulated; rows with ignored targets get 0), count = number of targets >= 0. grad_scale is
// the loss scale (1 for an unscaled gradient). If count is 0 the loss is 0 and dlogits 0.
// dlogits may alias logits. dlogits may be null (forward only).
template <typename T>
double CrossEntropyForwardBackward(T* dlogits, const T* logits, const int32_t* targets,
                                   int64_t n_rows, int64_t vocab, double grad_scale,
                                   CpuThreads& threads);

}  // namespace tierflow::real::cpu
