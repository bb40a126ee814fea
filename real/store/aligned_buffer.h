// Private to real/: a heap buffer aligned for O_DIRECT (4 KiB), zero-filled, freed on destruction.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "tierflow/real/storage.h"

namespace tierflow::real::internal {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(int64_t size_bytes) : size_(AlignUp(std::max<int64_t>(size_bytes, 1), kDirectAlignment)) {
    data_.reset(static_cast<char*>(std::aligned_alloc(kDirectAlignment, size_)));
    if (data_) std::memset(data_.get(), 0, size_);
  }
  char* data() const { return data_.get(); }
  int64_t size_bytes() const { return size_; }
  bool ok() const { return data_ != nullptr; }

 private:
  int64_t size_ = 0;
  std::unique_ptr<char, FreeDeleter> data_;
};

}  // namespace tierflow::real::internal
