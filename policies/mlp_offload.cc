// mlp-offload: multi-level, multi-path offloading (SC'25; ../shared/reference/offload-systems.md
// §3), on DeepSpeed ZeRO-3 with the optimizer offloaded:
//  - optimizer sub-groups over two paths, node-local NVMe and a remote tier (a parallel file
//    system): sub-group i on the remote path when i % ratio == 0; each path has its own
//    handles and buffers, so both work in parallel;
//  - cache-aware order: the last buffer_count/4 − 1 sub-groups of each path stay in host memory
//    (never read, never written back: cache_mode keep), or are written back but never read
//    (cache_mode alternate: the order alternates direction, so the sub-groups updated last are
//    updated first next time while still in memory);
//  - per-tier concurrency control: one reader and one writer per tier for all ranks (shared
//    resources with concurrency 1);
//  - no gradient flush: bf16 gradients stay in host memory, converted during the update.
// Parameters: sharded on the GPUs (offload_param none, as in the published runs) or on NVMe.
#include "offload_design.h"
#include "policies_internal.h"

namespace tierflow::policies {

StatusOr<Schedule> PlanMlpOffload(const Scenario& s) {
  Knobs knobs = s.knobs;
  OffloadDesign d;
  d.policy = "mlp-offload";
  // The published configuration: 1e8-element sub-groups, 2 MiB aio blocks, 25 buffers per path.
  d.sub_group_size = 100000000;
  d.block_bytes = 2 << 20;
  d.optimizer_buffers = 25;
  TF_RETURN_IF_ERROR(ReadCommonKnobs(knobs, &d));
  TF_ASSIGN_OR_RETURN(const int64_t ratio, knobs.Int("ratio", 3, 0, 1024));
  TF_ASSIGN_OR_RETURN(const bool cache, knobs.Bool("cache", true));
  TF_ASSIGN_OR_RETURN(const std::string cache_mode, knobs.String("cache_mode", "keep", {"keep", "alternate"}));
  TF_ASSIGN_OR_RETURN(const bool locks, knobs.Bool("concurrency_control", true));
  TF_ASSIGN_OR_RETURN(const bool flush, knobs.Bool("gradient_flush", false));
  TF_ASSIGN_OR_RETURN(const std::string offload_param, knobs.String("offload_param", "none", {"none", "nvme"}));
  TF_ASSIGN_OR_RETURN(d.slot_elements, knobs.Int("buffer_size", 100000000, 1, int64_t{1} << 40));
  TF_RETURN_IF_ERROR(knobs.Finish("mlp-offload"));
  d.remote_ratio = static_cast<int32_t>(ratio);
  if (ratio > 0 && s.hardware.node.remote.empty()) {
    return InvalidArgument("policy.ratio: " + std::to_string(ratio) +
                           " places sub-groups on a remote tier, but the hardware has none "
                           "(add hardware.node.remote, or set policy.ratio=0)");
  }
  const int32_t paths = ratio > 0 ? 2 : 1;
  // buffer_count is per path, as in MLP-Offload's swappers; the rank's pool holds every path's.
  d.optimizer_buffers *= paths;
  d.cached_per_path = cache ? std::max(0, d.optimizer_buffers / paths / 4 - 1) : 0;
  d.write_cached = cache_mode == "alternate";
  d.tier_locks = locks;
  d.gradient_path = flush ? GradientPath::kFlushToNvme : GradientPath::kKeepInHost;
  d.params_on_nvme = offload_param == "nvme";
  d.pipeline_read = d.pipeline_write = true;
  return PlanDesign(s, d);
}

std::vector<KnobChoice> MlpOffloadTunableKnobs(const Scenario& s) {
  std::vector<KnobChoice> k = {{"cache", {"false", "true"}},
                               {"cache_mode", {"keep", "alternate"}},
                               {"concurrency_control", {"false", "true"}},
                               {"optimizer_buffer_count", {"12", "25", "50"}},
                               {"sub_group_size", {"1e8", "5e8"}}};
  if (!s.hardware.node.remote.empty()) k.insert(k.begin(), {"ratio", {"2", "3", "4", "6"}});
  return k;
}

}  // namespace tierflow::policies
