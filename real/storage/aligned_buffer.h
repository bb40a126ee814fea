// Private to real/: I/O memory (tierflow/real/io_memory.h: aligned for O_DIRECT, huge pages from
// 2 MiB up), zero-filled, freed on destruction.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>

#include "tierflow/real/io_memory.h"
#include "tierflow/real/storage.h"

namespace tierflow::real::internal {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(int64_t size_bytes)
      : size_(AlignUp(std::max<int64_t>(size_bytes, 1), kDirectAlignment)), data_(static_cast<char*>(AllocateIoMemory(size_))) {}
  ~AlignedBuffer() { FreeIoMemory(data_, size_); }
  AlignedBuffer(AlignedBuffer&& other) noexcept
      : size_(std::exchange(other.size_, 0)), data_(std::exchange(other.data_, nullptr)) {}
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
    if (this != &other) {
      FreeIoMemory(data_, size_);
      size_ = std::exchange(other.size_, 0);
      data_ = std::exchange(other.data_, nullptr);
    }
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  char* data() const { return data_; }
  int64_t size_bytes() const { return size_; }
  bool ok() const { return data_ != nullptr; }

 private:
  int64_t size_ = 0;
  char* data_ = nullptr;
};

}  // namespace tierflow::real::internal
