// Hugging Face model directories in and out: config.json written from an LlmConfig
// (models::LlmToHfConfig) and read back, weights saved as one file or as shards with their index
// (SaveHfModel) and loaded back (LoadHfWeights), save -> load -> save byte for byte,
// a save that replaces only a model, and the loader's errors, each naming the file and the rule.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tierflow/models/llm.h"
#include "tierflow/real/adamw.h"
#include "tierflow/real/cpu_threads.h"
#include "tierflow/real/hf_model.h"
#include "tierflow/real/llama.h"
#include "tierflow/real/safetensors.h"
#include "tierflow/real/storage.h"

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
        for (const auto& [name, bytes] : files) {  // the data starts on a block, the file ends with it
          if (name.find(".safetensors") == std::string::npos || name.find(".json") != std::string::npos) continue;
          auto header = SafetensorsHeader::Parse(bytes, static_cast<int64_t>(bytes.size()), name);
          ASSERT_TRUE(header.ok()) << header.status().ToString();
          EXPECT_EQ(header->data_start() % 4096, 0) << label << " " << name;
          int64_t data_end = 0;
          for (const std::string& t : header->Names()) data_end = std::max(data_end, header->Info(t)->end);
          EXPECT_EQ(header->data_start() + data_end, static_cast<int64_t>(bytes.size())) << label << " " << name;
        }
        if (variant == 0 && shard < 1'000'000) {  // buffered writes give the same bytes
          const fs::path buffered = Scratch("buffered");
          ASSERT_TRUE(SaveHfModel(buffered.string(), c, "", w.data(),
                                  {.dtype = dtype, .max_shard_bytes = shard, .io = {.chunk_bytes = 8192, .direct = false}})
                          .ok());
          EXPECT_EQ(Files(buffered), files) << label;
        }
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
        const Status s = LoadHfWeights(first.string(), layout, loaded.data()).status();
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
  ASSERT_TRUE(LoadHfWeights(dir.string(), MakeParamLayout(c), loaded.data()).ok());
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

// A file whose data sits anywhere but on block boundaries, as other writers leave it: a 3-byte U8
// tensor first (so every later one starts at an odd offset), a tensor the model does not have in
// the middle, the layout's tensors in F32, BF16 and F16 by turns, and one space more of header
// (so that the data itself starts at an odd offset).
fs::path AwkwardFile(const std::string& name, const models::LlmConfig& c, const std::vector<float>& w) {
  const ParamLayout layout = MakeParamLayout(c);
  SafetensorsWriter writer;
  writer.SetMetadata("format", "pt");
  EXPECT_TRUE(writer.AddRaw("extra.odd", StDtype::kU8, {3}, "abc").ok());
  const StDtype dtypes[] = {StDtype::kF32, StDtype::kBF16, StDtype::kF16};
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    const ParamTensor& t = layout.tensors[i];
    EXPECT_TRUE(writer.AddF32(t.name, dtypes[i % 3], t.shape, w.data() + t.offset).ok());
    if (i == layout.tensors.size() / 2) {
      EXPECT_TRUE(writer.AddRaw("extra.gap", StDtype::kU8, {5000}, std::string(5000, 'x')).ok());
    }
  }
  std::string bytes = writer.Serialize();
  uint64_t len = 0;
  std::memcpy(&len, bytes.data(), 8);
  bytes.insert(8 + len, " ");
  ++len;
  std::memcpy(bytes.data(), &len, 8);
  const fs::path dir = Scratch(name);
  fs::create_directories(dir);
  std::ofstream(dir / "model.safetensors", std::ios::binary) << bytes;
  return dir;
}

TEST(HfModel, TheStreamedLoadGivesWhatTheWholeFileHoldsWhateverTheChunksAndTheRange) {
  const models::LlmConfig c = Small(false);
  const ParamLayout layout = MakeParamLayout(c);
  const std::vector<float> w = Weights(c);
  const fs::path dir = AwkwardFile("awkward", c, w);
  auto whole = SafetensorsFile::Open((dir / "model.safetensors").string());
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  std::vector<float> want(w.size());
  ASSERT_TRUE(LoadLlamaWeights(*whole, layout, want.data()).ok());
  ASSERT_NE(want, w);  // the BF16 and F16 tensors were rounded: the file is not the fp32 weights
  const int64_t total = layout.total;
  const int64_t file_bytes = static_cast<int64_t>(fs::file_size(dir / "model.safetensors"));
  const std::pair<int64_t, int64_t> ranges[] = {{0, 1}, {total / 3, 2 * total / 3}, {total - 5, total}, {7, 7}};
  std::vector<std::unique_ptr<Storage>> backends;
  backends.push_back(NewPosixStorage());
  if (auto uring = NewUringStorage(); uring.ok()) backends.push_back(std::move(*uring));
  CpuThreads threads(2);
  auto check = [&](Storage* storage, bool direct, int64_t chunk, int depth, int64_t begin, int64_t end) {
    const std::string label = storage->name() + (direct ? " direct" : " buffered") + " chunk " + std::to_string(chunk) + " depth " +
                              std::to_string(depth) + " [" + std::to_string(begin) + ", " + std::to_string(end) + ")";
    std::vector<float> got(w.size(), 12345.0f);
    const HfIoOptions io{.storage = storage, .chunk_bytes = chunk, .depth = depth, .direct = direct, .threads = &threads};
    auto stats = LoadHfWeights(dir.string(), layout, got.data(), io, begin, end);
    ASSERT_TRUE(stats.ok()) << label << ": " << stats.status().ToString();
    EXPECT_EQ(stats->files, 1);
    // A range reads its own bytes (and a chunk's slack), not the file: what lets a rank read its part.
    if (end - begin < total / 2) EXPECT_LT(stats->bytes_read, file_bytes / 2) << label;
    else EXPECT_GE(stats->bytes_read, file_bytes / 2) << label;
    for (int64_t i = 0; i < total; ++i) ASSERT_EQ(got[i], i >= begin && i < end ? want[i] : 12345.0f) << label << " element " << i;
  };
  for (const auto& storage : backends) {
    for (const bool direct : {true, false}) {
      for (const int64_t chunk : {int64_t{4096}, int64_t{1} << 20}) {
        for (const int depth : {1, 3}) check(storage.get(), direct, chunk, depth, 0, total);
      }
    }
    for (const auto& [begin, end] : ranges) check(storage.get(), true, 8192, 3, begin, end);
  }
  std::vector<float> got(w.size());
  EXPECT_EQ(LoadHfWeights(dir.string(), layout, got.data(), {}, 5, total + 1).status().message(),
            "load the weights of '" + dir.string() + "': the range [5, " + std::to_string(total + 1) +
                ") is not inside the model's " + std::to_string(total) + " parameters");
}

TEST(HfModel, ADiskErrorInTheMiddleOfALoadOrASaveNamesTheFile) {
  const models::LlmConfig c = Small(false);
  const ParamLayout layout = MakeParamLayout(c);
  const std::vector<float> w = Weights(c);
  const fs::path dir = Scratch("faulty");
  ASSERT_TRUE(SaveHfModel(dir.string(), c, "", w.data()).ok());
  std::unique_ptr<Storage> inner = NewPosixStorage();
  std::unique_ptr<FaultInjectingStorage> faulty = NewFaultInjectingStorage(inner.get());
  const std::string file = (dir / "model.safetensors").string();
  for (const FaultKind kind : {FaultKind::kError, FaultKind::kShort}) {
    faulty->ClearRules();
    faulty->AddRule({.kind = kind, .ops = static_cast<uint32_t>(FaultOpMask::kRead), .path_contains = "model.safetensors", .skip = 4,
                     .short_bytes = 100});
    std::vector<float> got(w.size());
    const Status s = LoadHfWeights(dir.string(), layout, got.data(), {.storage = faulty.get(), .chunk_bytes = 8192, .depth = 3}).status();
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("read '" + file + "'"), std::string::npos) << s.ToString();
  }
  // A failed save leaves the model that was there.
  faulty->ClearRules();
  faulty->AddRule({.ops = static_cast<uint32_t>(FaultOpMask::kWrite), .path_contains = "model.safetensors", .skip = 2, .error = 28});
  std::vector<float> changed = w;
  changed[0] += 1;
  const Status s = SaveHfModel(dir.string(), c, "", changed.data(), {.io = {.storage = faulty.get(), .chunk_bytes = 8192}});
  EXPECT_NE(s.message().find("model.safetensors'"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("No space left on device"), std::string::npos) << s.ToString();
  std::vector<float> got(w.size());
  ASSERT_TRUE(LoadHfWeights(dir.string(), layout, got.data()).ok());
  for (size_t i = 0; i < w.size(); ++i) ASSERT_EQ(got[i], Bf16ToFp32(Fp32ToBf16(w[i]))) << i;
  for (const auto& e : fs::directory_iterator(dir.parent_path())) {
    EXPECT_EQ(e.path().filename().string().find("faulty.tmp-"), std::string::npos) << e.path();
  }
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
  auto error = [&](const fs::path& dir) { return LoadHfWeights(dir.string(), layout, out.data()).status().message(); };

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
  EXPECT_NE(LoadHfWeights(two.string(), deeper_layout, more.data()).status().message().find(
                "weight_map has no 'model.layers.2.input_layernorm.weight' (the model needs it)"),
            std::string::npos);
}

}  // namespace
}  // namespace tierflow::real
