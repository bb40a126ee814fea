// The generators, one per policy file; Plan() dispatches on the scenario's policy name.
#pragma once

#include "tierflow/core/schedule.h"
#include "tierflow/policies/policy.h"
#include "tierflow/policies/scenario.h"

namespace tierflow::policies {

StatusOr<Schedule> PlanZeroInfinity(const Scenario& s);
std::vector<KnobChoice> ZeroInfinityTunableKnobs(const Scenario& s);

}  // namespace tierflow::policies
