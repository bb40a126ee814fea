#pragma once

#include <cstdint>

namespace tierflow::bench {

// The three products of a linear layer (cpu_ops.h LinearForward and LinearBackward).
enum class GemmLayout { kForward, kInputGrad, kWeightGrad };

// Eigen's product of the layout on row-major operands, on the calling thread.
void EigenGemm(GemmLayout layout, int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c);

}  // namespace tierflow::bench
