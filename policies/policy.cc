#include "tierflow/policies/policy.h"

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

StatusOr<Schedule> Plan(Scenario scenario) {
  for (const Entry& e : kPolicies) {
    if (scenario.policy == e.name) return e.plan(scenario);
  }
  std::string list;
  for (const Entry& e : kPolicies) list += (list.empty() ? "" : ", ") + std::string(e.name);
  return InvalidArgument("policy.name: unknown policy '" + scenario.policy + "' (known: " + list + ")");
}

}  // namespace tierflow::policies
