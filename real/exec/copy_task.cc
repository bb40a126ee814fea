// h2d and d2h tasks (run.h): bf16 parameters from a host buffer into the GPU buffer the h2d
// allocates (or the GPU-resident home); a layer's gradients off gpu0 into a host buffer, fp32 or
// bf16, with the per-tensor overflow check and squared norm on the way. With micro-steps
// (gradient accumulation) the first micro-step's d2h writes the bf16 gradients and every later
// one adds into them (cpu::AccumulateBf16); the last micro-step's checks make the norm.
#include "run.h"

#include <algorithm>
#include <memory>

namespace tierflow::real::exec {

Status Run::PrepareCopy(const TaskSpec& t, Job& job, int64_t iteration) {
  if (t.op == Op::kH2D) {
    // From the host buffer it uses into the GPU buffer it allocates (or uses), packed in list
    // order; without one, into the parameters' GPU-resident home.
    const int32_t buffer = FirstBufferOnDevice(t, DeviceKind::kHost, false);
    const int32_t gpu = GpuBufferOf(t);
    struct Copy {
      char* dst;
      const char* src;
      int64_t bytes;
    };
    std::vector<Copy> copies;
    std::vector<Piece> placed;                                    // into `gpu`
    struct Refreshed {
      int64_t begin, n, version;  // model elements at the resident home
    };
    std::vector<Refreshed> refreshed;
    int64_t packed = 0;
    for (int32_t ti : t.tensors) {
      const TensorSpec& ts = T(ti);
      const int kind = KindOf(ts.kind);
      TF_CHECK(kind == kParam16);  // CheckTaskContracts
      const int64_t n = Elements(ts);
      const Span p = buffer == kNoIndex ? Span{} : FindSpan(buffer, kind, ts.element_offset, n);
      if (p.data == nullptr) return FailedPrecondition(Who(t, iteration) + " copies " + Range(ts) + " to the GPU, but no host buffer it uses holds it");
      const char* src = p.data;
      if (gpu != kNoIndex) {
        if (packed + n * 2 > Buf(gpu).size) {
          return InvalidArgument(Who(t, iteration) + ": " + Range(ts) + " does not fit GPU buffer '" + s_.buffers()[static_cast<size_t>(gpu)].name + "'");
        }
        copies.push_back({Buf(gpu).data + packed, src, n * 2});
        // With several ranks, this rank's partition, for the all-gather to make whole.
        placed.push_back({space_.ranks() == 1 ? kind : kParam16Part, ts.element_offset, n, packed, p.version});
        packed += n * 2;
        continue;
      }
      // The resident home holds the model's elements: this rank's part of each unit (all of it
      // with one rank).
      for (const RankSpace::Segment& seg : space_.Segments(ts.element_offset, n)) {
        const ResidentRun* r = ResidentAt(seg.global);
        if (r == nullptr || seg.global + seg.n > r->begin + r->n) {
          return FailedPrecondition(Who(t, iteration) + " copies " + Range(ts) + " to the GPU, but it names no GPU buffer for it and it has no GPU-resident home");
        }
        copies.push_back({r->data + (seg.global - r->begin) * 2, src + (seg.local - ts.element_offset) * 2, seg.n * 2});
        refreshed.push_back({seg.global, seg.n, p.version});
      }
    }
    job.work = [this, copies, span = &job.device_span] {
      for (const Copy& c : copies) {
        exec::DeviceSpan one;
        TF_RETURN_IF_ERROR(device_->H2D(c.dst, c.src, c.bytes, &one));
        span->Merge(one);
      }
      return Status::Ok();
    };
    job.finish = [this, gpu, placed, refreshed] {
      for (const Piece& p : placed) Place(gpu, p);
      for (const Refreshed& r : refreshed) resident_versions_.Set(r.begin, r.begin + r.n, r.version);
    };
    return Status::Ok();
  }
  // d2h: gradients leave the GPU; the norm is accumulated per tensor on the way (as DeepSpeed
  // does per partition while reducing).
  const int32_t buffer = FirstBufferOnDevice(t, DeviceKind::kHost, true);
  if (buffer == kNoIndex) return InvalidArgument(Who(t, iteration) + ": d2h names no host buffer");
  IterationState& it = Iter(iteration);
  const int32_t micro = t.micro_step;
  struct Out {
    const TensorSpec* ts;
    int64_t offset;
    const float* src;
    bool accumulate;  // adds into what the buffer holds
    bool partial;     // the tied head's part of the table's gradient
  };
  std::vector<Out> outs;
  int64_t packed = 0;
  for (int32_t ti : t.tensors) {
    const TensorSpec& ts = T(ti);
    const int kind = KindOf(ts.kind);
    TF_CHECK(kind == kGrad || kind == kGrad16);  // CheckTaskContracts
    const int64_t n = Elements(ts);
    // The layer's fp32 gradients, in a GPU buffer it uses (the backward that computed them
    // allocated it).
    // With several ranks, this rank's part of the unit, which the reduce-scatter reduced there.
    const std::vector<RankSpace::Segment> at = space_.Segments(ts.element_offset, n);
    if (at.size() != 1) return InvalidArgument(Who(t, iteration) + " copies " + Range(ts) + ", which is not within one partition of a tensor of the model");
    const int64_t global = at[0].global;
    const float* src = nullptr;
    int64_t v = Versions::kNever;
    for (int32_t b : t.uses) {
      if (!HoldsGpuMemory(b)) continue;
      const Span p = FindSpan(b, kGrad, global, n);
      if (p.data == nullptr) continue;
      src = reinterpret_cast<const float*>(p.data);
      v = p.version;
      break;
    }
    if (v != GradVersion(iteration, micro)) {
      return FailedPrecondition(Who(t, iteration) + " copies " + Range(ts) + " off the GPU, where the GPU buffers it uses hold " + GradVersionText(v) +
                                "'s, not " + GradVersionText(GradVersion(iteration, micro)) + "'s: it runs before the backward that computes it");
    }
    const int64_t offset = WriteOffset(buffer, kind, ts.element_offset, packed);
    if (offset + ts.size_bytes > Buf(buffer).size) return InvalidArgument(Who(t, iteration) + ": gradients do not fit buffer '" + s_.buffers()[static_cast<size_t>(buffer)].name + "'");
    // Contributions to a range, in order: per micro-step, the tied head's part of the table (a
    // range outside the d2h's own layer), then the range's own. The first of the iteration
    // overwrites; every other adds to the one before, which the buffer must hold.
    const bool partial = t.layer >= 0 && !trainer_.InLayer(t.layer, global, n);
    const bool after_partial = !partial && trainer_.TiedHead(trainer_.layer_count() - 1) && trainer_.InLayer(0, global, n);
    if (partial && !(trainer_.TiedHead(t.layer) && trainer_.InLayer(0, global, n))) {
      return InvalidArgument(Who(t, iteration) + " copies " + Range(ts) + " off the GPU, which is not in its layer " + std::to_string(t.layer) +
                             " (only the tied head copies the embedding table's gradient)");
    }
    const bool accumulate = micro > 0 || after_partial;
    if (accumulate) {
      TF_CHECK(kind == kGrad16);  // CheckTaskContracts, CheckRunnable
      const int64_t want = after_partial ? PartialGradVersion(iteration, micro) : GradVersion(iteration, micro - 1);
      const Span held = FindSpan(buffer, kGrad16, ts.element_offset, n);
      if (held.data != Buf(buffer).data + offset || held.version != want) {
        return FailedPrecondition(Who(t, iteration) + " adds " + Range(ts) + " into buffer '" + s_.buffers()[static_cast<size_t>(buffer)].name +
                                  "', which holds " + (held.data == nullptr ? std::string("none of it") : GradVersionText(held.version) + "'s") +
                                  ", not " + GradVersionText(want) + "'s: a dependency on the contribution before is missing");
      }
    }
    packed += ts.size_bytes;
    outs.push_back({&ts, offset, src, accumulate, partial});
  }
  auto checks = std::make_shared<std::vector<cpu::GradCheck>>(outs.size());
  const float grad_scale = 1.0f / it.loss_scale;
  CpuThreads* threads = &ThreadsOf(t.resource);
  char* base = Buf(buffer).data;
  job.work = [this, outs, checks, grad_scale, threads, base, span = &job.device_span] {
    for (size_t i = 0; i < outs.size(); ++i) {
      const TensorSpec& ts = *outs[i].ts;
      const int64_t n = Elements(ts);
      char* dst = base + outs[i].offset;
      exec::DeviceSpan one;
      if (outs[i].accumulate) {
        TF_ASSIGN_OR_RETURN((*checks)[i], device_->D2HGradAccumulate(reinterpret_cast<uint16_t*>(dst), outs[i].src, n, grad_scale, *threads, &one));
      } else {
        TF_ASSIGN_OR_RETURN((*checks)[i], device_->D2HGrad(dst, outs[i].src, n, KindOf(ts.kind) != kGrad, grad_scale, *threads, &one));
      }
      span->Merge(one);
    }
    return Status::Ok();
  };
  job.finish = [this, outs, checks, buffer, iteration, micro] {
    NormAccumulator& norm = norms_[static_cast<size_t>(iteration % window_)];
    const bool last = micro == micro_steps_ - 1;  // the accumulated gradients: what the norm is of
    for (size_t i = 0; i < outs.size(); ++i) {
      const TensorSpec& ts = *outs[i].ts;
      const int64_t n = Elements(ts);
      const int64_t version = outs[i].partial ? PartialGradVersion(iteration, micro) : GradVersion(iteration, micro);
      Place(buffer, {KindOf(ts.kind), ts.element_offset, n, outs[i].offset, version});
      if (last && !outs[i].partial) norm.by_begin[ts.element_offset] = {n, (*checks)[i]};
    }
  };
  return Status::Ok();
}

}  // namespace tierflow::real::exec
