// One pool's host memory, mapped once, from which its buffers are cut: the executor makes one
// per host pool of the schedule at set-up (Run::MakeHostArenas), as large as the pool's buffers
// can hold at once, so that no task waits mid-run on the dispatch thread for fresh memory to be
// mapped and faulted in.
// Best fit (the shortest free run that holds it, the lowest such), each piece rounded up to
// kDirectAlignment (O_DIRECT takes the places as they are); a piece given back joins its free
// neighbours.
//
// Thread safety: none; callers serialise.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <unordered_map>

#include "tierflow/core/status.h"
#include "tierflow/real/storage.h"

namespace tierflow::real::exec {

class HostArena {
 public:
  HostArena() = default;
  // Over `bytes` of memory at `base` (kDirectAlignment-aligned), owned by the caller.
  HostArena(char* base, int64_t bytes) : base_(base), size_(bytes) {
    if (bytes > 0) free_[0] = bytes;
  }

  // A piece of at least `bytes`, or null when no free run is long enough.
  char* Take(int64_t bytes) {
    const int64_t need = AlignUp(std::max<int64_t>(bytes, 1), kDirectAlignment);
    auto it = free_.end();
    for (auto run = free_.begin(); run != free_.end(); ++run) {
      if (run->second >= need && (it == free_.end() || run->second < it->second)) it = run;
    }
    if (it != free_.end()) {
      const int64_t at = it->first, left = it->second - need;
      free_.erase(it);
      if (left > 0) free_[at + need] = left;
      taken_[at] = need;
      in_use_ += need;
      return base_ + at;
    }
    return nullptr;
  }
  // Back to the free runs (a piece Take returned).
  void Give(char* p) {
    const auto taken = taken_.find(p - base_);
    TF_CHECK(taken != taken_.end());  // a piece this arena did not hand out
    int64_t at = taken->first, length = taken->second;
    taken_.erase(taken);
    in_use_ -= length;
    auto next = free_.find(at + length);
    if (next != free_.end()) {
      length += next->second;
      free_.erase(next);
    }
    auto after = free_.lower_bound(at);
    if (after != free_.begin()) {
      auto before = std::prev(after);
      if (before->first + before->second == at) {
        before->second += length;
        return;
      }
    }
    free_[at] = length;
  }
  bool Holds(const char* p) const { return base_ != nullptr && p >= base_ && p < base_ + size_; }
  char* base() const { return base_; }
  int64_t size_bytes() const { return size_; }
  int64_t in_use_bytes() const { return in_use_; }

 private:
  char* base_ = nullptr;
  int64_t size_ = 0;
  int64_t in_use_ = 0;
  std::map<int64_t, int64_t> free_;             // offset -> length, no two adjacent
  std::unordered_map<int64_t, int64_t> taken_;  // offset -> length
};

}  // namespace tierflow::real::exec
