// PinnedArena: the pinned host memory of the real executor — one page-locked, 4 KiB-aligned
// mapping of a fixed budget, registered with CUDA (cudaHostRegister, found at run time) when a GPU
// is present, and carved into pools, as the schedule's pools describe:
//
//  - a SlotPool: `slot_count` slots of exactly `slot_bytes` each (DeepSpeed-style buffers);
//  - an ExactPool: a capacity from which blocks of any size are allocated (MemAscend-style),
//    best fit with coalescing free (free_runs.h); no power-of-two rounding — a block's footprint
//    is its size rounded up to the pool's alignment (4 KiB by default, so O_DIRECT can use it).
//
// It is the one allocator of tierflow's pinned host pools: the checkpoints' staging slots, and
// the executor's host pools (an ExactPool per pool of the schedule, in one arena made at set-up,
// registered with the GPU through the run's compute device). What else the executor maps (a
// buffer its pool's arena has no room for, gpu0's memory where it is emulated) comes from the
// block cache (block_cache.h).
//
// Accounting is exact and in bytes: the arena's `reserved` is the sum of its pools' capacities;
// a pool's `in_use` the sum of live footprints, `peak` the largest `in_use` ever seen; the arena's
// in_use/peak are the same over all pools together. Exceeding a budget (reserving beyond the
// arena, allocating beyond a pool, acquiring a slot when none is free) returns ResourceExhausted
// naming the pool, the request and the accounting — it never allocates.
//
// Thread safety: all methods of PinnedArena, SlotPool and ExactPool are thread-safe. A
// PinnedBuffer is a move-only handle; destroying it returns its bytes to its pool. Pools must be
// destroyed (or outlive no buffers) before the arena; the arena owns its pools.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tierflow/core/status.h"
#include "tierflow/real/free_runs.h"

namespace tierflow::real {

class PinnedPool;

// A block of pinned memory; returns itself to its pool when destroyed.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(PinnedBuffer&& other) noexcept { *this = std::move(other); }
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() { Release(); }

  void* data() const { return data_; }
  char* bytes() const { return static_cast<char*>(data_); }
  int64_t size_bytes() const { return size_bytes_; }
  bool empty() const { return data_ == nullptr; }
  // Returns the memory to its pool now.
  void Release();

 private:
  friend class SlotPool;
  friend class ExactPool;
  PinnedBuffer(PinnedPool* pool, void* data, int64_t size_bytes, int64_t offset)
      : pool_(pool), data_(data), size_bytes_(size_bytes), offset_(offset) {}
  PinnedPool* pool_ = nullptr;
  void* data_ = nullptr;
  int64_t size_bytes_ = 0;
  int64_t offset_ = 0;  // within the pool
};

struct PoolStats {
  std::string name;
  int64_t capacity_bytes = 0;
  int64_t in_use_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t allocations = 0;  // live blocks
};

class PinnedArena;

class PinnedPool {
 public:
  virtual ~PinnedPool() = default;
  virtual PoolStats stats() const = 0;
  const std::string& name() const { return name_; }

 protected:
  friend class PinnedBuffer;
  PinnedPool(PinnedArena* arena, std::string name, char* base, int64_t capacity_bytes)
      : arena_(arena), name_(std::move(name)), base_(base), capacity_bytes_(capacity_bytes) {}
  virtual void Free(int64_t offset, int64_t size_bytes) = 0;
  PinnedArena* arena_;
  std::string name_;
  char* base_;
  int64_t capacity_bytes_;
};

class SlotPool final : public PinnedPool {
 public:
  // A free slot, or ResourceExhausted when all `slot_count` are in use.
  StatusOr<PinnedBuffer> Acquire();
  PoolStats stats() const override;
  int64_t slot_bytes() const { return slot_bytes_; }
  int64_t slot_count() const { return static_cast<int64_t>(free_.size()) + in_use_slots_; }

 private:
  friend class PinnedArena;
  SlotPool(PinnedArena* arena, std::string name, char* base, int64_t slot_bytes, int64_t stride, int64_t count);
  void Free(int64_t offset, int64_t size_bytes) override;
  int64_t slot_bytes_;
  int64_t stride_;
  mutable std::mutex mu_;
  std::vector<int64_t> free_;  // slot indices
  int64_t in_use_slots_ = 0;
  int64_t peak_slots_ = 0;
};

class ExactPool final : public PinnedPool {
 public:
  // A block of exactly `size_bytes` (footprint rounded to the alignment), or ResourceExhausted.
  StatusOr<PinnedBuffer> Allocate(int64_t size_bytes);
  // The same, empty when the pool has no room (for callers with somewhere else to go).
  PinnedBuffer TryAllocate(int64_t size_bytes);
  PoolStats stats() const override;
  int64_t alignment_bytes() const { return alignment_; }
  int64_t largest_free_bytes() const;

 private:
  friend class PinnedArena;
  ExactPool(PinnedArena* arena, std::string name, char* base, int64_t capacity_bytes, int64_t alignment);
  void Free(int64_t offset, int64_t size_bytes) override;
  int64_t alignment_;
  mutable std::mutex mu_;
  FreeRuns runs_;
  int64_t in_use_ = 0;
  int64_t peak_ = 0;
  int64_t live_ = 0;
};

struct ArenaOptions {
  bool lock = true;             // mlock the mapping
  bool populate = true;         // fault it in now (else where first touched; mlock faults it anyway)
  bool allow_unlocked = false;  // when mlock fails: continue unlocked (locked() == false) instead of failing
  bool cuda_register = true;    // cudaHostRegister when libcudart and a GPU are present
};

struct ArenaStats {
  int64_t budget_bytes = 0;
  int64_t reserved_bytes = 0;
  int64_t in_use_bytes = 0;
  int64_t peak_bytes = 0;
  std::vector<PoolStats> pools;
};

class PinnedArena {
 public:
  // Maps `budget_bytes` (rounded up to 4 KiB). Fails with ResourceExhausted when the memory
  // cannot be locked (unless allow_unlocked), naming RLIMIT_MEMLOCK.
  static StatusOr<std::unique_ptr<PinnedArena>> Create(int64_t budget_bytes, const ArenaOptions& options = {});
  ~PinnedArena();

  // Reserves `slot_count` slots of `slot_bytes` (each slot starts 4 KiB-aligned; the reservation
  // is slot_count × slot_bytes rounded up to 4 KiB per slot).
  StatusOr<SlotPool*> CreateSlotPool(const std::string& name, int64_t slot_bytes, int64_t slot_count);
  // Reserves `capacity_bytes` (rounded up to `alignment_bytes`) for exact-size blocks.
  StatusOr<ExactPool*> CreateExactPool(const std::string& name, int64_t capacity_bytes,
                                       int64_t alignment_bytes = 4096);

  ArenaStats stats() const;
  void* base() const { return base_; }
  int64_t budget_bytes() const { return budget_bytes_; }
  bool locked() const { return locked_; }
  bool cuda_registered() const { return cuda_registered_; }

 private:
  friend class SlotPool;
  friend class ExactPool;
  PinnedArena() = default;
  StatusOr<char*> Reserve(const std::string& pool, int64_t bytes);
  void AddInUse(int64_t delta);  // called by pools

  char* base_ = nullptr;
  int64_t budget_bytes_ = 0;
  bool locked_ = false;
  bool cuda_registered_ = false;
  mutable std::mutex mu_;
  int64_t reserved_ = 0;
  int64_t in_use_ = 0;
  int64_t peak_ = 0;
  std::vector<std::unique_ptr<PinnedPool>> pools_;
};

}  // namespace tierflow::real
