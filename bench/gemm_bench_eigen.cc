// Eigen's GEMM for gemm_bench.cc, in a file of its own so that it alone is compiled for AVX2 +
// FMA (bench/gemm.cmake): Eigen picks its kernel at compile time, and a reference held back to
// SSE2 would flatter tierflow's. Called only where the CPU has both (gemm_bench.cc checks).
#include "gemm_bench_eigen.h"

#include <Eigen/Core>

namespace tierflow::bench {

void EigenGemm(GemmLayout layout, int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c) {
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<RowMajor> cm(c, m, n);
  switch (layout) {
    case GemmLayout::kForward: {  // C = A B^T, A [m, k], B [n, k] (a linear layer's weight)
      Eigen::Map<const RowMajor> am(a, m, k), bm(b, n, k);
      cm.noalias() = am * bm.transpose();
      break;
    }
    case GemmLayout::kInputGrad: {  // C += A B, A [m, k], B [k, n]
      Eigen::Map<const RowMajor> am(a, m, k), bm(b, k, n);
      cm.noalias() += am * bm;
      break;
    }
    case GemmLayout::kWeightGrad: {  // C += A^T B, A [k, m], B [k, n]
      Eigen::Map<const RowMajor> am(a, k, m), bm(b, k, n);
      cm.noalias() += am.transpose() * bm;
      break;
    }
  }
}

}  // namespace tierflow::bench
