// Hugging Face config.json files read into LlmConfigs (models::LlmFromHfConfig), as transformers
// 4 and 5 write them, the refusals of what the math does not implement, `model: {hf_dir: DIR}`
// in a scenario, and the rotary inverse frequencies each rope type gives.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <string>

#include <gtest/gtest.h>

#include "tierflow/models/llm.h"

namespace tierflow::models {
namespace {

// The fields every test config shares: a 64-wide, 2-layer model with grouped-query attention.
std::string Config(const std::string& extra, const std::string& model_type = "llama", const std::string& act = "silu") {
  return R"({"model_type": ")" + model_type + R"(", "hidden_size": 64, "intermediate_size": 160,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "vocab_size": 256, "max_position_embeddings": 128, "hidden_act": ")" + act + "\"" +
         (extra.empty() ? "" : ", " + extra) + "}";
}

std::string ErrorOf(const std::string& json) {
  auto c = LlmFromHfConfig(json, "config.json");
  return c.ok() ? "accepted" : c.status().message();
}

TEST(HfConfig, Llama3WithTransformers4RopeScaling) {
  auto c = LlmFromHfConfig(Config(R"("rms_norm_eps": 1e-6, "rope_theta": 500000.0, "tie_word_embeddings": true,
      "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
      "attention_bias": false, "mlp_bias": false, "head_dim": 16)"),
                           "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->name, "llama");
  EXPECT_EQ(c->kv_heads, 2);
  EXPECT_EQ(c->norm_eps, 1e-6);
  EXPECT_EQ(c->rope_theta, 500000.0);
  EXPECT_TRUE(c->tied_embeddings);
  EXPECT_EQ(c->rope_scaling.kind, RopeScaling::Kind::kLlama3);
  EXPECT_EQ(c->rope_scaling.factor, 32.0);
  EXPECT_EQ(c->rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c->rope_scaling.original_max_seq, 8192);
  // transformers before 4.45 wrote "type" for "rope_type".
  auto old = LlmFromHfConfig(Config(R"("rope_scaling": {"type": "linear", "factor": 2.0})"), "config.json");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->rope_scaling.kind, RopeScaling::Kind::kLinear);
  EXPECT_EQ(old->rope_theta, 10000.0);  // LlamaConfig's default
}

TEST(HfConfig, Transformers5RopeParametersAndMistral) {
  auto c = LlmFromHfConfig(Config(R"("rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
      "sliding_window": 4096)",
                                  "mistral"),
                           "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->name, "mistral");
  EXPECT_EQ(c->rope_theta, 1000000.0);
  EXPECT_EQ(c->rope_scaling.kind, RopeScaling::Kind::kNone);
  EXPECT_EQ(c->sliding_window, 4096);
  auto unlimited = LlmFromHfConfig(Config(R"("sliding_window": null)", "mistral"), "config.json");
  ASSERT_TRUE(unlimited.ok());
  EXPECT_EQ(unlimited->sliding_window, 0);
}

TEST(HfConfig, Qwen2HasBiasesOnQKVAndSlidesOnlyWhenItSaysSo) {
  auto c = LlmFromHfConfig(Config(R"("sliding_window": 32, "use_sliding_window": false, "tie_word_embeddings": true)", "qwen2"),
                           "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_EQ(c->sliding_window, 0);
  const std::vector<LayerInfo> layers = Layers(*c);
  std::vector<std::string> names;
  for (const TensorShape& t : layers[1].tensors) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"model.layers.0.input_layernorm.weight", "model.layers.0.self_attn.q_proj.weight",
                                             "model.layers.0.self_attn.q_proj.bias", "model.layers.0.self_attn.k_proj.weight",
                                             "model.layers.0.self_attn.k_proj.bias", "model.layers.0.self_attn.v_proj.weight",
                                             "model.layers.0.self_attn.v_proj.bias", "model.layers.0.self_attn.o_proj.weight",
                                             "model.layers.0.post_attention_layernorm.weight", "model.layers.0.mlp.gate_proj.weight",
                                             "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight"}));
  auto sliding = LlmFromHfConfig(Config(R"("sliding_window": 32, "use_sliding_window": true)", "qwen2"), "config.json");
  ASSERT_TRUE(sliding.ok());
  EXPECT_EQ(sliding->sliding_window, 32);
}

TEST(HfConfig, RefusesWhatTheMathDoesNotImplementNamingTheField) {
  EXPECT_EQ(ErrorOf(Config("", "gemma")),
            "'config.json': 'model_type' 'gemma' is not supported (llama, mistral and qwen2 are: Llama 2, 3, 3.1, 3.2, Mistral, Qwen2 and "
            "Qwen2.5)");
  EXPECT_EQ(ErrorOf(Config(R"("rope_scaling": {"rope_type": "yarn", "factor": 4.0})")),
            "'config.json': 'rope_scaling' type 'yarn' is not supported (default, linear and llama3 are)");
  EXPECT_EQ(ErrorOf(Config(R"("rope_parameters": {"rope_type": "llama3", "factor": 8.0})")),
            "'config.json': 'rope_parameters.low_freq_factor' is missing (rope type llama3)");
  EXPECT_EQ(ErrorOf(Config(R"("attention_bias": true)")),
            "'config.json': 'attention_bias' true is not supported (the math has biases on q, k and v only, as Qwen2's)");
  EXPECT_EQ(ErrorOf(Config("", "llama", "gelu")),
            "'config.json': 'hidden_act' 'gelu' is not supported (the SwiGLU MLP uses silu)");
  EXPECT_EQ(ErrorOf(Config(R"("head_dim": 32)")),
            "'config.json': 'head_dim' 32 is not hidden_size / num_attention_heads (a head_dim of its own is not supported)");
  EXPECT_EQ(ErrorOf(R"({"model_type": "llama", "hidden_size": 64})"), "'config.json': 'intermediate_size' is missing");
  EXPECT_NE(ErrorOf(Config(R"("vocab_size": 512)")).find("key 'vocab_size' appears twice"), std::string::npos);
  EXPECT_EQ(ErrorOf(R"({"model_type": "llama", "hidden_size": 64.5})"), "'config.json': 'hidden_size' must be an integer");
  EXPECT_EQ(ErrorOf("[1, 2]"), "'config.json': not a JSON object");
  EXPECT_NE(ErrorOf("{\"model_type\": ").find("not valid JSON"), std::string::npos);
  EXPECT_EQ(ErrorOf(Config(R"("rope_scaling": {"rope_type": "linear", "factor": 0.5})")),
            "'config.json': model 'llama': rope_scaling.factor must be a finite number >= 1");
}

// The Llama 3 scaling by its definition (transformers' _compute_llama3_parameters): wavelengths
// under original / high_freq_factor kept, over original / low_freq_factor divided by factor,
// the band between blended.
TEST(HfConfig, RopeInverseFrequenciesOfEachType) {
  const int64_t dim = 64;
  const std::vector<double> plain = RopeInverseFrequencies(dim, 500000.0);
  ASSERT_EQ(plain.size(), 32u);
  EXPECT_EQ(plain[0], 1.0);
  EXPECT_DOUBLE_EQ(plain[16], 1.0 / std::sqrt(500000.0));
  const std::vector<double> linear = RopeInverseFrequencies(dim, 500000.0, {.kind = RopeScaling::Kind::kLinear, .factor = 4});
  for (size_t j = 0; j < plain.size(); ++j) EXPECT_DOUBLE_EQ(linear[j], plain[j] / 4);
  const RopeScaling llama3{.kind = RopeScaling::Kind::kLlama3, .factor = 32, .low_freq_factor = 1,
                           .high_freq_factor = 4, .original_max_seq = 8192};
  const std::vector<double> scaled = RopeInverseFrequencies(dim, 500000.0, llama3);
  int kept = 0, stretched = 0, blended = 0;
  for (size_t j = 0; j < plain.size(); ++j) {
    const double wavelen = 2 * std::numbers::pi / plain[j];
    if (wavelen < 8192.0 / 4) {
      EXPECT_EQ(scaled[j], plain[j]) << j;
      ++kept;
    } else if (wavelen > 8192.0) {
      EXPECT_DOUBLE_EQ(scaled[j], plain[j] / 32) << j;
      ++stretched;
    } else {
      const double s = (8192.0 / wavelen - 1) / (4 - 1);
      EXPECT_DOUBLE_EQ(scaled[j], (1 - s) * plain[j] / 32 + s * plain[j]) << j;
      EXPECT_LT(scaled[j], plain[j]);
      EXPECT_GT(scaled[j], plain[j] / 32);
      ++blended;
    }
  }
  // Llama 3.2's head: every kind of frequency occurs.
  EXPECT_GT(kept, 0);
  EXPECT_GT(stretched, 0);
  EXPECT_GT(blended, 0);
}

TEST(HfConfig, AScenarioModelFromADirectoryWithOverrides) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "hf_config_test" / "Tiny-Llama-3";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << Config(R"("rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3",
      "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64})");
  auto c = LlmFromYamlText("{hf_dir: '" + dir.string() + "/', layers: 1}");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->name, "Tiny-Llama-3");
  EXPECT_EQ(c->layers, 1);
  EXPECT_EQ(c->hidden, 64);
  EXPECT_EQ(c->rope_scaling.kind, RopeScaling::Kind::kLlama3);
  EXPECT_NE(c->source.find("overridden: layers"), std::string::npos);
  // Written out, it reads back without the directory.
  auto back = LlmFromYamlText(LlmToYaml(*c));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(LlmToYaml(*back), LlmToYaml(*c));

  EXPECT_EQ(LlmFromYamlText("{hf_dir: " + dir.string() + ", preset: tiny}").status().message(),
            "model.hf_dir: give a preset or a Hugging Face directory, not both");
  const std::string missing = LlmFromYamlText("{hf_dir: " + (dir / "nope").string() + "}").status().message();
  EXPECT_NE(missing.find("model.hf_dir: Hugging Face model directory '"), std::string::npos) << missing;
  EXPECT_NE(missing.find("': not a directory"), std::string::npos) << missing;
  const std::filesystem::path empty = dir.parent_path() / "empty";
  std::filesystem::create_directories(empty);
  EXPECT_NE(LlmFromYamlText("{hf_dir: " + empty.string() + "}").status().message().find("config.json': cannot open it"),
            std::string::npos);
}

TEST(HfConfig, ScalingInAScenarioIsCheckedAndOverridable) {
  auto c = LlmFromYamlText("{preset: llama3.2-1b, rope_scaling: {factor: 8}}");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope_scaling.kind, RopeScaling::Kind::kLlama3);  // the preset's, one field changed
  EXPECT_EQ(c->rope_scaling.factor, 8);
  EXPECT_EQ(c->rope_scaling.original_max_seq, 8192);
  auto none = LlmFromYamlText("{preset: llama3.2-1b, rope_scaling: null}");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->rope_scaling.kind, RopeScaling::Kind::kNone);
  EXPECT_EQ(LlmFromYamlText("{preset: tiny, rope_scaling: {type: yarn}}").status().message(),
            "model.rope_scaling.type: 'yarn' is not one of none, linear, llama3");
  EXPECT_EQ(LlmFromYamlText("{preset: tiny, rope_scaling: {type: llama3, factor: 8}}").status().message(),
            "model 'tiny': rope_scaling llama3 needs original_max_seq > 0 (original_max_position_embeddings)");
  EXPECT_EQ(LlmFromYamlText("{preset: tiny, rope_scaling: {factor: 8}}").status().message(),
            "model.rope_scaling.type: missing (none, linear or llama3; the model has no scaling to change)");
  EXPECT_EQ(LlmFromYamlText("{preset: tiny, rope_theta: 0.5}").status().message(),
            "model 'tiny': rope_theta 0.5 must be a number in (1, 1e12]");
  EXPECT_EQ(LlmFromYamlText("{preset: tiny, rope_theta: 1e308}").status().message(),
            "model 'tiny': rope_theta 1e+308 must be a number in (1, 1e12]");
  EXPECT_EQ(LlmFromYamlText("{preset: tiny, norm_eps: 2147483648}").status().message(),
            "model 'tiny': norm_eps 2147483648 must be a number in (0, 1]");
  EXPECT_EQ(LlmFromYamlText("{preset: tiny, norm_eps: x}").status().message(),
            "model.norm_eps: 'x' is not a number (a plain ratio, no unit)");
}

}  // namespace
}  // namespace tierflow::models
