// A checkpoint's load, its manifest, its removal (tierflow/real/checkpoint.h).
#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "../storage/aligned_buffer.h"
#include "checkpoint_files.h"
#include "tierflow/real/checksum.h"

namespace tierflow::real {

using ckpt::CheckFileName;
using ckpt::MakeStaging;
using ckpt::Manifest;
using ckpt::ManifestPath;
using ckpt::ReadManifest;
using ckpt::RemoveStale;

StatusOr<std::vector<CheckpointEntry>> ReadCheckpointManifest(Storage& storage, const CheckpointOptions& options) {
  if (options.dirs.empty()) return InvalidArgument("checkpoint: no directory given");
  TF_ASSIGN_OR_RETURN(Manifest m, ReadManifest(storage, options));
  return m.entries;
}

StatusOr<CheckpointStats> LoadCheckpoint(Storage& storage, const CheckpointOptions& options, const CheckpointSink& sink) {
  if (options.dirs.empty()) return InvalidArgument("checkpoint load: no directory given");
  double t0 = MonotonicSeconds();
  TF_ASSIGN_OR_RETURN(Manifest m, ReadManifest(storage, options));
  CheckpointStats stats;
  stats.generation = m.generation;
  stats.tensors = static_cast<int64_t>(m.entries.size());
  auto mismatch = [&](const CheckpointEntry& e, uint32_t crc) {
    return DataLoss("checkpoint '" + options.name + "' tensor '" + e.name + "' rank " + std::to_string(e.rank) +
                    ": checksum mismatch (manifest " + FormatChecksum(e.crc32c) + ", read " + FormatChecksum(crc) +
                    ") in '" + e.file + "' at offset " + std::to_string(e.offset_bytes) + " on device " +
                    std::to_string(e.device) + " '" + options.dirs[e.device] + "'");
  };
  if (m.strategy == "file-per-tensor") {
    for (auto& e : m.entries) {
      void* dst = options.rank < 0 || e.rank == options.rank ? sink(e) : nullptr;
      if (dst == nullptr) continue;
      std::string path = options.dirs[e.device] + "/" + e.file;
      OpenOptions oo;
      oo.device = e.device;
      oo.direct = false;
      oo.read_only = true;
      TF_ASSIGN_OR_RETURN(OpenFile f, storage.Open(path, oo));
      Status st = ReadAt(storage, f.id, 0, dst, e.size_bytes);
      (void)storage.Close(f.id);
      TF_RETURN_IF_ERROR(st.WithContext("checkpoint '" + options.name + "' tensor '" + e.name + "'"));
      uint32_t crc = Crc32c(dst, e.size_bytes);
      if (crc != e.crc32c) return mismatch(e, crc);
      stats.bytes += e.size_bytes;
      stats.file_bytes += e.size_bytes;
      ++stats.files;
      ++stats.requests;
    }
    stats.duration_s = MonotonicSeconds() - t0;
    return stats;
  }
  if (m.strategy != "aggregated") return DataLoss("checkpoint '" + options.name + "': unknown strategy '" + m.strategy + "'");
  // Group entries by file, in offset order; read each file in staging-sized chunks (several in
  // flight) and scatter each chunk into the destinations, extending each tensor's CRC.
  std::map<std::pair<int32_t, std::string>, std::vector<const CheckpointEntry*>> by_file;
  for (auto& e : m.entries) {
    if (options.rank < 0 || e.rank == options.rank) by_file[{e.device, e.file}].push_back(&e);
  }
  SlotPool* pool = nullptr;
  TF_ASSIGN_OR_RETURN(auto arena, MakeStaging(options, &pool));
  std::vector<PinnedBuffer> bufs;
  for (int32_t i = 0; i < std::max(2, options.staging_buffers); ++i) {
    auto b = pool->Acquire();
    if (!b.ok()) break;
    (void)storage.RegisterMemory(b->data(), b->size_bytes());
    bufs.push_back(std::move(*b));
  }
  if (bufs.size() < 2) return ResourceExhausted("checkpoint load: fewer than 2 staging buffers free");
  const int64_t slot = bufs[0].size_bytes();
  Status st;
  for (auto& [key, entries] : by_file) {
    std::sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return a->offset_bytes < b->offset_bytes; });
    std::string path = options.dirs[key.first] + "/" + key.second;
    OpenOptions oo;
    oo.device = key.first;
    oo.direct = options.direct;
    oo.direct_fallback = true;
    oo.read_only = true;
    auto f = storage.Open(path, oo);
    if (!f.ok()) { st = f.status(); break; }
    stats.direct = f->direct;
    auto size = storage.FileSize(f->id);
    if (!size.ok()) { st = size.status(); (void)storage.Close(f->id); break; }
    int64_t file_size = *size;
    const CheckpointEntry& last = *entries.back();
    if (last.offset_bytes + last.size_bytes > file_size) {
      st = DataLoss("checkpoint '" + options.name + "': file '" + path + "' is " + std::to_string(file_size) +
                    " bytes, but tensor '" + last.name + "' ends at " + std::to_string(last.offset_bytes + last.size_bytes));
      (void)storage.Close(f->id);
      break;
    }
    std::vector<void*> dst(entries.size());
    std::vector<uint32_t> crc(entries.size(), 0);
    for (size_t i = 0; i < entries.size(); ++i) dst[i] = sink(*entries[i]);
    int64_t nchunks = (file_size + slot - 1) / slot;
    CompletionQueue q;
    int64_t next_submit = 0;
    size_t cursor = 0;  // first entry not yet fully consumed
    auto submit = [&](int64_t c) -> Status {
      int64_t off = c * slot;
      int64_t len = std::min(slot, file_size - off);
      if (f->direct) len = AlignUp(len, kDirectAlignment);
      IoRequest r{IoOp::kRead, f->id, off, len, bufs[c % bufs.size()].data(), static_cast<uint64_t>(c)};
      return storage.Submit({&r, 1}, &q);
    };
    std::map<int64_t, IoCompletion> arrived;
    int64_t received = 0;
    for (int64_t c = 0; c < nchunks && st.ok(); ++c) {
      while (st.ok() && next_submit < nchunks && next_submit < c + static_cast<int64_t>(bufs.size())) st = submit(next_submit++);
      while (st.ok() && !arrived.count(c)) {
        std::vector<IoCompletion> done;
        q.Wait(&done, 1);
        received += static_cast<int64_t>(done.size());
        for (auto& d : done) arrived[static_cast<int64_t>(d.tag)] = std::move(d);
      }
      if (!st.ok()) break;
      IoCompletion comp = std::move(arrived[c]);
      arrived.erase(c);
      int64_t off = c * slot, end = std::min(off + slot, file_size);
      // A short final read (file not padded) still must cover every tensor byte in the chunk.
      if (!comp.status.ok() && comp.status.code() != StatusCode::kDataLoss) {
        st = comp.status.WithContext("checkpoint '" + options.name + "' device " + std::to_string(key.first));
        break;
      }
      if (!comp.status.ok()) end = off + comp.bytes;
      const char* b = bufs[c % bufs.size()].bytes();
      for (size_t i = cursor; i < entries.size() && st.ok(); ++i) {
        const CheckpointEntry& e = *entries[i];
        int64_t lo = std::max(off, e.offset_bytes), hi = std::min(end, e.offset_bytes + e.size_bytes);
        if (e.offset_bytes >= end) break;
        if (hi > lo) {
          if (dst[i] != nullptr) std::memcpy(static_cast<char*>(dst[i]) + (lo - e.offset_bytes), b + (lo - off), hi - lo);
          crc[i] = Crc32c(b + (lo - off), hi - lo, crc[i]);
        }
        if (e.offset_bytes + e.size_bytes <= end) {
          if (crc[i] != e.crc32c) st = mismatch(e, crc[i]);
          if (i == cursor) ++cursor;
        }
      }
      if (st.ok() && end < std::min(off + slot, file_size)) {
        st = DataLoss("checkpoint '" + options.name + "': short read of '" + path + "' at offset " + std::to_string(end));
      }
      stats.file_bytes += end - off;
    }
    // Wait for anything still in flight before the buffers are reused or freed.
    while (received < next_submit) {
      std::vector<IoCompletion> done;
      received += static_cast<int64_t>(q.Wait(&done, 1));
    }
    (void)storage.Close(f->id);
    stats.requests += next_submit;
    if (!st.ok()) break;
    stats.files++;
    for (auto* e : entries) stats.bytes += e->size_bytes;
  }
  for (auto& b : bufs) storage.UnregisterMemory(b.data());
  TF_RETURN_IF_ERROR(st);
  stats.duration_s = MonotonicSeconds() - t0;
  return stats;
}

Status DropCheckpointCache(Storage& storage, const CheckpointOptions& options) {
  TF_ASSIGN_OR_RETURN(Manifest m, ReadManifest(storage, options));
  std::set<std::pair<int32_t, std::string>> files;
  for (auto& e : m.entries) files.insert({e.device, e.file});
  for (auto& [d, n] : files) {
    OpenOptions oo;
    oo.device = d;
    oo.direct = false;
    oo.read_only = true;
    TF_ASSIGN_OR_RETURN(OpenFile f, storage.Open(options.dirs[d] + "/" + n, oo));
    Status st = storage.DropCache(f.id);
    (void)storage.Close(f.id);
    TF_RETURN_IF_ERROR(st);
  }
  return Status::Ok();
}

Status RemoveCheckpoint(Storage& storage, const CheckpointOptions& options) {
  TF_RETURN_IF_ERROR(CheckFileName(options.name, "checkpoint name"));
  TF_RETURN_IF_ERROR(RemoveStale(storage, options, nullptr));
  for (std::string p : {ManifestPath(options), ManifestPath(options) + ".tmp"}) {
    TF_ASSIGN_OR_RETURN(bool e, storage.Exists(p));
    if (e) TF_RETURN_IF_ERROR(storage.Remove(p));
  }
  return Status::Ok();
}

}  // namespace tierflow::real
