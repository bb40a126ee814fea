// The Llama-family decoder for training, organised as the schedule runs it: one step per
// embedding, per decoder layer and for the head, each given its parameters as one contiguous
// buffer (the layer's slice of a flat parameter buffer) and the activations of the layer
// boundary. Activation checkpointing is at layer boundaries: DecoderBackward recomputes the
// layer's forward from its input before going backward.
//
// Math (docs/training-math.md; matches Hugging Face's LlamaForCausalLM in eager attention):
//   x = embed[tokens]
//   per layer: h = x + o_proj(attn(rope(q_proj(n1)), rope(k_proj(n1)), v_proj(n1))), n1 = rmsnorm(x)
//              x' = h + down_proj(silu(gate_proj(n2)) * up_proj(n2)),              n2 = rmsnorm(h)
//   logits = lm_head(rmsnorm(x_L));  loss = mean over targets >= 0 of -log softmax(logits)[target]
//
// The flat parameter layout is models::Layers() order, each tensor row-major in its Hugging Face
// shape, so a layer's tensors are one contiguous range and a sub-group is any element range.
// Thread safety: functions use `threads` for their duration; a workspace belongs to one caller.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tierflow/core/status.h"
#include "tierflow/models/llm.h"
#include "tierflow/real/cpu_threads.h"

namespace tierflow::real {

// The architecture, for this math (ValidateLlamaSpec): models::LlmConfig carries the constants
// it needs besides the dimensions (norm_eps, rope_theta, rope_scaling, sliding_window), and
// models::LlmFromHfConfig reads a Hugging Face config.json into one.
struct LlamaSpec {
  models::LlmConfig config;
};

// OK for what this math implements: SwiGLU, rotary, RMSNorm, no linear biases but on q, k and v
// (qkv_bias), untied or tied embeddings, heads % kv_heads == 0, an even head_dim. Errors name the
// unsupported field.
Status ValidateLlamaSpec(const LlamaSpec& spec);
// OK when sequences of `seq` tokens run as the model defines them: 1 <= seq <= max_seq, and
// within a sliding window (where attention is plain causal). Errors name `what`.
Status ValidateLlamaSequence(const LlamaSpec& spec, int64_t seq, const std::string& what);

struct ParamTensor {
  std::string name;             // Hugging Face name
  std::vector<int64_t> shape;
  int64_t offset = 0;           // first element in the flat buffer
  int64_t elements = 0;
  int32_t layer = 0;            // models::Layers() index
};

struct ParamLayout {
  std::vector<ParamTensor> tensors;    // flat-buffer order
  std::vector<int64_t> layer_offset;   // per models::Layers() entry
  std::vector<int64_t> layer_elements;
  std::vector<size_t> layer_first_tensor;  // per models::Layers() entry, an index into tensors
  int64_t total = 0;
  const ParamTensor* Find(std::string_view name) const;  // null when absent
  // The tensors of models::Layers() entry `layer`, in flat-buffer order. Requires a valid layer.
  std::span<const ParamTensor> LayerTensors(int64_t layer) const;
};
ParamLayout MakeParamLayout(const models::LlmConfig& config);

// A pointer to each tensor of `layer` (LayerTensors order) inside the layer's contiguous slice
// at `layer_base`.
template <typename T>
std::vector<T*> LayerTensorPointers(const ParamLayout& layout, int64_t layer, T* layer_base) {
  std::vector<T*> out;
  const int64_t begin = layout.layer_offset[static_cast<size_t>(layer)];
  for (const ParamTensor& t : layout.LayerTensors(layer)) out.push_back(layer_base + (t.offset - begin));
  return out;
}

// The tensors of one decoder layer inside its contiguous slice (P = const T* or T*); the q, k and
// v biases are null unless the model has them (qkv_bias, Qwen2).
template <typename P>
struct DecoderParams {
  P input_norm, q, k, v, o, post_norm, gate, up, down;
  P q_bias = nullptr, k_bias = nullptr, v_bias = nullptr;
};
template <typename T>
DecoderParams<T*> DecoderView(const models::LlmConfig& config, T* layer_base);
// The same from a pointer per tensor in models::Layers() order (LayerTensorPointers, or wherever
// each tensor lives: the tensors need not share one slice). Requires the decoder's 9 tensors, or
// 12 with q/k/v biases (each after its weight).
template <typename T>
DecoderParams<T*> DecoderFromTensors(const std::vector<T*>& t) {
  TF_CHECK(t.size() == 9 || t.size() == 12);
  if (t.size() == 9) return {t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8]};
  return {t[0], t[1], t[3], t[5], t[7], t[8], t[9], t[10], t[11], t[2], t[4], t[6]};
}

// Scratch for one (batch, seq): the rotary tables, one layer's forward intermediates (reused by
// every layer: they are recomputed in backward), backward scratch and the head's logits.
template <typename T>
struct LlamaWorkspace {
  LlamaWorkspace(const LlamaSpec& spec, int64_t batch, int64_t seq);
  int64_t batch, seq, rows;
  std::vector<T> rope_cos, rope_sin;
  std::vector<T> xn1, rstd1, q, k, v, probs, attn, h, xn2, rstd2, gate, up, act;
  std::vector<T> d_h, d_xn, d_q, d_k, d_v, d_attn, d_gate, d_up, d_act;
  std::vector<T> xf, rstdf, logits, d_logits, d_xf;
};

// x_out[rows, hidden] = table[tokens].
template <typename T>
void EmbedForward(const LlamaSpec& spec, const T* table, const int32_t* tokens, T* x_out,
                  LlamaWorkspace<T>& ws, CpuThreads& threads);
// d_table += scatter of d_x by tokens.
template <typename T>
void EmbedBackward(const LlamaSpec& spec, T* d_table, const int32_t* tokens, const T* d_x,
                   LlamaWorkspace<T>& ws, CpuThreads& threads);

// One decoder layer: x_out = layer(x_in). x_out must not alias x_in. Leaves the intermediates in
// ws (DecoderBackward recomputes them itself).
template <typename T>
void DecoderForward(const LlamaSpec& spec, const DecoderParams<const T*>& w, const T* x_in,
                    T* x_out, LlamaWorkspace<T>& ws, CpuThreads& threads);
// Recomputes the layer from x_in, then: grads += dL/dparams, d_in = dL/dx_in (overwritten;
// d_in may alias d_out).
template <typename T>
void DecoderBackward(const LlamaSpec& spec, const DecoderParams<const T*>& w,
                     const DecoderParams<T*>& grads, const T* x_in, const T* d_out, T* d_in,
                     LlamaWorkspace<T>& ws, CpuThreads& threads);

// Final norm, LM head and mean cross-entropy, forward and (when d_in is not null) backward in
// one step: logits are left in ws.logits; d_norm and d_lm_head += gradients of
// loss * loss_scale; d_in = its gradient w.r.t. x_in (overwritten). Returns the loss (unscaled).
// With tied embeddings pass the embedding table (and its gradient) as lm_head.
template <typename T>
double HeadForwardBackward(const LlamaSpec& spec, const T* norm, const T* lm_head, T* d_norm,
                           T* d_lm_head, const T* x_in, const int32_t* targets, T* d_in,
                           double loss_scale, LlamaWorkspace<T>& ws, CpuThreads& threads);

// A whole model over flat buffers, for tests and the quickstart: it calls the steps above in
// order and keeps only the layer-boundary activations.
template <typename T>
class LlamaModel {
 public:
  // Requires ValidateLlamaSpec(spec).ok(), 1 <= seq <= max_seq, batch >= 1. Parameters start at 0.
  LlamaModel(LlamaSpec spec, int64_t batch, int64_t seq, CpuThreads& threads);

  const LlamaSpec& spec() const { return spec_; }
  const ParamLayout& layout() const { return layout_; }
  std::vector<T>& params() { return params_; }
  std::vector<T>& grads() { return grads_; }
  const std::vector<T>& logits() const { return ws_.logits; }  // [batch * seq, vocab]

  // tokens and targets are [batch * seq]; a target < 0 is ignored. Returns the mean loss.
  double Forward(const int32_t* tokens, const int32_t* targets);
  // Forward and backward; grads += d(loss * loss_scale)/d params. Returns the mean loss.
  double ForwardBackward(const int32_t* tokens, const int32_t* targets, double loss_scale = 1.0);
  void ZeroGrads();

 private:
  DecoderParams<const T*> Layer(const std::vector<T>& buffer, int64_t layer) const;
  const T* LmHead(const std::vector<T>& buffer) const;

  LlamaSpec spec_;
  ParamLayout layout_;
  CpuThreads* threads_;
  std::vector<T> params_, grads_;
  std::vector<std::vector<T>> boundary_;  // layer inputs: embedding output, then each layer's
  std::vector<T> d_x_;
  LlamaWorkspace<T> ws_;
};
using Llama = LlamaModel<float>;

// The mean cross-entropy of fp32 parameters (MakeParamLayout order) on `batch` sequences of
// `seq` tokens (inputs and targets [batch * seq]), in LlamaModel's fp32 math: a held-out batch's
// loss, as transformers computes it from the same weights saved in fp32. Requires
// ValidateLlamaSpec(spec) and ValidateLlamaSequence(spec, seq).
double EvalLoss(const LlamaSpec& spec, const float* params, const std::vector<int32_t>& inputs,
                const std::vector<int32_t>& targets, int64_t batch, int64_t seq, CpuThreads& threads);

// Fills params like Hugging Face's LlamaPreTrainedModel: normal(0, std) for embeddings and
// linear weights, 1 for norms; deterministic for a seed on any platform and thread count (it
// runs on DefaultCpuThreads()).
void InitLlamaParams(const ParamLayout& layout, float* params, uint64_t seed, float std = 0.02f);

}  // namespace tierflow::real
