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
#include "tierflow/core/json_checked.h"
#include "tierflow/real/checksum.h"
#include "tierflow/real/pinned_arena.h"

namespace tierflow::real {

using json = nlohmann::json;

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

std::string ManifestPath(const CheckpointOptions& o) { return o.dirs[0] + "/" + o.name + ".manifest.json"; }

struct Manifest {
  int64_t generation = 0;
  std::string strategy;
  std::vector<std::pair<int32_t, std::string>> paths;  // (device, name): files or directories
  std::vector<CheckpointEntry> entries;
};

StatusOr<std::string> ReadWholeFile(Storage& storage, const std::string& path) {
  OpenOptions o;
  o.direct = false;
  o.read_only = true;
  TF_ASSIGN_OR_RETURN(OpenFile f, storage.Open(path, o));
  auto size = storage.FileSize(f.id);
  std::string text;
  Status st = size.status();
  if (st.ok()) {
    text.resize(*size);
    st = ReadAt(storage, f.id, 0, text.data(), *size);
  }
  (void)storage.Close(f.id);
  TF_RETURN_IF_ERROR(st);
  return text;
}

// A name that becomes part of file names in the checkpoint's directories (the checkpoint's, and
// the files a manifest lists): letters, digits, '.', '-', '_', not starting with '.', so that it
// can never reach outside them.
Status CheckFileName(const std::string& name, const std::string& what) {
  bool ok = !name.empty() && name.size() <= 255 && name[0] != '.';
  for (const char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_');
  if (ok) return Status::Ok();
  std::string shown;
  for (const char c : name.substr(0, 60)) shown += std::isprint(static_cast<unsigned char>(c)) ? std::string(1, c) : "?";
  return InvalidArgument(what + " '" + shown + (name.size() > 60 ? "...'" : "'") +
                         ": use letters, digits, '.', '-' and '_' (not first '.'), at most 255 characters");
}

// A file a manifest lists: names as CheckFileName, joined by '/' (file-per-tensor's generation
// directory), so that it stays inside the checkpoint's directory.
Status CheckManifestFile(const std::string& file) {
  size_t from = 0;
  for (size_t slash = file.find('/'); ; slash = file.find('/', from)) {
    const Status part = CheckFileName(file.substr(from, slash == std::string::npos ? std::string::npos : slash - from), "file '" + file + "': part");
    if (!part.ok()) return part;
    if (slash == std::string::npos) return Status::Ok();
    from = slash + 1;
  }
}

// One tensor of a manifest (or of a shard on its way to one), every field checked: `where` names
// the document in the error. A wrong type throws json's type_error, which the caller catches.
Status ParseEntry(const json& t, int32_t devices, const std::string& where, CheckpointEntry* e) {
  auto integer = [&](const json& v, const std::string& what, auto* out) -> Status {
    auto value = JsonInteger<std::remove_pointer_t<decltype(out)>>(v, what);
    if (!value.ok()) return DataLoss(where + ": " + value.status().message());
    *out = *value;
    return Status::Ok();
  };
  e->name = t.at("name");
  e->dtype = t.at("dtype");
  const std::string who = "tensor '" + e->name.substr(0, 100) + "': ";
  TF_RETURN_IF_ERROR(integer(t.at("rank"), who + "rank", &e->rank));
  TF_RETURN_IF_ERROR(integer(t.at("size_bytes"), who + "size_bytes", &e->size_bytes));
  if (!ParseChecksum(t.at("checksum"), &e->crc32c)) return DataLoss(where + ": tensor '" + e->name + "': bad checksum");
  TF_RETURN_IF_ERROR(integer(t.at("device"), who + "device", &e->device));
  e->file = t.at("file");
  TF_RETURN_IF_ERROR(integer(t.at("offset_bytes"), who + "offset_bytes", &e->offset_bytes));
  if (e->device < 0 || e->device >= devices) return DataLoss(where + ": tensor '" + e->name + "': bad device");
  if (e->size_bytes < 0 || e->offset_bytes < 0 || e->rank < 0) return DataLoss(where + ": " + who + "size_bytes, offset_bytes and rank must be >= 0");
  const Status named = CheckManifestFile(e->file);
  if (!named.ok()) return DataLoss(where + ": tensor '" + e->name + "': " + named.message());
  return Status::Ok();
}

json EntryJson(const CheckpointEntry& e) {
  return {{"name", e.name}, {"dtype", e.dtype}, {"rank", e.rank}, {"size_bytes", e.size_bytes},
          {"checksum", FormatChecksum(e.crc32c)}, {"device", e.device}, {"file", e.file}, {"offset_bytes", e.offset_bytes}};
}

// NotFound when no checkpoint was ever committed.
StatusOr<Manifest> ReadManifest(Storage& storage, const CheckpointOptions& o) {
  TF_RETURN_IF_ERROR(CheckFileName(o.name, "checkpoint name"));
  std::string path = ManifestPath(o);
  TF_ASSIGN_OR_RETURN(bool exists, storage.Exists(path));
  if (!exists) return NotFound("checkpoint '" + o.name + "': no manifest '" + path + "'");
  TF_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(storage, path));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("format") || j["format"] != "tierflow.checkpoint/1") {
    return DataLoss("checkpoint manifest '" + path + "': not a tierflow.checkpoint/1 document");
  }
  Manifest m;
  // Integers through the one checked reader (a float or a number past the field's width is
  // damage, named); a wrong type throws json's type_error, caught below.
  auto integer = [&](const json& v, const std::string& what, auto* out) -> Status {
    auto value = JsonInteger<std::remove_pointer_t<decltype(out)>>(v, what);
    if (!value.ok()) return DataLoss("checkpoint manifest '" + path + "': " + value.status().message());
    *out = *value;
    return Status::Ok();
  };
  try {
    TF_RETURN_IF_ERROR(integer(j.at("generation"), "generation", &m.generation));
    m.strategy = j.at("strategy");
    int64_t devices = 0;
    TF_RETURN_IF_ERROR(integer(j.at("devices"), "devices", &devices));
    if (devices != static_cast<int64_t>(o.dirs.size())) {
      return InvalidArgument("checkpoint '" + path + "' spans " + std::to_string(devices) + " directories; " +
                             std::to_string(o.dirs.size()) + " given");
    }
    for (auto& f : j.at("files")) {
      int32_t device = 0;
      TF_RETURN_IF_ERROR(integer(f.at("device"), "a file's device", &device));
      if (device < 0 || device >= static_cast<int32_t>(o.dirs.size())) return DataLoss("checkpoint manifest '" + path + "': a file's device is " + std::to_string(device));
      m.paths.push_back({device, f.at("name")});
      const Status named = CheckManifestFile(m.paths.back().second);
      if (!named.ok()) return DataLoss("checkpoint manifest '" + path + "': " + named.message());
    }
    for (auto& t : j.at("tensors")) {
      CheckpointEntry e;
      TF_RETURN_IF_ERROR(ParseEntry(t, static_cast<int32_t>(o.dirs.size()), "checkpoint manifest '" + path + "'", &e));
      m.entries.push_back(e);
    }
  } catch (const json::exception& e) {
    return DataLoss("checkpoint manifest '" + path + "': " + e.what());
  }
  return m;
}

Status WriteManifest(Storage& storage, const CheckpointOptions& o, const Manifest& m) {
  json j;
  j["format"] = "tierflow.checkpoint/1";
  j["name"] = o.name;
  j["generation"] = m.generation;
  j["strategy"] = m.strategy;
  j["devices"] = o.dirs.size();
  j["align_bytes"] = o.align_bytes;
  json files = json::array();
  for (auto& [d, n] : m.paths) files.push_back({{"device", d}, {"name", n}});
  j["files"] = files;
  json ts = json::array();
  for (auto& e : m.entries) ts.push_back(EntryJson(e));
  j["tensors"] = ts;
  std::string text = j.dump(0);
  std::string path = ManifestPath(o), tmp = path + ".tmp";
  OpenOptions oo;
  oo.create = oo.truncate = true;
  oo.direct = false;
  TF_ASSIGN_OR_RETURN(OpenFile f, storage.Open(tmp, oo));
  Status st = WriteAt(storage, f.id, 0, text.data(), static_cast<int64_t>(text.size()));
  if (st.ok()) st = storage.Sync(f.id);
  Status cl = storage.Close(f.id);
  TF_RETURN_IF_ERROR(st);
  TF_RETURN_IF_ERROR(cl);
  TF_RETURN_IF_ERROR(storage.Rename(tmp, path));  // the commit point
  return storage.SyncDir(o.dirs[0]);
}

// The generation of a file of checkpoint `name` (`<name>-g<digits>.…`), or -1 when it is none of
// them (say, checkpoint `<name>-gold`'s). Past int64's range it reads as the largest.
int64_t GenerationOf(const std::string& file, const std::string& name) {
  const std::string prefix = name + "-g";
  if (file.rfind(prefix, 0) != 0) return -1;
  size_t at = prefix.size();
  int64_t g = 0;
  for (; at < file.size() && std::isdigit(static_cast<unsigned char>(file[at])); ++at) {
    g = g > (INT64_MAX - 9) / 10 ? INT64_MAX : g * 10 + (file[at] - '0');
  }
  return at > prefix.size() && at < file.size() && file[at] == '.' ? g : -1;
}

// Removes every generation file of `o.name` (GenerationOf) up to generation `up_to` in the
// directories that the manifest `keep` does not list (leftovers of interrupted saves, or the
// previous generation), recursively for directories. A later generation is a save of other
// processes still under way (SaveCheckpointShard), left alone.
Status RemoveStale(Storage& storage, const CheckpointOptions& o, const Manifest* keep, int64_t up_to = INT64_MAX) {
  std::set<std::pair<int32_t, std::string>> kept;
  if (keep != nullptr) kept.insert(keep->paths.begin(), keep->paths.end());
  for (int32_t d = 0; d < static_cast<int32_t>(o.dirs.size()); ++d) {
    TF_ASSIGN_OR_RETURN(auto names, storage.List(o.dirs[d]));
    bool removed = false;
    for (auto& n : names) {
      const int64_t generation = GenerationOf(n, o.name);
      if (generation < 0 || generation > up_to || kept.count({d, n})) continue;
      std::string p = o.dirs[d] + "/" + n;
      if (n.find(".dir") != std::string::npos) {
        auto inner = storage.List(p);
        if (inner.ok()) {
          for (auto& f : *inner) TF_RETURN_IF_ERROR(storage.Remove(p + "/" + f));
        }
      }
      TF_RETURN_IF_ERROR(storage.Remove(p));
      removed = true;
    }
    if (removed) TF_RETURN_IF_ERROR(storage.SyncDir(o.dirs[d]));
  }
  return Status::Ok();
}

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

// The staging slots: the caller's pool when given (then the returned arena is null), else a
// fresh arena.
StatusOr<std::unique_ptr<PinnedArena>> MakeStaging(const CheckpointOptions& o, SlotPool** pool) {
  if (o.staging != nullptr) {
    *pool = o.staging;
    return std::unique_ptr<PinnedArena>();
  }
  ArenaOptions ao;
  ao.allow_unlocked = true;
  int64_t slot = AlignUp(std::max<int64_t>(o.staging_bytes, 1 << 20), kDirectAlignment);
  int32_t n = std::max(2, o.staging_buffers);
  TF_ASSIGN_OR_RETURN(auto arena, PinnedArena::Create(slot * n, ao));
  TF_ASSIGN_OR_RETURN(*pool, arena->CreateSlotPool("checkpoint.staging", slot, n));
  return arena;
}

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
  json j;
  j["generation"] = shard.generation;
  json files = json::array();
  for (auto& [d, n] : shard.files) files.push_back({{"device", d}, {"name", n}});
  j["files"] = files;
  json entries = json::array();
  for (auto& e : shard.entries) entries.push_back(EntryJson(e));
  j["tensors"] = entries;
  return j.dump();
}

StatusOr<CheckpointShard> CheckpointShardFromJson(const std::string& text, int32_t devices) {
  const json j = json::parse(text, nullptr, false);
  const std::string where = "checkpoint shard";
  if (j.is_discarded() || !j.is_object()) return DataLoss(where + ": not a JSON object");
  CheckpointShard shard;
  try {
    auto generation = JsonInteger<int64_t>(j.at("generation"), "generation");
    if (!generation.ok()) return DataLoss(where + ": " + generation.status().message());
    shard.generation = *generation;
    for (auto& f : j.at("files")) {
      auto device = JsonInteger<int32_t>(f.at("device"), "a file's device");
      if (!device.ok() || *device < 0 || *device >= devices) return DataLoss(where + ": a file's device is " + f.at("device").dump().substr(0, 40));
      shard.files.push_back({*device, f.at("name")});
      const Status named = CheckManifestFile(shard.files.back().second);
      if (!named.ok()) return DataLoss(where + ": " + named.message());
    }
    for (auto& t : j.at("tensors")) {
      CheckpointEntry e;
      TF_RETURN_IF_ERROR(ParseEntry(t, devices, where, &e));
      shard.entries.push_back(e);
    }
  } catch (const json::exception& e) {
    return DataLoss(where + ": " + e.what());
  }
  return shard;
}

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
