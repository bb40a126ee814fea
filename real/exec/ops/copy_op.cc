// h2d and d2h tasks (op_handler.h): bf16 parameters from a host buffer into the GPU buffer the h2d
// allocates (or the GPU-resident home), and gradients (bf16, or fp32) up for an update on the GPU; a layer's
// gradients off gpu0 into a host buffer, fp32 or bf16, with the per-tensor overflow check and
// squared norm on the way, and the rounded parameters of an update on the GPU on their way home. With micro-steps
// (gradient accumulation) the first micro-step's d2h writes the bf16 gradients and every later
// one adds into them (cpu::AccumulateBf16); the last micro-step's checks make the norm.
#include <algorithm>
#include <memory>

#include "../run_state.h"
#include "op_handler.h"

namespace tierflow::real::exec {

namespace {

std::string Names(const TensorSpec& ts) { return "'" + ts.name + "' (" + std::string(StateKindName(ts.kind)) + ")"; }

// One copy between host memory and gpu0's, as an h2d or d2h task makes it.
struct Copy {
  char* dst;
  const char* src;
  int64_t bytes;
};

}  // namespace

// param16 goes to the GPU, and gradients for an update there (grad16 or grad, into a GPU buffer).
Status CheckH2D(const Schedule& s, const TaskSpec& t, const std::string& who) {
  for (int32_t i : t.tensors) {
    const TensorSpec& ts = s.tensors()[static_cast<size_t>(i)];
    if (ts.kind != StateKind::kParam16 && ts.kind != StateKind::kGrad && ts.kind != StateKind::kGrad16) {
      return InvalidArgument(who + ": copies " + Names(ts) + " to the GPU; only param16, and gradients (grad16, grad) for an update there, go there");
    }
  }
  return Status::Ok();
}

// Gradients leave the GPU (with micro-steps as grad16, accumulated in host memory), and the
// rounded parameters of an update on the GPU, on their way home (param16): not both in one task.
Status CheckD2H(const Schedule& s, const TaskSpec& t, const std::string& who) {
  const int32_t micro_steps = s.MicroSteps();
  int params = 0;
  for (int32_t i : t.tensors) params += s.tensors()[static_cast<size_t>(i)].kind == StateKind::kParam16;
  if (params > 0 && params != static_cast<int>(t.tensors.size())) {
    return InvalidArgument(who + ": copies param16 and gradients off the GPU; a d2h copies one or the other");
  }
  if (params > 0) return Status::Ok();
  for (int32_t i : t.tensors) {
    const TensorSpec& ts = s.tensors()[static_cast<size_t>(i)];
    if (ts.kind != StateKind::kGrad && ts.kind != StateKind::kGrad16) {
      return InvalidArgument(who + ": copies " + Names(ts) + " off the GPU; only gradients (grad, grad16), and param16 after an update there, leave it");
    }
    if (micro_steps > 1 && ts.kind != StateKind::kGrad16) {
      return InvalidArgument(who + ": copies " + Names(ts) + " off the GPU, but with " + std::to_string(micro_steps) +
                             " micro-steps gradients accumulate in host memory as grad16 (docs/schedule-format.md)");
    }
  }
  return Status::Ok();
}

Status PrepareH2D(RunState& run, const TaskSpec& t, int32_t /*task*/, int64_t iteration, Job& job) {
  // From the host buffer it uses into the GPU buffer it allocates (or uses), packed in list
  // order; without one, into the parameters' GPU-resident home (param16 only: a gradient, bf16
  // or fp32, goes into a GPU buffer, for the update on the GPU that uses it).
  const int32_t buffer = run.FirstBufferOnDevice(t, DeviceKind::kHost, false);
  const int32_t gpu = run.GpuBufferOf(t);
  std::vector<Copy> copies;
  std::vector<Piece> placed;  // into `gpu`
  struct Refreshed {
    int64_t begin, n, version;  // model elements at the resident home
  };
  std::vector<Refreshed> refreshed;
  int64_t packed = 0;
  for (int32_t ti : t.tensors) {
    const TensorSpec& ts = run.T(ti);
    const int kind = KindOf(ts.kind);
    TF_CHECK(kind == kParam16 || kind == kGrad || kind == kGrad16);  // CheckH2D
    const int64_t n = run.Elements(ts);
    const Span p = buffer == kNoIndex ? Span{} : run.FindSpan(buffer, kind, ts.element_offset, n);
    if (p.data == nullptr) return FailedPrecondition(run.Who(t, iteration) + " copies " + run.Range(ts) + " to the GPU, but no host buffer it uses holds it");
    const char* src = p.data;
    if (gpu != kNoIndex) {
      if (packed + ts.size_bytes > run.Buf(gpu).size) {
        return InvalidArgument(run.Who(t, iteration) + ": " + run.Range(ts) + " does not fit GPU buffer '" + run.BufferName(gpu) + "'");
      }
      copies.push_back({run.Buf(gpu).data + packed, src, ts.size_bytes});
      // With several ranks, this rank's partition of parameters, for the all-gather to make
      // whole (a gradient is this rank's own, in its element space).
      placed.push_back({kind == kParam16 && run.space().ranks() > 1 ? kParam16Part : kind, ts.element_offset, n, packed, p.version});
      packed += ts.size_bytes;
      continue;
    }
    if (kind != kParam16) {
      return InvalidArgument(run.Who(t, iteration) + " copies " + run.Range(ts) + " to the GPU but names no GPU buffer for it (a gradient has no GPU home)");
    }
    // The resident home holds the model's elements: this rank's part of each unit (all of it
    // with one rank).
    for (const RankSpace::Segment& seg : run.space().Segments(ts.element_offset, n)) {
      const ResidentRun* r = run.ResidentAt(seg.global);
      if (r == nullptr || seg.global + seg.n > r->begin + r->n) {
        return FailedPrecondition(run.Who(t, iteration) + " copies " + run.Range(ts) + " to the GPU, but it names no GPU buffer for it and it has no GPU-resident home");
      }
      copies.push_back({r->data + (seg.global - r->begin) * 2, src + (seg.local - ts.element_offset) * 2, seg.n * 2});
      refreshed.push_back({seg.global, seg.n, p.version});
    }
  }
  job.work = [&run, copies, span = &job.device_span] {
    for (const Copy& c : copies) {
      DeviceSpan one;
      TF_RETURN_IF_ERROR(run.device()->H2D(c.dst, c.src, c.bytes, &one));
      span->Merge(one);
    }
    return Status::Ok();
  };
  job.finish = [&run, gpu, placed, refreshed] {
    for (const Piece& p : placed) run.Place(gpu, p);
    for (const Refreshed& r : refreshed) run.resident_versions().Set(r.begin, r.begin + r.n, r.version);
  };
  return Status::Ok();
}

namespace {

// The rounded parameters of an update on the GPU, from the GPU buffer it uses into the host buffer
// it allocates (or uses), packed in list order, at their version.
Status PrepareD2HParams(RunState& run, const TaskSpec& t, int64_t iteration, int32_t buffer, Job& job) {
  std::vector<Copy> copies;
  std::vector<Piece> placed;
  int64_t packed = 0;
  for (int32_t ti : t.tensors) {
    const TensorSpec& ts = run.T(ti);
    const int64_t n = run.Elements(ts);
    Span p;
    for (int32_t b : t.uses) {
      if (run.HoldsGpuMemory(b) && (p = run.FindSpan(b, kParam16, ts.element_offset, n)).data != nullptr) break;
    }
    if (p.data == nullptr) return FailedPrecondition(run.Who(t, iteration) + " copies " + run.Range(ts) + " off the GPU, but no GPU buffer it uses holds it");
    if (p.version != iteration + 1) {
      return FailedPrecondition(run.Who(t, iteration) + " copies " + run.Range(ts) + " off the GPU at " + VersionText(p.version) +
                                ", expected the update's (version " + std::to_string(iteration + 1) + ")");
    }
    if (packed + ts.size_bytes > run.Buf(buffer).size) return InvalidArgument(run.Who(t, iteration) + ": its tensors do not fit buffer '" + run.BufferName(buffer) + "'");
    copies.push_back({run.Buf(buffer).data + packed, p.data, ts.size_bytes});
    placed.push_back({kParam16, ts.element_offset, n, packed, p.version});
    packed += ts.size_bytes;
  }
  job.work = [&run, copies] {
    for (const Copy& c : copies) TF_RETURN_IF_ERROR(run.device()->D2H(c.dst, c.src, c.bytes));
    return Status::Ok();
  };
  job.finish = [&run, buffer, placed] {
    for (const Piece& p : placed) run.Place(buffer, p);
  };
  return Status::Ok();
}

}  // namespace

// Gradients leave the GPU; the norm is accumulated per tensor on the way (as DeepSpeed does per
// partition while reducing). The rounded parameters of an update on the GPU: PrepareD2HParams.
Status PrepareD2H(RunState& run, const TaskSpec& t, int32_t /*task*/, int64_t iteration, Job& job) {
  const int32_t buffer = run.FirstBufferOnDevice(t, DeviceKind::kHost, true);
  if (buffer == kNoIndex) return InvalidArgument(run.Who(t, iteration) + ": d2h names no host buffer");
  if (!t.tensors.empty() && run.T(t.tensors[0]).kind == StateKind::kParam16) return PrepareD2HParams(run, t, iteration, buffer, job);
  IterationState& it = run.Iter(iteration);
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
    const TensorSpec& ts = run.T(ti);
    const int kind = KindOf(ts.kind);
    TF_CHECK(kind == kGrad || kind == kGrad16);  // CheckD2H
    const int64_t n = run.Elements(ts);
    // The layer's fp32 gradients, in a GPU buffer it uses (the backward that computed them
    // allocated it).
    // With several ranks, this rank's part of the unit, which the reduce-scatter reduced there.
    const std::vector<RankSpace::Segment> at = run.space().Segments(ts.element_offset, n);
    if (at.size() != 1) return InvalidArgument(run.Who(t, iteration) + " copies " + run.Range(ts) + ", which is not within one partition of a tensor of the model");
    const int64_t global = at[0].global;
    const float* src = nullptr;
    int64_t v = Versions::kNever;
    for (int32_t b : t.uses) {
      if (!run.HoldsGpuMemory(b)) continue;
      const Span p = run.FindSpan(b, kGrad, global, n);
      if (p.data == nullptr) continue;
      src = reinterpret_cast<const float*>(p.data);
      v = p.version;
      break;
    }
    if (v != run.GradVersion(iteration, micro)) {
      return FailedPrecondition(run.Who(t, iteration) + " copies " + run.Range(ts) + " off the GPU, where the GPU buffers it uses hold " + run.GradVersionText(v) +
                                "'s, not " + run.GradVersionText(run.GradVersion(iteration, micro)) + "'s: it runs before the backward that computes it");
    }
    const int64_t offset = run.WriteOffset(buffer, kind, ts.element_offset, packed);
    if (offset + ts.size_bytes > run.Buf(buffer).size) return InvalidArgument(run.Who(t, iteration) + ": gradients do not fit buffer '" + run.BufferName(buffer) + "'");
    // Contributions to a range, in order: per micro-step, the tied head's part of the table (a
    // range outside the d2h's own layer), then the range's own. The first of the iteration
    // overwrites; every other adds to the one before, which the buffer must hold.
    const bool partial = t.layer >= 0 && !run.trainer().InLayer(t.layer, global, n);
    const bool after_partial = !partial && run.trainer().TiedHead(run.trainer().layer_count() - 1) && run.trainer().InLayer(0, global, n);
    if (partial && !(run.trainer().TiedHead(t.layer) && run.trainer().InLayer(0, global, n))) {
      return InvalidArgument(run.Who(t, iteration) + " copies " + run.Range(ts) + " off the GPU, which is not in its layer " + std::to_string(t.layer) +
                             " (only the tied head copies the embedding table's gradient)");
    }
    const bool accumulate = micro > 0 || after_partial;
    if (accumulate) {
      TF_CHECK(kind == kGrad16);  // CheckD2H, CheckRunnable
      const int64_t want = after_partial ? run.PartialGradVersion(iteration, micro) : run.GradVersion(iteration, micro - 1);
      const Span held = run.FindSpan(buffer, kGrad16, ts.element_offset, n);
      if (held.data != run.Buf(buffer).data + offset || held.version != want) {
        return FailedPrecondition(run.Who(t, iteration) + " adds " + run.Range(ts) + " into buffer '" + run.BufferName(buffer) +
                                  "', which holds " + (held.data == nullptr ? std::string("none of it") : run.GradVersionText(held.version) + "'s") +
                                  ", not " + run.GradVersionText(want) + "'s: a dependency on the contribution before is missing");
      }
    }
    packed += ts.size_bytes;
    outs.push_back({&ts, offset, src, accumulate, partial});
  }
  auto checks = std::make_shared<std::vector<cpu::GradCheck>>(outs.size());
  const float grad_scale = 1.0f / it.loss_scale;
  CpuThreads* threads = &run.ThreadsOf(t.resource);
  char* base = run.Buf(buffer).data;
  job.work = [&run, outs, checks, grad_scale, threads, base, span = &job.device_span] {
    for (size_t i = 0; i < outs.size(); ++i) {
      const TensorSpec& ts = *outs[i].ts;
      const int64_t n = run.Elements(ts);
      char* dst = base + outs[i].offset;
      DeviceSpan one;
      if (outs[i].accumulate) {
        TF_ASSIGN_OR_RETURN((*checks)[i], run.device()->D2HGradAccumulate(reinterpret_cast<uint16_t*>(dst), outs[i].src, n, grad_scale, *threads, &one));
      } else {
        TF_ASSIGN_OR_RETURN((*checks)[i], run.device()->D2HGrad(dst, outs[i].src, n, KindOf(ts.kind) != kGrad, grad_scale, *threads, &one));
      }
      span->Merge(one);
    }
    return Status::Ok();
  };
  job.finish = [&run, outs, checks, buffer, iteration, micro] {
    NormAccumulator& norm = run.Step(iteration).norm;
    const bool last = micro == run.micro_steps() - 1;  // the accumulated gradients: what the norm is of
    for (size_t i = 0; i < outs.size(); ++i) {
      const TensorSpec& ts = *outs[i].ts;
      const int64_t n = run.Elements(ts);
      const int64_t version = outs[i].partial ? run.PartialGradVersion(iteration, micro) : run.GradVersion(iteration, micro);
      run.Place(buffer, {KindOf(ts.kind), ts.element_offset, n, outs[i].offset, version});
      if (last && !outs[i].partial) norm.by_begin[ts.element_offset] = {n, (*checks)[i]};
    }
  };
  return Status::Ok();
}

}  // namespace tierflow::real::exec
