// A checkpoint's save, whole or by shards, and its commit (tierflow/real/checkpoint.h).
#include "tierflow/real/checkpoint.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "../storage/aligned_buffer.h"
#include "tierflow/real/checksum.h"
#include "tierflow/real/pinned_arena.h"
#include "checkpoint_files.h"

namespace tierflow::real {

using json = nlohmann::json;
using ckpt::CheckFileName;
using ckpt::MakeStaging;
using ckpt::Manifest;
using ckpt::ManifestBody;
using ckpt::ManifestPath;
using ckpt::ParseManifestBody;
using ckpt::ReadManifest;
using ckpt::RemoveStale;
using ckpt::WriteManifest;

const char* CheckpointStrategyName(CheckpointStrategy s) {
  return s == CheckpointStrategy::kAggregated ? "aggregated" : "file-per-tensor";
}

StatusOr<CheckpointStrategy> CheckpointStrategyFromName(const std::string& name) {
  if (name == "aggregated") return CheckpointStrategy::kAggregated;
  if (name == "file-per-tensor") return CheckpointStrategy::kFilePerTensor;
  return InvalidArgument("unknown checkpoint strategy '" + name + "' (known: aggregated, file-per-tensor)");
}

std::vector<std::pair<std::string, int64_t>> DefaultCheckpointSizes(const SizeDistribution& dist, int32_t rank) {
  std::mt19937_64 rng(dist.seed * 1000003u + static_cast<uint64_t>(rank));
  std::vector<std::pair<std::string, int64_t>> out;
  std::uniform_real_distribution<double> u(0, 1);
  double lo = std::log(static_cast<double>(dist.small_min_bytes)), hi = std::log(static_cast<double>(dist.small_max_bytes));
  for (int32_t i = 0; i < dist.small_count; ++i) {
    int64_t n = static_cast<int64_t>(std::exp(lo + (hi - lo) * u(rng)));
    out.push_back({"small." + std::to_string(i), std::max<int64_t>(1, n)});
  }
  for (int32_t i = 0; i < dist.large_count; ++i) {
    int64_t n = dist.large_min_bytes + static_cast<int64_t>(u(rng) * static_cast<double>(dist.large_max_bytes - dist.large_min_bytes));
    out.push_back({"large." + std::to_string(i), n});
  }
  return out;
}

namespace {
std::string SafeName(const std::string& n) {
  std::string s = n;
  for (char& c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) c = '_';
  }
  return s;
}

// ---- aggregated ----

struct FilePlan {
  int32_t device = 0;
  int32_t rank = 0;
  std::string name;               // final name
  std::vector<size_t> tensors;    // indices into the tensor list, in file order
  std::vector<int64_t> offsets;
  int64_t size_bytes = 0;         // padded to 4 KiB
};

class Stager {
 public:
  Stager(Storage& storage, SlotPool* pool, int32_t buffers) : storage_(storage) {
    for (int32_t i = 0; i < buffers; ++i) {
      auto b = pool->Acquire();
      if (!b.ok()) break;
      (void)storage_.RegisterMemory(b->data(), b->size_bytes());
      slots_.push_back(Slot{std::move(*b), 0, 0});
    }
  }
  ~Stager() {
    (void)Drain();
    for (auto& s : slots_) storage_.UnregisterMemory(s.buf.data());
  }
  bool ok() const { return slots_.size() >= 2; }
  int64_t slot_bytes() const { return slots_[0].buf.size_bytes(); }

  // The current buffer, waiting for its previous write if needed.
  StatusOr<char*> Current() {
    Slot& s = slots_[cur_];
    TF_RETURN_IF_ERROR(WaitSlot(s));
    return s.buf.bytes();
  }
  // Writes the first `length` bytes of the current buffer at `offset` of `file` (async) and
  // moves to the next buffer.
  Status Flush(FileId file, int64_t offset, int64_t length, const std::string& what) {
    Slot& s = slots_[cur_];
    IoRequest r{IoOp::kWrite, file, offset, length, s.buf.data(), static_cast<uint64_t>(cur_)};
    what_[cur_] = what;
    TF_RETURN_IF_ERROR(storage_.Submit({&r, 1}, &queue_));
    s.pending = 1;
    ++ios_;
    cur_ = (cur_ + 1) % slots_.size();
    return Status::Ok();
  }
  Status Drain() {
    Status first;
    for (auto& s : slots_) {
      Status st = WaitSlot(s);
      if (first.ok()) first = st;
    }
    return first;
  }
  int64_t ios() const { return ios_; }

 private:
  struct Slot {
    PinnedBuffer buf;
    int pending = 0;
    int unused = 0;
  };
  Status WaitSlot(Slot& s) {
    while (s.pending > 0) {
      std::vector<IoCompletion> done;
      queue_.Wait(&done, 1);
      for (auto& c : done) {
        slots_[c.tag].pending = 0;
        if (!c.status.ok() && error_.ok()) error_ = c.status.WithContext(what_[c.tag]);
      }
    }
    return error_;
  }
  Storage& storage_;
  std::vector<Slot> slots_;
  std::map<size_t, std::string> what_;
  size_t cur_ = 0;
  CompletionQueue queue_;
  Status error_;
  int64_t ios_ = 0;
};

Status SaveAggregated(Storage& storage, const std::vector<CheckpointTensor>& tensors, const CheckpointOptions& o,
                      Manifest* m, CheckpointStats* stats) {
  const int32_t ndev = static_cast<int32_t>(o.dirs.size());
  const int64_t align = std::max<int64_t>(1, o.align_bytes);
  if (o.direct && !o.coalesce && align % kDirectAlignment != 0) {
    return InvalidArgument("checkpoint save '" + o.name + "': uncoalesced O_DIRECT writes start at each tensor, so align_bytes must be a multiple of " +
                           std::to_string(kDirectAlignment) + " (got " + std::to_string(align) + "); or write through the page cache");
  }
  // Assign tensors to (rank, device) files: per rank, each tensor to the device with the fewest
  // bytes so far (largest first, for balance); keep the input order within a file.
  std::map<std::pair<int32_t, int32_t>, FilePlan> plans;
  std::map<int32_t, std::vector<size_t>> by_rank;
  for (size_t i = 0; i < tensors.size(); ++i) by_rank[tensors[i].rank].push_back(i);
  for (auto& [rank, idx] : by_rank) {
    std::vector<size_t> order = idx;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tensors[a].size_bytes > tensors[b].size_bytes; });
    std::vector<int64_t> load(ndev, 0);
    std::map<size_t, int32_t> dev_of;
    for (size_t i : order) {
      int32_t d = static_cast<int32_t>(std::min_element(load.begin(), load.end()) - load.begin());
      load[d] += tensors[i].size_bytes;
      dev_of[i] = d;
    }
    for (size_t i : idx) {
      FilePlan& p = plans[{rank, dev_of[i]}];
      p.device = dev_of[i];
      p.rank = rank;
      p.offsets.push_back(AlignUp(p.size_bytes, align));
      p.size_bytes = p.offsets.back() + tensors[i].size_bytes;
      p.tensors.push_back(i);
    }
  }
  SlotPool* pool = nullptr;
  TF_ASSIGN_OR_RETURN(auto arena, MakeStaging(o, &pool));
  Status st;
  {
    Stager stager(storage, pool, std::max(2, o.staging_buffers));
    if (!stager.ok()) return ResourceExhausted("checkpoint save: fewer than 2 staging buffers free");
    const int64_t slot = stager.slot_bytes();
    std::vector<std::pair<FileId, std::string>> open_files;  // (id, tmp path)
    for (auto& [key, p] : plans) {
      if (o.direct) p.size_bytes = AlignUp(p.size_bytes, kDirectAlignment);
      p.name = o.name + "-g" + std::to_string(m->generation) + ".rank" + std::to_string(p.rank) + ".dev" +
               std::to_string(p.device) + ".tfckpt";
      std::string tmp = o.dirs[p.device] + "/" + p.name + ".tmp";
      OpenOptions oo;
      oo.device = p.device;
      oo.create = oo.truncate = true;
      oo.direct = o.direct;
      oo.direct_fallback = true;
      auto f = storage.Open(tmp, oo);
      if (!f.ok()) { st = f.status(); break; }
      stats->direct = f->direct;
      open_files.push_back({f->id, tmp});
      std::string what = "checkpoint '" + o.name + "' rank " + std::to_string(p.rank) + ": device " +
                         std::to_string(p.device) + " '" + o.dirs[p.device] + "'";
      // Stream the file's bytes through the staging buffers.
      int64_t file_pos = 0;  // bytes of the file staged so far (flushed + in the buffer)
      int64_t flushed = 0;
      auto buf = stager.Current();
      if (!buf.ok()) { st = buf.status(); break; }
      char* b = *buf;
      // O_DIRECT requests are whole blocks (the file's tail padded with zeros); buffered ones
      // are the bytes themselves.
      auto flush = [&](int64_t upto) -> Status {
        int64_t len = o.direct ? AlignUp(upto - flushed, kDirectAlignment) : upto - flushed;
        std::memset(b + (upto - flushed), 0, len - (upto - flushed));
        TF_RETURN_IF_ERROR(stager.Flush(f->id, flushed, len, what));
        flushed += len;
        file_pos = flushed;
        TF_ASSIGN_OR_RETURN(b, stager.Current());
        return Status::Ok();
      };
      for (size_t k = 0; k < p.tensors.size() && st.ok(); ++k) {
        const CheckpointTensor& t = tensors[p.tensors[k]];
        // Zero padding up to the tensor's offset.
        while (st.ok() && file_pos < p.offsets[k]) {
          int64_t n = std::min(p.offsets[k] - file_pos, slot - (file_pos - flushed));
          std::memset(b + (file_pos - flushed), 0, n);
          file_pos += n;
          if (file_pos - flushed == slot) st = flush(file_pos);
        }
        CheckpointEntry e;
        e.name = t.name;
        e.dtype = t.dtype;
        e.rank = t.rank;
        e.size_bytes = t.size_bytes;
        e.device = p.device;
        e.file = p.name;
        e.offset_bytes = p.offsets[k];
        const char* src = static_cast<const char*>(t.data);
        int64_t copied = 0;
        uint32_t crc = 0;
        while (st.ok() && copied < t.size_bytes) {
          int64_t n = std::min({t.size_bytes - copied, slot - (file_pos - flushed), int64_t{256} << 10});
          char* dst = b + (file_pos - flushed);
          std::memcpy(dst, src + copied, n);
          crc = Crc32c(dst, n, crc);
          copied += n;
          file_pos += n;
          if (file_pos - flushed == slot) st = flush(file_pos);
        }
        if (st.ok() && !o.coalesce && file_pos > flushed) st = flush(file_pos);  // the tensor's own request
        e.crc32c = crc;
        m->entries.push_back(e);
        stats->bytes += t.size_bytes;
      }
      if (st.ok() && file_pos > flushed) st = flush(file_pos);
      if (!st.ok()) break;
      stats->file_bytes += p.size_bytes;
      m->paths.push_back({p.device, p.name});
    }
    Status drained = stager.Drain();
    if (st.ok()) st = drained;
    stats->files = static_cast<int64_t>(open_files.size());
    stats->requests = stager.ios();
    // Durability, then final names.
    for (auto& [id, tmp] : open_files) {
      if (st.ok()) st = storage.Sync(id);
      Status c = storage.Close(id);
      if (st.ok()) st = c;
    }
    if (st.ok()) {
      for (auto& [key, p] : plans) {
        std::string dir = o.dirs[p.device];
        st = storage.Rename(dir + "/" + p.name + ".tmp", dir + "/" + p.name);
        if (!st.ok()) break;
      }
    }
  }
  TF_RETURN_IF_ERROR(st);
  for (int32_t d = 0; d < ndev; ++d) TF_RETURN_IF_ERROR(storage.SyncDir(o.dirs[d]));
  return Status::Ok();
}

// ---- file per tensor ----

Status SaveFilePerTensor(Storage& storage, const std::vector<CheckpointTensor>& tensors, const CheckpointOptions& o,
                         Manifest* m, CheckpointStats* stats) {
  const int32_t ndev = static_cast<int32_t>(o.dirs.size());
  std::string dir_name = o.name + "-g" + std::to_string(m->generation) + ".dir";
  for (int32_t d = 0; d < ndev; ++d) TF_RETURN_IF_ERROR(storage.CreateDir(o.dirs[d] + "/" + dir_name + ".tmp"));
  std::vector<FileId> open_files;
  Status st;
  for (size_t i = 0; i < tensors.size() && st.ok(); ++i) {
    const CheckpointTensor& t = tensors[i];
    int32_t d = static_cast<int32_t>(i % ndev);
    std::string file = "rank" + std::to_string(t.rank) + "." + SafeName(t.name) + ".bin";
    OpenOptions oo;
    oo.device = d;
    oo.create = oo.truncate = true;
    oo.direct = false;
    auto f = storage.Open(o.dirs[d] + "/" + dir_name + ".tmp/" + file, oo);
    if (!f.ok()) { st = f.status(); break; }
    open_files.push_back(f->id);
    st = WriteAt(storage, f->id, 0, t.data, t.size_bytes);
    if (!st.ok()) st = st.WithContext("checkpoint '" + o.name + "' tensor '" + t.name + "' rank " + std::to_string(t.rank) + ": device " + std::to_string(d) + " '" + o.dirs[d] + "'");
    CheckpointEntry e{t.name, t.dtype, t.rank, t.size_bytes, Crc32c(t.data, t.size_bytes), d, dir_name + "/" + file, 0};
    m->entries.push_back(e);
    stats->bytes += t.size_bytes;
    stats->file_bytes += t.size_bytes;
  }
  for (FileId id : open_files) {
    if (st.ok()) st = storage.Sync(id);
    Status c = storage.Close(id);
    if (st.ok()) st = c;
  }
  stats->files = stats->requests = static_cast<int64_t>(open_files.size());
  TF_RETURN_IF_ERROR(st);
  for (int32_t d = 0; d < ndev; ++d) {
    TF_RETURN_IF_ERROR(storage.SyncDir(o.dirs[d] + "/" + dir_name + ".tmp"));
    TF_RETURN_IF_ERROR(storage.Rename(o.dirs[d] + "/" + dir_name + ".tmp", o.dirs[d] + "/" + dir_name));
    TF_RETURN_IF_ERROR(storage.SyncDir(o.dirs[d]));
    m->paths.push_back({d, dir_name});
  }
  return Status::Ok();
}

// What every save checks first: where it goes, its name, and tensors with data, each once a rank.
Status CheckSave(const std::vector<CheckpointTensor>& tensors, const CheckpointOptions& options) {
  if (options.dirs.empty()) return InvalidArgument("checkpoint save: no directory given");
  TF_RETURN_IF_ERROR(CheckFileName(options.name, "checkpoint save: name"));
  // A save replaces the committed checkpoint: one of nothing would replace good state with none.
  if (tensors.empty()) return InvalidArgument("checkpoint save '" + options.name + "': no tensors to save (the committed checkpoint is kept)");
  std::set<std::string> names;
  for (auto& t : tensors) {
    if (t.size_bytes < 0 || (t.size_bytes > 0 && t.data == nullptr)) return InvalidArgument("checkpoint save: tensor '" + t.name + "' has no data");
    if (!names.insert(std::to_string(t.rank) + "/" + t.name).second) {
      return InvalidArgument("checkpoint save: tensor '" + t.name + "' appears twice in rank " + std::to_string(t.rank));
    }
  }
  return Status::Ok();
}

// A save that failed (a full disk, an I/O error) takes its files away (up to generation `up_to`)
// before it returns `st`: the directories hold the committed checkpoint and nothing else, as
// before the save. Which one is committed is read back (a manifest write can fail after its
// rename, the commit).
Status Abandon(Storage& storage, const CheckpointOptions& options, int64_t up_to, Status st) {
  (void)storage.Remove(ManifestPath(options) + ".tmp");
  auto committed = ReadManifest(storage, options);
  if (committed.ok()) {
    (void)RemoveStale(storage, options, &*committed, up_to);
  } else if (committed.status().code() == StatusCode::kNotFound) {
    (void)RemoveStale(storage, options, nullptr, up_to);
  }  // else the manifest cannot be read now: nothing is removed
  return st;
}

}  // namespace

StatusOr<CheckpointStats> SaveCheckpoint(Storage& storage, const std::vector<CheckpointTensor>& tensors,
                                         const CheckpointOptions& options) {
  TF_RETURN_IF_ERROR(CheckSave(tensors, options));
  double t0 = MonotonicSeconds();
  for (auto& d : options.dirs) TF_RETURN_IF_ERROR(storage.CreateDir(d));
  Manifest previous;
  bool have_previous = false;
  auto prev = ReadManifest(storage, options);
  if (prev.ok()) {
    previous = std::move(*prev);
    have_previous = true;
  } else if (prev.status().code() != StatusCode::kNotFound) {
    return prev.status();
  }
  // Leftovers of interrupted saves (never the committed generation).
  TF_RETURN_IF_ERROR(RemoveStale(storage, options, have_previous ? &previous : nullptr));

  Manifest m;
  m.generation = have_previous ? previous.generation + 1 : 1;
  m.strategy = CheckpointStrategyName(options.strategy);
  CheckpointStats stats;
  stats.generation = m.generation;
  stats.tensors = static_cast<int64_t>(tensors.size());
  Status saved = options.strategy == CheckpointStrategy::kAggregated ? SaveAggregated(storage, tensors, options, &m, &stats)
                                                                     : SaveFilePerTensor(storage, tensors, options, &m, &stats);
  if (saved.ok()) saved = WriteManifest(storage, options, m);
  if (!saved.ok()) return Abandon(storage, options, INT64_MAX, saved);
  // Committed: the previous generation is garbage now.
  TF_RETURN_IF_ERROR(RemoveStale(storage, options, &m));
  stats.duration_s = MonotonicSeconds() - t0;
  return stats;
}

StatusOr<int64_t> NextCheckpointGeneration(Storage& storage, const CheckpointOptions& options) {
  if (options.dirs.empty()) return InvalidArgument("checkpoint: no directory given");
  auto committed = ReadManifest(storage, options);
  if (committed.ok()) return committed->generation + 1;
  if (committed.status().code() == StatusCode::kNotFound) return int64_t{1};
  return committed.status();
}

StatusOr<CheckpointShard> SaveCheckpointShard(Storage& storage, const std::vector<CheckpointTensor>& tensors,
                                              const CheckpointOptions& options, int64_t generation) {
  TF_RETURN_IF_ERROR(CheckSave(tensors, options));
  if (options.strategy != CheckpointStrategy::kAggregated) {
    return InvalidArgument("checkpoint save '" + options.name + "': a checkpoint of several processes is saved aggregated (one file per rank and device)");
  }
  if (generation < 1) return InvalidArgument("checkpoint save '" + options.name + "': generation " + std::to_string(generation) + " (from 1)");
  const double t0 = MonotonicSeconds();
  for (auto& d : options.dirs) TF_RETURN_IF_ERROR(storage.CreateDir(d));
  Manifest m;
  m.generation = generation;
  CheckpointShard shard;
  shard.stats.generation = generation;
  shard.stats.tensors = static_cast<int64_t>(tensors.size());
  TF_RETURN_IF_ERROR(SaveAggregated(storage, tensors, options, &m, &shard.stats));
  shard.generation = generation;
  shard.entries = std::move(m.entries);
  shard.files = std::move(m.paths);
  shard.stats.duration_s = MonotonicSeconds() - t0;
  return shard;
}

Status CommitCheckpoint(Storage& storage, const CheckpointOptions& options, const std::vector<CheckpointShard>& shards) {
  if (options.dirs.empty()) return InvalidArgument("checkpoint commit: no directory given");
  if (shards.empty()) return InvalidArgument("checkpoint commit '" + options.name + "': no shards (the committed checkpoint is kept)");
  Manifest m;
  m.generation = shards[0].generation;
  m.strategy = CheckpointStrategyName(CheckpointStrategy::kAggregated);
  for (const CheckpointShard& shard : shards) {
    if (shard.generation != m.generation) {
      return Abandon(storage, options, std::max(m.generation, shard.generation),
                     InvalidArgument("checkpoint commit '" + options.name + "': shards of generations " + std::to_string(m.generation) + " and " +
                                     std::to_string(shard.generation)));
    }
    m.paths.insert(m.paths.end(), shard.files.begin(), shard.files.end());
    m.entries.insert(m.entries.end(), shard.entries.begin(), shard.entries.end());
  }
  const Status written = WriteManifest(storage, options, m);
  if (!written.ok()) return Abandon(storage, options, m.generation, written);
  // Committed: the previous generation, and leftovers of saves that never committed, are garbage.
  return RemoveStale(storage, options, &m, m.generation);
}

std::string CheckpointShardToJson(const CheckpointShard& shard) {
  Manifest m;
  m.generation = shard.generation;
  m.paths = shard.files;
  m.entries = shard.entries;
  return ManifestBody(m).dump();
}

StatusOr<CheckpointShard> CheckpointShardFromJson(const std::string& text, int32_t devices) {
  const json j = json::parse(text, nullptr, false);
  const std::string where = "checkpoint shard";
  if (j.is_discarded() || !j.is_object()) return DataLoss(where + ": not a JSON object");
  Manifest m;
  try {
    TF_RETURN_IF_ERROR(ParseManifestBody(j, devices, where, &m));
  } catch (const json::exception& e) {
    return DataLoss(where + ": " + e.what());
  }
  CheckpointShard shard;
  shard.generation = m.generation;
  shard.files = std::move(m.paths);
  shard.entries = std::move(m.entries);
  return shard;
}

}  // namespace tierflow::real
