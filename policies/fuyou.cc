// fuyou: Fuyou / LoHan (../shared/reference/offload-systems.md §7): one GPU and several SSDs,
//  - a FIFO prefetcher whose window is spare GPU memory: gathered parameters live in a GPU
//    pool of prefetch_window bytes, which bounds how far fetches run ahead;
//  - synchronous out-of-core CPU Adam overlapped with backward: each sub-group is updated once
//    its gradients are final, last sub-group first;
//  - delayed write-back: the step does not wait for state and parameter writes; the next read
//    of a sub-group or parameter waits for its own write;
//  - every tensor on the SSDs, striped over all of them; gradients kept in host memory.
// Not modelled: activation offload to SSD and the profiling step (docs/policies.md).
#include "offload_design.h"
#include "policies_internal.h"

namespace tierflow::policies {

StatusOr<Schedule> PlanFuyou(const Scenario& s) {
  Knobs knobs = s.knobs;
  OffloadDesign d;
  d.policy = "fuyou";
  d.optimizer_buffers = 12;
  TF_RETURN_IF_ERROR(ReadCommonKnobs(knobs, &d));
  TF_ASSIGN_OR_RETURN(d.gpu_window_bytes, knobs.Bytes("prefetch_window", int64_t{4} << 30));
  TF_ASSIGN_OR_RETURN(const bool overlap, knobs.Bool("overlap_optimizer", true));
  TF_ASSIGN_OR_RETURN(const bool delayed, knobs.Bool("delayed_writeback", true));
  TF_RETURN_IF_ERROR(knobs.Finish("fuyou"));
  if (s.training.data_parallel != 1) {
    return InvalidArgument("fuyou trains on one GPU: set training.data_parallel: 1 (got " +
                           std::to_string(s.training.data_parallel) + ")");
  }
  d.gradient_path = GradientPath::kKeepInHost;
  d.global_norm_first = !overlap;
  d.descending_order = overlap;
  d.pipeline_read = d.pipeline_write = true;
  d.semi_async_writes = delayed;
  d.blocking_step = !delayed;
  d.param_disks = d.opt_disks = DiskRange(0, static_cast<int32_t>(s.hardware.node.nvme.size()));
  return PlanDesign(s, d);
}

std::vector<KnobChoice> FuyouTunableKnobs(const Scenario&) {
  return {{"prefetch_window", {"1 GiB", "4 GiB", "8 GiB"}},
          {"optimizer_buffer_count", {"8", "12", "24"}},
          {"sub_group_size", {"1e8", "5e8", "1e9"}}};
}

}  // namespace tierflow::policies
