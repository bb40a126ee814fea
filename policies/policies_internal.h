// The generators, one per policy file; Plan() dispatches on the scenario's policy name.
#pragma once

#include "tierflow/core/schedule.h"
#include "tierflow/policies/policy.h"
#include "tierflow/policies/scenario.h"

namespace tierflow::policies {

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
