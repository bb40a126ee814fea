// TensorStore: named tensors on one or more devices — a directory per SSD, plus optional slower
// "remote" directories — laid out in ONE preallocated file per device (`<dir>/<store>.tfstore`)
// by an extent allocator, never a file per tensor. A manifest (`<store>.manifest.json` in the
// first device's directory) maps each tensor name to its extents (device, offset, length), size,
// dtype and CRC-32C; docs/storage.md gives its format.
//
// Placement is a policy: round-robin over the non-remote devices, weighted by each device's
// bandwidth (bytes go where they finish soonest), striped across all non-remote devices for
// tensors at or above a threshold, or an explicit device. Remote devices receive tensors only
// when named explicitly or when the local devices are full.
//
// Extents are padded to 4 KiB so that the store file can be opened O_DIRECT; a tensor of any
// byte size round-trips exactly: 4 KiB-aligned buffers are transferred in place and only the
// unaligned tail goes through an aligned bounce buffer; unaligned buffers go through a bounce
// buffer as a whole. Where a directory refuses O_DIRECT (tmpfs) the store file is opened
// buffered and `DeviceDirect(i)` says so.
//
// Errors name the tensor and the device ("put 'w.3': device 1 'nvme1': ..."); a read whose
// checksum does not match the manifest is DataLoss, never returned as data.
//
// Thread safety: Put/Get/Remove/Find/List/SaveManifest may be called concurrently from any
// number of threads (a Put and a Get of the same name at once see the old or the new tensor).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tierflow/core/status.h"
#include "tierflow/real/extent_allocator.h"
#include "tierflow/real/storage.h"

namespace tierflow::real {

struct StoreDevice {
  std::string name;              // "nvme0", "remote0"
  std::string dir;
  int64_t capacity_bytes = 0;    // size of the preallocated store file
  double bw_bytes_per_s = 1e9;   // weight for bandwidth-weighted placement (measured by probe)
  bool remote = false;
};

enum class PlacementPolicy : uint8_t { kRoundRobin, kWeighted, kStriped, kExplicit };
const char* PlacementPolicyName(PlacementPolicy p);
StatusOr<PlacementPolicy> PlacementPolicyFromName(const std::string& name);

struct Placement {
  PlacementPolicy policy = PlacementPolicy::kRoundRobin;
  int32_t device = -1;                           // kExplicit
  int64_t stripe_threshold_bytes = 64 << 20;     // kStriped: stripe tensors at least this large...
  int64_t stripe_bytes = 16 << 20;               // ... in pieces of this size (multiple of 4 KiB)
};

struct Extent {
  int32_t device = 0;
  int64_t offset_bytes = 0;  // in the device's store file, 4 KiB-aligned
  int64_t length_bytes = 0;  // tensor bytes in this extent (its reservation is rounded to 4 KiB)
  bool operator==(const Extent&) const = default;
};

struct TensorEntry {
  std::string name;
  std::string dtype;         // "bf16", "fp32", "u8", ... (not interpreted)
  int64_t size_bytes = 0;
  uint32_t crc32c = 0;
  // Striped tensors (more than one extent): stripe s of k lies in extent s % k at offset
  // (s / k) * stripe_bytes within it. 0 when the tensor is one extent.
  int64_t stripe_bytes = 0;
  std::vector<Extent> extents;
};

struct StoreOptions {
  std::string name = "tensors";
  Placement placement;       // the default for Put
  bool verify_on_read = true;
};

class TensorStore {
 public:
  // Creates the store files (preallocated to each device's capacity) and an empty manifest.
  // `storage` is not owned and must outlive the store.
  static StatusOr<std::unique_ptr<TensorStore>> Create(Storage* storage, std::vector<StoreDevice> devices,
                                                       const StoreOptions& options = {});
  // Opens the store described by `<dir>/<name>.manifest.json`.
  static StatusOr<std::unique_ptr<TensorStore>> Open(Storage* storage, const std::string& dir,
                                                     const std::string& name = "tensors");
  ~TensorStore();

  // Writes (or replaces) a tensor; `placement` overrides the store's default.
  Status Put(const std::string& name, const std::string& dtype, const void* data, int64_t size_bytes);
  Status Put(const std::string& name, const std::string& dtype, const void* data, int64_t size_bytes,
             const Placement& placement);
  // Reads a tensor into `data` (exactly its size_bytes, which `capacity_bytes` must cover).
  Status Get(const std::string& name, void* data, int64_t capacity_bytes);
  Status Remove(const std::string& name);
  StatusOr<TensorEntry> Find(const std::string& name) const;
  std::vector<TensorEntry> List() const;
  // Writes the manifest atomically (temporary name, fsync, rename, fsync directory).
  Status SaveManifest();

  const std::vector<StoreDevice>& devices() const { return devices_; }
  bool DeviceDirect(int32_t device) const { return direct_[device]; }
  int64_t DeviceUsedBytes(int32_t device) const;
  std::string manifest_path() const;

 private:
  TensorStore(Storage* storage, std::vector<StoreDevice> devices, StoreOptions options);
  Status OpenFiles(bool create);
  StatusOr<std::vector<Extent>> Place(const std::string& name, int64_t size_bytes, const Placement& p);
  void FreeExtents(const std::vector<Extent>& extents);
  std::string DeviceLabel(int32_t device) const;
  std::string StorePath(int32_t device) const;

  Storage* storage_;
  std::vector<StoreDevice> devices_;
  StoreOptions options_;
  std::vector<FileId> files_;
  std::vector<bool> direct_;
  mutable std::mutex mu_;
  std::vector<ExtentAllocator> allocators_;
  std::vector<int64_t> placed_bytes_;  // for weighted placement
  uint64_t round_robin_ = 0;
  std::map<std::string, TensorEntry> tensors_;
};

}  // namespace tierflow::real
