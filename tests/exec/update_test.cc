// The update's per-tensor parts: which elements take AdamW's weight decay (matrices, not vectors,
// as Hugging Face's Trainer groups a Llama's parameters), over one rank's space and over a rank's
// part of every tensor, and the update's learning rate by the schedule.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "ranks.h"
#include "tierflow/models/llm.h"

namespace tierflow::real::exec {
namespace {

models::LlmConfig Small() {
  models::LlmConfig c = models::LlmPreset("tiny").value();
  c.layers = 1;
  return c;
}

TEST(Update, DecayRunsSpareTheNormsOnOneRankAndOnEach) {
  const ParamLayout layout = MakeParamLayout(Small());
  // embed | input_norm q k v o post_norm gate up down | norm lm_head
  const ParamTensor* input_norm = layout.Find("model.layers.0.input_layernorm.weight");
  const ParamTensor* post_norm = layout.Find("model.layers.0.post_attention_layernorm.weight");
  const ParamTensor* final_norm = layout.Find("model.norm.weight");
  ASSERT_TRUE(input_norm && post_norm && final_norm);
  const RankSpace one = RankSpace::Make(layout, 0, 1).value();
  const auto runs = one.DecayRuns(layout, 0, layout.total);
  ASSERT_EQ(runs.size(), 7u);
  const std::vector<std::pair<int64_t, bool>> starts = {{0, true},
                                                        {input_norm->offset, false},
                                                        {input_norm->offset + 256, true},
                                                        {post_norm->offset, false},
                                                        {post_norm->offset + 256, true},
                                                        {final_norm->offset, false},
                                                        {final_norm->offset + 256, true}};
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(runs[i].offset, starts[i].first) << i;
    EXPECT_EQ(runs[i].decay, starts[i].second) << i;
    const int64_t end = i + 1 < runs.size() ? runs[i + 1].offset : layout.total;
    EXPECT_EQ(runs[i].n, end - runs[i].offset) << i;
  }
  // A range inside one norm, and one across a norm's end, offsets from its start.
  const auto inside = one.DecayRuns(layout, input_norm->offset + 10, 20);
  ASSERT_EQ(inside.size(), 1u);
  EXPECT_FALSE(inside[0].decay);
  const auto across = one.DecayRuns(layout, post_norm->offset + 200, 100);
  ASSERT_EQ(across.size(), 2u);
  EXPECT_EQ(across[0].offset, 0);
  EXPECT_EQ(across[0].n, 56);
  EXPECT_FALSE(across[0].decay);
  EXPECT_EQ(across[1].offset, 56);
  EXPECT_TRUE(across[1].decay);
  // Two ranks: each holds half of every tensor, in the same order.
  const RankSpace second = RankSpace::Make(layout, 1, 2).value();
  const auto halves = second.DecayRuns(layout, 0, second.local_total());
  ASSERT_EQ(halves.size(), 7u);
  EXPECT_EQ(halves[1].offset, input_norm->offset / 2);
  EXPECT_EQ(halves[1].n, 128);
  EXPECT_FALSE(halves[1].decay);
}

// With no gradient and fresh moments AdamW moves a weight only by its decay: p (1 - lr wd) on the
// matrices, p unchanged on the norms; the learning rate is the schedule's at the step.
TEST(Update, AdamWDecaysTheMatricesOnlyAtTheSchedulesRate) {
  TrainConfig config;
  config.spec.config = Small();
  config.adam = {.lr = 0.5f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  config.lr_schedule = {.type = "linear", .warmup_steps = 2, .total_steps = 10, .min_lr_ratio = 0};
  const ParamLayout layout = MakeParamLayout(config.spec.config);
  const RankSpace one = RankSpace::Make(layout, 0, 1).value();
  const auto n = static_cast<size_t>(layout.total);
  std::vector<float> p(n, 2.0f), m(n, 0.0f), v(n, 0.0f), g(n, 0.0f);
  CpuThreads threads(2);
  const int64_t step = 2;  // the warm-up's second update: factor 1/2
  AdamWSparingVectors(one, config, layout, 0, layout.total, p.data(), m.data(), v.data(), g.data(), step, 1.0f, threads);
  const float lr = LearningRate(config.lr_schedule, 0.5f, step);
  EXPECT_EQ(lr, 0.25f);
  const float decayed = 2.0f * (1.0f - lr * 0.1f);
  for (const ParamTensor& t : layout.tensors) {
    const float want = t.shape.size() >= 2 ? decayed : 2.0f;
    EXPECT_FLOAT_EQ(p[static_cast<size_t>(t.offset)], want) << t.name;
    EXPECT_FLOAT_EQ(p[static_cast<size_t>(t.offset + t.elements - 1)], want) << t.name;
  }
}

}  // namespace
}  // namespace tierflow::real::exec
