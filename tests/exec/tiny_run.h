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

// The scenario's model, batch, sequence, micro-steps, ranks, loss scaling and clipping.
inline TrainConfig ConfigFor(const policies::Scenario& s) {
  TrainConfig c;
  c.spec.config = s.model;
  c.batch = s.training.micro_batch_size;
  c.seq = s.training.sequence_length;
  c.micro_steps = static_cast<int32_t>(s.training.gradient_accumulation_steps);
  c.ranks = s.training.data_parallel;
  c.dynamic_loss_scaling = s.training.loss_scaling == "dynamic";
  c.gradient_clipping = s.training.gradient_clipping;
  std::ifstream in(std::string(TIERFLOW_SOURCE_DIR) + "/data/corpus/kjv-genesis.txt", std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  c.tokens = ByteEncode(text.str());
  c.threads = 2;
  return c;
}

}  // namespace tierflow::real
