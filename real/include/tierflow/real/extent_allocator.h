// ExtentAllocator: hands out byte ranges of one preallocated store file — first fit over a
// sorted, coalesced free list, every extent a multiple of the alignment (4 KiB, for O_DIRECT).
// Thread safety: not thread-safe; the tensor store serialises calls.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "tierflow/core/status.h"

namespace tierflow::real {

class ExtentAllocator {
 public:
  ExtentAllocator(int64_t capacity_bytes, int64_t alignment_bytes);
  // The offset of a free range of AlignUp(size_bytes), or ResourceExhausted.
  StatusOr<int64_t> Allocate(int64_t size_bytes);
  // Marks [offset, offset + AlignUp(size_bytes)) used (rebuilding from a manifest); false when
  // any of it is not free.
  bool Claim(int64_t offset_bytes, int64_t size_bytes);
  void Free(int64_t offset_bytes, int64_t size_bytes);
  int64_t capacity_bytes() const { return capacity_; }
  int64_t used_bytes() const { return used_; }
  int64_t largest_free_bytes() const;
  const std::vector<std::pair<int64_t, int64_t>>& free_ranges() const { return free_; }

 private:
  int64_t capacity_;
  int64_t alignment_;
  int64_t used_ = 0;
  std::vector<std::pair<int64_t, int64_t>> free_;  // (offset, length)
};

}  // namespace tierflow::real
