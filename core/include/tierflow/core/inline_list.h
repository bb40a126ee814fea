// InlineList<T, N>: a list that keeps up to N items in place and moves to the heap beyond,
// for the short lists a schedule holds by the hundred thousand. IndexList is a task's list of
// indices into a schedule's tables (its deps, the buffers it allocates, uses and frees, the
// tensors it names): most hold one to four, and as std::vector each was an allocation, about a
// hundred thousand planning the 70B quickstart (docs/simulator.md "Where a command's time
// goes"). A tensor's shape and a task's carried deps hold one or two. Each is the size of the
// std::vector it replaced (24 bytes). The interface is the part of std::vector's that schedules
// use; iterators are pointers. T is copied as bytes (trivially copyable).
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
#include <type_traits>
#include <vector>

#include "tierflow/core/status.h"

namespace tierflow {

template <typename T, uint32_t N>
class InlineList {
  static_assert(std::is_trivially_copyable_v<T> && N * sizeof(T) >= sizeof(T*));

 public:
  using value_type = T;
  using size_type = size_t;
  using iterator = T*;
  using const_iterator = const T*;
  static constexpr uint32_t kInline = N;

  InlineList() = default;
  InlineList(std::initializer_list<T> items) { assign(items.begin(), items.end()); }
  // From a vector (NOLINT: a list is written as the vector it was before).
  InlineList(const std::vector<T>& items) { assign(items.begin(), items.end()); }  // NOLINT(google-explicit-constructor)
  template <std::forward_iterator It>
  InlineList(It first, It last) {
    assign(first, last);
  }
  InlineList(const InlineList& o) { assign(o.begin(), o.end()); }
  InlineList(InlineList&& o) noexcept { Take(o); }
  InlineList& operator=(const InlineList& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  InlineList& operator=(InlineList&& o) noexcept {
    if (this != &o) {
      Release();
      Take(o);
    }
    return *this;
  }
  InlineList& operator=(std::initializer_list<T> items) {
    assign(items.begin(), items.end());
    return *this;
  }
  ~InlineList() { Release(); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return capacity_; }
  T* data() { return OnHeap() ? place_.heap : place_.items; }
  const T* data() const { return OnHeap() ? place_.heap : place_.items; }
  iterator begin() { return data(); }
  iterator end() { return data() + size_; }
  const_iterator begin() const { return data(); }
  const_iterator end() const { return data() + size_; }
  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }
  T& front() { return data()[0]; }
  const T& front() const { return data()[0]; }
  T& back() { return data()[size_ - 1]; }
  const T& back() const { return data()[size_ - 1]; }
  operator std::span<const T>() const { return {data(), size_}; }  // NOLINT(google-explicit-constructor)

  void clear() { size_ = 0; }
  void reserve(size_t n) {
    if (n > capacity_) Grow(n);
  }
  // By value, as insert and resize take it: `v` may be an item of this list, which growing moves.
  void push_back(T v) {
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
    T* p = data();
    std::memmove(static_cast<void*>(p + at + n), static_cast<const void*>(p + at), (size_ - at) * sizeof(T));
    std::copy(first, last, p + at);
    size_ += static_cast<uint32_t>(n);
    return p + at;
  }
  iterator insert(const_iterator pos, T v) { return insert(pos, &v, &v + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    T* p = data();
    const size_t at = static_cast<size_t>(first - p), n = static_cast<size_t>(last - first);
    std::memmove(static_cast<void*>(p + at), static_cast<const void*>(p + at + n), (size_ - at - n) * sizeof(T));
    size_ -= static_cast<uint32_t>(n);
    return p + at;
  }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  void resize(size_t n, T v = T{}) {
    reserve(n);
    for (size_t i = size_; i < n; ++i) data()[i] = v;
    size_ = static_cast<uint32_t>(n);
  }

  friend bool operator==(const InlineList& a, const InlineList& b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }
  friend bool operator==(const InlineList& a, const std::vector<T>& b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }

 private:
  bool OnHeap() const { return capacity_ > kInline; }
  void Grow(size_t n) {
    TF_CHECK(n <= UINT32_MAX);  // a task's list of four billion indices is a bug of its maker
    auto* fresh = new T[n];
    std::memcpy(static_cast<void*>(fresh), static_cast<const void*>(data()), size_ * sizeof(T));
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
  void Take(InlineList& o) {
    size_ = o.size_;
    capacity_ = o.capacity_;
    std::memcpy(static_cast<void*>(&place_), static_cast<const void*>(&o.place_), sizeof(place_));
    o.size_ = 0;
    o.capacity_ = kInline;
  }

  uint32_t size_ = 0, capacity_ = kInline;
  union Place {
    Place() : heap(nullptr) {}  // items left as they are: none is live until size_ says so
    T items[N];
    T* heap;
  } place_;
};

using IndexList = InlineList<int32_t, 4>;

}  // namespace tierflow
