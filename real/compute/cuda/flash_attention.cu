// Fused causal grouped-query attention in bf16 (cuda_ops.h FlashAttentionForward/Backward):
// FlashAttention-2's tiling on the tensor cores (mma.sync m16n8k16, bf16 operands, fp32
// accumulators), the scores never leaving the multiprocessor.
//
// Forward: one block of 4 warps per 64 query rows of one head; each warp owns 16 rows. The block
// walks the key tiles up to the diagonal (64 keys each, two shared-memory stages filled by
// cp.async), and per tile: S = Q K^T in registers, the online softmax (running row max and sum,
// base 2), O += P V with P taken straight from the accumulators. It saves each row's log-sum-exp
// (base 2, of the scores times scale * log2 e) for the backward.
//
// Backward, without atomics so that it is bit-reproducible:
//  - delta[row] = sum_c dO * O, one warp per (row, head);
//  - dK and dV: one block per 64 keys and one query head, which walks the query tiles from the
//    diagonal on, recomputing P^T = exp2(K Q^T - lse) and dP^T = V dO^T, accumulating dV += P^T dO
//    and dK += dS^T Q in registers, and writes that head's share to a scratch [batch, heads,
//    seq, D]; then one thread per element of dk and dv adds its group's query heads' shares in
//    head order (a block per kv head instead would leave the GPU idle: 8 kv heads of 16 tiles
//    are 128 blocks, the longest walking 4 heads x 16 tiles);
//  - dQ: one block per 64 query rows of one head, which walks the key tiles up to the diagonal,
//    recomputing P and dP and accumulating dQ += dS K.
// Every output element is written by one thread, once, after a fixed order of additions; the
// price is the scores and dP computed twice (7 matrix products per tile pair against FA-2's 5).
//
// Shared-memory tiles are [rows, D] bf16 with each row's 16-byte chunks XOR-swizzled by the row
// (Swz), so the 8 rows that one ldmatrix reads fall in different banks.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "tierflow/real/cuda_ops.h"
#include "tierflow/real/cuda_status.h"
#include "op_checks.h"

namespace tierflow::real::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = 16 * kWarps;  // query rows of a forward or dQ block; keys of a dK/dV block
constexpr int kKeys = 64;           // keys per tile in the forward and the dQ pass

// --- PTX wrappers -------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; zero-filled when !valid (src then unread).
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SmemAddr(smem)), "l"(gmem),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void Ldsm4(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(smem)));
}
__device__ __forceinline__ void Ldsm4T(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(smem)));
}

// c (16x8 fp32) += a (16x16 bf16, row-major fragment) * b (16x8 bf16, column fragment).
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as a bf16 pair (round to nearest even), the first in the low half.
__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&p);
}

// The A fragment (16 rows x 16 k) made of two accumulator tiles (16 x 8 each, columns k 0-7 and
// 8-15): the accumulator layout of m16n8k16 is the A layout of the next product.
__device__ __forceinline__ void AccToA(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = PackBf16(lo[0], lo[1]);
  a[1] = PackBf16(lo[2], lo[3]);
  a[2] = PackBf16(hi[0], hi[1]);
  a[3] = PackBf16(hi[2], hi[3]);
}

// --- shared-memory tiles ------------------------------------------------------------------------

// Element offset of 16-byte chunk c of row r in a [rows, D] tile.
template <int D>
__device__ __forceinline__ int Swz(int r, int c) {
  constexpr int kChunks = D / 8;
  constexpr int kMask = (kChunks < 8 ? kChunks : 8) - 1;
  return r * D + ((c ^ (r & kMask)) << 3);
}

// Rows [0, ROWS) of a tile whose row 0 is at g (row stride ld elements), rows at or past `valid`
// zero-filled.
template <int D, int ROWS>
__device__ __forceinline__ void LoadTile(uint16_t* smem, const uint16_t* g, int64_t ld, int valid) {
  constexpr int kChunks = D / 8;
  for (int i = threadIdx.x; i < ROWS * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool ok = r < valid;
    CpAsync16(smem + Swz<D>(r, c), g + (ok ? r : 0) * ld + c * 8, ok);
  }
}

// Key tiles walked in two shared-memory stages (K and V, kKeys rows each): starts tile j + 1's
// copies into the other stage, then waits for tile j's (every thread's, then a barrier).
template <int D>
__device__ __forceinline__ void AwaitKeyTile(int j, int tiles, uint16_t* s_k, uint16_t* s_v, const uint16_t* kb,
                                             const uint16_t* vb, int64_t ldkv, int seq) {
  if (j + 1 < tiles) {
    const int next = (j + 1) * kKeys, other = ((j & 1) ^ 1) * kKeys * D;
    LoadTile<D, kKeys>(s_k + other, kb + next * ldkv, ldkv, seq - next);
    LoadTile<D, kKeys>(s_v + other, vb + next * ldkv, ldkv, seq - next);
    CpAsyncCommit();
    CpAsyncWait<1>();
  } else {
    CpAsyncWait<0>();
  }
  __syncthreads();
}

// A fragment of rows [r0, r0+16) and k columns [16 kk, 16 kk + 16) of a row-major tile (Q, dO,
// K or V as the left operand).
template <int D>
__device__ __forceinline__ void LoadA(uint32_t (&a)[4], const uint16_t* tile, int r0, int kk, int lane) {
  Ldsm4(a, tile + Swz<D>(r0 + (lane & 15), kk * 2 + (lane >> 4)));
}

// B fragments of two 8-wide n tiles (rows n0..n0+15 of the tile are the n index) over k columns
// [16 kk, 16 kk + 16): b[0], b[1] for rows n0..n0+7, b[2], b[3] for n0+8..n0+15. For S = Q K^T
// (K's rows are the keys) and the like.
template <int D>
__device__ __forceinline__ void LoadBRows(uint32_t (&b)[4], const uint16_t* tile, int n0, int kk, int lane) {
  Ldsm4(b, tile + Swz<D>(n0 + (lane & 7) + ((lane >> 4) << 3), kk * 2 + ((lane >> 3) & 1)));
}

// B fragments where the tile's rows are the k index and its columns the n index (V in P V, K in
// dS K, dO in P^T dO): k rows [k0, k0+16), n columns [16 dd, 16 dd + 16); b[0], b[1] for columns
// 16 dd..+7, b[2], b[3] for +8..+15.
template <int D>
__device__ __forceinline__ void LoadBCols(uint32_t (&b)[4], const uint16_t* tile, int k0, int dd, int lane) {
  Ldsm4T(b, tile + Swz<D>(k0 + (lane & 7) + ((lane >> 3) & 1) * 8, dd * 2 + (lane >> 4)));
}

// Row max and sum over the four lanes of a quad (the lanes that share an accumulator row).
__device__ __forceinline__ float QuadMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float QuadSum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// acc (16 x N) += a (16 x D, fragments in registers) times the first N rows of `tile`
// transposed: S = Q K^T, dP = dO V^T.
template <int D, int N>
__device__ __forceinline__ void FragsTimesRowsT(float (&acc)[N / 8][4], const uint32_t (&a)[D / 16][4],
                                                const uint16_t* tile, int lane) {
#pragma unroll
  for (int np = 0; np < N / 16; ++np) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t bf[4];
      LoadBRows<D>(bf, tile, np * 16, kk, lane);
      Mma(acc[2 * np], a[kk], bf[0], bf[1]);
      Mma(acc[2 * np + 1], a[kk], bf[2], bf[3]);
    }
  }
}

// acc (16 x D) += p (16 x K, accumulator tiles, rounded to bf16) times the first K rows of
// `tile`, 16 of them per product: O += P V, dV += P^T dO, dK += dS^T Q, dQ += dS K.
template <int D, int K>
__device__ __forceinline__ void AccTimesRows(float (&acc)[D / 8][4], const float (&p)[K / 8][4], const uint16_t* tile,
                                             int lane) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    uint32_t pa[4];
    AccToA(pa, p[2 * kk], p[2 * kk + 1]);
#pragma unroll
    for (int dd = 0; dd < D / 16; ++dd) {
      uint32_t bf[4];
      LoadBCols<D>(bf, tile, kk * 16, dd, lane);
      Mma(acc[2 * dd], pa, bf[0], bf[1]);
      Mma(acc[2 * dd + 1], pa, bf[2], bf[3]);
    }
  }
}

struct Dims {
  int seq, heads, kv_heads;
  float scale_log2;  // softmax scale * log2 e
  float scale;       // softmax scale, for dq and dk
};

// --- forward ------------------------------------------------------------------------------------

template <int D>
__global__ void __launch_bounds__(kThreads) FlashForwardKernel(uint16_t* out, float* lse, const uint16_t* q,
                                                              const uint16_t* k, const uint16_t* v, Dims dims) {
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* s_q = smem;                  // [kRows, D]
  uint16_t* s_k = s_q + kRows * D;       // 2 stages of [kKeys, D]
  uint16_t* s_v = s_k + 2 * kKeys * D;   // 2 stages of [kKeys, D]
  const int seq = dims.seq, heads = dims.heads;
  const int bh = blockIdx.x, b = bh / heads, h = bh % heads, g = h / (heads / dims.kv_heads);
  const int m0 = (gridDim.y - 1 - blockIdx.y) * kRows;  // the longest rows first
  const int64_t ldq = static_cast<int64_t>(heads) * D, ldkv = static_cast<int64_t>(dims.kv_heads) * D;
  const uint16_t* qb = q + static_cast<int64_t>(b) * seq * ldq + h * D;
  const uint16_t* kb = k + static_cast<int64_t>(b) * seq * ldkv + g * D;
  const uint16_t* vb = v + static_cast<int64_t>(b) * seq * ldkv + g * D;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, quad_row = lane >> 2, quad_col = (lane & 3) * 2;
  const int last_key = min(seq, m0 + kRows) - 1;
  const int tiles = last_key / kKeys + 1;

  LoadTile<D, kRows>(s_q, qb + m0 * ldq, ldq, seq - m0);
  LoadTile<D, kKeys>(s_k, kb, ldkv, seq);
  LoadTile<D, kKeys>(s_v, vb, ldkv, seq);
  CpAsyncCommit();

  uint32_t qf[D / 16][4];
  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int row[2] = {m0 + warp * 16 + quad_row, m0 + warp * 16 + quad_row + 8};

  for (int j = 0; j < tiles; ++j) {
    const int stage = j & 1, n0 = j * kKeys;
    AwaitKeyTile<D>(j, tiles, s_k, s_v, kb, vb, ldkv, seq);
    if (j == 0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) LoadA<D>(qf[kk], s_q, warp * 16, kk, lane);
    }
    const uint16_t* tk = s_k + stage * kKeys * D;
    const uint16_t* tv = s_v + stage * kKeys * D;
    float s[kKeys / 8][4] = {};
    FragsTimesRowsT<D, kKeys>(s, qf, tk, lane);
    // Scale into base 2 and mask: keys past the query (causal) or past the sequence.
    const bool edge = n0 + kKeys - 1 > m0 + warp * 16 || n0 + kKeys > seq;
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = n0 + nt * 8 + quad_col + (e & 1);
        float x = s[nt][e] * dims.scale_log2;
        if (edge && (col > row[e >> 1] || col >= seq)) x = -INFINITY;
        s[nt][e] = x;
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = m[r];
#pragma unroll
      for (int nt = 0; nt < kKeys / 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
      mx = QuadMax(mx);
      const float base = mx == -INFINITY ? 0.0f : mx;
      const float alpha = exp2f(m[r] - base);
      m[r] = mx;
      float sum = 0;
#pragma unroll
      for (int nt = 0; nt < kKeys / 8; ++nt) {
        s[nt][2 * r] = exp2f(s[nt][2 * r] - base);
        s[nt][2 * r + 1] = exp2f(s[nt][2 * r + 1] - base);
        sum += s[nt][2 * r] + s[nt][2 * r + 1];
      }
      l[r] = l[r] * alpha + sum;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        o[dt][2 * r] *= alpha;
        o[dt][2 * r + 1] *= alpha;
      }
    }
    AccTimesRows<D, kKeys>(o, s, tv, lane);  // O += P V, P from the accumulators
    __syncthreads();  // the stage is refilled two tiles on
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float sum = QuadSum(l[r]);
    if (row[r] >= seq) continue;
    const float inv = 1.0f / sum;
    uint16_t* orow = out + (static_cast<int64_t>(b) * seq + row[r]) * ldq + h * D;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      *reinterpret_cast<uint32_t*>(orow + dt * 8 + quad_col) = PackBf16(o[dt][2 * r] * inv, o[dt][2 * r + 1] * inv);
    }
    if ((lane & 3) == 0) lse[(static_cast<int64_t>(b) * heads + h) * seq + row[r]] = m[r] + log2f(sum);
  }
}

// --- backward -----------------------------------------------------------------------------------

// delta[(b*heads + h)*seq + t] = sum_c dout * out over head h's D channels; one warp per (row, head).
template <int D>
__global__ void FlashDeltaKernel(float* delta, const uint16_t* dout, const uint16_t* out, int64_t rows, int seq,
                                 int heads) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (item >= rows * heads) return;
  const int lane = threadIdx.x & 31;
  const int64_t n = item / heads;
  const int h = static_cast<int>(item % heads);
  const uint16_t* go = dout + n * heads * D + h * D;
  const uint16_t* oo = out + n * heads * D + h * D;
  float acc = 0;
  for (int c = lane; c < D; c += 32) {
    acc += __bfloat162float(__ushort_as_bfloat16(go[c])) * __bfloat162float(__ushort_as_bfloat16(oo[c]));
  }
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) {
    const int64_t b = n / seq, t = n % seq;
    delta[(b * heads + h) * seq + t] = acc;
  }
}

// Query tiles of the dK/dV pass: 64 rows, 32 for D = 128 (its accumulators are twice the size).
template <int D>
constexpr int kBwdQueries = D >= 128 ? 32 : 64;

// dk_part and dv_part [batch, heads, seq, D]: query head h's share of its kv head's gradients,
// the softmax scale applied to dk's; rows past the sequence are not written.
template <int D>
__global__ void __launch_bounds__(kThreads) FlashBackwardKvKernel(float* dk_part, float* dv_part, const uint16_t* dout,
                                                                 const uint16_t* q, const uint16_t* k,
                                                                 const uint16_t* v, const float* lse,
                                                                 const float* delta, Dims dims) {
  constexpr int BQ = kBwdQueries<D>;
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* s_k = smem;                  // [kRows, D]
  uint16_t* s_v = s_k + kRows * D;       // [kRows, D]
  uint16_t* s_q = s_v + kRows * D;       // 2 stages of [BQ, D]
  uint16_t* s_do = s_q + 2 * BQ * D;     // 2 stages of [BQ, D]
  float* s_lse = reinterpret_cast<float*>(s_do + 2 * BQ * D);  // 2 stages of [BQ]
  float* s_delta = s_lse + 2 * BQ;                             // 2 stages of [BQ]
  const int seq = dims.seq, heads = dims.heads;
  const int bh = blockIdx.x, b = bh / heads, h = bh % heads, g = h / (heads / dims.kv_heads);
  const int n0 = (gridDim.y - 1 - blockIdx.y) * kRows;
  const int64_t ldq = static_cast<int64_t>(heads) * D, ldkv = static_cast<int64_t>(dims.kv_heads) * D;
  const uint16_t* kb = k + static_cast<int64_t>(b) * seq * ldkv + g * D;
  const uint16_t* vb = v + static_cast<int64_t>(b) * seq * ldkv + g * D;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, quad_row = lane >> 2, quad_col = (lane & 3) * 2;
  const int first_tile = n0 / BQ, steps = (seq + BQ - 1) / BQ - first_tile;

  // Step s: query tile first_tile + s.
  auto load_step = [&](int s, int stage) {
    const int t0 = (first_tile + s) * BQ;
    const int64_t row0 = static_cast<int64_t>(b) * seq + t0;
    LoadTile<D, BQ>(s_q + stage * BQ * D, q + row0 * ldq + h * D, ldq, seq - t0);
    LoadTile<D, BQ>(s_do + stage * BQ * D, dout + row0 * ldq + h * D, ldq, seq - t0);
    for (int i = threadIdx.x; i < BQ; i += kThreads) {
      const bool ok = t0 + i < seq;
      const int64_t at = (static_cast<int64_t>(b) * heads + h) * seq + t0 + i;
      s_lse[stage * BQ + i] = ok ? lse[at] : INFINITY;  // a row past the sequence: P = 0
      s_delta[stage * BQ + i] = ok ? delta[at] : 0.0f;
    }
  };

  LoadTile<D, kRows>(s_k, kb + n0 * ldkv, ldkv, seq - n0);
  LoadTile<D, kRows>(s_v, vb + n0 * ldkv, ldkv, seq - n0);
  load_step(0, 0);
  CpAsyncCommit();

  float dk_acc[D / 8][4] = {}, dv_acc[D / 8][4] = {};
  const int key[2] = {n0 + warp * 16 + quad_row, n0 + warp * 16 + quad_row + 8};
  for (int s = 0; s < steps; ++s) {
    const int stage = s & 1, t0 = (first_tile + s) * BQ;
    if (s + 1 < steps) {
      load_step(s + 1, stage ^ 1);
      CpAsyncCommit();
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    const uint16_t* tq = s_q + stage * BQ * D;
    const uint16_t* tdo = s_do + stage * BQ * D;
    const float* tl = s_lse + stage * BQ;
    const float* td = s_delta + stage * BQ;
    // S^T = K Q^T and dP^T = V dO^T: this warp's 16 keys against the tile's BQ queries.
    float st[BQ / 8][4] = {}, dpt[BQ / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t ka[4], va[4];
      LoadA<D>(ka, s_k, warp * 16, kk, lane);
      LoadA<D>(va, s_v, warp * 16, kk, lane);
#pragma unroll
      for (int np = 0; np < BQ / 16; ++np) {
        uint32_t bf[4];
        LoadBRows<D>(bf, tq, np * 16, kk, lane);
        Mma(st[2 * np], ka, bf[0], bf[1]);
        Mma(st[2 * np + 1], ka, bf[2], bf[3]);
        LoadBRows<D>(bf, tdo, np * 16, kk, lane);
        Mma(dpt[2 * np], va, bf[0], bf[1]);
        Mma(dpt[2 * np + 1], va, bf[2], bf[3]);
      }
    }
    // P^T and dS^T = P^T (dP^T - delta), in place; a query before the key (causal) gives 0.
    const bool edge = t0 < n0 + warp * 16 + 15;
#pragma unroll
    for (int nt = 0; nt < BQ / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = nt * 8 + quad_col + (e & 1);
        float p = exp2f(st[nt][e] * dims.scale_log2 - tl[qi]);
        if (edge && t0 + qi < key[e >> 1]) p = 0.0f;
        st[nt][e] = p;
        dpt[nt][e] = p * (dpt[nt][e] - td[qi]);
      }
    }
    AccTimesRows<D, BQ>(dv_acc, st, tdo, lane);  // dV += P^T dO
    AccTimesRows<D, BQ>(dk_acc, dpt, tq, lane);  // dK += dS^T Q
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (key[r] >= seq) continue;
    const int64_t at = ((static_cast<int64_t>(b) * heads + h) * seq + key[r]) * D;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      const int c = dt * 8 + quad_col;
      *reinterpret_cast<float2*>(dk_part + at + c) = make_float2(dk_acc[dt][2 * r] * dims.scale, dk_acc[dt][2 * r + 1] * dims.scale);
      *reinterpret_cast<float2*>(dv_part + at + c) = make_float2(dv_acc[dt][2 * r], dv_acc[dt][2 * r + 1]);
    }
  }
}

// dk, dv [rows, kv_heads*D] += the shares of each kv head's query heads, added in head order.
template <int D>
__global__ void FlashGroupSumKernel(float* dk, float* dv, const float* dk_part, const float* dv_part, int64_t rows,
                                    int seq, int heads, int kv_heads) {
  const int group = heads / kv_heads;
  const int64_t n = rows * kv_heads * D;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>(i % D);
    const int g = static_cast<int>((i / D) % kv_heads);
    const int64_t row = i / (static_cast<int64_t>(D) * kv_heads), b = row / seq, t = row % seq;
    float sk = 0, sv = 0;
    for (int j = 0; j < group; ++j) {
      const int64_t at = ((b * heads + g * group + j) * seq + t) * D + c;
      sk += dk_part[at];
      sv += dv_part[at];
    }
    if (dk != nullptr) dk[i] += sk;
    if (dv != nullptr) dv[i] += sv;
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads) FlashBackwardQKernel(float* dq, const uint16_t* dout, const uint16_t* q,
                                                                const uint16_t* k, const uint16_t* v, const float* lse,
                                                                const float* delta, Dims dims) {
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* s_q = smem;                 // [kRows, D]
  uint16_t* s_do = s_q + kRows * D;     // [kRows, D]
  uint16_t* s_k = s_do + kRows * D;     // 2 stages of [kKeys, D]
  uint16_t* s_v = s_k + 2 * kKeys * D;  // 2 stages of [kKeys, D]
  const int seq = dims.seq, heads = dims.heads;
  const int bh = blockIdx.x, b = bh / heads, h = bh % heads, g = h / (heads / dims.kv_heads);
  const int m0 = (gridDim.y - 1 - blockIdx.y) * kRows;
  const int64_t ldq = static_cast<int64_t>(heads) * D, ldkv = static_cast<int64_t>(dims.kv_heads) * D;
  const int64_t row0 = static_cast<int64_t>(b) * seq + m0;
  const uint16_t* kb = k + static_cast<int64_t>(b) * seq * ldkv + g * D;
  const uint16_t* vb = v + static_cast<int64_t>(b) * seq * ldkv + g * D;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, quad_row = lane >> 2, quad_col = (lane & 3) * 2;
  const int tiles = (min(seq, m0 + kRows) - 1) / kKeys + 1;

  LoadTile<D, kRows>(s_q, q + row0 * ldq + h * D, ldq, seq - m0);
  LoadTile<D, kRows>(s_do, dout + row0 * ldq + h * D, ldq, seq - m0);
  LoadTile<D, kKeys>(s_k, kb, ldkv, seq);
  LoadTile<D, kKeys>(s_v, vb, ldkv, seq);
  CpAsyncCommit();

  const int row[2] = {m0 + warp * 16 + quad_row, m0 + warp * 16 + quad_row + 8};
  float row_lse[2], row_delta[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t at = (static_cast<int64_t>(b) * heads + h) * seq + row[r];
    row_lse[r] = row[r] < seq ? lse[at] : INFINITY;
    row_delta[r] = row[r] < seq ? delta[at] : 0.0f;
  }
  uint32_t qf[D / 16][4], dof[D / 16][4];
  float dq_acc[D / 8][4] = {};
  for (int j = 0; j < tiles; ++j) {
    const int stage = j & 1, n0 = j * kKeys;
    AwaitKeyTile<D>(j, tiles, s_k, s_v, kb, vb, ldkv, seq);
    if (j == 0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        LoadA<D>(qf[kk], s_q, warp * 16, kk, lane);
        LoadA<D>(dof[kk], s_do, warp * 16, kk, lane);
      }
    }
    const uint16_t* tk = s_k + stage * kKeys * D;
    const uint16_t* tv = s_v + stage * kKeys * D;
    float s[kKeys / 8][4] = {}, dp[kKeys / 8][4] = {};
    FragsTimesRowsT<D, kKeys>(s, qf, tk, lane);
    FragsTimesRowsT<D, kKeys>(dp, dof, tv, lane);
    const bool edge = n0 + kKeys - 1 > m0 + warp * 16 || n0 + kKeys > seq;
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = n0 + nt * 8 + quad_col + (e & 1), r = e >> 1;
        float p = exp2f(s[nt][e] * dims.scale_log2 - row_lse[r]);
        if (edge && (col > row[r] || col >= seq)) p = 0.0f;
        dp[nt][e] = p * (dp[nt][e] - row_delta[r]);
      }
    }
    AccTimesRows<D, kKeys>(dq_acc, dp, tk, lane);  // dQ += dS K
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row[r] >= seq) continue;
    float* drow = dq + (static_cast<int64_t>(b) * seq + row[r]) * ldq + h * D;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      drow[dt * 8 + quad_col] += dq_acc[dt][2 * r] * dims.scale;
      drow[dt * 8 + quad_col + 1] += dq_acc[dt][2 * r + 1] * dims.scale;
    }
  }
}

// --- launches -----------------------------------------------------------------------------------

Status CheckFlash(const char* op, int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim) {
  TF_RETURN_IF_ERROR(
      internal::NeedPositive(op, {{"batch", batch}, {"seq", seq}, {"heads", heads}, {"kv_heads", kv_heads}}));
  TF_RETURN_IF_ERROR(internal::NeedHeadGroups(op, heads, kv_heads));
  if (!FlashAttentionTakesHeadDim(head_dim)) {
    return InvalidArgument(std::string(op) + ": head_dim = " + std::to_string(head_dim) +
                           " (the fused kernels take 16, 32, 64 or 128)");
  }
  if (batch * heads > 0x7fffffff || seq > (int64_t{65535} * kRows) || batch * seq > 0x7fffffff) {
    return InvalidArgument(std::string(op) + ": batch " + std::to_string(batch) + " x heads " + std::to_string(heads) +
                           " x seq " + std::to_string(seq) + " is past the kernels' grid");
  }
  return Status::Ok();
}

// A kernel that takes more than 48 KB of dynamic shared memory must say so first.
template <typename Kernel>
Status AllowSmem(Kernel kernel, int bytes) {
  if (bytes <= 48 * 1024) return Status::Ok();
  TF_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  return Status::Ok();
}

Dims MakeDims(int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  return Dims{static_cast<int>(seq), static_cast<int>(heads), static_cast<int>(kv_heads),
              static_cast<float>(scale * 1.4426950408889634), static_cast<float>(scale)};
}

// 64-row blocks of 4 warps: 128-row blocks of 8 (one block per multiprocessor at 136 registers a
// thread, against three) ran the forward 12 % slower at sequence 4096 on an H200 (docs/gpu-results.md).
template <int D>
Status Forward(const Context& ctx, uint16_t* out, float* lse, const uint16_t* q, const uint16_t* k, const uint16_t* v,
               int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads) {
  const int smem = (kRows + 4 * kKeys) * D * 2;
  TF_RETURN_IF_ERROR(AllowSmem(FlashForwardKernel<D>, smem));
  const dim3 grid(static_cast<unsigned>(batch * heads), static_cast<unsigned>((seq + kRows - 1) / kRows));
  FlashForwardKernel<D><<<grid, kThreads, smem, static_cast<cudaStream_t>(ctx.stream())>>>(
      out, lse, q, k, v, MakeDims(seq, heads, kv_heads, D));
  return internal::LaunchStatus("FlashForwardKernel");
}

template <int D>
Status Backward(const Context& ctx, float* dq, float* dk, float* dv, const uint16_t* dout, const uint16_t* q,
                const uint16_t* k, const uint16_t* v, const uint16_t* out, const float* lse, int64_t batch, int64_t seq,
                int64_t heads, int64_t kv_heads) {
  const cudaStream_t stream = static_cast<cudaStream_t>(ctx.stream());
  const Dims dims = MakeDims(seq, heads, kv_heads, D);
  // Scratch: delta [batch, heads, seq], then dK's and dV's per-query-head shares [batch, heads, seq,
  // D] from the next 256-byte boundary (their float2 stores need 8-byte alignment, which an odd
  // batch * heads * seq would not give).
  const int64_t rows_of_heads = batch * heads * seq, delta_floats = internal::AlignScratch(rows_of_heads * 4) / 4;
  const bool kv = dk != nullptr || dv != nullptr;
  TF_ASSIGN_OR_RETURN(void* scratch, ctx.Scratch((delta_floats + (kv ? 2 * rows_of_heads * D : 0)) *
                                                 static_cast<int64_t>(sizeof(float))));
  float* delta = static_cast<float*>(scratch);
  float* dk_part = delta + delta_floats;
  float* dv_part = dk_part + rows_of_heads * D;
  const int64_t items = batch * seq * heads;
  FlashDeltaKernel<D><<<static_cast<unsigned>((items + 7) / 8), 256, 0, stream>>>(delta, dout, out, batch * seq,
                                                                                 static_cast<int>(seq),
                                                                                 static_cast<int>(heads));
  TF_RETURN_IF_ERROR(internal::LaunchStatus("FlashDeltaKernel"));
  const unsigned row_tiles = static_cast<unsigned>((seq + kRows - 1) / kRows);
  if (kv) {
    constexpr int BQ = kBwdQueries<D>;
    const int smem = (2 * kRows + 4 * BQ) * D * 2 + 4 * BQ * 4;
    TF_RETURN_IF_ERROR(AllowSmem(FlashBackwardKvKernel<D>, smem));
    FlashBackwardKvKernel<D><<<dim3(static_cast<unsigned>(batch * heads), row_tiles), kThreads, smem, stream>>>(
        dk_part, dv_part, dout, q, k, v, lse, delta, dims);
    TF_RETURN_IF_ERROR(internal::LaunchStatus("FlashBackwardKvKernel"));
    const int64_t n = batch * seq * kv_heads * D;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, int64_t{1} << 20));
    FlashGroupSumKernel<D><<<blocks, 256, 0, stream>>>(dk, dv, dk_part, dv_part, batch * seq, static_cast<int>(seq),
                                                      static_cast<int>(heads), static_cast<int>(kv_heads));
    TF_RETURN_IF_ERROR(internal::LaunchStatus("FlashGroupSumKernel"));
  }
  if (dq != nullptr) {
    const int smem = (2 * kRows + 4 * kKeys) * D * 2;
    TF_RETURN_IF_ERROR(AllowSmem(FlashBackwardQKernel<D>, smem));
    FlashBackwardQKernel<D><<<dim3(static_cast<unsigned>(batch * heads), row_tiles), kThreads, smem, stream>>>(
        dq, dout, q, k, v, lse, delta, dims);
    TF_RETURN_IF_ERROR(internal::LaunchStatus("FlashBackwardQKernel"));
  }
  return Status::Ok();
}

}  // namespace

Status FlashAttentionForward(const Context& ctx, uint16_t* out, float* lse, const uint16_t* q, const uint16_t* k,
                             const uint16_t* v, int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads,
                             int64_t head_dim) {
  TF_RETURN_IF_ERROR(CheckFlash("flash attention forward", batch, seq, heads, kv_heads, head_dim));
  switch (head_dim) {
    case 16: return Forward<16>(ctx, out, lse, q, k, v, batch, seq, heads, kv_heads);
    case 32: return Forward<32>(ctx, out, lse, q, k, v, batch, seq, heads, kv_heads);
    case 64: return Forward<64>(ctx, out, lse, q, k, v, batch, seq, heads, kv_heads);
    default: return Forward<128>(ctx, out, lse, q, k, v, batch, seq, heads, kv_heads);
  }
}

Status FlashAttentionBackward(const Context& ctx, float* dq, float* dk, float* dv, const uint16_t* dout,
                              const uint16_t* q, const uint16_t* k, const uint16_t* v, const uint16_t* out,
                              const float* lse, int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads,
                              int64_t head_dim) {
  TF_RETURN_IF_ERROR(CheckFlash("flash attention backward", batch, seq, heads, kv_heads, head_dim));
  switch (head_dim) {
    case 16: return Backward<16>(ctx, dq, dk, dv, dout, q, k, v, out, lse, batch, seq, heads, kv_heads);
    case 32: return Backward<32>(ctx, dq, dk, dv, dout, q, k, v, out, lse, batch, seq, heads, kv_heads);
    case 64: return Backward<64>(ctx, dq, dk, dv, dout, q, k, v, out, lse, batch, seq, heads, kv_heads);
    default: return Backward<128>(ctx, dq, dk, dv, dout, q, k, v, out, lse, batch, seq, heads, kv_heads);
  }
}

}  // namespace tierflow::real::cuda
