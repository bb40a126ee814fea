// hitrain: HiTrain (J. Computer Research and Development; ../shared/reference/offload-systems.md
// §4): one GPU and NVMe SSDs,
//  - an asynchronous optimizer overlapped with backward, with reordered execution: sub-groups
//    are updated from the last to the first, each as soon as the gradients of its units are
//    final (the global norm is not waited for: clipping, if any, uses a norm accumulated per
//    sub-group — the price of any optimizer that overlaps backward);
//  - a low-overhead storage path: the SPDK user-space tensor store, modelled as deeper queues
//    (io_engine spdk: queue_depth 128); the per-request CPU cost it saves is not in the
//    simulator's disk model (docs/policies.md);
//  - gradients kept in host memory, exact-size pinned slots of its own tensor store.
#include "offload_design.h"
#include "policies_internal.h"

namespace tierflow::policies {

StatusOr<Schedule> PlanHiTrain(const Scenario& s) {
  Knobs knobs = s.knobs;
  OffloadDesign d;
  d.policy = "hitrain";
  TF_ASSIGN_OR_RETURN(const std::string engine, knobs.String("io_engine", "spdk", {"spdk", "aio"}));
  d.queue_depth = engine == "spdk" ? 128 : 8;
  d.optimizer_buffers = 12;
  TF_RETURN_IF_ERROR(ReadCommonKnobs(knobs, &d));
  TF_ASSIGN_OR_RETURN(const bool overlap, knobs.Bool("overlap_optimizer", true));
  TF_ASSIGN_OR_RETURN(const bool reorder, knobs.Bool("reorder", true));
  TF_RETURN_IF_ERROR(knobs.Finish("hitrain"));
  d.gradient_path = GradientPath::kKeepInHost;
  d.global_norm_first = !overlap;
  d.descending_order = reorder;
  d.pipeline_read = d.pipeline_write = true;
  d.param_disks = d.opt_disks = DiskRange(0, static_cast<int32_t>(s.hardware.node.nvme.size()));
  return PlanDesign(s, d);
}

std::vector<KnobChoice> HiTrainTunableKnobs(const Scenario&) {
  return {{"io_engine", {"aio", "spdk"}},
          {"reorder", {"false", "true"}},
          {"optimizer_buffer_count", {"8", "12", "24"}},
          {"sub_group_size", {"1e8", "5e8", "1e9"}}};
}

}  // namespace tierflow::policies
