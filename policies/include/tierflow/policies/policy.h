// Policies turn a scenario into a schedule: one generator per system modelled, built from the
// shared blocks in blocks.h. docs/policies.md lists each policy's knobs and defaults.
//
// Thread safety: pure functions of their arguments.
#pragma once

#include <string>
#include <vector>

#include "tierflow/core/schedule.h"
#include "tierflow/policies/scenario.h"

namespace tierflow::policies {

// Generates the schedule of scenario.policy; errors name the knob or the limit that fails (e.g.
// a parameter partition larger than DeepSpeed's buffer_size). The result is validated.
StatusOr<Schedule> Plan(Scenario scenario);
std::vector<std::string> PolicyNames();

}  // namespace tierflow::policies
