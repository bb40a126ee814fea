// The real executor's entry points (executor.h): the checks before a run, RunSchedule (one
// exec::Run, run.h) and the in-memory reference loop.
#include "tierflow/real/executor.h"

#include <algorithm>
#include <map>
#include <memory>
#include <thread>

#include "tierflow/core/units.h"
#include "tierflow/real/cpu_ops.h"
#include "tierflow/real/dataset.h"
#include "run.h"

namespace tierflow::real {

using exec::HasGlobalCheck;
using exec::Run;
using exec::ScalerFor;
using exec::UpdateGradScale;

Status CheckRunnable(const Schedule& schedule, const TrainConfig& config) {
  TF_RETURN_IF_ERROR(ValidateLlamaSpec(config.spec));
  TF_RETURN_IF_ERROR(ValidateLlamaSequence(config.spec, config.seq, "training.sequence_length"));
  TF_RETURN_IF_ERROR(schedule.Validate());
  TF_RETURN_IF_ERROR(exec::CheckTaskContracts(schedule));
  if (!HasGlobalCheck(schedule) && (config.dynamic_loss_scaling || config.gradient_clipping > 0)) {
    return InvalidArgument("schedule '" + schedule.name + "' updates without a global gradient check (its optimizer overlaps backward), but " +
                           (config.dynamic_loss_scaling ? std::string("training.loss_scaling is dynamic")
                                                        : "training.gradient_clipping is " + std::to_string(config.gradient_clipping)) +
                           ": plan it with training.loss_scaling: none and training.gradient_clipping: 0, or without policy.overlap_optimizer");
  }
  const ParamLayout layout = MakeParamLayout(config.spec.config);
  const int32_t ranks = config.ranks;
  if (ranks < 1) return InvalidArgument("training.data_parallel must be >= 1");
  if (ranks > 1) {
    TF_RETURN_IF_ERROR(exec::RankSpace::Make(layout, 0, ranks).status());
    bool norm_reduce = false;
    for (const TaskSpec& t : schedule.tasks()) norm_reduce = norm_reduce || (t.op == Op::kAllReduce && t.tensors.empty());
    if (HasGlobalCheck(schedule) && !norm_reduce) {
      return InvalidArgument("schedule '" + schedule.name + "' checks the gradients of " + std::to_string(ranks) +
                             " ranks but has no all-reduce of the check: plan it again with this tierflow");
    }
  }
  for (const TaskSpec& t : schedule.tasks()) {
    if (IsCollectiveOp(t.op) && t.ranks != ranks) {
      return InvalidArgument("task '" + t.id + "' is a collective of " + std::to_string(t.ranks) + " ranks, but training.data_parallel is " +
                             std::to_string(ranks));
    }
    if (t.op == Op::kCompute && t.resource != kNoIndex && schedule.resources()[static_cast<size_t>(t.resource)].concurrency != 1) {
      return InvalidArgument("resource '" + schedule.resources()[static_cast<size_t>(t.resource)].name + "': a compute resource of concurrency 1 is required");
    }
  }
  // Each micro-step computes each unit forward once.
  if (schedule.MicroSteps() != config.micro_steps) {
    return InvalidArgument("schedule '" + schedule.name + "' has " + std::to_string(schedule.MicroSteps()) +
                           " micro-steps per iteration, but training.gradient_accumulation_steps is " + std::to_string(config.micro_steps));
  }
  std::map<std::pair<int32_t, int32_t>, std::string> forward_of;
  for (const TaskSpec& t : schedule.tasks()) {
    if (t.op != Op::kCompute || t.phase != Phase::kForward || t.tensors.empty()) continue;
    auto [it, fresh] = forward_of.emplace(std::make_pair(t.tensors[0], t.micro_step), t.id);
    if (!fresh) {
      return InvalidArgument("tasks '" + it->second + "' and '" + t.id + "' both compute the same unit forward in micro-step " +
                             std::to_string(t.micro_step) + " (each micro-step computes each unit once)");
    }
  }
  // Tied embeddings: the head's part of the table's gradient leaves the GPU on its own d2h, and
  // every contribution is summed in bf16 (ops/copy_op.cc).
  if (config.spec.config.tied_embeddings) {
    const int64_t head = static_cast<int64_t>(layout.layer_offset.size()) - 1;
    bool head_part = false;
    for (const TaskSpec& t : schedule.tasks()) {
      if (t.op != Op::kD2H) continue;
      for (int32_t i : t.tensors) {
        const TensorSpec& ts = schedule.tensors()[static_cast<size_t>(i)];
        if (ts.kind != StateKind::kGrad16) {
          return InvalidArgument("task '" + t.id + "' copies '" + ts.name + "' off the GPU as " + std::string(StateKindName(ts.kind)) +
                                 ", but with tied embeddings gradients are summed in host memory as grad16: plan the schedule for this model");
        }
        head_part = head_part || (t.layer == head && ts.element_offset == layout.layer_offset[0]);
      }
    }
    if (!head_part) {
      return InvalidArgument("schedule '" + schedule.name + "' has no d2h of the tied head's part of the embedding table's gradient: plan it for this model (tied embeddings)");
    }
  }
  const int64_t partition = layout.total / ranks;  // each rank's elements
  // A device's store holds at most one region per kind of every rank's partition (each rank's
  // stretch and each region aligned: docs/schedule-format.md "Tensors"); an address past that is
  // no state of this model (a tensor at 2^62 in host memory trained without complaint).
  const int64_t mib = int64_t{1} << 20;
  const int64_t store_most = kStateKindCount * ((int64_t{ranks} * (partition + mib) * 4 + mib - 1) / mib * mib);
  for (const TensorSpec& ts : schedule.tensors()) {
    if (ts.offset_bytes > store_most - ts.size_bytes) {
      return InvalidArgument("tensor '" + ts.name + "': its bytes [" + std::to_string(ts.offset_bytes) + ", +" + std::to_string(ts.size_bytes) +
                             ") of device '" + schedule.devices()[static_cast<size_t>(ts.device)].name + "' end past the " + FormatBytes(static_cast<double>(store_most)) +
                             " that every kind of this model's state takes there at most");
    }
    if (ts.rank < 0 || ts.rank >= ranks) {
      return InvalidArgument("tensor '" + ts.name + "': rank " + std::to_string(ts.rank) + ", but training.data_parallel is " + std::to_string(ranks));
    }
    if (ts.element_offset + ts.size_bytes / StateKindBytes(ts.kind) > partition) {
      return InvalidArgument("tensor '" + ts.name + "': its range is outside the " + std::to_string(partition) + " parameters of a rank's partition");
    }
  }
  if (schedule.tensors().empty()) {
    return InvalidArgument("schedule '" + schedule.name + "' names no tensors: plan it again with this tierflow (tasks must say which state they move)");
  }
  return Status::Ok();
}

StatusOr<RunResult> RunSchedule(const Schedule& schedule, const TrainConfig& config, const RunOptions& options) {
  if (options.iterations < 1) return InvalidArgument("iterations must be >= 1");
  Collective* comm = options.collective;
  const int32_t ranks = comm == nullptr ? 1 : comm->ranks();
  if (ranks != config.ranks) {
    return InvalidArgument("schedule '" + schedule.name + "' trains on " + std::to_string(config.ranks) + " ranks (training.data_parallel), but this run has " +
                           std::to_string(ranks) + (config.ranks > 1 ? ": start one process per rank, mpirun -np " + std::to_string(config.ranks) : std::string()));
  }
  if (ranks == 1) {
    if (options.exit_in_checkpoint > 0) return InvalidArgument("--exit-in-checkpoint tests a checkpoint of several ranks (a run of one saves it whole)");
    Run run(schedule, config, options, *exec::RankSpace::Make(MakeParamLayout(config.spec.config), 0, 1), nullptr);
    return run.Execute();
  }
  TF_RETURN_IF_ERROR(CheckRunnable(schedule, config));
  if (options.on_master.every > 0) {
    return InvalidArgument("--save-every and --eval-every: tierflow run hands on the model every K iterations on one rank only "
                           "(--save-model at the end gathers every rank's)");
  }
  TF_ASSIGN_OR_RETURN(exec::RankSpace space, exec::RankSpace::Make(MakeParamLayout(config.spec.config), comm->rank(), ranks));
  TF_ASSIGN_OR_RETURN(Schedule part, exec::RankPart(schedule, comm->rank()));
  Run run(part, config, options, std::move(space), comm);
  if (options.plain_loop) run.SetPlainOrder(exec::RankPartOrder(schedule, comm->rank()));
  run.SetNodeShared(exec::NodeSharedResources(schedule));
  TF_ASSIGN_OR_RETURN(RunResult result, run.Execute());
  // Every rank's pool peaks on the whole schedule's pools (the largest, should ranks share a name).
  result.pool_peak_bytes.assign(schedule.pools().size(), 0);
  for (const auto& [name, peak] : result.pool_peaks) {
    const int32_t p = schedule.FindPool(name);
    if (p != kNoIndex) result.pool_peak_bytes[static_cast<size_t>(p)] = std::max(result.pool_peak_bytes[static_cast<size_t>(p)], peak);
  }
  return result;
}

namespace {

// The in-memory loop's gradients off the device, tensor by tensor, checked on the way, as the d2h
// tasks do: one contribution (`in_bf16` false) as fp32 into `grad`; with several, the first
// micro-step's into bf16 in `grad16` and the others added to it, in the order backward made them
// (the tied head's part of the table first). Each tensor is checked in `split` parts (the ranks'
// partitions); returns each part's checks combined in tensor order.
StatusOr<std::vector<cpu::GradCheck>> GradientsOff(ComputeDevice& device, const Trainer& trainer, const float* grads,
                                                   const float* tied_grads, bool in_bf16, bool first_micro, float unscale,
                                                   int32_t split, float* grad, uint16_t* grad16, CpuThreads& threads) {
  const bool tied = trainer.TiedHead(trainer.layer_count() - 1);
  std::vector<cpu::GradCheck> partial(static_cast<size_t>(split));
  for (const ParamTensor& pt : trainer.layout().tensors) {
    const int64_t n = pt.elements / split;
    for (int32_t q = 0; q < split; ++q) {
      const int64_t at = pt.offset + q * n;
      cpu::GradCheck check;
      if (!in_bf16) {
        TF_ASSIGN_OR_RETURN(check, device.D2HGrad(grad + at, grads + at, n, false, unscale, threads, nullptr));
      } else {
        bool first = first_micro;
        auto add = [&](const float* src) -> StatusOr<cpu::GradCheck> {
          uint16_t* dst = grad16 + at;
          const bool overwrite = first;
          first = false;
          return overwrite ? device.D2HGrad(dst, src, n, true, unscale, threads, nullptr)
                           : device.D2HGradAccumulate(dst, src, n, unscale, threads, nullptr);
        };
        if (tied && pt.offset == trainer.LayerBegin(0)) TF_RETURN_IF_ERROR(add(tied_grads + q * n).status());
        TF_ASSIGN_OR_RETURN(check, add(grads + at));
      }
      partial[static_cast<size_t>(q)] = cpu::CombineGradChecks(partial[static_cast<size_t>(q)], check);
    }
  }
  return partial;
}

// The parts each tensor's gradient check is taken in: the ranks' partitions, where every tensor
// splits into them (as tierflow run over several ranks needs), else the whole tensor.
int32_t CheckParts(const ParamLayout& layout, int32_t ranks) {
  for (const ParamTensor& pt : layout.tensors) {
    if (pt.elements % ranks != 0) return 1;
  }
  return ranks;
}

}  // namespace

StatusOr<RunResult> RunInMemory(const TrainConfig& config, int64_t iterations,
                                const std::function<void(int64_t, double)>& on_iteration, const std::string& compute,
                                const MasterHook& on_master) {
  TF_RETURN_IF_ERROR(ValidateLlamaSpec(config.spec));
  TF_RETURN_IF_ERROR(ValidateLlamaSequence(config.spec, config.seq, "training.sequence_length"));
  if (iterations < 1) return InvalidArgument("iterations must be >= 1");
  Trainer trainer(config);
  TF_ASSIGN_OR_RETURN(std::unique_ptr<ComputeDevice> device, MakeComputeDevice(compute, config, trainer));
  const int hw = config.threads > 0 ? config.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  CpuThreads threads(hw);
  TF_ASSIGN_OR_RETURN(TokenLoader loader, TokenLoader::Create(config.tokens, config.batch, config.seq, config.data_seed));
  if (config.micro_steps < 1) return InvalidArgument("micro_steps must be >= 1");
  const int32_t ranks = config.ranks;
  if (ranks < 1) return InvalidArgument("ranks must be >= 1");
  if (ranks > 1 && compute != "cpu") {
    return InvalidArgument("--in-memory with training.data_parallel " + std::to_string(ranks) + " runs on the CPU back-end (--compute cpu)");
  }
  std::vector<float> master = trainer.InitialMaster();
  TF_ASSIGN_OR_RETURN(const exec::RankSpace whole, exec::RankSpace::Make(trainer.layout(), 0, 1));  // AdamW's decay runs
  std::vector<float> m(master.size(), 0.0f), v(master.size(), 0.0f), grad(master.size());
  std::vector<uint16_t> p16(master.size());
  // Several contributions to a gradient (micro-steps; the tied table's two uses) are summed in
  // bf16, as the schedules' d2h tasks do.
  const bool tied = config.spec.config.tied_embeddings;
  const bool in_bf16 = config.micro_steps > 1 || tied;
  std::vector<uint16_t> grad16(in_bf16 ? master.size() : 0);
  // With ranks: every rank's gradients of the micro-step summed in rank order (the reduce-scatter),
  // the tied head's part of the table apart, as the schedule reduces it.
  std::vector<float> reduced(ranks > 1 ? master.size() : 0);
  std::vector<float> reduced_tied(ranks > 1 && tied ? static_cast<size_t>(trainer.LayerElements(0)) : 0);
  cpu::Fp32ToBf16(p16.data(), master.data(), static_cast<int64_t>(master.size()), threads);
  TF_ASSIGN_OR_RETURN(std::unique_ptr<WholeModel> model, WholeModel::Create(*device, trainer));
  TF_RETURN_IF_ERROR(model->Load(p16));
  LossScaler scaler = ScalerFor(config);
  IterationState it;
  trainer.PrepareIteration(&it);
  RunResult result;
  const double t0 = MonotonicSeconds();
  int64_t updates = 0;
  const int64_t layers = trainer.layer_count();
  const int32_t micro_steps = config.micro_steps;
  const int32_t split = CheckParts(trainer.layout(), ranks);
  for (int64_t i = 0; i < iterations; ++i) {
    it.iteration = i;
    it.micro_steps = micro_steps;
    it.ranks = ranks;
    it.loss_scale = scaler.scale();
    std::vector<double> rank_loss(static_cast<size_t>(ranks), 0.0);  // each rank's sum over its micro-steps
    cpu::GradCheck total;
    for (int32_t micro = 0; micro < micro_steps; ++micro) {
      it.micro_step = micro;
      for (int32_t r = 0; r < ranks; ++r) {
        TokenBatch batch = loader.Next();
        it.tokens = std::move(batch.inputs);
        it.targets = std::move(batch.targets);
        for (int64_t l = 0; l < layers; ++l) TF_RETURN_IF_ERROR(device->Forward(l, model->Layer(l), &it, threads, nullptr));
        rank_loss[static_cast<size_t>(r)] += it.loss;
        for (int64_t l = layers; l-- > 0;) {
          TF_RETURN_IF_ERROR(device->Backward(l, model->Layer(l), model->LayerGrads(l), &it, threads, nullptr));
        }
        if (ranks == 1) break;
        // ((g0 + g1) + g2) + ... in fp32, as SumInRankOrder forms it.
        const auto n = static_cast<int64_t>(reduced.size());
        if (r == 0) {
          std::copy(model->grads(), model->grads() + n, reduced.data());
        } else {
          cpu::ResidualAdd(reduced.data(), reduced.data(), model->grads(), n, threads);
        }
        if (tied) {
          const auto nt = static_cast<int64_t>(reduced_tied.size());
          if (r == 0) std::copy(model->tied_grads(), model->tied_grads() + nt, reduced_tied.data());
          else cpu::ResidualAdd(reduced_tied.data(), reduced_tied.data(), model->tied_grads(), nt, threads);
        }
      }
      // The reduced gradients keep a bf16 model's precision, rounded once after the sum.
      if (ranks > 1) {
        cpu::RoundToBf16(reduced.data(), static_cast<int64_t>(reduced.size()), threads);
        cpu::RoundToBf16(reduced_tied.data(), static_cast<int64_t>(reduced_tied.size()), threads);
      }
      const float* grads = ranks > 1 ? reduced.data() : model->grads();
      const float* tied_grads = ranks > 1 ? reduced_tied.data() : model->tied_grads();
      // With ranks, each rank's part of a tensor is checked on its own and a rank's checks are
      // combined in tensor order, then the ranks' in rank order, as the ranks' d2h copies and the
      // all-reduce of the check do (the values are the same; only the norm's additions group so).
      TF_ASSIGN_OR_RETURN(const std::vector<cpu::GradCheck> partial,
                          GradientsOff(*device, trainer, grads, tied_grads, in_bf16, micro == 0, 1.0f / it.loss_scale, split,
                                       grad.data(), grad16.data(), threads));
      const bool last = micro + 1 == micro_steps;  // the accumulated gradients: what the check is of
      if (last) {
        for (const cpu::GradCheck& p : partial) total = cpu::CombineGradChecks(total, p);
      }
    }
    if (in_bf16) cpu::Bf16ToFp32(grad.data(), grad16.data(), static_cast<int64_t>(grad.size()), threads);
    if (scaler.Update(total.finite)) {
      ++updates;
      const float clip = cpu::ClipCoefficient(total, config.gradient_clipping);
      exec::AdamWSparingVectors(whole, config, trainer.layout(), 0, static_cast<int64_t>(master.size()), master.data(), m.data(),
                                v.data(), grad.data(), updates, UpdateGradScale(it.loss_scale, clip), threads);
    }
    cpu::Fp32ToBf16(p16.data(), master.data(), static_cast<int64_t>(master.size()), threads);
    TF_RETURN_IF_ERROR(model->Load(p16));
    double loss_sum = 0;
    for (const double l : rank_loss) loss_sum += l;  // in rank order, as an all-reduce would
    const double loss = loss_sum / (static_cast<double>(micro_steps) * ranks);
    result.loss.push_back(loss);
    result.iteration_end_s.push_back(MonotonicSeconds() - t0);
    if (on_iteration) on_iteration(i, loss);
    if (on_master.every > 0 && on_master.fn && (i + 1) % on_master.every == 0) TF_RETURN_IF_ERROR(on_master.fn(i + 1, master));
  }
  result.wall_s = MonotonicSeconds() - t0;  // no schedule: no tasks, records or pools
  result.gpu_memory = device->memory_peak();
  result.master = std::move(master);
  return result;
}

}  // namespace tierflow::real
