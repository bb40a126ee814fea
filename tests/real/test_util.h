// Helpers for the real/ tests: a temporary directory removed at the end, random bytes, and the
// back-ends under test by name (io_uring skips with the reason when unavailable).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tierflow/real/storage.h"

namespace tierflow::real::testing {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const;  // creates <path>/<name>

 private:
  std::string path_;
};

std::vector<char> RandomBytes(int64_t n, uint64_t seed);

// "uring" or "posix" (or "memory"); sets *skip_reason when the back-end cannot run here.
std::unique_ptr<Storage> MakeStorage(const std::string& name, const StorageOptions& options, std::string* skip_reason);

#define TF_ASSERT_OK(expr)                                    \
  do {                                                        \
    ::tierflow::Status tf_s_ = (expr);                        \
    ASSERT_TRUE(tf_s_.ok()) << tf_s_.ToString();              \
  } while (0)

}  // namespace tierflow::real::testing
