// Hugging Face weights through the storage back-end: LoadHfWeights and the shard writer.
//
// Both stream a file through a ring of `depth` chunk buffers (I/O memory, registered with the
// back-end): reads are issued in file order and consumed in that order, each chunk converted to
// fp32 while the later ones are in flight; writes are filled (converted from fp32) while the
// earlier ones drain. O_DIRECT needs block-aligned offsets and lengths, which a Hugging Face
// file's data rarely has (its header is any length): a read span's aligned body goes direct, and
// its unaligned tail (under one block) through a second, buffered descriptor. A chunk reads a
// few bytes past the offsets it owns, so that no element is split between two chunks.
#include "hf_io.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "tierflow/core/files.h"
#include "tierflow/core/json_checked.h"
#include "tierflow/real/adamw.h"
#include "tierflow/real/cpu_threads.h"
#include "tierflow/real/io_memory.h"
#include "tierflow/real/storage.h"

namespace tierflow::real {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kHeadRead = 64 << 10;  // the first read of a file, which usually holds its header
constexpr int64_t kMergeGap = 1 << 20;   // read across a gap this small rather than start a new span
constexpr int64_t kMaxElement = 8;       // bytes of the widest element (F64)

// The back-end, or one made for this call.
class StorageRef {
 public:
  static StatusOr<StorageRef> Make(Storage* given) {
    StorageRef r;
    if (given != nullptr) {
      r.storage_ = given;
      return r;
    }
    StorageOptions so;
    so.queue_depth = 32;
    so.request_bytes = 1 << 20;
    TF_ASSIGN_OR_RETURN(r.owned_, NewStorage("auto", so));
    r.storage_ = r.owned_.get();
    return r;
  }
  Storage& operator*() const { return *storage_; }

 private:
  Storage* storage_ = nullptr;
  std::unique_ptr<Storage> owned_;
};

// The caller's threads, or one per core made for this call.
class ThreadsRef {
 public:
  explicit ThreadsRef(CpuThreads* given) {
    if (given == nullptr) owned_ = std::make_unique<CpuThreads>(std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
    threads_ = given != nullptr ? given : owned_.get();
  }
  CpuThreads& operator*() const { return *threads_; }

 private:
  CpuThreads* threads_ = nullptr;
  std::unique_ptr<CpuThreads> owned_;
};

// `depth` buffers of `bytes` each, registered with the back-end for their lifetime.
class ChunkRing {
 public:
  ChunkRing(Storage& storage, int depth, int64_t bytes) : storage_(storage), bytes_(bytes) {
    for (int i = 0; i < depth; ++i) {
      void* p = AllocateIoMemory(bytes);
      if (p == nullptr) break;
      (void)storage_.RegisterMemory(p, bytes);
      buffers_.push_back(static_cast<char*>(p));
    }
  }
  ~ChunkRing() {
    for (char* p : buffers_) {
      storage_.UnregisterMemory(p);
      FreeIoMemory(p, bytes_);
    }
  }
  ChunkRing(const ChunkRing&) = delete;
  ChunkRing& operator=(const ChunkRing&) = delete;
  Status Check(int depth) const {
    if (static_cast<int>(buffers_.size()) == depth) return Status::Ok();
    return ResourceExhausted("no memory for " + std::to_string(depth) + " I/O buffers of " + std::to_string(bytes_) + " bytes");
  }
  int size() const { return static_cast<int>(buffers_.size()); }
  char* operator[](size_t i) const { return buffers_[i]; }

 private:
  Storage& storage_;
  int64_t bytes_;
  std::vector<char*> buffers_;
};

// Files opened on the back-end, closed when it goes.
class OpenFiles {
 public:
  explicit OpenFiles(Storage& storage) : storage_(storage) {}
  ~OpenFiles() {
    for (FileId id : ids_) (void)storage_.Close(id);
  }
  OpenFiles(const OpenFiles&) = delete;
  OpenFiles& operator=(const OpenFiles&) = delete;
  StatusOr<OpenFile> Open(const std::string& path, const OpenOptions& o) {
    TF_ASSIGN_OR_RETURN(OpenFile f, storage_.Open(path, o));
    ids_.push_back(f.id);
    return f;
  }
  Status Close(FileId id) {
    ids_.erase(std::find(ids_.begin(), ids_.end(), id));
    return storage_.Close(id);
  }

 private:
  Storage& storage_;
  std::vector<FileId> ids_;
};

int64_t CeilDiv(int64_t a, int64_t b) { return a <= 0 ? 0 : (a + b - 1) / b; }

// Elements [first, last) of one layout tensor, whose element 0 lies at file offset `base`.
struct Piece {
  const ParamTensor* tensor;
  StDtype dtype;
  int64_t base, first, last;
  int64_t size() const { return StDtypeBytes(dtype); }
  int64_t begin_byte() const { return base + first * size(); }
  int64_t end_byte() const { return base + last * size(); }
};

// One read: `length` bytes at `offset` into a chunk buffer, of which the elements that start in
// [own_begin, own_end) are converted (the rest is there so that those are whole).
struct ReadUnit {
  FileId file;
  int64_t offset, length, own_begin, own_end;
};

// A file of the directory and what the range needs of it, checked before any data is read.
struct ShardPlan {
  std::string path;
  std::vector<const ParamTensor*> tensors;
  OpenFile direct, buffered;
  std::vector<Piece> pieces;
};

// Opens a file twice (O_DIRECT where possible for the data, buffered for the header and tails),
// reads and checks its header, and lists the pieces of `tensors` that [begin, end) needs.
Status PlanShard(Storage& storage, OpenFiles& files, bool direct, int64_t begin, int64_t end, ShardPlan* plan, HfLoadStats* stats) {
  OpenOptions o;
  o.read_only = true;
  o.direct = direct;
  o.direct_fallback = true;
  TF_ASSIGN_OR_RETURN(plan->direct, files.Open(plan->path, o));
  o.direct = false;
  TF_ASSIGN_OR_RETURN(plan->buffered, files.Open(plan->path, o));
  TF_ASSIGN_OR_RETURN(const int64_t size, storage.FileSize(plan->buffered.id));
  std::string head(static_cast<size_t>(std::min(size, kHeadRead)), '\0');
  TF_RETURN_IF_ERROR(ReadAt(storage, plan->buffered.id, 0, head.data(), static_cast<int64_t>(head.size())));
  TF_ASSIGN_OR_RETURN(const int64_t header_len, SafetensorsHeader::Length(head, size, plan->path));
  if (8 + header_len > static_cast<int64_t>(head.size())) {
    const int64_t have = static_cast<int64_t>(head.size());
    head.resize(static_cast<size_t>(8 + header_len));
    TF_RETURN_IF_ERROR(ReadAt(storage, plan->buffered.id, have, head.data() + have, 8 + header_len - have));
  }
  stats->bytes_read += static_cast<int64_t>(head.size());
  TF_ASSIGN_OR_RETURN(const SafetensorsHeader header, SafetensorsHeader::Parse(head, size, plan->path));
  for (const ParamTensor* t : plan->tensors) {
    TF_ASSIGN_OR_RETURN(const StTensorInfo info, LayoutTensorInfo(header, *t));
    const int64_t first = std::clamp(begin - t->offset, int64_t{0}, t->elements);
    const int64_t last = std::clamp(end - t->offset, int64_t{0}, t->elements);
    if (first < last) plan->pieces.push_back({t, info.dtype, header.data_start() + info.begin, first, last});
  }
  std::sort(plan->pieces.begin(), plan->pieces.end(), [](const Piece& a, const Piece& b) { return a.begin_byte() < b.begin_byte(); });
  return Status::Ok();
}

// The reads that cover the pieces: spans of nearby pieces, each cut into chunks; with O_DIRECT
// a span's block-aligned body goes through `direct`, its last few bytes through `buffered`.
std::vector<ReadUnit> PlanReads(const ShardPlan& plan, int64_t chunk) {
  std::vector<ReadUnit> units;
  const bool direct = plan.direct.direct;
  const int64_t align = direct ? plan.direct.alignment : 1;
  auto add_span = [&](int64_t a, int64_t b) {
    // Elements start in [a, b). The direct body [A, B) owns those starting before `tail`, each
    // chunk reading one block (or kMaxElement bytes) past what it owns; the tail owns the rest.
    const int64_t A = a / align * align, B = b / align * align;
    const int64_t tail = B > A ? std::max(a, B - kMaxElement) : a;
    const int64_t over = direct ? align : kMaxElement;
    const int64_t step = AlignUp(chunk, align);  // a block larger than the chunk: whole blocks still
    for (int64_t c = A; c < tail; c += step) {
      const int64_t own_end = std::min(c + step, tail);
      const int64_t read_end = direct ? std::min(own_end + over, B) : std::min(own_end + over, b);
      if (std::max(c, a) < own_end) units.push_back({plan.direct.id, c, read_end - c, std::max(c, a), own_end});
    }
    if (tail < b) units.push_back({plan.buffered.id, tail, b - tail, tail, b});
  };
  int64_t a = -1, b = -1;
  for (const Piece& p : plan.pieces) {
    if (a >= 0 && p.begin_byte() <= b + kMergeGap) {
      b = std::max(b, p.end_byte());
      continue;
    }
    if (a >= 0) add_span(a, b);
    a = p.begin_byte();
    b = p.end_byte();
  }
  if (a >= 0) add_span(a, b);
  return units;
}

// The elements of every piece that start in the unit's own range, from its buffer to fp32.
void ConvertUnit(const ReadUnit& u, const char* buffer, const std::vector<Piece>& pieces, float* params, CpuThreads& threads) {
  for (const Piece& p : pieces) {
    if (p.end_byte() <= u.own_begin || p.begin_byte() >= u.own_end) continue;
    const int64_t size = p.size();
    const int64_t lo = std::max(p.first, CeilDiv(u.own_begin - p.base, size));
    const int64_t hi = std::min(p.last, CeilDiv(u.own_end - p.base, size));
    if (lo >= hi) continue;
    const char* src = buffer + (p.base + lo * size - u.offset);
    float* dst = params + p.tensor->offset + lo;
    if (p.dtype == StDtype::kBF16 && IsAlignedPtr(src, 2)) {
      cpu::Bf16ToFp32(dst, reinterpret_cast<const uint16_t*>(src), hi - lo, threads);
    } else if (p.dtype == StDtype::kF32) {
      cpu::CopyBytes(reinterpret_cast<char*>(dst), src, (hi - lo) * 4, threads);
    } else {
      ConvertToF32(p.dtype, src, hi - lo, dst);  // the dtype was checked by LayoutTensorInfo
    }
  }
}

// Runs the units through the ring: issued in order with ring.size() in flight, consumed in order.
Status ReadUnits(Storage& storage, const std::string& path, const std::vector<ReadUnit>& units, const std::vector<Piece>& pieces,
                 ChunkRing& ring, float* params, CpuThreads& threads, HfLoadStats* stats) {
  CompletionQueue queue;
  std::vector<char> done(units.size(), 0);
  Status error;
  size_t issued = 0, waited = 0;
  auto issue = [&](size_t k) {
    const ReadUnit& u = units[k];
    const IoRequest r{IoOp::kRead, u.file, u.offset, u.length, ring[k % ring.size()], k};
    return storage.Submit({&r, 1}, &queue);
  };
  auto collect = [&] {
    std::vector<IoCompletion> got;
    queue.Wait(&got, 1);
    for (const IoCompletion& c : got) {
      done[c.tag] = 1;
      ++waited;
      if (!c.status.ok() && error.ok()) error = c.status;
    }
  };
  for (size_t k = 0; k < units.size(); ++k) {
    while (error.ok() && issued < units.size() && issued < k + static_cast<size_t>(ring.size())) {
      if (Status s = issue(issued); !s.ok()) {
        error = s;
        break;
      }
      ++issued;
    }
    while (error.ok() && !done[k]) collect();
    if (!error.ok()) break;
    ConvertUnit(units[k], ring[k % ring.size()], pieces, params, threads);
    stats->bytes_read += units[k].length;
  }
  while (waited < issued) collect();  // nothing may land in a buffer after it is freed
  return error.WithContext("read '" + path + "'");
}

// The files of the directory and the layout tensors each holds: model.safetensors, else the
// shards the index names (each a plain file of the directory), in name order.
StatusOr<std::vector<ShardPlan>> ShardsOf(const std::string& dir, const ParamLayout& layout) {
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single = fs::path(dir) / "model.safetensors";
  std::error_code ec;
  std::vector<ShardPlan> shards;
  if (!fs::exists(index_path, ec)) {
    if (!fs::exists(single, ec)) {
      return NotFound("Hugging Face model directory '" + dir +
                      "': neither model.safetensors nor model.safetensors.index.json is there");
    }
    shards.push_back({single.string(), {}, {}, {}, {}});
    for (const ParamTensor& t : layout.tensors) shards.back().tensors.push_back(&t);
    return shards;
  }
  const std::string where = std::string("'").append(index_path.string()).append("'");
  TF_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(index_path.string(), "model.safetensors.index.json"));
  TF_ASSIGN_OR_RETURN(const nlohmann::ordered_json index, ParseJsonChecked(text, where));
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    return InvalidArgument(where + ": no 'weight_map' object (tensor name -> shard file)");
  }
  std::map<std::string, std::vector<const ParamTensor*>> by_shard;
  const nlohmann::ordered_json& map = index["weight_map"];
  for (const ParamTensor& t : layout.tensors) {
    if (!map.contains(t.name)) return NotFound(where + ": weight_map has no '" + t.name + "' (the model needs it)");
    if (!map[t.name].is_string()) return InvalidArgument(where + ": weight_map '" + t.name + "' must be a file name");
    const std::string shard = map[t.name].get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..") {
      return InvalidArgument(where + ": weight_map '" + t.name + "' names '" + shard +
                             "', not a file of the directory (a shard is a plain file name)");
    }
    by_shard[shard].push_back(&t);
  }
  for (auto& [shard, tensors] : by_shard) {
    const fs::path path = fs::path(dir) / shard;
    if (!fs::exists(path, ec)) {
      return NotFound(where + ": shard '" + shard + "' (of '" + tensors.front()->name + "') is missing");
    }
    shards.push_back({path.string(), std::move(tensors), {}, {}, {}});
  }
  return shards;
}

// The bytes [from, to) of the file's stream — the 8-byte length, the header, then each tensor in
// `dtype` — into out; `cursor` walks the tensors (elements never straddle a call's bounds: the
// data starts block-aligned and `from`, `to` are multiples of the element size past it).
struct ShardStream {
  std::string head;  // length + header, a multiple of kDirectAlignment
  const std::vector<const ParamTensor*>* tensors;
  const float* params;
  StDtype dtype;
  size_t tensor = 0;
  int64_t element = 0;

  void Fill(int64_t from, int64_t to, char* out, CpuThreads& threads) {
    const int64_t head_size = static_cast<int64_t>(head.size());
    if (from < head_size) {
      const int64_t n = std::min(to, head_size) - from;
      std::memcpy(out, head.data() + from, static_cast<size_t>(n));
      out += n;
      from += n;
    }
    const int64_t size = StDtypeBytes(dtype);
    while (from < to) {
      const ParamTensor& t = *(*tensors)[tensor];
      const int64_t n = std::min(t.elements - element, (to - from) / size);
      const float* src = params + t.offset + element;
      if (dtype == StDtype::kBF16) {
        cpu::Fp32ToBf16(reinterpret_cast<uint16_t*>(out), src, n, threads);
      } else if (dtype == StDtype::kF32) {
        cpu::CopyBytes(out, reinterpret_cast<const char*>(src), n * 4, threads);
      } else {
        for (int64_t i = 0; i < n; ++i) {
          const uint16_t h = Fp32ToFp16(src[i]);
          std::memcpy(out + 2 * i, &h, 2);
        }
      }
      out += n * size;
      from += n * size;
      element += n;
      if (element == t.elements) ++tensor, element = 0;
    }
  }
};

std::string ShardHead(const std::vector<const ParamTensor*>& tensors, StDtype dtype, int64_t* data_bytes) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = {{"format", "pt"}};  // transformers refuses safetensors without it
  int64_t offset = 0;
  for (const ParamTensor* t : tensors) {
    const int64_t size = t->elements * StDtypeBytes(dtype);
    header[t->name] = {{"dtype", std::string(StDtypeName(dtype))}, {"shape", t->shape}, {"data_offsets", {offset, offset + size}}};
    offset += size;
  }
  *data_bytes = offset;
  const std::string text = header.dump();
  // Spaces after the JSON (the format allows them) bring the data to a block boundary.
  const int64_t length = AlignUp(8 + static_cast<int64_t>(text.size()), kDirectAlignment) - 8;
  std::string head(static_cast<size_t>(8 + length), ' ');
  const uint64_t len = static_cast<uint64_t>(length);
  std::memcpy(head.data(), &len, 8);
  text.copy(head.data() + 8, text.size());
  return head;
}

}  // namespace

StatusOr<HfLoadStats> LoadHfWeights(const std::string& dir, const ParamLayout& layout, float* params, const HfIoOptions& io,
                                    int64_t begin, int64_t end) {
  if (end < 0) end = layout.total;
  if (begin < 0 || begin > end || end > layout.total) {
    return InvalidArgument("load the weights of '" + dir + "': the range [" + std::to_string(begin) + ", " + std::to_string(end) +
                           ") is not inside the model's " + std::to_string(layout.total) + " parameters");
  }
  if (io.chunk_bytes <= 0 || io.chunk_bytes % kDirectAlignment != 0 || io.depth < 1) {
    return InvalidArgument("load the weights of '" + dir + "': chunks must be positive multiples of " +
                           std::to_string(kDirectAlignment) + " bytes, at least one in flight");
  }
  TF_ASSIGN_OR_RETURN(std::vector<ShardPlan> shards, ShardsOf(dir, layout));
  TF_ASSIGN_OR_RETURN(const StorageRef storage, StorageRef::Make(io.storage));
  OpenFiles files(*storage);
  HfLoadStats stats;
  for (ShardPlan& shard : shards) TF_RETURN_IF_ERROR(PlanShard(*storage, files, io.direct, begin, end, &shard, &stats));
  // Buffers as large as the largest read, as many as the most reads of one file (a small model
  // does not pay for big chunks).
  std::vector<std::vector<ReadUnit>> units;
  int64_t buffer_bytes = 1, depth = 1;
  for (const ShardPlan& shard : shards) {
    units.push_back(PlanReads(shard, io.chunk_bytes));
    for (const ReadUnit& u : units.back()) buffer_bytes = std::max(buffer_bytes, u.length);
    depth = std::max<int64_t>(depth, std::min<int64_t>(io.depth, static_cast<int64_t>(units.back().size())));
  }
  ChunkRing ring(*storage, static_cast<int>(depth), buffer_bytes);
  TF_RETURN_IF_ERROR(ring.Check(static_cast<int>(depth)));
  const ThreadsRef threads(io.threads);
  for (size_t k = 0; k < shards.size(); ++k) {
    stats.direct = stats.direct && shards[k].direct.direct;
    TF_RETURN_IF_ERROR(ReadUnits(*storage, shards[k].path, units[k], shards[k].pieces, ring, params, *threads, &stats));
    ++stats.files;
  }
  return stats;
}

Status WriteHfShard(const std::string& path, const std::vector<const ParamTensor*>& tensors, const float* params, StDtype dtype,
                    const HfIoOptions& io) {
  const std::string what = "write '" + path + "'";
  if (io.chunk_bytes <= 0 || io.chunk_bytes % kDirectAlignment != 0 || io.depth < 1) {
    return InvalidArgument(what + ": chunks must be positive multiples of " + std::to_string(kDirectAlignment) +
                           " bytes, at least one in flight");
  }
  TF_ASSIGN_OR_RETURN(const StorageRef storage, StorageRef::Make(io.storage));
  OpenFiles files(*storage);
  OpenOptions o;
  o.create = o.truncate = true;
  o.direct = io.direct;
  o.direct_fallback = true;
  TF_ASSIGN_OR_RETURN(const OpenFile file, files.Open(path, o));
  if (file.direct && kDirectAlignment % file.alignment != 0) {
    return FailedPrecondition(what + ": the file system's direct-I/O alignment " + std::to_string(file.alignment) + " does not divide " +
                         std::to_string(kDirectAlignment));
  }
  ShardStream stream{{}, &tensors, params, dtype};
  int64_t data_bytes = 0;
  stream.head = ShardHead(tensors, dtype, &data_bytes);
  const int64_t total = static_cast<int64_t>(stream.head.size()) + data_bytes;
  // A small file does not pay for big chunks.
  const int64_t chunk = std::min(io.chunk_bytes, AlignUp(total, kDirectAlignment));
  const int depth = static_cast<int>(std::min<int64_t>(io.depth, (total + chunk - 1) / chunk));
  ChunkRing ring(*storage, depth, chunk);
  TF_RETURN_IF_ERROR(ring.Check(depth));
  const ThreadsRef threads(io.threads);
  CompletionQueue queue;
  std::vector<char> busy(static_cast<size_t>(ring.size()), 0);
  int in_flight = 0;
  Status error;
  auto collect = [&] {
    std::vector<IoCompletion> got;
    queue.Wait(&got, 1);
    for (const IoCompletion& c : got) {
      busy[c.tag] = 0;
      --in_flight;
      if (!c.status.ok() && error.ok()) error = c.status;
    }
  };
  for (int64_t from = 0, k = 0; from < total && error.ok(); from += chunk, ++k) {
    const size_t slot = static_cast<size_t>(k % ring.size());
    while (busy[slot] && error.ok()) collect();
    if (!error.ok()) break;
    const int64_t to = std::min(total, from + chunk);
    stream.Fill(from, to, ring[slot], *threads);
    int64_t length = to - from;
    if (file.direct) {  // whole blocks: the file's last one padded with zeros, cut off below
      const int64_t padded = AlignUp(length, file.alignment);
      std::memset(ring[slot] + length, 0, static_cast<size_t>(padded - length));
      length = padded;
    }
    const IoRequest r{IoOp::kWrite, file.id, from, length, ring[slot], slot};
    if (Status s = (*storage).Submit({&r, 1}, &queue); !s.ok()) {
      error = s;
      break;
    }
    busy[slot] = 1;
    ++in_flight;
  }
  while (in_flight > 0) collect();  // nothing may leave a buffer after it is freed
  if (error.ok() && file.direct && total % file.alignment != 0) error = (*storage).Truncate(file.id, total);
  if (error.ok()) error = (*storage).Sync(file.id);
  if (Status closed = files.Close(file.id); error.ok()) error = closed;
  return error.WithContext(what);
}

}  // namespace tierflow::real
