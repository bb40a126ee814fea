// optimizer tasks (op_handler.h): AdamW over one sub-group, its master weights and moments in the
// buffer it uses at this iteration's version, its fp32 gradient in another; leaves version + 1.
#include <algorithm>

#include "../run_state.h"
#include "op_handler.h"

namespace tierflow::real::exec {

// Adam names its sub-group's master, adam_m and adam_v tensors.
Status CheckOptimizer(const Schedule& s, const TaskSpec& t, const std::string& who) {
  int kinds = 0;
  for (int32_t i : t.tensors) {
    const StateKind k = s.tensors()[static_cast<size_t>(i)].kind;
    if (k == StateKind::kMaster || k == StateKind::kAdamM || k == StateKind::kAdamV) kinds |= 1 << static_cast<int>(k);
  }
  if (kinds != (1 << kMaster | 1 << kAdamM | 1 << kAdamV)) {
    return InvalidArgument(who + ": adam names its sub-group's master, adam_m and adam_v tensors, each once at least");
  }
  return Status::Ok();
}

Status PrepareOptimizer(RunState& run, const TaskSpec& t, int32_t /*task*/, int64_t iteration, Job& job) {
  TF_CHECK(t.kernel == Kernel::kAdam);  // KernelFitsOp, CheckTaskContracts
  const StepSlot& step_slot = run.Step(iteration);
  if (run.global_check() && step_slot.decided < 0) {
    return FailedPrecondition(run.Who(t, iteration) + " runs before the overflow check and gradient norm of its iteration");
  }
  float* state[3] = {nullptr, nullptr, nullptr};
  int32_t where[3] = {kNoIndex, kNoIndex, kNoIndex};
  int64_t begin = -1, n = 0;
  for (int32_t ti : t.tensors) {
    const TensorSpec& ts = run.T(ti);
    const int kind = KindOf(ts.kind);
    if (kind < kMaster) continue;
    begin = ts.element_offset;
    n = run.Elements(ts);
    const Span p = run.FindIn(t.uses, kind, begin, n, &where[kind - kMaster]);
    if (p.data == nullptr) return FailedPrecondition(run.Who(t, iteration) + " updates " + run.Range(ts) + " but no buffer it uses holds it");
    if (p.version != iteration) {
      return FailedPrecondition(run.Who(t, iteration) + " updates " + run.Range(ts) + " at " + VersionText(p.version) + ", expected version " +
                                std::to_string(iteration));
    }
    state[kind - kMaster] = reinterpret_cast<float*>(p.data);
  }
  TF_CHECK(begin >= 0);  // CheckOptimizer: adam names its three states
  const Span g = run.FindIn(t.uses, kGrad, begin, n);
  if (g.data == nullptr) {
    return FailedPrecondition(run.Who(t, iteration) + ": no buffer it uses holds the fp32 gradient [" + std::to_string(begin) + ", " +
                              std::to_string(begin + n) + ")");
  }
  if (g.version != run.FinalGrad(iteration)) {
    return FailedPrecondition(run.Who(t, iteration) + " uses the gradient of " + run.GradVersionText(g.version) + ", expected " +
                              run.GradVersionText(run.FinalGrad(iteration)) + "'s");
  }
  const float* grad = reinterpret_cast<const float*>(g.data);
  // Without a global check every step is taken (CheckRunnable: no loss scaling, no clipping).
  const bool update = run.global_check() ? step_slot.decided == 1 : true;
  const int64_t step = run.global_check() ? step_slot.adam_step : run.updates_at_start() + iteration + 1;
  const float grad_scale = UpdateGradScale(run.Iter(iteration).loss_scale, run.global_check() ? step_slot.clip : 1.0f);
  CpuThreads* threads = &run.ThreadsOf(t.resource);
  job.work = [=, &run] {
    if (update) AdamWSparingVectors(run.space(), run.config(), run.trainer().layout(), begin, n, state[0], state[1], state[2], grad, step, grad_scale, *threads);
    return Status::Ok();
  };
  job.finish = [&run, where, begin, n, iteration] {
    for (int k = 0; k < 3; ++k) run.SetVersion(where[k], kMaster + k, begin, n, iteration + 1);
  };
  return Status::Ok();
}

}  // namespace tierflow::real::exec
