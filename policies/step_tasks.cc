// The step's tasks around the optimizer sweep (optimizer_sweep.h): the global gradient check,
// the gradients each sub-group waits for, the resident parameters gathered again.
#include "optimizer_sweep.h"

namespace tierflow::policies {

Status UnfusedOverflowCheckNeedsFp16(const Scenario& s, const std::string& knob) {
  if (s.training.dtype == "fp16") return Status::Ok();
  return InvalidArgument(knob + ": DeepSpeed's unfused overflow check runs only in fp16 training (stage 3's has_overflow), "
                         "and training.dtype is " + s.training.dtype);
}

int32_t GradientNorm(ScheduleBuilder& b, const ModelPlan& plan, const std::vector<std::vector<int32_t>>& deps,
                     int32_t threads, int64_t host_bytes_per_element, const std::vector<int32_t>& temporaries) {
  std::vector<int32_t> norms;
  for (int32_t r = 0; r < plan.ranks; ++r) {
    TaskSpec norm;
    norm.id = "step.norm.r" + std::to_string(r);
    norm.op = Op::kConvert;
    norm.rank = r;
    norm.kernel = Kernel::kOverflowCheckAndNorm;
    norm.resource = b.Cpu(r);
    norm.bytes = plan.rank_elements * host_bytes_per_element;
    norm.ranks = threads;
    norm.deps = deps[r];
    if (!temporaries.empty()) {
      norm.allocs = {temporaries[r]};
      norm.frees = {temporaries[r]};
    }
    norm.phase = Phase::kStep;
    norms.push_back(b.Task(std::move(norm)));
  }
  TaskSpec norm_reduce;
  norm_reduce.id = "step.norm.allreduce";
  norm_reduce.op = Op::kAllReduce;
  norm_reduce.resource = b.Comm();
  norm_reduce.bytes = 8;
  norm_reduce.ranks = plan.ranks;
  norm_reduce.deps = norms;
  norm_reduce.phase = Phase::kStep;
  return b.Task(std::move(norm_reduce));
}

int32_t GatherResident(ScheduleBuilder& b, const ModelPlan& plan, const std::vector<int32_t>& refreshes) {
  if (plan.ranks < 2 || refreshes.empty()) return kNoIndex;
  TaskSpec gather;
  gather.id = "allgather.p16res";
  gather.op = Op::kAllGather;
  gather.resource = b.Comm();
  gather.ranks = plan.ranks;
  for (int32_t r = 0; r < plan.ranks; ++r) {
    for (const ParamUnit& u : plan.units) {
      if (!u.gpu_resident) continue;
      gather.tensors.push_back(b.State(StateKind::kParam16, r, u.rank_offset, u.rank_elements, b.GpuDevice(r)));
      gather.bytes += u.rank_elements * 2;
    }
  }
  if (gather.tensors.empty()) return kNoIndex;
  gather.deps = refreshes;
  gather.phase = Phase::kStep;
  return b.Task(std::move(gather));
}

std::vector<int32_t> SubGroupsOfUnit(const ModelPlan& plan, int32_t unit) {
  const ParamUnit& u = plan.units[unit];
  std::vector<int32_t> out;
  if (u.rank_elements == 0) return out;
  const int64_t begin = u.rank_offset, end = u.rank_offset + u.rank_elements;
  for (size_t g = 0; g < plan.subgroups.size(); ++g) {
    const SubGroup& sg = plan.subgroups[g];
    if (sg.begin < end && begin < sg.begin + sg.elements) out.push_back(static_cast<int32_t>(g));
  }
  return out;
}

std::vector<std::vector<int32_t>> SubGroupGradientDeps(const ModelPlan& plan, const std::vector<int32_t>& grad_ready) {
  std::vector<std::vector<int32_t>> deps(plan.subgroups.size());
  for (size_t u = 0; u < plan.units.size(); ++u) {
    if (grad_ready[u] == kNoIndex) continue;
    for (int32_t g : SubGroupsOfUnit(plan, static_cast<int32_t>(u))) deps[g].push_back(grad_ready[u]);
  }
  return deps;
}

int32_t StepEnd(ScheduleBuilder& b, const ModelPlan& plan, const PassResult& passes, const std::vector<int32_t>& tails,
                const std::vector<int32_t>& refreshes) {
  TaskSpec end;
  end.id = "step.end";
  end.op = Op::kBarrier;
  end.phase = Phase::kStep;
  end.deps = tails;
  // Each rank refreshed its own part of the resident units; the step ends with them whole again.
  const int32_t gathered = GatherResident(b, plan, refreshes);
  if (gathered != kNoIndex) end.deps.push_back(gathered);
  const int32_t step_end = b.Task(std::move(end));
  for (int32_t c : passes.resident_computes) b.task(c).carried.push_back({step_end, 1});
  return step_end;
}

}  // namespace tierflow::policies
