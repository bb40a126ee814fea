// The model plan (model_plan.h).
#include "model_plan.h"

#include "tierflow/models/llm.h"
#include "tierflow/models/training.h"

namespace tierflow::policies {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool IsLinearWeight(const models::TensorShape& t) { return t.shape.size() == 2; }

}  // namespace

StatusOr<ModelPlan> MakeModelPlan(const Scenario& s, int64_t sub_group_size, int64_t persistence_threshold,
                                  SubGroupRule rule) {
  if (sub_group_size <= 0) return InvalidArgument("policy.sub_group_size must be > 0");
  ModelPlan plan;
  plan.ranks = std::max(1, s.training.data_parallel);
  plan.tokens = s.training.micro_batch_size * s.training.sequence_length;
  const models::LlmConfig& m = s.model;
  const bool ckpt = s.training.activation_checkpointing;
  const int64_t dtype_bytes = 2;

  for (const models::LayerInfo& layer : models::Layers(m)) {
    const models::Flops lf =
        models::LayerFlops(m, layer, s.training.micro_batch_size, s.training.sequence_length, ckpt);
    // Linear layers: 2 FLOPs per MAC per token. What the layer's FLOPs hold beyond its linear
    // layers (attention scores and values) is charged to its attention output projection.
    double linear_fwd = 0;
    for (const auto& t : layer.tensors) {
      if (IsLinearWeight(t) && layer.kind != models::LayerInfo::Kind::kEmbedding) {
        linear_fwd += 2.0 * static_cast<double>(plan.tokens) * static_cast<double>(t.elements());
      }
    }
    const double extra_fwd = std::max(0.0, lf.forward - linear_fwd);
    const double bwd_ratio = lf.forward > 0 ? (lf.backward + lf.recompute) / lf.forward : 0.0;
    bool extra_charged = false;
    for (const auto& t : layer.tensors) {
      ParamUnit u;
      u.name = t.name;
      u.layer = layer.index;
      u.elements = t.elements();
      u.rank_elements = CeilDiv(u.elements, plan.ranks);
      u.gpu_resident = u.elements < persistence_threshold;
      if (m.tied_embeddings && layer.kind == models::LayerInfo::Kind::kEmbedding && plan.tied_unit < 0) {
        plan.tied_unit = static_cast<int32_t>(plan.units.size());  // the token table: the embedding's first tensor
        u.gpu_resident = true;
      }
      if (IsLinearWeight(t) && layer.kind != models::LayerInfo::Kind::kEmbedding) {
        u.fwd_flops = 2.0 * static_cast<double>(plan.tokens) * static_cast<double>(u.elements);
        const bool attn_out = t.name.find("o_proj") != std::string::npos || t.name.find("attn.c_proj") != std::string::npos;
        if (attn_out && !extra_charged) {
          u.fwd_flops += extra_fwd;
          extra_charged = true;
        }
        u.compute_bytes = u.elements * dtype_bytes + plan.tokens * (t.shape[0] + t.shape[1]) * dtype_bytes;
      } else {
        u.compute_bytes = u.elements * dtype_bytes + plan.tokens * m.hidden * dtype_bytes;
      }
      u.bwd_flops = u.fwd_flops * bwd_ratio;
      plan.units.push_back(std::move(u));
    }
    if (!extra_charged && extra_fwd > 0 && !plan.units.empty()) {
      plan.units.back().fwd_flops += extra_fwd;  // a layer without o_proj keeps its FLOPs anyway
      plan.units.back().bwd_flops = plan.units.back().fwd_flops * bwd_ratio;
    }
  }
  int64_t offset = 0;
  int64_t resident_params = 0;
  for (ParamUnit& u : plan.units) {
    u.rank_offset = offset;
    offset += u.rank_elements;
    if (u.gpu_resident) resident_params += u.elements;
  }
  plan.rank_elements = offset;
  if (rule == SubGroupRule::kUnitsAtMost) {
    for (const ParamUnit& u : plan.units) {
      if (u.rank_elements == 0) continue;
      SubGroup* last = plan.subgroups.empty() ? nullptr : &plan.subgroups.back();
      if (last != nullptr && last->elements + u.rank_elements <= sub_group_size) {
        last->elements += u.rank_elements;
      } else {
        plan.subgroups.push_back({u.rank_offset, u.rank_elements});
      }
    }
  } else if (rule == SubGroupRule::kDeepSpeed) {
    SubGroup open{0, 0};
    for (const ParamUnit& u : plan.units) {
      open.elements += u.rank_elements;
      if (open.elements >= sub_group_size) {
        plan.subgroups.push_back(open);
        open = {open.begin + open.elements, 0};
      }
    }
    if (open.elements > 0) plan.subgroups.push_back(open);
  } else {
    const int64_t step = IoAlignedStep(sub_group_size);
    // Each sub-group is several tasks per iteration: bounded before they are built.
    if ((offset + step - 1) / step > kMaxSubGroups) {
      return InvalidArgument("policy.sub_group_size: " + std::to_string(sub_group_size) + " cuts each rank's " + std::to_string(offset) + " parameters into " +
                             std::to_string((offset + step - 1) / step) + " sub-groups; at most " + std::to_string(kMaxSubGroups) +
                             " (sub_group_size at least " + std::to_string((offset + kMaxSubGroups - 1) / kMaxSubGroups) + ")");
    }
    for (int64_t begin = 0; begin < offset; begin += step) plan.subgroups.push_back({begin, std::min(step, offset - begin)});
  }
  // What stays on each GPU: resident parameters; the activations backward needs at the training
  // sequence length — with checkpointing each layer's input plus one layer's full activations
  // while it is recomputed, without it every layer's full activations (ActivationBytesPerToken
  // is per layer and token); and the head's bf16 logits, whose gradient the loss writes in place.
  const int64_t seq = s.training.sequence_length;
  const int64_t full = models::ActivationBytesPerToken(m, dtype_bytes, false, seq);
  const int64_t kept = ckpt ? m.layers * models::ActivationBytesPerToken(m, dtype_bytes, true, seq) + full : m.layers * full;
  plan.gpu_resident_bytes = resident_params * dtype_bytes + plan.tokens * (kept + m.vocab * dtype_bytes);
  return plan;
}

}  // namespace tierflow::policies
