// Policies turn a scenario into a schedule: one generator per system modelled, built from the
// shared blocks in blocks.h. docs/policies.md lists each policy's knobs and defaults.
//
// Thread safety: pure functions of their arguments.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tierflow/core/schedule.h"
#include "tierflow/policies/scenario.h"

namespace tierflow::policies {

// Generates the schedule of scenario.policy; errors name the knob or the limit that fails (e.g.
// a parameter partition larger than DeepSpeed's buffer_size). The result is validated.
StatusOr<Schedule> Plan(Scenario scenario);
std::vector<std::string> PolicyNames();

// What every policy's schedule charges one layer (models::Layers() index) for its compute tasks,
// summed over the layer's parameter units, for one rank and micro-step (the compute probe
// labels its measurements with these, so calibrate fits exactly what sim will be asked).
struct LayerCompute {
  double forward_flops = 0, backward_flops = 0;
  double forward_bytes = 0, backward_bytes = 0;
  int32_t tasks = 0;  // compute tasks the layer is split into, in each phase (one per parameter unit)
};
StatusOr<std::vector<LayerCompute>> LayerComputeCosts(const Scenario& scenario);

// The default of each knob `scenario.policy` reads and the scenario leaves unset, spelt as a
// scenario would ("5", "true", "1048576 B"): what `tune` shows beside a change from or to a
// default. Found by planning a copy (Knobs::RecordDefaultsIn); a plan that fails early has read
// fewer.
std::map<std::string, std::string> KnobDefaults(const Scenario& scenario);

// A knob the tuner may change, with the values worth trying (spelt as in a scenario).
struct KnobChoice {
  std::string name;
  std::vector<std::string> values;
};
// The knobs of `policy` that `tierflow tune` searches, for this scenario (values may depend on
// the model and hardware, e.g. disk counts). Empty for an unknown policy.
std::vector<KnobChoice> TunableKnobs(const std::string& policy, const Scenario& scenario);

}  // namespace tierflow::policies
