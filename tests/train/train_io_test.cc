// Safetensors read/write (round trips, Hugging Face names, errors naming file and tensor),
// llm.c token files, the deterministic loader and the byte-level tokenizer.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tierflow/real/adamw.h"
#include "tierflow/real/dataset.h"
#include "tierflow/real/llama.h"
#include "tierflow/real/safetensors.h"
#include "tierflow/real/tokenizer.h"

namespace tierflow::real {
namespace {

std::string TempPath(const std::string& name) {
  const auto dir = std::filesystem::path(TIERFLOW_BINARY_DIR) / "tests" / "train" / "tmp";
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(TrainIo, SafetensorsRoundTripAllFloatDtypes) {
  const std::vector<float> values = {1.0f, -2.5f, 3.140625f, 0.0f, 65504.0f, -1e-3f};
  SafetensorsWriter writer;
  ASSERT_TRUE(writer.AddF32("a.f32", StDtype::kF32, {2, 3}, values.data()).ok());
  ASSERT_TRUE(writer.AddF32("b.bf16", StDtype::kBF16, {6}, values.data()).ok());
  ASSERT_TRUE(writer.AddF32("c.f16", StDtype::kF16, {3, 2}, values.data()).ok());
  EXPECT_FALSE(writer.AddF32("a.f32", StDtype::kF32, {6}, values.data()).ok());  // duplicate
  writer.SetMetadata("format", "pt");
  const std::string path = TempPath("roundtrip.safetensors");
  ASSERT_TRUE(writer.Write(path).ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->Names(), (std::vector<std::string>{"a.f32", "b.bf16", "c.f16"}));
  EXPECT_EQ(file->metadata().at("format"), "pt");
  std::vector<float> out(6);
  ASSERT_TRUE(file->ReadF32("a.f32", out.data(), 6).ok());
  EXPECT_EQ(out, values);
  ASSERT_TRUE(file->ReadF32("b.bf16", out.data(), 6).ok());
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(out[i], Bf16ToFp32(Fp32ToBf16(values[i])));
  ASSERT_TRUE(file->ReadF32("c.f16", out.data(), 6).ok());
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(out[i], Fp16ToFp32(Fp32ToFp16(values[i])));
  EXPECT_EQ(out[4], 65504.0f);
  // The header is 8-byte aligned, as the format recommends.
  std::ifstream in(path, std::ios::binary);
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  EXPECT_EQ(header_len % 8, 0u);
}

TEST(TrainIo, SafetensorsZeroElementTensorsReadIntoNothing) {
  // An empty vector's data() may be null: reading zero elements must not touch it (UBSan checks
  // memcpy's non-null arguments even for zero bytes; the fuzzer found this).
  SafetensorsWriter writer;
  ASSERT_TRUE(writer.AddF32("empty.f32", StDtype::kF32, {0}, nullptr).ok());
  ASSERT_TRUE(writer.AddF32("empty.bf16", StDtype::kBF16, {4, 0}, nullptr).ok());
  const std::string path = TempPath("zero-elements.safetensors");
  ASSERT_TRUE(writer.Write(path).ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_TRUE(file->ReadF32("empty.f32", nullptr, 0).ok());
  EXPECT_TRUE(file->ReadF32("empty.bf16", nullptr, 0).ok());
  EXPECT_FALSE(file->ReadF32("empty.f32", nullptr, 1).ok());  // the count still has to match
}

TEST(TrainIo, SafetensorsErrorsNameFileAndTensor) {
  const std::string path = TempPath("bad.safetensors");
  auto expect_error = [&](const std::string& bytes, const std::string& needle) {
    WriteBytes(path, bytes);
    auto file = SafetensorsFile::Open(path);
    ASSERT_FALSE(file.ok()) << needle;
    EXPECT_NE(file.status().message().find(path), std::string::npos) << file.status().ToString();
    EXPECT_NE(file.status().message().find(needle), std::string::npos) << file.status().ToString();
  };
  auto with_header = [](const std::string& json, size_t data_bytes) {
    std::string out(8, '\0');
    const uint64_t n = json.size();
    std::memcpy(out.data(), &n, 8);
    return out + json + std::string(data_bytes, '\0');
  };
  expect_error("abc", "shorter");
  expect_error(with_header("{", 0), "not a JSON object");
  expect_error(with_header(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4), "'w'");
  expect_error(with_header(R"({"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", 8), "Q4");
  expect_error(with_header(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
               "do not match");
  EXPECT_EQ(SafetensorsFile::Open(TempPath("missing.safetensors")).status().code(),
            StatusCode::kNotFound);

  SafetensorsWriter writer;
  const float one = 1.0f;
  ASSERT_TRUE(writer.AddF32("x", StDtype::kF32, {1}, &one).ok());
  ASSERT_TRUE(writer.Write(path).ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok());
  float out[2];
  const Status wrong_size = file->ReadF32("x", out, 2);
  EXPECT_NE(wrong_size.message().find("'x'"), std::string::npos);
  const Status absent = file->ReadF32("y", out, 1);
  EXPECT_EQ(absent.code(), StatusCode::kNotFound);
  EXPECT_NE(absent.message().find("'y'"), std::string::npos);
}

TEST(TrainIo, LlamaWeightsSaveLoadWithHuggingFaceNames) {
  auto preset = models::LlmPreset("tiny");
  ASSERT_TRUE(preset.ok());
  const ParamLayout layout = MakeParamLayout(*preset);
  EXPECT_EQ(layout.total, models::ParameterCount(*preset));
  EXPECT_NE(layout.Find("model.layers.3.mlp.down_proj.weight"), nullptr);
  EXPECT_NE(layout.Find("lm_head.weight"), nullptr);
  std::vector<float> params(static_cast<size_t>(layout.total));
  InitLlamaParams(layout, params.data(), 7);
  const std::string path = TempPath("tiny.safetensors");
  ASSERT_TRUE(SaveLlamaWeights(path, layout, params.data(), StDtype::kF32).ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok());
  std::vector<float> loaded(params.size());
  ASSERT_TRUE(LoadLlamaWeights(*file, layout, loaded.data(), true).ok());
  EXPECT_EQ(loaded, params);

  // A model with one layer fewer: the file has extra tensors (strict load fails) ...
  models::LlmConfig smaller = *preset;
  smaller.layers = 3;
  const ParamLayout small_layout = MakeParamLayout(smaller);
  std::vector<float> small(static_cast<size_t>(small_layout.total));
  EXPECT_TRUE(LoadLlamaWeights(*file, small_layout, small.data(), false).ok());
  const Status strict = LoadLlamaWeights(*file, small_layout, small.data(), true);
  EXPECT_NE(strict.message().find("model.layers.3."), std::string::npos) << strict.ToString();
  // ... and a model with more layers misses one, named with the file.
  models::LlmConfig larger = *preset;
  larger.layers = 5;
  const ParamLayout large_layout = MakeParamLayout(larger);
  std::vector<float> large(static_cast<size_t>(large_layout.total));
  const Status missing = LoadLlamaWeights(*file, large_layout, large.data());
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("model.layers.4.input_layernorm.weight"), std::string::npos);
  EXPECT_NE(missing.message().find(path), std::string::npos);
}

// The held-out batch is the corpus's last batch * seq + 1 tokens, as windows starting every seq
// tokens; training keeps everything before them.
TEST(TrainIo, TheHeldOutBatchIsTheCorpussLastWindows) {
  std::vector<int32_t> tokens(40);
  for (int32_t i = 0; i < 40; ++i) tokens[static_cast<size_t>(i)] = i;
  auto split = SplitHeldOut(tokens, 2, 4);  // 9 tokens held out: 31..39
  ASSERT_TRUE(split.ok()) << split.status().ToString();
  EXPECT_EQ(split->train.size(), 31u);
  EXPECT_EQ(split->train.back(), 30);
  EXPECT_EQ(split->eval.inputs, (std::vector<int32_t>{31, 32, 33, 34, 35, 36, 37, 38}));
  EXPECT_EQ(split->eval.targets, (std::vector<int32_t>{32, 33, 34, 35, 36, 37, 38, 39}));
  EXPECT_EQ(SplitHeldOut(tokens, 2, 16).status().message(),
            "held-out split: 40 tokens, fewer than the 66 that a held-out batch and a training batch of 2 x 17 tokens need");
}

TEST(TrainIo, TokenFilesU16AndU32) {
  const std::vector<int32_t> small = {0, 1, 255, 65535, 42};
  const std::string p16 = TempPath("small.bin");
  ASSERT_TRUE(WriteTokenFile(p16, small).ok());
  EXPECT_EQ(std::filesystem::file_size(p16), 1024u + 2 * small.size());
  auto r16 = ReadTokenFile(p16);
  ASSERT_TRUE(r16.ok());
  EXPECT_EQ(*r16, small);
  const std::vector<int32_t> wide = {0, 128255, 70000};
  const std::string p32 = TempPath("wide.bin");
  ASSERT_TRUE(WriteTokenFile(p32, wide).ok());
  EXPECT_EQ(std::filesystem::file_size(p32), 1024u + 4 * wide.size());
  auto r32 = ReadTokenFile(p32);
  ASSERT_TRUE(r32.ok());
  EXPECT_EQ(*r32, wide);
  // A truncated file and a wrong magic are errors naming the file.
  std::filesystem::resize_file(p16, 1024 + 3);
  auto truncated = ReadTokenFile(p16);
  EXPECT_EQ(truncated.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(truncated.status().message().find(p16), std::string::npos);
  WriteBytes(p16, std::string(1024, '\x01'));
  EXPECT_EQ(ReadTokenFile(p16).status().code(), StatusCode::kInvalidArgument);
}

TEST(TrainIo, LoaderIsDeterministicAndTargetsAreNextTokens) {
  const std::string corpus = std::string(TIERFLOW_SOURCE_DIR) + "/data/corpus/kjv-genesis.txt";
  std::ifstream in(corpus, std::ios::binary);
  ASSERT_TRUE(in) << corpus;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::vector<int32_t> tokens = ByteEncode(text);
  EXPECT_EQ(ByteDecode(tokens), text);
  EXPECT_GT(tokens.size(), 100000u);

  auto a = TokenLoader::Create(tokens, 4, 64, 123);
  auto b = TokenLoader::Create(tokens, 4, 64, 123);
  auto c = TokenLoader::Create(tokens, 4, 64, 124);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  bool differs = false;
  for (int i = 0; i < 20; ++i) {
    const TokenBatch x = a->Next(), y = b->Next(), z = c->Next();
    EXPECT_EQ(x.inputs, y.inputs);
    EXPECT_EQ(x.targets, y.targets);
    differs = differs || x.inputs != z.inputs;
    for (int64_t r = 0; r < 4; ++r) {
      for (int64_t t = 0; t + 1 < 64; ++t) EXPECT_EQ(x.targets[r * 64 + t], x.inputs[r * 64 + t + 1]);
    }
  }
  EXPECT_TRUE(differs);
  // An epoch visits every window once.
  auto small = TokenLoader::Create(std::vector<int32_t>(101, 0), 2, 10, 1);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->windows(), 10);
  EXPECT_EQ(small->batches_per_epoch(), 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(small->Next().epoch, 0);
  EXPECT_EQ(small->Next().epoch, 1);
  EXPECT_FALSE(TokenLoader::Create(std::vector<int32_t>(10, 0), 2, 10, 1).ok());
}

}  // namespace
}  // namespace tierflow::real
