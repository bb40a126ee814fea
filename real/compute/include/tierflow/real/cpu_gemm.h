// The CPU back-end's matrix product, C = A B (or C += A B), shared by the linear layers and the
// attention products (cpu_ops.h).
//
// Its contract is the one the executor's bit-identical weights rest on: every element of C is
//     acc = accumulate ? C[i,j] : 0;  for p = 0 .. k-1:  acc = fma(A[i,p], B[p,j], acc)
// a sequence of fused multiply-adds in order of p, each rounded once. How the product is cut into
// tiles, over how many threads, and which kernel runs (AVX2 + FMA where the CPU has them, a
// portable one elsewhere) change the speed, never a bit of the result.
//
// Speed: the AVX2 kernel packs A into 6-row and B into 16-column panels (BLIS's layout) and keeps
// a 6 x 16 block of C in registers over a 256-deep slice of p, storing and reloading it between
// slices (exact, so the order above holds); bench/gemm_bench.cc measures it against Eigen.
// Thread safety: concurrent calls are safe (each thread packs into buffers of its own).
#pragma once

#include <cstdint>

#include "tierflow/real/cpu_threads.h"

namespace tierflow::real::cpu {

// A read-only strided matrix: element (r, c) is data[r * row_stride + c * col_stride]. Any layout
// (row-major, column-major, a transpose of either) without a copy.
template <typename T>
struct MatrixView {
  const T* data;
  int64_t row_stride;
  int64_t col_stride;
  T at(int64_t r, int64_t c) const { return data[r * row_stride + c * col_stride]; }
};

// C[m, n] (row-major, leading dimension ldc) = A[m, k] B[k, n], or += with accumulate. C must not
// overlap A or B. m, n or k of 0 is allowed (with k = 0, C is zeroed unless accumulate).
template <typename T>
void Gemm(int64_t m, int64_t n, int64_t k, MatrixView<T> a, MatrixView<T> b, T* c, int64_t ldc,
          bool accumulate, CpuThreads& threads);

// Gemm with the portable kernel whatever the CPU (std::fma step by step): the same bits as Gemm,
// slower; for the tests that hold the kernels to that.
template <typename T>
void GemmPortable(int64_t m, int64_t n, int64_t k, MatrixView<T> a, MatrixView<T> b, T* c, int64_t ldc,
                  bool accumulate, CpuThreads& threads);

// The kernel Gemm<float> runs on this CPU: "avx2-fma" or "portable".
const char* GemmKernelName();

}  // namespace tierflow::real::cpu
