// Reading SWEEP.yaml (docs/sweep-format.md) into numbered runs, sharding, and running them.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "tierflow/models/yaml_tree.h"
#include "tierflow/policies/scenario.h"
#include "tierflow/sweep/sweep.h"

namespace tierflow::sweep {
namespace {

std::string Q(const std::string& s) { return "'" + s + "'"; }

// A value as `--set` text: scalars as written, anything else in YAML flow style.
std::string ValueText(const YAML::Node& node) {
  if (node.IsScalar()) return node.Scalar();
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

StatusOr<std::vector<std::pair<std::string, std::string>>> ReadSettings(const YAML::Node& map, const std::string& where) {
  if (!map.IsMap()) return InvalidArgument(where + ": expected a map of key.path: value");
  std::vector<std::pair<std::string, std::string>> out;
  for (auto it = map.begin(); it != map.end(); ++it) {
    const std::string key = it->first.as<std::string>();
    if (key.empty() || key.find('=') != std::string::npos) return InvalidArgument(where + ": bad key path " + Q(key));
    out.emplace_back(key, ValueText(it->second));
  }
  return out;
}

}  // namespace

Variation SweepRun::variation() const {
  Variation v;
  for (const auto& [k, value] : settings) v.overrides.push_back(k + "=" + value);
  return v;
}

StatusOr<SweepSpec> LoadSweepFile(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) return NotFound("sweep file '" + path + "' cannot be opened");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::filesystem::path p(path);
  TF_ASSIGN_OR_RETURN(SweepSpec spec, LoadSweepText(ss.str(), path, p.parent_path().string(), overrides));
  if (spec.name.empty()) spec.name = p.stem().string();
  return spec;
}

StatusOr<SweepSpec> LoadSweepText(const std::string& yaml, const std::string& origin, const std::string& base_dir,
                                  const std::vector<std::string>& overrides) {
  SweepSpec spec;
  TF_ASSIGN_OR_RETURN(const YAML::Node root, models::LoadYamlText(yaml, origin));
  try {
    if (!root.IsMap()) return InvalidArgument(origin + ": expected a map with base and grid and/or runs");
    const std::set<std::string> known = {"name", "description", "base", "iterations", "memory_budget", "grid", "runs"};
    for (auto it = root.begin(); it != root.end(); ++it) {
      const std::string k = it->first.as<std::string>();
      if (!known.count(k)) {
        return InvalidArgument(origin + ": unknown key " + Q(k) +
                               " (known: name, description, base, iterations, memory_budget, grid, runs)");
      }
    }
    if (root["name"]) spec.name = root["name"].as<std::string>();
    // The base: a path (relative to the sweep file) or an inline scenario.
    const YAML::Node base = root["base"];
    if (!base) return InvalidArgument(origin + ": missing key 'base' (a scenario path or an inline scenario)");
    if (base.IsScalar()) {
      std::filesystem::path bp(base.Scalar());
      if (bp.is_relative() && !base_dir.empty()) bp = std::filesystem::path(base_dir) / bp;
      std::ifstream in(bp);
      if (!in) return NotFound(origin + ": base: scenario file '" + bp.string() + "' cannot be opened");
      std::stringstream ss;
      ss << in.rdbuf();
      spec.base_yaml = ss.str();
      spec.base_origin = bp.string();
    } else if (base.IsMap()) {
      YAML::Emitter out;
      out << base;
      spec.base_yaml = out.c_str();
      spec.base_origin = origin + " (inline base)";
    } else {
      return InvalidArgument(origin + ": base: expected a scenario path or an inline scenario map");
    }
    if (!overrides.empty()) {
      // Fold --set into the base text so that every worker and the stored origin agree.
      auto s = policies::LoadScenarioText(spec.base_yaml, overrides, spec.base_origin);
      if (!s.ok()) return s.status();
      spec.base_yaml = s->yaml;
    }
    auto base_scenario = policies::LoadScenarioText(spec.base_yaml, {}, spec.base_origin);
    if (!base_scenario.ok()) return base_scenario.status().WithContext(origin + ": base");
    if (spec.name.empty()) spec.name = base_scenario->name + "-sweep";

    if (root["iterations"]) {
      spec.iterations = root["iterations"].as<int64_t>();
      if (spec.iterations < 1) return InvalidArgument(origin + ": iterations must be >= 1");
    }
    if (const YAML::Node mb = root["memory_budget"]) {
      if (!mb.IsMap()) return InvalidArgument(origin + ": memory_budget: expected a map with host and/or gpu");
      for (auto it = mb.begin(); it != mb.end(); ++it) {
        const std::string k = it->first.as<std::string>();
        if (k != "host" && k != "gpu") return InvalidArgument(origin + ": memory_budget: unknown key " + Q(k) + " (known: host, gpu)");
        auto budget = ParseMemoryBudget(k + "=" + it->second.Scalar());
        if (!budget.ok()) return budget.status().WithContext(origin + ": memory_budget");
        if (k == "host") spec.budget.host_bytes = budget->host_bytes;
        else spec.budget.gpu_bytes = budget->gpu_bytes;
      }
    }

    // The grid: key -> non-empty list of values.
    std::vector<std::pair<std::string, std::vector<std::string>>> grid;
    if (const YAML::Node g = root["grid"]) {
      if (!g.IsMap() || g.size() == 0) return InvalidArgument(origin + ": grid: expected a non-empty map of key.path: [values]");
      for (auto it = g.begin(); it != g.end(); ++it) {
        const std::string key = it->first.as<std::string>();
        if (!it->second.IsSequence()) return InvalidArgument(origin + ": grid." + key + ": expected a list of values");
        if (it->second.size() == 0) return InvalidArgument(origin + ": grid." + key + ": empty list of values");
        std::vector<std::string> values;
        // Held by value: it->second is a member of the iterator's temporary proxy, which a
        // range-for over it outlives (ASan: stack-use-after-scope).
        const YAML::Node list = it->second;
        for (const YAML::Node& v : list) values.push_back(ValueText(v));
        grid.emplace_back(key, std::move(values));
      }
    }
    // The runs: a list of override maps (an empty map is the base itself).
    std::vector<std::vector<std::pair<std::string, std::string>>> entries;
    if (const YAML::Node r = root["runs"]) {
      if (!r.IsSequence() || r.size() == 0) return InvalidArgument(origin + ": runs: expected a non-empty list of override maps");
      for (size_t i = 0; i < r.size(); ++i) {
        const std::string where = origin + ": runs[" + std::to_string(i) + "]";
        if (r[i].IsNull()) {
          entries.emplace_back();
          continue;
        }
        TF_ASSIGN_OR_RETURN(auto settings, ReadSettings(r[i], where));
        for (const auto& [k, v] : settings) {
          for (const auto& [gk, gv] : grid) {
            if (gk == k) return InvalidArgument(where + ": key " + Q(k) + " is also a grid key");
          }
        }
        entries.push_back(std::move(settings));
      }
    }
    if (grid.empty() && entries.empty()) return InvalidArgument(origin + ": neither 'grid' nor 'runs': nothing to sweep");
    if (entries.empty()) entries.emplace_back();

    // Column order: grid keys, then run keys in first appearance.
    for (const auto& [k, v] : grid) spec.keys.push_back(k);
    for (const auto& e : entries) {
      for (const auto& [k, v] : e) {
        if (std::find(spec.keys.begin(), spec.keys.end(), k) == spec.keys.end()) spec.keys.push_back(k);
      }
    }
    // Each distinct setting must load on the base: a misspelt key path or a malformed value is an
    // error of the sweep, not a thousand infeasible rows. (Policy knobs are checked when planned:
    // a knob the policy does not read makes an infeasible row naming it.)
    std::set<std::string> checked;
    auto check = [&](const std::vector<std::string>& sets, const std::string& where) -> Status {
      std::string id;
      for (const auto& s : sets) id += s + "\n";
      if (!checked.insert(id).second) return Status::Ok();
      auto s = policies::LoadScenarioText(spec.base_yaml, sets, spec.base_origin);
      if (!s.ok()) return s.status().WithContext(origin + ": " + where);
      return Status::Ok();
    };
    for (const auto& [k, values] : grid) {
      for (const auto& v : values) TF_RETURN_IF_ERROR(check({k + "=" + v}, "grid." + k + " value " + Q(v)));
    }
    for (size_t i = 0; i < entries.size(); ++i) {
      std::vector<std::string> sets;
      for (const auto& [k, v] : entries[i]) sets.push_back(k + "=" + v);
      TF_RETURN_IF_ERROR(check(sets, "runs[" + std::to_string(i) + "]"));
    }

    // Runs: entries outer, grid inner (last key fastest).
    int64_t grid_points = 1;
    for (const auto& [k, values] : grid) {
      grid_points *= static_cast<int64_t>(values.size());
      if (grid_points * static_cast<int64_t>(entries.size()) > 10'000'000) {
        return InvalidArgument(origin + ": more than 10 million runs");
      }
    }
    for (const auto& entry : entries) {
      for (int64_t g = 0; g < grid_points; ++g) {
        SweepRun run;
        run.index = static_cast<int64_t>(spec.runs.size());
        std::vector<std::pair<std::string, std::string>> point;
        int64_t rest = g;
        for (size_t k = grid.size(); k-- > 0;) {
          const auto& values = grid[k].second;
          point.emplace_back(grid[k].first, values[static_cast<size_t>(rest % static_cast<int64_t>(values.size()))]);
          rest /= static_cast<int64_t>(values.size());
        }
        std::reverse(point.begin(), point.end());
        run.settings = entry;
        run.settings.insert(run.settings.end(), point.begin(), point.end());
        // Key order, as the columns.
        std::stable_sort(run.settings.begin(), run.settings.end(), [&](const auto& a, const auto& b) {
          return std::find(spec.keys.begin(), spec.keys.end(), a.first) <
                 std::find(spec.keys.begin(), spec.keys.end(), b.first);
        });
        spec.runs.push_back(std::move(run));
      }
    }
  } catch (const YAML::Exception& e) {
    return InvalidArgument(origin + ": " + e.what());
  }
  return spec;
}

StatusOr<Shard> ParseShard(const std::string& text) {
  Shard s;
  const auto slash = text.find('/');
  char* end = nullptr;
  if (slash == std::string::npos) return InvalidArgument("--shard '" + text + "': expected I/N (e.g. 0/4)");
  s.index = std::strtoll(text.c_str(), &end, 10);
  if (end != text.c_str() + slash || slash == 0) return InvalidArgument("--shard '" + text + "': expected I/N (e.g. 0/4)");
  s.count = std::strtoll(text.c_str() + slash + 1, &end, 10);
  if (*end != '\0' || slash + 1 == text.size()) return InvalidArgument("--shard '" + text + "': expected I/N (e.g. 0/4)");
  if (s.count < 1 || s.index < 0 || s.index >= s.count) {
    return InvalidArgument("--shard '" + text + "': need 0 <= I < N");
  }
  return s;
}

std::vector<SweepRun> RunsOfShard(const SweepSpec& spec, const Shard& shard) {
  std::vector<SweepRun> out;
  for (const SweepRun& r : spec.runs) {
    if (r.index % shard.count == shard.index) out.push_back(r);
  }
  return out;
}

StatusOr<std::vector<SweepRow>> RunSweep(const SweepSpec& spec, const std::vector<SweepRun>& runs,
                                         EvaluateOptions options) {
  options.iterations = spec.iterations;
  options.budget = spec.budget;
  std::vector<Variation> variations;
  for (const SweepRun& r : runs) variations.push_back(r.variation());
  TF_ASSIGN_OR_RETURN(std::vector<Evaluation> evals, EvaluateAll(spec.base_yaml, spec.base_origin, variations, options));
  std::vector<SweepRow> rows;
  for (size_t i = 0; i < runs.size(); ++i) rows.push_back({runs[i], std::move(evals[i])});
  return rows;
}

}  // namespace tierflow::sweep
