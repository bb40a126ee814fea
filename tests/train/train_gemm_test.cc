// cpu::Gemm against its contract (cpu_gemm.h): every element of C is the sequence of fused
// multiply-adds over the reduction index in order, from 0 or from C, whatever the shape's edges
// against the kernel's 6 x 16 blocks, the 256-deep slices and the tiles, the operands' layouts
// (row-major or read transposed), the thread count and the kernel (AVX2 + FMA or portable).
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tierflow/real/cpu_gemm.h"

namespace tierflow::real::cpu {
namespace {

template <typename T>
std::vector<T> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(dist(rng));
  return v;
}

// The contract written out: one element at a time, std::fma in order of p.
template <typename T>
std::vector<T> Reference(int64_t m, int64_t n, int64_t k, MatrixView<T> a, MatrixView<T> b, std::vector<T> c,
                         int64_t ldc, bool accumulate) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      T acc = accumulate ? c[i * ldc + j] : T(0);
      for (int64_t p = 0; p < k; ++p) acc = std::fma(a.at(i, p), b.at(p, j), acc);
      c[i * ldc + j] = acc;
    }
  }
  return c;
}

template <typename T>
bool SameBits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

struct Shape {
  int64_t m, n, k;
};

// Shapes at and around the kernel's blocks (6 rows, 16 columns), a slice (256), the tiles (144
// rows, 256 columns), the model's products (128 rows of 256..2048), and one whose 3 column tiles
// the 2-thread pool narrows to 4 (GemmWith's balancing).
const Shape kShapes[] = {{1, 1, 1},     {5, 15, 7},     {6, 16, 256},  {7, 17, 257},   {13, 33, 600},
                         {145, 257, 3}, {128, 256, 64}, {150, 200, 300}, {20, 600, 40}};

template <typename T>
void CheckEveryLayout() {
  CpuThreads one(1), two(2), three(3);
  uint32_t seed = 1;
  for (const Shape& s : kShapes) {
    // A row-major [m, k] or stored [k, m] and read transposed; B row-major [k, n] or stored
    // [n, k]; C with a leading dimension wider than n (a slice of a wider activation).
    const std::vector<T> a = Random<T>(static_cast<size_t>(s.m * s.k), seed++);
    const std::vector<T> b = Random<T>(static_cast<size_t>(s.k * s.n), seed++);
    const int64_t ldc = s.n + 3;
    const std::vector<T> c0 = Random<T>(static_cast<size_t>(s.m * ldc), seed++);
    for (const bool a_t : {false, true}) {
      for (const bool b_t : {false, true}) {
        const MatrixView<T> av = a_t ? MatrixView<T>{a.data(), 1, s.m} : MatrixView<T>{a.data(), s.k, 1};
        const MatrixView<T> bv = b_t ? MatrixView<T>{b.data(), 1, s.k} : MatrixView<T>{b.data(), s.n, 1};
        for (const bool accumulate : {false, true}) {
          const std::string label = std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) +
                                    (a_t ? " A^T" : "") + (b_t ? " B^T" : "") + (accumulate ? " +=" : " =");
          const std::vector<T> want = Reference(s.m, s.n, s.k, av, bv, c0, ldc, accumulate);
          for (CpuThreads* threads : {&one, &two, &three}) {
            std::vector<T> got = c0;
            Gemm<T>(s.m, s.n, s.k, av, bv, got.data(), ldc, accumulate, *threads);
            EXPECT_TRUE(SameBits(got, want)) << label << ", " << threads->threads() << " thread(s), "
                                             << GemmKernelName() << " kernel";
          }
          std::vector<T> portable = c0;
          GemmPortable<T>(s.m, s.n, s.k, av, bv, portable.data(), ldc, accumulate, two);
          EXPECT_TRUE(SameBits(portable, want)) << label << ", portable kernel";
        }
      }
    }
  }
}

TEST(Gemm, EveryElementIsTheFusedSumInOrderWhateverTheLayoutAndThreads) {
  CheckEveryLayout<float>();
  CheckEveryLayout<double>();
}

// The columns of C past n (its leading dimension) are left alone, and k = 0 zeroes C (or leaves
// it, accumulating); m or n of 0 touches nothing.
TEST(Gemm, EdgesOfTheOutputAndEmptyProducts) {
  CpuThreads threads(2);
  const std::vector<float> a = Random<float>(7 * 5, 1);
  const std::vector<float> b = Random<float>(5 * 9, 2);
  std::vector<float> c(7 * 12, 42.0f);
  Gemm<float>(7, 9, 5, {a.data(), 5, 1}, {b.data(), 9, 1}, c.data(), 12, false, threads);
  for (int i = 0; i < 7; ++i) {
    for (int j = 9; j < 12; ++j) EXPECT_EQ(c[i * 12 + j], 42.0f) << i << "," << j;
  }
  std::vector<float> zeroed(6, 7.0f);
  Gemm<float>(2, 3, 0, {a.data(), 0, 1}, {b.data(), 3, 1}, zeroed.data(), 3, false, threads);
  EXPECT_EQ(zeroed, std::vector<float>(6, 0.0f));
  std::vector<float> kept(6, 7.0f);
  Gemm<float>(2, 3, 0, {a.data(), 0, 1}, {b.data(), 3, 1}, kept.data(), 3, true, threads);
  EXPECT_EQ(kept, std::vector<float>(6, 7.0f));
  Gemm<float>(0, 3, 5, {a.data(), 5, 1}, {b.data(), 3, 1}, nullptr, 3, false, threads);
  Gemm<float>(3, 0, 5, {a.data(), 5, 1}, {b.data(), 0, 1}, nullptr, 0, false, threads);
}

}  // namespace
}  // namespace tierflow::real::cpu
