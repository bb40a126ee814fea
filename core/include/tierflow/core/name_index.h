// NameIndex: name -> position in a vector of named things (a schedule's tasks, buffers, tensors),
// without a second copy of the names. An open-addressing table of positions; each position's
// hash is kept beside it, so a lookup compares a name only on a full hash match and growing the
// table hashes nothing again. The vector stays the owner of the names: every call is given it,
// with a function that reads an item's name, so an index copied with its vector stays valid.
//
// A std::unordered_map<std::string, int32_t> allocated a node and a copy of the name per entry:
// building a 70B schedule spent a seventh of its time in those maps.
//
// Items keyed by something else than a name use the same table through FindHashed and AddHashed,
// with a hash of their own (Mix finishes one so that its low bits, the slot, depend on every bit).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "tierflow/core/status.h"

namespace tierflow {

class NameIndex {
 public:
  static constexpr int32_t kAbsent = -1;

  NameIndex() = default;
  NameIndex(const NameIndex&) = default;
  NameIndex& operator=(const NameIndex&) = default;
  // A moved-from index is empty, its count of placed positions too.
  NameIndex(NameIndex&& o) noexcept { *this = std::move(o); }
  NameIndex& operator=(NameIndex&& o) noexcept {
    hashes_ = std::exchange(o.hashes_, {});
    slots_ = std::exchange(o.slots_, {});
    placed_ = std::exchange(o.placed_, 0);
    return *this;
  }

  // The position of `name` in `items` (`name_of(items[i])` is item i's name), or kAbsent.
  template <typename Items, typename NameOf>
  int32_t Find(std::string_view name, const Items& items, NameOf name_of) const {
    return FindHashed(name, Hash(name), items, name_of);
  }

  // Records `name` at position items.size(), which the caller fills next (in this order: the
  // name is read from `name` until then). False, and nothing recorded, when `name` is present.
  template <typename Items, typename NameOf>
  bool Add(std::string_view name, const Items& items, NameOf name_of) {
    const uint64_t h = Hash(name);
    if (FindHashed(name, h, items, name_of) != kAbsent) return false;
    AddHashed(h);
    return true;
  }

  // The position of the item whose key (`key_of(items[i])`) equals `key`, whose hash is `h`; or
  // kAbsent.
  template <typename Key, typename Items, typename KeyOf>
  int32_t FindHashed(const Key& key, uint64_t h, const Items& items, KeyOf key_of) const {
    if (slots_.empty()) return kAbsent;
    const size_t mask = slots_.size() - 1;
    for (size_t s = h & mask;; s = (s + 1) & mask) {
      const int32_t i = slots_[s];
      if (i == kAbsent) return kAbsent;
      if (hashes_[static_cast<size_t>(i)] == h && key_of(items[static_cast<size_t>(i)]) == key) return i;
    }
  }

  // Records the next position (the number recorded so far) under hash `h`; the caller has found
  // its key absent, and nothing is pending.
  void AddHashed(uint64_t h) {
    TF_CHECK(placed_ == hashes_.size());  // a pending position would be placed under this hash
    hashes_.push_back(h);
    PlaceNext();
  }

  // Records `name` at the next position without placing it in the table: Find sees it only once
  // PlacePending has run. The name is hashed now, while the caller has it in cache, and the
  // table written later, in one batch while it is in cache (Schedule::DeferNameIndexes).
  void AddPending(std::string_view name) { hashes_.push_back(Hash(name)); }

  // Places the pending positions in order, each checked against those placed before it; false
  // at the first whose name is present already (it and those after it stay pending).
  template <typename Items, typename NameOf>
  bool PlacePending(const Items& items, NameOf name_of) {
    Reserve(hashes_.size());
    while (placed_ < hashes_.size()) {
      const size_t i = placed_;
      if (FindHashed(name_of(items[i]), hashes_[i], items, name_of) != kAbsent) return false;
      PlaceNext();
    }
    return true;
  }

  // Room for `entries` positions without a rebuild.
  void Reserve(size_t entries) {
    hashes_.reserve(entries);
    if (entries * 2 > slots_.size()) Rebuild(entries);
  }

  // murmur3's finaliser: every bit of `h` reaches the low bits.
  static uint64_t Mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 33;
    return h;
  }

 private:
  // Eight bytes at a time, then murmur3's finaliser so that the low bits (the slot) depend on
  // every byte. Names are short and differ in a few digits ("d2h.grad.layers.12.mlp.r3"); inline,
  // where std::hash<std::string_view> was a call into libstdc++'s _Hash_bytes, 5 % of planning
  // the quickstart's instructions (now about half that).
  static uint64_t Hash(std::string_view name) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ name.size();
    size_t i = 0;
    for (; i + 8 <= name.size(); i += 8) {
      uint64_t word;
      std::memcpy(&word, name.data() + i, 8);
      h = (h ^ word) * 0xFF51AFD7ED558CCDull;
      h ^= h >> 32;
    }
    uint64_t tail = 0;  // the last 1 to 7 bytes: the name's last eight where it has eight
    if (i < name.size() && name.size() >= 8) {
      std::memcpy(&tail, name.data() + name.size() - 8, 8);
    } else {
      for (size_t k = 0; i + k < name.size(); ++k) tail |= uint64_t{static_cast<unsigned char>(name[i + k])} << (8 * k);
    }
    return Mix(h ^ tail);
  }

  void Place(size_t i) {
    const size_t mask = slots_.size() - 1;
    size_t s = hashes_[i] & mask;
    while (slots_[s] != kAbsent) s = (s + 1) & mask;
    slots_[s] = static_cast<int32_t>(i);
  }

  // Places position placed_, growing the table first when that would fill it past half.
  void PlaceNext() {
    ++placed_;
    if (placed_ * 2 > slots_.size()) {
      Rebuild();
    } else {
      Place(placed_ - 1);
    }
  }

  // The smallest power of two of slots (16 at least) that holds four per entry (of `entries`, at
  // least those placed): a quarter full after, half full at most before the next rebuild.
  void Rebuild(size_t entries = 0) {
    size_t n = 16;
    while (n < std::max(entries, placed_) * 4) n *= 2;
    slots_.assign(n, kAbsent);
    for (size_t i = 0; i < placed_; ++i) Place(i);
  }

  std::vector<uint64_t> hashes_;  // per position, pending ones included
  std::vector<int32_t> slots_;    // a power of two of them; kAbsent where empty
  size_t placed_ = 0;             // positions below it are in slots_; the rest pending
};

}  // namespace tierflow
