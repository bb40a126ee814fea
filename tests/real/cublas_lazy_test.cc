// cuBLAS is opened on its first call (real/compute/cuda/cublas_lazy.cc), not when a program that
// links the CUDA back-end starts: linked, cuBLASLt's start-up cost every process 0.17 s and 210 MB.
// Needs the toolkit's libraries, not a GPU.
#include <cublas_v2.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace {

bool CublasLoaded() {
  const std::string soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* h = ::dlopen(soname.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (h != nullptr) ::dlclose(h);  // drops the reference RTLD_NOLOAD took
  return h != nullptr;
}

// In a child process, so that no earlier test's call has opened it: absent at start, present
// after the first call, which answers as the library does.
TEST(CublasLazy, OpensOnTheFirstCallOnly) {
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (CublasLoaded()) ::_exit(1);
    if (std::string(cublasGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED)) != "CUBLAS_STATUS_NOT_SUPPORTED") ::_exit(2);
    if (std::string(cublasGetStatusString(CUBLAS_STATUS_SUCCESS)).empty()) ::_exit(3);
    if (!CublasLoaded()) ::_exit(4);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: loaded at start; 2, 3: the forwarded calls answered wrongly; 4: not loaded after a call";
}

}  // namespace
