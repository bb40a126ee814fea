// The tiny scenario as the executor tests run it: scenarios/tiny-cpu.yaml at sequence 32 (a
// quarter of the work, the same code paths), and the training set-up it implies on the shipped
// corpus, with two compute threads.
#pragma once

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tierflow/policies/scenario.h"
#include "tierflow/real/executor.h"
#include "tierflow/real/tokenizer.h"

namespace tierflow::real {

inline policies::Scenario LoadTiny(std::vector<std::string> sets) {
  sets.push_back("training.sequence_length=32");
  auto s = policies::LoadScenarioFile(std::string(TIERFLOW_SOURCE_DIR) + "/scenarios/tiny-cpu.yaml", sets);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

// The scenario's training set-up (TrainConfigFor) on the shipped corpus.
inline TrainConfig ConfigFor(const policies::Scenario& s) {
  TrainConfig c = TrainConfigFor(s.model, s.training);
  std::ifstream in(std::string(TIERFLOW_SOURCE_DIR) + "/data/corpus/kjv-genesis.txt", std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  c.tokens = ByteEncode(text.str());
  c.threads = 2;
  return c;
}

}  // namespace tierflow::real
