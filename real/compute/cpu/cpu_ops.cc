// CPU reference kernels. The matrix products (linear layers, attention's q k^T, probs v and their
// gradients) are Gemm's (cpu_gemm.h: fused multiply-adds in order of the reduction, at the
// GEMM's rate). The other loops are written so GCC vectorises them without -ffast-math:
// reductions keep 8 independent partial sums combined in a fixed tree. Work is split over output
// rows or columns only, never over a reduction.
#include "tierflow/real/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tierflow/core/status.h"
#include "tierflow/real/cpu_gemm.h"

namespace tierflow::real::cpu {
namespace {

// Sum of a[i] * b[i] with 8 partial sums in a fixed order.
template <typename T>
inline T Dot(const T* __restrict a, const T* __restrict b, int64_t n) {
  T acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  }
  T s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// A pool of one thread (the caller), for products inside a loop the caller's pool already runs
// in parallel.
CpuThreads& Serial() {
  thread_local CpuThreads one(1);
  return one;
}

// Grain sizes: enough work per chunk that a wake-up (a few microseconds) is worth it.
int64_t RowGrain(int64_t work_per_row) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, work_per_row));
}

}  // namespace

bool SupportsOp(ComputeOp op) { return op != ComputeOp::kCount; }

template <typename T>
void EmbeddingForward(T* out, const int32_t* tokens, const T* table, int64_t n_rows,
                      int64_t channels, CpuThreads& threads) {
  threads.ParallelFor(n_rows, RowGrain(channels), [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      std::copy_n(table + static_cast<int64_t>(tokens[n]) * channels, channels, out + n * channels);
    }
  });
}

template <typename T>
void EmbeddingBackward(T* dtable, const int32_t* tokens, const T* dout, int64_t n_rows,
                       int64_t channels, CpuThreads& threads) {
  // Split by columns so that repeated tokens add up in row order whatever the thread count.
  threads.ParallelFor(channels, 64, [&](int64_t c0, int64_t c1) {
    for (int64_t n = 0; n < n_rows; ++n) {
      T* row = dtable + static_cast<int64_t>(tokens[n]) * channels;
      const T* g = dout + n * channels;
      for (int64_t c = c0; c < c1; ++c) row[c] += g[c];
    }
  });
}

template <typename T>
void RmsNormForward(T* out, T* rstd, const T* x, const T* w, int64_t n_rows, int64_t channels,
                    double eps, CpuThreads& threads) {
  threads.ParallelFor(n_rows, RowGrain(channels), [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const T* xr = x + n * channels;
      const T mean_sq = Dot(xr, xr, channels) / static_cast<T>(channels);
      const T r = static_cast<T>(1) / std::sqrt(mean_sq + static_cast<T>(eps));
      rstd[n] = r;
      T* o = out + n * channels;
      for (int64_t c = 0; c < channels; ++c) o[c] = w[c] * (xr[c] * r);
    }
  });
}

template <typename T>
void RmsNormBackward(T* dx, T* dw, const T* dout, const T* x, const T* w, const T* rstd,
                     int64_t n_rows, int64_t channels, CpuThreads& threads) {
  if (dx != nullptr) {
    threads.ParallelFor(n_rows, RowGrain(channels), [&](int64_t begin, int64_t end) {
      std::vector<T> dxhat(static_cast<size_t>(channels));
      for (int64_t n = begin; n < end; ++n) {
        const T* xr = x + n * channels;
        const T* g = dout + n * channels;
        const T r = rstd[n];
        for (int64_t c = 0; c < channels; ++c) dxhat[c] = g[c] * w[c];
        // mean_c(dxhat * xhat) with xhat = x * r.
        const T m = Dot(dxhat.data(), xr, channels) * r / static_cast<T>(channels);
        T* d = dx + n * channels;
        for (int64_t c = 0; c < channels; ++c) d[c] += r * (dxhat[c] - xr[c] * r * m);
      }
    });
  }
  if (dw != nullptr) {
    threads.ParallelFor(channels, 64, [&](int64_t c0, int64_t c1) {
      for (int64_t n = 0; n < n_rows; ++n) {
        const T* xr = x + n * channels;
        const T* g = dout + n * channels;
        const T r = rstd[n];
        for (int64_t c = c0; c < c1; ++c) dw[c] += g[c] * (xr[c] * r);
      }
    });
  }
}

template <typename T>
void LinearForward(T* out, const T* x, const T* w, int64_t n_rows, int64_t in, int64_t out_dim,
                   CpuThreads& threads) {
  // out[n, o] = sum_i x[n, i] W[o, i]: B is W read transposed.
  Gemm<T>(n_rows, out_dim, in, {x, in, 1}, {w, 1, in}, out, out_dim, false, threads);
}

template <typename T>
void LinearBackward(T* dx, T* dw, const T* dout, const T* x, const T* w, int64_t n_rows,
                    int64_t in, int64_t out_dim, CpuThreads& threads) {
  // dx[n, i] += sum_o dout[n, o] W[o, i]; dw[o, i] += sum_n dout[n, o] x[n, i] (A is dout read
  // transposed).
  if (dx != nullptr) Gemm<T>(n_rows, in, out_dim, {dout, out_dim, 1}, {w, in, 1}, dx, in, true, threads);
  if (dw != nullptr) Gemm<T>(out_dim, in, n_rows, {dout, 1, out_dim}, {x, in, 1}, dw, in, true, threads);
}

template <typename T>
void RopeTables(T* cos_table, T* sin_table, int64_t seq, std::span<const double> inv_freq) {
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  for (int64_t t = 0; t < seq; ++t) {
    for (int64_t j = 0; j < half; ++j) {
      const double angle = static_cast<double>(t) * inv_freq[static_cast<size_t>(j)];
      cos_table[t * half + j] = static_cast<T>(std::cos(angle));
      sin_table[t * half + j] = static_cast<T>(std::sin(angle));
    }
  }
}

namespace {

// Rotates every head of every row by +angle (sign = 1) or -angle (sign = -1).
template <typename T>
void Rotate(T* x, const T* cos_table, const T* sin_table, int64_t n_rows, int64_t seq,
            int64_t heads, int64_t head_dim, T sign, CpuThreads& threads) {
  const int64_t half = head_dim / 2;
  threads.ParallelFor(n_rows, RowGrain(heads * head_dim), [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const int64_t t = n % seq;
      const T* c = cos_table + t * half;
      const T* s = sin_table + t * half;
      for (int64_t h = 0; h < heads; ++h) {
        T* x1 = x + (n * heads + h) * head_dim;
        T* x2 = x1 + half;
        for (int64_t j = 0; j < half; ++j) {
          const T a = x1[j];
          const T b = x2[j];
          const T sn = sign * s[j];
          x1[j] = a * c[j] - b * sn;
          x2[j] = b * c[j] + a * sn;
        }
      }
    }
  });
}

}  // namespace

template <typename T>
void RopeForward(T* x, const T* cos_table, const T* sin_table, int64_t n_rows, int64_t seq,
                 int64_t heads, int64_t head_dim, CpuThreads& threads) {
  Rotate(x, cos_table, sin_table, n_rows, seq, heads, head_dim, static_cast<T>(1), threads);
}

template <typename T>
void RopeBackward(T* dx, const T* cos_table, const T* sin_table, int64_t n_rows, int64_t seq,
                  int64_t heads, int64_t head_dim, CpuThreads& threads) {
  Rotate(dx, cos_table, sin_table, n_rows, seq, heads, head_dim, static_cast<T>(-1), threads);
}

template <typename T>
void AttentionForward(T* out, T* probs, const T* q, const T* k, const T* v, int64_t batch,
                      int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim,
                      CpuThreads& threads) {
  TF_CHECK(heads % kv_heads == 0);
  const int64_t group = heads / kv_heads;
  const int64_t q_stride = heads * head_dim;
  const int64_t kv_stride = kv_heads * head_dim;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  threads.ParallelFor(batch * heads, [&](int64_t begin, int64_t end) {
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / heads;
      const int64_t h = bh % heads;
      const T* qh = q + b * seq * q_stride + h * head_dim;
      const T* kh = k + b * seq * kv_stride + (h / group) * head_dim;
      const T* vh = v + b * seq * kv_stride + (h / group) * head_dim;
      // The whole square of q k^T (the products above the diagonal are computed and masked:
      // cheaper at the GEMM's rate than the triangle at a dot product's), then a causal softmax
      // per row, then out = probs v (the zeros above the diagonal add nothing).
      T* p_head = probs + bh * seq * seq;
      Gemm<T>(seq, seq, head_dim, {qh, q_stride, 1}, {kh, 1, kv_stride}, p_head, seq, false, Serial());
      for (int64_t t = 0; t < seq; ++t) {
        T* p = p_head + t * seq;
        T max_score = -INFINITY;
        for (int64_t s = 0; s <= t; ++s) {
          p[s] *= scale;
          max_score = std::max(max_score, p[s]);
        }
        T sum = 0;
        for (int64_t s = 0; s <= t; ++s) {
          p[s] = std::exp(p[s] - max_score);
          sum += p[s];
        }
        const T inv_sum = static_cast<T>(1) / sum;
        for (int64_t s = 0; s <= t; ++s) p[s] *= inv_sum;
        for (int64_t s = t + 1; s < seq; ++s) p[s] = 0;
      }
      Gemm<T>(seq, head_dim, seq, {p_head, seq, 1}, {vh, kv_stride, 1}, out + b * seq * q_stride + h * head_dim,
              q_stride, false, Serial());
    }
  });
}

template <typename T>
void AttentionBackward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                       const T* probs, int64_t batch, int64_t seq, int64_t heads,
                       int64_t kv_heads, int64_t head_dim, CpuThreads& threads) {
  TF_CHECK(heads % kv_heads == 0);
  const int64_t group = heads / kv_heads;
  const int64_t q_stride = heads * head_dim;
  const int64_t kv_stride = kv_heads * head_dim;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  threads.ParallelFor(batch * kv_heads, [&](int64_t begin, int64_t end) {
    std::vector<T> dscore(static_cast<size_t>(seq * seq));
    for (int64_t bk = begin; bk < end; ++bk) {
      const int64_t b = bk / kv_heads;
      const int64_t kvh = bk % kv_heads;
      const int64_t kv_offset = b * seq * kv_stride + kvh * head_dim;
      // The query heads sharing this kv head add into dk and dv one after another, in order.
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        const T* p_head = probs + (b * heads + h) * seq * seq;
        const int64_t q_offset = b * seq * q_stride + h * head_dim;
        const T* g = dout + q_offset;
        // dv[s] += sum_t probs[t, s] g[t] (probs read transposed; zero above the diagonal).
        if (dv != nullptr) {
          Gemm<T>(seq, head_dim, seq, {p_head, 1, seq}, {g, q_stride, 1}, dv + kv_offset, kv_stride, true, Serial());
        }
        // dprob[t, s] = g[t] . v[s]; dscore = probs * (dprob - sum_s probs * dprob) * scale.
        T* ds = dscore.data();
        Gemm<T>(seq, seq, head_dim, {g, q_stride, 1}, {v + kv_offset, 1, kv_stride}, ds, seq, false, Serial());
        for (int64_t t = 0; t < seq; ++t) {
          const T* p = p_head + t * seq;
          T* d = ds + t * seq;
          T weighted = 0;
          for (int64_t s = 0; s <= t; ++s) weighted += p[s] * d[s];
          for (int64_t s = 0; s <= t; ++s) d[s] = p[s] * (d[s] - weighted) * scale;
          for (int64_t s = t + 1; s < seq; ++s) d[s] = 0;
        }
        // dq[t] += sum_s dscore[t, s] k[s]; dk[s] += sum_t dscore[t, s] q[t].
        if (dq != nullptr) {
          Gemm<T>(seq, head_dim, seq, {ds, seq, 1}, {k + kv_offset, kv_stride, 1}, dq + q_offset, q_stride, true,
                  Serial());
        }
        if (dk != nullptr) {
          Gemm<T>(seq, head_dim, seq, {ds, 1, seq}, {q + q_offset, q_stride, 1}, dk + kv_offset, kv_stride, true,
                  Serial());
        }
      }
    }
  });
}

template <typename T>
void SwiGluForward(T* out, const T* gate, const T* up, int64_t n, CpuThreads& threads) {
  threads.ParallelFor(n, 8192, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T g = gate[i];
      out[i] = g / (static_cast<T>(1) + std::exp(-g)) * up[i];
    }
  });
}

template <typename T>
void SwiGluBackward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n,
                    CpuThreads& threads) {
  threads.ParallelFor(n, 8192, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T g = gate[i];
      const T sig = static_cast<T>(1) / (static_cast<T>(1) + std::exp(-g));
      const T silu = g * sig;
      // d silu / dg = sig * (1 + g * (1 - sig)).
      if (dgate != nullptr) dgate[i] += dout[i] * up[i] * sig * (static_cast<T>(1) + g * (static_cast<T>(1) - sig));
      if (dup != nullptr) dup[i] += dout[i] * silu;
    }
  });
}

template <typename T>
void ResidualAdd(T* out, const T* a, const T* b, int64_t n, CpuThreads& threads) {
  threads.ParallelFor(n, 16384, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = a[i] + b[i];
  });
}

template <typename T>
void BiasForward(T* x, const T* bias, int64_t n_rows, int64_t dim, CpuThreads& threads) {
  threads.ParallelFor(n_rows, RowGrain(dim), [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      for (int64_t c = 0; c < dim; ++c) x[n * dim + c] += bias[c];
    }
  });
}

template <typename T>
void BiasBackward(T* dbias, const T* dout, int64_t n_rows, int64_t dim, CpuThreads& threads) {
  threads.ParallelFor(dim, 64, [&](int64_t c0, int64_t c1) {
    for (int64_t n = 0; n < n_rows; ++n) {
      for (int64_t c = c0; c < c1; ++c) dbias[c] += dout[n * dim + c];
    }
  });
}

template <typename T>
double CrossEntropyForwardBackward(T* dlogits, const T* logits, const int32_t* targets,
                                   int64_t n_rows, int64_t vocab, double grad_scale,
                                   CpuThreads& threads) {
  int64_t count = 0;
  for (int64_t n = 0; n < n_rows; ++n) count += targets[n] >= 0 ? 1 : 0;
  std::vector<double> row_loss(static_cast<size_t>(n_rows), 0.0);
  const double row_scale = count > 0 ? grad_scale / static_cast<double>(count) : 0.0;
  threads.ParallelFor(n_rows, RowGrain(vocab), [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const T* l = logits + n * vocab;
      const int32_t target = targets[n];
      if (target < 0) {
        if (dlogits != nullptr) std::fill_n(dlogits + n * vocab, vocab, static_cast<T>(0));
        continue;
      }
      TF_CHECK(target < vocab);
      const T max_logit = *std::max_element(l, l + vocab);
      double sum = 0;
      for (int64_t j = 0; j < vocab; ++j) sum += std::exp(static_cast<double>(l[j] - max_logit));
      const double log_sum = std::log(sum);
      row_loss[n] = log_sum - static_cast<double>(l[target] - max_logit);
      if (dlogits != nullptr) {
        T* d = dlogits + n * vocab;
        const double inv_sum = 1.0 / sum;
        for (int64_t j = 0; j < vocab; ++j) {
          const double p = std::exp(static_cast<double>(l[j] - max_logit)) * inv_sum;
          d[j] = static_cast<T>((p - (j == target ? 1.0 : 0.0)) * row_scale);
        }
      }
    }
  });
  double total = 0;
  for (double x : row_loss) total += x;
  return count > 0 ? total / static_cast<double>(count) : 0.0;
}

#define TF_INSTANTIATE(T)                                                                        \
  template void EmbeddingForward<T>(T*, const int32_t*, const T*, int64_t, int64_t,              \
                                    CpuThreads&);                                                \
  template void EmbeddingBackward<T>(T*, const int32_t*, const T*, int64_t, int64_t,             \
                                     CpuThreads&);                                               \
  template void RmsNormForward<T>(T*, T*, const T*, const T*, int64_t, int64_t, double,          \
                                  CpuThreads&);                                                  \
  template void RmsNormBackward<T>(T*, T*, const T*, const T*, const T*, const T*, int64_t,      \
                                   int64_t, CpuThreads&);                                        \
  template void LinearForward<T>(T*, const T*, const T*, int64_t, int64_t, int64_t,              \
                                 CpuThreads&);                                                   \
  template void LinearBackward<T>(T*, T*, const T*, const T*, const T*, int64_t, int64_t,        \
                                  int64_t, CpuThreads&);                                         \
  template void RopeTables<T>(T*, T*, int64_t, std::span<const double>);                         \
  template void RopeForward<T>(T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t,       \
                               CpuThreads&);                                                     \
  template void RopeBackward<T>(T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t,      \
                                CpuThreads&);                                                    \
  template void AttentionForward<T>(T*, T*, const T*, const T*, const T*, int64_t, int64_t,      \
                                    int64_t, int64_t, int64_t, CpuThreads&);                     \
  template void AttentionBackward<T>(T*, T*, T*, const T*, const T*, const T*, const T*,         \
                                     const T*, int64_t, int64_t, int64_t, int64_t, int64_t,      \
                                     CpuThreads&);                                               \
  template void SwiGluForward<T>(T*, const T*, const T*, int64_t, CpuThreads&);                  \
  template void SwiGluBackward<T>(T*, T*, const T*, const T*, const T*, int64_t, CpuThreads&);   \
  template void ResidualAdd<T>(T*, const T*, const T*, int64_t, CpuThreads&);                    \
  template void BiasForward<T>(T*, const T*, int64_t, int64_t, CpuThreads&);                     \
  template void BiasBackward<T>(T*, const T*, int64_t, int64_t, CpuThreads&);                    \
  template double CrossEntropyForwardBackward<T>(T*, const T*, const int32_t*, int64_t, int64_t, \
                                                 double, CpuThreads&);

TF_INSTANTIATE(float)
TF_INSTANTIATE(double)
#undef TF_INSTANTIATE

}  // namespace tierflow::real::cpu
