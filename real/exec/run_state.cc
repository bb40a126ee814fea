// The run's state (run_state.h): finding state in its buffers, their memory, the micro-steps'
// batches and the step's decision, the ranks' agreement.
#include "run_state.h"

#include <algorithm>

namespace tierflow::real::exec {

RunState::RunState(const Schedule& s, const TrainConfig& config, const RunOptions& options, RankSpace space, Collective* comm)
    : s_(s),
      config_(config),
      options_(options),
      space_(std::move(space)),
      comm_(comm),
      trainer_(config),
      scaler_(ScalerFor(config)),
      global_check_(HasGlobalCheck(s)),
      micro_steps_(s.MicroSteps()),
      // Host blocks are I/O memory (io_memory.h: huge pages from 2 MiB up, as the disk probe's)
      // and page-locked for the device's copies; where that fails the copies still work, staged
      // by the driver. Mapped, not faulted in: one made mid-run costs the dispatch thread a
      // mapping, and its pages are faulted in by the task that fills them, as an arena's are.
      blocks_(
          [this](int64_t bytes) -> void* {
            void* p = AllocateIoMemory(bytes, /*populate=*/false);
            if (p != nullptr && device_) (void)device_->RegisterHost(p, AlignUp(bytes, kDirectAlignment));
            return p;
          },
          [this](void* p, int64_t bytes) {
            if (device_) device_->UnregisterHost(p);
            FreeIoMemory(p, bytes);
          }) {}

RunState::~RunState() {
  for (BufferState& b : buffers_) {
    ReturnBuffer(b, /*for_good=*/true);
    b.piece.Release();  // (ReturnBuffer gave it back; a piece must not outlive the arena below)
    b.home.Release();
  }
  if (host_memory_ != nullptr && device_) device_->UnregisterHost(host_memory_->base());
  host_memory_.reset();
  if (device_ && resident_block_ != nullptr) device_->Free(resident_block_);
}

std::string RunState::GradVersionText(int64_t v) const {
  if (v < 0) return VersionText(v);
  const int64_t step = v / 2;
  std::string text = "iteration " + std::to_string(step / micro_steps_);
  if (micro_steps_ > 1) text += " micro-step " + std::to_string(step % micro_steps_);
  return v % 2 == 0 ? text + " (the tied head's part)" : text;
}


CpuThreads& RunState::ThreadsOf(int32_t resource) {
  auto& slot = threads_[static_cast<size_t>(resource)];
  if (!slot) slot = std::make_unique<CpuThreads>(pool_threads_[static_cast<size_t>(resource)]);
  return *slot;
}

Span RunState::FindSpan(int32_t buffer, int kind, int64_t begin, int64_t n) const {
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

Span RunState::FindIn(std::span<const int32_t> buffers, int kind, int64_t begin, int64_t n, int32_t* which) const {
  for (int32_t b : buffers) {
    const Span span = FindSpan(b, kind, begin, n);
    if (span.data == nullptr) continue;
    if (which != nullptr) *which = b;
    return span;
  }
  if (which != nullptr) *which = kNoIndex;
  return {};
}

void RunState::SetVersion(int32_t buffer, int kind, int64_t begin, int64_t n, int64_t version) {
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

void RunState::Place(int32_t buffer, const Piece& piece) {
  auto& pieces = Buf(buffer).pieces;
  pieces.erase(std::remove_if(pieces.begin(), pieces.end(), [&](const Piece& q) {
    return q.kind == piece.kind && q.begin < piece.begin + piece.elements && piece.begin < q.begin + q.elements;
  }), pieces.end());
  pieces.push_back(piece);
}

int32_t RunState::FirstBufferOnDevice(const TaskSpec& t, DeviceKind kind, bool allocs_first) const {
  auto on = [&](int32_t b) {
    return s_.devices()[static_cast<size_t>(s_.pools()[static_cast<size_t>(s_.buffers()[static_cast<size_t>(b)].pool)].device)].kind == kind;
  };
  const IndexList* lists[2] = {&t.allocs, &t.uses};
  if (!allocs_first) std::swap(lists[0], lists[1]);
  for (const auto* list : lists) {
    for (int32_t b : *list) {
      if (on(b)) return b;
    }
  }
  return kNoIndex;
}

int32_t RunState::GpuBufferOf(const TaskSpec& t) const {
  for (const auto* list : {&t.allocs, &t.uses}) {
    for (int32_t b : *list) {
      if (HoldsGpuMemory(b)) return b;
    }
  }
  return kNoIndex;
}

const ResidentRun* RunState::ResidentAt(int64_t at) const {
  auto it = std::upper_bound(resident_.begin(), resident_.end(), at, [](int64_t v, const ResidentRun& r) { return v < r.begin; });
  if (it == resident_.begin()) return nullptr;
  --it;
  return at < it->begin + it->n ? &*it : nullptr;
}

StatusOr<std::vector<ParamRange>> RunState::ParamsOnGpu(const TaskSpec& t, int64_t iteration, int64_t begin, int64_t n) const {
  std::vector<ParamRange> out;
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

Status RunState::TakeBuffer(BufferState& buf, const std::string& name) {
  buf.pieces.clear();
  if (buf.on_gpu) {
    auto block = device_->Allocate(buf.size);
    if (!block.ok()) return Status(block.status().code(), "buffer '" + name + "': " + block.status().message());
    buf.data = static_cast<char*>(*block);
    return Status::Ok();
  }
  if (!buf.home.empty()) {
    buf.data = buf.home.bytes();
    return Status::Ok();
  }
  ExactPool* pool = buf.pool >= 0 && static_cast<size_t>(buf.pool) < host_pools_.size() ? host_pools_[static_cast<size_t>(buf.pool)] : nullptr;
  if (pool != nullptr) buf.piece = pool->TryAllocate(std::max<int64_t>(buf.size, 1));
  buf.data = buf.piece.empty() ? static_cast<char*>(blocks_.Take(buf.size)) : buf.piece.bytes();
  if (buf.data == nullptr) return ResourceExhausted("buffer '" + name + "': cannot allocate " + std::to_string(buf.size) + " bytes of host memory");
  return Status::Ok();
}

void RunState::ReturnBuffer(BufferState& buf, bool for_good) {
  if (buf.data == nullptr || (buf.on_gpu && !device_)) return;
  if (buf.on_gpu) {
    device_->Free(buf.data);
  } else if (!buf.piece.empty()) {
    buf.piece.Release();
  } else if (buf.home.empty()) {  // a home stays the buffer's
    if (for_good) blocks_.Release(buf.data);
    else blocks_.Give(buf.data);
  }
  buf.data = nullptr;
  buf.pieces.clear();
}

Status RunState::TakeBatch(const TaskSpec& t, int64_t iteration, int32_t micro, IterationState* it) {
  if (iteration * micro_steps_ + micro != next_batch_) {
    return FailedPrecondition(Who(t, iteration) + ": micro-step " + std::to_string(micro) + " of iteration " + std::to_string(iteration) +
                              " starts before micro-step " + std::to_string(next_batch_ % micro_steps_) + " of iteration " +
                              std::to_string(next_batch_ / micro_steps_));
  }
  ++next_batch_;
  TokenBatch batch = NextBatch();
  it->ranks = space_.ranks();
  it->tokens = std::move(batch.inputs);
  it->targets = std::move(batch.targets);
  if (it->iteration != iteration) it->loss_sum = 0;
  it->iteration = iteration;
  it->micro_step = micro;
  it->micro_steps = micro_steps_;
  return Status::Ok();
}

TokenBatch RunState::NextBatch() {
  TokenBatch mine = loader_->Next();  // rank 0's
  for (int32_t r = 1; r < space_.ranks(); ++r) {
    TokenBatch batch = loader_->Next();
    if (r == space_.rank()) mine = std::move(batch);
  }
  return mine;
}

void RunState::DecideStep(int64_t iteration, const cpu::GradCheck& total) {
  StepSlot& step = Step(iteration);
  const bool update = scaler_.Update(total.finite);
  step.decided = update ? 1 : 0;
  step.clip = cpu::ClipCoefficient(total, config_.gradient_clipping);
  if (update) ++updates_;
  step.adam_step = updates_;
  next_norm_iteration_ = iteration + 1;
}

Status RunState::AgreeAcrossRanks(const Status& mine) {
  const std::string text = mine.ok() ? std::string() : std::to_string(static_cast<int>(mine.code())) + " " + mine.message();
  TF_ASSIGN_OR_RETURN(const std::vector<std::string> texts, GatherText(text));
  for (size_t q = 0; q < texts.size(); ++q) {
    if (texts[q].empty()) continue;
    const size_t space = texts[q].find(' ');
    const std::string message = texts[q].substr(space + 1);
    return Status(static_cast<StatusCode>(std::stoi(texts[q].substr(0, space))),
                  static_cast<int>(q) == comm_->rank() ? message : "rank " + std::to_string(q) + ": " + message);
  }
  return Status::Ok();
}

StatusOr<std::vector<std::string>> RunState::GatherText(std::string mine) {
  const int ranks = comm_->ranks();
  const int64_t size = static_cast<int64_t>(mine.size());
  std::vector<int64_t> sizes(static_cast<size_t>(ranks));
  TF_RETURN_IF_ERROR(Complete(comm_->AllGather(&size, sizes.data(), 2, ElementType::kFloat32)));  // an int64 as 2 words
  int64_t most = *std::max_element(sizes.begin(), sizes.end());
  most = std::max<int64_t>(2, most + most % 2);  // gathered as 2-byte words, at least one
  mine.resize(static_cast<size_t>(most), '\0');
  std::string all(static_cast<size_t>(most * ranks), '\0');
  TF_RETURN_IF_ERROR(Complete(comm_->AllGather(mine.data(), all.data(), most / 2, ElementType::kBf16)));
  std::vector<std::string> texts;
  for (int q = 0; q < ranks; ++q) texts.push_back(all.substr(static_cast<size_t>(q * most), static_cast<size_t>(sizes[static_cast<size_t>(q)])));
  return texts;
}

}  // namespace tierflow::real::exec
