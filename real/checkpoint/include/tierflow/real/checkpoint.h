// Checkpoint save and restore of a set of tensors (per-rank shards) over one or more directories.
//
// Strategies:
//  - aggregated (default): one file per rank per device; tensors at `align_bytes`-aligned offsets;
//    the byte stream is staged through pinned buffers and written as large coalesced O_DIRECT
//    requests (through io_uring when the storage is the io_uring back-end) while the next buffer
//    is filled and checksummed.
//  - file-per-tensor: one buffered file per tensor, the common baseline (torch.save-like).
//
// Atomicity (docs/storage.md): every save is a new generation g. Data goes to temporary names
// (`<name>-g<g>....tmp`), is fsynced, renamed to its final name and its directory fsynced; then
// the manifest is written to `<name>.manifest.json.tmp`, fsynced, and renamed over
// `<name>.manifest.json` (the commit point), and the directory fsynced; only then are the
// previous generation's files removed. A crash at any point therefore leaves either the previous
// or the new checkpoint loadable; leftovers of an interrupted save are removed by the next save.
// Loading verifies every tensor's CRC-32C and names the tensor, file and device on a mismatch.
//
// Thread safety: a save or load runs on the calling thread (plus the storage's own threads);
// concurrent saves to the same directories and name are not supported.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tierflow/core/status.h"
#include "tierflow/real/pinned_arena.h"
#include "tierflow/real/storage.h"

namespace tierflow::real {

enum class CheckpointStrategy : uint8_t { kAggregated, kFilePerTensor };
const char* CheckpointStrategyName(CheckpointStrategy s);
StatusOr<CheckpointStrategy> CheckpointStrategyFromName(const std::string& name);

struct CheckpointTensor {
  std::string name;
  std::string dtype = "u8";
  int32_t rank = 0;
  const void* data = nullptr;  // save: the tensor's bytes
  int64_t size_bytes = 0;
};

struct CheckpointOptions {
  std::vector<std::string> dirs;          // one per device; the manifest lives in dirs[0]
  std::string name = "ckpt";
  CheckpointStrategy strategy = CheckpointStrategy::kAggregated;
  int64_t align_bytes = 4096;             // aggregated: tensor offsets in a file
  // aggregated: data files go O_DIRECT (where the file system allows it; padded to whole 4 KiB
  // blocks) or, false, through the page cache (exact lengths). Save and load alike.
  bool direct = true;
  // aggregated save: the byte stream goes out in staging-sized requests, small tensors packed
  // together; false: every tensor is its own request(s) (the uncoalesced small writes of a
  // framework that writes tensor by tensor). Uncoalesced O_DIRECT needs align_bytes a multiple of
  // 4 KiB (each request starts a tensor). Loads always read whole staging-sized chunks.
  bool coalesce = true;
  int64_t staging_bytes = 32 << 20;       // aggregated: size of one staging buffer
  int32_t staging_buffers = 4;            // aggregated: buffers in flight + the one being filled
  // Optional: staging slots kept across saves and loads (as a training job keeps its pinned
  // buffers); then staging_bytes is the pool's slot size and up to staging_buffers slots are used.
  // Default (nullptr): a fresh pinned arena per call.
  SlotPool* staging = nullptr;
  // Load: only this rank's tensors, and only the files that hold them, are read (-1: every rank's).
  int32_t rank = -1;
};

struct CheckpointStats {
  int64_t generation = 0;
  int64_t tensors = 0;
  int64_t bytes = 0;          // tensor payload
  int64_t file_bytes = 0;     // bytes written or read including padding
  int64_t files = 0;
  int64_t requests = 0;       // data I/O requests issued (aggregated; file-per-tensor: files)
  double duration_s = 0;
  bool direct = false;        // whether O_DIRECT was in effect for the data files
};

// An entry of a saved checkpoint's manifest.
struct CheckpointEntry {
  std::string name;
  std::string dtype;
  int32_t rank = 0;
  int64_t size_bytes = 0;
  uint32_t crc32c = 0;
  int32_t device = 0;
  std::string file;           // file name inside dirs[device]
  int64_t offset_bytes = 0;
};

StatusOr<CheckpointStats> SaveCheckpoint(Storage& storage, const std::vector<CheckpointTensor>& tensors,
                                         const CheckpointOptions& options);

// Returns where to put a tensor's bytes (at least size_bytes), or nullptr to skip it (its bytes
// are still checked when its file is read for another tensor).
using CheckpointSink = std::function<void*(const CheckpointEntry&)>;
// Loads the committed checkpoint `options.name` (the strategy is read from its manifest).
StatusOr<CheckpointStats> LoadCheckpoint(Storage& storage, const CheckpointOptions& options, const CheckpointSink& sink);
// A checkpoint saved by several processes, one or more ranks each (a run under mpirun): every
// process writes its own ranks' shard (SaveCheckpointShard: their files, synced and under their
// final names, but listed in no manifest yet), and one of them then commits every shard in one
// manifest (CommitCheckpoint), the save's one commit point. A process killed before the commit
// leaves the previous checkpoint the committed one; the files of a save that never committed are
// removed by the next commit. The processes agree on the generation: each reads the committed
// one (NextCheckpointGeneration) before any of them can commit again, and each save adds the
// same count to it (tierflow run: the iterations done); a commit leaves later generations' files
// alone (a save under way). The directories are shared: every process sees the one manifest.
struct CheckpointShard {
  int64_t generation = 0;
  std::vector<CheckpointEntry> entries;
  std::vector<std::pair<int32_t, std::string>> files;  // (device, name inside dirs[device])
  CheckpointStats stats;                               // this shard's (files, bytes, requests, time)
};
StatusOr<int64_t> NextCheckpointGeneration(Storage& storage, const CheckpointOptions& options);
// Aggregated only (file-per-tensor's generation directory is one per device, not per process).
StatusOr<CheckpointShard> SaveCheckpointShard(Storage& storage, const std::vector<CheckpointTensor>& tensors,
                                              const CheckpointOptions& options, int64_t generation);
// Every shard of one generation, committed; a failed commit removes that generation's files.
Status CommitCheckpoint(Storage& storage, const CheckpointOptions& options, const std::vector<CheckpointShard>& shards);
// A shard's entries and files as text, to hand it to the committing process; read back with every
// field checked (DataLoss naming the field) against `devices` directories.
std::string CheckpointShardToJson(const CheckpointShard& shard);
StatusOr<CheckpointShard> CheckpointShardFromJson(const std::string& text, int32_t devices);

// The committed manifest's entries.
StatusOr<std::vector<CheckpointEntry>> ReadCheckpointManifest(Storage& storage, const CheckpointOptions& options);
// Drops the committed checkpoint's files from the page cache (for cold-read measurements).
Status DropCheckpointCache(Storage& storage, const CheckpointOptions& options);
// Removes the committed checkpoint, its manifest and any leftovers of interrupted saves.
Status RemoveCheckpoint(Storage& storage, const CheckpointOptions& options);

// The default tensor set when no model preset is given: a size distribution dominated (in count)
// by small tensors — per rank, `small_count` tensors log-uniform in [4 KiB, 256 KiB] with
// non-aligned sizes, plus `large_count` tensors uniform in [16 MiB, 64 MiB] — seeded, so every
// run saves the same set. Returns (name, size) pairs for rank `rank`.
struct SizeDistribution {
  int32_t small_count = 2000;
  int64_t small_min_bytes = 4 << 10;
  int64_t small_max_bytes = 256 << 10;
  int32_t large_count = 12;
  int64_t large_min_bytes = 16 << 20;
  int64_t large_max_bytes = 64 << 20;
  uint64_t seed = 1;
};
std::vector<std::pair<std::string, int64_t>> DefaultCheckpointSizes(const SizeDistribution& dist, int32_t rank);

}  // namespace tierflow::real
