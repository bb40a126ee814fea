#include "tierflow/real/compute_ops.h"

#include <array>

namespace tierflow::real {
namespace {

constexpr std::array<std::string_view, static_cast<size_t>(ComputeOp::kCount)> kNames = {
    "embedding_fwd", "embedding_bwd", "rmsnorm_fwd",  "rmsnorm_bwd",
    "linear_fwd",    "linear_bwd",    "rope_fwd",     "rope_bwd",
    "attention_fwd", "attention_bwd", "swiglu_fwd",   "swiglu_bwd",
    "residual_add",  "cross_entropy_fwd_bwd",         "overflow_check_and_norm",
    "adamw",         "fp32_to_bf16",
};

}  // namespace

std::string_view ComputeOpName(ComputeOp op) { return kNames[static_cast<size_t>(op)]; }

std::optional<ComputeOp> ComputeOpFromName(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (kNames[i] == name) return static_cast<ComputeOp>(i);
  }
  return std::nullopt;
}

}  // namespace tierflow::real
