// Hugging Face model directories in and out: config.json written from an LlmConfig
// (models::LlmToHfConfig) and read back, weights saved as one file or as shards with their index
// (SaveHfModel) and loaded back (LoadLlamaWeightsFromDir), save -> load -> save byte for byte,
// a save that replaces only a model, and the loader's errors, each naming the file and the rule.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tierflow/models/llm.h"
#include "tierflow/real/adamw.h"
#include "tierflow/real/hf_model.h"
#include "tierflow/real/llama.h"
#include "tierflow/real/safetensors.h"

namespace tierflow::real {
namespace {

namespace fs = std::filesystem;

fs::path Scratch(const std::string& name) {
  const fs::path dir = fs::path(TIERFLOW_BINARY_DIR) / "tests" / "train" / "tmp" / "hf_model" / name;
  fs::remove_all(dir);
  fs::create_directories(dir.parent_path());
  return dir;
}

std::string Slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string ShardName(size_t k, size_t n) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, n);
  return name;
}

// Every file of a directory, by name, with its bytes.
std::map<std::string, std::string> Files(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out[e.path().filename().string()] = Slurp(e.path());
  return out;
}

models::LlmConfig Small(bool tied) {
  models::LlmConfig c = models::LlmPreset("tiny").value();
  c.layers = 2;
  c.tied_embeddings = tied;
  c.rope_theta = 500000;
  c.rope_scaling = {.kind = models::RopeScaling::Kind::kLlama3, .factor = 8, .low_freq_factor = 1,
                    .high_freq_factor = 4, .original_max_seq = 64};
  return c;
}

std::vector<float> Weights(const models::LlmConfig& c) {
  const ParamLayout layout = MakeParamLayout(c);
  std::vector<float> w(static_cast<size_t>(layout.total));
  InitLlamaParams(layout, w.data(), 7, 0.5f);
  return w;
}

TEST(HfModel, ConfigWrittenOutReadsBackToTheSameArchitecture) {
  for (const char* name : {"tiny", "llama3.2-1b", "llama2-70b", "llama3-8b"}) {
    const models::LlmConfig c = models::LlmPreset(name).value();
    auto text = models::LlmToHfConfig(c, "", "bfloat16");
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    auto back = models::LlmFromHfConfig(*text, "config.json");
    ASSERT_TRUE(back.ok()) << name << ": " << back.status().ToString() << "\n" << *text;
    back->name = c.name;
    back->source = c.source;
    EXPECT_EQ(models::LlmToYaml(*back), models::LlmToYaml(c)) << name;
    EXPECT_NE(text->find("\"torch_dtype\": \"bfloat16\""), std::string::npos);
    EXPECT_NE(text->find("\"LlamaForCausalLM\""), std::string::npos);
    auto again = models::LlmToHfConfig(*back, *text, "bfloat16");
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, *text) << name;
  }
  EXPECT_EQ(models::LlmToHfConfig(models::LlmPreset("gpt3-175b").value(), "", "float32").status().message(),
            "model 'gpt3-175b' has no Hugging Face Llama form (it needs mlp swiglu, position rotary, norm rmsnorm, no biases but q, k, "
            "v's)");
  // q/k/v biases make it a Qwen2, whatever the base said.
  models::LlmConfig qwen = models::LlmPreset("tiny").value();
  qwen.qkv_bias = true;
  auto text = models::LlmToHfConfig(qwen, R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"]})", "bfloat16");
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  auto back = models::LlmFromHfConfig(*text, "config.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->qkv_bias);
  EXPECT_NE(text->find("\"Qwen2ForCausalLM\""), std::string::npos);
}

TEST(HfModel, ConfigKeepsTheInputsSpellingAndFields) {
  // transformers 5: rope_parameters and dtype; other keys (token ids) pass through.
  const std::string v5 = R"({"model_type": "mistral", "architectures": ["MistralForCausalLM"], "bos_token_id": 1,
      "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 128, "sliding_window": 32,
      "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}, "dtype": "bfloat16"})";
  auto c = models::LlmFromHfConfig(v5, "in.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  c->layers = 1;  // as a run with `layers: 1` over the directory trains it
  auto text = models::LlmToHfConfig(*c, v5, "float32");
  ASSERT_TRUE(text.ok());
  auto j = nlohmann::json::parse(*text);
  EXPECT_EQ(j["num_hidden_layers"], 1);
  EXPECT_EQ(j["sliding_window"], 32);
  EXPECT_EQ(j["bos_token_id"], 1);
  EXPECT_EQ(j["dtype"], "float32");
  EXPECT_FALSE(j.contains("torch_dtype"));
  EXPECT_FALSE(j.contains("rope_theta"));
  EXPECT_EQ(j["rope_parameters"]["rope_theta"], 1000000.0);
  EXPECT_EQ(j["architectures"][0], "MistralForCausalLM");
}

TEST(HfModel, SaveLoadSaveIsByteIdenticalInOneFileAndInShards) {
  for (int variant = 0; variant < 3; ++variant) {  // untied, tied, untied with q/k/v biases
    const bool tied = variant == 1;
    for (StDtype dtype : {StDtype::kBF16, StDtype::kF32}) {
      models::LlmConfig c = Small(tied);
      c.qkv_bias = variant == 2;
      const std::vector<float> w = Weights(c);
      const ParamLayout layout = MakeParamLayout(c);
      for (int64_t shard : {int64_t{5'000'000'000}, int64_t{300'000}}) {
        const std::string label = std::string(tied ? "tied " : "untied ") + std::string(StDtypeName(dtype)) + " shard " + std::to_string(shard);
        const fs::path first = Scratch("first"), second = Scratch("second");
        ASSERT_TRUE(SaveHfModel(first.string(), c, "", w.data(), {.dtype = dtype, .max_shard_bytes = shard}).ok()) << label;
        const auto files = Files(first);
        if (shard < 1'000'000) {
          ASSERT_GT(files.size(), 3u) << label;
          const size_t n = files.size() - 2;  // besides config.json and the index
          EXPECT_TRUE(files.count("model.safetensors.index.json")) << label;
          EXPECT_TRUE(files.count(ShardName(0, n)) && files.count(ShardName(n - 1, n))) << label;
        } else {
          ASSERT_EQ(files.size(), 2u) << label;  // config.json, model.safetensors
          auto file = SafetensorsFile::Open((first / "model.safetensors").string());
          ASSERT_TRUE(file.ok());
          EXPECT_EQ(file->Has("lm_head.weight"), !tied) << label;  // transformers stores a tied head once
          EXPECT_EQ(file->metadata().at("format"), "pt");
        }
        // Read back: the architecture, and each weight rounded once to the saved dtype.
        auto back = models::LlmFromHfDir(first.string());
        ASSERT_TRUE(back.ok()) << back.status().ToString();
        std::vector<float> loaded(w.size());
        const Status s = LoadLlamaWeightsFromDir(first.string(), layout, loaded.data());
        ASSERT_TRUE(s.ok()) << s.ToString();
        for (size_t i = 0; i < w.size(); ++i) {
          const float want = dtype == StDtype::kF32 ? w[i] : Bf16ToFp32(Fp32ToBf16(w[i]));
          ASSERT_EQ(loaded[i], want) << label << " element " << i;
        }
        ASSERT_TRUE(SaveHfModel(second.string(), *back, Slurp(first / "config.json"), loaded.data(),
                                {.dtype = dtype, .max_shard_bytes = shard})
                        .ok());
        EXPECT_EQ(Files(second), files) << label;
      }
    }
  }
}

TEST(HfModel, ASaveReplacesOnlyAModelAndLeavesNothingBehind) {
  const models::LlmConfig c = Small(false);
  const std::vector<float> w = Weights(c);
  // Its own parent: the other tests' saves run beside it under ctest -j.
  const fs::path dir = Scratch("replace/model");
  fs::remove_all(dir.parent_path());
  fs::create_directories(dir.parent_path());
  ASSERT_TRUE(SaveHfModel(dir.string(), c, "", w.data()).ok());
  std::vector<float> changed = w;
  changed[0] += 1.0f;
  ASSERT_TRUE(SaveHfModel(dir.string() + "/", c, "", changed.data(), {.dtype = StDtype::kF32}).ok());
  std::vector<float> loaded(w.size());
  ASSERT_TRUE(LoadLlamaWeightsFromDir(dir.string(), MakeParamLayout(c), loaded.data()).ok());
  EXPECT_EQ(loaded, changed);
  for (const auto& e : fs::directory_iterator(dir.parent_path())) {
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
    EXPECT_EQ(e.path().filename().string().find(".old-"), std::string::npos) << e.path();
  }
  // A directory of other files is never replaced, nor a file.
  const fs::path other = Scratch("other");
  fs::create_directories(other);
  std::ofstream(other / "notes.txt") << "mine";
  const Status refused = SaveHfModel(other.string(), c, "", w.data());
  EXPECT_EQ(refused.message(), "save model '" + other.string() +
                                   "': the directory holds files but no config.json, so it is not a model a save may replace"
                                   " (give a new directory, or an earlier save's)");
  EXPECT_EQ(Slurp(other / "notes.txt"), "mine");
  EXPECT_EQ(SaveHfModel((other / "notes.txt").string(), c, "", w.data()).message(),
            "save model '" + (other / "notes.txt").string() + "': a file is there, not a directory");
}

// A directory in five shards of at most 1 MB (bf16), which the test below breaks one way each.
fs::path Sharded(const std::string& name, const models::LlmConfig& c) {
  const fs::path dir = Scratch(name);
  const std::vector<float> w = Weights(c);
  EXPECT_TRUE(SaveHfModel(dir.string(), c, "", w.data(), {.max_shard_bytes = 1'000'000}).ok());
  EXPECT_TRUE(fs::exists(dir / ShardName(4, 5)));
  return dir;
}

TEST(HfModel, TheLoaderNamesTheFileAndTheRule) {
  const models::LlmConfig c = Small(false);
  const ParamLayout layout = MakeParamLayout(c);
  std::vector<float> out(static_cast<size_t>(layout.total));
  auto error = [&](const fs::path& dir) { return LoadLlamaWeightsFromDir(dir.string(), layout, out.data()).message(); };

  const fs::path missing_shard = Sharded("missing_shard", c);
  fs::remove(missing_shard / ShardName(1, 5));
  EXPECT_NE(error(missing_shard).find("shard '" + ShardName(1, 5) + "' (of '"), std::string::npos) << error(missing_shard);

  const fs::path outside = Sharded("outside", c);
  std::string index = Slurp(outside / "model.safetensors.index.json");
  index.replace(index.find(ShardName(0, 5)), ShardName(0, 5).size(), "../elsewhere.safetensors");
  std::ofstream(outside / "model.safetensors.index.json", std::ios::trunc) << index;
  EXPECT_NE(error(outside).find("', not a file of the directory (a shard is a plain file name)"), std::string::npos) << error(outside);

  const fs::path truncated = Sharded("truncated", c);
  fs::resize_file(truncated / ShardName(2, 5), 6);
  EXPECT_NE(error(truncated).find(ShardName(2, 5)), std::string::npos) << error(truncated);

  models::LlmConfig wider = c;
  wider.ffn = 704;
  const fs::path shapes = Scratch("shapes");
  const std::vector<float> w = Weights(wider);
  ASSERT_TRUE(SaveHfModel(shapes.string(), wider, "", w.data()).ok());
  EXPECT_NE(error(shapes).find("tensor 'model.layers.0.mlp.gate_proj.weight': shape [704,256], expected [688,256]"), std::string::npos)
      << error(shapes);

  const fs::path empty = Scratch("empty");
  fs::create_directories(empty);
  EXPECT_EQ(error(empty), "Hugging Face model directory '" + empty.string() +
                              "': neither model.safetensors nor model.safetensors.index.json is there");

  models::LlmConfig deeper = c;
  deeper.layers = 3;
  const ParamLayout deeper_layout = MakeParamLayout(deeper);
  std::vector<float> more(static_cast<size_t>(deeper_layout.total));
  const fs::path two = Sharded("two_layers", c);
  EXPECT_NE(LoadLlamaWeightsFromDir(two.string(), deeper_layout, more.data()).message().find(
                "weight_map has no 'model.layers.2.input_layernorm.weight' (the model needs it)"),
            std::string::npos);
}

}  // namespace
}  // namespace tierflow::real
