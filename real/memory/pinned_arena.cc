#include "tierflow/real/pinned_arena.h"

#include <dlfcn.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "tierflow/real/io_memory.h"

namespace tierflow::real {
namespace {

constexpr int64_t kPage = 4096;
int64_t RoundUp(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

// The three CUDA runtime entry points we need, found at run time so that the arena builds and
// runs without CUDA and registers itself when a GPU is there.
using CudaGetDeviceCount = int (*)(int*);
using CudaHostRegister = int (*)(void*, size_t, unsigned);
using CudaHostUnregister = int (*)(void*);

// The CUDA runtime's registration of host memory, resolved once per process, where a runtime and
// a device are there (else null): CUDA 13, 12, then any runtime (dlopen returns the copy the
// process may already have loaded). Once, because arenas made on two threads at once (two ranks'
// checkpoints) each opening and closing the library raced inside the loader, as ThreadSanitizer
// saw it. The library then stays loaded: unloading a CUDA runtime mid-process is not safe.
struct CudaRuntime {
  CudaHostRegister host_register = nullptr;
  CudaHostUnregister host_unregister = nullptr;
};

const CudaRuntime& Cuda() {
  static const CudaRuntime runtime = [] {
    CudaRuntime r;
    void* lib = nullptr;
    for (const char* name : {"libcudart.so.13", "libcudart.so.12", "libcudart.so"}) {
      if (lib == nullptr) lib = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
    }
    if (lib == nullptr) return r;
    auto count_fn = reinterpret_cast<CudaGetDeviceCount>(::dlsym(lib, "cudaGetDeviceCount"));
    int count = 0;
    if (count_fn != nullptr && count_fn(&count) == 0 && count > 0) {
      r.host_register = reinterpret_cast<CudaHostRegister>(::dlsym(lib, "cudaHostRegister"));
      r.host_unregister = reinterpret_cast<CudaHostUnregister>(::dlsym(lib, "cudaHostUnregister"));
    } else {
      ::dlclose(lib);
    }
    return r;
  }();
  return runtime;
}

}  // namespace

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    pool_ = other.pool_;
    data_ = other.data_;
    size_bytes_ = other.size_bytes_;
    offset_ = other.offset_;
    other.pool_ = nullptr;
    other.data_ = nullptr;
    other.size_bytes_ = 0;
  }
  return *this;
}

void PinnedBuffer::Release() {
  if (pool_ != nullptr) pool_->Free(offset_, size_bytes_);
  pool_ = nullptr;
  data_ = nullptr;
  size_bytes_ = 0;
}

// ---- SlotPool ----

SlotPool::SlotPool(PinnedArena* arena, std::string name, char* base, int64_t slot_bytes, int64_t stride,
                   int64_t count)
    : PinnedPool(arena, std::move(name), base, stride * count), slot_bytes_(slot_bytes), stride_(stride) {
  for (int64_t i = count - 1; i >= 0; --i) free_.push_back(i);
}

StatusOr<PinnedBuffer> SlotPool::Acquire() {
  int64_t slot;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.empty()) {
      return ResourceExhausted("pinned slot pool '" + name_ + "': all " + std::to_string(in_use_slots_) +
                               " slots of " + std::to_string(slot_bytes_) + " bytes are in use");
    }
    slot = free_.back();
    free_.pop_back();
    ++in_use_slots_;
    peak_slots_ = std::max(peak_slots_, in_use_slots_);
  }
  arena_->AddInUse(stride_);
  return PinnedBuffer(this, base_ + slot * stride_, slot_bytes_, slot * stride_);
}

void SlotPool::Free(int64_t offset, int64_t) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(offset / stride_);
    --in_use_slots_;
  }
  arena_->AddInUse(-stride_);
}

PoolStats SlotPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return PoolStats{name_, capacity_bytes_, in_use_slots_ * stride_, peak_slots_ * stride_, in_use_slots_};
}

// ---- ExactPool ----

ExactPool::ExactPool(PinnedArena* arena, std::string name, char* base, int64_t capacity_bytes, int64_t alignment)
    : PinnedPool(arena, std::move(name), base, capacity_bytes), alignment_(alignment), runs_(capacity_bytes) {}

PinnedBuffer ExactPool::TryAllocate(int64_t size_bytes) {
  if (size_bytes <= 0) return PinnedBuffer();
  const int64_t footprint = RoundUp(size_bytes, alignment_);
  int64_t offset;
  {
    std::lock_guard<std::mutex> lock(mu_);
    offset = runs_.Take(footprint);
    if (offset < 0) return PinnedBuffer();
    in_use_ += footprint;
    peak_ = std::max(peak_, in_use_);
    ++live_;
  }
  arena_->AddInUse(footprint);
  return PinnedBuffer(this, base_ + offset, size_bytes, offset);
}

StatusOr<PinnedBuffer> ExactPool::Allocate(int64_t size_bytes) {
  if (size_bytes <= 0) return InvalidArgument("pinned pool '" + name_ + "': allocation of " + std::to_string(size_bytes) + " bytes");
  PinnedBuffer b = TryAllocate(size_bytes);
  if (!b.empty()) return b;
  std::lock_guard<std::mutex> lock(mu_);
  return ResourceExhausted("pinned pool '" + name_ + "': cannot allocate " + std::to_string(size_bytes) + " bytes (footprint " +
                           std::to_string(RoundUp(size_bytes, alignment_)) + "): " + std::to_string(in_use_) + " of " +
                           std::to_string(capacity_bytes_) + " bytes in use, largest free block " + std::to_string(runs_.largest()) +
                           " bytes");
}

void ExactPool::Free(int64_t offset, int64_t size_bytes) {
  const int64_t footprint = RoundUp(size_bytes, alignment_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    runs_.Give(offset, footprint);
    in_use_ -= footprint;
    --live_;
  }
  arena_->AddInUse(-footprint);
}

int64_t ExactPool::largest_free_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return runs_.largest();
}

PoolStats ExactPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return PoolStats{name_, capacity_bytes_, in_use_, peak_, live_};
}

// ---- PinnedArena ----

StatusOr<std::unique_ptr<PinnedArena>> PinnedArena::Create(int64_t budget_bytes, const ArenaOptions& options) {
  if (budget_bytes <= 0) return InvalidArgument("pinned arena budget must be positive, got " + std::to_string(budget_bytes));
  std::unique_ptr<PinnedArena> arena(new PinnedArena);
  arena->budget_bytes_ = RoundUp(budget_bytes, kPage);
  // I/O memory (io_memory.h): the arena's slots are the buffers of disk requests.
  void* p = AllocateIoMemory(arena->budget_bytes_, options.populate);
  if (p == nullptr) return ResourceExhausted("pinned arena: cannot map " + std::to_string(arena->budget_bytes_) + " bytes");
  arena->base_ = static_cast<char*>(p);
  if (options.lock) {
    if (::mlock(p, arena->budget_bytes_) == 0) {
      arena->locked_ = true;
    } else if (!options.allow_unlocked) {
      int err = errno;
      return ResourceExhausted("mlock pinned arena of " + std::to_string(arena->budget_bytes_) + " bytes: " +
                               std::strerror(err) + " (raise RLIMIT_MEMLOCK, `ulimit -l`, or run with CAP_IPC_LOCK)");
    }
  }
  if (options.cuda_register) {
    const CudaRuntime& cuda = Cuda();
    arena->cuda_registered_ = cuda.host_register != nullptr && cuda.host_register(p, static_cast<size_t>(arena->budget_bytes_), 0 /* cudaHostRegisterDefault */) == 0;
  }
  return arena;
}

PinnedArena::~PinnedArena() {
  pools_.clear();
  if (cuda_registered_ && Cuda().host_unregister != nullptr) Cuda().host_unregister(base_);
  FreeIoMemory(base_, budget_bytes_);
}

StatusOr<char*> PinnedArena::Reserve(const std::string& pool, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (reserved_ + bytes > budget_bytes_) {
    return ResourceExhausted("pinned arena: reserving " + std::to_string(bytes) + " bytes for pool '" + pool +
                             "' exceeds the budget: " + std::to_string(reserved_) + " of " +
                             std::to_string(budget_bytes_) + " bytes already reserved");
  }
  char* p = base_ + reserved_;
  reserved_ += bytes;
  return p;
}

StatusOr<SlotPool*> PinnedArena::CreateSlotPool(const std::string& name, int64_t slot_bytes, int64_t slot_count) {
  if (slot_bytes <= 0 || slot_count <= 0) return InvalidArgument("pinned slot pool '" + name + "': slot size and count must be positive");
  int64_t stride = RoundUp(slot_bytes, kPage);
  TF_ASSIGN_OR_RETURN(char* base, Reserve(name, stride * slot_count));
  auto* pool = new SlotPool(this, name, base, slot_bytes, stride, slot_count);
  std::lock_guard<std::mutex> lock(mu_);
  pools_.emplace_back(pool);
  return pool;
}

StatusOr<ExactPool*> PinnedArena::CreateExactPool(const std::string& name, int64_t capacity_bytes, int64_t alignment_bytes) {
  if (capacity_bytes <= 0) return InvalidArgument("pinned pool '" + name + "': capacity must be positive");
  if (alignment_bytes <= 0 || kPage % alignment_bytes != 0) {
    return InvalidArgument("pinned pool '" + name + "': alignment must divide 4096, got " + std::to_string(alignment_bytes));
  }
  int64_t cap = RoundUp(capacity_bytes, alignment_bytes);
  TF_ASSIGN_OR_RETURN(char* base, Reserve(name, RoundUp(cap, kPage)));
  auto* pool = new ExactPool(this, name, base, cap, alignment_bytes);
  std::lock_guard<std::mutex> lock(mu_);
  pools_.emplace_back(pool);
  return pool;
}

void PinnedArena::AddInUse(int64_t delta) {
  std::lock_guard<std::mutex> lock(mu_);
  in_use_ += delta;
  peak_ = std::max(peak_, in_use_);
}

ArenaStats PinnedArena::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  ArenaStats s{budget_bytes_, reserved_, in_use_, peak_, {}};
  for (auto& p : pools_) s.pools.push_back(p->stats());
  return s;
}

}  // namespace tierflow::real
