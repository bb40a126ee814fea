// convert tasks (op_handler.h): the global gradient check (overflow, norm, clip factor) that decides
// the step; fp32 master weights to the bf16 parameters; bf16 gradients kept in host memory widened
// to fp32 for the update; a tensor copied from one host buffer into another.
#include <algorithm>

#include "../run_state.h"
#include "op_handler.h"

namespace tierflow::real::exec {

// What each kernel names and writes.
Status CheckConvert(const Schedule& s, const TaskSpec& t, const std::string& who) {
  auto tensor = [&](int32_t i) -> const TensorSpec& { return s.tensors()[static_cast<size_t>(i)]; };
  auto names = [&](const TensorSpec& ts) { return "'" + ts.name + "' (" + std::string(StateKindName(ts.kind)) + ")"; };
  if (t.kernel == Kernel::kFp32ToBf16) {
    // Parameters kept in host memory are converted in place, at their home; the others into the
    // buffer it allocates.
    for (int32_t i : t.tensors) {
      if (tensor(i).kind != StateKind::kParam16) return InvalidArgument(who + ": fp32_to_bf16 names " + names(tensor(i)) + "; it writes param16 only");
      if (s.devices()[static_cast<size_t>(tensor(i).device)].kind != DeviceKind::kHost && t.allocs.empty()) {
        return InvalidArgument(who + ": fp32_to_bf16 allocates no output buffer for " + names(tensor(i)) + ", which is not kept in host memory");
      }
    }
  }
  if (t.kernel == Kernel::kBf16ToFp32 && (t.tensors.size() != 1 || tensor(t.tensors[0]).kind != StateKind::kGrad16)) {
    return InvalidArgument(who + ": bf16_to_fp32 names one grad16 tensor, the sub-group's gradients it widens");
  }
  if (t.kernel == Kernel::kCopy && (t.tensors.size() != 1 || t.allocs.size() != 1)) {
    return InvalidArgument(who + ": copy names one tensor and allocates one buffer, the one it copies the tensor into");
  }
  return Status::Ok();
}

namespace {

Status PrepareGradCheck(RunState& run, const TaskSpec& t, int64_t iteration, Job& job) {
  if (iteration != run.next_norm_iteration()) {
    return FailedPrecondition(run.Who(t, iteration) + ": overflow checks out of iteration order");
  }
  // Every gradient must have left the GPU (and been checked) before the check finishes.
  int64_t at = 0;
  for (const auto& [begin, part] : run.Step(iteration).norm.by_begin) {
    if (begin != at) break;
    at += part.first;
  }
  if (at != run.space().local_total()) {
    return FailedPrecondition(run.Who(t, iteration) + " finishes the gradient norm, but the gradients from element " + std::to_string(at) +
                              " on have not left the GPU yet: a dependency is missing");
  }
  // This rank's gradients, checked tensor by tensor as they left the GPU, combined in element
  // order; with several ranks the all-reduce of the check combines every rank's and decides.
  job.finish = [&run, iteration] {
    StepSlot& step = run.Step(iteration);
    NormAccumulator& norm = step.norm;
    cpu::GradCheck total;
    for (const auto& entry : norm.by_begin) total = cpu::CombineGradChecks(total, entry.second.second);
    norm.by_begin.clear();
    if (run.comm() != nullptr) {
      step.partial = total;
    } else {
      run.DecideStep(iteration, total);
    }
  };
  return Status::Ok();
}

Status PrepareFp32ToBf16(RunState& run, const TaskSpec& t, int64_t iteration, Job& job) {
  // Into the buffer it allocates, packed in list order; a tensor kept in host memory in place,
  // at its home (CheckConvert).
  const int32_t alloc = t.allocs.empty() ? kNoIndex : t.allocs[0];
  struct Conv {
    const float* src;
    int32_t out;
    int64_t offset, begin, n, version;
  };
  std::vector<Conv> convs;
  int64_t packed = 0;
  for (int32_t ti : t.tensors) {
    const TensorSpec& ts = run.T(ti);
    const int64_t n = run.Elements(ts);
    const Span p = run.FindIn(t.uses, kMaster, ts.element_offset, n);
    if (p.data == nullptr) return FailedPrecondition(run.Who(t, iteration) + ": no buffer it uses holds the master weights of " + run.Range(ts));
    const float* src = reinterpret_cast<const float*>(p.data);
    const int64_t version = p.version;
    if (version != iteration + 1) {
      return FailedPrecondition(run.Who(t, iteration) + " converts master weights at " + VersionText(version) + ", expected version " +
                                std::to_string(iteration + 1) + " (after this iteration's update)");
    }
    const auto [home, at] = run.MemoryHome(ti);
    if (home != kNoIndex) {
      convs.push_back({src, home, at, ts.element_offset, n, version});
      continue;
    }
    TF_CHECK(alloc != kNoIndex);  // CheckConvert
    if (packed + ts.size_bytes > run.Buf(alloc).size) {
      return InvalidArgument(run.Who(t, iteration) + ": its output does not fit buffer '" + run.BufferName(alloc) + "'");
    }
    convs.push_back({src, alloc, packed, ts.element_offset, n, version});
    packed += ts.size_bytes;
  }
  CpuThreads* threads = &run.ThreadsOf(t.resource);
  std::vector<char*> dst;
  for (const Conv& c : convs) dst.push_back(run.Buf(c.out).data + c.offset);
  job.work = [convs, dst, threads] {
    for (size_t i = 0; i < convs.size(); ++i) cpu::Fp32ToBf16(reinterpret_cast<uint16_t*>(dst[i]), convs[i].src, convs[i].n, *threads);
    return Status::Ok();
  };
  job.finish = [&run, convs] {
    for (const Conv& c : convs) run.Place(c.out, {kParam16, c.begin, c.n, c.offset, c.version});
  };
  return Status::Ok();
}

Status PrepareBf16ToFp32(RunState& run, const TaskSpec& t, int64_t iteration, Job& job) {
  // The bf16 gradients kept in host memory, widened into the fp32 gradient buffer.
  TF_CHECK(t.tensors.size() == 1);  // CheckConvert
  const TensorSpec& ts = run.T(t.tensors[0]);
  const int64_t n = run.Elements(ts);
  // The sub-group's bf16 gradients, every unit's part of this iteration, side by side in the
  // host buffer the d2h copies put them in.
  int32_t src_buf = kNoIndex;
  const Span p = run.FindIn(t.uses, kGrad16, ts.element_offset, n, &src_buf);
  if (p.data == nullptr) return FailedPrecondition(run.Who(t, iteration) + ": no buffer it uses holds " + run.Range(ts));
  if (p.version != run.FinalGrad(iteration)) {
    return FailedPrecondition(run.Who(t, iteration) + " widens gradients of " + run.GradVersionText(p.version) + ", expected " +
                              run.GradVersionText(run.FinalGrad(iteration)) + "'s: a dependency on a gradient copy is missing");
  }
  int32_t out = t.allocs.empty() ? kNoIndex : t.allocs[0];
  for (int32_t b : t.uses) {
    if (out == kNoIndex && b != src_buf) out = b;
  }
  if (out == kNoIndex || run.Buf(out).size < n * 4) return InvalidArgument(run.Who(t, iteration) + ": bf16_to_fp32 has no fp32 output buffer of " + std::to_string(n * 4) + " bytes");
  const int64_t at = run.WriteOffset(out, kGrad, ts.element_offset, 0);
  if (run.Buf(out).size < at + n * 4) return InvalidArgument(run.Who(t, iteration) + ": bf16_to_fp32's output does not fit buffer '" + run.BufferName(out) + "'");
  const uint16_t* src = reinterpret_cast<const uint16_t*>(p.data);
  float* dst = reinterpret_cast<float*>(run.Buf(out).data + at);
  CpuThreads* threads = &run.ThreadsOf(t.resource);
  job.work = [src, dst, n, threads] {
    cpu::Bf16ToFp32(dst, src, n, *threads);
    return Status::Ok();
  };
  const int64_t begin = ts.element_offset;
  job.finish = [&run, out, begin, n, at, version = run.FinalGrad(iteration)] { run.Place(out, {kGrad, begin, n, at, version}); };
  return Status::Ok();
}

Status PrepareHostCopy(RunState& run, const TaskSpec& t, int64_t iteration, Job& job) {
  // The one tensor it names, as the buffers it uses hold it, into the buffer it allocates:
  // DeepSpeed's swap-out copies each widened gradient into its pinned buffers.
  TF_CHECK(t.tensors.size() == 1 && t.allocs.size() == 1);  // CheckConvert
  const TensorSpec& ts = run.T(t.tensors[0]);
  const int kind = KindOf(ts.kind);
  const int64_t n = run.Elements(ts), bytes = n * KindBytes(kind);
  const Span p = run.FindIn(t.uses, kind, ts.element_offset, n);
  if (p.data == nullptr) return FailedPrecondition(run.Who(t, iteration) + ": no buffer it uses holds " + run.Range(ts));
  const int32_t out = t.allocs[0];
  const int64_t at = run.WriteOffset(out, kind, ts.element_offset, 0);
  if (run.Buf(out).size < at + bytes) return InvalidArgument(run.Who(t, iteration) + ": its copy does not fit buffer '" + run.BufferName(out) + "'");
  const char* src = p.data;
  char* dst = run.Buf(out).data + at;
  CpuThreads* threads = &run.ThreadsOf(t.resource);
  job.work = [src, dst, bytes, threads] {
    cpu::CopyBytes(dst, src, bytes, *threads);
    return Status::Ok();
  };
  job.finish = [&run, out, kind, begin = ts.element_offset, n, at, version = p.version] { run.Place(out, {kind, begin, n, at, version}); };
  return Status::Ok();
}

}  // namespace

Status PrepareConvert(RunState& run, const TaskSpec& t, int32_t /*task*/, int64_t iteration, Job& job) {
  switch (t.kernel) {
    case Kernel::kOverflowCheckAndNorm: return PrepareGradCheck(run, t, iteration, job);
    case Kernel::kFp32ToBf16: return PrepareFp32ToBf16(run, t, iteration, job);
    case Kernel::kBf16ToFp32: return PrepareBf16ToFp32(run, t, iteration, job);
    case Kernel::kCopy: return PrepareHostCopy(run, t, iteration, job);
    default: TF_CHECK(false);  // KernelFitsOp admits no other convert kernel
  }
  return Status::Ok();
}

}  // namespace tierflow::real::exec
