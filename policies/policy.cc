#include "tierflow/policies/policy.h"

#include "tierflow/core/text.h"
#include "blocks.h"
#include "policies_internal.h"

namespace tierflow::policies {
namespace {

struct Entry {
  const char* name;
  StatusOr<Schedule> (*plan)(const Scenario&);
  std::vector<KnobChoice> (*tunable)(const Scenario&);
};
constexpr Entry kPolicies[] = {
    {"zero-infinity", &PlanZeroInfinity, &ZeroInfinityTunableKnobs},
    {"ioc", &PlanIoc, &IocTunableKnobs},
    {"mlp-offload", &PlanMlpOffload, &MlpOffloadTunableKnobs},
    {"hitrain", &PlanHiTrain, &HiTrainTunableKnobs},
    {"memascend", &PlanMemAscend, &MemAscendTunableKnobs},
    {"fuyou", &PlanFuyou, &FuyouTunableKnobs},
    {"tierflow", &PlanTierflow, &TierflowTunableKnobs},
};

}  // namespace

std::vector<std::string> PolicyNames() {
  std::vector<std::string> names;
  for (const Entry& e : kPolicies) names.push_back(e.name);
  return names;
}

std::vector<KnobChoice> TunableKnobs(const std::string& policy, const Scenario& scenario) {
  for (const Entry& e : kPolicies) {
    if (policy == e.name) return e.tunable(scenario);
  }
  return {};
}

std::map<std::string, std::string> KnobDefaults(const Scenario& scenario) {
  std::map<std::string, std::string> defaults;
  Scenario copy = scenario;
  copy.knobs.RecordDefaultsIn(&defaults);
  (void)Plan(copy);  // only what it reads matters, not whether it plans
  return defaults;
}

StatusOr<Schedule> Plan(Scenario scenario) {
  for (const Entry& e : kPolicies) {
    if (scenario.policy == e.name) return e.plan(scenario);
  }
  std::string list;
  for (const Entry& e : kPolicies) list += (list.empty() ? "" : ", ") + std::string(e.name);
  return InvalidArgument("policy.name: unknown policy " + Quoted(scenario.policy) + " (known: " + list + ")");
}

StatusOr<std::vector<LayerCompute>> LayerComputeCosts(const Scenario& scenario) {
  // Sub-groups and GPU residency do not change what compute is charged.
  TF_ASSIGN_OR_RETURN(ModelPlan plan, MakeModelPlan(scenario, int64_t{1} << 62, 0));
  std::vector<LayerCompute> out(models::Layers(scenario.model).size());
  for (const ParamUnit& u : plan.units) {
    if (u.layer < 0 || u.layer >= static_cast<int32_t>(out.size())) return Internal("unit '" + u.name + "' has no layer");
    LayerCompute& c = out[static_cast<size_t>(u.layer)];
    c.forward_flops += ComputeTaskFlops(u, true);
    c.backward_flops += ComputeTaskFlops(u, false);
    c.forward_bytes += static_cast<double>(ComputeTaskBytes(u, true));
    c.backward_bytes += static_cast<double>(ComputeTaskBytes(u, false));
    ++c.tasks;
  }
  return out;
}

}  // namespace tierflow::policies
