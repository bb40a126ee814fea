#include "tierflow/real/cuda_llama.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tierflow/real/cuda_status.h"
#include "tierflow/real/cpu_ops.h"
#include "tierflow/real/cuda_ops.h"

namespace tierflow::real::cuda {

// Device buffers of one (batch, seq). bf16 unless named *32. A decoder's forward intermediates
// are shared by every layer (they are recomputed in backward).
struct LlamaBuffers {
  DeviceBuffer tokens, targets, rope_cos, rope_sin;
  DeviceBuffer boundary;                         // (L + 1) layer inputs: the embedding's output, then each decoder's
  DeviceBuffer n1, q, k, v, attn, h, n2, gate, up, act, tmp;
  DeviceBuffer rstd1_32, rstd2_32, lse32;  // lse32: attention's row statistics [batch, heads, seq]
  DeviceBuffer d_x32, d_a32, d_q32, d_k32, d_v32;  // gradients of activations
  DeviceBuffer g16, g16b, g16c;                  // those gradients rounded for the GEMMs
  DeviceBuffer xf, rstdf32, logits;              // the head
};

namespace {

template <typename V>
V* P(const DeviceBuffer& b) {
  return static_cast<V*>(b.data());
}

Status Zero(const Context& ctx, void* p, int64_t bytes) {
  TF_CUDA(cudaMemsetAsync(p, 0, static_cast<size_t>(bytes), static_cast<cudaStream_t>(ctx.stream())));
  return Status::Ok();
}

Status CopyOnDevice(const Context& ctx, void* dst, const void* src, int64_t bytes) {
  TF_CUDA(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice,
                          static_cast<cudaStream_t>(ctx.stream())));
  return Status::Ok();
}

}  // namespace

LlamaSteps::LlamaSteps(const Context& ctx, const LlamaSpec& spec, int64_t batch, int64_t seq)
    : ctx_(ctx),
      spec_(spec),
      layout_(MakeParamLayout(spec.config)),
      batch_(batch),
      seq_(seq),
      rows_(batch * seq),
      b_(std::make_unique<LlamaBuffers>()) {}

LlamaSteps::~LlamaSteps() = default;

StatusOr<std::unique_ptr<LlamaSteps>> LlamaSteps::Create(const Context& ctx, const LlamaSpec& spec, int64_t batch,
                                                         int64_t seq) {
  TF_RETURN_IF_ERROR(ValidateLlamaSpec(spec));
  if (spec.config.tied_embeddings) return InvalidArgument("GPU Llama steps: tied embeddings are not supported yet");
  if (spec.config.qkv_bias) return InvalidArgument("GPU Llama steps: q/k/v biases (Qwen2) are not supported yet (--compute cpu runs them)");
  if (!FlashAttentionTakesHeadDim(spec.config.head_dim())) {
    return InvalidArgument("GPU Llama steps: head_dim " + std::to_string(spec.config.head_dim()) +
                           " (the fused attention kernels take 16, 32, 64 or 128)");
  }
  if (batch < 1) return InvalidArgument("GPU Llama steps: batch " + std::to_string(batch) + " must be at least 1");
  TF_RETURN_IF_ERROR(ValidateLlamaSequence(spec, seq, "GPU Llama steps: sequence"));
  std::unique_ptr<LlamaSteps> s(new LlamaSteps(ctx, spec, batch, seq));
  TF_RETURN_IF_ERROR(s->Allocate());
  return s;
}

Status LlamaSteps::Allocate() {
  const models::LlmConfig& c = spec_.config;
  const int64_t C = c.hidden, F = c.ffn, d = c.head_dim(), q_dim = c.heads * d, kv_dim = c.kv_heads * d;
  const int64_t R = rows_, widest = std::max({C, F, q_dim});
  LlamaBuffers& b = *b_;
  auto alloc = [&](DeviceBuffer* buf, int64_t bytes) -> Status {
    TF_ASSIGN_OR_RETURN(*buf, ctx_.Allocate(bytes));
    return Status::Ok();
  };
  TF_RETURN_IF_ERROR(alloc(&b.tokens, R * 4));
  TF_RETURN_IF_ERROR(alloc(&b.targets, R * 4));
  TF_RETURN_IF_ERROR(alloc(&b.boundary, (c.layers + 1) * R * C * 2));
  for (auto [buf, width] : {std::pair{&b.n1, C}, {&b.q, q_dim}, {&b.k, kv_dim}, {&b.v, kv_dim}, {&b.attn, q_dim},
                            {&b.h, C}, {&b.n2, C}, {&b.gate, F}, {&b.up, F}, {&b.act, F}, {&b.tmp, C}, {&b.xf, C},
                            {&b.g16, widest}, {&b.g16b, widest}, {&b.g16c, widest}}) {
    TF_RETURN_IF_ERROR(alloc(buf, R * width * 2));
  }
  for (auto [buf, width] : {std::pair{&b.d_x32, C}, {&b.d_a32, widest}, {&b.d_q32, q_dim},
                            {&b.d_k32, kv_dim}, {&b.d_v32, kv_dim}}) {
    TF_RETURN_IF_ERROR(alloc(buf, R * width * 4));
  }
  TF_RETURN_IF_ERROR(alloc(&b.rstd1_32, R * 4));
  TF_RETURN_IF_ERROR(alloc(&b.rstd2_32, R * 4));
  TF_RETURN_IF_ERROR(alloc(&b.rstdf32, R * 4));
  TF_RETURN_IF_ERROR(alloc(&b.lse32, batch_ * c.heads * seq_ * 4));
  TF_RETURN_IF_ERROR(alloc(&b.logits, R * c.vocab * 2));
  std::vector<float> cos_table(static_cast<size_t>(seq_ * d / 2)), sin_table(cos_table.size());
  cpu::RopeTables(cos_table.data(), sin_table.data(), seq_, models::RopeInverseFrequencies(spec_.config));
  TF_RETURN_IF_ERROR(alloc(&b.rope_cos, static_cast<int64_t>(cos_table.size()) * 4));
  TF_RETURN_IF_ERROR(alloc(&b.rope_sin, static_cast<int64_t>(sin_table.size()) * 4));
  TF_RETURN_IF_ERROR(b.rope_cos.CopyFromHost(ctx_, cos_table.data(), b.rope_cos.size_bytes()));
  return b.rope_sin.CopyFromHost(ctx_, sin_table.data(), b.rope_sin.size_bytes());
}

Status LlamaSteps::SetBatch(const int32_t* tokens, const int32_t* targets) {
  const int64_t vocab = spec_.config.vocab;
  for (int64_t n = 0; n < rows_; ++n) {
    if (tokens[n] < 0 || tokens[n] >= vocab) {
      return InvalidArgument("token " + std::to_string(tokens[n]) + " at row " + std::to_string(n) +
                             " is outside the vocabulary of " + std::to_string(vocab));
    }
    if (targets[n] >= vocab) {
      return InvalidArgument("target " + std::to_string(targets[n]) + " at row " + std::to_string(n) +
                             " is outside the vocabulary of " + std::to_string(vocab));
    }
  }
  TF_RETURN_IF_ERROR(b_->tokens.CopyFromHost(ctx_, tokens, rows_ * 4));
  return b_->targets.CopyFromHost(ctx_, targets, rows_ * 4);
}

Status LlamaSteps::CheckParams(int64_t layer, const LayerParams& params) const {
  if (layer < 0 || layer >= layers()) return InvalidArgument("GPU Llama steps: no layer " + std::to_string(layer));
  const size_t tensors = layout_.LayerTensors(layer).size();
  if (params.size() != tensors || std::find(params.begin(), params.end(), nullptr) != params.end()) {
    return InvalidArgument("GPU Llama steps: layer " + std::to_string(layer) + " takes a pointer to each of its " +
                           std::to_string(tensors) + " tensors, given " + std::to_string(params.size()) +
                           (params.size() == tensors ? " with a null one" : ""));
  }
  return Status::Ok();
}

Status LlamaSteps::DecoderForward(int64_t layer, const DecoderParams<const uint16_t*>& w, uint16_t* x_out) {
  const models::LlmConfig& c = spec_.config;
  const int64_t C = c.hidden, F = c.ffn, H = c.heads, KV = c.kv_heads, d = c.head_dim(), R = rows_;
  LlamaBuffers& b = *b_;
  const uint16_t* x_in = P<uint16_t>(b.boundary) + (layer - 1) * R * C;
  TF_RETURN_IF_ERROR(RmsNormForward(ctx_, P<uint16_t>(b.n1), P<float>(b.rstd1_32), x_in, w.input_norm, R, C,
                                    spec_.config.norm_eps));
  TF_RETURN_IF_ERROR(LinearForward(ctx_, P<uint16_t>(b.q), P<const uint16_t>(b.n1), w.q, R, C, H * d));
  TF_RETURN_IF_ERROR(LinearForward(ctx_, P<uint16_t>(b.k), P<const uint16_t>(b.n1), w.k, R, C, KV * d));
  TF_RETURN_IF_ERROR(LinearForward(ctx_, P<uint16_t>(b.v), P<const uint16_t>(b.n1), w.v, R, C, KV * d));
  TF_RETURN_IF_ERROR(RopeForward(ctx_, P<uint16_t>(b.q), P<const float>(b.rope_cos), P<const float>(b.rope_sin), R, seq_, H, d));
  TF_RETURN_IF_ERROR(RopeForward(ctx_, P<uint16_t>(b.k), P<const float>(b.rope_cos), P<const float>(b.rope_sin), R, seq_, KV, d));
  TF_RETURN_IF_ERROR(FlashAttentionForward(ctx_, P<uint16_t>(b.attn), P<float>(b.lse32), P<const uint16_t>(b.q),
                                           P<const uint16_t>(b.k), P<const uint16_t>(b.v), batch_, seq_, H, KV, d));
  TF_RETURN_IF_ERROR(LinearForward(ctx_, P<uint16_t>(b.tmp), P<const uint16_t>(b.attn), w.o, R, H * d, C));
  TF_RETURN_IF_ERROR(ResidualAdd(ctx_, P<uint16_t>(b.h), x_in, P<const uint16_t>(b.tmp), R * C));
  TF_RETURN_IF_ERROR(RmsNormForward(ctx_, P<uint16_t>(b.n2), P<float>(b.rstd2_32), P<const uint16_t>(b.h), w.post_norm,
                                    R, C, spec_.config.norm_eps));
  TF_RETURN_IF_ERROR(LinearForward(ctx_, P<uint16_t>(b.gate), P<const uint16_t>(b.n2), w.gate, R, C, F));
  TF_RETURN_IF_ERROR(LinearForward(ctx_, P<uint16_t>(b.up), P<const uint16_t>(b.n2), w.up, R, C, F));
  TF_RETURN_IF_ERROR(SwiGluForward(ctx_, P<uint16_t>(b.act), P<const uint16_t>(b.gate), P<const uint16_t>(b.up), R * F));
  if (x_out == nullptr) return Status::Ok();
  TF_RETURN_IF_ERROR(LinearForward(ctx_, P<uint16_t>(b.tmp), P<const uint16_t>(b.act), w.down, R, F, C));
  return ResidualAdd(ctx_, x_out, P<const uint16_t>(b.h), P<const uint16_t>(b.tmp), R * C);
}

// Final norm, LM head and cross-entropy; with dlogits, the scaled gradient of the logits too.
Status LlamaSteps::HeadForward(const LayerParams& params, uint16_t* dlogits, float loss_scale) {
  const models::LlmConfig& c = spec_.config;
  const int64_t C = c.hidden, R = rows_;
  LlamaBuffers& b = *b_;
  const uint16_t* x_in = P<uint16_t>(b.boundary) + c.layers * R * C;
  TF_RETURN_IF_ERROR(RmsNormForward(ctx_, P<uint16_t>(b.xf), P<float>(b.rstdf32), x_in, params[0], R, C, spec_.config.norm_eps));
  TF_RETURN_IF_ERROR(LinearForward(ctx_, P<uint16_t>(b.logits), P<const uint16_t>(b.xf), params[1], R, C, c.vocab));
  TF_ASSIGN_OR_RETURN(loss_, CrossEntropyForwardBackward(ctx_, dlogits, P<const uint16_t>(b.logits),
                                                         P<const int32_t>(b.targets), R, c.vocab, loss_scale));
  return Status::Ok();
}

Status LlamaSteps::Forward(int64_t layer, const LayerParams& params) {
  const int64_t L = spec_.config.layers, C = spec_.config.hidden, R = rows_;
  TF_RETURN_IF_ERROR(CheckParams(layer, params));
  uint16_t* boundary = P<uint16_t>(b_->boundary);
  if (layer == 0) return EmbeddingForward(ctx_, boundary, P<const int32_t>(b_->tokens), params[0], R, C);
  if (layer <= L) return DecoderForward(layer, DecoderFromTensors(params), boundary + layer * R * C);
  return HeadForward(params, nullptr, 1.0f);
}

Status LlamaSteps::Backward(int64_t layer, const LayerParams& params, float* grads, float loss_scale) {
  const models::LlmConfig& c = spec_.config;
  const int64_t L = c.layers, C = c.hidden, F = c.ffn, H = c.heads, KV = c.kv_heads, d = c.head_dim(), R = rows_;
  TF_RETURN_IF_ERROR(CheckParams(layer, params));
  LlamaBuffers& b = *b_;
  float* d_x = P<float>(b.d_x32);
  // The embedding's and the head's gradients are added into; a decoder's are written by the GEMMs
  // that make them (GradMode::kOverwrite) but for its two norms'.
  if (layer == 0 || layer == L + 1) {
    TF_RETURN_IF_ERROR(Zero(ctx_, grads, layout_.layer_elements[static_cast<size_t>(layer)] * 4));
  }
  if (layer == 0) return EmbeddingBackward(ctx_, grads, P<const int32_t>(b.tokens), P<const float>(b.d_x32), R, C);
  if (layer == L + 1) {
    // dlogits over the logits' own buffer, then back through the LM head and the final norm.
    TF_RETURN_IF_ERROR(HeadForward(params, P<uint16_t>(b.logits), loss_scale));
    TF_RETURN_IF_ERROR(Zero(ctx_, b.d_a32.data(), R * C * 4));
    TF_RETURN_IF_ERROR(LinearBackward(ctx_, P<float>(b.d_a32), grads + C, P<const uint16_t>(b.logits),
                                      P<const uint16_t>(b.xf), params[1], R, C, c.vocab));
    TF_RETURN_IF_ERROR(Fp32ToBf16(ctx_, P<uint16_t>(b.g16), P<const float>(b.d_a32), R * C));
    TF_RETURN_IF_ERROR(Zero(ctx_, d_x, R * C * 4));
    const uint16_t* x_in = P<uint16_t>(b.boundary) + L * R * C;
    return RmsNormBackward(ctx_, d_x, grads, P<const uint16_t>(b.g16), x_in, params[0], P<const float>(b.rstdf32), R, C);
  }
  // A decoder: recompute its forward, then back from d_x (the gradient of its output).
  const auto w = DecoderFromTensors(params);
  TF_RETURN_IF_ERROR(DecoderForward(layer, w, nullptr));
  const auto g = DecoderView<float>(c, grads);
  const uint16_t* x_in = P<uint16_t>(b.boundary) + (layer - 1) * R * C;
  float* d_a = P<float>(b.d_a32);
  uint16_t* g16 = P<uint16_t>(b.g16);
  uint16_t* g16b = P<uint16_t>(b.g16b);
  uint16_t* g16c = P<uint16_t>(b.g16c);
  constexpr GradMode kSet = GradMode::kOverwrite, kAdd = GradMode::kAdd;
  TF_RETURN_IF_ERROR(Zero(ctx_, g.input_norm, C * 4));
  TF_RETURN_IF_ERROR(Zero(ctx_, g.post_norm, C * 4));
  // MLP: x_out = h + down(silu(gate(n2)) * up(n2)).
  TF_RETURN_IF_ERROR(Fp32ToBf16(ctx_, g16, d_x, R * C));                       // d x_out
  TF_RETURN_IF_ERROR(LinearBackward(ctx_, d_a, g.down, g16, P<const uint16_t>(b.act), w.down, R, F, C, kSet, kSet));
  TF_RETURN_IF_ERROR(Fp32ToBf16(ctx_, g16, d_a, R * F));                       // d act
  TF_RETURN_IF_ERROR(SwiGluBackwardBf16(ctx_, g16b, g16c, g16, P<const uint16_t>(b.gate), P<const uint16_t>(b.up),
                                        R * F));                               // d gate, d up
  TF_RETURN_IF_ERROR(LinearBackward(ctx_, d_a, g.gate, g16b, P<const uint16_t>(b.n2), w.gate, R, C, F, kSet, kSet));
  TF_RETURN_IF_ERROR(LinearBackward(ctx_, d_a, g.up, g16c, P<const uint16_t>(b.n2), w.up, R, C, F, kAdd, kSet));
  TF_RETURN_IF_ERROR(Fp32ToBf16(ctx_, g16, d_a, R * C));                       // d n2
  // d h = d x_out (the residual) + the post-norm's backward.
  TF_RETURN_IF_ERROR(RmsNormBackward(ctx_, d_x, g.post_norm, g16, P<const uint16_t>(b.h), w.post_norm,
                                     P<const float>(b.rstd2_32), R, C));
  // Attention: h = x_in + o(attn(rope(q(n1)), rope(k(n1)), v(n1))).
  TF_RETURN_IF_ERROR(Fp32ToBf16(ctx_, g16, d_x, R * C));                       // d h
  TF_RETURN_IF_ERROR(LinearBackward(ctx_, d_a, g.o, g16, P<const uint16_t>(b.attn), w.o, R, H * d, C, kSet, kSet));
  TF_RETURN_IF_ERROR(Fp32ToBf16(ctx_, g16, d_a, R * H * d));                   // d attn
  float* d_q = P<float>(b.d_q32);
  float* d_k = P<float>(b.d_k32);
  float* d_v = P<float>(b.d_v32);
  TF_RETURN_IF_ERROR(Zero(ctx_, d_q, R * H * d * 4));
  TF_RETURN_IF_ERROR(Zero(ctx_, d_k, R * KV * d * 4));
  TF_RETURN_IF_ERROR(Zero(ctx_, d_v, R * KV * d * 4));
  TF_RETURN_IF_ERROR(FlashAttentionBackward(ctx_, d_q, d_k, d_v, g16, P<const uint16_t>(b.q), P<const uint16_t>(b.k),
                                            P<const uint16_t>(b.v), P<const uint16_t>(b.attn), P<const float>(b.lse32),
                                            batch_, seq_, H, KV, d));
  TF_RETURN_IF_ERROR(RopeBackward(ctx_, d_q, P<const float>(b.rope_cos), P<const float>(b.rope_sin), R, seq_, H, d));
  TF_RETURN_IF_ERROR(RopeBackward(ctx_, d_k, P<const float>(b.rope_cos), P<const float>(b.rope_sin), R, seq_, KV, d));
  TF_RETURN_IF_ERROR(Fp32ToBf16(ctx_, g16, d_q, R * H * d));
  TF_RETURN_IF_ERROR(LinearBackward(ctx_, d_a, g.q, g16, P<const uint16_t>(b.n1), w.q, R, C, H * d, kSet, kSet));
  TF_RETURN_IF_ERROR(Fp32ToBf16(ctx_, g16, d_k, R * KV * d));
  TF_RETURN_IF_ERROR(LinearBackward(ctx_, d_a, g.k, g16, P<const uint16_t>(b.n1), w.k, R, C, KV * d, kAdd, kSet));
  TF_RETURN_IF_ERROR(Fp32ToBf16(ctx_, g16, d_v, R * KV * d));
  TF_RETURN_IF_ERROR(LinearBackward(ctx_, d_a, g.v, g16, P<const uint16_t>(b.n1), w.v, R, C, KV * d, kAdd, kSet));
  TF_RETURN_IF_ERROR(Fp32ToBf16(ctx_, g16, d_a, R * C));                       // d n1
  // d x_in = d h (the residual) + the input norm's backward, in place in d_x.
  return RmsNormBackward(ctx_, d_x, g.input_norm, g16, x_in, w.input_norm, P<const float>(b.rstd1_32), R, C);
}

}  // namespace tierflow::real::cuda
