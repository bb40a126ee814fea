#include "tierflow/real/extent_allocator.h"

#include <algorithm>
#include <string>

namespace tierflow::real {

ExtentAllocator::ExtentAllocator(int64_t capacity_bytes, int64_t alignment_bytes)
    : capacity_(capacity_bytes / alignment_bytes * alignment_bytes), alignment_(alignment_bytes) {
  if (capacity_ > 0) free_.push_back({0, capacity_});
}

StatusOr<int64_t> ExtentAllocator::Allocate(int64_t size_bytes) {
  int64_t need = std::max<int64_t>(alignment_, (size_bytes + alignment_ - 1) / alignment_ * alignment_);
  for (size_t i = 0; i < free_.size(); ++i) {
    auto& [off, len] = free_[i];
    if (len >= need) {
      int64_t at = off;
      off += need;
      len -= need;
      if (len == 0) free_.erase(free_.begin() + static_cast<ptrdiff_t>(i));
      used_ += need;
      return at;
    }
  }
  return ResourceExhausted("no free extent of " + std::to_string(need) + " bytes (" + std::to_string(used_) +
                           " of " + std::to_string(capacity_) + " bytes used, largest free " +
                           std::to_string(largest_free_bytes()) + ")");
}

bool ExtentAllocator::Claim(int64_t offset_bytes, int64_t size_bytes) {
  int64_t need = std::max<int64_t>(alignment_, (size_bytes + alignment_ - 1) / alignment_ * alignment_);
  for (size_t i = 0; i < free_.size(); ++i) {
    auto [off, len] = free_[i];
    if (offset_bytes >= off && offset_bytes + need <= off + len) {
      free_.erase(free_.begin() + static_cast<ptrdiff_t>(i));
      if (offset_bytes + need < off + len) free_.insert(free_.begin() + static_cast<ptrdiff_t>(i), {offset_bytes + need, off + len - offset_bytes - need});
      if (offset_bytes > off) free_.insert(free_.begin() + static_cast<ptrdiff_t>(i), {off, offset_bytes - off});
      used_ += need;
      return true;
    }
  }
  return false;
}

void ExtentAllocator::Free(int64_t offset_bytes, int64_t size_bytes) {
  int64_t n = std::max<int64_t>(alignment_, (size_bytes + alignment_ - 1) / alignment_ * alignment_);
  auto it = std::lower_bound(free_.begin(), free_.end(), std::make_pair(offset_bytes, int64_t{0}));
  it = free_.insert(it, {offset_bytes, n});
  if (it + 1 != free_.end() && it->first + it->second == (it + 1)->first) {
    it->second += (it + 1)->second;
    free_.erase(it + 1);
  }
  if (it != free_.begin() && (it - 1)->first + (it - 1)->second == it->first) {
    (it - 1)->second += it->second;
    free_.erase(it);
  }
  used_ -= n;
}

int64_t ExtentAllocator::largest_free_bytes() const {
  int64_t m = 0;
  for (auto& f : free_) m = std::max(m, f.second);
  return m;
}

}  // namespace tierflow::real
