// A list of indices into a schedule's tables (a task's deps, the buffers it allocates, uses and
// frees, the tensors it names) that keeps up to kInline of them in place. Most such lists hold
// one to four: as std::vector each was an allocation, and planning the 70B quickstart made about
// a hundred thousand of them (docs/simulator.md "Where a command's time goes"). The interface is
// the part of std::vector's that schedules use; iterators are pointers.
//
// Thread safety: a value type.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <span>
#include <vector>

#include "tierflow/core/status.h"

namespace tierflow {

class IndexList {
 public:
  using value_type = int32_t;
  using size_type = size_t;
  using iterator = int32_t*;
  using const_iterator = const int32_t*;
  static constexpr uint32_t kInline = 4;

  IndexList() = default;
  IndexList(std::initializer_list<int32_t> items) { assign(items.begin(), items.end()); }
  // From a vector (NOLINT: a list is written as the vector it was before).
  IndexList(const std::vector<int32_t>& items) { assign(items.begin(), items.end()); }  // NOLINT(google-explicit-constructor)
  template <std::forward_iterator It>
  IndexList(It first, It last) {
    assign(first, last);
  }
  IndexList(const IndexList& o) { assign(o.begin(), o.end()); }
  IndexList(IndexList&& o) noexcept { Take(o); }
  IndexList& operator=(const IndexList& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  IndexList& operator=(IndexList&& o) noexcept {
    if (this != &o) {
      Release();
      Take(o);
    }
    return *this;
  }
  IndexList& operator=(std::initializer_list<int32_t> items) {
    assign(items.begin(), items.end());
    return *this;
  }
  ~IndexList() { Release(); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return capacity_; }
  int32_t* data() { return OnHeap() ? place_.heap : place_.items; }
  const int32_t* data() const { return OnHeap() ? place_.heap : place_.items; }
  iterator begin() { return data(); }
  iterator end() { return data() + size_; }
  const_iterator begin() const { return data(); }
  const_iterator end() const { return data() + size_; }
  int32_t& operator[](size_t i) { return data()[i]; }
  int32_t operator[](size_t i) const { return data()[i]; }
  int32_t& front() { return data()[0]; }
  int32_t front() const { return data()[0]; }
  int32_t& back() { return data()[size_ - 1]; }
  int32_t back() const { return data()[size_ - 1]; }
  operator std::span<const int32_t>() const { return {data(), size_}; }  // NOLINT(google-explicit-constructor)

  void clear() { size_ = 0; }
  void reserve(size_t n) {
    if (n > capacity_) Grow(n);
  }
  void push_back(int32_t v) {
    if (size_ == capacity_) Grow(size_t{capacity_} * 2);
    data()[size_++] = v;
  }
  void pop_back() { --size_; }
  template <std::forward_iterator It>
  void assign(It first, It last) {
    const auto n = static_cast<size_t>(std::distance(first, last));
    size_ = 0;
    reserve(n);
    std::copy(first, last, data());
    size_ = static_cast<uint32_t>(n);
  }
  // Inserts [first, last) before `pos`; returns where the first of them now is. [first, last)
  // must not lie in this list (growing would move it).
  template <std::forward_iterator It>
  iterator insert(const_iterator pos, It first, It last) {
    const size_t at = static_cast<size_t>(pos - data());
    const auto n = static_cast<size_t>(std::distance(first, last));
    if (size_ + n > capacity_) Grow(std::max(size_ + n, size_t{capacity_} * 2));
    int32_t* p = data();
    std::memmove(p + at + n, p + at, (size_ - at) * sizeof(int32_t));
    std::copy(first, last, p + at);
    size_ += static_cast<uint32_t>(n);
    return p + at;
  }
  iterator insert(const_iterator pos, int32_t v) { return insert(pos, &v, &v + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    int32_t* p = data();
    const size_t at = static_cast<size_t>(first - p), n = static_cast<size_t>(last - first);
    std::memmove(p + at, p + at + n, (size_ - at - n) * sizeof(int32_t));
    size_ -= static_cast<uint32_t>(n);
    return p + at;
  }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  void resize(size_t n, int32_t v = 0) {
    reserve(n);
    for (size_t i = size_; i < n; ++i) data()[i] = v;
    size_ = static_cast<uint32_t>(n);
  }

  friend bool operator==(const IndexList& a, const IndexList& b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }
  friend bool operator==(const IndexList& a, const std::vector<int32_t>& b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }

 private:
  bool OnHeap() const { return capacity_ > kInline; }
  void Grow(size_t n) {
    TF_CHECK(n <= UINT32_MAX);  // a task's list of four billion indices is a bug of its maker
    auto* fresh = new int32_t[n];
    std::memcpy(fresh, data(), size_ * sizeof(int32_t));
    Release();
    place_.heap = fresh;
    capacity_ = static_cast<uint32_t>(n);
  }
  void Release() {
    if (OnHeap()) delete[] place_.heap;
    capacity_ = kInline;
  }
  // Takes o's items (its heap block, or a copy of its inline ones) and leaves o empty.
  // Copies the whole place (the heap pointer or the inline items) at a fixed size: a move is a
  // few register moves, where a copy of size_ items was a call to memcpy.
  void Take(IndexList& o) {
    size_ = o.size_;
    capacity_ = o.capacity_;
    std::memcpy(static_cast<void*>(&place_), static_cast<const void*>(&o.place_), sizeof(place_));
    o.size_ = 0;
    o.capacity_ = kInline;
  }

  uint32_t size_ = 0, capacity_ = kInline;
  union Place {
    int32_t items[kInline];
    int32_t* heap;
  } place_;
};

}  // namespace tierflow
