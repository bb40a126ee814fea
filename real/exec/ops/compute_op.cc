// compute tasks (op_handler.h): every parameter a task names must be on gpu0 at this iteration's
// version; a layer's last compute task of the pass runs its forward or backward on the device.
// Each micro-step's first forward takes the next batch; its backward leaves the micro-step's
// gradients (version GradVersion).
#include <algorithm>

#include "../run_state.h"
#include "op_handler.h"

namespace tierflow::real::exec {

Status PrepareCompute(RunState& run, const TaskSpec& t, int32_t task, int64_t iteration, Job& job) {
  // Every parameter it names must be on the GPU, where it reads (ParamsOnGpu), at this
  // iteration's version: the updates of iterations 0 .. iteration - 1.
  // With several ranks a task names its rank's partition of a unit; the whole unit must be there.
  for (int32_t ti : t.tensors) {
    const TensorSpec& ts = run.T(ti);
    if (KindOf(ts.kind) != kParam16) continue;
    if (run.space().ranks() == 1) {
      TF_RETURN_IF_ERROR(run.ParamsOnGpu(t, iteration, ts.element_offset, run.Elements(ts)).status());
      continue;
    }
    for (const RankSpace::Unit* u : run.space().UnitsIn(ts.element_offset, run.Elements(ts))) {
      TF_RETURN_IF_ERROR(run.ParamsOnGpu(t, iteration, u->global, u->n).status());
    }
  }
  if (!run.RunsMath(task)) return Status::Ok();
  IterationState* it = &run.Iter(iteration);
  const int64_t layer = t.layer;
  // The layer's math reads the whole layer: the gathered buffers of its units, which this task
  // uses, and the resident home.
  TF_ASSIGN_OR_RETURN(std::vector<ParamRange> params,
                      run.ParamsOnGpu(t, iteration, run.trainer().LayerBegin(layer), run.trainer().LayerElements(layer)));
  if (run.trainer().TiedHead(layer)) {  // and the embedding table, wherever the schedule keeps it on the GPU
    TF_ASSIGN_OR_RETURN(std::vector<ParamRange> table, run.ParamsOnGpu(t, iteration, run.trainer().LayerBegin(0), run.trainer().LayerElements(0)));
    params.insert(params.end(), table.begin(), table.end());
  }
  CpuThreads* threads = &run.ThreadsOf(t.resource);
  const int32_t micro = t.micro_step;
  if (t.phase == Phase::kForward) {
    if (layer == 0) {
      // A micro-step's first forward step takes its batch.
      if (it->iteration != iteration || it->micro_step != micro) TF_RETURN_IF_ERROR(run.TakeBatch(t, iteration, micro, it));
    } else if (it->iteration != iteration || it->micro_step != micro) {
      return FailedPrecondition(run.Who(t, iteration) + ": layer " + std::to_string(layer) + "'s forward runs before the embedding's");
    }
    job.work = [&run, layer, params = std::move(params), it, threads, span = &job.device_span] {
      return run.device()->Forward(layer, params, it, *threads, span);
    };
    if (layer == run.trainer().layer_count() - 1) job.finish = [it] { it->loss_sum += it->loss; };
    return Status::Ok();
  }
  if (it->iteration != iteration || it->micro_step != micro) {
    return FailedPrecondition(run.Who(t, iteration) + ": the backward of layer " + std::to_string(layer) + " runs before its micro-step's forward");
  }
  if (layer == run.trainer().layer_count() - 1) {
    // The head's backward starts the gradients: they are scaled by the scale after every earlier
    // iteration's overflow check.
    if (run.global_check() && run.next_norm_iteration() != iteration) {
      return FailedPrecondition(run.Who(t, iteration) + ": backward starts before iteration " + std::to_string(run.next_norm_iteration()) +
                                "'s overflow check decided the loss scale");
    }
    it->loss_scale = run.loss_scale();
  }
  // The layer's gradients go to the GPU buffer it allocates, else the first it uses (a buffer the
  // fetch allocated ahead of the layer: docs/schedule-format.md).
  const int32_t grads = run.GpuBufferOf(t);
  const int64_t begin = run.trainer().LayerBegin(layer), n = run.trainer().LayerElements(layer), step_n = run.trainer().StepGradElements(layer);
  if (grads == kNoIndex) {
    return FailedPrecondition(run.Who(t, iteration) + ": the backward of layer " + std::to_string(layer) +
                              " names no GPU buffer for the layer's gradients (plan the schedule again with this tierflow)");
  }
  for (const Piece& p : run.Buf(grads).pieces) {
    if (p.kind == kParam16) {
      return InvalidArgument(run.Who(t, iteration) + ": GPU buffer '" + run.BufferName(grads) +
                             "', where the backward of layer " + std::to_string(layer) + " would write its gradients, holds parameters");
    }
  }
  if (run.Buf(grads).size < step_n * 4) {
    return InvalidArgument(run.Who(t, iteration) + ": layer " + std::to_string(layer) + "'s gradients (" + std::to_string(step_n * 4) + " bytes" +
                           (step_n > n ? ", the tied embedding table's part included" : "") + ") do not fit GPU buffer '" +
                           run.BufferName(grads) + "'");
  }
  auto* out = reinterpret_cast<float*>(run.Buf(grads).data);
  job.work = [&run, layer, params = std::move(params), out, it, threads, span = &job.device_span] {
    return run.device()->Backward(layer, params, out, it, *threads, span);
  };
  const int64_t table_n = step_n - n;
  job.finish = [&run, grads, begin, n, table_n, iteration, micro] {
    auto& pieces = run.Buf(grads).pieces;
    pieces.erase(std::remove_if(pieces.begin(), pieces.end(), [](const Piece& p) { return p.kind == kGrad; }), pieces.end());
    pieces.push_back({kGrad, begin, n, 0, run.GradVersion(iteration, micro)});
    // The tied head's part of the table's gradient, after the layer's own.
    if (table_n > 0) pieces.push_back({kGrad, run.trainer().LayerBegin(0), table_n, n * 4, run.GradVersion(iteration, micro)});
  };
  return Status::Ok();
}

}  // namespace tierflow::real::exec
