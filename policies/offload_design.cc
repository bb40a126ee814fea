#include "offload_design.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace tierflow::policies {
namespace {

std::string Shortest(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

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
  return Status::Ok();
}

StatusOr<Schedule> PlanDesign(const Scenario& s, const OffloadDesign& d) {
  if (d.param_buffers < 1) return InvalidArgument("policy.buffer_count must be >= 1");
  if (d.optimizer_buffers < 1) return InvalidArgument("policy.optimizer_buffer_count must be >= 1");
  if (d.queue_depth < 1) return InvalidArgument("policy.queue_depth must be >= 1");
  const int32_t disks = static_cast<int32_t>(s.hardware.node.nvme.size());
  if (disks == 0) return InvalidArgument("hardware has no NVMe device for policy '" + d.policy + "'");
  for (int32_t disk : d.param_disks) {
    if (disk >= disks) return InvalidArgument("policy: disk nvme" + std::to_string(disk) + " is not in the hardware (" + std::to_string(disks) + " NVMe devices)");
  }
  for (int32_t disk : d.opt_disks) {
    if (disk >= disks) return InvalidArgument("policy: disk nvme" + std::to_string(disk) + " is not in the hardware (" + std::to_string(disks) + " NVMe devices)");
  }
  const bool remote = d.remote_ratio > 0;
  if (remote && s.hardware.node.remote.empty()) {
    return InvalidArgument("policy.ratio: sub-groups are placed on a remote tier but the hardware has none (add hardware.node.remote)");
  }
  if (d.gpu_window_bytes > 0 && !d.params_on_nvme) {
    return InvalidArgument("policy.prefetch_window: a GPU prefetch window bounds how far parameter fetches run ahead, but "
                           "policy.offload_param is none (the parameters stay on the GPU): set prefetch_window: 0 B, or offload_param: nvme");
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

  // Sub-groups placed on several devices must not split a unit (MakeModelPlan).
  const bool spread = d.param_disks.size() > 1 || d.opt_disks.size() > 1 || d.remote_ratio > 0;
  TF_ASSIGN_OR_RETURN(ModelPlan plan, MakeModelPlan(s, d.sub_group_size, d.persistence_threshold, spread ? SubGroupRule::kUnitsAtMost : SubGroupRule::kFlat));
  const int32_t ranks = plan.ranks;
  const int32_t nsub = static_cast<int32_t>(plan.subgroups.size());
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
  const int32_t threads = d.cpu_threads > 0 ? d.cpu_threads : std::max(1, s.hardware.node.cpu.cores / RanksPerNode(s, ranks));
  int64_t max_subgroup = 0;
  for (const SubGroup& g : plan.subgroups) max_subgroup = std::max(max_subgroup, g.elements);
  int64_t max_partition = 0;
  std::map<std::string, int64_t> class_max;  // shape class -> largest partition (elements)
  for (const ParamUnit& u : plan.units) {
    if (u.gpu_resident) continue;
    max_partition = std::max(max_partition, u.rank_elements);
    int64_t& m = class_max[ShapeClass(u.name)];
    m = std::max(m, u.rank_elements);
  }

  ScheduleBuilder b(s, d.policy);
  for (const auto& [k, v] : s.knobs.values()) b.Meta("policy." + k, v);
  b.Meta("update", d.global_norm_first ? "after the global gradient check"
                                       : "overlapped with backward, no global gradient check (training.loss_scaling none, "
                                         "gradient_clipping 0)");
  for (int32_t r = 0; r < ranks; ++r) {  // each node's, in the order of their names
    for (int32_t disk = 0; disk < disks; ++disk) b.Nvme(r, disk);
    if (remote) b.Remote(r, 0);
  }

  // Placement: unit u of rank r is read from the param disk of its first sub-group, rotated by
  // rank; sub-group g of rank r lives on opt disk (g + r), or on the remote tier.
  auto param_disk_of_subgroup = [&](int32_t r, int32_t g) {
    return d.param_disks[static_cast<size_t>(g + r) % d.param_disks.size()];
  };
  auto opt_on_remote = [&](int32_t g) { return remote && g % d.remote_ratio == 0; };
  auto opt_disk_of_subgroup = [&](int32_t r, int32_t g) {
    return d.opt_disks[static_cast<size_t>(g + r) % d.opt_disks.size()];
  };
  std::vector<int32_t> unit_subgroup(plan.units.size(), 0);
  for (size_t u = 0; u < plan.units.size(); ++u) {
    const auto gs = SubGroupsOfUnit(plan, static_cast<int32_t>(u));
    unit_subgroup[u] = gs.empty() ? 0 : gs.front();
  }

  // Resources. Per rank and disk: the parameter handle and the optimizer read and write
  // handles (DeepSpeed's shape). Tier locks and IOC's shared queue are device-wide, shared by
  // every rank, concurrency 1.
  auto param_io = [&](int32_t r, int32_t disk) {
    const std::string nvme = b.Nvme(r, disk);
    return b.Resource(nvme + ".r" + std::to_string(r) + ".param", nvme);
  };
  // The queue an optimizer read or write of sub-group g on rank r goes through. Tier locks and
  // the shared queue are per device: every rank of the device's node takes them.
  auto opt_io = [&](int32_t r, int32_t g, bool write) {
    const std::string dir = write ? "write" : "read";
    if (opt_on_remote(g)) {
      const std::string remote0 = b.Remote(r, 0);
      return d.tier_locks ? b.Resource(remote0 + "." + dir, remote0)
                          : b.Resource(remote0 + ".r" + std::to_string(r) + "." + dir, remote0);
    }
    const std::string nvme = b.Nvme(r, opt_disk_of_subgroup(r, g));
    if (d.shared_rw_queue) return b.Resource(nvme + ".opt", nvme);
    if (d.tier_locks) return b.Resource(nvme + "." + dir, nvme);
    return b.Resource(nvme + ".r" + std::to_string(r) + ".opt_" + dir, nvme);
  };
  auto opt_read_io = [&](int32_t r, int32_t g) { return opt_io(r, g, false); };
  auto opt_write_io = [&](int32_t r, int32_t g) { return opt_io(r, g, true); };

  // Pools.
  std::vector<int32_t> param_pool(ranks, kNoIndex), opt_pool(ranks), grad_pool(ranks), cache_pool(ranks, kNoIndex),
      window_pool, p16_pool(ranks);
  std::vector<std::map<std::string, int32_t>> class_pool(ranks);
  const int64_t slot_bytes = d.slot_elements * 2;
  // Cached sub-groups: the last `cached_per_path` of each path in update order.
  std::vector<int32_t> order;
  for (int32_t g = 0; g < nsub; ++g) order.push_back(g);
  if (d.descending_order) std::reverse(order.begin(), order.end());
  std::vector<bool> cached(nsub, false);
  int64_t cached_elements = 0;
  if (d.cached_per_path > 0) {
    for (int path = 0; path < (remote ? 2 : 1); ++path) {
      int32_t left = d.cached_per_path;
      for (auto it = order.rbegin(); it != order.rend() && left > 0; ++it) {
        if (remote && opt_on_remote(*it) != (path == 1)) continue;
        cached[*it] = true;
        cached_elements += plan.subgroups[*it].elements;
        --left;
      }
    }
  }
  for (int32_t r = 0; r < ranks; ++r) {
    const std::string R = ".r" + std::to_string(r);
    if (d.params_on_nvme) {
      if (d.class_pools) {
        for (const auto& [cls, elements] : class_max) {
          class_pool[r][cls] = PinnedPool(b, r, "host.pinned.param." + cls + R, d.param_buffers * elements * 2, d.pin_rounding);
        }
      } else {
        const int64_t slot = slot_bytes ? slot_bytes : max_partition * 2;
        param_pool[r] = PinnedPool(b, r, "host.pinned.param" + R, d.param_buffers * slot, d.pin_rounding);
      }
    }
    opt_pool[r] = PinnedPool(b, r, "host.pinned.opt" + R, d.optimizer_buffers * max_subgroup * 4, d.pin_rounding);
    // fp16 parameters on their way out of the optimizer: two sub-groups' worth, exact sizes, or
    // one DeepSpeed chunk.
    p16_pool[r] = PinnedPool(b, r, "host.pinned.p16" + R,
                             d.p16_chunk_elements > 0 ? d.p16_chunk_elements * 2 : 2 * max_subgroup * 2, d.pin_rounding);
    grad_pool[r] = d.gradient_path == GradientPath::kKeepInHost
                       ? PinnedPool(b, r, "host.pinned.grad" + R, plan.rank_elements * 2, d.pin_rounding)
                       : opt_pool[r];
    if (cached_elements > 0) cache_pool[r] = PinnedPool(b, r, "host.pinned.cache" + R, cached_elements * 12, d.pin_rounding);
    b.Buffer("gpu.resident" + R, b.GpuPool(r), plan.gpu_resident_bytes, /*persistent=*/true);
    if (!d.params_on_nvme) b.Buffer("gpu.partition" + R, b.GpuPool(r), plan.rank_elements * 2, /*persistent=*/true);
    if (d.gpu_window_bytes > 0) {
      const std::string g = b.Gpu(r);
      window_pool.push_back(b.Pool(g + ".window", g, d.gpu_window_bytes));
    }
    b.GpuCompute(r);
  }
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

  TaskSpec step_end_spec;
  step_end_spec.id = "step.end";
  step_end_spec.op = Op::kBarrier;
  step_end_spec.phase = Phase::kStep;

  PassOptions po;
  po.fetch.slot_bytes = slot_bytes;
  if (d.class_pools) {
    po.fetch.slot_pool_of = [&](int32_t r, int32_t u) { return class_pool[r].at(ShapeClass(plan.units[u].name)); };
  } else {
    po.fetch.slot_pool = param_pool;
  }
  po.fetch.read_resource_of = [&](int32_t r, int32_t u) { return param_io(r, param_disk_of_subgroup(r, unit_subgroup[u])); };
  po.fetch.block_bytes = d.block_bytes;
  po.fetch.queue_depth = d.queue_depth;
  po.fetch.coupled_reads = d.coupled_reads;
  po.fetch.params_on_gpu = !d.params_on_nvme;
  po.fetch.gather_pool = window_pool;
  // Every parameter pool above holds param_buffers of its largest partition: a ring of that many
  // slots keeps the reads within it whatever the disk placement (fuyou-13b deadlocked without).
  po.fetch.slot_ring = d.params_on_nvme ? std::max(d.param_buffers, d.coupled_reads) : 0;
  po.gradient_path = d.gradient_path;
  po.grad_partition_buffer = d.grad_partition_buffer;
  po.grad_pool = grad_pool;
  po.grad_write_resource_of = [&](int32_t r, int32_t u) { return opt_write_io(r, unit_subgroup[u]); };
  po.block_bytes = d.block_bytes;
  po.queue_depth = d.queue_depth;
  po.cpu_threads = threads;
  po.chain_passes = true;
  PassResult passes = TrainingPasses(b, plan, po);

  int32_t norm_done = kNoIndex;
  if (d.global_norm_first) {
    std::vector<std::vector<int32_t>> norm_deps = passes.grad_copies;
    for (int32_t r = 0; r < ranks; ++r) norm_deps[r].push_back(passes.last_compute[r]);
    std::vector<int32_t> temporaries;
    for (int32_t r = 0; d.overflow_temporaries && r < ranks; ++r) {
      const int64_t bytes = plan.rank_elements * kOverflowTemporaryBytesPerElement;
      const int32_t pool = b.Pool("host.temp.r" + std::to_string(r), b.Host(r), bytes);
      temporaries.push_back(b.Buffer("overflow_check.r" + std::to_string(r), pool, bytes));
    }
    const int64_t grad_bytes = d.gradient_path == GradientPath::kKeepInHost ? 2 : 4;
    norm_done = GradientNorm(b, plan, norm_deps, threads, grad_bytes, temporaries);
  }

  std::vector<int32_t> step_tails, refreshes;
  std::vector<std::vector<int32_t>> param_done(ranks);
  for (int32_t r = 0; r < ranks; ++r) {
    SweepOptions so;
    so.rank = r;
    so.order = order;
    so.pipeline_read = d.pipeline_read;
    so.pipeline_write = d.pipeline_write;
    so.read_ahead = d.read_ahead_states;
    so.isolate_reads_first = d.isolate_reads_first;
    so.semi_async_writes = d.semi_async_writes;
    for (int32_t g = 0; g < nsub; ++g) {
      so.read_resource.push_back(opt_read_io(r, g));
      so.write_resource.push_back(opt_write_io(r, g));
      so.param_write_resource.push_back(d.params_on_nvme ? param_io(r, param_disk_of_subgroup(r, g)) : kNoIndex);
    }
    so.cached = cached;
    so.write_cached = d.write_cached;
    so.cache_pool = cache_pool[r];
    so.opt_pool = opt_pool[r];
    so.grads_on_nvme = d.gradient_path == GradientPath::kFlushToNvme;
    if (!so.grads_on_nvme) so.host_grad_buffer = passes.host_grad_buffer[r];
    if (d.global_norm_first) {
      so.first_deps = passes.grad_writes[r];
      so.first_deps.push_back(norm_done);
      so.pipelined_read_deps = {norm_done};
    } else {
      // Overlapped with backward: a sub-group starts when its own gradients are final.
      so.ready_deps = SubGroupGradientDeps(plan, passes.grad_ready[r]);
    }
    const bool chunked = d.params_on_nvme && d.p16_chunk_elements > 0;
    so.param_path = !d.params_on_nvme ? ParamUpdatePath::kToGpu
                    : chunked         ? ParamUpdatePath::kChunkedBlocking
                                      : ParamUpdatePath::kWrite;
    so.chunk_elements = d.p16_chunk_elements;
    so.adam_waits_param_write = chunked;
    so.states_after_params = chunked;
    so.param_pool = p16_pool[r];
    so.block_bytes = d.block_bytes;
    so.queue_depth = d.queue_depth;
    so.threads = threads;
    SweepResult sweep = OptimizerSweep(b, plan, so);
    step_tails.insert(step_tails.end(), sweep.tails.begin(), sweep.tails.end());
    refreshes.insert(refreshes.end(), sweep.resident_refreshes.begin(), sweep.resident_refreshes.end());
    param_done[r] = sweep.param_done;
  }
  step_end_spec.deps = step_tails;
  // Each rank refreshed its own part of the resident units; the step ends with them whole again.
  const int32_t gathered = GatherResident(b, plan, refreshes);
  if (gathered != kNoIndex) step_end_spec.deps.push_back(gathered);
  const int32_t step_end = b.Task(std::move(step_end_spec));
  for (int32_t c : passes.resident_computes) b.task(c).carried.push_back({step_end, 1});
  if (d.blocking_step || !d.params_on_nvme) {
    for (int32_t read : passes.reads) b.task(read).carried.push_back({step_end, 1});
    if (!d.params_on_nvme && !passes.gathers.empty()) b.task(passes.gathers.front()).carried.push_back({step_end, 1});
  } else {
    // Delayed write-back: a parameter read waits only for its own sub-groups' fp16 writes.
    // Delayed write-back: a read of the first forward pass waits for the fp16 write-back of
    // every sub-group of the units up to its own, so that reads become ready in fetch order
    // (otherwise a later unit's read could take the last pinned slot while an earlier one still
    // waits for its sub-group: a deadlock). Later passes wait for the whole step.
    std::vector<std::vector<bool>> needed(ranks, std::vector<bool>(nsub, false));
    for (size_t i = 0; i < passes.reads.size(); ++i) {
      TaskSpec& read = b.task(passes.reads[i]);
      if (i >= passes.first_forward_reads) {
        read.carried.push_back({step_end, 1});
        continue;
      }
      const auto [r, unit] = passes.read_rank_unit[i];
      for (int32_t g : SubGroupsOfUnit(plan, unit)) needed[r][g] = true;
      for (int32_t g = 0; g < nsub; ++g) {
        if (needed[r][g]) read.carried.push_back({param_done[r][g], 1});
      }
    }
  }

  return b.Finish();
}

}  // namespace tierflow::policies
