// The free runs of one span of memory, as offsets and lengths: where an exact-size host pool cuts
// its pieces (pinned_arena.h's ExactPool: the executor's host pools, made once at a run's set-up).
// Best fit: a piece goes to the shortest free run that holds it, the lowest such; a piece given
// back joins its free neighbours. Both take O(log n) in the free runs (kept by offset and by
// length). The caller rounds lengths to its alignment.
//
// Thread safety: none; callers serialise.
#pragma once

#include <cstdint>
#include <iterator>
#include <map>
#include <set>
#include <utility>

#include "tierflow/core/status.h"

namespace tierflow::real {

class FreeRuns {
 public:
  // One free run of `length` (none when 0).
  explicit FreeRuns(int64_t length = 0) {
    if (length > 0) Add(0, length);
  }

  // The offset of a piece of `length` (> 0), or -1 when no free run is that long.
  int64_t Take(int64_t length) {
    const auto fit = by_length_.lower_bound({length, 0});  // the shortest that holds it, the lowest such
    if (fit == by_length_.end()) return -1;
    const auto [run, at] = *fit;
    Remove(at, run);
    if (run > length) Add(at + length, run - length);
    return at;
  }
  // Back to the free runs: a piece Take returned, [at, at + length), whole.
  void Give(int64_t at, int64_t length) {
    const auto next = free_.find(at + length);
    if (next != free_.end()) {
      const int64_t next_length = next->second;
      Remove(at + length, next_length);
      length += next_length;
    }
    const auto after = free_.lower_bound(at);
    if (after != free_.begin()) {
      const auto before = std::prev(after);
      TF_CHECK(before->first + before->second <= at);  // a piece that overlaps a free run: given twice
      if (before->first + before->second == at) {
        const int64_t before_at = before->first, before_length = before->second;
        Remove(before_at, before_length);
        at = before_at;
        length += before_length;
      }
    }
    Add(at, length);
  }
  // The longest free run (0 when none).
  int64_t largest() const { return by_length_.empty() ? 0 : by_length_.rbegin()->first; }

 private:
  void Add(int64_t at, int64_t length) {
    free_[at] = length;
    by_length_.insert({length, at});
  }
  void Remove(int64_t at, int64_t length) {
    free_.erase(at);
    by_length_.erase({length, at});
  }

  std::map<int64_t, int64_t> free_;                 // offset -> length, no two adjacent
  std::set<std::pair<int64_t, int64_t>> by_length_;  // the same runs as (length, offset)
};

}  // namespace tierflow::real
