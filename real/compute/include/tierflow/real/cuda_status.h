// Status from CUDA runtime and cuBLAS errors, for every source that calls CUDA (the compute
// back-end, the GPU steps, the CUDA compute device, the probes, NCCL): each names the call that
// failed and the library's own name and text of the error. Include only where CUDA is built.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

#include "tierflow/core/status.h"

namespace tierflow::real::cuda {

inline Status CudaError(cudaError_t e, const std::string& call) {
  return Internal(call + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

inline Status CublasError(cublasStatus_t s, const std::string& call) {
  return Internal(call + ": " + cublasGetStatusName(s) + " (" + cublasGetStatusString(s) + ")");
}

}  // namespace tierflow::real::cuda

// Returns the CUDA error of `call` as a Status naming it.
#define TF_CUDA(call)                                                                     \
  do {                                                                                    \
    const cudaError_t tf_cuda_e = (call);                                                 \
    if (tf_cuda_e != cudaSuccess) return ::tierflow::real::cuda::CudaError(tf_cuda_e, #call); \
  } while (0)

// Returns the cuBLAS error of `call` as a Status naming `what`.
#define TF_CUBLAS(call, what)                                                              \
  do {                                                                                     \
    const cublasStatus_t tf_cublas_s = (call);                                             \
    if (tf_cublas_s != CUBLAS_STATUS_SUCCESS) return ::tierflow::real::cuda::CublasError(tf_cublas_s, what); \
  } while (0)
