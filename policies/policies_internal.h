// The generators, one per policy file; Plan() dispatches on the scenario's policy name.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "blocks.h"
#include "tierflow/core/schedule.h"
#include "tierflow/policies/policy.h"
#include "tierflow/policies/scenario.h"

namespace tierflow::policies {

// zero-infinity's knobs under DeepSpeed's names, at DeepSpeed's defaults where unset: what the
// planner reads and the DeepSpeed export writes (one list, so the two cannot drift apart).
// A number as %g writes it ("0.5", "1e+09"), for messages.
inline std::string Shortest(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

struct ZeroInfinityKnobs {
  int64_t buffer_count = 5;                  // offload_param.buffer_count
  int64_t buffer_size = 100000000;           // offload_param.buffer_size (elements)
  int64_t optimizer_buffer_count = 4;        // offload_optimizer.buffer_count
  bool pipeline_read = false;                // offload_optimizer.pipeline_read
  bool pipeline_write = false;               // offload_optimizer.pipeline_write
  int64_t sub_group_size = 1000000000;       // zero_optimization.sub_group_size
  int64_t block_size = 1 << 20;              // aio.block_size (bytes)
  int64_t queue_depth = 8;                   // aio.queue_depth
  int64_t persistence = 100000;              // zero_optimization.stage3_param_persistence_threshold
  int64_t cpu_threads = 0;                   // tierflow's: CPU Adam threads per rank (0: cores / ranks per node)
  bool params_on_nvme = true;                // offload_param.device nvme (or none)
  // offload_optimizer.device nvme, or cpu (ZeRO-Offload): every sub-group's states, and so its
  // fp32 gradients, in host memory, never swapped.
  bool states_on_nvme = true;
  // offload_optimizer.device none: every sub-group's states on the GPU, updated there; cpu with
  // ratio < 1 (ZeRO-Offload++): DeepSpeed's stage 3 keeps sub-group i on the GPU when
  // i < int((1 - ratio) * sub-groups), the rest in host memory.
  bool states_on_gpu = false;                // offload_optimizer.device none
  double ratio = 1;                          // offload_optimizer.ratio (device cpu)
  // The share of the sub-groups updated on the GPU: 1 with none, 1 - ratio with cpu, 0 with nvme.
  double GpuShare() const { return states_on_gpu ? 1.0 : states_on_nvme ? 0.0 : 1.0 - ratio; }
  int64_t max_in_cpu = 1000000000;           // offload_param.max_in_cpu (elements)
  int64_t reduce_bucket_size = 500000000;    // zero_optimization.reduce_bucket_size (elements)
  int64_t max_live_parameters = 1000000000;  // zero_optimization.stage3_max_live_parameters (elements)
  int64_t max_reuse_distance = 1000000000;   // zero_optimization.stage3_max_reuse_distance (elements)
  // Host-memory fidelity (off by default so that earlier figures stay comparable; MemAscend's
  // comparison turns both on, as DeepSpeed really behaves).
  bool pin_rounding = false;                 // pin_memory_rounding
  bool overflow_temporaries = false;         // overflow_check_temporaries
};
// Every knob of `s` read (an unknown one refused, naming the known), the counts checked.
StatusOr<ZeroInfinityKnobs> ReadZeroInfinityKnobs(const Scenario& s);

// What DeepSpeed keeps in host memory rather than on its NVMe path, per rank (the same on every
// rank), from its code (docs/policies.md cites each rule): the parameters of the sub-groups that
// fit in offload_param.max_in_cpu and every partition below the swap minimum, max(1 MiB,
// aio.block_size); the optimizer states of a sub-group below the swap minimum; the gradients of
// such a sub-group, and each parameter's gradient below it.
struct DeepSpeedPlacement {
  std::vector<bool> param_in_host;           // per unit (offload_param nvme)
  std::vector<bool> grad_in_host;            // per unit: its fp32 gradient is never written
  std::vector<bool> states_in_host;          // per sub-group: never read nor written
  std::vector<bool> states_on_gpu;           // per sub-group: kept and updated on the GPU
  std::vector<bool> subgroup_grads_in_host;  // per sub-group: all of its gradients in host memory
  int64_t host_param_elements = 0;           // the flat bf16 buffer's span: the last kept unit's end
  int64_t host_grad_elements = 0;            // the flat fp32 gradient buffer's span, likewise
  int64_t host_state_elements = 0;           // the sub-groups whose states stay in host memory
};
DeepSpeedPlacement PlaceLikeDeepSpeed(const ModelPlan& plan, const ZeroInfinityKnobs& k);

StatusOr<Schedule> PlanZeroInfinity(const Scenario& s);
std::vector<KnobChoice> ZeroInfinityTunableKnobs(const Scenario& s);
StatusOr<Schedule> PlanIoc(const Scenario& s);
std::vector<KnobChoice> IocTunableKnobs(const Scenario& s);
StatusOr<Schedule> PlanMlpOffload(const Scenario& s);
std::vector<KnobChoice> MlpOffloadTunableKnobs(const Scenario& s);
StatusOr<Schedule> PlanHiTrain(const Scenario& s);
std::vector<KnobChoice> HiTrainTunableKnobs(const Scenario& s);
StatusOr<Schedule> PlanMemAscend(const Scenario& s);
std::vector<KnobChoice> MemAscendTunableKnobs(const Scenario& s);
StatusOr<Schedule> PlanFuyou(const Scenario& s);
std::vector<KnobChoice> FuyouTunableKnobs(const Scenario& s);
StatusOr<Schedule> PlanTierflow(const Scenario& s);
std::vector<KnobChoice> TierflowTunableKnobs(const Scenario& s);

}  // namespace tierflow::policies
