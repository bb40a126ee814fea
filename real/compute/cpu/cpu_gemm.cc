// Gemm (cpu_gemm.h): BLIS's loop structure around one register-blocked kernel.
//
//   for each tile of C (tiles spread over the threads)
//     for each 256-deep slice of p
//       pack the tile's rows of A into 6-row panels and its columns of B into 16-column panels
//       (zero past the tile's edge: the kernel always runs whole, its extra rows and columns
//       are thrown away)
//       for each B panel, for each A panel: the kernel on a 6 x 16 block of C
//
// The kernel loads its block of C (or zeros on the first slice without accumulate), adds
// fma(a, b) for each p of the slice in order, and stores it back: so every element of C is the
// same sequence of fused multiply-adds however the tiles, slices and threads fall.
#include "tierflow/real/cpu_gemm.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TF_GEMM_X86 1
#endif

namespace tierflow::real::cpu {
namespace {

constexpr int kMr = 6;         // rows of C a kernel call keeps in registers
constexpr int kNr = 16;        // columns (two AVX registers of floats)
constexpr int64_t kKc = 256;   // depth of one slice: a B panel of 16 KiB stays in L1
constexpr int64_t kMaxTileM = 144;  // A's packed tile, 144 x 256 floats (144 KiB), stays in L2
constexpr int64_t kMaxTileN = 256;  // B's packed tile, 256 x 256 floats (256 KiB), stays in L2

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A kernel: C block (ldc) of mr x nr valid elements (mr <= kMr, nr <= kNr) from kc steps of the
// packed panels a (kMr values per step) and b (kNr values per step).
template <typename T>
using Kernel = void (*)(int64_t kc, const T* a, const T* b, T* c, int64_t ldc, int mr, int nr, bool load_c);

// The portable kernel: the contract's arithmetic written out, std::fma per step.
template <typename T>
inline __attribute__((always_inline)) void PortableBody(int64_t kc, const T* a, const T* b, T* c, int64_t ldc,
                                                        int mr, int nr, bool load_c) {
  T acc[kMr][kNr];
  for (int i = 0; i < kMr; ++i) {
    for (int j = 0; j < kNr; ++j) acc[i][j] = load_c && i < mr && j < nr ? c[i * ldc + j] : T(0);
  }
  for (int64_t p = 0; p < kc; ++p) {
    const T* ap = a + p * kMr;
    const T* bp = b + p * kNr;
    for (int i = 0; i < kMr; ++i) {
      for (int j = 0; j < kNr; ++j) acc[i][j] = std::fma(ap[i], bp[j], acc[i][j]);
    }
  }
  for (int i = 0; i < mr; ++i) {
    for (int j = 0; j < nr; ++j) c[i * ldc + j] = acc[i][j];
  }
}

template <typename T>
void KernelPortable(int64_t kc, const T* a, const T* b, T* c, int64_t ldc, int mr, int nr, bool load_c) {
  PortableBody(kc, a, b, c, ldc, mr, nr, load_c);
}

#ifdef TF_GEMM_X86
// The same body compiled for FMA hardware (std::fma becomes one instruction, not a libm call):
// the double kernel on CPUs that have it.
template <typename T>
__attribute__((target("avx2,fma"))) void KernelPortableFma(int64_t kc, const T* a, const T* b, T* c, int64_t ldc,
                                                           int mr, int nr, bool load_c) {
  PortableBody(kc, a, b, c, ldc, mr, nr, load_c);
}

// The float kernel: 12 AVX registers of C, two of B and one broadcast of A per step.
__attribute__((target("avx2,fma"))) void KernelAvx2(int64_t kc, const float* a, const float* b, float* c,
                                                    int64_t ldc, int mr, int nr, bool load_c) {
  alignas(32) float edge[kMr * kNr];
  float* cp = c;
  int64_t ld = ldc;
  if (mr < kMr || nr < kNr) {  // a block at C's edge: work on a full copy of it
    for (int i = 0; i < kMr; ++i) {
      for (int j = 0; j < kNr; ++j) edge[i * kNr + j] = load_c && i < mr && j < nr ? c[i * ldc + j] : 0.0f;
    }
    cp = edge;
    ld = kNr;
    load_c = true;
  }
  // Twelve named accumulators: GCC keeps an array of them in registers but also stores it to the
  // stack on every step, which costs two thirds of the speed.
#define TF_ROW(i) __m256 c##i##0, c##i##1
  TF_ROW(0); TF_ROW(1); TF_ROW(2); TF_ROW(3); TF_ROW(4); TF_ROW(5);
#undef TF_ROW
#define TF_LOAD(i)                                                                   \
  c##i##0 = load_c ? _mm256_loadu_ps(cp + (i) * ld) : _mm256_setzero_ps();           \
  c##i##1 = load_c ? _mm256_loadu_ps(cp + (i) * ld + 8) : _mm256_setzero_ps()
  TF_LOAD(0); TF_LOAD(1); TF_LOAD(2); TF_LOAD(3); TF_LOAD(4); TF_LOAD(5);
#undef TF_LOAD
  for (int64_t p = 0; p < kc; ++p) {
    const __m256 b0 = _mm256_loadu_ps(b);
    const __m256 b1 = _mm256_loadu_ps(b + 8);
#define TF_STEP(i)                                      \
  {                                                     \
    const __m256 ai = _mm256_broadcast_ss(a + (i));     \
    c##i##0 = _mm256_fmadd_ps(ai, b0, c##i##0);         \
    c##i##1 = _mm256_fmadd_ps(ai, b1, c##i##1);         \
  }
    TF_STEP(0) TF_STEP(1) TF_STEP(2) TF_STEP(3) TF_STEP(4) TF_STEP(5)
#undef TF_STEP
    a += kMr;
    b += kNr;
  }
#define TF_STORE(i)                             \
  _mm256_storeu_ps(cp + (i) * ld, c##i##0);     \
  _mm256_storeu_ps(cp + (i) * ld + 8, c##i##1)
  TF_STORE(0); TF_STORE(1); TF_STORE(2); TF_STORE(3); TF_STORE(4); TF_STORE(5);
#undef TF_STORE
  if (cp == edge) {
    for (int i = 0; i < mr; ++i) std::memcpy(c + i * ldc, edge + i * kNr, sizeof(float) * static_cast<size_t>(nr));
  }
}

bool CpuHasAvx2Fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
#endif

template <typename T>
Kernel<T> ChooseKernel();

template <>
Kernel<float> ChooseKernel<float>() {
#ifdef TF_GEMM_X86
  if (CpuHasAvx2Fma()) return KernelAvx2;
#endif
  return KernelPortable<float>;
}

template <>
Kernel<double> ChooseKernel<double>() {
#ifdef TF_GEMM_X86
  if (CpuHasAvx2Fma()) return KernelPortableFma<double>;
#endif
  return KernelPortable<double>;
}

#ifdef TF_GEMM_X86
// Eight steps of a panel from eight rows that each hold them contiguously: rows[r][c] (r, c < 8)
// goes to dst[c * dst_step + r]. The stores go in order of c, 8 floats each, so with dst_step 6
// each store's last two (rows[6], rows[7]) are overwritten by the next: a 6-row panel passes its
// last row twice as rows 6 and 7 and keeps 2 floats of slack after the panel's last step.
__attribute__((target("avx2"))) void Transpose8(const float* const* rows, float* dst, int64_t dst_step) {
  const __m256 r0 = _mm256_loadu_ps(rows[0]), r1 = _mm256_loadu_ps(rows[1]);
  const __m256 r2 = _mm256_loadu_ps(rows[2]), r3 = _mm256_loadu_ps(rows[3]);
  const __m256 r4 = _mm256_loadu_ps(rows[4]), r5 = _mm256_loadu_ps(rows[5]);
  const __m256 r6 = _mm256_loadu_ps(rows[6]), r7 = _mm256_loadu_ps(rows[7]);
  // Pairs of rows interleaved, then pairs of pairs, then the 128-bit halves exchanged.
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
  const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
  const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
  const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(dst + 0 * dst_step, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(dst + 1 * dst_step, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(dst + 2 * dst_step, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(dst + 3 * dst_step, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(dst + 4 * dst_step, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(dst + 5 * dst_step, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(dst + 6 * dst_step, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(dst + 7 * dst_step, _mm256_permute2f128_ps(u3, u7, 0x31));
}
#endif

// Whether packing may transpose eight steps at a time (floats, on AVX2): steps p .. p + 7 of the
// given rows are contiguous in each. Packing moves values only, so it never changes a bit.
template <typename T>
bool FastTranspose() {
#ifdef TF_GEMM_X86
  if constexpr (std::is_same_v<T, float>) return CpuHasAvx2Fma();
#endif
  return false;
}

// Steps [0, kc) of `lanes` rows (src[r][p], contiguous in p) into dst[p * step + r]; lanes is 6
// (A, step 6) or 8 (half a B panel, step 16). Returns the first step left for the caller.
template <typename T>
int64_t PackTransposed(const T* const* src, int lanes, int64_t kc, T* dst, int64_t step) {
#ifdef TF_GEMM_X86
  if constexpr (std::is_same_v<T, float>) {
    const float* rows[8];
    int64_t p = 0;
    for (; p + 8 <= kc; p += 8) {
      for (int r = 0; r < 8; ++r) rows[r] = src[std::min(r, lanes - 1)] + p;
      Transpose8(rows, dst + p * step, step);
    }
    return p;
  }
#endif
  (void)src, (void)lanes, (void)dst, (void)step;
  return 0;
}

// Packs rows [i0, i0 + rows) x depth [p0, p0 + kc) of A into 6-row panels: panel q, step p holds
// A[i0 + 6q + r, p0 + p] at [q * kc * 6 + p * 6 + r], zero past the rows. `out` has 2 values of
// slack after the last panel (PackTransposed's stores).
template <typename T>
void PackA(MatrixView<T> a, int64_t i0, int64_t rows, int64_t p0, int64_t kc, T* out) {
  for (int64_t q = 0; q * kMr < rows; ++q) {
    T* panel = out + q * kc * kMr;
    const int valid = static_cast<int>(std::min<int64_t>(kMr, rows - q * kMr));
    if (a.row_stride == 1 && valid == kMr) {  // A read transposed: a step's 6 values are contiguous
      const T* src = a.data + (i0 + q * kMr) + p0 * a.col_stride;
      for (int64_t p = 0; p < kc; ++p) std::memcpy(panel + p * kMr, src + p * a.col_stride, sizeof(T) * kMr);
      continue;
    }
    if (a.col_stride == 1 && valid == kMr && FastTranspose<T>()) {  // rows of A contiguous: 6 x 8 blocks
      const T* src[kMr];
      for (int r = 0; r < kMr; ++r) src[r] = a.data + (i0 + q * kMr + r) * a.row_stride + p0;
      for (int64_t p = PackTransposed(src, kMr, kc, panel, kMr); p < kc; ++p) {
        for (int r = 0; r < kMr; ++r) panel[p * kMr + r] = src[r][p];
      }
      continue;
    }
    // Step by step, the rows side by side: the writes are sequential (row by row, they would
    // stride, and packing would cost as much as the product on the model's shapes).
    const T* src[kMr];
    for (int r = 0; r < valid; ++r) src[r] = a.data + (i0 + q * kMr + r) * a.row_stride + p0 * a.col_stride;
    for (int64_t p = 0; p < kc; ++p) {
      T* dst = panel + p * kMr;
      for (int r = 0; r < valid; ++r) dst[r] = src[r][p * a.col_stride];
      for (int r = valid; r < kMr; ++r) dst[r] = T(0);
    }
  }
}

// Packs depth [p0, p0 + kc) x columns [j0, j0 + cols) of B into 16-column panels: panel q, step p
// holds B[p0 + p, j0 + 16q + j] at [q * kc * 16 + p * 16 + j], zero past the columns.
template <typename T>
void PackB(MatrixView<T> b, int64_t p0, int64_t kc, int64_t j0, int64_t cols, T* out) {
  for (int64_t q = 0; q * kNr < cols; ++q) {
    T* panel = out + q * kc * kNr;
    const int valid = static_cast<int>(std::min<int64_t>(kNr, cols - q * kNr));
    if (b.col_stride == 1 && valid == kNr) {  // rows of B are contiguous: copy 16 at a time
      for (int64_t p = 0; p < kc; ++p) {
        std::memcpy(panel + p * kNr, b.data + (p0 + p) * b.row_stride + j0 + q * kNr, sizeof(T) * kNr);
      }
      continue;
    }
    const T* src[kNr];
    for (int j = 0; j < valid; ++j) src[j] = b.data + p0 * b.row_stride + (j0 + q * kNr + j) * b.col_stride;
    if (b.row_stride == 1 && valid == kNr && FastTranspose<T>()) {  // columns of B contiguous: 8 x 8 blocks
      int64_t done = PackTransposed(src, 8, kc, panel, kNr);
      PackTransposed(src + 8, 8, kc, panel + 8, kNr);
      for (; done < kc; ++done) {
        for (int j = 0; j < kNr; ++j) panel[done * kNr + j] = src[j][done];
      }
      continue;
    }
    for (int64_t p = 0; p < kc; ++p) {
      T* dst = panel + p * kNr;
      for (int j = 0; j < valid; ++j) dst[j] = src[j][p * b.row_stride];
      for (int j = valid; j < kNr; ++j) dst[j] = T(0);
    }
  }
}

// The buffers one thread packs into, kept between calls.
template <typename T>
struct PackBuffers {
  std::vector<T> a;
  std::vector<T> b;
};

template <typename T>
PackBuffers<T>& ThreadBuffers() {
  thread_local PackBuffers<T> buffers;
  return buffers;
}

// One tile of C: rows [i0, i1), columns [j0, j1).
template <typename T>
void Tile(Kernel<T> kernel, int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t k, MatrixView<T> a,
          MatrixView<T> b, T* c, int64_t ldc, bool accumulate) {
  const int64_t rows = i1 - i0;
  const int64_t cols = j1 - j0;
  const int64_t a_panels = CeilDiv(rows, kMr);
  const int64_t b_panels = CeilDiv(cols, kNr);
  PackBuffers<T>& buf = ThreadBuffers<T>();
  const int64_t depth = std::min(k, kKc);
  buf.a.resize(static_cast<size_t>(a_panels * kMr * depth + 2));  // + PackA's slack
  buf.b.resize(static_cast<size_t>(b_panels * kNr * depth));
  for (int64_t p0 = 0; p0 < k; p0 += kKc) {
    const int64_t kc = std::min(kKc, k - p0);
    PackA(a, i0, rows, p0, kc, buf.a.data());
    PackB(b, p0, kc, j0, cols, buf.b.data());
    const bool load_c = accumulate || p0 > 0;
    for (int64_t jq = 0; jq < b_panels; ++jq) {
      const int nr = static_cast<int>(std::min<int64_t>(kNr, cols - jq * kNr));
      for (int64_t iq = 0; iq < a_panels; ++iq) {
        const int mr = static_cast<int>(std::min<int64_t>(kMr, rows - iq * kMr));
        kernel(kc, buf.a.data() + iq * kc * kMr, buf.b.data() + jq * kc * kNr,
               c + (i0 + iq * kMr) * ldc + j0 + jq * kNr, ldc, mr, nr, load_c);
      }
    }
  }
}

template <typename T>
void GemmWith(Kernel<T> kernel, int64_t m, int64_t n, int64_t k, MatrixView<T> a, MatrixView<T> b, T* c,
              int64_t ldc, bool accumulate, CpuThreads& threads) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!accumulate) {
      for (int64_t i = 0; i < m; ++i) std::fill_n(c + i * ldc, n, T(0));
    }
    return;
  }
  // Tiles: columns in blocks of up to 256; rows cut so that there are at least as many tiles as
  // threads where the rows allow, each a multiple of the kernel's 6 rows.
  const int64_t workers = threads.threads();
  int64_t tiles_n = CeilDiv(n, kMaxTileN);
  int64_t tiles_m = std::max(CeilDiv(m, kMaxTileM), CeilDiv(workers, tiles_n));
  tiles_m = std::min(tiles_m, CeilDiv(m, kMr));
  const int64_t tile_m = CeilDiv(CeilDiv(m, tiles_m), kMr) * kMr;
  tiles_m = CeilDiv(m, tile_m);
  // A few tiles that the threads do not divide leave threads idle at the end (3 tiles of a
  // 768-column product on 2 threads: a quarter of the time): narrower columns until they do.
  if (workers > 1 && tiles_m * tiles_n < 8 * workers) {
    for (int64_t more = tiles_n; more <= std::min(2 * tiles_n, CeilDiv(n, kNr)); ++more) {
      const int64_t cols = CeilDiv(n, CeilDiv(CeilDiv(n, more), kNr) * kNr);  // tiles at `more`'s width
      if ((tiles_m * cols) % workers == 0) {
        tiles_n = more;
        break;
      }
    }
  }
  const int64_t tile_n = CeilDiv(CeilDiv(n, tiles_n), kNr) * kNr;
  tiles_n = CeilDiv(n, tile_n);
  const int64_t tiles = tiles_m * tiles_n;
  // Small products on one thread: waking the others costs more than it saves.
  const bool small = m * n * k < (int64_t{1} << 18);
  // Each thread takes the next tile left, so one slowed by another process's work on its core
  // (the optimizer's, an I/O completion) holds up the product by one tile, not by its share.
  std::atomic<int64_t> next{0};
  threads.ParallelFor(small ? 1 : std::min(tiles, workers), 1, [&](int64_t, int64_t) {
    for (int64_t t = next.fetch_add(1, std::memory_order_relaxed); t < tiles; t = next.fetch_add(1, std::memory_order_relaxed)) {
      const int64_t i0 = (t / tiles_n) * tile_m;
      const int64_t j0 = (t % tiles_n) * tile_n;
      Tile(kernel, i0, std::min(m, i0 + tile_m), j0, std::min(n, j0 + tile_n), k, a, b, c, ldc, accumulate);
    }
  });
}

}  // namespace

template <typename T>
void Gemm(int64_t m, int64_t n, int64_t k, MatrixView<T> a, MatrixView<T> b, T* c, int64_t ldc,
          bool accumulate, CpuThreads& threads) {
  static const Kernel<T> kernel = ChooseKernel<T>();
  GemmWith(kernel, m, n, k, a, b, c, ldc, accumulate, threads);
}

template <typename T>
void GemmPortable(int64_t m, int64_t n, int64_t k, MatrixView<T> a, MatrixView<T> b, T* c, int64_t ldc,
                  bool accumulate, CpuThreads& threads) {
  GemmWith<T>(KernelPortable<T>, m, n, k, a, b, c, ldc, accumulate, threads);
}

const char* GemmKernelName() {
#ifdef TF_GEMM_X86
  if (CpuHasAvx2Fma()) return "avx2-fma";
#endif
  return "portable";
}

template void Gemm<float>(int64_t, int64_t, int64_t, MatrixView<float>, MatrixView<float>, float*, int64_t, bool,
                          CpuThreads&);
template void Gemm<double>(int64_t, int64_t, int64_t, MatrixView<double>, MatrixView<double>, double*, int64_t,
                           bool, CpuThreads&);
template void GemmPortable<float>(int64_t, int64_t, int64_t, MatrixView<float>, MatrixView<float>, float*, int64_t,
                                  bool, CpuThreads&);
template void GemmPortable<double>(int64_t, int64_t, int64_t, MatrixView<double>, MatrixView<double>, double*,
                                   int64_t, bool, CpuThreads&);

}  // namespace tierflow::real::cpu
