// Each family's tiny model — its logits, loss and every parameter gradient — against golden
// outputs of Hugging Face's PyTorch implementation (tests/train/make_golden.py) on the same
// weights and tokens. Each family is a Hugging Face directory under tests/train/data/: its
// config.json, read as `--model-dir` reads it (models::LlmFromHfDir), model.safetensors and
// golden.safetensors.
//
// Error measure, per tensor: rel = max_i |ours_i - ref_i| / max_i |ref_i| (the worst absolute
// error relative to the tensor's scale; elementwise relative error is meaningless for entries
// near 0). Tolerance 1e-4 for fp32 against the fp64 reference.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tierflow/models/llm.h"
#include "tierflow/real/llama.h"
#include "tierflow/real/safetensors.h"

namespace tierflow::real {
namespace {

const std::string kData = std::string(TIERFLOW_SOURCE_DIR) + "/tests/train/data/";
constexpr double kTolerance = 1e-4;

struct Compare {
  double rel = 0;        // max |a - b| / max |b|
  int64_t worst = 0;     // element of the largest |a - b|
  double ours = 0, ref = 0;
};

Compare RelError(const float* ours, const float* ref, int64_t n) {
  Compare c;
  double max_diff = 0, max_ref = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double diff = std::fabs(static_cast<double>(ours[i]) - ref[i]);
    if (diff > max_diff || std::isnan(diff)) {
      max_diff = std::isnan(diff) ? INFINITY : diff;
      c.worst = i;
    }
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref[i])));
  }
  c.rel = max_ref > 0 ? max_diff / max_ref : max_diff;
  c.ours = ours[c.worst];
  c.ref = ref[c.worst];
  return c;
}

class TrainGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainGolden, TinyModelMatchesHuggingFace) {
  const std::string dir = kData + GetParam() + "/";
  auto config = models::LlmFromHfDir(dir);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  const LlamaSpec spec{*config};
  ASSERT_TRUE(ValidateLlamaSpec(spec).ok());
  auto weights = SafetensorsFile::Open(dir + "model.safetensors");
  ASSERT_TRUE(weights.ok()) << weights.status().ToString();
  auto golden = SafetensorsFile::Open(dir + "golden.safetensors");
  ASSERT_TRUE(golden.ok()) << golden.status().ToString();

  auto token_info = golden->Info("tokens");
  ASSERT_TRUE(token_info.ok());
  ASSERT_EQ(token_info->shape.size(), 2u);
  const int64_t batch = token_info->shape[0], seq = token_info->shape[1];
  auto token_values = golden->ReadInts("tokens");
  ASSERT_TRUE(token_values.ok());
  std::vector<int32_t> tokens(token_values->begin(), token_values->end());
  // Hugging Face's labels = input_ids: position t predicts t + 1; the last has no target.
  std::vector<int32_t> targets(tokens.size());
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq; ++t) {
      targets[b * seq + t] = t + 1 < seq ? tokens[b * seq + t + 1] : -1;
    }
  }

  ASSERT_TRUE(ValidateLlamaSequence(spec, seq, "the golden tokens' sequence").ok());
  CpuThreads threads(2);
  Llama model(spec, batch, seq, threads);
  ASSERT_TRUE(LoadLlamaWeights(*weights, model.layout(), model.params().data(), true).ok());
  model.ZeroGrads();
  const double loss = model.ForwardBackward(tokens.data(), targets.data());

  float ref_loss = 0;  // F64 in the file, rounded to fp32: far below the tolerance
  ASSERT_TRUE(golden->ReadF32("loss", &ref_loss, 1).ok());
  const float our_loss = static_cast<float>(loss);

  struct Row {
    std::string name;
    Compare c;
  };
  std::vector<Row> rows;
  rows.push_back({"loss", RelError(&our_loss, &ref_loss, 1)});
  const int64_t vocab = spec.config.vocab;
  std::vector<float> ref_logits(static_cast<size_t>(batch * seq * vocab));
  ASSERT_TRUE(golden->ReadF32("logits", ref_logits.data(), batch * seq * vocab).ok());
  rows.push_back({"logits", RelError(model.logits().data(), ref_logits.data(), batch * seq * vocab)});
  for (const ParamTensor& t : model.layout().tensors) {
    std::vector<float> ref(static_cast<size_t>(t.elements));
    const Status s = golden->ReadF32("grad." + t.name, ref.data(), t.elements);
    ASSERT_TRUE(s.ok()) << s.ToString();
    rows.push_back({"grad." + t.name, RelError(model.grads().data() + t.offset, ref.data(), t.elements)});
  }

  std::printf("%-52s %12s %8s %14s %14s\n", "tensor", "rel_err", "worst", "ours", "reference");
  const Row* worst = &rows[0];
  for (const Row& r : rows) {
    std::printf("%-52s %12.3e %8lld %14.7e %14.7e\n", r.name.c_str(), r.c.rel,
                static_cast<long long>(r.c.worst), r.c.ours, r.c.ref);
    if (r.c.rel > worst->c.rel) worst = &r;
  }
  std::printf("worst tensor: %s, rel_err %.3e at element %lld (tolerance %.0e)\n",
              worst->name.c_str(), worst->c.rel, static_cast<long long>(worst->c.worst),
              kTolerance);
  for (const Row& r : rows) EXPECT_LE(r.c.rel, kTolerance) << r.name;
  // The held-out loss of `tierflow run --eval-every` is the same fp32 forward.
  const float eval_loss = static_cast<float>(EvalLoss(spec, model.params().data(), tokens, targets, batch, seq, threads));
  EXPECT_LE(RelError(&eval_loss, &ref_loss, 1).rel, kTolerance);
}

// llama: Llama 2 style (grouped-query attention, untied, default rotary); llama3: Llama 3.2 style
// (tied, rope_theta 500000, rope scaling llama3); mistral: Mistral (a sliding window the sequence
// fits); qwen2: Qwen2 (q/k/v biases). make_golden.py says how each is made.
INSTANTIATE_TEST_SUITE_P(Families, TrainGolden, ::testing::Values("llama", "llama3", "mistral", "qwen2"));

}  // namespace
}  // namespace tierflow::real
