// optimizer tasks (run.h): AdamW over one sub-group, its master weights and moments in the
// buffer it uses at this iteration's version, its fp32 gradient in another; leaves version + 1.
#include "run.h"

#include <algorithm>

namespace tierflow::real::exec {

Status Run::PrepareOptimizer(const TaskSpec& t, Job& job, int64_t iteration) {
  TF_CHECK(t.kernel == Kernel::kAdam);  // CheckTaskContracts
  const size_t slot = static_cast<size_t>(iteration % window_);
  if (global_check_ && step_decided_[slot] < 0) {
    return FailedPrecondition(Who(t, iteration) + " runs before the overflow check and gradient norm of its iteration");
  }
  float* state[3] = {nullptr, nullptr, nullptr};
  int32_t where[3] = {kNoIndex, kNoIndex, kNoIndex};
  int64_t begin = -1, n = 0;
  for (int32_t ti : t.tensors) {
    const TensorSpec& ts = T(ti);
    const int kind = KindOf(ts.kind);
    if (kind < kMaster) continue;
    begin = ts.element_offset;
    n = Elements(ts);
    const Span p = FindIn(t.uses, kind, begin, n, &where[kind - kMaster]);
    if (p.data == nullptr) return FailedPrecondition(Who(t, iteration) + " updates " + Range(ts) + " but no buffer it uses holds it");
    if (p.version != iteration) {
      return FailedPrecondition(Who(t, iteration) + " updates " + Range(ts) + " at " + VersionText(p.version) + ", expected version " +
                                std::to_string(iteration));
    }
    state[kind - kMaster] = reinterpret_cast<float*>(p.data);
  }
  TF_CHECK(begin >= 0);  // CheckTaskContracts: adam names its three states
  const Span g = FindIn(t.uses, kGrad, begin, n);
  if (g.data == nullptr) {
    return FailedPrecondition(Who(t, iteration) + ": no buffer it uses holds the fp32 gradient [" + std::to_string(begin) + ", " +
                              std::to_string(begin + n) + ")");
  }
  if (g.version != FinalGrad(iteration)) {
    return FailedPrecondition(Who(t, iteration) + " uses the gradient of " + GradVersionText(g.version) + ", expected " +
                              GradVersionText(FinalGrad(iteration)) + "'s");
  }
  const float* grad = reinterpret_cast<const float*>(g.data);
  // Without a global check every step is taken (CheckRunnable: no loss scaling, no clipping).
  const bool update = global_check_ ? step_decided_[slot] == 1 : true;
  const int64_t step = global_check_ ? adam_step_[slot] : updates_at_start_ + iteration + 1;
  const float grad_scale = UpdateGradScale(Iter(iteration).loss_scale, global_check_ ? clip_[slot] : 1.0f);
  CpuThreads* threads = &ThreadsOf(t.resource);
  job.work = [=, this] {
    if (update) AdamWSparingVectors(space_, config_, trainer_.layout(), begin, n, state[0], state[1], state[2], grad, step, grad_scale, *threads);
    return Status::Ok();
  };
  job.finish = [this, where, begin, n, iteration] {
    for (int k = 0; k < 3; ++k) SetVersion(where[k], kMaster + k, begin, n, iteration + 1);
  };
  return Status::Ok();
}

}  // namespace tierflow::real::exec
