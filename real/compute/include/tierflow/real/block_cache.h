// Blocks kept per size for reuse. A schedule allocates the same buffer sizes every iteration;
// fresh allocations would be page-faulted in every time (host memory) or synchronise the GPU
// (cudaMalloc, cudaFree). The executor keeps the host buffers its pools' arena has no room for in
// one (the rest are cut from the arena, pinned_arena.h), and each compute device
// its gpu0 memory. Counts the bytes of blocks taken and not given back ("allocated", as PyTorch's
// caching allocator says), of those and the free ones ("reserved"), and their peaks; a limit on
// the reserved bytes frees the free blocks before a fresh one would pass it.
//
// Thread safety: none; callers serialise.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tierflow/core/status.h"

namespace tierflow::real {

class BlockCache {
 public:
  // new_block: a fresh block of `bytes` (>= 1), or null when there is no room; release: frees one
  // for good (the block and the size it was made with).
  BlockCache(std::function<void*(int64_t)> new_block, std::function<void(void*, int64_t)> release)
      : new_block_(std::move(new_block)), release_(std::move(release)) {}
  // Releases the free blocks; blocks still taken are the caller's to Release first.
  ~BlockCache() {
    for (auto& [bytes, blocks] : free_) {
      for (void* b : blocks) release_(b, bytes);
    }
  }
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // A block of `bytes`: a free one of that size, else a fresh one; null when none can be had.
  void* Take(int64_t bytes) {
    bytes = std::max<int64_t>(bytes, 1);
    void* b = nullptr;
    auto& blocks = free_[bytes];
    if (!blocks.empty()) {
      b = blocks.back();
      blocks.pop_back();
    } else {
      if (reserved_ + bytes > limit_) Trim();
      b = new_block_(bytes);
      if (b == nullptr) {
        // Room may be held by free blocks of other sizes: give them back and try once more.
        Trim();
        b = new_block_(bytes);
        if (b == nullptr) return nullptr;
      }
      reserved_ += bytes;
      made_ += bytes;
      peak_reserved_ = std::max(peak_reserved_, reserved_);
    }
    size_of_[b] = bytes;
    in_use_ += bytes;
    peak_ = std::max(peak_, in_use_);
    return b;
  }
  // Back to the free blocks (a block Take returned; null is ignored).
  void Give(void* b) {
    if (b == nullptr) return;
    const int64_t bytes = Untake(b);
    free_[bytes].push_back(b);
  }
  // Freed for good (a block Take returned; null is ignored).
  void Release(void* b) {
    if (b == nullptr) return;
    const int64_t bytes = Untake(b);
    reserved_ -= bytes;
    release_(b, bytes);
  }
  // Frees every free block for good.
  void Trim() {
    for (auto& [bytes, blocks] : free_) {
      for (void* b : blocks) release_(b, bytes);
      reserved_ -= bytes * static_cast<int64_t>(blocks.size());
      blocks.clear();
    }
  }
  // Fresh blocks are made only after the free ones are freed when they would take the reserved
  // bytes past `bytes` (blocks in use can still take it past: the limit is not an allocator's
  // refusal).
  void set_limit(int64_t bytes) { limit_ = bytes; }

  int64_t in_use_bytes() const { return in_use_; }
  int64_t peak_bytes() const { return peak_; }
  int64_t reserved_bytes() const { return reserved_; }
  int64_t peak_reserved_bytes() const { return peak_reserved_; }
  // Bytes of every fresh block made so far (new_block), kept or freed since.
  int64_t made_bytes() const { return made_; }

 private:
  int64_t Untake(void* b) {
    auto it = size_of_.find(b);
    TF_CHECK(it != size_of_.end());  // a block this cache did not hand out
    const int64_t bytes = it->second;
    size_of_.erase(it);
    in_use_ -= bytes;
    return bytes;
  }

  std::function<void*(int64_t)> new_block_;
  std::function<void(void*, int64_t)> release_;
  std::map<int64_t, std::vector<void*>> free_;
  std::unordered_map<void*, int64_t> size_of_;  // blocks taken
  int64_t in_use_ = 0, peak_ = 0;
  int64_t reserved_ = 0, peak_reserved_ = 0;
  int64_t made_ = 0;
  int64_t limit_ = std::numeric_limits<int64_t>::max();
};

}  // namespace tierflow::real
