// zero-infinity: DeepSpeed ZeRO-3 with parameters and optimizer states on NVMe, as DeepSpeed
// actually schedules it (../shared/reference/offload-systems.md §1), weaknesses included:
//  - sub-groups of whole parameters, each closed once it holds sub_group_size elements;
//  - what DeepSpeed keeps off the disk: the parameters of the sub-groups that fit in
//    offload_param.max_in_cpu elements and every partition below the swap minimum
//    (max(1 MiB, aio.block_size)) stay in a pinned flat host buffer, the optimizer states of a
//    sub-group below it stay in host memory, and so does a gradient below it (or of such a
//    sub-group);
//  - one nvme_path: every rank's parameters, gradients and optimizer states on nvme0;
//  - offload_optimizer.device cpu (ZeRO-Offload): every sub-group's states, and its fp32
//    gradients, in host memory (none swapped), the update on the CPU as with nvme; with ratio
//    below 1 (ZeRO-Offload++) the first int((1 - ratio) * sub-groups) updated on the GPU, their
//    states kept there; device none: all of them (ZeRO-3 without optimizer offload). The
//    gradients of those still leave the GPU in the backward and come back for the update
//    (DeepSpeed keeps them on the card: docs/policies.md);
//  - parameter partitions read into `buffer_count` pinned slots of `buffer_size` elements each
//    (every slot sized for the largest partition), the read-ahead bounded by free slots;
//  - the all-gather of a parameter waits for ALL reads outstanding on the rank's aio handle;
//  - all-gathers issued one at a time in module order, no further ahead than
//    stage3_max_live_parameters elements gathered at once;
//  - a parameter used again within stage3_max_reuse_distance elements of the trace stays
//    gathered from its forward to its backward, which does not fetch it again (on small models,
//    every parameter); one on NVMe holds its swap buffer all the while, as it does from a
//    checkpointed layer's recompute to its backward, so DeepSpeed fails when more than
//    buffer_count are held at a swap-in, and so does the plan;
//  - backward: gradients reduced in buckets of reduce_bucket_size elements (a bucket issued when
//    the next gradient would overfill it, the rest after backward), each in partition_grads'
//    order on one thread, the backward waiting for it: the bucket's reduce-scatters, then per
//    unit the copy into the bf16 partition buffer (and the widening to fp32, where the GPU's
//    memory is host memory), then per unit the fp32 gradient into the pinned staging and an
//    async write to NVMe;
//  - step: gradient norm over all groups (after backward ends), then per sub-group in ascending
//    order: swap in states, swap in gradients, CPU Adam, fp16 copy and blocking parameter write,
//    swap out states — serial, or pipelined with pipeline_read / pipeline_write;
//  - step() is synchronous: the next iteration starts after the last write.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "blocks.h"
#include "tierflow/core/units.h"
#include "policies_internal.h"

namespace tierflow::policies {

StatusOr<ZeroInfinityKnobs> ReadZeroInfinityKnobs(const Scenario& s) {
  Knobs knobs = s.knobs;
  ZeroInfinityKnobs k;
  // DeepSpeed's names and defaults (offload_param, offload_optimizer, aio, zero_optimization).
  TF_ASSIGN_OR_RETURN(k.buffer_count, knobs.Int("buffer_count", k.buffer_count, 1, 65536));
  TF_ASSIGN_OR_RETURN(k.buffer_size, knobs.Int("buffer_size", k.buffer_size, 1, int64_t{1} << 40));
  TF_ASSIGN_OR_RETURN(k.optimizer_buffer_count, knobs.Int("optimizer_buffer_count", k.optimizer_buffer_count, 1, 65536));
  TF_ASSIGN_OR_RETURN(k.pipeline_read, knobs.Bool("pipeline_read", k.pipeline_read));
  TF_ASSIGN_OR_RETURN(k.pipeline_write, knobs.Bool("pipeline_write", k.pipeline_write));
  TF_ASSIGN_OR_RETURN(k.sub_group_size, knobs.Int("sub_group_size", k.sub_group_size, 1, int64_t{1} << 40));
  TF_ASSIGN_OR_RETURN(k.block_size, knobs.Bytes("block_size", k.block_size));
  TF_ASSIGN_OR_RETURN(k.queue_depth, knobs.Int("queue_depth", k.queue_depth, 1, 4096));
  TF_ASSIGN_OR_RETURN(k.persistence, knobs.Int("param_persistence_threshold", k.persistence, 0, int64_t{1} << 40));
  TF_ASSIGN_OR_RETURN(k.cpu_threads, knobs.Int("cpu_threads", k.cpu_threads, 0, 1024));
  TF_ASSIGN_OR_RETURN(const std::string offload_param, knobs.String("offload_param", "nvme", {"nvme", "none"}));
  k.params_on_nvme = offload_param == "nvme";
  TF_ASSIGN_OR_RETURN(const std::string offload_optimizer, knobs.String("offload_optimizer", "nvme", {"nvme", "cpu", "none"}));
  k.states_on_nvme = offload_optimizer == "nvme";
  TF_ASSIGN_OR_RETURN(const double ratio, knobs.Number("ratio", 1.0));
  if (!(ratio >= 0 && ratio <= 1)) return InvalidArgument("policy.ratio " + Shortest(ratio) + ": the share of the states updated on the CPU is in [0, 1]");
  if (ratio != 1 && offload_optimizer != "cpu") {
    return InvalidArgument("policy.ratio " + Shortest(ratio) + ": a share of the update on the CPU (ZeRO-Offload++) needs offload_optimizer: cpu, not " +
                           offload_optimizer);
  }
  k.states_on_gpu = offload_optimizer == "none";
  k.ratio = ratio;
  TF_ASSIGN_OR_RETURN(k.max_in_cpu, knobs.Int("max_in_cpu", k.max_in_cpu, 0, int64_t{1} << 50));
  TF_ASSIGN_OR_RETURN(k.reduce_bucket_size, knobs.Int("reduce_bucket_size", k.reduce_bucket_size, 1, int64_t{1} << 50));
  TF_ASSIGN_OR_RETURN(k.max_live_parameters, knobs.Int("max_live_parameters", k.max_live_parameters, 1, int64_t{1} << 50));
  TF_ASSIGN_OR_RETURN(k.max_reuse_distance, knobs.Int("max_reuse_distance", k.max_reuse_distance, 0, int64_t{1} << 50));
  TF_ASSIGN_OR_RETURN(k.pin_rounding, knobs.Bool("pin_memory_rounding", k.pin_rounding));
  TF_ASSIGN_OR_RETURN(k.overflow_temporaries, knobs.Bool("overflow_check_temporaries", k.overflow_temporaries));
  TF_RETURN_IF_ERROR(knobs.Finish("zero-infinity"));
  if (k.overflow_temporaries) TF_RETURN_IF_ERROR(UnfusedOverflowCheckNeedsFp16(s, "policy.overflow_check_temporaries"));
  if (k.block_size < 1) return InvalidArgument("policy.block_size must be > 0");
  return k;
}

DeepSpeedPlacement PlaceLikeDeepSpeed(const ModelPlan& plan, const ZeroInfinityKnobs& k) {
  DeepSpeedPlacement p;
  const size_t nunits = plan.units.size(), nsub = plan.subgroups.size();
  if (nsub == 0) return p;  // a model of no parameters
  p.param_in_host.assign(nunits, false);
  p.grad_in_host.assign(nunits, false);
  p.states_in_host.assign(nsub, false);
  // The swap minimum of both swappers (partitioned_param_swapper.py, optimizer_utils.py).
  const int64_t min_aio_bytes = std::max<int64_t>(int64_t{1} << 20, k.block_size);
  // The fp32 gradient's part that is a multiple of the swapper's alignment (1024 bytes per aio
  // thread, one thread here) is swapped when large enough; the remainder stays in memory
  // (_adjust_for_misaligned_lengths). tierflow writes the remainder with the rest.
  const int64_t grad_alignment = 1024 / 4;
  // The flat pinned buffer of offload_param's parameters in host memory: the whole partition,
  // or max_in_cpu elements of it (_create_param_groups_fp16_flat_cpu_memory); a sub-group whose
  // end is within it keeps its parameters there (_create_fp16_partitions_with_defragmentation).
  const int64_t flat_cpu = std::min(plan.rank_elements, k.max_in_cpu);
  // DeepSpeed's sub-groups are whole units in order (SubGroupRule::kDeepSpeed): one walk finds
  // each unit's.
  std::vector<size_t> group_of(nunits, 0);
  for (size_t u = 0, g = 0; u < nunits; ++u) {
    while (g + 1 < nsub && plan.units[u].rank_offset >= plan.subgroups[g].begin + plan.subgroups[g].elements) ++g;
    group_of[u] = g;
  }
  // The first int((1 - ratio) * sub-groups) on the GPU (stage3.py's subgroup_to_device); the
  // rest swapped (_swappable_optimizer_subgroup) or, with offload_optimizer cpu, in host memory.
  p.states_on_gpu.assign(nsub, false);
  const size_t on_gpu = static_cast<size_t>(k.GpuShare() * static_cast<double>(nsub));
  for (size_t g = 0; g < nsub; ++g) {
    p.states_on_gpu[g] = g < on_gpu;
    p.states_in_host[g] = !p.states_on_gpu[g] && (!k.states_on_nvme || plan.subgroups[g].elements * 4 < min_aio_bytes);
    if (p.states_in_host[g]) p.host_state_elements += plan.subgroups[g].elements;
  }
  // A sub-group's gradients are read back as one piece: they stay in host memory only if every
  // one of its parameters' would (DeepSpeed reads the swapped ones and copies the others; a
  // sub-group that mixes both has all of its gradients written here, the difference
  // docs/policies.md states).
  p.subgroup_grads_in_host.assign(nsub, true);
  int64_t param_end = 0, grad_end = 0;
  for (size_t u = 0; u < nunits; ++u) {
    const ParamUnit& unit = plan.units[u];
    const SubGroup& sg = plan.subgroups[group_of[u]];
    if (!unit.gpu_resident && (sg.begin + sg.elements <= flat_cpu || unit.rank_elements * 2 < min_aio_bytes)) {
      p.param_in_host[u] = true;
      param_end = std::max(param_end, unit.rank_offset + unit.rank_elements);
    }
    const int64_t swapped = unit.rank_elements / grad_alignment * grad_alignment;
    if (!p.states_in_host[group_of[u]] && !p.states_on_gpu[group_of[u]] && swapped * 4 >= min_aio_bytes) p.subgroup_grads_in_host[group_of[u]] = false;
  }
  for (size_t u = 0; u < nunits; ++u) {
    p.grad_in_host[u] = p.subgroup_grads_in_host[group_of[u]];
    if (p.grad_in_host[u]) grad_end = std::max(grad_end, plan.units[u].rank_offset + plan.units[u].rank_elements);
  }
  p.host_param_elements = param_end;
  p.host_grad_elements = grad_end;
  return p;
}

namespace {

// DeepSpeed's trace of one micro-step's module uses (PartitionedParameterCoordinator's, complete
// from the second iteration, started again at each forward), as DeepSpeed 0.19.8 records it for a
// Hugging Face model: the forward, then per layer from the last its backward in reverse; a
// checkpointed decoder layer's backward starts with its last module (the backward hook of the
// layer's output fetches it), then the layer's recompute (its units in forward order: the
// recompute goes through the same fetch hooks), then the rest in reverse. After a use,
// DeepSpeed releases the unit's parameters unless they recur before stage3_max_reuse_distance
// elements of the uses after it have been traversed (__params_to_release: every use's full
// elements count, persistent units' too, and a use is looked at only while fewer have been):
// `gap` is the elements between a use and the unit's next one (-1: none), and the unit stays
// gathered when 0 <= gap < distance.
struct TraceUse {
  int32_t unit = 0;
  int64_t gap = -1;
};
std::vector<TraceUse> DeepSpeedTrace(const ModelPlan& plan, bool checkpointing) {
  const size_t n = plan.units.size();
  std::vector<TraceUse> trace;
  for (size_t u = 0; u < n; ++u) trace.push_back({static_cast<int32_t>(u), -1});
  const int32_t head_layer = n == 0 ? -1 : plan.units.back().layer;
  for (size_t end = n; end > 0;) {
    size_t begin = end - 1;
    while (begin > 0 && plan.units[begin - 1].layer == plan.units[end - 1].layer) --begin;
    const int32_t layer = plan.units[begin].layer;
    size_t backward_end = end;  // the units the backward's uses in reverse start from
    if (checkpointing && layer > 0 && layer < head_layer) {
      // The layer's last module (its units: one name up to the last '.') is fetched first, by
      // the backward hook of the layer's output, then the whole layer for its recompute, and the
      // backward goes on from the module before it.
      const auto module = [&](size_t u) { return plan.units[u].name.substr(0, plan.units[u].name.rfind('.')); };
      size_t last = end - 1;
      while (last > begin && module(last - 1) == module(end - 1)) --last;
      for (size_t u = last; u < end; ++u) trace.push_back({static_cast<int32_t>(u), -1});
      for (size_t u = begin; u < end; ++u) trace.push_back({static_cast<int32_t>(u), -1});
      backward_end = last;
    }
    for (size_t u = backward_end; u > begin; --u) trace.push_back({static_cast<int32_t>(u - 1), -1});
    end = begin;
  }
  // Each use's gap to the unit's next use: the elements of the uses between, from prefix sums.
  std::vector<int64_t> before(trace.size() + 1, 0);
  for (size_t i = 0; i < trace.size(); ++i) before[i + 1] = before[i] + plan.units[static_cast<size_t>(trace[i].unit)].elements;
  std::vector<size_t> next_use(n, SIZE_MAX);
  for (size_t i = trace.size(); i > 0; --i) {
    TraceUse& use = trace[i - 1];
    const size_t next = next_use[static_cast<size_t>(use.unit)];
    if (next != SIZE_MAX) use.gap = before[next] - before[i];
    next_use[static_cast<size_t>(use.unit)] = i - 1;
  }
  return trace;
}

// DeepSpeed's parameter swapper (PartitionedParamSwapper) holds a parameter's swap buffer from its
// swap-in until the parameter is released (_partition_param calls
// remove_partition_and_release_buffers). Along the trace, with the units `on_nvme` and the reuse
// distance: the most buffers held at a swap-in, that one's included, and the first use where so.
struct SwapBuffers {
  int64_t held = 0;
  size_t at = 0;
};
SwapBuffers SwapBuffersNeeded(const std::vector<TraceUse>& trace, const std::vector<bool>& on_nvme, int64_t distance) {
  SwapBuffers most;
  std::vector<bool> held(on_nvme.size(), false);
  int64_t holding = 0;
  for (size_t i = 0; i < trace.size(); ++i) {
    const size_t u = static_cast<size_t>(trace[i].unit);
    if (!on_nvme[u]) continue;
    if (!held[u]) {
      held[u] = true;
      if (++holding > most.held) most = {holding, i};
    }
    if (trace[i].gap < 0 || trace[i].gap >= distance) {  // released after this use
      held[u] = false;
      --holding;
    }
  }
  return most;
}

// DeepSpeed's own refusals of a parameter placement, before anything is planned: a partition
// larger than its swap buffer; more swap buffers held at once than it has (its swapper holds a
// parameter's buffer until the parameter is released, and a swap-in with every buffer held fails:
// PartitionedParamSwapper.swap_in asserts).
Status CheckParameterSwap(const ModelPlan& plan, const ZeroInfinityKnobs& knobs, const DeepSpeedPlacement& place,
                          const std::vector<TraceUse>& trace) {
  if (!knobs.params_on_nvme) return Status::Ok();
  const int64_t buffer_count = knobs.buffer_count, buffer_size = knobs.buffer_size;
  for (size_t i = 0; i < plan.units.size(); ++i) {
    const ParamUnit& u = plan.units[i];
    if (!u.gpu_resident && !place.param_in_host[i] && u.rank_elements > buffer_size) {
      // DeepSpeed asserts here too; users raise buffer_size and pay for it in every slot.
      return InvalidArgument("policy.buffer_size: the partition of '" + u.name + "' has " +
                             std::to_string(u.rank_elements) + " elements, more than buffer_size " +
                             std::to_string(buffer_size) + " (raise policy.buffer_size to at least " +
                             std::to_string(u.rank_elements) + ")");
    }
  }
  std::vector<bool> on_nvme(plan.units.size(), false);
  for (size_t i = 0; i < plan.units.size(); ++i) on_nvme[i] = !plan.units[i].gpu_resident && !place.param_in_host[i];
  const SwapBuffers need = SwapBuffersNeeded(trace, on_nvme, knobs.max_reuse_distance);
  if (need.held > buffer_count) {
    // The largest distance at which they fit: the swapper's need only grows with the distance,
    // and changes where it passes a use's gap.
    std::vector<int64_t> gaps;
    for (const TraceUse& use : trace) {
      if (on_nvme[static_cast<size_t>(use.unit)] && use.gap >= 0 && use.gap < knobs.max_reuse_distance) gaps.push_back(use.gap);
    }
    std::sort(gaps.begin(), gaps.end());
    gaps.erase(std::unique(gaps.begin(), gaps.end()), gaps.end());
    const auto too_many = std::partition_point(gaps.begin(), gaps.end(), [&](int64_t gap) {
      return SwapBuffersNeeded(trace, on_nvme, gap + 1).held <= buffer_count;
    });
    // Not past the end: at the largest gap below the distance the need is the distance's own.
    TF_CHECK(too_many != gaps.end());
    const TraceUse& at = trace[need.at];
    return InvalidArgument("policy.buffer_count: DeepSpeed's parameter swapper needs " + std::to_string(need.held) + " swap buffers at once, and has " +
                           std::to_string(buffer_count) + ". A parameter on NVMe holds its buffer until it is released, and DeepSpeed keeps it gathered " +
                           "while it is used again within policy.max_reuse_distance (" + std::to_string(knobs.max_reuse_distance) + " elements): at the swap-in of '" +
                           plan.units[static_cast<size_t>(at.unit)].name + "' in the " + (need.at < plan.units.size() ? "forward" : "backward") + ", " +
                           std::to_string(need.held - 1) + " are held, and it fails (DeepSpeed: 'Not enough buffers 0 for swapping 1'). Raise policy.buffer_count to at least " +
                           std::to_string(need.held) + ", or lower policy.max_reuse_distance to at most " + std::to_string(*too_many));
  }
  return Status::Ok();
}

// What DeepSpeed keeps off the disk is said, not left for a user to find in an I/O-free run
// (policy.sub_group_size=1 makes every sub-group one small parameter).
void NoteWhatStaysInHost(ScheduleBuilder& b, const ModelPlan& plan, const ZeroInfinityKnobs& knobs, const DeepSpeedPlacement& place,
                         int64_t max_subgroup) {
  const int64_t swap_minimum = std::max<int64_t>(int64_t{1} << 20, knobs.block_size);
  if (knobs.states_on_nvme && std::none_of(place.states_in_host.begin(), place.states_in_host.end(), [](bool in_host) { return !in_host; })) {
    b.Meta("note.optimizer_states", "no optimizer state goes to NVMe: DeepSpeed swaps a sub-group's states only when they take at least " +
                       FormatBytes(static_cast<double>(swap_minimum)) + " (its swap minimum, or policy.block_size), and every sub-group here is " +
                       "smaller (at most " + std::to_string(max_subgroup) + " elements, policy.sub_group_size " + std::to_string(knobs.sub_group_size) +
                       "), so DeepSpeed keeps them all in host memory, and so does this schedule");
  }
  bool params_to_nvme = false;
  for (size_t i = 0; i < plan.units.size(); ++i) params_to_nvme |= knobs.params_on_nvme && !plan.units[i].gpu_resident && !place.param_in_host[i];
  if (knobs.params_on_nvme && !params_to_nvme) {
    b.Meta("note.parameters", "no parameter goes to NVMe: every partition is within policy.max_in_cpu or under DeepSpeed's swap minimum of " +
                       FormatBytes(static_cast<double>(swap_minimum)) + ", so DeepSpeed keeps them in host memory, and so does this schedule");
  }
}

// Per rank: the aio handles (param swapper; optimizer read and write), the pinned pools, what
// DeepSpeed keeps in host memory (PlaceLikeDeepSpeed: the pinned flat buffer of the parameters
// kept there, the gradients it does not swap, the states of sub-groups it does not).
struct RankResources {
  std::vector<int32_t> param_io, opt_read, opt_write, param_pool, opt_pool, host_params, host_grads, host_states, gpu_pool;
};

RankResources MakeRankResources(ScheduleBuilder& b, const ModelPlan& plan, const ZeroInfinityKnobs& knobs, const DeepSpeedPlacement& place,
                                int64_t max_subgroup) {
  const int32_t ranks = plan.ranks;
  const bool params_on_nvme = knobs.params_on_nvme, pin_rounding = knobs.pin_rounding;
  RankResources x;
  x.param_io.resize(ranks);
  x.opt_read.assign(ranks, kNoIndex);
  x.opt_write.assign(ranks, kNoIndex);
  x.param_pool.resize(ranks);
  x.opt_pool.resize(ranks);
  x.host_params.assign(ranks, kNoIndex);
  x.host_grads.assign(ranks, kNoIndex);
  x.host_states.assign(ranks, kNoIndex);
  const int32_t opt_slots = static_cast<int32_t>(
      std::max<int64_t>(knobs.optimizer_buffer_count, (knobs.pipeline_read || knobs.pipeline_write) ? 12 : 4));
  for (int32_t r = 0; r < ranks; ++r) {
    const std::string R = ".r" + std::to_string(r);
    if (params_on_nvme || knobs.states_on_nvme) {  // without either, no disk at all
      const std::string nvme = b.Nvme(r, 0);  // DeepSpeed's nvme_path: the rank's node's first disk
      if (params_on_nvme) x.param_io[r] = b.Resource(nvme + R + ".param", nvme);
      x.opt_read[r] = b.Resource(nvme + R + ".opt_read", nvme);
      x.opt_write[r] = b.Resource(nvme + R + ".opt_write", nvme);
    }
    x.param_pool[r] = params_on_nvme ? PinnedPool(b, r, "host.pinned.param" + R, knobs.buffer_count * knobs.buffer_size * 2, pin_rounding)
                                     : PinnedPool(b, r, "host.pinned.p16" + R, 2 * max_subgroup * 2, pin_rounding);
    x.opt_pool[r] = PinnedPool(b, r, "host.pinned.opt" + R, opt_slots * max_subgroup * 4, pin_rounding);
    if (params_on_nvme && place.host_param_elements > 0) {
      const int32_t pool = PinnedPool(b, r, "host.pinned.p16flat" + R, place.host_param_elements * 2, pin_rounding);
      x.host_params[r] = b.Buffer("p16.host" + R, pool, place.host_param_elements * 2, /*persistent=*/true);
    }
    if (place.host_grad_elements > 0) {
      const int32_t pool = b.Pool("host.grad" + R, b.Host(r), place.host_grad_elements * 4);
      x.host_grads[r] = b.Buffer("grad.host" + R, pool, place.host_grad_elements * 4, /*persistent=*/true);
    }
    if (place.host_state_elements > 0) x.host_states[r] = b.Pool("host.states" + R, b.Host(r), place.host_state_elements * 12);
    b.Buffer("gpu.resident" + R, b.GpuPool(r), plan.gpu_resident_bytes, /*persistent=*/true);
    // Without offload_param the rank's fp16 partition lives on its GPU.
    if (!params_on_nvme) b.Buffer("gpu.partition" + R, b.GpuPool(r), plan.rank_elements * 2, /*persistent=*/true);
    b.GpuCompute(r);
    x.gpu_pool.push_back(b.GpuPool(r));
  }
  return x;
}

// DeepSpeed's forward and backward: the swapper's reads, the reuse distance, the reduce bucket,
// the gradients flushed to NVMe (or kept where DeepSpeed keeps them).
PassOptions ZeroPassOptions(const Scenario& s, const ZeroInfinityKnobs& knobs, const DeepSpeedPlacement& place, const RankResources& x,
                            std::vector<bool> kept, int32_t threads) {
  const bool params_on_nvme = knobs.params_on_nvme;
  PassOptions po;
  po.fetch.slot_pool = x.param_pool;
  po.fetch.slot_bytes = knobs.buffer_size * 2;
  po.fetch.read_resource = x.param_io;
  po.fetch.block_bytes = knobs.block_size;
  po.fetch.queue_depth = static_cast<int32_t>(knobs.queue_depth);
  po.fetch.coupled_reads = static_cast<int32_t>(knobs.buffer_count);
  po.fetch.params_on_gpu = !params_on_nvme;
  po.gradient_path = GradientPath::kFlushToNvme;
  po.grad_pool = x.opt_pool;
  po.grad_write_resource = x.opt_write;
  po.block_bytes = knobs.block_size;
  po.queue_depth = static_cast<int32_t>(knobs.queue_depth);
  po.cpu_threads = threads;
  po.reduce_bucket_elements = knobs.reduce_bucket_size;
  po.max_live_elements = knobs.max_live_parameters;
  po.kept_for_backward = std::move(kept);
  po.grad_partition_buffer = true;  // grad_partitions_flat_buffer
  po.deepspeed_epilogue = true;     // partition_grads, then swap_out_gradients
  po.device_memory_is_host = s.hardware.node.gpu.shares_host_cores;
  po.chain_passes = !params_on_nvme;  // gathers bounded only by HBM: keep passes in order
  if (params_on_nvme && place.host_param_elements > 0) {
    po.fetch.in_host = place.param_in_host;
    po.fetch.host_param_buffer = x.host_params;
  }
  if (place.host_grad_elements > 0) {
    po.grad_in_host = place.grad_in_host;
    po.host_grad_buffer = x.host_grads;
  }
  return po;
}

// Rank r's step: DeepSpeed's optimizer swapper over the sub-groups in ascending order.
SweepOptions ZeroSweepOptions(const ModelPlan& plan, const ZeroInfinityKnobs& knobs, const DeepSpeedPlacement& place, const RankResources& x,
                              const PassResult& passes, int32_t norm_done, int32_t threads, int32_t r) {
  const int32_t nsub = static_cast<int32_t>(plan.subgroups.size());
  const bool params_on_nvme = knobs.params_on_nvme;
  SweepOptions so;
  so.rank = r;
  for (int32_t g = 0; g < nsub; ++g) so.order.push_back(g);  // ascending, as DeepSpeed
  so.pipeline_read = knobs.pipeline_read;
  so.pipeline_write = knobs.pipeline_write;
  so.read_resource.assign(nsub, x.opt_read[r]);
  so.write_resource.assign(nsub, x.opt_write[r]);
  so.opt_pool = x.opt_pool[r];
  // Gradients are flushed at the first swap-in of the step.
  so.first_deps = passes.grad_writes[r];
  so.first_deps.push_back(norm_done);
  so.pipelined_read_deps = {norm_done};
  so.param_path = params_on_nvme ? ParamUpdatePath::kChunkedBlocking : ParamUpdatePath::kToGpu;
  so.param_pool = x.param_pool[r];
  so.chunk_elements = knobs.buffer_size;
  so.param_write_resource.assign(nsub, x.param_io[r]);
  so.block_bytes = knobs.block_size;
  so.queue_depth = static_cast<int32_t>(knobs.queue_depth);
  so.threads = threads;
  if (place.host_state_elements > 0) {
    so.cached = place.states_in_host;  // never read nor written
    so.cache_pool = x.host_states[r];
  }
  if (knobs.GpuShare() > 0) {
    so.on_gpu = place.states_on_gpu;
    so.gpu_pool = x.gpu_pool[r];
  }
  if (place.host_grad_elements > 0) {
    so.grads_in_host32 = place.subgroup_grads_in_host;
    so.host_grad32_buffer = x.host_grads[r];
  }
  if (params_on_nvme && place.host_param_elements > 0) {
    so.param_in_host = place.param_in_host;
    so.host_param_buffer = x.host_params[r];
  }
  return so;
}

}  // namespace

StatusOr<Schedule> PlanZeroInfinity(const Scenario& s) {
  TF_ASSIGN_OR_RETURN(const ZeroInfinityKnobs knobs, ReadZeroInfinityKnobs(s));
  if (s.hardware.node.nvme.empty() && (knobs.params_on_nvme || knobs.states_on_nvme)) {
    return InvalidArgument("hardware has no NVMe device for zero-infinity's nvme_path (offload_param and offload_optimizer cpu or none need none)");
  }
  if (knobs.GpuShare() > 0 && knobs.params_on_nvme) {
    return InvalidArgument("policy.offload_optimizer: an update on the GPU (offload_optimizer none, or cpu with ratio below 1) refreshes its "
                           "sub-group's bf16 parameters in place, on the GPU, but offload_param is nvme: not planned yet; set offload_param: none");
  }
  TF_ASSIGN_OR_RETURN(ModelPlan plan, MakeModelPlan(s, knobs.sub_group_size, knobs.persistence, SubGroupRule::kDeepSpeed));
  const int32_t ranks = plan.ranks;
  const DeepSpeedPlacement place = PlaceLikeDeepSpeed(plan, knobs);
  // DeepSpeed's reuse distance, over its trace (which starts with the forward, unit by unit):
  // the units each forward keeps gathered for its backward.
  const std::vector<TraceUse> trace = DeepSpeedTrace(plan, s.training.activation_checkpointing);
  TF_RETURN_IF_ERROR(CheckParameterSwap(plan, knobs, place, trace));
  std::vector<bool> kept(plan.units.size(), false);
  for (size_t u = 0; u < kept.size(); ++u) kept[u] = trace[u].gap >= 0 && trace[u].gap < knobs.max_reuse_distance;
  const int32_t threads = static_cast<int32_t>(
      knobs.cpu_threads > 0 ? knobs.cpu_threads : std::max<int64_t>(1, s.hardware.node.cpu.cores / RanksPerNode(s, ranks)));
  int64_t max_subgroup = 0;
  for (const SubGroup& g : plan.subgroups) max_subgroup = std::max(max_subgroup, g.elements);

  ScheduleBuilder b(s, "zero-infinity");
  for (const auto& [k, v] : s.knobs.values()) b.Meta("policy." + k, v);
  NoteWhatStaysInHost(b, plan, knobs, place, max_subgroup);
  const RankResources x = MakeRankResources(b, plan, knobs, place, max_subgroup);
  TF_RETURN_IF_ERROR(CheckStatesFitGpu(b, plan, place.states_on_gpu, /*params_off_gpu=*/false, "policy.offload_optimizer"));
  const PassResult passes = TrainingPasses(b, plan, ZeroPassOptions(s, knobs, place, x, std::move(kept), threads));

  // Step. The global gradient norm needs every rank's gradients: backward must end first.
  std::vector<std::vector<int32_t>> norm_deps = passes.grad_copies;
  for (int32_t r = 0; r < ranks; ++r) norm_deps[r].push_back(passes.last_compute[r]);
  std::vector<int32_t> temporaries;
  for (int32_t r = 0; knobs.overflow_temporaries && r < ranks; ++r) {
    const int64_t bytes = plan.rank_elements * kOverflowTemporaryBytesPerElement;
    const int32_t pool = b.Pool("host.temp.r" + std::to_string(r), b.Host(r), bytes);
    temporaries.push_back(b.Buffer("overflow_check.r" + std::to_string(r), pool, bytes));
  }
  const int32_t norm_done = GradientNorm(b, plan, norm_deps, threads, 4, temporaries);
  std::vector<int32_t> step_tails, refreshes;
  for (int32_t r = 0; r < ranks; ++r) {
    const SweepResult sweep = OptimizerSweep(b, plan, ZeroSweepOptions(plan, knobs, place, x, passes, norm_done, threads, r));
    step_tails.insert(step_tails.end(), sweep.tails.begin(), sweep.tails.end());
    refreshes.insert(refreshes.end(), sweep.resident_refreshes.begin(), sweep.resident_refreshes.end());
  }
  // The next iteration's reads wait for the step's end (step() is blocking).
  const int32_t step_end = StepEnd(b, plan, passes, step_tails, refreshes);
  for (int32_t read : passes.reads) b.task(read).carried.push_back({step_end, 1});
  for (int32_t h : passes.host_fetches) b.task(h).carried.push_back({step_end, 1});
  // Without parameter offload nothing is read: the first all-gather waits for the step instead.
  if (!knobs.params_on_nvme && !passes.gathers.empty()) b.task(passes.gathers.front()).carried.push_back({step_end, 1});

  return b.Finish();
}

// What a DeepSpeed user can change without touching DeepSpeed: the swap buffers, the
// optimizer pipelining, the sub-group size and the aio request shape.
std::vector<KnobChoice> ZeroInfinityTunableKnobs(const Scenario&) {
  return {{"buffer_count", {"3", "5", "8"}},
          {"pipeline_read", {"false", "true"}},
          {"pipeline_write", {"false", "true"}},
          {"sub_group_size", {"1e8", "5e8", "1e9"}},
          {"block_size", {"1 MiB", "8 MiB"}},
          {"queue_depth", {"8", "32", "128"}}};
}

}  // namespace tierflow::policies
