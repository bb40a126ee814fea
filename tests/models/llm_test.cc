// LLM architectures: parameter counts against ranges and hand-worked closed forms, tensor
// naming, FLOPs against closed forms, activation bytes, and YAML errors.
#include "tierflow/models/llm.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <string>
#include <utility>
#include <vector>

namespace tierflow::models {
namespace {

LlmConfig Preset(const std::string& name) {
  auto p = LlmPreset(name);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.value();
}

// Llama layout (SwiGLU, RMSNorm, rotary, no biases), written out from the architecture, not from
// the implementation: per layer two norms, q/k/v/o and three MLP matrices; the embedding; the
// final norm; the LM head unless tied.
int64_t LlamaClosedForm(int64_t h, int64_t ffn, int64_t layers, int64_t heads, int64_t kv_heads,
                        int64_t vocab, bool tied) {
  const int64_t head_dim = h / heads;
  const int64_t per_layer = 2 * h                          // input and post-attention norms
                            + h * h                        // q_proj
                            + 2 * h * kv_heads * head_dim  // k_proj, v_proj
                            + h * h                        // o_proj
                            + 3 * h * ffn;                 // gate, up, down
  return layers * per_layer + vocab * h + h + (tied ? 0 : vocab * h);
}

TEST(LlmTest, Llama2_70bHasAbout69BParameters) {
  const int64_t n = ParameterCount(Preset("llama2-70b"));
  EXPECT_GE(n, 68'900'000'000);
  EXPECT_LE(n, 69'100'000'000);
}

TEST(LlmTest, Llama3_8bHasAbout8BParameters) {
  const int64_t n = ParameterCount(Preset("llama3-8b"));
  EXPECT_GE(n, 8'000'000'000);
  EXPECT_LE(n, 8'100'000'000);
}

TEST(LlmTest, TinyMatchesHandCount) {
  // tiny: 4 layers, hidden 256, ffn 688, 4 heads (head_dim 64), 4 kv heads, vocab 256, untied.
  const int64_t h = 256, ffn = 688, vocab = 256;
  const int64_t attention = 4 * h * h;  // q, k, v, o all [256, 256]
  const int64_t mlp = 3 * h * ffn;      // gate, up [688, 256]; down [256, 688]
  const int64_t norms = 2 * h;
  const int64_t expected = 4 * (attention + mlp + norms) + vocab * h /*embed*/ + h /*final norm*/ +
                           vocab * h /*lm_head*/;
  const LlmConfig tiny = Preset("tiny");
  EXPECT_EQ(tiny.layers, 4);
  EXPECT_EQ(tiny.max_seq, 128);
  EXPECT_EQ(ParameterCount(tiny), expected);
}

TEST(LlmTest, LlamaPresetsMatchTheClosedForm) {
  for (const std::string& name : LlmPresetNames()) {
    const LlmConfig c = Preset(name);
    if (c.mlp != MlpKind::kSwiGlu || c.attention_bias || c.norm != NormKind::kRmsNorm ||
        c.position != PositionKind::kRotary) {
      continue;
    }
    EXPECT_EQ(ParameterCount(c), LlamaClosedForm(c.hidden, c.ffn, c.layers, c.heads, c.kv_heads,
                                                 c.vocab, c.tied_embeddings))
        << name;
  }
}

TEST(LlmTest, MlpOffload40bMatchesTheirRunLog) {
  // MLP-Offload's artifact log for its 40B run (Megatron-DeepSpeed, 4 kv heads, vocab 50304):
  // "number of parameters on (tensor, pipeline) model parallel rank (0, 0): 48163722240".
  EXPECT_EQ(ParameterCount(Preset("mlp-offload-40b")), 48'163'722'240);
}

TEST(LlmTest, LiteraturePresetsAreNearTheirNames) {
  const struct {
    const char* name;
    double billions;
    double tolerance;  // the readings documented in llm.cc
  } cases[] = {{"llama2-7b", 6.74, 0.01},   {"llama2-13b", 13.0, 0.05}, {"llama3-70b", 70.6, 0.05},
               {"llama3.2-1b", 1.24, 0.01}, {"gpt3-175b", 174.6, 0.1},  {"gpt-40b", 40.8, 0.1},
               {"gpt-52b", 52.3, 0.1},      {"gpt-100b", 106.9, 0.1},   {"gpt-120b", 125.9, 0.1}};
  for (const auto& c : cases) {
    EXPECT_NEAR(static_cast<double>(ParameterCount(Preset(c.name))) / 1e9, c.billions, c.tolerance)
        << c.name;
  }
}

TEST(LlmTest, Gpt3UsesGpt2LayoutWithBiases) {
  // Hand count: per layer 12 h^2 weights + 13 h biases (qkv 3h, o h, fc1 4h, fc2 h, two
  // LayerNorms 4h); token and position tables; final LayerNorm 2h; head tied.
  const int64_t h = 12288;
  const int64_t expected = 96 * (12 * h * h + 13 * h) + 50257 * h + 2048 * h + 2 * h;
  EXPECT_EQ(ParameterCount(Preset("gpt3-175b")), expected);
}

TEST(LlmTest, LayersFollowHuggingFaceNaming) {
  const LlmConfig c = Preset("llama3-8b");
  const auto layers = Layers(c);
  ASSERT_EQ(layers.size(), static_cast<size_t>(c.layers + 2));
  EXPECT_EQ(layers.front().kind, LayerInfo::Kind::kEmbedding);
  EXPECT_EQ(layers.back().kind, LayerInfo::Kind::kHead);
  for (size_t i = 0; i < layers.size(); ++i) EXPECT_EQ(layers[i].index, static_cast<int32_t>(i));
  EXPECT_EQ(layers[0].tensors.at(0).name, "model.embed_tokens.weight");
  EXPECT_EQ(layers[0].tensors.at(0).shape, (std::vector<int64_t>{128256, 4096}));

  const LayerInfo& l3 = layers[4];  // decoder index 3
  ASSERT_EQ(l3.tensors.size(), 9u);
  bool found_up = false, found_k = false;
  int64_t sum = 0;
  for (const auto& t : l3.tensors) {
    sum += t.elements();
    if (t.name == "model.layers.3.mlp.up_proj.weight") {
      found_up = true;
      EXPECT_EQ(t.shape, (std::vector<int64_t>{14336, 4096}));
    }
    if (t.name == "model.layers.3.self_attn.k_proj.weight") {
      found_k = true;
      EXPECT_EQ(t.shape, (std::vector<int64_t>{8 * 128, 4096}));
    }
  }
  EXPECT_TRUE(found_up);
  EXPECT_TRUE(found_k);
  EXPECT_EQ(l3.parameters, sum);

  EXPECT_EQ(layers.back().tensors.at(0).name, "model.norm.weight");
  EXPECT_EQ(layers.back().tensors.at(1).name, "lm_head.weight");
}

TEST(LlmTest, TiedEmbeddingsHaveNoLmHead) {
  const auto layers = Layers(Preset("llama3.2-1b"));
  ASSERT_EQ(layers.back().tensors.size(), 1u);
  EXPECT_EQ(layers.back().tensors[0].name, "model.norm.weight");
  EXPECT_EQ(layers.back().parameters, 2048);
}

TEST(LlmTest, FlopsMatchHandWorkedLlama2_7b) {
  // Llama-2-7B, batch 2, seq 1024: multi-head, so q, k, v, o are each h x h.
  const LlmConfig c = Preset("llama2-7b");
  const double b = 2, s = 1024, h = 4096, ffn = 11008, vocab = 32000, layers = 32;
  const double tokens = b * s;
  const double decoder_fwd = 2 * tokens * (4 * h * h)      // q, k, v, o projections
                             + 2 * tokens * (3 * h * ffn)  // gate, up, down
                             + 2 * 2 * b * s * s * h;      // QK^T and AV at full size
  const double head_fwd = 2 * tokens * h * vocab;

  const auto layer_list = Layers(c);
  Flops dec = LayerFlops(c, layer_list[1], 2, 1024, /*activation_checkpointing=*/true);
  EXPECT_DOUBLE_EQ(dec.forward, decoder_fwd);
  EXPECT_DOUBLE_EQ(dec.backward, 2 * decoder_fwd);
  EXPECT_DOUBLE_EQ(dec.recompute, decoder_fwd);
  Flops dec_nockpt = LayerFlops(c, layer_list[1], 2, 1024, false);
  EXPECT_DOUBLE_EQ(dec_nockpt.recompute, 0.0);

  Flops emb = LayerFlops(c, layer_list[0], 2, 1024, true);
  EXPECT_DOUBLE_EQ(emb.forward + emb.backward + emb.recompute, 0.0);

  Flops total = ModelFlops(c, 2, 1024, true);
  EXPECT_DOUBLE_EQ(total.forward, layers * decoder_fwd + head_fwd);
  EXPECT_DOUBLE_EQ(total.backward, 2 * (layers * decoder_fwd + head_fwd));
  EXPECT_DOUBLE_EQ(total.recompute, layers * decoder_fwd);
}

TEST(LlmTest, ForwardFlopsAreTwicePerMatmulWeightPerTokenPlusAttention) {
  // The textbook form: forward = 2 x tokens x (matmul weights, LM head included even when tied)
  // + 4 b s^2 (heads x head_dim) per layer. Checks GQA (llama3-8b) and tied (llama3.2-1b).
  for (const char* name : {"llama3-8b", "llama3.2-1b", "gpt-40b"}) {
    const LlmConfig c = Preset(name);
    const double b = 3, s = 512;
    double matmul_weights = 0;
    for (const auto& l : Layers(c)) {
      if (l.kind != LayerInfo::Kind::kDecoder) continue;
      for (const auto& t : l.tensors) {
        if (t.shape.size() == 2) matmul_weights += static_cast<double>(t.elements());
      }
    }
    matmul_weights += static_cast<double>(c.vocab * c.hidden);
    const double attention =
        static_cast<double>(c.layers) * 4 * b * s * s * static_cast<double>(c.heads * c.head_dim());
    const double expected = 2 * b * s * matmul_weights + attention;
    EXPECT_NEAR(ModelFlops(c, 3, 512, false).forward / expected, 1.0, 1e-12) << name;
  }
}

TEST(LlmTest, ActivationBytesPerToken) {
  const LlmConfig c = Preset("llama2-7b");
  EXPECT_EQ(ActivationBytesPerToken(c, 2, true), 4096 * 2);
  EXPECT_EQ(ActivationBytesPerToken(c, 4, true), 4096 * 4);

  // GPT-style layer (multi-head, GELU, ffn = 4h) in 16-bit: Korthikanti et al. give
  // 34 h + 5 a s bytes per token with dropout; without dropout (2h + 3as less) 32 h + 2 a s.
  LlmConfig g = c;
  g.mlp = MlpKind::kGelu;
  g.ffn = 4 * g.hidden;
  g.kv_heads = g.heads;
  const int64_t h = g.hidden, a = g.heads, s = 2048;
  EXPECT_EQ(ActivationBytesPerToken(g, 2, false, s), 32 * h + 2 * a * s);
  // The short form uses max_seq.
  EXPECT_EQ(ActivationBytesPerToken(g, 2, false), 32 * h + 2 * a * g.max_seq);
  // SwiGLU keeps one more ffn-wide tensor than GELU.
  LlmConfig sw = g;
  sw.mlp = MlpKind::kSwiGlu;
  EXPECT_EQ(ActivationBytesPerToken(sw, 2, false, s) - ActivationBytesPerToken(g, 2, false, s),
            2 * sw.ffn);
}

// --- YAML ---

StatusOr<LlmConfig> FromText(const std::string& text) { return LlmFromYamlText(text); }

TEST(LlmYamlTest, PresetWithOverrides) {
  auto c = FromText("{preset: llama2-7b, layers: 2, max_seq: 1024}");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->layers, 2);
  EXPECT_EQ(c->max_seq, 1024);
  EXPECT_EQ(c->hidden, 4096);
  EXPECT_NE(c->source.find("overridden: layers, max_seq"), std::string::npos) << c->source;
  EXPECT_EQ(ParameterCount(c.value()),
            LlamaClosedForm(4096, 11008, 2, 32, 32, 32000, /*tied=*/false));
}

TEST(LlmYamlTest, PresetAlone) {
  YAML::Node node = YAML::Load("preset: llama2-70b");
  auto c = LlmFromYaml(node);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(ParameterCount(c.value()), ParameterCount(Preset("llama2-70b")));
}

TEST(LlmYamlTest, AllDimensions) {
  auto c = FromText(
      "name: mini\nhidden: 512\nffn: 1024\nlayers: 3\nheads: 8\nkv_heads: 2\nvocab: 1000\n"
      "max_seq: 256\nmlp: gelu\nnorm: layernorm\nposition: learned\ntied_embeddings: true\n"
      "attention_bias: true\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->name, "mini");
  EXPECT_EQ(c->kv_heads, 2);
  EXPECT_EQ(c->mlp, MlpKind::kGelu);
  EXPECT_EQ(c->norm, NormKind::kLayerNorm);
  EXPECT_EQ(c->position, PositionKind::kLearned);
  EXPECT_TRUE(c->tied_embeddings);
  EXPECT_TRUE(c->attention_bias);
  // Hand count: kv_dim = 2 x 64 = 128.
  const int64_t h = 512, kv = 128, ffn = 1024;
  const int64_t layer = 2 * 2 * h                                        // two LayerNorms with bias
                        + (h * h + h) + 2 * (h * kv + kv) + (h * h + h)  // q, k, v, o + biases
                        + (h * ffn + ffn) + (ffn * h + h);               // fc1, fc2 + biases
  EXPECT_EQ(ParameterCount(c.value()), 3 * layer + 1000 * h + 256 * h + 2 * h);
}

TEST(LlmYamlTest, CustomWithoutKvHeadsIsMultiHead) {
  auto c = FromText("{hidden: 64, ffn: 128, layers: 1, heads: 4, vocab: 10, max_seq: 8}");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->kv_heads, 4);
}

void ExpectError(const std::string& text, const std::vector<std::string>& fragments) {
  auto c = FromText(text);
  ASSERT_FALSE(c.ok()) << text;
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << c.status().ToString();
  for (const auto& f : fragments) {
    EXPECT_NE(c.status().message().find(f), std::string::npos)
        << "message '" << c.status().message() << "' lacks '" << f << "'";
  }
}

TEST(LlmYamlTest, UnknownKeyIsNamed) {
  ExpectError("{preset: llama2-7b, hiden: 4096}", {"model.hiden", "unknown key", "hidden"});
}

TEST(LlmYamlTest, NegativeAndZeroDimsAreNamed) {
  ExpectError("{preset: llama2-7b, hidden: -4096}", {"model.hidden: '-4096' is below 1 (an integer from 1 to 1048576)"});
  ExpectError("{preset: llama2-7b, layers: 0}", {"model.layers: '0' is below 1 (an integer from 1 to 10000)"});
  ExpectError("{preset: llama2-7b, layers: 1e300}", {"model.layers: '1e300' is above 10000 (an integer from 1 to 10000)"});
}

TEST(LlmYamlTest, UnknownPresetListsKnownOnes) {
  ExpectError("{preset: llama9-1t}", {"model.preset", "llama9-1t", "llama2-70b", "tiny"});
}

TEST(LlmYamlTest, MissingDimensionIsNamed) {
  ExpectError("{hidden: 64, layers: 1, heads: 4, vocab: 10, max_seq: 8}", {"model.ffn", "missing"});
}

TEST(LlmYamlTest, MalformedValuesAreNamed) {
  ExpectError("{preset: tiny, hidden: big}", {"model.hidden", "'big'", "integer"});
  ExpectError("{preset: tiny, mlp: relu}", {"model.mlp", "relu", "swiglu"});
  ExpectError("{preset: tiny, tied_embeddings: maybe}", {"model.tied_embeddings"});
  ExpectError("{preset: tiny, hidden: [1, 2]}", {"model.hidden", "a list"});
  ExpectError("[1, 2]", {"model", "expected a map"});
  ExpectError("{preset: tiny, hidden: 250}", {"hidden 250", "heads 4"});
  ExpectError("{preset: tiny, kv_heads: 3}", {"kv_heads 3"});
  ExpectError("{preset: tiny", {"model: not valid YAML"});
}

TEST(LlmTest, UnknownPresetIsNotFound) {
  auto p = LlmPreset("nope");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kNotFound);
  EXPECT_NE(p.status().message().find("llama3-8b"), std::string::npos);
}

// What a Hugging Face user types: the model's id, its repository name, a case variant.
TEST(LlmTest, HuggingFaceIdsAndVariantsNameTheirPreset) {
  for (const auto& [typed, preset] : std::vector<std::pair<std::string, std::string>>{
           {"meta-llama/Llama-2-7b-hf", "llama2-7b"}, {"Llama-2-7b-hf", "llama2-7b"}, {"llama2-7B", "llama2-7b"},
           {"Llama-2-7b", "llama2-7b"}, {"meta-llama/Meta-Llama-3-8B", "llama3-8b"}, {"Meta-Llama-3-8B", "llama3-8b"},
           {"meta-llama/Llama-3.2-1B", "llama3.2-1b"}, {"LLAMA2-70B", "llama2-70b"}, {"GPT3-175B", "gpt3-175b"}}) {
    auto p = LlmPreset(typed);
    ASSERT_TRUE(p.ok()) << typed << ": " << p.status().ToString();
    EXPECT_EQ(p->name, preset) << typed;
  }
  auto p = LlmPreset("meta-llama/Llama-9-1t");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("llama2-7b (meta-llama/Llama-2-7b-hf)"), std::string::npos) << p.status().message();
}

TEST(LlmTest, EveryPresetValidatesAndCitesASource) {
  const auto names = LlmPresetNames();
  EXPECT_GE(names.size(), 12u);
  for (const auto& name : names) {
    const LlmConfig c = Preset(name);
    EXPECT_TRUE(ValidateLlm(c).ok()) << name << ": " << ValidateLlm(c).ToString();
    EXPECT_FALSE(c.source.empty()) << name;
    EXPECT_EQ(c.name, name);
  }
}

}  // namespace
}  // namespace tierflow::models
