// convert tasks (run.h): the global gradient check (overflow, norm, clip factor) that decides
// the step; fp32 master weights to the bf16 parameters; bf16 gradients kept in host memory widened
// to fp32 for the update; a tensor copied from one host buffer into another.
#include "run.h"

#include <algorithm>

namespace tierflow::real::exec {

Status Run::PrepareConvert(const TaskSpec& t, Job& job, int64_t iteration) {
  const size_t slot = static_cast<size_t>(iteration % window_);
  if (t.kernel == Kernel::kOverflowCheckAndNorm) {
    if (iteration != next_norm_iteration_) {
      return FailedPrecondition(Who(t, iteration) + ": overflow checks out of iteration order");
    }
    // Every gradient must have left the GPU (and been checked) before the check finishes.
    int64_t at = 0;
    for (const auto& [begin, part] : norms_[slot].by_begin) {
      if (begin != at) break;
      at += part.first;
    }
    if (at != space_.local_total()) {
      return FailedPrecondition(Who(t, iteration) + " finishes the gradient norm, but the gradients from element " + std::to_string(at) +
                                " on have not left the GPU yet: a dependency is missing");
    }
    // This rank's gradients, checked tensor by tensor as they left the GPU, combined in element
    // order; with several ranks the all-reduce of the check combines every rank's and decides.
    job.finish = [this, slot, iteration] {
      NormAccumulator& norm = norms_[slot];
      cpu::GradCheck total;
      for (const auto& entry : norm.by_begin) total = cpu::CombineGradChecks(total, entry.second.second);
      norm.by_begin.clear();
      if (comm_ != nullptr) {
        norm_partial_[slot] = total;
      } else {
        DecideStep(slot, iteration, total);
      }
    };
    return Status::Ok();
  }
  if (t.kernel == Kernel::kFp32ToBf16) {
    // Into the buffer it allocates, packed in list order; a tensor kept in host memory in place,
    // at its home (CheckTaskContracts).
    const int32_t alloc = t.allocs.empty() ? kNoIndex : t.allocs[0];
    struct Conv {
      const float* src;
      int32_t out;
      int64_t offset, begin, n, version;
    };
    std::vector<Conv> convs;
    int64_t packed = 0;
    for (int32_t ti : t.tensors) {
      const TensorSpec& ts = T(ti);
      const int64_t n = Elements(ts);
      const Span p = FindIn(t.uses, kMaster, ts.element_offset, n);
      if (p.data == nullptr) return FailedPrecondition(Who(t, iteration) + ": no buffer it uses holds the master weights of " + Range(ts));
      const float* src = reinterpret_cast<const float*>(p.data);
      const int64_t version = p.version;
      if (version != iteration + 1) {
        return FailedPrecondition(Who(t, iteration) + " converts master weights at " + VersionText(version) + ", expected version " +
                                  std::to_string(iteration + 1) + " (after this iteration's update)");
      }
      const auto [home, at] = host_home_[static_cast<size_t>(ti)];
      if (home != kNoIndex) {
        convs.push_back({src, home, at, ts.element_offset, n, version});
        continue;
      }
      TF_CHECK(alloc != kNoIndex);  // CheckTaskContracts
      if (packed + ts.size_bytes > Buf(alloc).size) {
        return InvalidArgument(Who(t, iteration) + ": its output does not fit buffer '" + s_.buffers()[static_cast<size_t>(alloc)].name + "'");
      }
      convs.push_back({src, alloc, packed, ts.element_offset, n, version});
      packed += ts.size_bytes;
    }
    CpuThreads* threads = &ThreadsOf(t.resource);
    std::vector<char*> dst;
    for (const Conv& c : convs) dst.push_back(Buf(c.out).data + c.offset);
    job.work = [convs, dst, threads] {
      for (size_t i = 0; i < convs.size(); ++i) cpu::Fp32ToBf16(reinterpret_cast<uint16_t*>(dst[i]), convs[i].src, convs[i].n, *threads);
      return Status::Ok();
    };
    job.finish = [this, convs] {
      for (const Conv& c : convs) Place(c.out, {kParam16, c.begin, c.n, c.offset, c.version});
    };
    return Status::Ok();
  }
  if (t.kernel == Kernel::kBf16ToFp32) {
    // The bf16 gradients kept in host memory, widened into the fp32 gradient buffer.
    TF_CHECK(t.tensors.size() == 1);  // CheckTaskContracts
    const TensorSpec& ts = T(t.tensors[0]);
    const int64_t n = Elements(ts);
    // The sub-group's bf16 gradients, every unit's part of this iteration, side by side in the
    // host buffer the d2h copies put them in.
    int32_t src_buf = kNoIndex;
    const Span p = FindIn(t.uses, kGrad16, ts.element_offset, n, &src_buf);
    if (p.data == nullptr) return FailedPrecondition(Who(t, iteration) + ": no buffer it uses holds " + Range(ts));
    if (p.version != FinalGrad(iteration)) {
      return FailedPrecondition(Who(t, iteration) + " widens gradients of " + GradVersionText(p.version) + ", expected " +
                                GradVersionText(FinalGrad(iteration)) + "'s: a dependency on a gradient copy is missing");
    }
    int32_t out = t.allocs.empty() ? kNoIndex : t.allocs[0];
    for (int32_t b : t.uses) {
      if (out == kNoIndex && b != src_buf) out = b;
    }
    if (out == kNoIndex || Buf(out).size < n * 4) return InvalidArgument(Who(t, iteration) + ": bf16_to_fp32 has no fp32 output buffer of " + std::to_string(n * 4) + " bytes");
    const int64_t at = WriteOffset(out, kGrad, ts.element_offset, 0);
    if (Buf(out).size < at + n * 4) return InvalidArgument(Who(t, iteration) + ": bf16_to_fp32's output does not fit buffer '" + s_.buffers()[static_cast<size_t>(out)].name + "'");
    const uint16_t* src = reinterpret_cast<const uint16_t*>(p.data);
    float* dst = reinterpret_cast<float*>(Buf(out).data + at);
    CpuThreads* threads = &ThreadsOf(t.resource);
    job.work = [src, dst, n, threads] {
      cpu::Bf16ToFp32(dst, src, n, *threads);
      return Status::Ok();
    };
    const int64_t begin = ts.element_offset;
    job.finish = [this, out, begin, n, at, version = FinalGrad(iteration)] { Place(out, {kGrad, begin, n, at, version}); };
    return Status::Ok();
  }
  if (t.kernel == Kernel::kCopy) {
    // The one tensor it names, as the buffers it uses hold it, into the buffer it allocates:
    // DeepSpeed's swap-out copies each widened gradient into its pinned buffers.
    TF_CHECK(t.tensors.size() == 1 && t.allocs.size() == 1);  // CheckTaskContracts
    const TensorSpec& ts = T(t.tensors[0]);
    const int kind = KindOf(ts.kind);
    const int64_t n = Elements(ts), bytes = n * KindBytes(kind);
    const Span p = FindIn(t.uses, kind, ts.element_offset, n);
    if (p.data == nullptr) return FailedPrecondition(Who(t, iteration) + ": no buffer it uses holds " + Range(ts));
    const int32_t out = t.allocs[0];
    const int64_t at = WriteOffset(out, kind, ts.element_offset, 0);
    if (Buf(out).size < at + bytes) return InvalidArgument(Who(t, iteration) + ": its copy does not fit buffer '" + s_.buffers()[static_cast<size_t>(out)].name + "'");
    const char* src = p.data;
    char* dst = Buf(out).data + at;
    CpuThreads* threads = &ThreadsOf(t.resource);
    job.work = [src, dst, bytes, threads] {
      cpu::CopyBytes(dst, src, bytes, *threads);
      return Status::Ok();
    };
    job.finish = [this, out, kind, begin = ts.element_offset, n, at, version = p.version] { Place(out, {kind, begin, n, at, version}); };
    return Status::Ok();
  }
  TF_CHECK(false);  // CheckTaskContracts admits no other convert kernel
  return Status::Ok();
}

void Run::DecideStep(size_t slot, int64_t iteration, const cpu::GradCheck& total) {
  const bool update = scaler_.Update(total.finite);
  step_decided_[slot] = update ? 1 : 0;
  clip_[slot] = cpu::ClipCoefficient(total, config_.gradient_clipping);
  if (update) ++updates_;
  adam_step_[slot] = updates_;
  next_norm_iteration_ = iteration + 1;
}

}  // namespace tierflow::real::exec
