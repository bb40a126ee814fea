#include "tierflow/models/llm.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <iterator>
#include <numbers>
#include <string>

#include "tierflow/core/text.h"
#include "tierflow/models/yaml_tree.h"
#include "doc.h"
#include "yaml_fields.h"

namespace tierflow::models {
namespace {

// Presets. Parameter counts in the comments are what ParameterCount() gives for these dims
// (tests/models/llm_test.cc re-derives the ones the tests pin down).
LlmConfig Llama(std::string name, int64_t hidden, int64_t ffn, int64_t layers, int64_t heads,
                int64_t kv_heads, int64_t vocab, int64_t max_seq, bool tied, std::string source) {
  LlmConfig c;
  c.name = std::move(name);
  c.hidden = hidden;
  c.ffn = ffn;
  c.layers = layers;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.vocab = vocab;
  c.max_seq = max_seq;
  c.mlp = MlpKind::kSwiGlu;
  c.position = PositionKind::kRotary;
  c.norm = NormKind::kRmsNorm;
  c.tied_embeddings = tied;
  c.attention_bias = false;
  c.source = std::move(source);
  return c;
}

// Llama 3's rotary base, 500000, and its scaling (Llama 3.1 and 3.2: llama3).
LlmConfig Llama3(LlmConfig c, RopeScaling scaling = {}) {
  c.rope_theta = 500000;
  c.rope_scaling = scaling;
  return c;
}

// Megatron-DeepSpeed GPT as MLP-Offload runs it: rotary, RMSNorm, no biases, untied embeddings,
// GPT-2 BPE vocabulary 50257 padded by Megatron to a multiple of 128 = 50304.
constexpr int64_t kMegatronGpt2Vocab = 50304;

std::vector<LlmConfig> MakePresets() {
  std::vector<LlmConfig> p;
  // 3,295,488 parameters: 4 x 791,040 per layer + 65,536 embedding + 65,792 head.
  p.push_back(Llama("tiny", 256, 688, 4, 4, 4, 256, 128, false,
                    "tierflow test model: byte-level vocabulary, Llama layout, small enough for "
                    "CPU reference runs"));
  // 1,235,814,400 parameters.
  p.push_back(Llama3(Llama("llama3.2-1b", 2048, 8192, 16, 32, 8, 128256, 131072, true,
                           "meta-llama/Llama-3.2-1B config.json (hidden_size 2048, intermediate_size "
                           "8192, 16 layers, 32 heads, 8 kv heads, vocab 128256, "
                           "max_position_embeddings 131072, tie_word_embeddings true, rope_theta "
                           "500000, rope_scaling llama3: factor 32, low_freq_factor 1, "
                           "high_freq_factor 4, original_max_position_embeddings 8192)"),
                     {.kind = RopeScaling::Kind::kLlama3, .factor = 32, .low_freq_factor = 1,
                      .high_freq_factor = 4, .original_max_seq = 8192}));
  // 6,738,415,616 parameters.
  p.push_back(Llama("llama2-7b", 4096, 11008, 32, 32, 32, 32000, 4096, false,
                    "meta-llama/Llama-2-7b-hf config.json (hidden_size 4096, intermediate_size "
                    "11008, 32 layers, 32 heads, vocab 32000, max_position_embeddings 4096)"));
  // 13,015,864,320 parameters.
  p.push_back(Llama("llama2-13b", 5120, 13824, 40, 40, 40, 32000, 4096, false,
                    "meta-llama/Llama-2-13b-hf config.json (hidden_size 5120, intermediate_size "
                    "13824, 40 layers, 40 heads, vocab 32000, max_position_embeddings 4096)"));
  // 68,976,648,192 parameters.
  p.push_back(Llama("llama2-70b", 8192, 28672, 80, 64, 8, 32000, 4096, false,
                    "meta-llama/Llama-2-70b-hf config.json (hidden_size 8192, intermediate_size "
                    "28672, 80 layers, 64 heads, 8 kv heads, vocab 32000, "
                    "max_position_embeddings 4096)"));
  // 8,030,261,248 parameters.
  p.push_back(Llama3(Llama("llama3-8b", 4096, 14336, 32, 32, 8, 128256, 8192, false,
                           "meta-llama/Meta-Llama-3-8B config.json (hidden_size 4096, intermediate_size "
                           "14336, 32 layers, 32 heads, 8 kv heads, vocab 128256, "
                           "max_position_embeddings 8192, rope_theta 500000)")));
  // 70,553,706,496 parameters.
  p.push_back(Llama3(Llama("llama3-70b", 8192, 28672, 80, 64, 8, 128256, 8192, false,
                           "meta-llama/Meta-Llama-3-70B config.json (hidden_size 8192, "
                           "intermediate_size 28672, 80 layers, 64 heads, 8 kv heads, vocab 128256, "
                           "max_position_embeddings 8192, rope_theta 500000)")));
  {
    // 174,604,259,328 parameters (GPT-2 layout: learned positions, LayerNorm with bias, biases
    // on every linear layer, GELU MLP of 4 x d_model, embeddings tied to the output layer).
    LlmConfig c = Llama("gpt3-175b", 12288, 4 * 12288, 96, 96, 96, 50257, 2048, true,
                        "Brown et al. 2020 (GPT-3) Table 2.1: n_layers 96, d_model 12288, "
                        "n_heads 96, d_head 128, n_ctx 2048; d_ff = 4 d_model (section 2.1, as "
                        "GPT-2); GPT-2 BPE vocabulary 50257; GPT-2 layout (learned positions, "
                        "LayerNorm, biases, tied embeddings)");
    c.mlp = MlpKind::kGelu;
    c.position = PositionKind::kLearned;
    c.norm = NormKind::kLayerNorm;
    c.attention_bias = true;
    p.push_back(c);
  }
  // The MLP-Offload (SC'25) model sizes, read so that the count matches the name
  // (reference/offload-systems.md section 3 gives hidden / FFN / layers / heads only).
  {
    // 40,781,747,200 parameters. With a SwiGLU MLP these dims give 54.2 B (multi-head) or
    // 48.2 B (4 kv heads, as MLP-Offload's script runs them); no SwiGLU reading reaches 40 B.
    // The dims are the GPT-2-style 40B of Gemini (SOSP'23), whose 2-matrix MLP of 4 x hidden
    // gives 40.8 B, so that is the reading here.
    LlmConfig c = Llama("gpt-40b", 5120, 20480, 128, 40, 40, kMegatronGpt2Vocab, 2048, false,
                        "MLP-Offload (SC'25) 40B: hidden 5120, FFN 20480, 128 layers, 40 heads "
                        "(reference/offload-systems.md section 3). Reading chosen to match the "
                        "name: 2-matrix GELU MLP (GPT-2 40B of Gemini, SOSP'23), multi-head "
                        "attention, rotary, RMSNorm, no biases, untied, vocab 50304 -> 40.78 B. "
                        "SwiGLU would give 54.2 B (MHA) or 48.2 B (4 kv heads, the published "
                        "run; see preset mlp-offload-40b)");
    c.mlp = MlpKind::kGelu;
    p.push_back(c);
  }
  // 52,331,290,624 parameters: SwiGLU with multi-head attention matches the name
  // (FFN 21824 = 8/3 x 8192 rounded to 64, the SwiGLU sizing).
  p.push_back(Llama("gpt-52b", 8192, 21824, 64, 64, 64, kMegatronGpt2Vocab, 2048, false,
                    "MLP-Offload (SC'25) 52B: hidden 8192, FFN 21824, 64 layers, 64 heads "
                    "(reference/offload-systems.md section 3; FLM-2-52B dims). Reading: SwiGLU, "
                    "multi-head attention, rotary, RMSNorm, untied, vocab 50304 -> 52.33 B"));
  // 106,925,334,528 parameters: multi-head attention would give 121.5 B; grouped-query with 8 kv
  // heads (Llama-2-70B's layout, which this model deepens from 80 to 124 layers) is closest.
  p.push_back(Llama("gpt-100b", 8192, 28672, 124, 64, 8, kMegatronGpt2Vocab, 2048, false,
                    "MLP-Offload (SC'25) 100B: hidden 8192, FFN 28672, 124 layers, 64 heads "
                    "(reference/offload-systems.md section 3). Reading closest to the name: "
                    "SwiGLU with 8 kv heads (Llama-2-70B layout, 124 layers), vocab 50304 -> "
                    "106.9 B; multi-head attention would give 121.5 B"));
  // 125,854,689,280 parameters: multi-head attention (grouped-query with 8 kv heads: 107.7 B).
  p.push_back(Llama("gpt-120b", 10240, 28672, 96, 80, 80, kMegatronGpt2Vocab, 2048, false,
                    "MLP-Offload (SC'25) 120B: hidden 10240, FFN 28672, 96 layers, 80 heads "
                    "(reference/offload-systems.md section 3). Reading closest to the name: "
                    "SwiGLU, multi-head attention, vocab 50304 -> 125.9 B (8 kv heads would "
                    "give 107.7 B)"));
  // The same sizes exactly as MLP-Offload's published runs configure Megatron-DeepSpeed
  // (scripts/launch-expt.sh and config-n-run.sh of the artifact: --swiglu, --num-key-value-heads
  // 4 for every size, --untie-embeddings-and-output-weights, --disable-bias-linear, GPT-2 BPE
  // padded to 50304, seq 2048). The 40B run logs "number of parameters ... 48163722240",
  // which ParameterCount() reproduces exactly. Use these to reproduce the paper's figures.
  const char* kMlpOffloadRun =
      "MLP-Offload artifact scripts (launch-expt.sh, config-n-run.sh): Megatron-DeepSpeed GPT, "
      "SwiGLU, RMSNorm, rotary, no biases, untied, 4 kv heads, GPT-2 BPE vocab padded to 50304";
  // 48,163,722,240 (matches the run log).
  p.push_back(Llama("mlp-offload-40b", 5120, 20480, 128, 40, 4, kMegatronGpt2Vocab, 2048, false,
                    std::string(kMlpOffloadRun) + "; 40B: 5120/20480/128 layers/40 heads"));
  // 44,278,226,944.
  p.push_back(Llama("mlp-offload-52b", 8192, 21824, 64, 64, 4, kMegatronGpt2Vocab, 2048, false,
                    std::string(kMlpOffloadRun) + "; 52B: 8192/21824/64 layers/64 heads"));
  // 68,605,452,288.
  p.push_back(Llama("mlp-offload-70b", 8192, 28672, 80, 64, 4, kMegatronGpt2Vocab, 2048, false,
                    std::string(kMlpOffloadRun) + "; 70B: 8192/28672/80 layers/64 heads"));
  // 105,885,147,136.
  p.push_back(Llama("mlp-offload-100b", 8192, 28672, 124, 64, 4, kMegatronGpt2Vocab, 2048, false,
                    std::string(kMlpOffloadRun) + "; 100B: 8192/28672/124 layers/64 heads"));
  // 106,728,663,040.
  p.push_back(Llama("mlp-offload-120b", 10240, 28672, 96, 80, 4, kMegatronGpt2Vocab, 2048, false,
                    std::string(kMlpOffloadRun) + "; 120B: 10240/28672/96 layers/80 heads"));
  return p;
}

const std::vector<LlmConfig>& Presets() {
  static const std::vector<LlmConfig> presets = MakePresets();
  return presets;
}


void AddLinear(std::vector<TensorShape>* t, const std::string& prefix, int64_t out, int64_t in,
               bool bias) {
  t->push_back({prefix + ".weight", {out, in}});
  if (bias) t->push_back({prefix + ".bias", {out}});
}

void AddNorm(std::vector<TensorShape>* t, const std::string& prefix, int64_t hidden,
             NormKind norm) {
  t->push_back({prefix + ".weight", {hidden}});
  if (norm == NormKind::kLayerNorm) t->push_back({prefix + ".bias", {hidden}});
}

}  // namespace

int64_t TensorShape::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<std::string> LlmPresetNames() {
  std::vector<std::string> names;
  for (const auto& p : Presets()) names.push_back(p.name);
  return names;
}

namespace {

// A preset's Hugging Face id: its source's first word when that is "org/repo".
std::string HfIdOf(const LlmConfig& preset) {
  const std::string id = preset.source.substr(0, preset.source.find(' '));
  return id.find('/') != std::string::npos && id.find('/') == id.rfind('/') ? id : "";
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Lower case without '-', '_', '.', an "org/" and a trailing "hf": llama2-7B, Llama-2-7b and
// meta-llama/Llama-2-7b-hf all read "llama27b".
std::string Loose(std::string_view s) {
  if (const size_t slash = s.rfind('/'); slash != std::string_view::npos) s.remove_prefix(slash + 1);
  std::string out;
  for (char c : Lower(s)) {
    if (c != '-' && c != '_' && c != '.') out += c;
  }
  if (out.size() > 2 && out.compare(out.size() - 2, 2, "hf") == 0) out.resize(out.size() - 2);
  return out;
}

}  // namespace

StatusOr<LlmConfig> LlmPreset(std::string_view name) {
  for (const auto& p : Presets()) {
    if (p.name == name) return p;
  }
  // A Hugging Face id or a variant of a name, when it means one preset only.
  for (auto same : {+[](std::string_view a, std::string_view b) { return Lower(a) == Lower(b); },
                    +[](std::string_view a, std::string_view b) { return Loose(a) == Loose(b); }}) {
    std::vector<const LlmConfig*> found;
    for (const auto& p : Presets()) {
      const std::string id = HfIdOf(p);
      if (same(name, p.name) || (!id.empty() && same(name, id))) found.push_back(&p);
    }
    if (found.size() == 1) return *found.front();
    if (found.size() > 1) {
      std::vector<std::string> names;
      for (const LlmConfig* p : found) names.push_back(p->name);
      return NotFound("model preset '" + std::string(name).substr(0, 80) + "' could be any of " + JoinNames(names) + ": name one");
    }
  }
  std::vector<std::string> known;
  for (const auto& p : Presets()) known.push_back(HfIdOf(p).empty() ? p.name : p.name + " (" + HfIdOf(p) + ")");
  return NotFound("unknown model preset " + Quoted(name) + " (known: " + JoinNames(known) +
                  "; or a Hugging Face model directory as model.hf_dir)");
}

namespace {

// Far above any model trained (GPT-3: 96 layers, hidden 12288; Llama 3: vocab 128256), low enough
// that parameter and FLOP counts stay exact in int64 and double, and that a typo cannot make the
// planner build billions of tasks.
int64_t MostOfDimension(std::string_view dim) {
  if (dim == "layers") return 10'000;
  if (dim == "hidden") return int64_t{1} << 20;
  if (dim == "ffn") return int64_t{1} << 22;
  if (dim == "heads" || dim == "kv_heads") return int64_t{1} << 16;
  return int64_t{1} << 24;  // vocab, max_seq
}

}  // namespace

Status ValidateLlm(const LlmConfig& c) {
  const struct {
    const char* field;
    int64_t value;
  } dims[] = {{"hidden", c.hidden},  {"ffn", c.ffn},           {"layers", c.layers},
              {"heads", c.heads},    {"kv_heads", c.kv_heads}, {"vocab", c.vocab},
              {"max_seq", c.max_seq}};
  std::string who = c.name.empty() ? "model" : "model '" + c.name + "'";
  for (size_t i = 0; i < std::size(dims); ++i) {
    const auto& d = dims[i];
    const int64_t most = MostOfDimension(d.field);
    if (d.value <= 0) {
      return InvalidArgument(who + ": " + d.field + " must be positive, got " +
                             std::to_string(d.value));
    }
    if (d.value > most) {
      return InvalidArgument(who + ": " + d.field + " " + std::to_string(d.value) + " is above the most tierflow models, " + std::to_string(most));
    }
  }
  if (c.hidden % c.heads != 0) {
    return InvalidArgument(who + ": hidden " + std::to_string(c.hidden) +
                           " is not a multiple of heads " + std::to_string(c.heads));
  }
  if (c.kv_heads > c.heads || c.heads % c.kv_heads != 0) {
    return InvalidArgument(who + ": kv_heads " + std::to_string(c.kv_heads) +
                           " must divide heads " + std::to_string(c.heads));
  }
  if (!(c.norm_eps > 0 && c.norm_eps <= 1)) {
    return InvalidArgument(who + ": norm_eps " + fmt::format("{}", c.norm_eps) + " must be a number in (0, 1]");
  }
  if (!(c.rope_theta > 1 && c.rope_theta <= 1e12)) {
    return InvalidArgument(who + ": rope_theta " + fmt::format("{}", c.rope_theta) + " must be a number in (1, 1e12]");
  }
  if (c.sliding_window < 0) return InvalidArgument(who + ": sliding_window must be >= 0 (0: none)");
  const RopeScaling& r = c.rope_scaling;
  if (r.kind != RopeScaling::Kind::kNone) {
    if (c.position != PositionKind::kRotary) {
      return InvalidArgument(who + ": rope_scaling needs position rotary");
    }
    if (!(r.factor >= 1) || !std::isfinite(r.factor)) {
      return InvalidArgument(who + ": rope_scaling.factor must be a finite number >= 1");
    }
  }
  if (r.kind == RopeScaling::Kind::kLlama3) {
    if (!(r.low_freq_factor > 0) || !(r.high_freq_factor > r.low_freq_factor) || !std::isfinite(r.high_freq_factor)) {
      return InvalidArgument(who + ": rope_scaling llama3 needs 0 < low_freq_factor < high_freq_factor");
    }
    if (r.original_max_seq <= 0) {
      return InvalidArgument(who + ": rope_scaling llama3 needs original_max_seq > 0 (original_max_position_embeddings)");
    }
  }
  return Status::Ok();
}

std::vector<double> RopeInverseFrequencies(const LlmConfig& c) {
  TF_CHECK(c.heads > 0);
  return RopeInverseFrequencies(c.head_dim(), c.rope_theta, c.rope_scaling);
}

std::vector<double> RopeInverseFrequencies(int64_t dim, double theta, const RopeScaling& r) {
  TF_CHECK(dim > 0 && dim % 2 == 0);
  std::vector<double> inv(static_cast<size_t>(dim / 2));
  for (int64_t j = 0; j < dim / 2; ++j) {
    double f = 1.0 / std::pow(theta, static_cast<double>(2 * j) / static_cast<double>(dim));
    switch (r.kind) {
      case RopeScaling::Kind::kNone:
        break;
      case RopeScaling::Kind::kLinear:
        f /= r.factor;
        break;
      case RopeScaling::Kind::kLlama3: {
        // transformers' _compute_llama3_parameters: wavelengths longer than the original
        // context over low_freq_factor are stretched by factor, those shorter than it over
        // high_freq_factor kept, and the band between blended linearly in context / wavelength.
        const double original = static_cast<double>(r.original_max_seq);
        const double wavelen = 2 * std::numbers::pi / f;
        const double low_freq_wavelen = original / r.low_freq_factor;
        const double high_freq_wavelen = original / r.high_freq_factor;
        if (wavelen > low_freq_wavelen) {
          f /= r.factor;
        } else if (wavelen >= high_freq_wavelen) {
          const double smooth = (original / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
          f = (1 - smooth) * f / r.factor + smooth * f;
        }
        break;
      }
    }
    inv[static_cast<size_t>(j)] = f;
  }
  return inv;
}

std::vector<LayerInfo> Layers(const LlmConfig& c) {
  TF_CHECK(c.heads > 0 && c.kv_heads > 0 && c.layers >= 0);
  std::vector<LayerInfo> layers;
  layers.reserve(static_cast<size_t>(c.layers) + 2);
  const int64_t h = c.hidden;
  const int64_t q_dim = c.heads * c.head_dim();
  const int64_t kv_dim = c.kv_heads * c.head_dim();
  const bool bias = c.attention_bias;
  const bool qkv_bias = bias || c.qkv_bias;

  LayerInfo emb;
  emb.kind = LayerInfo::Kind::kEmbedding;
  emb.index = 0;
  emb.tensors.push_back({"model.embed_tokens.weight", {c.vocab, h}});
  if (c.position == PositionKind::kLearned) {
    emb.tensors.push_back({"model.embed_positions.weight", {c.max_seq, h}});
  }
  layers.push_back(std::move(emb));

  for (int64_t i = 0; i < c.layers; ++i) {
    LayerInfo l;
    l.kind = LayerInfo::Kind::kDecoder;
    l.index = static_cast<int32_t>(i + 1);
    const std::string p = "model.layers." + std::to_string(i);
    AddNorm(&l.tensors, p + ".input_layernorm", h, c.norm);
    AddLinear(&l.tensors, p + ".self_attn.q_proj", q_dim, h, qkv_bias);
    AddLinear(&l.tensors, p + ".self_attn.k_proj", kv_dim, h, qkv_bias);
    AddLinear(&l.tensors, p + ".self_attn.v_proj", kv_dim, h, qkv_bias);
    AddLinear(&l.tensors, p + ".self_attn.o_proj", h, q_dim, bias);
    AddNorm(&l.tensors, p + ".post_attention_layernorm", h, c.norm);
    if (c.mlp == MlpKind::kSwiGlu) {
      AddLinear(&l.tensors, p + ".mlp.gate_proj", c.ffn, h, bias);
      AddLinear(&l.tensors, p + ".mlp.up_proj", c.ffn, h, bias);
      AddLinear(&l.tensors, p + ".mlp.down_proj", h, c.ffn, bias);
    } else {
      AddLinear(&l.tensors, p + ".mlp.fc1", c.ffn, h, bias);
      AddLinear(&l.tensors, p + ".mlp.fc2", h, c.ffn, bias);
    }
    layers.push_back(std::move(l));
  }

  LayerInfo head;
  head.kind = LayerInfo::Kind::kHead;
  head.index = static_cast<int32_t>(c.layers + 1);
  AddNorm(&head.tensors, "model.norm", h, c.norm);
  if (!c.tied_embeddings) head.tensors.push_back({"lm_head.weight", {c.vocab, h}});
  layers.push_back(std::move(head));

  for (auto& l : layers) {
    l.parameters = 0;
    for (const auto& t : l.tensors) l.parameters += t.elements();
  }
  return layers;
}

int64_t ParameterCount(const LlmConfig& c) {
  int64_t total = 0;
  for (const auto& l : Layers(c)) total += l.parameters;
  return total;
}

Flops LayerFlops(const LlmConfig& c, const LayerInfo& layer, int64_t batch, int64_t seq,
                 bool activation_checkpointing) {
  TF_CHECK(c.heads > 0);
  const double tokens = static_cast<double>(batch) * static_cast<double>(seq);
  const double h = static_cast<double>(c.hidden);
  Flops f;
  switch (layer.kind) {
    case LayerInfo::Kind::kEmbedding:
      // A gather forward and a scatter-add backward: no matmul, so no FLOPs counted.
      return f;
    case LayerInfo::Kind::kHead:
      // The LM head matmul (tied or not, the product is computed); not recomputed, as
      // checkpointing wraps decoder layers only.
      f.forward = 2.0 * tokens * h * static_cast<double>(c.vocab);
      f.backward = 2.0 * f.forward;
      return f;
    case LayerInfo::Kind::kDecoder:
      break;
  }
  const double q_dim = static_cast<double>(c.heads * c.head_dim());
  const double kv_dim = static_cast<double>(c.kv_heads * c.head_dim());
  const double ffn = static_cast<double>(c.ffn);
  const double s = static_cast<double>(seq);
  const double projections = 2.0 * tokens * h * (q_dim + 2.0 * kv_dim)  // q, k, v
                             + 2.0 * tokens * q_dim * h;                // o
  // QK^T and AV, each batch * heads * s * s * head_dim MACs, counted at full (unmasked) size.
  const double attention = 2.0 * 2.0 * static_cast<double>(batch) * s * s * q_dim;
  const double mlp_matrices = c.mlp == MlpKind::kSwiGlu ? 3.0 : 2.0;
  const double mlp = mlp_matrices * 2.0 * tokens * h * ffn;
  f.forward = projections + attention + mlp;
  f.backward = 2.0 * f.forward;
  f.recompute = activation_checkpointing ? f.forward : 0.0;
  return f;
}

Flops ModelFlops(const LlmConfig& c, int64_t batch, int64_t seq, bool activation_checkpointing) {
  Flops total;
  for (const auto& l : Layers(c)) {
    Flops f = LayerFlops(c, l, batch, seq, activation_checkpointing);
    total.forward += f.forward;
    total.backward += f.backward;
    total.recompute += f.recompute;
  }
  return total;
}

int64_t ActivationBytesPerToken(const LlmConfig& c, int64_t dtype_bytes,
                                bool activation_checkpointing) {
  return ActivationBytesPerToken(c, dtype_bytes, activation_checkpointing, c.max_seq);
}

int64_t ActivationBytesPerToken(const LlmConfig& c, int64_t dtype_bytes,
                                bool activation_checkpointing, int64_t seq) {
  if (activation_checkpointing) return c.hidden * dtype_bytes;  // the layer input only
  const int64_t q_dim = c.heads * c.head_dim();
  const int64_t kv_dim = c.kv_heads * c.head_dim();
  const int64_t mlp_saved = c.mlp == MlpKind::kSwiGlu ? 3 * c.ffn   // gate, up, silu(gate)*up
                                                      : 2 * c.ffn;  // fc1 out, gelu out
  // Korthikanti et al. 2022 (Table 2 / eq. 1) without dropout masks and dropout outputs,
  // per token: two norm inputs (2h), two norm outputs feeding QKV and the MLP (2h), Q, K, V
  // (q_dim + 2 kv_dim), the attention output feeding o_proj (q_dim), the MLP intermediates,
  // and the softmax output (heads * seq per token). For MHA, GELU, ffn = 4h and 2 bytes this is
  // 32h + 2as, Korthikanti's 34h + 5as less the 2h + 3as of dropout.
  const int64_t elements = 4 * c.hidden + q_dim + 2 * kv_dim + q_dim + mlp_saved + c.heads * seq;
  return elements * dtype_bytes;
}

namespace {

Status ParseEnum(internal::FieldReader* r, const std::string& key,
                 const std::vector<std::string>& names, int* out) {
  std::string s;
  TF_RETURN_IF_ERROR(r->String(key, &s));
  if (s.empty()) return Status::Ok();
  for (size_t i = 0; i < names.size(); ++i) {
    if (s == names[i]) {
      *out = static_cast<int>(i);
      return Status::Ok();
    }
  }
  return InvalidArgument(r->KeyPath(key) + ": " + Quoted(s) + " is not one of " + JoinNames(names));
}

// {type: none|linear|llama3, factor, low_freq_factor, high_freq_factor, original_max_seq}; null
// or type none clears it.
Status ReadRopeScaling(const YAML::Node& node, const std::string& path, RopeScaling* out) {
  if (!node.IsDefined() || node.IsNull()) {
    *out = RopeScaling{};
    return Status::Ok();
  }
  internal::FieldReader r(node, path);
  TF_RETURN_IF_ERROR(r.status());
  if (!r.Has("type") && out->kind == RopeScaling::Kind::kNone) {
    return InvalidArgument(r.KeyPath("type") + ": missing (none, linear or llama3; the model has no scaling to change)");
  }
  int kind = static_cast<int>(out->kind);
  TF_RETURN_IF_ERROR(ParseEnum(&r, "type", {"none", "linear", "llama3"}, &kind));
  RopeScaling s;
  s.kind = static_cast<RopeScaling::Kind>(kind);
  if (out->kind == s.kind) s = *out;  // overriding one field of the base's scaling
  TF_RETURN_IF_ERROR(r.Fraction("factor", &s.factor));
  TF_RETURN_IF_ERROR(r.Fraction("low_freq_factor", &s.low_freq_factor));
  TF_RETURN_IF_ERROR(r.Fraction("high_freq_factor", &s.high_freq_factor));
  TF_RETURN_IF_ERROR(r.Int("original_max_seq", &s.original_max_seq));
  TF_RETURN_IF_ERROR(r.Finish());
  *out = s;
  return Status::Ok();
}

}  // namespace

StatusOr<LlmConfig> LlmFromYaml(const YAML::Node& node) {
  internal::FieldReader r(node, "model");
  TF_RETURN_IF_ERROR(r.status());
  LlmConfig c;
  std::string preset, hf_dir;
  TF_RETURN_IF_ERROR(r.String("preset", &preset));
  TF_RETURN_IF_ERROR(r.String("hf_dir", &hf_dir));
  if (!preset.empty() && !hf_dir.empty()) {
    return InvalidArgument(r.KeyPath("hf_dir") + ": give a preset or a Hugging Face directory, not both");
  }
  if (!preset.empty()) {
    auto p = LlmPreset(preset);
    if (!p.ok()) return InvalidArgument("model.preset: " + p.status().message());
    c = p.value();
  }
  if (!hf_dir.empty()) {
    auto p = LlmFromHfDir(hf_dir);
    if (!p.ok()) return p.status().WithContext(r.KeyPath("hf_dir"));
    c = p.value();
  }
  // A preset or a directory is the base: every dimension given, any may be overridden.
  const bool has_base = !preset.empty() || !hf_dir.empty();
  const LlmConfig base = c;
  TF_RETURN_IF_ERROR(r.String("name", &c.name));
  TF_RETURN_IF_ERROR(r.String("source", &c.source));
  struct Dim {
    const char* key;
    int64_t* field;
  };
  const Dim dims[] = {{"hidden", &c.hidden},  {"ffn", &c.ffn},           {"layers", &c.layers},
                      {"heads", &c.heads},    {"kv_heads", &c.kv_heads}, {"vocab", &c.vocab},
                      {"max_seq", &c.max_seq}};
  std::vector<std::string> overridden;
  for (const Dim& d : dims) {
    const bool present = r.Has(d.key);
    TF_RETURN_IF_ERROR(r.Int(d.key, d.field, 1, MostOfDimension(d.key)));
    if (present) {
      overridden.push_back(d.key);
    } else if (!has_base && std::string(d.key) != "kv_heads") {
      return InvalidArgument(r.KeyPath(d.key) + ": missing (give every dimension, a preset or an hf_dir)");
    }
  }
  int mlp = static_cast<int>(c.mlp), position = static_cast<int>(c.position),
      norm = static_cast<int>(c.norm);
  TF_RETURN_IF_ERROR(ParseEnum(&r, "mlp", {"swiglu", "gelu"}, &mlp));
  TF_RETURN_IF_ERROR(ParseEnum(&r, "position", {"rotary", "learned"}, &position));
  TF_RETURN_IF_ERROR(ParseEnum(&r, "norm", {"rmsnorm", "layernorm"}, &norm));
  c.mlp = static_cast<MlpKind>(mlp);
  c.position = static_cast<PositionKind>(position);
  c.norm = static_cast<NormKind>(norm);
  TF_RETURN_IF_ERROR(r.Bool("tied_embeddings", &c.tied_embeddings));
  TF_RETURN_IF_ERROR(r.Bool("attention_bias", &c.attention_bias));
  TF_RETURN_IF_ERROR(r.Bool("qkv_bias", &c.qkv_bias));
  TF_RETURN_IF_ERROR(r.Fraction("norm_eps", &c.norm_eps));
  TF_RETURN_IF_ERROR(r.Fraction("rope_theta", &c.rope_theta));
  TF_RETURN_IF_ERROR(r.Int("sliding_window", &c.sliding_window));
  if (r.Has("rope_scaling")) TF_RETURN_IF_ERROR(ReadRopeScaling(r.Child("rope_scaling"), r.KeyPath("rope_scaling"), &c.rope_scaling));
  TF_RETURN_IF_ERROR(r.Finish());
  // A custom model without kv_heads has multi-head attention.
  if (!has_base && c.kv_heads == 0) c.kv_heads = c.heads;
  if (c.name.empty()) c.name = "custom";
  if (has_base && !overridden.empty() && c.source == base.source) {
    c.source = base.source + "; overridden: " + JoinNames(overridden);
  }
  TF_RETURN_IF_ERROR(ValidateLlm(c));
  return c;
}

namespace {

// Every field, spelt out (LlmToYaml).
internal::Doc LlmDoc(const LlmConfig& c) {
  using internal::Doc;
  Doc d = Doc::Map();
  d.Add("name", Doc::Quoted(c.name));
  d.Add("source", Doc::Quoted(c.source));
  const std::pair<const char*, int64_t> dims[] = {{"hidden", c.hidden}, {"ffn", c.ffn},           {"layers", c.layers},
                                                 {"heads", c.heads},   {"kv_heads", c.kv_heads}, {"vocab", c.vocab},
                                                 {"max_seq", c.max_seq}};
  for (const auto& [key, value] : dims) d.Add(key, Doc::Plain(std::to_string(value)));
  d.Add("mlp", Doc::Plain(c.mlp == MlpKind::kSwiGlu ? "swiglu" : "gelu"));
  d.Add("position", Doc::Plain(c.position == PositionKind::kRotary ? "rotary" : "learned"));
  d.Add("norm", Doc::Plain(c.norm == NormKind::kRmsNorm ? "rmsnorm" : "layernorm"));
  const auto flag = [](bool b) { return Doc::Plain(b ? "true" : "false"); };
  d.Add("tied_embeddings", flag(c.tied_embeddings));
  d.Add("attention_bias", flag(c.attention_bias));
  d.Add("qkv_bias", flag(c.qkv_bias));
  // Shortest text that reads back to the same double ("1e-05", "500000").
  d.Add("norm_eps", Doc::Plain(fmt::format("{}", c.norm_eps)));
  d.Add("rope_theta", Doc::Plain(fmt::format("{}", c.rope_theta)));
  if (c.rope_scaling.kind != RopeScaling::Kind::kNone) {
    const RopeScaling& r = c.rope_scaling;
    Doc scaling = Doc::Map();
    scaling.Add("type", Doc::Plain(r.kind == RopeScaling::Kind::kLinear ? "linear" : "llama3"));
    scaling.Add("factor", Doc::Plain(fmt::format("{}", r.factor)));
    if (r.kind == RopeScaling::Kind::kLlama3) {
      scaling.Add("low_freq_factor", Doc::Plain(fmt::format("{}", r.low_freq_factor)));
      scaling.Add("high_freq_factor", Doc::Plain(fmt::format("{}", r.high_freq_factor)));
      scaling.Add("original_max_seq", Doc::Plain(std::to_string(r.original_max_seq)));
    }
    d.Add("rope_scaling", std::move(scaling));
  }
  if (c.sliding_window > 0) d.Add("sliding_window", Doc::Plain(std::to_string(c.sliding_window)));
  return d;
}

}  // namespace

std::string LlmToYaml(const LlmConfig& c) { return LlmDoc(c).Yaml(); }
std::string LlmToJson(const LlmConfig& c) { return LlmDoc(c).Json(); }


StatusOr<LlmConfig> LlmFromYamlText(std::string_view yaml_text) {
  TF_ASSIGN_OR_RETURN(const YAML::Node node, LoadYamlText(yaml_text, "model"));
  return LlmFromYaml(node);
}

}  // namespace tierflow::models
