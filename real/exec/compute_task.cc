// compute tasks (run.h): every parameter a task names must be on gpu0 at this iteration's
// version; a layer's last compute task of the pass runs its forward or backward on the device.
// Each micro-step's first forward takes the next batch; its backward leaves the micro-step's
// gradients (version GradVersion).
#include "run.h"

#include <algorithm>

namespace tierflow::real::exec {

Status Run::PrepareCompute(const TaskSpec& t, int32_t task, Job& job, int64_t iteration) {
  // Every parameter it names must be on the GPU, where it reads (ParamsOnGpu), at this
  // iteration's version: the updates of iterations 0 .. iteration - 1.
  // With several ranks a task names its rank's partition of a unit; the whole unit must be there.
  for (int32_t ti : t.tensors) {
    const TensorSpec& ts = T(ti);
    if (KindOf(ts.kind) != kParam16) continue;
    if (space_.ranks() == 1) {
      TF_RETURN_IF_ERROR(ParamsOnGpu(t, iteration, ts.element_offset, Elements(ts)).status());
      continue;
    }
    for (const RankSpace::Unit* u : space_.UnitsIn(ts.element_offset, Elements(ts))) {
      TF_RETURN_IF_ERROR(ParamsOnGpu(t, iteration, u->global, u->n).status());
    }
  }
  if (!math_task_[static_cast<size_t>(task)]) return Status::Ok();
  IterationState* it = &Iter(iteration);
  const int64_t layer = t.layer;
  // The layer's math reads the whole layer: the gathered buffers of its units, which this task
  // uses, and the resident home.
  TF_ASSIGN_OR_RETURN(std::vector<exec::ParamRange> params,
                      ParamsOnGpu(t, iteration, trainer_.LayerBegin(layer), trainer_.LayerElements(layer)));
  if (trainer_.TiedHead(layer)) {  // and the embedding table, wherever the schedule keeps it on the GPU
    TF_ASSIGN_OR_RETURN(std::vector<exec::ParamRange> table, ParamsOnGpu(t, iteration, trainer_.LayerBegin(0), trainer_.LayerElements(0)));
    params.insert(params.end(), table.begin(), table.end());
  }
  CpuThreads* threads = &ThreadsOf(t.resource);
  const int32_t micro = t.micro_step;
  if (t.phase == Phase::kForward) {
    if (layer == 0) {
      if (it->iteration != iteration || it->micro_step != micro) {  // a micro-step's first forward step takes its batch
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
      }
    } else if (it->iteration != iteration || it->micro_step != micro) {
      return FailedPrecondition(Who(t, iteration) + ": layer " + std::to_string(layer) + "'s forward runs before the embedding's");
    }
    job.work = [this, layer, params = std::move(params), it, threads, span = &job.device_span] {
      return device_->Forward(layer, params, it, *threads, span);
    };
    if (layer == trainer_.layer_count() - 1) job.finish = [it] { it->loss_sum += it->loss; };
    return Status::Ok();
  }
  if (it->iteration != iteration || it->micro_step != micro) {
    return FailedPrecondition(Who(t, iteration) + ": the backward of layer " + std::to_string(layer) + " runs before its micro-step's forward");
  }
  if (layer == trainer_.layer_count() - 1) {
    // The head's backward starts the gradients: they are scaled by the scale after every earlier
    // iteration's overflow check.
    if (global_check_ && next_norm_iteration_ != iteration) {
      return FailedPrecondition(Who(t, iteration) + ": backward starts before iteration " + std::to_string(next_norm_iteration_) +
                                "'s overflow check decided the loss scale");
    }
    it->loss_scale = scaler_.scale();
  }
  // The layer's gradients go to the GPU buffer it allocates, else the first it uses (a buffer the
  // fetch allocated ahead of the layer: docs/schedule-format.md).
  const int32_t grads = GpuBufferOf(t);
  const int64_t begin = trainer_.LayerBegin(layer), n = trainer_.LayerElements(layer), step_n = trainer_.StepGradElements(layer);
  if (grads == kNoIndex) {
    return FailedPrecondition(Who(t, iteration) + ": the backward of layer " + std::to_string(layer) +
                              " names no GPU buffer for the layer's gradients (plan the schedule again with this tierflow)");
  }
  for (const Piece& p : Buf(grads).pieces) {
    if (p.kind == kParam16) {
      return InvalidArgument(Who(t, iteration) + ": GPU buffer '" + s_.buffers()[static_cast<size_t>(grads)].name +
                             "', where the backward of layer " + std::to_string(layer) + " would write its gradients, holds parameters");
    }
  }
  if (Buf(grads).size < step_n * 4) {
    return InvalidArgument(Who(t, iteration) + ": layer " + std::to_string(layer) + "'s gradients (" + std::to_string(step_n * 4) + " bytes" +
                           (step_n > n ? ", the tied embedding table's part included" : "") + ") do not fit GPU buffer '" +
                           s_.buffers()[static_cast<size_t>(grads)].name + "'");
  }
  auto* out = reinterpret_cast<float*>(Buf(grads).data);
  job.work = [this, layer, params = std::move(params), out, it, threads, span = &job.device_span] {
    return device_->Backward(layer, params, out, it, *threads, span);
  };
  const int64_t table_n = step_n - n;
  job.finish = [this, grads, begin, n, table_n, iteration, micro] {
    auto& pieces = Buf(grads).pieces;
    pieces.erase(std::remove_if(pieces.begin(), pieces.end(), [](const Piece& p) { return p.kind == kGrad; }), pieces.end());
    pieces.push_back({kGrad, begin, n, 0, GradVersion(iteration, micro)});
    // The tied head's part of the table's gradient, after the layer's own.
    if (table_n > 0) pieces.push_back({kGrad, trainer_.LayerBegin(0), table_n, n * 4, GradVersion(iteration, micro)});
  };
  return Status::Ok();
}

TokenBatch Run::NextBatch() {
  TokenBatch mine = loader_->Next();  // rank 0's
  for (int32_t r = 1; r < space_.ranks(); ++r) {
    TokenBatch batch = loader_->Next();
    if (r == space_.rank()) mine = std::move(batch);
  }
  return mine;
}

}  // namespace tierflow::real::exec
