// Finding state in a run's buffers, and their memory (run.h).
#include "run.h"

#include <algorithm>

namespace tierflow::real::exec {

CpuThreads& Run::ThreadsOf(int32_t resource) {
  auto& slot = threads_[static_cast<size_t>(resource)];
  if (!slot) slot = std::make_unique<CpuThreads>(pool_threads_[static_cast<size_t>(resource)]);
  return *slot;
}

Span Run::FindSpan(int32_t buffer, int kind, int64_t begin, int64_t n) const {
  const BufferState& buf = Buf(buffer);
  const int64_t end = begin + n, bytes = KindBytes(kind);
  std::vector<const Piece*> parts;
  for (const Piece& p : buf.pieces) {
    if (p.kind != kind || p.begin >= end || begin >= p.begin + p.elements) continue;
    if (p.begin <= begin && end <= p.begin + p.elements) return {buf.data + p.offset + (begin - p.begin) * bytes, p.version};
    parts.push_back(&p);
  }
  std::sort(parts.begin(), parts.end(), [](const Piece* a, const Piece* b) { return a->begin < b->begin; });
  if (parts.empty() || parts.front()->begin > begin) return {};
  const int64_t base = parts.front()->offset + (begin - parts.front()->begin) * bytes;  // where `begin` is
  int64_t at = begin, version = parts.front()->version;
  for (const Piece* p : parts) {
    if (p->begin > at) return {};                                                  // a hole
    if (p->offset + (at - p->begin) * bytes != base + (at - begin) * bytes) return {};  // not side by side
    if (p->version != version) version = Versions::kMixed;
    at = std::max(at, p->begin + p->elements);
  }
  if (at < end) return {};
  return {buf.data + base, version};
}

Span Run::FindIn(const std::vector<int32_t>& buffers, int kind, int64_t begin, int64_t n, int32_t* which) const {
  for (int32_t b : buffers) {
    const Span span = FindSpan(b, kind, begin, n);
    if (span.data == nullptr) continue;
    if (which != nullptr) *which = b;
    return span;
  }
  if (which != nullptr) *which = kNoIndex;
  return {};
}

void Run::SetVersion(int32_t buffer, int kind, int64_t begin, int64_t n, int64_t version) {
  const int64_t end = begin + n, bytes = KindBytes(kind);
  std::vector<Piece> out;
  for (const Piece& p : Buf(buffer).pieces) {
    const int64_t p_end = p.begin + p.elements;
    if (p.kind != kind || p.begin >= end || begin >= p_end) {
      out.push_back(p);
      continue;
    }
    const int64_t b = std::max(begin, p.begin), e = std::min(end, p_end);
    if (p.begin < b) out.push_back({kind, p.begin, b - p.begin, p.offset, p.version});
    out.push_back({kind, b, e - b, p.offset + (b - p.begin) * bytes, version});
    if (e < p_end) out.push_back({kind, e, p_end - e, p.offset + (e - p.begin) * bytes, p.version});
  }
  Buf(buffer).pieces = std::move(out);
}

void Run::Place(int32_t buffer, const Piece& piece) {
  auto& pieces = Buf(buffer).pieces;
  pieces.erase(std::remove_if(pieces.begin(), pieces.end(), [&](const Piece& q) {
    return q.kind == piece.kind && q.begin < piece.begin + piece.elements && piece.begin < q.begin + q.elements;
  }), pieces.end());
  pieces.push_back(piece);
}

int32_t Run::FirstBufferOnDevice(const TaskSpec& t, DeviceKind kind, bool allocs_first) const {
  auto on = [&](int32_t b) {
    return s_.devices()[static_cast<size_t>(s_.pools()[static_cast<size_t>(s_.buffers()[static_cast<size_t>(b)].pool)].device)].kind == kind;
  };
  const std::vector<int32_t>* lists[2] = {&t.allocs, &t.uses};
  if (!allocs_first) std::swap(lists[0], lists[1]);
  for (const auto* list : lists) {
    for (int32_t b : *list) {
      if (on(b)) return b;
    }
  }
  return kNoIndex;
}

int32_t Run::GpuBufferOf(const TaskSpec& t) const {
  for (const auto* list : {&t.allocs, &t.uses}) {
    for (int32_t b : *list) {
      if (HoldsGpuMemory(b)) return b;
    }
  }
  return kNoIndex;
}

const ResidentRun* Run::ResidentAt(int64_t at) const {
  auto it = std::upper_bound(resident_.begin(), resident_.end(), at, [](int64_t v, const ResidentRun& r) { return v < r.begin; });
  if (it == resident_.begin()) return nullptr;
  --it;
  return at < it->begin + it->n ? &*it : nullptr;
}

StatusOr<std::vector<exec::ParamRange>> Run::ParamsOnGpu(const TaskSpec& t, int64_t iteration, int64_t begin, int64_t n) const {
  std::vector<exec::ParamRange> out;
  const int64_t end = begin + n;
  for (int64_t at = begin; at < end;) {
    const char* data = nullptr;
    int64_t stop = end, version = Versions::kNever;
    for (int32_t b : t.uses) {
      if (!HoldsGpuMemory(b)) continue;
      const BufferState& buf = Buf(b);
      for (const Piece& p : buf.pieces) {
        if (p.kind != kParam16 || at < p.begin || at >= p.begin + p.elements) continue;
        data = buf.data + p.offset + (at - p.begin) * 2;
        stop = std::min(end, p.begin + p.elements);
        version = p.version;
        break;
      }
      if (data != nullptr) break;
    }
    if (data == nullptr) {
      const ResidentRun* r = ResidentAt(at);
      if (r == nullptr) {
        return FailedPrecondition(Who(t, iteration) + " reads param16 [" + std::to_string(at) + ", " + std::to_string(end) +
                                  ") on the GPU, but no GPU buffer it uses holds element " + std::to_string(at) + " and it has no GPU-resident home");
      }
      data = r->data + (at - r->begin) * 2;
      stop = std::min(end, r->begin + r->n);
      version = resident_versions_.Get(at, stop);
    }
    if (version != iteration) {
      return FailedPrecondition(Who(t, iteration) + " computes with param16 [" + std::to_string(at) + ", " + std::to_string(stop) + ") on the GPU at " +
                                VersionText(version) + ", expected version " + std::to_string(iteration) + " (the parameters after " +
                                std::to_string(iteration) + " updates): a dependency is missing");
    }
    out.push_back({at, stop - at, data});
    at = stop;
  }
  return out;
}

Status Run::TakeBuffer(BufferState& buf, const std::string& name) {
  buf.pieces.clear();
  if (buf.on_gpu) {
    auto block = device_->Allocate(buf.size);
    if (!block.ok()) return Status(block.status().code(), "buffer '" + name + "': " + block.status().message());
    buf.data = static_cast<char*>(*block);
    return Status::Ok();
  }
  if (buf.home != nullptr) {
    buf.data = buf.home;
    return Status::Ok();
  }
  if (buf.pool >= 0 && static_cast<size_t>(buf.pool) < arenas_.size()) buf.data = arenas_[static_cast<size_t>(buf.pool)].Take(buf.size);
  if (buf.data == nullptr) buf.data = static_cast<char*>(blocks_.Take(buf.size));
  if (buf.data == nullptr) return ResourceExhausted("buffer '" + name + "': cannot allocate " + std::to_string(buf.size) + " bytes of host memory");
  return Status::Ok();
}

void Run::GiveBuffer(BufferState& buf) {
  if (buf.data == nullptr) return;
  if (buf.on_gpu) {
    device_->Free(buf.data);
  } else if (buf.data != buf.home) {  // a home stays the buffer's
    if (HostArena* arena = ArenaHolding(buf)) arena->Give(buf.data);
    else blocks_.Give(buf.data);
  }
  buf.data = nullptr;
  buf.pieces.clear();
}

void Run::ReleaseBuffer(BufferState& buf) {
  if (buf.data == nullptr || (buf.on_gpu && !device_)) return;
  if (buf.on_gpu) {
    device_->Free(buf.data);
  } else if (buf.data != buf.home) {  // a home stays the buffer's
    if (HostArena* arena = ArenaHolding(buf)) arena->Give(buf.data);
    else blocks_.Release(buf.data);
  }
  buf.data = nullptr;
}

HostArena* Run::ArenaHolding(const BufferState& buf) {
  if (buf.pool < 0 || static_cast<size_t>(buf.pool) >= arenas_.size()) return nullptr;
  HostArena& arena = arenas_[static_cast<size_t>(buf.pool)];
  return arena.Holds(buf.data) ? &arena : nullptr;
}

}  // namespace tierflow::real::exec
