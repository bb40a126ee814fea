// The named compute ops of the training math, shared by every compute back-end (cpu now, cuda
// later), in the style of ggml's op table: a back-end answers SupportsOp() for each, and the
// executor runs a schedule's `compute`, `optimizer` and `convert` tasks through them.
//
// Names are stable strings (they appear in docs/training-math.md and back-end consistency tests).
// Thread safety: pure functions.
#pragma once

#include <optional>
#include <string_view>

namespace tierflow::real {

enum class ComputeOp {
  kEmbeddingFwd,          // out[n,:] = table[token[n],:]
  kEmbeddingBwd,          // dtable[token[n],:] += dout[n,:]
  kRmsNormFwd,            // out = w * x / sqrt(mean(x^2) + eps), saves 1/rms per row
  kRmsNormBwd,
  kLinearFwd,             // out[N,O] = x[N,I] W[O,I]^T (PyTorch nn.Linear layout, no bias)
  kLinearBwd,             // dx += dout W, dW += dout^T x
  kRopeFwd,               // rotary embedding, Hugging Face rotate_half convention, in place
  kRopeBwd,
  kAttentionFwd,          // causal softmax(q k^T / sqrt(d)) v, grouped-query heads
  kAttentionBwd,
  kSwiGluFwd,             // a = silu(gate) * up
  kSwiGluBwd,
  kResidualAdd,           // out = a + b
  kCrossEntropyFwdBwd,    // mean cross-entropy over targets >= 0 and dlogits in one pass
  kOverflowCheckAndNorm,  // finite check and sum of squares of (scaled) gradients, read-only
  kAdamW,                 // fused AdamW over an element range, optional bf16 copy
  kFp32ToBf16,            // round to nearest even
  kCount,
};

// "embedding_fwd", "rmsnorm_bwd", "adamw", ...
std::string_view ComputeOpName(ComputeOp op);
// The op with that name, or nullopt.
std::optional<ComputeOp> ComputeOpFromName(std::string_view name);

}  // namespace tierflow::real
