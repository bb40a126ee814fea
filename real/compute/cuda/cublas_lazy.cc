// cuBLAS, opened on its first call. Linking libcublas makes every process load cuBLASLt at
// start, whose initialisation took 0.17 s and 210 MB of memory here (a program that does nothing,
// with the library preloaded and without): every `tierflow` command, every test and every rank
// paid it, GPU or none. tierflow calls seven cuBLAS functions; this file defines them (with the
// prototypes of cublas_api.h, so a change there fails to compile here) and each forwards to the
// library, which the first call opens. When it cannot be opened, or lacks the function, the call
// returns CUBLAS_STATUS_NOT_INITIALIZED and cublasGetStatusString says why (dlopen's message, or
// the function missing), so the error reaches the user as any cuBLAS error does (cuda_status.h).
//
// Nothing that links this may link libcublas itself (CUDA::cublas): these definitions would then
// stand in for the library's own.
#include <cublas_v2.h>
#include <dlfcn.h>

#include <atomic>
#include <string>

namespace {

struct Library {
  void* handle = nullptr;
  std::string error;  // why it could not be opened
};

const Library& Cublas() {
  static const Library library = [] {
    Library l;
    const std::string soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    // The loader's own search (the executable's run path, LD_LIBRARY_PATH, the system's), then
    // the toolkit this was built with.
    l.handle = ::dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
#ifdef TIERFLOW_CUDA_LIBRARY_DIR
    if (l.handle == nullptr) {
      l.handle = ::dlopen((std::string(TIERFLOW_CUDA_LIBRARY_DIR) + "/" + soname).c_str(), RTLD_NOW | RTLD_LOCAL);
    }
#endif
    if (l.handle == nullptr) {
      const char* why = ::dlerror();
      l.error = soname + " could not be opened (" + (why ? why : "no reason given") + ")";
    }
    return l;
  }();
  return library;
}

// A function the opened library lacks (its calls return CUBLAS_STATUS_NOT_INITIALIZED, which
// cublasGetStatusString then explains by this, not by the library's own "not initialized").
std::atomic<const char*> missing{nullptr};

// The library's function `name`, of the type of ours (null when the library or it is missing).
template <typename F>
F Forward(F, const char* name) {
  const Library& l = Cublas();
  if (l.handle == nullptr) return nullptr;
  const F f = reinterpret_cast<F>(::dlsym(l.handle, name));
  if (f == nullptr) missing.store(name);
  return f;
}

}  // namespace

extern "C" {

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t* handle) {
  static const auto f = Forward(&cublasCreate_v2, "cublasCreate_v2");
  return f ? f(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
  static const auto f = Forward(&cublasDestroy_v2, "cublasDestroy_v2");
  return f ? f(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  static const auto f = Forward(&cublasSetStream_v2, "cublasSetStream_v2");
  return f ? f(handle, stream) : CUBLAS_STATUS_NOT_INITIALIZED;
}

const char* CUBLASWINAPI cublasGetStatusName(cublasStatus_t status) {
  static const auto f = Forward(&cublasGetStatusName, "cublasGetStatusName");
  return f ? f(status) : "CUBLAS_STATUS_NOT_INITIALIZED";
}

const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  static const auto f = Forward(&cublasGetStatusString, "cublasGetStatusString");
  if (f == nullptr) return Cublas().handle ? "cublasGetStatusString is missing from the cuBLAS library" : Cublas().error.c_str();
  const char* lacking = missing.load();
  if (status != CUBLAS_STATUS_NOT_INITIALIZED || lacking == nullptr) return f(status);
  thread_local std::string why;  // valid until this thread's next call, as a message is used
  why = std::string(lacking) + " is missing from libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  return why.c_str();
}

// cublas_api.h adds C++ overloads of these two (computeType as a cudaDataType): the casts pick
// the C functions.
using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                  const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                  cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
using GemmStridedBatchedEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                                const void*, const void*, cudaDataType, int, long long int, const void*,
                                                cudaDataType, int, long long int, const void*, void*, cudaDataType, int,
                                                long long int, int, cublasComputeType_t, cublasGemmAlgo_t);

cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                         int lda, const void* B, cudaDataType Btype, int ldb, const void* beta, void* C,
                                         cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                                         cublasGemmAlgo_t algo) {
  static const auto f = Forward(static_cast<GemmEx>(&cublasGemmEx), "cublasGemmEx");
  return f ? f(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc, computeType, algo)
           : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                                       cublasOperation_t transb, int m, int n, int k, const void* alpha,
                                                       const void* A, cudaDataType Atype, int lda, long long int strideA,
                                                       const void* B, cudaDataType Btype, int ldb, long long int strideB,
                                                       const void* beta, void* C, cudaDataType Ctype, int ldc,
                                                       long long int strideC, int batchCount,
                                                       cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  static const auto f = Forward(static_cast<GemmStridedBatchedEx>(&cublasGemmStridedBatchedEx), "cublasGemmStridedBatchedEx");
  return f ? f(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta, C, Ctype, ldc,
               strideC, batchCount, computeType, algo)
           : CUBLAS_STATUS_NOT_INITIALIZED;
}

}  // extern "C"
