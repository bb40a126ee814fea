// The CUDA ops of cuda_ops.h: cuBLAS for the GEMMs, one kernel per op for the rest. Kernels read
// and write through math::Load/Store (device_math.h), so one template serves fp32 and bf16 storage
// and the arithmetic is always fp32 (fp64 for the gradient norm's partial sums).
//
// Determinism: every reduction is a fixed tree (warp butterflies, then the warps' sums added in
// warp order), every "+=" over rows is one thread walking the rows in order, and no kernel uses
// atomics; cuBLAS's GEMMs are deterministic on one stream. So repeated runs are bit-identical.
#include "tierflow/real/cuda_ops.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "tierflow/real/cuda_status.h"
#include "device_math.h"
#include "op_checks.h"

namespace tierflow::real::cuda {
namespace {

using math::Load;
using math::Store;

constexpr int kThreads = 256;  // every kernel's block size; the block reductions rely on it
constexpr int kWarps = kThreads / 32;
constexpr int64_t kNormChunk = 4096;  // elements per partial sum of the gradient norm

cudaStream_t StreamOf(const Context& ctx) { return static_cast<cudaStream_t>(ctx.stream()); }
cublasHandle_t CublasOf(const Context& ctx) { return static_cast<cublasHandle_t>(ctx.cublas()); }

// Blocks for a grid-stride loop over n items.
unsigned GridFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, int64_t{1} << 20));
}

__device__ __forceinline__ int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t GridThreads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// The sum over the block of each thread's v, the same value in every thread: warp butterflies
// (every lane ends with the identical sum), then the warps' sums added in warp order.
template <typename A>
__device__ A BlockSum(A v, A* shared /* kWarps */) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  __syncthreads();  // `shared` may still be read from the previous call
  if ((threadIdx.x & 31) == 0) shared[threadIdx.x >> 5] = v;
  __syncthreads();
  A total = 0;
  for (int w = 0; w < kWarps; ++w) total += shared[w];
  return total;
}

__device__ float BlockMax(float v, float* shared /* kWarps */) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) shared[threadIdx.x >> 5] = v;
  __syncthreads();
  float m = shared[0];
  for (int w = 1; w < kWarps; ++w) m = fmaxf(m, shared[w]);
  return m;
}

template <typename T>
constexpr cudaDataType_t kCudaType = std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_16BF;

// --- argument checks (op_checks.h) ---------------------------------------------------------

using internal::AlignScratch;
using internal::LaunchStatus;
using internal::NeedHeadGroups;
using internal::NeedInt;
using internal::NeedPositive;
using internal::NeedRowGrid;

// An elementwise op: n checked, then `kernel` launched grid-stride over n elements with `args`
// (n among them, as the kernel takes it).
template <typename... Params, typename... Args>
Status LaunchElementwise(const Context& ctx, const char* op, const char* kernel_name, void (*kernel)(Params...),
                         int64_t n, Args... args) {
  TF_RETURN_IF_ERROR(NeedPositive(op, {{"n", n}}));
  kernel<<<GridFor(n), kThreads, 0, StreamOf(ctx)>>>(args...);
  return LaunchStatus(kernel_name);
}

// --- kernels ----------------------------------------------------------------------------------

template <typename T>
__global__ void EmbeddingForwardKernel(T* out, const int32_t* tokens, const T* table, int64_t n_rows, int64_t c) {
  for (int64_t i = GlobalThread(); i < n_rows * c; i += GridThreads()) {
    const int64_t n = i / c;
    out[i] = table[static_cast<int64_t>(tokens[n]) * c + (i - n * c)];
  }
}

// One thread per channel, rows in order: the CPU's summation order, without atomics.
template <typename T>
__global__ void EmbeddingBackwardKernel(float* dtable, const int32_t* tokens, const T* dout, int64_t n_rows, int64_t c) {
  for (int64_t j = GlobalThread(); j < c; j += GridThreads()) {
    for (int64_t n = 0; n < n_rows; ++n) dtable[static_cast<int64_t>(tokens[n]) * c + j] += Load(dout, n * c + j);
  }
}

template <typename T>
__global__ void RmsNormForwardKernel(T* out, float* rstd, const T* x, const T* w, int64_t c, float eps) {
  __shared__ float red[kWarps];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * c;
  float ss = 0;
  for (int64_t j = threadIdx.x; j < c; j += kThreads) {
    const float v = Load(xr, j);
    ss += v * v;
  }
  ss = BlockSum(ss, red);
  const float r = 1.0f / sqrtf(ss / static_cast<float>(c) + eps);
  if (threadIdx.x == 0) rstd[row] = r;
  T* outr = out + row * c;
  for (int64_t j = threadIdx.x; j < c; j += kThreads) Store(outr, j, Load(w, j) * Load(xr, j) * r);
}

template <typename T>
__global__ void RmsNormBackwardDxKernel(float* dx, const T* dout, const T* x, const T* w, const float* rstd, int64_t c) {
  __shared__ float red[kWarps];
  const int64_t row = blockIdx.x;
  const T* g = dout + row * c;
  const T* xr = x + row * c;
  const float r = rstd[row];
  float s = 0;
  for (int64_t j = threadIdx.x; j < c; j += kThreads) s += Load(g, j) * Load(w, j) * (Load(xr, j) * r);
  const float mean = BlockSum(s, red) / static_cast<float>(c);
  float* dxr = dx + row * c;
  for (int64_t j = threadIdx.x; j < c; j += kThreads) {
    dxr[j] += r * (Load(g, j) * Load(w, j) - Load(xr, j) * r * mean);
  }
}

// The weight gradient in two levels, so that it runs over the whole GPU in a fixed order: for
// each row block y (rows [y, y + 1) * kRmsNormRowBlock), each channel's sum over its rows in row
// order (RmsNormDwPartialKernel: blocks (x, y), y grid-strided over the row blocks), then one
// thread per channel adds the row blocks' sums in order.
template <typename T>
__global__ void RmsNormDwPartialKernel(float* partial, const T* dout, const T* x, const float* rstd, int64_t n_rows,
                                       int64_t c) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= c) return;
  const int64_t blocks = (n_rows + kRmsNormRowBlock - 1) / kRmsNormRowBlock;
  for (int64_t y = blockIdx.y; y < blocks; y += gridDim.y) {
    const int64_t first = y * kRmsNormRowBlock;
    const int64_t end = first + kRmsNormRowBlock < n_rows ? first + kRmsNormRowBlock : n_rows;
    float acc = 0;
    for (int64_t n = first; n < end; ++n) acc += Load(dout, n * c + j) * (Load(x, n * c + j) * rstd[n]);
    partial[y * c + j] = acc;
  }
}

__global__ void RmsNormDwFinalKernel(float* dw, const float* partial, int64_t blocks, int64_t c) {
  for (int64_t j = GlobalThread(); j < c; j += GridThreads()) {
    float acc = 0;
    for (int64_t r = 0; r < blocks; ++r) acc += partial[r * c + j];
    dw[j] += acc;
  }
}

template <typename T>
__global__ void RopeKernel(T* x, const float* cos_table, const float* sin_table, int64_t n_rows, int64_t seq,
                           int64_t heads, int64_t half, float sign) {
  const int64_t pairs = n_rows * heads * half;
  for (int64_t i = GlobalThread(); i < pairs; i += GridThreads()) {
    const math::RopeAt at = math::RopePair(i, seq, heads, half);
    const math::Pair p = math::Rotate(Load(x, at.first), Load(x, at.first + half), cos_table[at.table],
                                      sin_table[at.table], sign);
    Store(x, at.first, p.x1);
    Store(x, at.first + half, p.x2);
  }
}

// Row `blockIdx.x` of [rows, seq] scores, query position t = row % seq: the causal softmax in
// place (0 above the diagonal).
__global__ void CausalSoftmaxKernel(float* p, int64_t seq) {
  __shared__ float red[kWarps];
  const int64_t row = blockIdx.x;
  const int64_t t = row % seq;
  float* r = p + row * seq;
  float mx = -INFINITY;
  for (int64_t s = threadIdx.x; s <= t; s += kThreads) mx = fmaxf(mx, r[s]);
  mx = BlockMax(mx, red);
  float sum = 0;
  for (int64_t s = threadIdx.x; s <= t; s += kThreads) sum += math::Exp(r[s] - mx);
  const float inv = 1.0f / BlockSum(sum, red);
  for (int64_t s = threadIdx.x; s < seq; s += kThreads) r[s] = s <= t ? math::Exp(r[s] - mx) * inv : 0.0f;
}

// The probabilities of query heads h = g * group + j (g = 0..kv_heads-1) of batch b, packed as
// [kv_heads, seq, seq] in T for the next GEMM.
template <typename T>
__global__ void PackProbsKernel(T* packed, const float* probs, int64_t b, int64_t j, int64_t heads, int64_t group,
                                int64_t kv_heads, int64_t seq) {
  const int64_t total = kv_heads * seq * seq;
  for (int64_t i = GlobalThread(); i < total; i += GridThreads()) {
    const int64_t g = i / (seq * seq);
    const int64_t within = i - g * seq * seq;
    Store(packed, i, probs[(b * heads + g * group + j) * seq * seq + within]);
  }
}

// Softmax backward for the same heads: row r = g * seq + t; dp [kv_heads, seq, seq] fp32 in;
// d_scores and packed probabilities [kv_heads, seq, seq] in T out.
template <typename T>
__global__ void SoftmaxBackwardKernel(T* d_scores, T* packed, const float* dp, const float* probs, int64_t b, int64_t j,
                                      int64_t heads, int64_t group, int64_t seq, float scale) {
  __shared__ float red[kWarps];
  const int64_t r = blockIdx.x;
  const int64_t g = r / seq;
  const int64_t t = r % seq;
  const float* p = probs + ((b * heads + g * group + j) * seq + t) * seq;
  const float* d = dp + r * seq;
  float s = 0;
  for (int64_t k = threadIdx.x; k <= t; k += kThreads) s += p[k] * d[k];
  const float weighted = BlockSum(s, red);
  for (int64_t k = threadIdx.x; k < seq; k += kThreads) {
    Store(d_scores, r * seq + k, k <= t ? math::SoftmaxGrad(p[k], d[k], weighted, scale) : 0.0f);
    Store(packed, r * seq + k, k <= t ? p[k] : 0.0f);
  }
}

template <typename T>
__global__ void SwiGluForwardKernel(T* out, const T* gate, const T* up, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GridThreads()) Store(out, i, math::SwiGlu(Load(gate, i), Load(up, i)));
}

template <typename T>
__global__ void SwiGluBackwardKernel(float* dgate, float* dup, const T* dout, const T* gate, const T* up, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GridThreads()) {
    const math::SwiGluGrad g = math::SwiGluBackward(Load(dout, i), Load(gate, i), Load(up, i));
    if (dgate != nullptr) dgate[i] += g.d_gate;
    if (dup != nullptr) dup[i] += g.d_up;
  }
}

__global__ void SwiGluBackwardBf16Kernel(uint16_t* dgate, uint16_t* dup, const uint16_t* dout, const uint16_t* gate,
                                         const uint16_t* up, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GridThreads()) {
    const math::SwiGluGrad g = math::SwiGluBackward(Load(dout, i), Load(gate, i), Load(up, i));
    dgate[i] = math::Fp32ToBf16Bits(g.d_gate);
    dup[i] = math::Fp32ToBf16Bits(g.d_up);
  }
}

template <typename T>
__global__ void ResidualAddKernel(T* out, const T* a, const T* b, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GridThreads()) Store(out, i, Load(a, i) + Load(b, i));
}

// One block: the number of targets >= 0.
__global__ void CountTargetsKernel(const int32_t* targets, int64_t n, int* count) {
  __shared__ int red[kWarps];
  int c = 0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) c += targets[i] >= 0 ? 1 : 0;
  c = BlockSum(c, red);
  if (threadIdx.x == 0) *count = c;
}

template <typename T>
__global__ void CrossEntropyKernel(T* dlogits, const T* logits, const int32_t* targets, int64_t vocab,
                                   const int* count, float grad_scale, float* row_loss) {
  __shared__ float red[kWarps];
  const int64_t row = blockIdx.x;
  const int32_t target = targets[row];
  const T* l = logits + row * vocab;
  T* d = dlogits == nullptr ? nullptr : dlogits + row * vocab;
  if (target < 0) {  // the whole block takes this branch
    if (d != nullptr) {
      for (int64_t k = threadIdx.x; k < vocab; k += kThreads) Store(d, k, 0.0f);
    }
    if (threadIdx.x == 0) row_loss[row] = 0.0f;
    return;
  }
  // Read before the first barrier: dlogits may alias logits, and the last pass overwrites it.
  const float target_logit = threadIdx.x == 0 ? Load(l, target) : 0.0f;
  float mx = -INFINITY;
  for (int64_t k = threadIdx.x; k < vocab; k += kThreads) mx = fmaxf(mx, Load(l, k));
  mx = BlockMax(mx, red);
  float sum = 0;
  for (int64_t k = threadIdx.x; k < vocab; k += kThreads) sum += math::Exp(Load(l, k) - mx);
  sum = BlockSum(sum, red);
  if (threadIdx.x == 0) row_loss[row] = logf(sum) - (target_logit - mx);
  if (d != nullptr) {
    const float row_scale = grad_scale / static_cast<float>(*count);
    const float inv = 1.0f / sum;
    for (int64_t k = threadIdx.x; k < vocab; k += kThreads) {
      const float p = math::Exp(Load(l, k) - mx) * inv;
      Store(d, k, (p - (k == target ? 1.0f : 0.0f)) * row_scale);
    }
  }
}

__global__ void NormPartialKernel(const float* grad, int64_t n, float scale, double* partial, int* nonfinite) {
  __shared__ double red_d[kWarps];
  __shared__ int red_i[kWarps];
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kNormChunk;
  const int64_t end = first + kNormChunk < n ? first + kNormChunk : n;
  double acc = 0;
  int bad = 0;
  for (int64_t i = first + threadIdx.x; i < end; i += kThreads) {
    const float x = grad[i] * scale;
    acc += static_cast<double>(x * x);
    bad |= isfinite(x) ? 0 : 1;
  }
  acc = BlockSum(acc, red_d);
  bad = BlockSum(bad, red_i);
  if (threadIdx.x == 0) {
    partial[blockIdx.x] = acc;
    nonfinite[blockIdx.x] = bad;
  }
}

// One block: the partials added in a fixed order.
__global__ void NormFinalKernel(const double* partial, const int* nonfinite, int64_t chunks, double* sum, int* bad) {
  __shared__ double red_d[kWarps];
  __shared__ int red_i[kWarps];
  double acc = 0;
  int b = 0;
  for (int64_t c = threadIdx.x; c < chunks; c += kThreads) {
    acc += partial[c];
    b += nonfinite[c];
  }
  acc = BlockSum(acc, red_d);
  b = BlockSum(b, red_i);
  if (threadIdx.x == 0) {
    *sum = acc;
    *bad = b;
  }
}

__global__ void ToBf16Kernel(uint16_t* dst, const float* src, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GridThreads()) dst[i] = math::Fp32ToBf16Bits(src[i]);
}

__global__ void ToFp32Kernel(float* dst, const uint16_t* src, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GridThreads()) dst[i] = math::Bf16BitsToFp32(src[i]);
}

// G: float, or uint16_t (bf16 bits, widened exactly by Load).
template <typename G>
__global__ void AdamWKernel(float* param, float* m, float* v, const G* grad, uint16_t* bf16, int64_t n, float grad_scale,
                            AdamWStep s) {
  for (int64_t i = GlobalThread(); i < n; i += GridThreads()) {
    const math::AdamWElementOut e = math::AdamWElement(param[i], m[i], v[i], Load(grad, i), grad_scale, s.beta1, s.beta2, s.one_minus_beta1,
                                                       s.one_minus_beta2, s.eps, s.decay_factor, s.step_size, s.inv_sqrt_bc2);
    param[i] = e.p;
    m[i] = e.m;
    v[i] = e.v;
    if (bf16 != nullptr) bf16[i] = math::Fp32ToBf16Bits(e.p);
  }
}

__global__ void RoundToBf16Kernel(float* x, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GridThreads()) x[i] = math::Bf16BitsToFp32(math::Fp32ToBf16Bits(x[i]));
}

// out[i] = parts[0][i] + parts[1][i] + ..., added in rank order in fp32 (no fused or reordered
// adds: __fadd_rn), then stored as T (rounded to nearest even for bf16).
template <typename T>
__global__ void SumRanksKernel(T* out, const T* parts, int64_t count, int ranks) {
  for (int64_t i = GlobalThread(); i < count; i += GridThreads()) {
    float sum = Load(parts, i);
    for (int r = 1; r < ranks; ++r) sum = __fadd_rn(sum, Load(parts, static_cast<int64_t>(r) * count + i));
    Store(out, i, sum);
  }
}

// One cuBLAS strided-batched GEMM in column-major terms (the callers translate from row-major),
// A and B of type T, C of type C_T, fp32 compute.
template <typename T, typename CT>
Status Gemm(const Context& ctx, const char* what, cublasOperation_t op_a, cublasOperation_t op_b, int64_t m, int64_t n,
            int64_t k, float alpha, const T* a, int64_t lda, int64_t stride_a, const T* b, int64_t ldb, int64_t stride_b,
            float beta, CT* c, int64_t ldc, int64_t stride_c, int64_t batch) {
  TF_RETURN_IF_ERROR(NeedInt(what, {{"m", m}, {"n", n}, {"k", k}, {"lda", lda}, {"ldb", ldb}, {"ldc", ldc}, {"batch", batch}}));
  const int im = static_cast<int>(m), in = static_cast<int>(n), ik = static_cast<int>(k);
  if (batch == 1) {
    TF_CUBLAS(cublasGemmEx(CublasOf(ctx), op_a, op_b, im, in, ik, &alpha, a, kCudaType<T>, static_cast<int>(lda), b,
                           kCudaType<T>, static_cast<int>(ldb), &beta, c, kCudaType<CT>, static_cast<int>(ldc),
                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              std::string("cublasGemmEx (") + what + ")");
  } else {
    TF_CUBLAS(cublasGemmStridedBatchedEx(CublasOf(ctx), op_a, op_b, im, in, ik, &alpha, a, kCudaType<T>,
                                         static_cast<int>(lda), stride_a, b, kCudaType<T>, static_cast<int>(ldb), stride_b,
                                         &beta, c, kCudaType<CT>, static_cast<int>(ldc), stride_c,
                                         static_cast<int>(batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              std::string("cublasGemmStridedBatchedEx (") + what + ")");
  }
  return Status::Ok();
}

Status CheckAttention(const char* op, int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim) {
  TF_RETURN_IF_ERROR(
      NeedPositive(op, {{"batch", batch}, {"seq", seq}, {"heads", heads}, {"kv_heads", kv_heads}, {"head_dim", head_dim}}));
  TF_RETURN_IF_ERROR(NeedHeadGroups(op, heads, kv_heads));
  TF_RETURN_IF_ERROR(NeedRowGrid(op, batch * heads * seq));
  return NeedInt(op, {{"heads * head_dim", heads * head_dim}, {"seq * seq", seq * seq}});
}

}  // namespace

// --- ops ------------------------------------------------------------------------------------------

template <typename T>
Status EmbeddingForward(const Context& ctx, T* out, const int32_t* tokens, const T* table, int64_t n_rows,
                        int64_t channels) {
  TF_RETURN_IF_ERROR(NeedPositive("embedding forward", {{"rows", n_rows}, {"channels", channels}}));
  EmbeddingForwardKernel<<<GridFor(n_rows * channels), kThreads, 0, StreamOf(ctx)>>>(out, tokens, table, n_rows, channels);
  return LaunchStatus("EmbeddingForwardKernel");
}

template <typename T>
Status EmbeddingBackward(const Context& ctx, float* dtable, const int32_t* tokens, const T* dout, int64_t n_rows,
                         int64_t channels) {
  TF_RETURN_IF_ERROR(NeedPositive("embedding backward", {{"rows", n_rows}, {"channels", channels}}));
  EmbeddingBackwardKernel<<<GridFor(channels), kThreads, 0, StreamOf(ctx)>>>(dtable, tokens, dout, n_rows, channels);
  return LaunchStatus("EmbeddingBackwardKernel");
}

template <typename T>
Status RmsNormForward(const Context& ctx, T* out, float* rstd, const T* x, const T* w, int64_t n_rows, int64_t channels,
                      double eps) {
  TF_RETURN_IF_ERROR(NeedPositive("rmsnorm forward", {{"rows", n_rows}, {"channels", channels}}));
  TF_RETURN_IF_ERROR(NeedRowGrid("rmsnorm forward", n_rows));
  RmsNormForwardKernel<<<static_cast<unsigned>(n_rows), kThreads, 0, StreamOf(ctx)>>>(out, rstd, x, w, channels,
                                                                                      static_cast<float>(eps));
  return LaunchStatus("RmsNormForwardKernel");
}

template <typename T>
Status RmsNormBackward(const Context& ctx, float* dx, float* dw, const T* dout, const T* x, const T* w,
                       const float* rstd, int64_t n_rows, int64_t channels) {
  TF_RETURN_IF_ERROR(NeedPositive("rmsnorm backward", {{"rows", n_rows}, {"channels", channels}}));
  TF_RETURN_IF_ERROR(NeedRowGrid("rmsnorm backward", n_rows));
  if (dx != nullptr) {
    RmsNormBackwardDxKernel<<<static_cast<unsigned>(n_rows), kThreads, 0, StreamOf(ctx)>>>(dx, dout, x, w, rstd, channels);
    TF_RETURN_IF_ERROR(LaunchStatus("RmsNormBackwardDxKernel"));
  }
  if (dw != nullptr) {
    const int64_t blocks = (n_rows + kRmsNormRowBlock - 1) / kRmsNormRowBlock;
    TF_ASSIGN_OR_RETURN(void* scratch, ctx.Scratch(blocks * channels * static_cast<int64_t>(sizeof(float))));
    float* partial = static_cast<float*>(scratch);
    const dim3 grid(static_cast<unsigned>((channels + kThreads - 1) / kThreads),
                    static_cast<unsigned>(std::min<int64_t>(blocks, 65535)));
    RmsNormDwPartialKernel<<<grid, kThreads, 0, StreamOf(ctx)>>>(partial, dout, x, rstd, n_rows, channels);
    TF_RETURN_IF_ERROR(LaunchStatus("RmsNormDwPartialKernel"));
    RmsNormDwFinalKernel<<<GridFor(channels), kThreads, 0, StreamOf(ctx)>>>(dw, partial, blocks, channels);
    TF_RETURN_IF_ERROR(LaunchStatus("RmsNormDwFinalKernel"));
  }
  return Status::Ok();
}

// Row-major x[N,I], W[O,I], out[N,O] are column-major x^T (I x N), W^T (I x O), out^T (O x N):
// out^T = W x^T, so A = the column-major W^T transposed (m = O, k = I, lda = I), B = x^T.
template <typename T>
Status LinearForward(const Context& ctx, T* out, const T* x, const T* w, int64_t n_rows, int64_t in, int64_t out_dim) {
  TF_RETURN_IF_ERROR(NeedPositive("linear forward", {{"rows", n_rows}, {"in", in}, {"out", out_dim}}));
  return Gemm(ctx, "linear forward", CUBLAS_OP_T, CUBLAS_OP_N, out_dim, n_rows, in, 1.0f, w, in, 0, x, in, 0, 0.0f,
                    out, out_dim, 0, 1);
}

template <typename T>
Status LinearBackward(const Context& ctx, float* dx, float* dw, const T* dout, const T* x, const T* w, int64_t n_rows,
                      int64_t in, int64_t out_dim, GradMode dx_mode, GradMode dw_mode) {
  const float dx_beta = dx_mode == GradMode::kAdd ? 1.0f : 0.0f, dw_beta = dw_mode == GradMode::kAdd ? 1.0f : 0.0f;
  TF_RETURN_IF_ERROR(NeedPositive("linear backward", {{"rows", n_rows}, {"in", in}, {"out", out_dim}}));
  if (dx != nullptr) {
    // dx^T (I x N) += W^T (I x O, the column-major view of W) * dout^T (O x N).
    TF_RETURN_IF_ERROR(Gemm(ctx, "linear backward, dx", CUBLAS_OP_N, CUBLAS_OP_N, in, n_rows, out_dim, 1.0f, w,
                                      in, 0, dout, out_dim, 0, dx_beta, dx, in, 0, 1));
  }
  if (dw != nullptr) {
    // dw^T (I x O) += x^T (I x N) * dout (N x O, the transpose of the column-major dout^T).
    TF_RETURN_IF_ERROR(Gemm(ctx, "linear backward, dw", CUBLAS_OP_N, CUBLAS_OP_T, in, out_dim, n_rows, 1.0f, x,
                                      in, 0, dout, out_dim, 0, dw_beta, dw, in, 0, 1));
  }
  return Status::Ok();
}

namespace {
template <typename T>
Status Rope(const Context& ctx, T* x, const float* cos_table, const float* sin_table, int64_t n_rows, int64_t seq,
            int64_t heads, int64_t head_dim, float sign) {
  TF_RETURN_IF_ERROR(NeedPositive("rope", {{"rows", n_rows}, {"seq", seq}, {"heads", heads}, {"head_dim", head_dim}}));
  if (head_dim % 2 != 0) return InvalidArgument("rope: head_dim = " + std::to_string(head_dim) + " (must be even)");
  const int64_t half = head_dim / 2;
  RopeKernel<<<GridFor(n_rows * heads * half), kThreads, 0, StreamOf(ctx)>>>(x, cos_table, sin_table, n_rows, seq, heads,
                                                                              half, sign);
  return LaunchStatus("RopeKernel");
}
}  // namespace

template <typename T>
Status RopeForward(const Context& ctx, T* x, const float* cos_table, const float* sin_table, int64_t n_rows, int64_t seq,
                   int64_t heads, int64_t head_dim) {
  return Rope(ctx, x, cos_table, sin_table, n_rows, seq, heads, head_dim, 1.0f);
}

Status RopeBackward(const Context& ctx, float* dx, const float* cos_table, const float* sin_table, int64_t n_rows,
                    int64_t seq, int64_t heads, int64_t head_dim) {
  return Rope(ctx, dx, cos_table, sin_table, n_rows, seq, heads, head_dim, -1.0f);
}

// Row-major q [B*S, H*d], k and v [B*S, KV*d]. For batch b and the j-th query head of every kv
// group, the kv_heads heads h = g * group + j are one strided batch over g: q's head h starts
// at column h*d (stride group*d over g), kv head g at column g*d (stride d), and head h's
// [S, S] block of probs at (b*H + h)*S*S (stride group*S*S). In column-major terms a row-major
// [S, d] head with row stride ld is the d x S matrix with leading dimension ld.
template <typename T>
Status AttentionForward(const Context& ctx, T* out, float* probs, const T* q, const T* k, const T* v, int64_t batch,
                        int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim) {
  TF_RETURN_IF_ERROR(CheckAttention("attention forward", batch, seq, heads, kv_heads, head_dim));
  const int64_t S = seq, H = heads, KV = kv_heads, d = head_dim, group = heads / kv_heads;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  // Scores: probs_h^T (S_k x S_q) = K_g (S_k x d) * Q_h^T (d x S_q), scaled, into probs.
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j = 0; j < group; ++j) {
      TF_RETURN_IF_ERROR(Gemm(ctx, "attention scores", CUBLAS_OP_T, CUBLAS_OP_N, S, S, d, scale,
                                        k + b * S * KV * d, KV * d, d, q + b * S * H * d + j * d, H * d, group * d, 0.0f,
                                        probs + (b * H + j) * S * S, S, group * S * S, KV));
    }
  }
  CausalSoftmaxKernel<<<static_cast<unsigned>(batch * H * S), kThreads, 0, StreamOf(ctx)>>>(probs, S);
  TF_RETURN_IF_ERROR(LaunchStatus("CausalSoftmaxKernel"));
  // out_h^T (d x S_q) = V_g^T (d x S_k) * P_h^T (S_k x S_q), P packed in T per (b, j).
  TF_ASSIGN_OR_RETURN(void* scratch, ctx.Scratch(KV * S * S * static_cast<int64_t>(sizeof(T))));
  T* packed = static_cast<T*>(scratch);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j = 0; j < group; ++j) {
      PackProbsKernel<<<GridFor(KV * S * S), kThreads, 0, StreamOf(ctx)>>>(packed, probs, b, j, H, group, KV, S);
      TF_RETURN_IF_ERROR(LaunchStatus("PackProbsKernel"));
      TF_RETURN_IF_ERROR(Gemm(ctx, "attention output", CUBLAS_OP_N, CUBLAS_OP_N, d, S, S, 1.0f, v + b * S * KV * d,
                                    KV * d, d, packed, S, S * S, 0.0f, out + b * S * H * d + j * d, H * d, group * d, KV));
    }
  }
  return Status::Ok();
}

template <typename T>
Status AttentionBackward(const Context& ctx, float* dq, float* dk, float* dv, const T* dout, const T* q, const T* k,
                         const T* v, const float* probs, int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads,
                         int64_t head_dim) {
  TF_RETURN_IF_ERROR(CheckAttention("attention backward", batch, seq, heads, kv_heads, head_dim));
  const int64_t S = seq, H = heads, KV = kv_heads, d = head_dim, group = heads / kv_heads;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  const int64_t block = KV * S * S;  // elements of one (b, j) slice: kv_heads heads of [S, S]
  const int64_t dp_bytes = AlignScratch(block * static_cast<int64_t>(sizeof(float)));
  const int64_t t_bytes = AlignScratch(block * static_cast<int64_t>(sizeof(T)));
  TF_ASSIGN_OR_RETURN(void* scratch, ctx.Scratch(dp_bytes + 2 * t_bytes));
  float* dp = static_cast<float*>(scratch);
  T* d_scores = reinterpret_cast<T*>(static_cast<char*>(scratch) + dp_bytes);
  T* packed = reinterpret_cast<T*>(static_cast<char*>(scratch) + dp_bytes + t_bytes);
  for (int64_t b = 0; b < batch; ++b) {
    const T* q_b = q + b * S * H * d;
    const T* k_b = k + b * S * KV * d;
    const T* v_b = v + b * S * KV * d;
    for (int64_t j = 0; j < group; ++j) {
      const T* dout_bj = dout + b * S * H * d + j * d;
      // dP_h^T (S_k x S_q) = V_g (S_k x d) * dO_h^T (d x S_q).
      TF_RETURN_IF_ERROR(Gemm(ctx, "attention dprobs", CUBLAS_OP_T, CUBLAS_OP_N, S, S, d, 1.0f, v_b, KV * d, d,
                                        dout_bj, H * d, group * d, 0.0f, dp, S, S * S, KV));
      SoftmaxBackwardKernel<<<static_cast<unsigned>(KV * S), kThreads, 0, StreamOf(ctx)>>>(d_scores, packed, dp, probs, b,
                                                                                           j, H, group, S, scale);
      TF_RETURN_IF_ERROR(LaunchStatus("SoftmaxBackwardKernel"));
      if (dv != nullptr) {  // dV_g^T (d x S_k) += dO_h^T (d x S_q) * P_h (S_q x S_k)
        TF_RETURN_IF_ERROR(Gemm(ctx, "attention dv", CUBLAS_OP_N, CUBLAS_OP_T, d, S, S, 1.0f, dout_bj, H * d,
                                          group * d, packed, S, S * S, 1.0f, dv + b * S * KV * d, KV * d, d, KV));
      }
      if (dq != nullptr) {  // dQ_h^T (d x S_q) += K_g^T (d x S_k) * dS_h^T (S_k x S_q)
        TF_RETURN_IF_ERROR(Gemm(ctx, "attention dq", CUBLAS_OP_N, CUBLAS_OP_N, d, S, S, 1.0f, k_b, KV * d, d,
                                          d_scores, S, S * S, 1.0f, dq + b * S * H * d + j * d, H * d, group * d, KV));
      }
      if (dk != nullptr) {  // dK_g^T (d x S_k) += Q_h^T (d x S_q) * dS_h (S_q x S_k)
        TF_RETURN_IF_ERROR(Gemm(ctx, "attention dk", CUBLAS_OP_N, CUBLAS_OP_T, d, S, S, 1.0f, q_b + j * d, H * d,
                                          group * d, d_scores, S, S * S, 1.0f, dk + b * S * KV * d, KV * d, d, KV));
      }
    }
  }
  return Status::Ok();
}

template <typename T>
Status SwiGluForward(const Context& ctx, T* out, const T* gate, const T* up, int64_t n) {
  return LaunchElementwise(ctx, "swiglu forward", "SwiGluForwardKernel", SwiGluForwardKernel<T>, n, out, gate, up, n);
}

template <typename T>
Status SwiGluBackward(const Context& ctx, float* dgate, float* dup, const T* dout, const T* gate, const T* up, int64_t n) {
  return LaunchElementwise(ctx, "swiglu backward", "SwiGluBackwardKernel", SwiGluBackwardKernel<T>, n, dgate, dup, dout,
                           gate, up, n);
}

Status SwiGluBackwardBf16(const Context& ctx, uint16_t* dgate, uint16_t* dup, const uint16_t* dout, const uint16_t* gate,
                          const uint16_t* up, int64_t n) {
  if (dgate == nullptr || dup == nullptr) return InvalidArgument("swiglu backward (bf16): both gradients are written");
  return LaunchElementwise(ctx, "swiglu backward (bf16)", "SwiGluBackwardBf16Kernel", SwiGluBackwardBf16Kernel, n, dgate,
                           dup, dout, gate, up, n);
}

template <typename T>
Status ResidualAdd(const Context& ctx, T* out, const T* a, const T* b, int64_t n) {
  return LaunchElementwise(ctx, "residual add", "ResidualAddKernel", ResidualAddKernel<T>, n, out, a, b, n);
}

template <typename T>
StatusOr<double> CrossEntropyForwardBackward(const Context& ctx, T* dlogits, const T* logits, const int32_t* targets,
                                             int64_t n_rows, int64_t vocab, double grad_scale) {
  TF_RETURN_IF_ERROR(NeedPositive("cross-entropy", {{"rows", n_rows}, {"vocab", vocab}}));
  TF_RETURN_IF_ERROR(NeedRowGrid("cross-entropy", n_rows));
  TF_ASSIGN_OR_RETURN(void* scratch, ctx.Scratch(n_rows * static_cast<int64_t>(sizeof(float)) + 16));
  float* row_loss = static_cast<float*>(scratch);
  int* count = reinterpret_cast<int*>(row_loss + n_rows);
  CountTargetsKernel<<<1, kThreads, 0, StreamOf(ctx)>>>(targets, n_rows, count);
  TF_RETURN_IF_ERROR(LaunchStatus("CountTargetsKernel"));
  CrossEntropyKernel<<<static_cast<unsigned>(n_rows), kThreads, 0, StreamOf(ctx)>>>(
      dlogits, logits, targets, vocab, count, static_cast<float>(grad_scale), row_loss);
  TF_RETURN_IF_ERROR(LaunchStatus("CrossEntropyKernel"));
  std::vector<float> losses(static_cast<size_t>(n_rows));
  int host_count = 0;
  TF_CUDA(cudaMemcpyAsync(losses.data(), row_loss, losses.size() * sizeof(float), cudaMemcpyDeviceToHost, StreamOf(ctx)));
  TF_CUDA(cudaMemcpyAsync(&host_count, count, sizeof(int), cudaMemcpyDeviceToHost, StreamOf(ctx)));
  TF_RETURN_IF_ERROR(ctx.Synchronize());
  double total = 0;
  for (float x : losses) total += x;
  return host_count > 0 ? total / host_count : 0.0;
}

StatusOr<cpu::GradCheck> OverflowCheckAndNorm(const Context& ctx, const float* grad, int64_t n, float grad_scale) {
  TF_RETURN_IF_ERROR(NeedPositive("overflow check", {{"n", n}}));
  const int64_t chunks = (n + kNormChunk - 1) / kNormChunk;
  TF_RETURN_IF_ERROR(NeedRowGrid("overflow check", chunks));
  // Scratch: partial sums, the final sum, then the non-finite flags and the final flag.
  TF_ASSIGN_OR_RETURN(void* scratch, ctx.Scratch((chunks + 1) * static_cast<int64_t>(sizeof(double) + sizeof(int))));
  double* partial = static_cast<double*>(scratch);
  double* sum = partial + chunks;
  int* nonfinite = reinterpret_cast<int*>(sum + 1);
  int* bad = nonfinite + chunks;
  NormPartialKernel<<<static_cast<unsigned>(chunks), kThreads, 0, StreamOf(ctx)>>>(grad, n, grad_scale, partial, nonfinite);
  TF_RETURN_IF_ERROR(LaunchStatus("NormPartialKernel"));
  NormFinalKernel<<<1, kThreads, 0, StreamOf(ctx)>>>(partial, nonfinite, chunks, sum, bad);
  TF_RETURN_IF_ERROR(LaunchStatus("NormFinalKernel"));
  double host_sum = 0;
  int host_bad = 0;
  TF_CUDA(cudaMemcpyAsync(&host_sum, sum, sizeof(double), cudaMemcpyDeviceToHost, StreamOf(ctx)));
  TF_CUDA(cudaMemcpyAsync(&host_bad, bad, sizeof(int), cudaMemcpyDeviceToHost, StreamOf(ctx)));
  TF_RETURN_IF_ERROR(ctx.Synchronize());
  return cpu::GradCheck{host_bad == 0, host_sum};
}

Status Fp32ToBf16(const Context& ctx, uint16_t* dst, const float* src, int64_t n) {
  return LaunchElementwise(ctx, "fp32 to bf16", "ToBf16Kernel", ToBf16Kernel, n, dst, src, n);
}

Status Bf16ToFp32(const Context& ctx, float* dst, const uint16_t* src, int64_t n) {
  return LaunchElementwise(ctx, "bf16 to fp32", "ToFp32Kernel", ToFp32Kernel, n, dst, src, n);
}

template <typename G>
Status AdamWOf(const Context& ctx, float* param, float* m, float* v, const G* grad, uint16_t* bf16_param, int64_t n, int64_t step,
               float grad_scale, const AdamWConfig& config) {
  if (step < 1) return InvalidArgument("AdamW: step " + std::to_string(step) + " must be >= 1");
  return LaunchElementwise(ctx, "AdamW", "AdamWKernel", AdamWKernel<G>, n, param, m, v, grad, bf16_param, n, grad_scale,
                           AdamWStepScalars(step, config));
}

Status AdamW(const Context& ctx, float* param, float* m, float* v, const float* grad, uint16_t* bf16_param, int64_t n, int64_t step,
             float grad_scale, const AdamWConfig& config) {
  return AdamWOf(ctx, param, m, v, grad, bf16_param, n, step, grad_scale, config);
}

Status AdamW(const Context& ctx, float* param, float* m, float* v, const uint16_t* grad, uint16_t* bf16_param, int64_t n, int64_t step,
             float grad_scale, const AdamWConfig& config) {
  return AdamWOf(ctx, param, m, v, grad, bf16_param, n, step, grad_scale, config);
}

Status RoundToBf16(const Context& ctx, float* x, int64_t n) { return RoundToBf16(x, n, ctx.stream()); }

Status RoundToBf16(float* x, int64_t n, void* stream) {
  TF_RETURN_IF_ERROR(NeedPositive("round to bf16", {{"n", n}}));
  RoundToBf16Kernel<<<GridFor(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, n);
  return LaunchStatus("RoundToBf16Kernel");
}

Status SumRanksInOrder(void* out, const void* parts, int64_t count, int ranks, bool bf16, void* stream) {
  TF_RETURN_IF_ERROR(NeedPositive("rank-order sum", {{"count", count}, {"ranks", ranks}}));
  const auto s = static_cast<cudaStream_t>(stream);
  if (bf16) {
    SumRanksKernel<uint16_t><<<GridFor(count), kThreads, 0, s>>>(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(parts), count, ranks);
  } else {
    SumRanksKernel<float><<<GridFor(count), kThreads, 0, s>>>(static_cast<float*>(out), static_cast<const float*>(parts), count, ranks);
  }
  return LaunchStatus("SumRanksKernel");
}

#define TF_INSTANTIATE(T)                                                                                               \
  template Status EmbeddingForward<T>(const Context&, T*, const int32_t*, const T*, int64_t, int64_t);                 \
  template Status EmbeddingBackward<T>(const Context&, float*, const int32_t*, const T*, int64_t, int64_t);            \
  template Status RmsNormForward<T>(const Context&, T*, float*, const T*, const T*, int64_t, int64_t, double);         \
  template Status RmsNormBackward<T>(const Context&, float*, float*, const T*, const T*, const T*, const float*,       \
                                     int64_t, int64_t);                                                                \
  template Status LinearForward<T>(const Context&, T*, const T*, const T*, int64_t, int64_t, int64_t);                 \
  template Status LinearBackward<T>(const Context&, float*, float*, const T*, const T*, const T*, int64_t, int64_t,    \
                                    int64_t, GradMode, GradMode);                                                      \
  template Status RopeForward<T>(const Context&, T*, const float*, const float*, int64_t, int64_t, int64_t, int64_t);  \
  template Status AttentionForward<T>(const Context&, T*, float*, const T*, const T*, const T*, int64_t, int64_t,      \
                                      int64_t, int64_t, int64_t);                                                      \
  template Status AttentionBackward<T>(const Context&, float*, float*, float*, const T*, const T*, const T*, const T*, \
                                       const float*, int64_t, int64_t, int64_t, int64_t, int64_t);                     \
  template Status SwiGluForward<T>(const Context&, T*, const T*, const T*, int64_t);                                   \
  template Status SwiGluBackward<T>(const Context&, float*, float*, const T*, const T*, const T*, int64_t);            \
  template Status ResidualAdd<T>(const Context&, T*, const T*, const T*, int64_t);                                     \
  template StatusOr<double> CrossEntropyForwardBackward<T>(const Context&, T*, const T*, const int32_t*, int64_t,      \
                                                           int64_t, double);

TF_INSTANTIATE(float)
TF_INSTANTIATE(uint16_t)
#undef TF_INSTANTIATE

}  // namespace tierflow::real::cuda
