// Simulated figures of reference scenarios, compared with committed golden files. A change in a
// policy, a performance model or the simulator that moves any figure shows up here; if the move
// is intended, regenerate with TIERFLOW_UPDATE_GOLDEN=1 and review the diff of the data files.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tierflow/policies/policy.h"
#include "tierflow/sim/simulator.h"

namespace tierflow {
namespace {

using Json = nlohmann::ordered_json;

struct Case {
  const char* name;
  std::vector<std::string> sets;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

const std::string kScenario = std::string(TIERFLOW_SOURCE_DIR) + "/tests/cli/data/small.yaml";
const std::string kData = std::string(TIERFLOW_SOURCE_DIR) + "/tests/golden/data/";

Json Figures(const Case& c) {
  auto scenario = policies::LoadScenarioFile(kScenario, c.sets);
  EXPECT_TRUE(scenario.ok()) << scenario.status().ToString();
  auto schedule = policies::Plan(*scenario);
  EXPECT_TRUE(schedule.ok()) << schedule.status().ToString();
  sim::SimOptions o;
  o.iterations = 2;
  auto r = sim::Simulate(*schedule, scenario->hardware, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  Json j;
  j["tasks"] = r->tasks_simulated;
  j["makespan_s"] = r->makespan_s;
  std::map<int64_t, double> iteration_end;
  std::map<std::string, double> busy;
  for (const TraceRecord& rec : r->records) {
    iteration_end[rec.iteration] = std::max(iteration_end[rec.iteration], rec.end_s);
    if (!rec.resource.empty()) busy[rec.resource] += rec.duration_s();
  }
  for (const auto& [it, end] : iteration_end) j["iteration_end_s"].push_back(end);
  // Stamped with simulated time, as SimGrid's examples are: when each phase of the last
  // iteration began and ended (its first task's start, its last task's end).
  const int64_t last = iteration_end.empty() ? 0 : iteration_end.rbegin()->first;
  std::map<std::string, std::pair<double, double>> spans;
  for (const TraceRecord& rec : r->records) {
    if (rec.iteration != last) continue;
    auto [it, fresh] = spans.try_emplace(std::string(PhaseName(rec.phase)), rec.start_s, rec.end_s);
    if (!fresh) it->second = {std::min(it->second.first, rec.start_s), std::max(it->second.second, rec.end_s)};
  }
  for (const auto& [phase, span] : spans) j["last_iteration_phase_s"][phase] = {span.first, span.second};
  for (size_t p = 0; p < schedule->pools().size(); ++p) j["pool_peak_bytes"][schedule->pools()[p].name] = r->pool_peak_bytes[p];
  for (const auto& [res, s] : busy) j["request_s"][res] = s;
  return j;
}

// Numbers within 1e-9 relative; everything else exactly.
void ExpectClose(const Json& want, const Json& got, const std::string& path) {
  if (want.is_number() && got.is_number()) {
    const double a = want.get<double>(), b = got.get<double>();
    EXPECT_LE(std::fabs(a - b), 1e-9 * std::max(std::fabs(a), 1e-12)) << path << ": golden " << a << ", now " << b;
    return;
  }
  ASSERT_EQ(want.type(), got.type()) << path;
  if (want.is_object()) {
    ASSERT_EQ(want.size(), got.size()) << path << ": keys differ";
    for (auto it = want.begin(); it != want.end(); ++it) {
      ASSERT_TRUE(got.contains(it.key())) << path << "." << it.key() << " missing";
      ExpectClose(it.value(), got[it.key()], path + "." + it.key());
    }
  } else if (want.is_array()) {
    ASSERT_EQ(want.size(), got.size()) << path;
    for (size_t i = 0; i < want.size(); ++i) ExpectClose(want[i], got[i], path + "[" + std::to_string(i) + "]");
  } else {
    EXPECT_EQ(want, got) << path;
  }
}

class Golden : public ::testing::TestWithParam<Case> {};

TEST_P(Golden, MatchesTheCommittedFigures) {
  const Case& c = GetParam();
  const Json got = Figures(c);
  const std::string path = kData + c.name + ".golden.json";
  if (std::getenv("TIERFLOW_UPDATE_GOLDEN")) {
    std::ofstream(path) << got.dump(2) << "\n";
    GTEST_SKIP() << "wrote " << path;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in) << path << " is missing: run with TIERFLOW_UPDATE_GOLDEN=1 once";
  std::stringstream ss;
  ss << in.rdbuf();
  ExpectClose(Json::parse(ss.str()), got, c.name);
}

INSTANTIATE_TEST_SUITE_P(
    ZeroInfinity, Golden,
    ::testing::Values(Case{"zi_pipelined", {}},
                      Case{"zi_serial", {"policy.pipeline_read=false", "policy.pipeline_write=false"}},
                      Case{"zi_accumulation", {"training.gradient_accumulation_steps=2"}},
                      Case{"zi_one_rank", {"training.data_parallel=1", "policy.buffer_size=2e8"}},
                      Case{"zi_four_disks", {"hardware.preset=a100x4-4nvme"}},
                      Case{"zi_two_nodes", {"hardware.nodes=2", "training.data_parallel=8"}}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

// Every other policy at its defaults on the same scenario (and the knobs that change its
// structure most), so that a change to any planner shows in its figures.
INSTANTIATE_TEST_SUITE_P(
    Policies, Golden,
    ::testing::Values(Case{"ioc", {"policy={name: ioc}"}},
                      Case{"ioc_two_disks", {"policy={name: ioc}", "hardware.preset=a100x4-4nvme"}},
                      Case{"mlp_offload", {"policy={name: mlp-offload, cache: false}",
                                           "hardware.node.remote=[{name: pfs, read_bw: 6 GB/s, write_bw: 4 GB/s, latency: 1 ms}]"}},
                      Case{"hitrain", {"policy={name: hitrain}"}},
                      Case{"memascend", {"policy={name: memascend}"}},
                      Case{"fuyou", {"policy={name: fuyou}", "training.data_parallel=1"}},
                      Case{"tierflow", {"policy={name: tierflow}"}},
                      Case{"tierflow_accumulation", {"policy={name: tierflow}", "training.gradient_accumulation_steps=2"}}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tierflow
