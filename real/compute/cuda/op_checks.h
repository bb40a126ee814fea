// The argument checks and launch status of the CUDA ops (cuda_ops.cu, flash_attention.cu): one
// InvalidArgument naming the op and the dimension before any launch, and the launch's own error
// naming the kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>

#include "tierflow/core/status.h"
#include "tierflow/real/cuda_status.h"

namespace tierflow::real::cuda::internal {

inline Status NeedPositive(const char* op, std::initializer_list<std::pair<const char*, int64_t>> dims) {
  for (const auto& [name, value] : dims) {
    if (value < 1) return InvalidArgument(std::string(op) + ": " + name + " = " + std::to_string(value) + " (must be >= 1)");
  }
  return Status::Ok();
}

// cuBLAS takes int dimensions and leading dimensions.
inline Status NeedInt(const char* op, std::initializer_list<std::pair<const char*, int64_t>> dims) {
  for (const auto& [name, value] : dims) {
    if (value > std::numeric_limits<int>::max()) {
      return InvalidArgument(std::string(op) + ": " + name + " = " + std::to_string(value) + " (cuBLAS takes at most 2^31-1)");
    }
  }
  return Status::Ok();
}

// A grid of one block per row: at most 2^31-1 blocks.
inline Status NeedRowGrid(const char* op, int64_t rows) {
  if (rows > std::numeric_limits<int>::max()) {
    return InvalidArgument(std::string(op) + ": " + std::to_string(rows) + " rows (one block each: at most 2^31-1)");
  }
  return Status::Ok();
}

// Grouped-query attention: every kv head serves the same number of query heads.
inline Status NeedHeadGroups(const char* op, int64_t heads, int64_t kv_heads) {
  if (heads % kv_heads != 0) {
    return InvalidArgument(std::string(op) + ": heads = " + std::to_string(heads) + " is not a multiple of kv_heads = " +
                           std::to_string(kv_heads));
  }
  return Status::Ok();
}

// Scratch partitions start on 256-byte boundaries (cuBLAS's fast kernels want aligned operands,
// and vector stores need their width).
constexpr int64_t AlignScratch(int64_t bytes) { return (bytes + 255) / 256 * 256; }

inline Status LaunchStatus(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return CudaError(e, std::string("launch of ") + kernel);
  return Status::Ok();
}

}  // namespace tierflow::real::cuda::internal
