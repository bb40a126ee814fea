#include "offload_design.h"
#include "policies_internal.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace tierflow::policies {
namespace {

// MemAscend's shape classes: embedding and head, attention projections, FFN projections.
std::string ShapeClass(const std::string& unit_name) {
  if (unit_name.find("embed") != std::string::npos || unit_name.find("lm_head") != std::string::npos ||
      unit_name.find("wte") != std::string::npos || unit_name.find("wpe") != std::string::npos) {
    return "embedding";
  }
  if (unit_name.find("mlp") != std::string::npos) return "ffn";
  if (unit_name.find("attn") != std::string::npos) return "attention";
  return "other";
}

}  // namespace

std::vector<int32_t> DiskRange(int32_t first, int32_t count) {
  std::vector<int32_t> d;
  for (int32_t i = 0; i < std::max(1, count); ++i) d.push_back(first + i);
  return d;
}

Status PlaceOnDisks(const std::string& layout, int32_t disks, OffloadDesign* d) {
  if (layout == "split") {
    if (disks < 2) {
      return InvalidArgument("policy.disk_layout: split needs two or more disks (parameters on one, optimizer "
                             "states on the others); " + std::to_string(disks) +
                             " in use (use disk_layout: stripe, or give the hardware another NVMe device)");
    }
    d->param_disks = {0};
    d->opt_disks = DiskRange(1, disks - 1);
  } else {
    d->param_disks = d->opt_disks = DiskRange(0, disks);
  }
  return Status::Ok();
}

Status ReadCommonKnobs(Knobs& knobs, OffloadDesign* d) {
  TF_ASSIGN_OR_RETURN(d->sub_group_size, knobs.Int("sub_group_size", d->sub_group_size, 1, int64_t{1} << 40));
  TF_ASSIGN_OR_RETURN(d->persistence_threshold, knobs.Int("param_persistence_threshold", d->persistence_threshold, 0, int64_t{1} << 40));
  TF_ASSIGN_OR_RETURN(d->block_bytes, knobs.Bytes("block_size", d->block_bytes));
  TF_ASSIGN_OR_RETURN(const int64_t qd, knobs.Int("queue_depth", d->queue_depth, 1, 4096));
  TF_ASSIGN_OR_RETURN(const int64_t threads, knobs.Int("cpu_threads", d->cpu_threads, 0, 1024));
  TF_ASSIGN_OR_RETURN(const int64_t buffers, knobs.Int("buffer_count", d->param_buffers, 1, 65536));
  TF_ASSIGN_OR_RETURN(const int64_t opt_buffers, knobs.Int("optimizer_buffer_count", d->optimizer_buffers, 1, 65536));
  d->queue_depth = static_cast<int32_t>(qd);
  d->cpu_threads = static_cast<int32_t>(threads);
  d->param_buffers = static_cast<int32_t>(buffers);
  d->optimizer_buffers = static_cast<int32_t>(opt_buffers);
  TF_ASSIGN_OR_RETURN(const int64_t on_gpu, knobs.CountOrAll("gpu_sub_groups", d->gpu_sub_groups, kAllSubGroups));
  d->gpu_sub_groups = static_cast<int32_t>(on_gpu);
  return Status::Ok();
}

namespace {

// What the planner refuses of a design before anything is planned, naming the knob.
Status CheckDesign(const Scenario& s, const OffloadDesign& d) {
  if (d.param_buffers < 1) return InvalidArgument("policy.buffer_count must be >= 1");
  if (d.optimizer_buffers < 1) return InvalidArgument("policy.optimizer_buffer_count must be >= 1");
  if (d.queue_depth < 1) return InvalidArgument("policy.queue_depth must be >= 1");
  const int32_t disks = static_cast<int32_t>(s.hardware.node.nvme.size());
  if (disks == 0) return InvalidArgument("hardware has no NVMe device for policy '" + d.policy + "'");
  for (const auto* list : {&d.param_disks, &d.opt_disks}) {
    for (int32_t disk : *list) {
      if (disk >= disks) return InvalidArgument("policy: disk nvme" + std::to_string(disk) + " is not in the hardware (" + std::to_string(disks) + " NVMe devices)");
    }
  }
  if (d.remote_ratio > 0 && s.hardware.node.remote.empty()) {
    return InvalidArgument("policy.ratio: sub-groups are placed on a remote tier but the hardware has none (add hardware.node.remote)");
  }
  if (d.gpu_window_bytes > 0 && !d.params_on_nvme) {
    return InvalidArgument("policy.prefetch_window: a GPU prefetch window bounds how far parameter fetches run ahead, but "
                           "policy.offload_param is none (the parameters stay on the GPU): set prefetch_window: 0 B, or offload_param: nvme");
  }
  if (d.gpu_sub_groups > 0 && d.params_on_nvme && d.p16_chunk_elements > 0) {
    return InvalidArgument("policy.gpu_sub_groups: an update on the GPU sends its sub-group's bf16 parameters home whole, and policy '" + d.policy +
                           "' stages them in chunks of buffer_size elements, which a sub-group's may not fit: keep gpu_sub_groups 0 with it");
  }
  // An update overlapped with backward runs before the global check (the overflow check and the
  // norm over every gradient), so its math is the reference's only when nothing in the update
  // depends on that check: refused here rather than trained differently.
  if (!d.global_norm_first && s.training.UpdateNeedsGlobalCheck()) {
    const std::string why = s.training.loss_scaling == "dynamic"
                                ? "training.loss_scaling is 'dynamic' (an overflow anywhere must skip every sub-group's update)"
                                : "training.gradient_clipping is " + Shortest(s.training.gradient_clipping) +
                                      " (the clip factor needs the norm of every gradient)";
    return InvalidArgument("policy.overlap_optimizer: true updates each sub-group as soon as its gradients are final, before the "
                           "global gradient check, but " + why +
                           ": set training.loss_scaling: none and training.gradient_clipping: 0, or policy.overlap_optimizer: false");
  }
  return Status::Ok();
}

// Every offloaded partition fits a parameter slot (checked before anything is built).
Status CheckSlots(const ModelPlan& plan, const OffloadDesign& d) {
  if (d.slot_elements > 0 && d.params_on_nvme) {
    for (const ParamUnit& u : plan.units) {
      if (!u.gpu_resident && u.rank_elements > d.slot_elements) {
        return InvalidArgument("policy.buffer_size: the partition of '" + u.name + "' has " +
                               std::to_string(u.rank_elements) + " elements, more than buffer_size " +
                               std::to_string(d.slot_elements) + " (raise policy.buffer_size to at least " +
                               std::to_string(u.rank_elements) + ")");
      }
    }
  }
  return Status::Ok();
}

// Every layer's gathered parameters fit the GPU prefetch window.
Status CheckWindow(const ModelPlan& plan, const OffloadDesign& d) {
  if (d.gpu_window_bytes > 0) {
    // A layer's gathered parameters are held together until its compute (TrainingPasses).
    std::map<int32_t, int64_t> gathered_of_layer;
    for (const ParamUnit& u : plan.units) {
      if (!u.gpu_resident) gathered_of_layer[u.layer] += u.elements * 2;
    }
    for (const auto& [layer, bytes] : gathered_of_layer) {
      if (bytes > d.gpu_window_bytes) {
        return InvalidArgument("policy.prefetch_window: layer " + std::to_string(layer) + "'s gathered parameters need " +
                               std::to_string(bytes) + " bytes, more than the window (" + std::to_string(d.gpu_window_bytes) + " bytes)");
      }
    }
  }
  return Status::Ok();
}

// One design planned (PlanDesign), in stages: devices and placement, pools (then whether each
// layer fits the prefetch window), the training passes, the global gradient check, each rank's
// optimizer sweep, the step's end. Resources are made as the stages first ask for them, in the
// same order as ever, so every schedule keeps its numbers.
class DesignPlan {
 public:
  DesignPlan(const Scenario& s, const OffloadDesign& d, ModelPlan plan)
      : s_(s), d_(d), plan_(std::move(plan)), ranks_(plan_.ranks), nsub_(static_cast<int32_t>(plan_.subgroups.size())),
        disks_(static_cast<int32_t>(s.hardware.node.nvme.size())), remote_(d.remote_ratio > 0),
        threads_(d.cpu_threads > 0 ? d.cpu_threads : std::max(1, s.hardware.node.cpu.cores / RanksPerNode(s, plan_.ranks))),
        b_(s, d.policy) {}

  StatusOr<Schedule> Plan() {
    Devices();
    UpdateOrder();
    Pools();
    TF_RETURN_IF_ERROR(StatesOnGpu());
    TF_RETURN_IF_ERROR(CheckWindow(plan_, d_));
    const PassResult passes = Passes();
    const int32_t norm_done = d_.global_norm_first ? Norm(passes) : kNoIndex;
    std::vector<int32_t> step_tails, refreshes;
    std::vector<std::vector<int32_t>> param_done(ranks_);
    for (int32_t r = 0; r < ranks_; ++r) {
      const SweepResult sweep = OptimizerSweep(b_, plan_, Sweep(r, passes, norm_done));
      step_tails.insert(step_tails.end(), sweep.tails.begin(), sweep.tails.end());
      refreshes.insert(refreshes.end(), sweep.resident_refreshes.begin(), sweep.resident_refreshes.end());
      param_done[r] = sweep.param_done;
    }
    WaitForTheStep(passes, step_tails, refreshes, param_done);
    return b_.Finish();
  }

 private:
  // The knobs as metadata, each node's disks and remote tier, each unit's first sub-group.
  void Devices() {
    for (const auto& [k, v] : s_.knobs.values()) b_.Meta("policy." + k, v);
    b_.Meta("update", d_.global_norm_first ? "after the global gradient check"
                                            : "overlapped with backward, no global gradient check (training.loss_scaling none, "
                                              "gradient_clipping 0)");
    for (int32_t r = 0; r < ranks_; ++r) {  // each node's, in the order of their names
      for (int32_t disk = 0; disk < disks_; ++disk) b_.Nvme(r, disk);
      if (remote_) b_.Remote(r, 0);
    }
    unit_subgroup_.assign(plan_.units.size(), 0);
    for (size_t u = 0; u < plan_.units.size(); ++u) {
      const auto gs = SubGroupsOfUnit(plan_, static_cast<int32_t>(u));
      unit_subgroup_[u] = gs.empty() ? 0 : gs.front();
    }
  }

  // Placement: unit u of rank r is read from the param disk of its first sub-group, rotated by
  // rank; sub-group g of rank r lives on opt disk (g + r), or on the remote tier.
  int32_t ParamDiskOf(int32_t r, int32_t g) const { return d_.param_disks[static_cast<size_t>(g + r) % d_.param_disks.size()]; }
  bool OptOnRemote(int32_t g) const { return remote_ && g % d_.remote_ratio == 0; }
  int32_t OptDiskOf(int32_t r, int32_t g) const { return d_.opt_disks[static_cast<size_t>(g + r) % d_.opt_disks.size()]; }

  // Resources. Per rank and disk: the parameter handle and the optimizer read and write handles
  // (DeepSpeed's shape). Tier locks and IOC's shared queue are device-wide, shared by every rank
  // of the device's node, concurrency 1.
  int32_t ParamIo(int32_t r, int32_t disk) {
    const std::string nvme = b_.Nvme(r, disk);
    return b_.Resource(nvme + ".r" + std::to_string(r) + ".param", nvme);
  }
  // The queue an optimizer read or write of sub-group g on rank r goes through.
  int32_t OptIo(int32_t r, int32_t g, bool write) {
    const std::string dir = write ? "write" : "read";
    if (OptOnRemote(g)) {
      const std::string remote0 = b_.Remote(r, 0);
      return d_.tier_locks ? b_.Resource(remote0 + "." + dir, remote0) : b_.Resource(remote0 + ".r" + std::to_string(r) + "." + dir, remote0);
    }
    const std::string nvme = b_.Nvme(r, OptDiskOf(r, g));
    if (d_.shared_rw_queue) return b_.Resource(nvme + ".opt", nvme);
    if (d_.tier_locks) return b_.Resource(nvme + "." + dir, nvme);
    return b_.Resource(nvme + ".r" + std::to_string(r) + ".opt_" + dir, nvme);
  }

  // The update order; the sub-groups updated on the GPU, the first gpu_sub_groups of it; the
  // cached ones, the last `cached_per_path` of each path among the others.
  void UpdateOrder() {
    for (int32_t g = 0; g < nsub_; ++g) order_.push_back(g);
    if (d_.descending_order) std::reverse(order_.begin(), order_.end());
    on_gpu_.assign(nsub_, false);
    for (int32_t i = 0; i < std::min(d_.gpu_sub_groups, nsub_); ++i) on_gpu_[order_[static_cast<size_t>(i)]] = true;
    cached_.assign(nsub_, false);
    if (d_.cached_per_path <= 0) return;
    for (int path = 0; path < (remote_ ? 2 : 1); ++path) {
      int32_t left = d_.cached_per_path;
      for (auto it = order_.rbegin(); it != order_.rend() && left > 0; ++it) {
        if (on_gpu_[*it] || (remote_ && OptOnRemote(*it) != (path == 1))) continue;
        cached_[*it] = true;
        cached_elements_ += plan_.subgroups[*it].elements;
        --left;
      }
    }
  }

  // The sub-groups updated on the GPU (UpdateOrder) fit the GPU's pool beside the parameters kept
  // there, or the design is refused here, naming the pool and the bytes short.
  Status StatesOnGpu() { return CheckStatesFitGpu(b_, plan_, on_gpu_, d_.params_on_nvme, "policy.gpu_sub_groups"); }

  // Each rank's pinned pools, its GPU-resident buffers and its prefetch window.
  void Pools() {
    int64_t max_subgroup = 0;
    for (const SubGroup& g : plan_.subgroups) max_subgroup = std::max(max_subgroup, g.elements);
    int64_t max_partition = 0;
    std::map<std::string, int64_t> class_max;  // shape class -> largest partition (elements)
    for (const ParamUnit& u : plan_.units) {
      if (u.gpu_resident) continue;
      max_partition = std::max(max_partition, u.rank_elements);
      int64_t& m = class_max[ShapeClass(u.name)];
      m = std::max(m, u.rank_elements);
    }
    param_pool_.assign(ranks_, kNoIndex);
    opt_pool_.resize(ranks_);
    grad_pool_.resize(ranks_);
    cache_pool_.assign(ranks_, kNoIndex);
    p16_pool_.resize(ranks_);
    class_pool_.resize(ranks_);
    for (int32_t r = 0; r < ranks_; ++r) {
      const std::string R = ".r" + std::to_string(r);
      if (d_.params_on_nvme) {
        if (d_.class_pools) {
          for (const auto& [cls, elements] : class_max) {
            class_pool_[r][cls] = PinnedPool(b_, r, "host.pinned.param." + cls + R, d_.param_buffers * elements * 2, d_.pin_rounding);
          }
        } else {
          const int64_t slot = d_.slot_elements ? d_.slot_elements * 2 : max_partition * 2;
          param_pool_[r] = PinnedPool(b_, r, "host.pinned.param" + R, d_.param_buffers * slot, d_.pin_rounding);
        }
      }
      opt_pool_[r] = PinnedPool(b_, r, "host.pinned.opt" + R, d_.optimizer_buffers * max_subgroup * 4, d_.pin_rounding);
      // fp16 parameters on their way out of the optimizer: two sub-groups' worth, exact sizes, or
      // one DeepSpeed chunk.
      p16_pool_[r] = PinnedPool(b_, r, "host.pinned.p16" + R,
                                d_.p16_chunk_elements > 0 ? d_.p16_chunk_elements * 2 : 2 * max_subgroup * 2, d_.pin_rounding);
      grad_pool_[r] = d_.gradient_path == GradientPath::kKeepInHost
                          ? PinnedPool(b_, r, "host.pinned.grad" + R, plan_.rank_elements * 2, d_.pin_rounding)
                          : opt_pool_[r];
      if (cached_elements_ > 0) cache_pool_[r] = PinnedPool(b_, r, "host.pinned.cache" + R, cached_elements_ * 12, d_.pin_rounding);
      b_.Buffer("gpu.resident" + R, b_.GpuPool(r), plan_.gpu_resident_bytes, /*persistent=*/true);
      if (!d_.params_on_nvme) b_.Buffer("gpu.partition" + R, b_.GpuPool(r), plan_.rank_elements * 2, /*persistent=*/true);
      if (d_.gpu_window_bytes > 0) {
        const std::string g = b_.Gpu(r);
        window_pool_.push_back(b_.Pool(g + ".window", g, d_.gpu_window_bytes));
      }
      b_.GpuCompute(r);
    }
  }

  PassResult Passes() {
    PassOptions po;
    po.fetch.slot_bytes = d_.slot_elements * 2;
    if (d_.class_pools) {
      po.fetch.slot_pool_of = [this](int32_t r, int32_t u) { return class_pool_[r].at(ShapeClass(plan_.units[u].name)); };
    } else {
      po.fetch.slot_pool = param_pool_;
    }
    po.fetch.read_resource_of = [this](int32_t r, int32_t u) { return ParamIo(r, ParamDiskOf(r, unit_subgroup_[u])); };
    po.fetch.block_bytes = d_.block_bytes;
    po.fetch.queue_depth = d_.queue_depth;
    po.fetch.coupled_reads = d_.coupled_reads;
    po.fetch.params_on_gpu = !d_.params_on_nvme;
    po.fetch.gather_pool = window_pool_;
    // Every parameter pool above holds param_buffers of its largest partition: a ring of that many
    // slots keeps the reads within it whatever the disk placement (fuyou-13b deadlocked without).
    po.fetch.slot_ring = d_.params_on_nvme ? std::max(d_.param_buffers, d_.coupled_reads) : 0;
    po.gradient_path = d_.gradient_path;
    po.grad_partition_buffer = d_.grad_partition_buffer;
    po.grad_pool = grad_pool_;
    po.grad_write_resource_of = [this](int32_t r, int32_t u) { return OptIo(r, unit_subgroup_[u], /*write=*/true); };
    po.block_bytes = d_.block_bytes;
    po.queue_depth = d_.queue_depth;
    po.cpu_threads = threads_;
    po.chain_passes = true;
    return TrainingPasses(b_, plan_, po);
  }

  // The global gradient check after every gradient has left the GPU; its all-reduce.
  int32_t Norm(const PassResult& passes) {
    std::vector<std::vector<int32_t>> norm_deps = passes.grad_copies;
    for (int32_t r = 0; r < ranks_; ++r) norm_deps[r].push_back(passes.last_compute[r]);
    std::vector<int32_t> temporaries;
    for (int32_t r = 0; d_.overflow_temporaries && r < ranks_; ++r) {
      const int64_t bytes = plan_.rank_elements * kOverflowTemporaryBytesPerElement;
      const int32_t pool = b_.Pool("host.temp.r" + std::to_string(r), b_.Host(r), bytes);
      temporaries.push_back(b_.Buffer("overflow_check.r" + std::to_string(r), pool, bytes));
    }
    const int64_t grad_bytes = d_.gradient_path == GradientPath::kKeepInHost ? 2 : 4;
    return GradientNorm(b_, plan_, norm_deps, threads_, grad_bytes, temporaries);
  }

  // Rank r's optimizer sweep.
  SweepOptions Sweep(int32_t r, const PassResult& passes, int32_t norm_done) {
    SweepOptions so;
    so.rank = r;
    so.order = order_;
    so.pipeline_read = d_.pipeline_read;
    so.pipeline_write = d_.pipeline_write;
    so.read_ahead = d_.read_ahead_states;
    so.isolate_reads_first = d_.isolate_reads_first;
    so.semi_async_writes = d_.semi_async_writes;
    for (int32_t g = 0; g < nsub_; ++g) {
      so.read_resource.push_back(OptIo(r, g, /*write=*/false));
      so.write_resource.push_back(OptIo(r, g, /*write=*/true));
      so.param_write_resource.push_back(d_.params_on_nvme ? ParamIo(r, ParamDiskOf(r, g)) : kNoIndex);
    }
    so.cached = cached_;
    so.on_gpu = on_gpu_;
    so.gpu_pool = b_.GpuPool(r);
    so.write_cached = d_.write_cached;
    so.cache_pool = cache_pool_[r];
    so.opt_pool = opt_pool_[r];
    so.grads_on_nvme = d_.gradient_path == GradientPath::kFlushToNvme;
    if (!so.grads_on_nvme) so.host_grad_buffer = passes.host_grad_buffer[r];
    if (d_.global_norm_first) {
      so.first_deps = passes.grad_writes[r];
      so.first_deps.push_back(norm_done);
      so.pipelined_read_deps = {norm_done};
    } else {
      // Overlapped with backward: a sub-group starts when its own gradients are final.
      so.ready_deps = SubGroupGradientDeps(plan_, passes.grad_ready[r]);
    }
    const bool chunked = d_.params_on_nvme && d_.p16_chunk_elements > 0;
    so.param_path = !d_.params_on_nvme ? ParamUpdatePath::kToGpu
                    : chunked          ? ParamUpdatePath::kChunkedBlocking
                                       : ParamUpdatePath::kWrite;
    so.chunk_elements = d_.p16_chunk_elements;
    so.adam_waits_param_write = chunked;
    so.states_after_params = chunked;
    so.param_pool = p16_pool_[r];
    so.block_bytes = d_.block_bytes;
    so.queue_depth = d_.queue_depth;
    so.threads = threads_;
    return so;
  }

  // The step's end, and what the next iteration's parameters wait for.
  void WaitForTheStep(const PassResult& passes, const std::vector<int32_t>& step_tails, const std::vector<int32_t>& refreshes,
               const std::vector<std::vector<int32_t>>& param_done) {
    const int32_t step_end = StepEnd(b_, plan_, passes, step_tails, refreshes);
    if (d_.blocking_step || !d_.params_on_nvme) {
      for (int32_t read : passes.reads) b_.task(read).carried.push_back({step_end, 1});
      if (!d_.params_on_nvme && !passes.gathers.empty()) b_.task(passes.gathers.front()).carried.push_back({step_end, 1});
      return;
    }
    // Delayed write-back: a read of the first forward pass waits for the fp16 write-back of every
    // sub-group of the units up to its own, so that reads become ready in fetch order (otherwise
    // a later unit's read could take the last pinned slot while an earlier one still waits for its
    // sub-group: a deadlock). Later passes wait for the whole step.
    std::vector<std::vector<bool>> needed(ranks_, std::vector<bool>(nsub_, false));
    for (size_t i = 0; i < passes.reads.size(); ++i) {
      TaskSpec& read = b_.task(passes.reads[i]);
      if (i >= passes.first_forward_reads) {
        read.carried.push_back({step_end, 1});
        continue;
      }
      const auto [r, unit] = passes.read_rank_unit[i];
      for (int32_t g : SubGroupsOfUnit(plan_, unit)) needed[r][g] = true;
      for (int32_t g = 0; g < nsub_; ++g) {
        if (needed[r][g]) read.carried.push_back({param_done[r][g], 1});
      }
    }
  }

  const Scenario& s_;
  const OffloadDesign& d_;
  const ModelPlan plan_;
  const int32_t ranks_, nsub_, disks_;
  const bool remote_;
  const int32_t threads_;
  ScheduleBuilder b_;
  std::vector<int32_t> unit_subgroup_;  // per unit: its first sub-group
  std::vector<int32_t> order_;          // sub-groups in update order
  std::vector<bool> cached_;            // per sub-group
  std::vector<bool> on_gpu_;            // per sub-group: its states on the GPU (StatesOnGpu)
  int64_t cached_elements_ = 0;
  std::vector<int32_t> param_pool_, opt_pool_, grad_pool_, cache_pool_, window_pool_, p16_pool_;  // per rank
  std::vector<std::map<std::string, int32_t>> class_pool_;  // per rank: shape class -> pool
};

}  // namespace

StatusOr<Schedule> PlanDesign(const Scenario& s, const OffloadDesign& d) {
  TF_RETURN_IF_ERROR(CheckDesign(s, d));
  // Sub-groups placed on several devices must not split a unit (MakeModelPlan).
  const bool spread = d.param_disks.size() > 1 || d.opt_disks.size() > 1 || d.remote_ratio > 0;
  TF_ASSIGN_OR_RETURN(ModelPlan plan, MakeModelPlan(s, d.sub_group_size, d.persistence_threshold, spread ? SubGroupRule::kUnitsAtMost : SubGroupRule::kFlat));
  TF_RETURN_IF_ERROR(CheckSlots(plan, d));
  return DesignPlan(s, d, std::move(plan)).Plan();
}

}  // namespace tierflow::policies
