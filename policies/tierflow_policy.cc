// tierflow: our own design, combining what helps in the others, every choice a knob for
// `tierflow tune`:
//  - per-request completion: a gather waits only for its own reads (IOC);
//  - exact-size, per-class pinned pools without rounding and a fused overflow check (MemAscend);
//  - the update pipelined with read/write isolation on a device-wide queue per disk, semi-
//    asynchronous write-back of states and fp16 parameters (IOC);
//  - the states read ahead of the update as far as the optimizer's pinned buffers admit, during
//    the forward and backward passes;
//  - every NVMe disk striped (or split), a remote tier for every ratio-th sub-group when the
//    hardware has one, one reader and one writer per tier (MLP-Offload);
//  - bf16 gradients kept in host memory (MLP-Offload, Fuyou) and, optionally, the optimizer
//    overlapped with backward, last sub-group first (HiTrain, Fuyou);
//  - cached sub-groups (MLP-Offload) and an optional GPU prefetch window (Fuyou);
//  - the optimizer split per sub-group: the first gpu_sub_groups updated on the GPU, their states
//    kept there (Deep Optimizer States, ZeRO-Offload++), the last cached_sub_groups in host
//    memory, the rest on NVMe.
#include "offload_design.h"
#include "policies_internal.h"

namespace tierflow::policies {

StatusOr<Schedule> PlanTierflow(const Scenario& s) {
  Knobs knobs = s.knobs;
  OffloadDesign d;
  d.policy = "tierflow";
  d.optimizer_buffers = 12;
  d.queue_depth = 32;
  TF_RETURN_IF_ERROR(ReadCommonKnobs(knobs, &d));
  TF_ASSIGN_OR_RETURN(const int64_t disks, knobs.Int("disks", 0, 0, 1024));
  TF_ASSIGN_OR_RETURN(const std::string layout, knobs.String("disk_layout", "stripe", {"stripe", "split"}));
  TF_ASSIGN_OR_RETURN(const int64_t ratio, knobs.Int("ratio", s.hardware.node.remote.empty() ? 0 : 3, 0, 1024));
  TF_ASSIGN_OR_RETURN(const int64_t cached, knobs.Int("cached_sub_groups", 0, 0, INT32_MAX));
  TF_ASSIGN_OR_RETURN(const bool overlap, knobs.Bool("overlap_optimizer", false));
  TF_ASSIGN_OR_RETURN(const bool host_grads, knobs.Bool("host_gradients", true));
  TF_ASSIGN_OR_RETURN(const bool isolate, knobs.Bool("isolate_reads", true));
  TF_ASSIGN_OR_RETURN(const bool locks, knobs.Bool("tier_locks", false));
  TF_ASSIGN_OR_RETURN(const bool semi_async, knobs.Bool("semi_async_writeback", true));
  TF_ASSIGN_OR_RETURN(d.read_ahead_states, knobs.Bool("read_ahead", true));
  TF_ASSIGN_OR_RETURN(d.gpu_window_bytes, knobs.Bytes("prefetch_window", 0));
  TF_ASSIGN_OR_RETURN(const std::string offload_param, knobs.String("offload_param", "nvme", {"nvme", "none"}));
  TF_RETURN_IF_ERROR(knobs.Finish("tierflow"));
  const int32_t have = static_cast<int32_t>(s.hardware.node.nvme.size());
  const int32_t use = disks == 0 ? have : static_cast<int32_t>(disks);
  if (use > have) {
    return InvalidArgument("policy.disks: " + std::to_string(use) + " disks asked, the hardware has " + std::to_string(have));
  }
  d.params_on_nvme = offload_param == "nvme";
  d.class_pools = true;
  d.slot_elements = 0;
  d.coupled_reads = 1;
  d.pipeline_read = d.pipeline_write = true;
  d.isolate_reads_first = isolate;
  d.shared_rw_queue = isolate;
  // On NVMe, isolation's device-wide queue already serialises every rank (it takes precedence in
  // PlanDesign); the locks still order the remote tier, which isolation does not cover.
  d.tier_locks = locks;
  d.semi_async_writes = semi_async;
  d.blocking_step = !semi_async;
  d.remote_ratio = static_cast<int32_t>(ratio);
  d.cached_per_path = static_cast<int32_t>(cached);
  d.gradient_path = host_grads ? GradientPath::kKeepInHost : GradientPath::kFlushToNvme;
  d.global_norm_first = !overlap;
  d.descending_order = overlap;
  TF_RETURN_IF_ERROR(PlaceOnDisks(layout, use, &d));
  return PlanDesign(s, d);
}

std::vector<KnobChoice> TierflowTunableKnobs(const Scenario& s) {
  std::vector<KnobChoice> k = {{"buffer_count", {"3", "5", "8"}},
                               {"optimizer_buffer_count", {"8", "12", "24"}},
                               {"sub_group_size", {"1e8", "5e8", "1e9"}},
                               {"queue_depth", {"8", "32", "128"}},
                               {"overlap_optimizer", {"false", "true"}},
                               {"read_ahead", {"false", "true"}},
                               {"host_gradients", {"false", "true"}},
                               {"isolate_reads", {"false", "true"}},
                               {"cached_sub_groups", {"0", "2", "4", "8"}},
                               {"prefetch_window", {"0 B", "4 GiB"}},
                               {"offload_param", {"nvme", "none"}},  // none: fp16 partitions stay in GPU memory
                               {"gpu_sub_groups", {"0", "1", "4", "all"}}};  // updated on the GPU, states kept there
  const size_t disks = s.hardware.node.nvme.size();
  if (disks > 1) {
    KnobChoice d{"disks", {}};
    for (size_t i = 1; i <= disks; ++i) d.values.push_back(std::to_string(i));
    k.push_back(d);
    k.push_back({"disk_layout", {"stripe", "split"}});
  }
  if (!s.hardware.node.remote.empty()) k.push_back({"ratio", {"0", "2", "3", "4"}});
  if (s.training.data_parallel > 1) k.push_back({"tier_locks", {"false", "true"}});
  return k;
}

}  // namespace tierflow::policies
