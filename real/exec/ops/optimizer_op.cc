// optimizer tasks (op_handler.h): AdamW over one sub-group, its master weights and moments in the
// buffer it uses at this iteration's version, its gradient in another (fp32; on a GPU also the
// bf16 gradients as its copy up brought them, widened by the update); leaves version + 1.
// On a CPU resource the states and the gradient are in host memory and the update runs on the
// resource's threads; on a GPU's (a sub-group whose states live on the GPU) they are in gpu0
// memory, the compute device updates them, and the task's param16 tensors — the sub-group's
// parameters at their GPU-resident home — receive the rounded copy in place; the rest of the
// sub-group's rounded parameters go into the GPU buffer it allocates (for a d2h to take them home).
#include <algorithm>

#include "../run_state.h"
#include "op_handler.h"

namespace tierflow::real::exec {

namespace {

bool OnGpu(const Schedule& s, int32_t device) { return s.devices()[static_cast<size_t>(device)].kind == DeviceKind::kGpu; }

// Where the GPU update writes its rounded parameters, piece by piece ([offset, offset + n) from
// the sub-group's first element): the sub-group's param16 at the resident home, else the GPU
// buffer the task allocates.
struct Bf16Piece {
  int64_t offset, n;
  uint16_t* data;
  int64_t global;  // its first element in the model (the resident home's versions); -1 in the buffer
};

}  // namespace

// Adam names its sub-group's master, adam_m and adam_v tensors; on a GPU's resource they are kept
// on that GPU, and so are the param16 tensors it names (their resident home, refreshed in place).
Status CheckOptimizer(const Schedule& s, const TaskSpec& t, const std::string& who) {
  const bool gpu = OnGpu(s, s.resources()[static_cast<size_t>(t.resource)].device);
  int kinds = 0;
  for (int32_t i : t.tensors) {
    const TensorSpec& ts = s.tensors()[static_cast<size_t>(i)];
    const StateKind k = ts.kind;
    if (k == StateKind::kMaster || k == StateKind::kAdamM || k == StateKind::kAdamV) kinds |= 1 << static_cast<int>(k);
    if (!gpu) continue;
    if (k != StateKind::kParam16 && k != StateKind::kMaster && k != StateKind::kAdamM && k != StateKind::kAdamV) {
      return InvalidArgument(who + ": names '" + ts.name + "' (" + std::string(StateKindName(k)) +
                             "); an update on a GPU names its states and the param16 it refreshes only");
    }
    if (!OnGpu(s, ts.device)) {
      return InvalidArgument(who + ": runs on a GPU but names '" + ts.name + "', kept on device '" + s.devices()[static_cast<size_t>(ts.device)].name +
                             "': an update on a GPU keeps its states, and the parameters it refreshes, on the GPU");
    }
  }
  if (kinds != (1 << kMaster | 1 << kAdamM | 1 << kAdamV)) {
    return InvalidArgument(who + ": adam names its sub-group's master, adam_m and adam_v tensors, each once at least");
  }
  return Status::Ok();
}

namespace {

// An update resolved against the run: its states, gradient and step.
struct Update {
  float* state[3] = {nullptr, nullptr, nullptr};  // master, adam_m, adam_v
  int32_t where[3] = {kNoIndex, kNoIndex, kNoIndex};  // the buffers holding them
  int64_t begin = -1, n = 0;
  const float* grad = nullptr;        // the fp32 gradient, else
  const uint16_t* grad16 = nullptr;   // the bf16 gradient, widened by the update (on a GPU only)
  bool take = true;  // the step is taken (no overflow)
  int64_t step = 0;
  float grad_scale = 1.0f;
};

// The states at this iteration's version in the buffers `t` uses, and the final gradient (fp32;
// on a GPU also bf16).
StatusOr<Update> Resolve(RunState& run, const TaskSpec& t, int64_t iteration) {
  const StepSlot& step_slot = run.Step(iteration);
  if (run.global_check() && step_slot.decided < 0) {
    return FailedPrecondition(run.Who(t, iteration) + " runs before the overflow check and gradient norm of its iteration");
  }
  Update u;
  for (int32_t ti : t.tensors) {
    const TensorSpec& ts = run.T(ti);
    const int kind = KindOf(ts.kind);
    if (kind < kMaster) continue;
    u.begin = ts.element_offset;
    u.n = run.Elements(ts);
    const Span p = run.FindIn(t.uses, kind, u.begin, u.n, &u.where[kind - kMaster]);
    if (p.data == nullptr) return FailedPrecondition(run.Who(t, iteration) + " updates " + run.Range(ts) + " but no buffer it uses holds it");
    if (p.version != iteration) {
      return FailedPrecondition(run.Who(t, iteration) + " updates " + run.Range(ts) + " at " + VersionText(p.version) + ", expected version " +
                                std::to_string(iteration));
    }
    u.state[kind - kMaster] = reinterpret_cast<float*>(p.data);
  }
  TF_CHECK(u.begin >= 0);  // CheckOptimizer: adam names its three states
  // The fp32 gradient; on a GPU, the bf16 gradient its copy up brought (the update widens it).
  int grad_kind = kGrad;
  Span g = run.FindIn(t.uses, kGrad, u.begin, u.n);
  const bool gpu = run.GpuResource(t.resource);
  if (g.data == nullptr && gpu) g = run.FindIn(t.uses, grad_kind = kGrad16, u.begin, u.n);
  if (g.data == nullptr) {
    return FailedPrecondition(run.Who(t, iteration) + ": no buffer it uses holds the " + (gpu ? "gradient (grad16 or grad)" : "fp32 gradient") + " [" +
                              std::to_string(u.begin) + ", " + std::to_string(u.begin + u.n) + ")");
  }
  if (g.version != run.FinalGrad(iteration)) {
    return FailedPrecondition(run.Who(t, iteration) + " uses the gradient of " + run.GradVersionText(g.version) + ", expected " +
                              run.GradVersionText(run.FinalGrad(iteration)) + "'s");
  }
  if (grad_kind == kGrad) {
    u.grad = reinterpret_cast<const float*>(g.data);
  } else {
    u.grad16 = reinterpret_cast<const uint16_t*>(g.data);
  }
  // Without a global check every step is taken (CheckRunnable: no loss scaling, no clipping).
  u.take = run.global_check() ? step_slot.decided == 1 : true;
  u.step = run.global_check() ? step_slot.adam_step : run.updates_at_start() + iteration + 1;
  u.grad_scale = UpdateGradScale(run.Iter(iteration).loss_scale, run.global_check() ? step_slot.clip : 1.0f);
  return u;
}

// Where the update on the GPU writes the sub-group's rounded parameters: the param16 tensors `t`
// names at their resident home, the rest of the range into the GPU buffer it allocates (if any).
StatusOr<std::vector<Bf16Piece>> RoundedPieces(RunState& run, const TaskSpec& t, int64_t iteration, const Update& u, int32_t out_buffer) {
  std::vector<Bf16Piece> pieces;
  for (int32_t ti : t.tensors) {
    const TensorSpec& ts = run.T(ti);
    if (KindOf(ts.kind) != kParam16) continue;
    if (ts.element_offset < u.begin || ts.element_offset + run.Elements(ts) > u.begin + u.n) {
      return InvalidArgument(run.Who(t, iteration) + " refreshes " + run.Range(ts) + ", which is not within the sub-group it updates");
    }
    for (const RankSpace::Segment& seg : run.space().Segments(ts.element_offset, run.Elements(ts))) {
      const ResidentRun* r = run.ResidentAt(seg.global);
      if (r == nullptr || seg.global + seg.n > r->begin + r->n) {
        return FailedPrecondition(run.Who(t, iteration) + " refreshes " + run.Range(ts) + " on the GPU, which is not GPU-resident");
      }
      pieces.push_back({seg.local - u.begin, seg.n, reinterpret_cast<uint16_t*>(r->data) + (seg.global - r->begin), seg.global});
    }
  }
  const auto by_offset = [](const Bf16Piece& a, const Bf16Piece& b) { return a.offset < b.offset; };
  std::sort(pieces.begin(), pieces.end(), by_offset);
  if (out_buffer == kNoIndex) return pieces;
  if (run.Buf(out_buffer).size < u.n * 2) {
    return InvalidArgument(run.Who(t, iteration) + ": the sub-group's " + std::to_string(u.n) + " rounded parameters do not fit GPU buffer '" +
                           run.BufferName(out_buffer) + "'");
  }
  uint16_t* base = reinterpret_cast<uint16_t*>(run.Buf(out_buffer).data);  // at (element - begin) x 2
  std::vector<Bf16Piece> gaps;
  int64_t at = 0;
  for (const Bf16Piece& p : pieces) {
    if (p.offset > at) gaps.push_back({at, p.offset - at, base + at, -1});
    at = std::max(at, p.offset + p.n);
  }
  if (at < u.n) gaps.push_back({at, u.n - at, base + at, -1});
  pieces.insert(pieces.end(), gaps.begin(), gaps.end());
  std::sort(pieces.begin(), pieces.end(), by_offset);
  return pieces;
}

// On the GPU: the compute device's AdamW per decay run, cut where a piece of the rounded
// parameters' destination begins or ends.
Status PrepareGpuUpdate(RunState& run, const TaskSpec& t, int64_t iteration, const Update& u, Job& job) {
  const int32_t out_buffer = t.allocs.empty() ? kNoIndex : t.allocs[0];
  TF_ASSIGN_OR_RETURN(std::vector<Bf16Piece> pieces, RoundedPieces(run, t, iteration, u, out_buffer));
  CpuThreads* threads = &run.ThreadsOf(t.resource);
  job.work = [&run, u, pieces, threads, span = &job.device_span] {
    if (!u.take) {
      // Skipped (an overflow): the master is unchanged, and so are the resident parameters; the
      // GPU buffer still gets its rounding, which the d2h sends home (as the host's conversion
      // rewrites its buffer from the unchanged master).
      for (const Bf16Piece& p : pieces) {
        if (p.global < 0) TF_RETURN_IF_ERROR(run.device()->Fp32ToBf16(p.data, u.state[0] + p.offset, p.n, *threads));
      }
      return Status::Ok();
    }
    return ForEachAdamWRun(run.space(), run.config(), run.trainer().layout(), u.begin, u.n, u.step, [&](int64_t at, int64_t elements, const AdamWConfig& cfg) {
      for (int64_t x = at; x < at + elements;) {
        int64_t stop = at + elements;
        uint16_t* out = nullptr;
        for (const Bf16Piece& p : pieces) {
          if (p.offset > x) {
            stop = std::min(stop, p.offset);
            break;
          }
          if (x < p.offset + p.n) {
            stop = std::min(stop, p.offset + p.n);
            out = p.data + (x - p.offset);
            break;
          }
        }
        DeviceSpan one;
        const GradIn grad = u.grad != nullptr ? GradIn{u.grad + x, nullptr} : GradIn{nullptr, u.grad16 + x};
        TF_RETURN_IF_ERROR(run.device()->AdamW(u.state[0] + x, u.state[1] + x, u.state[2] + x, grad, out, stop - x, u.step, u.grad_scale, cfg,
                                               *threads, &one));
        span->Merge(one);
        x = stop;
      }
      return Status::Ok();
    });
  };
  job.finish = [&run, u, iteration, pieces, out_buffer] {
    for (int k = 0; k < 3; ++k) run.SetVersion(u.where[k], kMaster + k, u.begin, u.n, iteration + 1);
    for (const Bf16Piece& p : pieces) {
      if (p.global >= 0) {
        run.resident_versions().Set(p.global, p.global + p.n, iteration + 1);
      } else {
        run.Place(out_buffer, {kParam16, u.begin + p.offset, p.n, p.offset * 2, iteration + 1});
      }
    }
  };
  return Status::Ok();
}

}  // namespace

Status PrepareOptimizer(RunState& run, const TaskSpec& t, int32_t /*task*/, int64_t iteration, Job& job) {
  TF_CHECK(t.kernel == Kernel::kAdam);  // KernelFitsOp, CheckTaskContracts
  TF_ASSIGN_OR_RETURN(const Update u, Resolve(run, t, iteration));
  if (run.GpuResource(t.resource)) return PrepareGpuUpdate(run, t, iteration, u, job);
  CpuThreads* threads = &run.ThreadsOf(t.resource);
  job.work = [&run, u, threads] {
    if (u.take) {
      AdamWSparingVectors(run.space(), run.config(), run.trainer().layout(), u.begin, u.n, u.state[0], u.state[1], u.state[2], u.grad, u.step,
                          u.grad_scale, *threads);
    }
    return Status::Ok();
  };
  job.finish = [&run, u, iteration] {
    for (int k = 0; k < 3; ++k) run.SetVersion(u.where[k], kMaster + k, u.begin, u.n, iteration + 1);
  };
  return Status::Ok();
}

}  // namespace tierflow::real::exec
