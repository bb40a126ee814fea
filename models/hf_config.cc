// A Hugging Face config.json read into an LlmConfig (llm.h: LlmFromHfConfig). transformers 4
// writes the rotary settings as `rope_theta` and `rope_scaling` ({"rope_type" or "type", "factor",
// ...}); transformers 5 as one `rope_parameters` object holding rope_theta too. Both are read.
#include <filesystem>

#include "tierflow/core/files.h"
#include "tierflow/core/json_checked.h"
#include "tierflow/models/llm.h"

namespace tierflow::models {
namespace {

using Json = nlohmann::ordered_json;

// Reads the keys of one JSON object, each error naming the file and the key.
class HfFields {
 public:
  HfFields(const Json& j, std::string where) : j_(j), where_(std::move(where)) {}

  Status Error(const std::string& key, const std::string& rule) const {
    return InvalidArgument("'" + where_ + "': '" + key + "' " + rule);
  }
  bool Has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  Status Int(const char* key, int64_t* out, bool required) const {
    if (!Has(key)) return required ? Error(key, "is missing") : Status::Ok();
    if (!j_[key].is_number_integer()) return Error(key, "must be an integer");
    TF_ASSIGN_OR_RETURN(*out, JsonInteger<int64_t>(j_[key], "'" + where_ + "': '" + key + "'"));
    return Status::Ok();
  }
  Status Number(const char* key, double* out) const {
    if (!Has(key)) return Status::Ok();
    if (!j_[key].is_number()) return Error(key, "must be a number");
    *out = j_[key].get<double>();
    return Status::Ok();
  }
  Status Bool(const char* key, bool* out) const {
    if (!Has(key)) return Status::Ok();
    if (!j_[key].is_boolean()) return Error(key, "must be true or false");
    *out = j_[key].get<bool>();
    return Status::Ok();
  }
  Status String(const char* key, std::string* out) const {
    if (!Has(key)) return Status::Ok();
    if (!j_[key].is_string()) return Error(key, "must be a string");
    *out = j_[key].get<std::string>();
    return Status::Ok();
  }

 private:
  const Json& j_;
  std::string where_;
};

// rope_scaling (transformers 4) or rope_parameters (5): `key` names it in errors.
Status ReadRope(const Json& rope, const std::string& where, const std::string& key, LlmConfig* c) {
  if (!rope.is_object()) return InvalidArgument("'" + where + "': '" + key + "' must be an object");
  const HfFields f(rope, where);
  std::string type = "default";
  TF_RETURN_IF_ERROR(f.String("type", &type));  // the name before transformers 4.45
  TF_RETURN_IF_ERROR(f.String("rope_type", &type));
  TF_RETURN_IF_ERROR(f.Number("rope_theta", &c->rope_theta));  // rope_parameters only
  RopeScaling& s = c->rope_scaling;
  if (type == "default") {
    s = RopeScaling{};
    return Status::Ok();
  }
  if (type != "linear" && type != "llama3") {
    return InvalidArgument("'" + where + "': '" + key + "' type '" + type +
                           "' is not supported (default, linear and llama3 are)");
  }
  s.kind = type == "linear" ? RopeScaling::Kind::kLinear : RopeScaling::Kind::kLlama3;
  if (!f.Has("factor")) return f.Error(key + ".factor", "is missing");
  TF_RETURN_IF_ERROR(f.Number("factor", &s.factor));
  if (s.kind == RopeScaling::Kind::kLlama3) {
    for (const char* k : {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
      if (!f.Has(k)) return f.Error(key + "." + k, "is missing (rope type llama3)");
    }
    TF_RETURN_IF_ERROR(f.Number("low_freq_factor", &s.low_freq_factor));
    TF_RETURN_IF_ERROR(f.Number("high_freq_factor", &s.high_freq_factor));
    TF_RETURN_IF_ERROR(f.Int("original_max_position_embeddings", &s.original_max_seq, true));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<LlmConfig> LlmFromHfConfig(std::string_view json_text, std::string_view what) {
  const std::string where(what);
  TF_ASSIGN_OR_RETURN(const Json j, ParseJsonChecked(std::string(json_text), "'" + where + "'"));
  if (!j.is_object()) return InvalidArgument("'" + where + "': not a JSON object");
  const HfFields f(j, where);
  std::string model_type;
  TF_RETURN_IF_ERROR(f.String("model_type", &model_type));
  if (model_type != "llama" && model_type != "mistral" && model_type != "qwen2") {
    return f.Error("model_type", (model_type.empty() ? std::string("is missing") : "'" + model_type + "' is not supported") +
                                     " (llama, mistral and qwen2 are: Llama 2, 3, 3.1, 3.2, Mistral, Qwen2 and Qwen2.5)");
  }
  LlmConfig c;
  c.name = model_type;
  c.source = "Hugging Face " + where;
  TF_RETURN_IF_ERROR(f.Int("hidden_size", &c.hidden, true));
  TF_RETURN_IF_ERROR(f.Int("intermediate_size", &c.ffn, true));
  TF_RETURN_IF_ERROR(f.Int("num_hidden_layers", &c.layers, true));
  TF_RETURN_IF_ERROR(f.Int("num_attention_heads", &c.heads, true));
  c.kv_heads = c.heads;
  TF_RETURN_IF_ERROR(f.Int("num_key_value_heads", &c.kv_heads, false));
  TF_RETURN_IF_ERROR(f.Int("vocab_size", &c.vocab, true));
  TF_RETURN_IF_ERROR(f.Int("max_position_embeddings", &c.max_seq, true));
  TF_RETURN_IF_ERROR(f.Number("rms_norm_eps", &c.norm_eps));
  TF_RETURN_IF_ERROR(f.Number("rope_theta", &c.rope_theta));
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (f.Has(key)) TF_RETURN_IF_ERROR(ReadRope(j[key], where, key, &c));
  }
  // Llama's default is untied (LlamaConfig, MistralConfig: tie_word_embeddings=False).
  TF_RETURN_IF_ERROR(f.Bool("tie_word_embeddings", &c.tied_embeddings));
  std::string act = "silu";
  TF_RETURN_IF_ERROR(f.String("hidden_act", &act));
  if (act != "silu") return f.Error("hidden_act", "'" + act + "' is not supported (the SwiGLU MLP uses silu)");
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    bool bias = false;
    TF_RETURN_IF_ERROR(f.Bool(key, &bias));
    if (bias) return f.Error(key, "true is not supported (the math has biases on q, k and v only, as Qwen2's)");
  }
  // Qwen2 always has biases on q, k and v (Qwen2Attention), and slides its window only where
  // use_sliding_window says so.
  c.qkv_bias = model_type == "qwen2";
  bool sliding = model_type == "mistral";
  if (model_type == "qwen2") TF_RETURN_IF_ERROR(f.Bool("use_sliding_window", &sliding));
  if (sliding) TF_RETURN_IF_ERROR(f.Int("sliding_window", &c.sliding_window, false));
  if (f.Has("head_dim")) {
    int64_t head_dim = 0;
    TF_RETURN_IF_ERROR(f.Int("head_dim", &head_dim, false));
    if (c.heads <= 0 || c.hidden % c.heads != 0 || head_dim != c.hidden / c.heads) {
      return f.Error("head_dim", std::to_string(head_dim) + " is not hidden_size / num_attention_heads (a head_dim of its own is not supported)");
    }
  }
  TF_RETURN_IF_ERROR(ValidateLlm(c).WithContext("'" + where + "'"));
  return c;
}

StatusOr<std::string> LlmToHfConfig(const LlmConfig& c, std::string_view base_json, std::string_view dtype) {
  TF_RETURN_IF_ERROR(ValidateLlm(c));
  if (c.mlp != MlpKind::kSwiGlu || c.position != PositionKind::kRotary || c.norm != NormKind::kRmsNorm ||
      c.attention_bias) {
    return InvalidArgument("model '" + c.name +
                           "' has no Hugging Face Llama form (it needs mlp swiglu, position rotary, norm rmsnorm, no biases but q, k, v's)");
  }
  Json j = Json::object();
  if (!base_json.empty()) {
    TF_ASSIGN_OR_RETURN(j, ParseJsonChecked(std::string(base_json), "the input's config.json"));
    if (!j.is_object()) return InvalidArgument("the input's config.json: not a JSON object");
  }
  // The family: the base's, or Qwen2 for q/k/v biases (which Llama's config cannot express).
  std::string family = c.qkv_bias ? "qwen2" : j.value("model_type", std::string("llama"));
  if (family != "mistral" && family != "qwen2") family = "llama";
  if (family == "qwen2" && !c.qkv_bias) {
    return InvalidArgument("model '" + c.name + "' has no q/k/v biases, which a Qwen2 config.json implies");
  }
  const bool mistral = family == "mistral", qwen2 = family == "qwen2";
  if (!j.contains("architectures") || j["architectures"].is_null() || j.value("model_type", std::string()) != family) {
    j["architectures"] = {mistral ? "MistralForCausalLM" : qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
  }
  j["model_type"] = family;
  j["hidden_size"] = c.hidden;
  j["intermediate_size"] = c.ffn;
  j["num_hidden_layers"] = c.layers;
  j["num_attention_heads"] = c.heads;
  j["num_key_value_heads"] = c.kv_heads;
  j["vocab_size"] = c.vocab;
  j["max_position_embeddings"] = c.max_seq;
  j["rms_norm_eps"] = c.norm_eps;
  j["tie_word_embeddings"] = c.tied_embeddings;
  j["hidden_act"] = "silu";
  if (!mistral && !qwen2) {
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  }
  if (j.contains("head_dim")) j["head_dim"] = c.head_dim();
  if (mistral) j["sliding_window"] = c.sliding_window > 0 ? Json(c.sliding_window) : Json(nullptr);
  if (qwen2) {
    j["use_sliding_window"] = c.sliding_window > 0;
    if (c.sliding_window > 0) j["sliding_window"] = c.sliding_window;
  }
  // The rotary settings, as the base spells them.
  const RopeScaling& r = c.rope_scaling;
  Json scaling = nullptr;
  if (r.kind != RopeScaling::Kind::kNone) {
    scaling = {{"rope_type", r.kind == RopeScaling::Kind::kLinear ? "linear" : "llama3"}, {"factor", r.factor}};
    if (r.kind == RopeScaling::Kind::kLlama3) {
      scaling["low_freq_factor"] = r.low_freq_factor;
      scaling["high_freq_factor"] = r.high_freq_factor;
      scaling["original_max_position_embeddings"] = r.original_max_seq;
    }
  }
  if (j.contains("rope_parameters") && !j["rope_parameters"].is_null()) {
    Json rope = scaling.is_null() ? Json{{"rope_type", "default"}} : scaling;
    rope["rope_theta"] = c.rope_theta;
    j["rope_parameters"] = rope;
    j.erase("rope_scaling");
    j.erase("rope_theta");
  } else {
    j["rope_theta"] = c.rope_theta;
    j["rope_scaling"] = scaling;
  }
  const char* dtype_key = j.contains("dtype") ? "dtype" : "torch_dtype";
  j[dtype_key] = std::string(dtype);
  return j.dump(2) + "\n";
}

StatusOr<LlmConfig> LlmFromHfDir(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return NotFound("Hugging Face model directory '" + dir + "': not a directory");
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  auto text = ReadFileToString(path, "config.json");
  if (!text.ok()) return NotFound("'" + path + "': cannot open it (a Hugging Face model directory holds config.json)");
  TF_ASSIGN_OR_RETURN(LlmConfig c, LlmFromHfConfig(*text, path));
  std::filesystem::path normal = std::filesystem::path(dir).lexically_normal();
  if (normal.filename().empty()) normal = normal.parent_path();  // "DIR/"
  const std::string name = normal.filename().string();
  if (!name.empty() && name != "." && name != "..") c.name = name;
  return c;
}

}  // namespace tierflow::models
