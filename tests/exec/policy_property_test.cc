// The property "every schedule runs": for every policy, every value of every knob the tuner
// searches (one knob at a time, the others at the policy's defaults), and random combinations of
// them, the tiny model either trains to the in-memory loop's weights bit for bit, or is refused
// when it is planned, with an error naming the knob. Nothing is refused mid-run. zero-infinity's
// draws add where DeepSpeed places the update (offload_optimizer nvme, cpu or none, ratio,
// offload_param), and tierflow's tuned knobs include gpu_sub_groups: the update on the GPU.
//
// The combinations also draw small sub-group sizes (2e5, 1e6 elements: 17 and 4 sub-groups of
// tiny), so that caching, the remote tier's placement and the overlapped update work on several
// sub-groups (the tuner's own sizes leave tiny one sub-group), one or two micro-steps and tied or
// untied embeddings. The test prints how many ran and how many were refused, and why.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <utility>
#include <random>

#include "tierflow/policies/policy.h"
#include "tierflow/policies/scenario.h"
#include "tierflow/real/executor.h"
#include "tiny_run.h"

namespace tierflow::real {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kIterations = 2;  // the second iteration reads what the first wrote back
constexpr int kRandomPerPolicy = 5;  // 35 combinations over the seven policies

struct Outcome {
  int ran = 0;
  std::map<std::string, int> refused;  // why -> how many
};

class Property {
 public:
  // Plans and runs `knobs` under `policy`, on the tiny model with `training` (model and training
  // --set overrides: micro-steps, tied embeddings); a failure of the property is a test failure.
  void Check(const std::string& policy, const std::vector<std::pair<std::string, std::string>>& knobs, Outcome* out,
             const std::vector<std::string>& training = {}) {
    std::vector<std::string> sets = training;
    sets.push_back("policy.name=" + policy);
    std::string label = policy;
    for (const std::string& t : training) label += " " + t;
    for (const auto& [k, v] : knobs) {
      sets.push_back("policy." + k + "=" + v);
      label += " " + k + "=" + v;
    }
    const auto& [config, reference] = ReferenceFor(training);
    auto schedule = policies::Plan(LoadTiny(sets));
    if (!schedule.ok()) {
      const std::string why = schedule.status().message();
      EXPECT_EQ(why.rfind("policy.", 0), 0u) << label << ": a refusal names the knob: " << why;
      ++out->refused[why.substr(0, why.find(':'))];
      return;
    }
    const fs::path root = fs::temp_directory_path() / ("tierflow-property-" + std::to_string(::getpid()));
    fs::remove_all(root);
    fs::create_directories(root);
    RunOptions options;
    options.iterations = kIterations;
    options.disk_root = root.string();
    options.storage = "memory";  // the store files in RAM, 4 KiB O_DIRECT rules as a file system
    auto run = RunSchedule(*schedule, config, options);
    fs::remove_all(root);
    ASSERT_TRUE(run.ok()) << label << ": " << run.status().ToString();
    EXPECT_TRUE(run->master.size() == reference.size() &&
                std::memcmp(run->master.data(), reference.data(), reference.size() * sizeof(float)) == 0)
        << label << ": weights differ from the in-memory loop";
    ++out->ran;
  }

 private:
  // The training set-up of `training` and the in-memory loop's weights for it, computed once.
  const std::pair<TrainConfig, std::vector<float>>& ReferenceFor(const std::vector<std::string>& training) {
    auto it = references_.find(training);
    if (it != references_.end()) return it->second;
    const TrainConfig config = ConfigFor(LoadTiny(training));
    auto reference = RunInMemory(config, kIterations);
    TF_CHECK(reference.ok());
    return references_.emplace(training, std::make_pair(config, std::move(reference->master))).first->second;
  }

  std::map<std::vector<std::string>, std::pair<TrainConfig, std::vector<float>>> references_;
};

// The knobs tune searches for `policy`, and for zero-infinity also where DeepSpeed places the
// update (which tune leaves to its user): offload_optimizer, its ratio, offload_param.
std::vector<policies::KnobChoice> KnobsDrawn(const std::string& policy) {
  std::vector<policies::KnobChoice> knobs = policies::TunableKnobs(policy, LoadTiny({"policy.name=" + policy}));
  if (policy == "zero-infinity") {
    knobs.push_back({"offload_optimizer", {"nvme", "cpu", "none"}});
    knobs.push_back({"ratio", {"1", "0.5"}});
    knobs.push_back({"offload_param", {"nvme", "none"}});
  }
  return knobs;
}

void Report(const char* what, const Outcome& o) {
  int refused = 0;
  for (const auto& [why, n] : o.refused) refused += n;
  std::printf("%s: %d ran bit-identical, %d refused at plan time\n", what, o.ran, refused);
  for (const auto& [why, n] : o.refused) std::printf("  %3d  %s\n", n, why.c_str());
}

TEST(EverySchedule, EachTunableKnobValueRunsOrIsRefusedAtPlanTime) {
  Property p;
  Outcome out;
  for (const std::string& policy : policies::PolicyNames()) {
    for (const policies::KnobChoice& knob : KnobsDrawn(policy)) {
      for (const std::string& value : knob.values) p.Check(policy, {{knob.name, value}}, &out);
    }
  }
  Report("one knob at a time", out);
  EXPECT_GT(out.ran, 0);
}

TEST(EverySchedule, RandomCombinationsRunOrAreRefusedAtPlanTime) {
  Property p;
  Outcome out;
  std::mt19937 random(20261124);
  for (const std::string& policy : policies::PolicyNames()) {
    std::vector<policies::KnobChoice> knobs = KnobsDrawn(policy);
    for (policies::KnobChoice& k : knobs) {
      if (k.name == "sub_group_size") k.values.insert(k.values.end(), {"2e5", "1e6"});
    }
    for (int i = 0; i < kRandomPerPolicy; ++i) {
      std::vector<std::pair<std::string, std::string>> combination;
      for (const policies::KnobChoice& k : knobs) {
        combination.emplace_back(k.name, k.values[random() % k.values.size()]);
      }
      // Micro-steps and tied embeddings drawn too: each changes the gradient path.
      const std::vector<std::string> training = {"training.gradient_accumulation_steps=" + std::to_string(1 + random() % 2),
                                                 std::string("model.tied_embeddings=") + (random() % 2 ? "true" : "false")};
      p.Check(policy, combination, &out, training);
    }
  }
  Report("random combinations", out);
  EXPECT_GT(out.ran, 0);
}

}  // namespace
}  // namespace tierflow::real
