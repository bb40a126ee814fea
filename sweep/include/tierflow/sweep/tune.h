// The tuner: searches the knobs of one or every policy with the simulator under a memory budget
// and returns the fastest feasible configuration found. docs/tuning.md describes the search.
//
// Baseline: the scenario as given. Budget: by default the baseline's own peaks (host pinned sum,
// largest GPU pool), so that "faster within the same memory" is the default question. For each
// policy searched, the start point is the scenario's own knobs when it is the scenario's policy,
// else the policy's defaults; then greedy coordinate descent over TunableKnobs(policy): each round
// evaluates every single-knob change of the current point in parallel and moves to the fastest
// one that is feasible, within budget and faster by more than `min_gain`; when no single change
// helps, it tries every change of two knobs at once (knobs that only pay off together trap a
// single-knob search); it stops when neither helps or after `max_rounds`. From a start point
// above the budget, each move goes to the candidate closest to the budget until one fits.
// Finally, knobs the best sets that change nothing (same time and peaks without them) are left
// out, so that the changes reported are the ones that matter. Every configuration is evaluated
// once (results are cached).
//
// Thread safety: as EvaluateAll (forks worker processes).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tierflow/core/status.h"
#include "tierflow/sweep/evaluate.h"

namespace tierflow::sweep {

struct TuneProgress {
  std::string stage;            // "zero-infinity round 2", "repairing the baseline"
  int64_t evaluations = 0;      // configurations simulated so far
  double best_s = 0;            // the best within the budget so far; +inf when none yet
  int64_t batch_done = 0;       // of the batch under way: candidates done,
  int64_t batch_total = 0;      // in all,
  double batch_elapsed_s = 0;   // and the seconds since it started (an ETA for the batch)
};

struct TuneOptions {
  std::vector<std::string> policies;  // empty: every name in policies::PolicyNames()
  MemoryBudget budget;                // 0 parts: the baseline's peaks
  int64_t iterations = 1;             // simulated per candidate
  int jobs = 1;                       // worker processes
  int max_rounds = 12;                // coordinate-descent rounds per policy
  double min_gain = 1e-3;             // a move must cut iteration time by this fraction
  // Called as candidates complete (TuneProgress): what is being searched, evaluations so far,
  // the best so far, and where the batch under way stands.
  std::function<void(const TuneProgress&)> progress;
};

struct KnobChange {
  std::string knob;  // "policy.name", "policy.buffer_count"
  std::string from;  // "" when the baseline leaves it at the policy's default
  std::string to;    // "" when the best leaves it at its policy's default
  // Those defaults, where from or to is "" (policies::KnobDefaults; "" when the plan did not read it).
  std::string from_default;
  std::string to_default;
};

// The fastest configuration of one policy found within the budget.
struct PolicyBest {
  std::string policy;
  std::vector<std::string> overrides;  // "policy=..." --set list giving it
  Evaluation evaluation;
};

struct TuneResult {
  // The baseline's figures: the scenario as given, or as repaired when it does not run as given.
  Evaluation baseline;
  std::string baseline_problem;            // why the scenario as given does not run ("" when it does)
  std::vector<KnobChange> repairs;         // what made it run (empty when it ran)
  std::vector<std::string> baseline_overrides;  // "policy=..." --set list giving the baseline searched from
  Evaluation best;
  MemoryBudget budget;                  // the budget the search respected
  std::string best_policy;
  std::map<std::string, std::string> best_knobs;  // knob -> value, as set on top of the policy
  std::vector<std::string> best_overrides;        // "policy=..."-style --set list giving the best
  std::vector<KnobChange> changes;      // from the baseline to the best
  int64_t evaluations = 0;              // distinct configurations simulated
  int64_t infeasible = 0;               // of which failed to plan or simulate
  int64_t over_budget = 0;              // of which exceeded the budget
  std::vector<std::string> notes;       // e.g. a policy that could not be searched, and why
  std::vector<PolicyBest> per_policy;   // each policy searched that has one within the budget, in search order
};

// `scenario_yaml` is a scenario text (overrides already applied); origin names it in messages.
// A baseline that does not plan or run is repaired first: each knob its error names, moved alone
// until it runs (TuneResult::repairs), the fastest of those; `changes` still start from the
// scenario as given. Errors: a baseline no such move repairs, options out of range, workers that
// cannot start.
StatusOr<TuneResult> Tune(const std::string& scenario_yaml, const std::string& origin, const TuneOptions& options);

}  // namespace tierflow::sweep
