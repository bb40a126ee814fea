// LLM architectures: presets and custom dimensions, and what follows from them — per-layer
// tensors, parameter counts, FLOPs of forward, backward and recompute, activation bytes.
//
// All counts are exact integer arithmetic from the dimensions; FLOPs count a multiply-add as 2.
// Thread safety: pure functions and values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tierflow/core/status.h"

namespace YAML {
class Node;
}

namespace tierflow::models {

enum class MlpKind { kSwiGlu, kGelu };           // SwiGLU: gate, up, down; GELU: fc1, fc2
enum class PositionKind { kRotary, kLearned };   // learned adds a [max_seq, hidden] table
enum class NormKind { kRmsNorm, kLayerNorm };    // LayerNorm adds a bias to every norm

struct LlmConfig {
  std::string name;
  int64_t hidden = 0;
  int64_t ffn = 0;        // intermediate size of the MLP
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;   // == heads for multi-head attention, fewer for grouped-query
  int64_t vocab = 0;
  int64_t max_seq = 0;
  MlpKind mlp = MlpKind::kSwiGlu;
  PositionKind position = PositionKind::kRotary;
  bool tied_embeddings = false;  // LM head shares the embedding matrix
  bool attention_bias = false;   // GPT-style biases on the linear layers
  NormKind norm = NormKind::kRmsNorm;  // added with the implementation (additive)
  std::string source;            // where the dimensions come from

  int64_t head_dim() const { return hidden / heads; }
};

struct TensorShape {
  std::string name;             // Hugging Face Llama naming: "model.layers.3.mlp.up_proj.weight"
  std::vector<int64_t> shape;
  int64_t elements() const;
};

// A unit the policies fetch, compute and update as one: the embedding, each decoder layer, and
// the head (final norm + LM head, or only the norm when embeddings are tied).
struct LayerInfo {
  enum class Kind { kEmbedding, kDecoder, kHead };
  Kind kind = Kind::kDecoder;
  int32_t index = 0;            // position in Layers(): 0 = embedding, 1..L decoders, L+1 head
  std::vector<TensorShape> tensors;
  int64_t parameters = 0;
};

StatusOr<LlmConfig> LlmPreset(std::string_view name);  // error lists the known names
std::vector<std::string> LlmPresetNames();
// Accepts {preset: NAME, <overrides>} or all dimensions spelled out; unknown keys are errors.
// Keys: preset, name, source, hidden, ffn, layers, heads, kv_heads, vocab, max_seq,
// mlp (swiglu|gelu), position (rotary|learned), norm (rmsnorm|layernorm), tied_embeddings,
// attention_bias. Errors name the key as "model.<key>". docs/models.md has the format.
StatusOr<LlmConfig> LlmFromYaml(const YAML::Node& node);
// The same from YAML text (parse errors become Statuses); lets callers avoid yaml-cpp.
StatusOr<LlmConfig> LlmFromYamlText(std::string_view yaml_text);
// Every field, spelt out (no preset), as LlmFromYaml reads it back to the same config.
std::string LlmToYaml(const LlmConfig& c);
Status ValidateLlm(const LlmConfig& config);

// The functions below require ValidateLlm(config).ok() (presets and LlmFromYaml results are).
std::vector<LayerInfo> Layers(const LlmConfig& config);
int64_t ParameterCount(const LlmConfig& config);

struct Flops {
  double forward = 0;
  double backward = 0;   // 2x forward for the matmuls (input and weight gradients)
  double recompute = 0;  // forward again under activation checkpointing
};
// FLOPs of one layer (as in Layers()) for `batch` sequences of `seq` tokens, attention scores
// with a causal mask counted at full size (as Megatron and most MFU figures do).
Flops LayerFlops(const LlmConfig& config, const LayerInfo& layer, int64_t batch, int64_t seq,
                 bool activation_checkpointing);
// Bytes of activations one decoder layer keeps for backward, per token, at `dtype_bytes`;
// with checkpointing only the layer input is kept.
// Without checkpointing the attention-probability term grows with the sequence length; this
// form uses config.max_seq (the overload below takes it explicitly). The formula is in
// docs/models.md: Korthikanti et al. 2022 without dropout, generalised to GQA, SwiGLU and
// `dtype_bytes`.
int64_t ActivationBytesPerToken(const LlmConfig& config, int64_t dtype_bytes,
                                bool activation_checkpointing);
int64_t ActivationBytesPerToken(const LlmConfig& config, int64_t dtype_bytes,
                                bool activation_checkpointing, int64_t seq);

// Sum of LayerFlops over all of Layers() (added with the implementation).
Flops ModelFlops(const LlmConfig& config, int64_t batch, int64_t seq,
                 bool activation_checkpointing);

}  // namespace tierflow::models
