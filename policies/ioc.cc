// ioc: I/O Coordination Optimization (ISPASS 2026; ../shared/reference/offload-systems.md §2)
// on DeepSpeed's ZeRO-Infinity, with its three changes:
//  - all-gather prefetch decoupled from parameter I/O: a gather waits only for its own
//    parameter's reads (the I/O state table), not for every read outstanding on the handle;
//  - the update as an asynchronous pipeline with read/write isolation: optimizer reads and
//    writes of a disk share one device-wide queue on which every read of the sweep goes before
//    any write, the in-flight writes bounded by the optimizer buffers; state write-back
//    semi-asynchronous (the next iteration's read of a sub-group waits for its write, the step
//    does not), and so is the fp16 parameter write-back (a parameter read waits for its own
//    sub-group only);
//  - several disks: parameters and optimizer states striped over them, or split (parameters
//    and gradients on the first disk, optimizer states on the others).
// Everything else (slots of buffer_size elements, gradient flush, global norm) is DeepSpeed's.
#include "offload_design.h"
#include "policies_internal.h"

namespace tierflow::policies {

StatusOr<Schedule> PlanIoc(const Scenario& s) {
  Knobs knobs = s.knobs;
  OffloadDesign d;
  d.policy = "ioc";
  d.optimizer_buffers = 12;  // DeepSpeed's pipelined swapper's minimum
  TF_RETURN_IF_ERROR(ReadCommonKnobs(knobs, &d));
  TF_ASSIGN_OR_RETURN(d.slot_elements, knobs.Int("buffer_size", 100000000, 1, int64_t{1} << 40));
  TF_ASSIGN_OR_RETURN(const bool decouple, knobs.Bool("decouple_allgather", true));
  TF_ASSIGN_OR_RETURN(const bool isolate, knobs.Bool("isolate_reads", true));
  TF_ASSIGN_OR_RETURN(const bool semi_async, knobs.Bool("semi_async_writeback", true));
  TF_ASSIGN_OR_RETURN(const int64_t disks, knobs.Int("disks", 0, 0, 1024));
  TF_ASSIGN_OR_RETURN(const std::string layout, knobs.String("disk_layout", "stripe", {"stripe", "split"}));
  TF_RETURN_IF_ERROR(knobs.Finish("ioc"));
  const int32_t have = static_cast<int32_t>(s.hardware.node.nvme.size());
  const int32_t use = disks == 0 ? have : static_cast<int32_t>(disks);
  if (use > have) {
    return InvalidArgument("policy.disks: " + std::to_string(use) + " disks asked, the hardware has " + std::to_string(have));
  }
  d.coupled_reads = decouple ? 1 : d.param_buffers;
  d.pipeline_read = d.pipeline_write = true;
  d.isolate_reads_first = isolate;
  d.shared_rw_queue = isolate;
  d.semi_async_writes = semi_async;
  d.blocking_step = !semi_async;
  TF_RETURN_IF_ERROR(PlaceOnDisks(layout, use, &d));
  return PlanDesign(s, d);
}

std::vector<KnobChoice> IocTunableKnobs(const Scenario& s) {
  std::vector<KnobChoice> k = {{"buffer_count", {"3", "5", "8"}},
                               {"optimizer_buffer_count", {"8", "12", "24"}},
                               {"sub_group_size", {"1e8", "5e8", "1e9"}},
                               {"queue_depth", {"8", "32", "128"}}};
  const size_t disks = s.hardware.node.nvme.size();
  if (disks > 1) {
    KnobChoice d{"disks", {}};
    for (size_t i = 1; i <= disks; ++i) d.values.push_back(std::to_string(i));
    k.push_back(d);
    k.push_back({"disk_layout", {"stripe", "split"}});
  }
  return k;
}

}  // namespace tierflow::policies
