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

// How rotary position embeddings stretch their frequencies past the length a model was trained
// at, as Hugging Face's `rope_scaling` (transformers 4) or `rope_parameters` (5) names it:
// none (`default`), `linear` (every inverse frequency divided by factor) or `llama3` (Llama 3.1
// and 3.2: low frequencies divided by factor, high ones kept, the band between blended).
struct RopeScaling {
  enum class Kind { kNone, kLinear, kLlama3 };
  Kind kind = Kind::kNone;
  double factor = 1;             // linear, llama3
  double low_freq_factor = 1;    // llama3
  double high_freq_factor = 4;   // llama3
  int64_t original_max_seq = 0;  // llama3: original_max_position_embeddings
};

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
  bool qkv_bias = false;         // Qwen2's biases on the q, k and v projections only
  NormKind norm = NormKind::kRmsNorm;  // added with the implementation (additive)
  // The constants of the math that no count depends on (the simulator ignores them; the
  // training math and the Hugging Face files need them).
  double norm_eps = 1e-5;        // RMSNorm / LayerNorm epsilon (rms_norm_eps)
  double rope_theta = 10000;     // rotary base (rope_theta; Llama 3: 500000)
  RopeScaling rope_scaling;
  // Mistral's sliding-window attention: a token attends to at most this many before it
  // (itself included); 0 = unlimited. The math runs sequences no longer than the window, where
  // it is plain causal attention.
  int64_t sliding_window = 0;
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
// Keys: preset or hf_dir (a Hugging Face model directory, whose config.json gives the base:
// LlmFromHfDir), name, source, hidden, ffn, layers, heads, kv_heads, vocab, max_seq,
// mlp (swiglu|gelu), position (rotary|learned), norm (rmsnorm|layernorm), tied_embeddings,
// attention_bias, qkv_bias, norm_eps, rope_theta, rope_scaling {type: none|linear|llama3, factor,
// low_freq_factor, high_freq_factor, original_max_seq}, sliding_window. Errors name the key as
// "model.<key>". docs/models.md has the format.
StatusOr<LlmConfig> LlmFromYaml(const YAML::Node& node);
// The same from YAML text (parse errors become Statuses); lets callers avoid yaml-cpp.
StatusOr<LlmConfig> LlmFromYamlText(std::string_view yaml_text);
// Every field, spelt out (no preset), as LlmFromYaml reads it back to the same config
// (rope_scaling and sliding_window only when set).
std::string LlmToYaml(const LlmConfig& c);
// The same fields as the JSON object of a schedule's model section (Schedule::Sections): what
// YamlToJson makes of LlmToYaml's text, written directly.
std::string LlmToJson(const LlmConfig& c);
Status ValidateLlm(const LlmConfig& config);

// The architecture of a Hugging Face config.json as transformers 4 and 5 write it, for the
// families the training math implements: model_type llama (Llama 2, 3, 3.1, 3.2), mistral and
// qwen2 (Qwen2, Qwen2.5: q/k/v biases; its sliding window only with use_sliding_window).
// Reads hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
// num_key_value_heads (default: heads), vocab_size, max_position_embeddings, rms_norm_eps,
// rope_theta and rope_scaling (transformers 4) or rope_parameters (5), tie_word_embeddings,
// sliding_window (mistral), head_dim (must be hidden / heads); refuses, naming the field, any
// other model_type, hidden_act other than silu, attention or MLP biases and other rope types.
// `what` names the file in errors.
StatusOr<LlmConfig> LlmFromHfConfig(std::string_view json_text, std::string_view what);
// The same from DIR/config.json; the config's name is the directory's last component.
StatusOr<LlmConfig> LlmFromHfDir(const std::string& dir);
// The config.json of `config` for transformers (LlamaForCausalLM, or MistralForCausalLM for
// model_type mistral, Qwen2ForCausalLM for qwen2): `base_json` (the input directory's config.json; empty: a fresh Llama
// config) with every key LlmFromHfConfig reads set from `config`, in the base's rope spelling
// (rope_parameters where it has one, else rope_theta and rope_scaling), and its dtype field
// (`dtype`, `torch_dtype`, or torch_dtype when it has neither) set to `dtype` ("bfloat16",
// "float32"). LlmFromHfConfig reads it back to `config`'s architecture; written again from what
// it reads, it is the same text. Refuses a config the Llama form cannot hold (GELU, learned
// positions, LayerNorm, biases).
StatusOr<std::string> LlmToHfConfig(const LlmConfig& config, std::string_view base_json, std::string_view dtype);

// The rotary inverse frequencies of one head, head_dim / 2 of them: theta^(-2j / head_dim),
// then scaled as `scaling` says (transformers' ROPE_INIT_FUNCTIONS). Requires an even
// head_dim > 0 and a scaling ValidateLlm accepts.
std::vector<double> RopeInverseFrequencies(int64_t head_dim, double theta, const RopeScaling& scaling = {});
// Those of a valid config's heads.
std::vector<double> RopeInverseFrequencies(const LlmConfig& config);

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
