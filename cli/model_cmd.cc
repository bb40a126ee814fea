// `tierflow model`: an LLM preset's (or a YAML file's, or a Hugging Face directory's) dimensions, parameters per layer kind,
// FLOPs per token and activation bytes; `--list` lists the presets; `--json` for machines.
#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "command.h"
#include "tierflow/core/units.h"
#include "tierflow/models/llm.h"

namespace tierflow::cli {
namespace {

struct ModelOptions {
  std::string preset;
  std::string file;
  std::string model_dir;
  bool json = false;
  bool list = false;
  int64_t seq = 0;  // 0: min(max_seq, 2048)
};

const char* MlpName(models::MlpKind k) { return k == models::MlpKind::kSwiGlu ? "swiglu" : "gelu"; }
const char* PositionName(models::PositionKind k) {
  return k == models::PositionKind::kRotary ? "rotary" : "learned";
}
const char* NormName(models::NormKind k) {
  return k == models::NormKind::kRmsNorm ? "rmsnorm" : "layernorm";
}

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot open model file '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct KindTotals {
  int64_t embedding = 0, decoder_each = 0, decoder_total = 0, head = 0;
};

KindTotals ByKind(const models::LlmConfig& c) {
  KindTotals t;
  for (const auto& l : models::Layers(c)) {
    switch (l.kind) {
      case models::LayerInfo::Kind::kEmbedding:
        t.embedding += l.parameters;
        break;
      case models::LayerInfo::Kind::kDecoder:
        t.decoder_each = l.parameters;
        t.decoder_total += l.parameters;
        break;
      case models::LayerInfo::Kind::kHead:
        t.head += l.parameters;
        break;
    }
  }
  return t;
}

nlohmann::json RopeScalingJson(const models::RopeScaling& r) {
  using Kind = models::RopeScaling::Kind;
  if (r.kind == Kind::kNone) return {{"type", "none"}};
  nlohmann::json j = {{"type", r.kind == Kind::kLinear ? "linear" : "llama3"}, {"factor", r.factor}};
  if (r.kind == Kind::kLlama3) {
    j["low_freq_factor"] = r.low_freq_factor;
    j["high_freq_factor"] = r.high_freq_factor;
    j["original_max_seq"] = r.original_max_seq;
  }
  return j;
}

nlohmann::json ToJson(const models::LlmConfig& c, int64_t seq) {
  const KindTotals k = ByKind(c);
  const models::Flops f = models::ModelFlops(c, 1, seq, /*activation_checkpointing=*/true);
  const double tokens = static_cast<double>(seq);
  nlohmann::json j;
  j["name"] = c.name;
  j["source"] = c.source;
  j["hidden"] = c.hidden;
  j["ffn"] = c.ffn;
  j["layers"] = c.layers;
  j["heads"] = c.heads;
  j["kv_heads"] = c.kv_heads;
  j["head_dim"] = c.head_dim();
  j["vocab"] = c.vocab;
  j["max_seq"] = c.max_seq;
  j["mlp"] = MlpName(c.mlp);
  j["position"] = PositionName(c.position);
  j["norm"] = NormName(c.norm);
  j["tied_embeddings"] = c.tied_embeddings;
  j["attention_bias"] = c.attention_bias;
  j["qkv_bias"] = c.qkv_bias;
  j["norm_eps"] = c.norm_eps;
  if (c.position == models::PositionKind::kRotary) {
    j["rope_theta"] = c.rope_theta;
    j["rope_scaling"] = RopeScalingJson(c.rope_scaling);
  }
  j["sliding_window"] = c.sliding_window;
  j["parameters"] = models::ParameterCount(c);
  j["parameters_by_kind"] = {{"embedding", k.embedding},
                             {"decoder_each", k.decoder_each},
                             {"decoder_total", k.decoder_total},
                             {"head", k.head}};
  j["flops_per_token"] = {{"seq", seq},
                          {"forward", f.forward / tokens},
                          {"backward", f.backward / tokens},
                          {"recompute", f.recompute / tokens}};
  j["activation_bytes_per_token_per_layer_bf16"] = {
      {"seq", seq},
      {"checkpointed", models::ActivationBytesPerToken(c, 2, true, seq)},
      {"full", models::ActivationBytesPerToken(c, 2, false, seq)}};
  return j;
}

void PrintTable(const models::LlmConfig& c, int64_t seq) {
  const KindTotals k = ByKind(c);
  const int64_t total = models::ParameterCount(c);
  fmt::print("model {}\n  source: {}\n\n", c.name, c.source);
  fmt::print("  hidden {}  ffn {}  layers {}  heads {}  kv_heads {}  head_dim {}\n", c.hidden,
             c.ffn, c.layers, c.heads, c.kv_heads, c.head_dim());
  fmt::print("  vocab {}  max_seq {}  mlp {}  position {}  norm {}  tied {}  bias {}\n", c.vocab,
             c.max_seq, MlpName(c.mlp), PositionName(c.position), NormName(c.norm),
             c.tied_embeddings ? "yes" : "no", c.attention_bias ? "yes" : c.qkv_bias ? "q, k, v" : "no");
  std::string rope;
  if (c.position == models::PositionKind::kRotary) {
    rope = fmt::format("  rope_theta {}  rope_scaling {}", c.rope_theta, RopeScalingJson(c.rope_scaling).dump());
  }
  fmt::print("  norm_eps {}{}{}\n\n", c.norm_eps, rope,
             c.sliding_window > 0 ? fmt::format("  sliding_window {}", c.sliding_window) : "");
  fmt::print("  {:<10} {:>6} {:>16} {:>18} {:>12}\n", "layer kind", "count", "parameters each",
             "parameters total", "bf16 total");
  auto row = [](const char* kind, int64_t count, int64_t each, int64_t sum) {
    fmt::print("  {:<10} {:>6} {:>16} {:>18} {:>12}\n", kind, count,
               FormatCount(static_cast<double>(each)), FormatCount(static_cast<double>(sum)),
               FormatBytes(2.0 * static_cast<double>(sum)));
  };
  row("embedding", 1, k.embedding, k.embedding);
  row("decoder", c.layers, k.decoder_each, k.decoder_total);
  row("head", 1, k.head, k.head);
  fmt::print("  {:<10} {:>6} {:>16} {:>18} {:>12}   ({} parameters)\n\n", "total", c.layers + 2, "",
             FormatCount(static_cast<double>(total)), FormatBytes(2.0 * static_cast<double>(total)),
             total);

  const models::Flops ck = models::ModelFlops(c, 1, seq, true);
  const double tokens = static_cast<double>(seq);
  fmt::print("  FLOPs per token at seq {} (2 per multiply-add, attention at full causal size):\n",
             seq);
  fmt::print("    forward {:.4g}  backward {:.4g}  recompute {:.4g}\n", ck.forward / tokens,
             ck.backward / tokens, ck.recompute / tokens);
  fmt::print("    training step: {:.4g} with activation checkpointing, {:.4g} without\n",
             (ck.forward + ck.backward + ck.recompute) / tokens,
             (ck.forward + ck.backward) / tokens);
  fmt::print(
      "  activation bytes per token per decoder layer (bf16, seq {}): {} checkpointed, {} "
      "full\n",
      seq, models::ActivationBytesPerToken(c, 2, true, seq),
      models::ActivationBytesPerToken(c, 2, false, seq));
}

Status Run(const ModelOptions& o) {
  if (o.list) {
    nlohmann::json arr = nlohmann::json::array();
    if (!o.json) fmt::print("{:<18} {:>10}  {}\n", "preset", "parameters", "source");
    for (const auto& name : models::LlmPresetNames()) {
      TF_ASSIGN_OR_RETURN(models::LlmConfig c, models::LlmPreset(name));
      const int64_t n = models::ParameterCount(c);
      if (o.json) {
        arr.push_back({{"name", name}, {"parameters", n}, {"source", c.source}});
      } else {
        std::string src = c.source.size() > 70 ? c.source.substr(0, 67) + "..." : c.source;
        fmt::print("{:<18} {:>10}  {}\n", name, FormatCount(static_cast<double>(n)), src);
      }
    }
    if (o.json) fmt::print("{}\n", arr.dump(2));
    return Status::Ok();
  }
  models::LlmConfig c;
  if (!o.preset.empty() + !o.file.empty() + !o.model_dir.empty() > 1) {
    return InvalidArgument("give one of a preset, --file and --model-dir");
  }
  if (!o.model_dir.empty()) {
    TF_ASSIGN_OR_RETURN(c, models::LlmFromHfDir(o.model_dir));
  } else if (!o.file.empty()) {
    TF_ASSIGN_OR_RETURN(std::string text, ReadFile(o.file));
    auto parsed = models::LlmFromYamlText(text);
    if (!parsed.ok()) return parsed.status().WithContext("model file '" + o.file + "'");
    c = std::move(*parsed);
  } else if (!o.preset.empty()) {
    TF_ASSIGN_OR_RETURN(c, models::LlmPreset(o.preset));
  } else {
    return InvalidArgument("name a preset (tierflow model --list shows them), or give --file or --model-dir");
  }
  const int64_t seq = o.seq > 0 ? o.seq : std::min<int64_t>(c.max_seq, 2048);
  if (o.json) {
    fmt::print("{}\n", ToJson(c, seq).dump(2));
  } else {
    PrintTable(c, seq);
  }
  return Status::Ok();
}

Command MakeModelCommand(CLI::App& parent) {
  ModelOptions* o = Keep<ModelOptions>();
  CLI::App* app = parent.add_subcommand(
      "model", "Show an LLM preset: dimensions, parameters per layer kind, FLOPs per token");
  app->add_option("preset", o->preset, "preset name (see --list)");
  app->add_option("--file", o->file,
                  "YAML model description ({preset: NAME, overrides} or all dims)");
  app->add_option("--model-dir", o->model_dir, "A Hugging Face model directory (its config.json)");
  AddNumber(app, "--seq", &o->seq, "sequence length for FLOPs and activations (default min(max_seq, 2048))", int64_t{0}, int64_t{1} << 24);
  app->add_flag("--json", o->json, "print JSON");
  app->add_flag("--list", o->list, "list the presets");
  return Command{app, [o] { return Run(*o); }};
}

TIERFLOW_COMMAND(MakeModelCommand);

}  // namespace
}  // namespace tierflow::cli
