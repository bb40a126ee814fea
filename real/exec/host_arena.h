// One pool's host memory, mapped once, from which its buffers are cut: the executor makes one
// per host pool of the schedule at set-up (Run::MakeHostArenas), as large as the pool's buffers
// can hold at once, so that no task waits mid-run on the dispatch thread for fresh memory to be
// mapped and faulted in.
// Best fit (the shortest free run that holds it, the lowest such), each piece rounded up to
// kDirectAlignment (O_DIRECT takes the places as they are); a piece given back joins its free
// neighbours. Both take O(log n) in the free runs (kept by offset and by length).
//
// Thread safety: none; callers serialise.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>

#include "tierflow/core/status.h"
#include "tierflow/real/storage.h"

namespace tierflow::real::exec {

class HostArena {
 public:
  HostArena() = default;
  // Over `bytes` of memory at `base` (kDirectAlignment-aligned), owned by the caller.
  HostArena(char* base, int64_t bytes) : base_(base), size_(bytes) {
    if (bytes > 0) AddRun(0, bytes);
  }

  // A piece of at least `bytes`, or null when no free run is long enough.
  char* Take(int64_t bytes) {
    const int64_t need = AlignUp(std::max<int64_t>(bytes, 1), kDirectAlignment);
    const auto fit = by_length_.lower_bound({need, 0});  // the shortest that holds it, the lowest such
    if (fit == by_length_.end()) return nullptr;
    const auto [length, at] = *fit;
    RemoveRun(at, length);
    if (length > need) AddRun(at + need, length - need);
    taken_[at] = need;
    in_use_ += need;
    return base_ + at;
  }
  // Back to the free runs (a piece Take returned).
  void Give(char* p) {
    const auto taken = taken_.find(p - base_);
    TF_CHECK(taken != taken_.end());  // a piece this arena did not hand out
    int64_t at = taken->first, length = taken->second;
    taken_.erase(taken);
    in_use_ -= length;
    const auto next = free_.find(at + length);
    if (next != free_.end()) {
      const int64_t next_length = next->second;
      RemoveRun(at + length, next_length);
      length += next_length;
    }
    const auto after = free_.lower_bound(at);
    if (after != free_.begin()) {
      const auto before = std::prev(after);
      if (before->first + before->second == at) {
        const int64_t before_at = before->first, before_length = before->second;
        RemoveRun(before_at, before_length);
        at = before_at;
        length += before_length;
      }
    }
    AddRun(at, length);
  }
  bool Holds(const char* p) const { return base_ != nullptr && p >= base_ && p < base_ + size_; }
  char* base() const { return base_; }
  int64_t size_bytes() const { return size_; }
  int64_t in_use_bytes() const { return in_use_; }

 private:
  char* base_ = nullptr;
  int64_t size_ = 0;
  int64_t in_use_ = 0;
  void AddRun(int64_t at, int64_t length) {
    free_[at] = length;
    by_length_.insert({length, at});
  }
  void RemoveRun(int64_t at, int64_t length) {
    free_.erase(at);
    by_length_.erase({length, at});
  }

  std::map<int64_t, int64_t> free_;                 // offset -> length, no two adjacent
  std::set<std::pair<int64_t, int64_t>> by_length_;  // the same runs as (length, offset)
  std::unordered_map<int64_t, int64_t> taken_;      // offset -> length
};

}  // namespace tierflow::real::exec
