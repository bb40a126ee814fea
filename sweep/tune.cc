#include "tierflow/sweep/tune.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "tierflow/core/units.h"
#include "tierflow/policies/policy.h"
#include "tierflow/policies/scenario.h"

namespace tierflow::sweep {
namespace {

// One point of the search: a policy and the knobs set on top of its defaults.
struct Config {
  std::string policy;
  std::map<std::string, std::string> knobs;
  bool operator<(const Config& o) const { return std::tie(policy, knobs) < std::tie(o.policy, o.knobs); }
  bool operator==(const Config& o) const = default;
};

std::string YamlQuoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// The whole policy section replaced, so that another policy never sees this one's knobs.
std::vector<std::string> Overrides(const Config& c) {
  std::string map = "{name: " + YamlQuoted(c.policy);
  for (const auto& [k, v] : c.knobs) map += ", " + k + ": " + YamlQuoted(v);
  return {"policy=" + map + "}"};
}

bool WithinBudget(const MemoryBudget& b, const Evaluation& e) {
  return e.feasible && (b.host_bytes <= 0 || e.host_peak_bytes <= b.host_bytes) &&
         (b.gpu_bytes <= 0 || e.gpu_peak_bytes <= b.gpu_bytes);
}

class Search {
 public:
  Search(const std::string& yaml, const std::string& origin, const TuneOptions& options, TuneResult* result)
      : yaml_(yaml), origin_(origin), options_(options), result_(result) {}

  // Evaluates the configurations not yet seen, in one parallel batch.
  Status EvaluateBatch(const std::vector<Config>& configs, const std::string& stage) {
    std::vector<Config> todo;
    std::vector<Variation> variations;
    for (const Config& c : configs) {
      if (cache_.count(c) || std::find(todo.begin(), todo.end(), c) != todo.end()) continue;
      todo.push_back(c);
      variations.push_back({Overrides(c)});
    }
    if (todo.empty()) return Status::Ok();
    EvaluateOptions eo;
    eo.iterations = options_.iterations;
    eo.jobs = options_.jobs;
    const int64_t before = result_->evaluations;
    const auto start = std::chrono::steady_clock::now();
    auto report = [&](int64_t evaluations, int64_t done) {
      if (!options_.progress) return;
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      options_.progress({stage, evaluations, best_s_, done, static_cast<int64_t>(todo.size()), elapsed});
    };
    eo.progress = [&](int64_t done, int64_t, const Evaluation&) { report(before + done, done); };
    TF_ASSIGN_OR_RETURN(std::vector<Evaluation> evals, EvaluateAll(yaml_, origin_, variations, eo));
    for (size_t i = 0; i < todo.size(); ++i) {
      ++result_->evaluations;
      if (!evals[i].feasible) ++result_->infeasible;
      else if (!WithinBudget(result_->budget, evals[i])) ++result_->over_budget;
      if (WithinBudget(result_->budget, evals[i]) && evals[i].iteration_s < best_s_) {
        best_s_ = evals[i].iteration_s;
        best_ = todo[i];
        have_best_ = true;
      }
      cache_.emplace(todo[i], std::move(evals[i]));
    }
    report(result_->evaluations, static_cast<int64_t>(todo.size()));
    return Status::Ok();
  }

  const Evaluation& Get(const Config& c) const { return cache_.at(c); }
  bool Good(const Config& c) const { return WithinBudget(result_->budget, cache_.at(c)); }

  // How far `c` is above the budget: the sum of its relative excesses (0 when within; infinite
  // when it cannot be planned or simulated).
  double Excess(const Config& c) const {
    const Evaluation& e = cache_.at(c);
    if (!e.simulated) return std::numeric_limits<double>::infinity();
    const MemoryBudget& b = result_->budget;
    double excess = 0;
    if (b.host_bytes > 0 && e.host_peak_bytes > b.host_bytes) {
      excess += static_cast<double>(e.host_peak_bytes - b.host_bytes) / static_cast<double>(b.host_bytes);
    }
    if (b.gpu_bytes > 0 && e.gpu_peak_bytes > b.gpu_bytes) {
      excess += static_cast<double>(e.gpu_peak_bytes - b.gpu_bytes) / static_cast<double>(b.gpu_bytes);
    }
    return excess;
  }

  // Where to move from `current`, or null. Within the budget: the fastest candidate that beats
  // `current` by min_gain. Above it: the candidate closest to the budget (then the fastest), if
  // it is closer than `current` — the search walks back into the budget before it speeds up.
  const Config* BestMove(const Config& current, const std::vector<Config>& candidates) const {
    const Config* move = nullptr;
    if (Good(current)) {
      double move_s = Get(current).iteration_s * (1 - options_.min_gain);
      for (const Config& c : candidates) {
        if (Good(c) && Get(c).iteration_s < move_s) {
          move_s = Get(c).iteration_s;
          move = &c;
        }
      }
      return move;
    }
    std::pair<double, double> move_key{Excess(current), std::numeric_limits<double>::infinity()};
    for (const Config& c : candidates) {
      const std::pair<double, double> key{Excess(c), Get(c).iteration_s};
      if (key.first < move_key.first || (key.first == 0 && key < move_key)) {
        move_key = key;
        move = &c;
      }
    }
    return move;
  }

  // Greedy coordinate descent from `start` over `knobs`: single-knob moves, and when none helps,
  // moves of two knobs at once (knobs that only pay off together, such as DeepSpeed's two
  // pipelining flags on one SSD, trap a single-knob search).
  Status Descend(Config current, const std::vector<policies::KnobChoice>& knobs) {
    TF_RETURN_IF_ERROR(EvaluateBatch({current}, current.policy + " start"));
    auto alternatives = [&](const policies::KnobChoice& choice) {
      std::vector<std::string> out;
      const auto it = current.knobs.find(choice.name);
      for (const std::string& v : choice.values) {
        if (it == current.knobs.end() || it->second != v) out.push_back(v);
      }
      return out;
    };
    for (int round = 1; round <= options_.max_rounds; ++round) {
      std::vector<Config> singles;
      for (const auto& choice : knobs) {
        for (const std::string& v : alternatives(choice)) {
          Config c = current;
          c.knobs[choice.name] = v;
          singles.push_back(std::move(c));
        }
      }
      const std::string stage = current.policy + " round " + std::to_string(round);
      TF_RETURN_IF_ERROR(EvaluateBatch(singles, stage));
      if (const Config* move = BestMove(current, singles)) {
        current = *move;
        continue;
      }
      std::vector<Config> pairs;
      for (size_t a = 0; a < knobs.size(); ++a) {
        for (size_t b = a + 1; b < knobs.size(); ++b) {
          for (const std::string& va : alternatives(knobs[a])) {
            for (const std::string& vb : alternatives(knobs[b])) {
              Config c = current;
              c.knobs[knobs[a].name] = va;
              c.knobs[knobs[b].name] = vb;
              pairs.push_back(std::move(c));
            }
          }
        }
      }
      TF_RETURN_IF_ERROR(EvaluateBatch(pairs, stage + " (pairs)"));
      const Config* move = BestMove(current, pairs);
      if (!move) break;
      current = *move;
    }
    return Status::Ok();
  }

  // A start that does not plan or run: each knob its reason names (`policy.X`, as every
  // planner's error does) whose value is a whole number, moved alone — doubled, or halved, up to
  // 20 times until the reason no longer names it, then bisected back towards the value as written
  // (to 1/64 of the step) — and the fastest move that plans and simulates (one beyond the
  // memory then walks back into it as any start does). A move past one problem may meet
  // another (a larger buffer_size, then too few buffers): then the first knob's move is kept and
  // the next problem repaired the same way, up to four. Null when no move gets past a problem.
  StatusOr<std::optional<Config>> Repair(const Config& broken) {
    Config current = broken;
    for (int problem = 0; problem < 4; ++problem) {
      TF_ASSIGN_OR_RETURN(const std::vector<Config> moves, RepairMoves(current, Get(current).reason));
      if (moves.empty()) return std::optional<Config>();
      std::optional<Config> best;
      for (const Config& c : moves) {
        if (Get(c).simulated && (!best || Get(c).iteration_s < Get(*best).iteration_s)) best = c;
      }
      if (best) return best;
      current = moves.front();
    }
    return std::optional<Config>();
  }

  // The moves past the problem `reason` names, one per knob it names that has one (in the
  // reason's order).
  StatusOr<std::vector<Config>> RepairMoves(const Config& broken, const std::string& reason) {
    struct Walk {
      std::string knob;
      int64_t from;
      int direction;               // +1 up, -1 down
      int64_t bad = 0, good = -1;  // the value still failing nearest the start, the nearest past it
    };
    std::vector<Walk> walks;
    for (size_t at = reason.find("policy."); at != std::string::npos; at = reason.find("policy.", at + 1)) {
      size_t end = at + 7;
      while (end < reason.size() && (std::islower(static_cast<unsigned char>(reason[end])) || reason[end] == '_')) ++end;
      const std::string knob = reason.substr(at + 7, end - at - 7);
      const auto it = broken.knobs.find(knob);
      if (it == broken.knobs.end() || std::any_of(walks.begin(), walks.end(), [&](const Walk& w) { return w.knob == knob; })) continue;
      char* end_of_number = nullptr;
      const double v = std::strtod(it->second.c_str(), &end_of_number);
      if (it->second.empty() || *end_of_number != '\0' || v != std::floor(v) || v < 0 || v > 4e18) continue;
      for (int direction : {+1, -1}) walks.push_back({knob, static_cast<int64_t>(v), direction, static_cast<int64_t>(v), -1});
    }
    auto with = [&](const std::string& knob, int64_t value) {
      Config c = broken;
      c.knobs[knob] = std::to_string(value);
      return c;
    };
    // Past the problem: it runs, or fails for a reason that no longer names the knob.
    auto past = [&](const std::string& knob, int64_t value) {
      const Evaluation& e = Get(with(knob, value));
      return e.simulated || e.reason.find("policy." + knob) == std::string::npos;
    };
    // The k-th value of a walk: the start doubled (from 0: 1, 2, 4, ...) or halved k times; -1
    // past 2^62, where a walk up stops.
    auto step = [](const Walk& w, int k) -> int64_t {
      if (w.direction < 0) return w.from >> k;
      const int64_t base = w.from == 0 ? 1 : w.from;
      const int shift = w.from == 0 ? k - 1 : k;
      return base > (int64_t{1} << 62) >> shift ? -1 : base << shift;
    };
    std::vector<Config> batch;
    for (const Walk& w : walks) {
      for (int k = 1; k <= 20; ++k) {
        const int64_t v = step(w, k);
        if (v == w.from || v < 0) break;
        batch.push_back(with(w.knob, v));
        if (v == 0) break;
      }
    }
    TF_RETURN_IF_ERROR(EvaluateBatch(batch, "repairing the baseline"));
    for (Walk& w : walks) {
      for (int k = 1; k <= 20; ++k) {
        const int64_t v = step(w, k);
        if (v == w.from || v < 0 || !cache_.count(with(w.knob, v))) break;
        if (past(w.knob, v)) {
          w.good = v;
          break;
        }
        w.bad = v;
      }
    }
    // Bisect each walk that got past back towards its start, every walk in one batch per step.
    auto open = [](const Walk& w) {
      const int64_t gap = w.good < 0 ? 0 : (w.good > w.bad ? w.good - w.bad : w.bad - w.good);
      return gap > 1 && gap * 64 > std::max(w.good, w.bad);
    };
    for (int round = 0; round < 64; ++round) {
      std::vector<Config> mids;
      for (const Walk& w : walks) {
        if (open(w)) mids.push_back(with(w.knob, w.bad + (w.good - w.bad) / 2));
      }
      if (mids.empty()) break;
      TF_RETURN_IF_ERROR(EvaluateBatch(mids, "repairing the baseline"));
      for (Walk& w : walks) {
        if (!open(w)) continue;
        const int64_t mid = w.bad + (w.good - w.bad) / 2;
        (past(w.knob, mid) ? w.good : w.bad) = mid;
      }
    }
    std::vector<Config> moves;
    for (const Walk& w : walks) {
      if (w.good >= 0) moves.push_back(with(w.knob, w.good));
    }
    return moves;
  }

  // Re-ranks what is cached under the budget now in result->budget.
  void Rescore() {
    have_best_ = false;
    best_s_ = std::numeric_limits<double>::infinity();
    for (const auto& [c, e] : cache_) {
      if (WithinBudget(result_->budget, e) && e.iteration_s < best_s_) {
        best_s_ = e.iteration_s;
        best_ = c;
        have_best_ = true;
      }
    }
  }

  // The fastest configuration of `policy` within the budget, or null.
  const Config* BestOf(const std::string& policy) const {
    const Config* best = nullptr;
    for (const auto& [c, e] : cache_) {
      if (c.policy == policy && WithinBudget(result_->budget, e) && (best == nullptr || e.iteration_s < cache_.at(*best).iteration_s)) best = &c;
    }
    return best;
  }

  bool have_best() const { return have_best_; }
  const Config& best() const { return best_; }

 private:
  const std::string& yaml_;
  const std::string& origin_;
  const TuneOptions& options_;
  TuneResult* result_;
  std::map<Config, Evaluation> cache_;
  Config best_;
  bool have_best_ = false;
  double best_s_ = std::numeric_limits<double>::infinity();
};

}  // namespace

StatusOr<TuneResult> Tune(const std::string& scenario_yaml, const std::string& origin, const TuneOptions& options) {
  if (options.jobs < 1) return InvalidArgument("jobs must be >= 1");
  if (options.iterations < 1) return InvalidArgument("iterations must be >= 1");
  TF_ASSIGN_OR_RETURN(policies::Scenario scenario, policies::LoadScenarioText(scenario_yaml, {}, origin));
  const std::vector<std::string> known = policies::PolicyNames();
  std::vector<std::string> searched = options.policies.empty() ? known : options.policies;
  for (const std::string& p : searched) {
    if (std::find(known.begin(), known.end(), p) == known.end()) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      return InvalidArgument("--policy: unknown policy '" + p + "' (known: " + list + ")");
    }
  }

  TuneResult result;
  const Config baseline{scenario.policy, scenario.knobs.values()};
  Search search(scenario_yaml, origin, options, &result);
  // The baseline first, without a budget: its peaks are the default budget. One that does not
  // run as written (DeepSpeed's swap buffers too few, say) is repaired first, and said so.
  TF_RETURN_IF_ERROR(search.EvaluateBatch({baseline}, "baseline"));
  Config start_point = baseline;
  if (!search.Get(baseline).simulated) {
    const std::string reason = search.Get(baseline).reason;
    TF_ASSIGN_OR_RETURN(const std::optional<Config> repaired, search.Repair(baseline));
    if (!repaired) {
      return FailedPrecondition("the baseline cannot be simulated, and no move of the knobs its reasons name makes it run: " + reason);
    }
    start_point = *repaired;
    result.baseline_problem = reason;
    for (const auto& [k, v] : repaired->knobs) {
      if (baseline.knobs.at(k) != v) result.repairs.push_back({"policy." + k, baseline.knobs.at(k), v});
    }
  }
  result.baseline = search.Get(start_point);
  result.baseline_overrides = Overrides(start_point);
  result.budget = options.budget;
  if (result.budget.host_bytes <= 0) result.budget.host_bytes = result.baseline.host_peak_bytes;
  if (result.budget.gpu_bytes <= 0) result.budget.gpu_bytes = result.baseline.gpu_peak_bytes;
  // Never more than the machine has: a start beyond its memory walks back into it as into any
  // budget.
  const MemoryBudget machine = HardwareMemoryBudget(scenario.hardware);
  if (machine.host_bytes > 0) result.budget.host_bytes = std::min(result.budget.host_bytes, machine.host_bytes);
  if (machine.gpu_bytes > 0) result.budget.gpu_bytes = std::min(result.budget.gpu_bytes, machine.gpu_bytes);
  // Re-rank the baseline under the budget now known (a user budget may exclude it).
  search.Rescore();
  if (!WithinBudget(result.budget, result.baseline)) ++result.over_budget;
  Search& budgeted = search;

  for (const std::string& policy : searched) {
    policies::Scenario as_policy = scenario;
    as_policy.policy = policy;
    Config start{policy, policy == scenario.policy ? start_point.knobs : std::map<std::string, std::string>{}};
    as_policy.knobs = policies::Knobs(start.knobs);
    const std::vector<policies::KnobChoice> knobs = policies::TunableKnobs(policy, as_policy);
    if (knobs.empty()) result.notes.push_back("policy '" + policy + "' declares no tunable knobs: its defaults only");
    TF_RETURN_IF_ERROR(budgeted.Descend(start, knobs));
  }
  if (!budgeted.have_best()) {
    return ResourceExhausted("no configuration fits the memory budget (" + MemoryBudgetToString(result.budget) +
                             "); the baseline peaks at host " +
                             FormatBytes(static_cast<double>(result.baseline.host_peak_bytes)) + ", gpu " +
                             FormatBytes(static_cast<double>(result.baseline.gpu_peak_bytes)));
  }
  // Leave out the knobs the best set that make no difference (a value equal to the policy's
  // default, or a knob the simulation does not feel), so that `changes` lists what matters.
  Config best = budgeted.best();
  const Config start{best.policy, best.policy == scenario.policy ? start_point.knobs : std::map<std::string, std::string>{}};
  auto same = [&](const Evaluation& a, const Evaluation& b) {
    return a.feasible && b.feasible && a.iteration_s == b.iteration_s && a.host_peak_bytes == b.host_peak_bytes &&
           a.gpu_peak_bytes == b.gpu_peak_bytes;
  };
  std::vector<Config> without;
  for (const auto& [k, v] : best.knobs) {
    if (start.knobs.count(k)) continue;
    Config c = best;
    c.knobs.erase(k);
    without.push_back(std::move(c));
  }
  if (!without.empty()) {
    TF_RETURN_IF_ERROR(budgeted.EvaluateBatch(without, "simplifying"));
    Config pruned = best;
    for (const Config& c : without) {
      if (!same(budgeted.Get(c), budgeted.Get(best))) continue;
      for (const auto& [k, v] : best.knobs) {
        if (!c.knobs.count(k)) pruned.knobs.erase(k);
      }
    }
    if (!(pruned == best)) {
      TF_RETURN_IF_ERROR(budgeted.EvaluateBatch({pruned}, "simplifying"));
      if (same(budgeted.Get(pruned), budgeted.Get(best))) best = pruned;
    }
  }
  for (const std::string& policy : searched) {
    if (const Config* c = budgeted.BestOf(policy)) result.per_policy.push_back({policy, Overrides(*c), budgeted.Get(*c)});
  }
  result.best = budgeted.Get(best);
  result.best_policy = best.policy;
  result.best_knobs = best.knobs;
  result.best_overrides = Overrides(best);
  if (best.policy != baseline.policy) result.changes.push_back({"policy.name", baseline.policy, best.policy});
  std::set<std::string> keys;
  for (const auto& [k, v] : baseline.knobs) keys.insert(k);
  for (const auto& [k, v] : best.knobs) keys.insert(k);
  // The defaults a change comes from or goes to, as each side's policy reads them.
  auto defaults_of = [&](const Config& c) {
    policies::Scenario as = scenario;
    as.policy = c.policy;
    as.knobs = policies::Knobs(c.knobs);
    return policies::KnobDefaults(as);
  };
  const std::map<std::string, std::string> from_defaults = defaults_of(baseline), to_defaults = defaults_of(best);
  auto lookup = [](const std::map<std::string, std::string>& m, const std::string& k) {
    const auto it = m.find(k);
    return it == m.end() ? std::string() : it->second;
  };
  for (const std::string& k : keys) {
    const auto a = baseline.knobs.find(k);
    const auto b = std::as_const(best.knobs).find(k);
    const std::string from = a == baseline.knobs.end() ? "" : a->second;
    const std::string to = b == best.knobs.end() ? "" : b->second;
    if (from != to || best.policy != baseline.policy) {
      result.changes.push_back({"policy." + k, from, to, from.empty() ? lookup(from_defaults, k) : "", to.empty() ? lookup(to_defaults, k) : ""});
    }
  }
  return result;
}

}  // namespace tierflow::sweep
