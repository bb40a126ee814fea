#include "tierflow/real/llama.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "tierflow/real/cpu_ops.h"

namespace tierflow::real {

using models::LlmConfig;

Status ValidateLlamaSpec(const LlamaSpec& spec) {
  const LlmConfig& c = spec.config;
  const std::string what = "llama model '" + c.name + "': ";
  TF_RETURN_IF_ERROR(models::ValidateLlm(c).WithContext("llama model '" + c.name + "'"));
  if (c.mlp != models::MlpKind::kSwiGlu) return InvalidArgument(what + "mlp must be swiglu");
  if (c.position != models::PositionKind::kRotary) {
    return InvalidArgument(what + "position must be rotary");
  }
  if (c.norm != models::NormKind::kRmsNorm) return InvalidArgument(what + "norm must be rmsnorm");
  if (c.attention_bias) return InvalidArgument(what + "attention_bias is not supported");
  if (c.heads % c.kv_heads != 0) {
    return InvalidArgument(what + "heads must be a multiple of kv_heads");
  }
  if (c.hidden % c.heads != 0 || c.head_dim() % 2 != 0) {
    return InvalidArgument(what + "head_dim = hidden / heads must be an even integer");
  }
  return Status::Ok();
}

Status ValidateLlamaSequence(const LlamaSpec& spec, int64_t seq, const std::string& what) {
  const LlmConfig& c = spec.config;
  if (seq < 1 || seq > c.max_seq) {
    return InvalidArgument(what + " " + std::to_string(seq) + " is outside 1.." + std::to_string(c.max_seq) +
                           " (the model's max_seq)");
  }
  if (c.sliding_window > 0 && seq > c.sliding_window) {
    return InvalidArgument(what + " " + std::to_string(seq) + " is above the model's sliding_window " +
                           std::to_string(c.sliding_window) +
                           ": sliding-window attention is not implemented (train sequences within the window)");
  }
  return Status::Ok();
}

const ParamTensor* ParamLayout::Find(std::string_view name) const {
  for (const ParamTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::span<const ParamTensor> ParamLayout::LayerTensors(int64_t layer) const {
  TF_CHECK(layer >= 0 && static_cast<size_t>(layer) < layer_first_tensor.size());
  const size_t first = layer_first_tensor[static_cast<size_t>(layer)];
  const size_t end = static_cast<size_t>(layer) + 1 < layer_first_tensor.size() ? layer_first_tensor[static_cast<size_t>(layer) + 1] : tensors.size();
  return std::span<const ParamTensor>(tensors).subspan(first, end - first);
}

ParamLayout MakeParamLayout(const LlmConfig& config) {
  ParamLayout layout;
  for (const models::LayerInfo& info : models::Layers(config)) {
    layout.layer_offset.push_back(layout.total);
    layout.layer_first_tensor.push_back(layout.tensors.size());
    int64_t layer_elements = 0;
    for (const models::TensorShape& shape : info.tensors) {
      ParamTensor t;
      t.name = shape.name;
      t.shape = shape.shape;
      t.offset = layout.total;
      t.elements = shape.elements();
      t.layer = info.index;
      layout.total += t.elements;
      layer_elements += t.elements;
      layout.tensors.push_back(std::move(t));
    }
    layout.layer_elements.push_back(layer_elements);
  }
  return layout;
}

template <typename T>
DecoderParams<T*> DecoderView(const LlmConfig& c, T* base) {
  const int64_t h = c.hidden;
  const int64_t q_dim = c.heads * c.head_dim();
  const int64_t kv_dim = c.kv_heads * c.head_dim();
  DecoderParams<T*> p;
  T* cursor = base;
  auto take = [&](int64_t n) {
    T* t = cursor;
    cursor += n;
    return t;
  };
  // The order of models::Layers().
  const bool bias = c.qkv_bias;
  p.input_norm = take(h);
  p.q = take(q_dim * h);
  if (bias) p.q_bias = take(q_dim);
  p.k = take(kv_dim * h);
  if (bias) p.k_bias = take(kv_dim);
  p.v = take(kv_dim * h);
  if (bias) p.v_bias = take(kv_dim);
  p.o = take(h * q_dim);
  p.post_norm = take(h);
  p.gate = take(c.ffn * h);
  p.up = take(c.ffn * h);
  p.down = take(h * c.ffn);
  return p;
}

template <typename T>
LlamaWorkspace<T>::LlamaWorkspace(const LlamaSpec& spec, int64_t batch_in, int64_t seq_in)
    : batch(batch_in), seq(seq_in), rows(batch_in * seq_in) {
  const LlmConfig& c = spec.config;
  const auto n = [](int64_t x) { return static_cast<size_t>(x); };
  const int64_t q_dim = c.heads * c.head_dim();
  const int64_t kv_dim = c.kv_heads * c.head_dim();
  rope_cos.resize(n(seq * c.head_dim() / 2));
  rope_sin.resize(n(seq * c.head_dim() / 2));
  cpu::RopeTables(rope_cos.data(), rope_sin.data(), seq, models::RopeInverseFrequencies(c));
  for (auto* buffer : {&xn1, &h, &xn2, &d_h, &d_xn, &xf, &d_xf}) buffer->resize(n(rows * c.hidden));
  for (auto* buffer : {&rstd1, &rstd2, &rstdf}) buffer->resize(n(rows));
  for (auto* buffer : {&q, &attn, &d_q, &d_attn}) buffer->resize(n(rows * q_dim));
  for (auto* buffer : {&k, &v, &d_k, &d_v}) buffer->resize(n(rows * kv_dim));
  probs.resize(n(batch * c.heads * seq * seq));
  for (auto* buffer : {&gate, &up, &act, &d_gate, &d_up, &d_act}) buffer->resize(n(rows * c.ffn));
  logits.resize(n(rows * c.vocab));
  d_logits.resize(n(rows * c.vocab));
}

template <typename T>
void EmbedForward(const LlamaSpec& spec, const T* table, const int32_t* tokens, T* x_out,
                  LlamaWorkspace<T>& ws, CpuThreads& threads) {
  cpu::EmbeddingForward(x_out, tokens, table, ws.rows, spec.config.hidden, threads);
}

template <typename T>
void EmbedBackward(const LlamaSpec& spec, T* d_table, const int32_t* tokens, const T* d_x,
                   LlamaWorkspace<T>& ws, CpuThreads& threads) {
  cpu::EmbeddingBackward(d_table, tokens, d_x, ws.rows, spec.config.hidden, threads);
}

template <typename T>
void DecoderForward(const LlamaSpec& spec, const DecoderParams<const T*>& w, const T* x_in,
                    T* x_out, LlamaWorkspace<T>& ws, CpuThreads& threads) {
  const LlmConfig& c = spec.config;
  const int64_t N = ws.rows, C = c.hidden, D = c.head_dim(), F = c.ffn;
  const int64_t q_dim = c.heads * D, kv_dim = c.kv_heads * D;
  // Attention block.
  cpu::RmsNormForward(ws.xn1.data(), ws.rstd1.data(), x_in, w.input_norm, N, C,
                      spec.config.norm_eps, threads);
  cpu::LinearForward(ws.q.data(), ws.xn1.data(), w.q, N, C, q_dim, threads);
  cpu::LinearForward(ws.k.data(), ws.xn1.data(), w.k, N, C, kv_dim, threads);
  cpu::LinearForward(ws.v.data(), ws.xn1.data(), w.v, N, C, kv_dim, threads);
  if (w.q_bias != nullptr) {  // Qwen2: before the rotation
    cpu::BiasForward(ws.q.data(), w.q_bias, N, q_dim, threads);
    cpu::BiasForward(ws.k.data(), w.k_bias, N, kv_dim, threads);
    cpu::BiasForward(ws.v.data(), w.v_bias, N, kv_dim, threads);
  }
  cpu::RopeForward(ws.q.data(), ws.rope_cos.data(), ws.rope_sin.data(), N, ws.seq, c.heads, D,
                   threads);
  cpu::RopeForward(ws.k.data(), ws.rope_cos.data(), ws.rope_sin.data(), N, ws.seq, c.kv_heads, D,
                   threads);
  cpu::AttentionForward(ws.attn.data(), ws.probs.data(), ws.q.data(), ws.k.data(), ws.v.data(),
                        ws.batch, ws.seq, c.heads, c.kv_heads, D, threads);
  cpu::LinearForward(ws.h.data(), ws.attn.data(), w.o, N, q_dim, C, threads);
  cpu::ResidualAdd(ws.h.data(), ws.h.data(), x_in, N * C, threads);
  // MLP block.
  cpu::RmsNormForward(ws.xn2.data(), ws.rstd2.data(), ws.h.data(), w.post_norm, N, C,
                      spec.config.norm_eps, threads);
  cpu::LinearForward(ws.gate.data(), ws.xn2.data(), w.gate, N, C, F, threads);
  cpu::LinearForward(ws.up.data(), ws.xn2.data(), w.up, N, C, F, threads);
  cpu::SwiGluForward(ws.act.data(), ws.gate.data(), ws.up.data(), N * F, threads);
  cpu::LinearForward(x_out, ws.act.data(), w.down, N, F, C, threads);
  cpu::ResidualAdd(x_out, x_out, ws.h.data(), N * C, threads);
}

template <typename T>
void DecoderBackward(const LlamaSpec& spec, const DecoderParams<const T*>& w,
                     const DecoderParams<T*>& g, const T* x_in, const T* d_out, T* d_in,
                     LlamaWorkspace<T>& ws, CpuThreads& threads) {
  const LlmConfig& c = spec.config;
  const int64_t N = ws.rows, C = c.hidden, D = c.head_dim(), F = c.ffn;
  const int64_t q_dim = c.heads * D, kv_dim = c.kv_heads * D;
  // Recompute the forward from the checkpointed input; the output itself is not needed, so it
  // goes to d_xn, which is scratch until the MLP backward below.
  DecoderForward<T>(spec, w, x_in, ws.d_xn.data(), ws, threads);
  auto zero = [](std::vector<T>& b) { std::fill(b.begin(), b.end(), static_cast<T>(0)); };

  // MLP block: x_out = h + down(act); d_h = d_out + d(rmsnorm branch).
  std::copy_n(d_out, N * C, ws.d_h.data());
  zero(ws.d_act);
  cpu::LinearBackward(ws.d_act.data(), g.down, d_out, ws.act.data(), w.down, N, F, C, threads);
  zero(ws.d_gate);
  zero(ws.d_up);
  cpu::SwiGluBackward(ws.d_gate.data(), ws.d_up.data(), ws.d_act.data(), ws.gate.data(),
                      ws.up.data(), N * F, threads);
  zero(ws.d_xn);
  cpu::LinearBackward(ws.d_xn.data(), g.gate, ws.d_gate.data(), ws.xn2.data(), w.gate, N, C, F,
                      threads);
  cpu::LinearBackward(ws.d_xn.data(), g.up, ws.d_up.data(), ws.xn2.data(), w.up, N, C, F,
                      threads);
  cpu::RmsNormBackward(ws.d_h.data(), g.post_norm, ws.d_xn.data(), ws.h.data(), w.post_norm,
                       ws.rstd2.data(), N, C, threads);

  // Attention block: h = x_in + o(attn); d_in = d_h + d(rmsnorm branch).
  std::copy_n(ws.d_h.data(), N * C, d_in);
  zero(ws.d_attn);
  cpu::LinearBackward(ws.d_attn.data(), g.o, ws.d_h.data(), ws.attn.data(), w.o, N, q_dim, C,
                      threads);
  zero(ws.d_q);
  zero(ws.d_k);
  zero(ws.d_v);
  cpu::AttentionBackward(ws.d_q.data(), ws.d_k.data(), ws.d_v.data(), ws.d_attn.data(),
                         ws.q.data(), ws.k.data(), ws.v.data(), ws.probs.data(), ws.batch,
                         ws.seq, c.heads, c.kv_heads, D, threads);
  cpu::RopeBackward(ws.d_q.data(), ws.rope_cos.data(), ws.rope_sin.data(), N, ws.seq, c.heads, D,
                    threads);
  cpu::RopeBackward(ws.d_k.data(), ws.rope_cos.data(), ws.rope_sin.data(), N, ws.seq, c.kv_heads,
                    D, threads);
  if (g.q_bias != nullptr) {
    cpu::BiasBackward(g.q_bias, ws.d_q.data(), N, q_dim, threads);
    cpu::BiasBackward(g.k_bias, ws.d_k.data(), N, kv_dim, threads);
    cpu::BiasBackward(g.v_bias, ws.d_v.data(), N, kv_dim, threads);
  }
  zero(ws.d_xn);
  cpu::LinearBackward(ws.d_xn.data(), g.q, ws.d_q.data(), ws.xn1.data(), w.q, N, C, q_dim,
                      threads);
  cpu::LinearBackward(ws.d_xn.data(), g.k, ws.d_k.data(), ws.xn1.data(), w.k, N, C, kv_dim,
                      threads);
  cpu::LinearBackward(ws.d_xn.data(), g.v, ws.d_v.data(), ws.xn1.data(), w.v, N, C, kv_dim,
                      threads);
  cpu::RmsNormBackward(d_in, g.input_norm, ws.d_xn.data(), x_in, w.input_norm, ws.rstd1.data(),
                       N, C, threads);
}

template <typename T>
double HeadForwardBackward(const LlamaSpec& spec, const T* norm, const T* lm_head, T* d_norm,
                           T* d_lm_head, const T* x_in, const int32_t* targets, T* d_in,
                           double loss_scale, LlamaWorkspace<T>& ws, CpuThreads& threads) {
  const LlmConfig& c = spec.config;
  const int64_t N = ws.rows, C = c.hidden, V = c.vocab;
  cpu::RmsNormForward(ws.xf.data(), ws.rstdf.data(), x_in, norm, N, C, spec.config.norm_eps,
                      threads);
  cpu::LinearForward(ws.logits.data(), ws.xf.data(), lm_head, N, C, V, threads);
  if (targets == nullptr) return 0.0;
  const bool backward = d_in != nullptr;
  const double loss = cpu::CrossEntropyForwardBackward(
      backward ? ws.d_logits.data() : static_cast<T*>(nullptr), ws.logits.data(), targets, N, V,
      loss_scale, threads);
  if (!backward) return loss;
  std::fill(ws.d_xf.begin(), ws.d_xf.end(), static_cast<T>(0));
  cpu::LinearBackward(ws.d_xf.data(), d_lm_head, ws.d_logits.data(), ws.xf.data(), lm_head, N, C,
                      V, threads);
  std::fill_n(d_in, N * C, static_cast<T>(0));
  cpu::RmsNormBackward(d_in, d_norm, ws.d_xf.data(), x_in, norm, ws.rstdf.data(), N, C, threads);
  return loss;
}

template <typename T>
LlamaModel<T>::LlamaModel(LlamaSpec spec, int64_t batch, int64_t seq, CpuThreads& threads)
    : spec_(std::move(spec)),
      layout_(MakeParamLayout(spec_.config)),
      threads_(&threads),
      params_(static_cast<size_t>(layout_.total)),
      grads_(static_cast<size_t>(layout_.total)),
      ws_(spec_, batch, seq) {
  TF_CHECK(ValidateLlamaSpec(spec_).ok());
  TF_CHECK(batch >= 1 && seq >= 1 && seq <= spec_.config.max_seq);
  boundary_.resize(static_cast<size_t>(spec_.config.layers + 1));
  for (auto& b : boundary_) b.resize(static_cast<size_t>(ws_.rows * spec_.config.hidden));
  d_x_.resize(static_cast<size_t>(ws_.rows * spec_.config.hidden));
}

template <typename T>
DecoderParams<const T*> LlamaModel<T>::Layer(const std::vector<T>& buffer, int64_t layer) const {
  const T* base = buffer.data() + layout_.layer_offset[static_cast<size_t>(layer + 1)];
  return DecoderView<const T>(spec_.config, base);
}

template <typename T>
const T* LlamaModel<T>::LmHead(const std::vector<T>& buffer) const {
  const size_t head = static_cast<size_t>(spec_.config.layers + 1);
  // Tied: the embedding table; untied: after the final norm in the head's range.
  if (spec_.config.tied_embeddings) return buffer.data();
  return buffer.data() + layout_.layer_offset[head] + spec_.config.hidden;
}

template <typename T>
double LlamaModel<T>::Forward(const int32_t* tokens, const int32_t* targets) {
  const int64_t L = spec_.config.layers;
  const T* head_norm = params_.data() + layout_.layer_offset[static_cast<size_t>(L + 1)];
  EmbedForward(spec_, params_.data(), tokens, boundary_[0].data(), ws_, *threads_);
  for (int64_t l = 0; l < L; ++l) {
    DecoderForward<T>(spec_, Layer(params_, l), boundary_[static_cast<size_t>(l)].data(),
                      boundary_[static_cast<size_t>(l + 1)].data(), ws_, *threads_);
  }
  return HeadForwardBackward<T>(spec_, head_norm, LmHead(params_), nullptr, nullptr,
                                boundary_[static_cast<size_t>(L)].data(), targets, nullptr, 1.0,
                                ws_, *threads_);
}

template <typename T>
double LlamaModel<T>::ForwardBackward(const int32_t* tokens, const int32_t* targets,
                                      double loss_scale) {
  TF_CHECK(targets != nullptr);
  const int64_t L = spec_.config.layers;
  Forward(tokens, nullptr);
  const size_t head = static_cast<size_t>(L + 1);
  T* d_lm_head = const_cast<T*>(LmHead(grads_));
  const double loss = HeadForwardBackward<T>(
      spec_, params_.data() + layout_.layer_offset[head], LmHead(params_),
      grads_.data() + layout_.layer_offset[head], d_lm_head,
      boundary_[static_cast<size_t>(L)].data(), targets, d_x_.data(), loss_scale, ws_, *threads_);
  for (int64_t l = L - 1; l >= 0; --l) {
    DecoderParams<T*> g =
        DecoderView(spec_.config, grads_.data() + layout_.layer_offset[static_cast<size_t>(l + 1)]);
    DecoderBackward<T>(spec_, Layer(params_, l), g, boundary_[static_cast<size_t>(l)].data(),
                       d_x_.data(), d_x_.data(), ws_, *threads_);
  }
  EmbedBackward(spec_, grads_.data(), tokens, d_x_.data(), ws_, *threads_);
  return loss;
}

template <typename T>
void LlamaModel<T>::ZeroGrads() {
  std::fill(grads_.begin(), grads_.end(), static_cast<T>(0));
}

namespace {

// splitmix64: a portable generator (std:: distributions differ between standard libraries).
constexpr uint64_t kSplitMixGamma = 0x9e3779b97f4a7c15ull;

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += kSplitMixGamma);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double Uniform01(uint64_t& state) {
  return (static_cast<double>(SplitMix64(state) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

}  // namespace

double EvalLoss(const LlamaSpec& spec, const float* params, const std::vector<int32_t>& inputs,
                const std::vector<int32_t>& targets, int64_t batch, int64_t seq, CpuThreads& threads) {
  TF_CHECK(inputs.size() == static_cast<size_t>(batch * seq) && targets.size() == inputs.size());
  Llama model(spec, batch, seq, threads);
  std::copy(params, params + model.layout().total, model.params().begin());
  return model.Forward(inputs.data(), targets.data());
}

void InitLlamaParams(const ParamLayout& layout, float* params, uint64_t seed, float std_dev) {
  // One sequence of uniforms, two per drawn element in layout order. SplitMix64's state is a
  // counter (seed + k x gamma after k draws), so a chunk of elements starts where the sequence
  // would be without drawing what comes before: the same values on any number of threads.
  int64_t drawn = 0;  // elements drawn by the tensors before this one
  for (const ParamTensor& t : layout.tensors) {
    float* p = params + t.offset;
    if (t.shape.size() == 1) {  // a norm weight
      std::fill_n(p, t.elements, 1.0f);
      continue;
    }
    const int64_t first = drawn;
    DefaultCpuThreads().ParallelFor(t.elements, int64_t{1} << 16, [&](int64_t begin, int64_t end) {
      uint64_t state = seed + static_cast<uint64_t>(2 * (first + begin)) * kSplitMixGamma;
      for (int64_t i = begin; i < end; ++i) {  // Box-Muller, one value per pair of uniforms
        const double u1 = Uniform01(state), u2 = Uniform01(state);
        const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
        p[i] = static_cast<float>(z * std_dev);
      }
    });
    drawn += t.elements;
  }
}

#define TF_INSTANTIATE(T)                                                                        \
  template DecoderParams<T*> DecoderView<T>(const LlmConfig&, T*);                               \
  template DecoderParams<const T*> DecoderView<const T>(const LlmConfig&, const T*);             \
  template struct LlamaWorkspace<T>;                                                             \
  template void EmbedForward<T>(const LlamaSpec&, const T*, const int32_t*, T*,                  \
                                LlamaWorkspace<T>&, CpuThreads&);                                \
  template void EmbedBackward<T>(const LlamaSpec&, T*, const int32_t*, const T*,                 \
                                 LlamaWorkspace<T>&, CpuThreads&);                               \
  template void DecoderForward<T>(const LlamaSpec&, const DecoderParams<const T*>&, const T*,    \
                                  T*, LlamaWorkspace<T>&, CpuThreads&);                          \
  template void DecoderBackward<T>(const LlamaSpec&, const DecoderParams<const T*>&,             \
                                   const DecoderParams<T*>&, const T*, const T*, T*,             \
                                   LlamaWorkspace<T>&, CpuThreads&);                             \
  template double HeadForwardBackward<T>(const LlamaSpec&, const T*, const T*, T*, T*,           \
                                         const T*, const int32_t*, T*, double,                   \
                                         LlamaWorkspace<T>&, CpuThreads&);                       \
  template class LlamaModel<T>;

TF_INSTANTIATE(float)
TF_INSTANTIATE(double)
#undef TF_INSTANTIATE
// The GPU steps view a layer's device slice of bf16 parameters (cuda_llama.h).
template DecoderParams<const uint16_t*> DecoderView<const uint16_t>(const LlmConfig&, const uint16_t*);

}  // namespace tierflow::real
