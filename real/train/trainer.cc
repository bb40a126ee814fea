#include "tierflow/real/trainer.h"

#include <algorithm>
#include <string>

#include "tierflow/real/adamw.h"

namespace tierflow::real {

Status CheckLayerParams(const std::vector<ParamRange>& params, int64_t begin, int64_t n) {
  int64_t at = begin;
  bool in_order = !params.empty();
  for (const ParamRange& r : params) {
    in_order = in_order && r.begin == at && r.n >= 1 && r.data != nullptr;
    at += r.n;
  }
  if (!in_order || at != begin + n) {
    return InvalidArgument("layer parameters: the ranges given do not cover elements [" + std::to_string(begin) + ", " +
                           std::to_string(begin + n) + ") in order");
  }
  return Status::Ok();
}

std::vector<const void*> TensorStarts(const ParamLayout& layout, int64_t layer, const std::vector<ParamRange>& params) {
  std::vector<const void*> out;
  auto range = params.begin();
  for (const ParamTensor& t : layout.LayerTensors(layer)) {
    while (range != params.end() && range->begin + range->n <= t.offset) ++range;  // ends before the tensor
    TF_CHECK(range != params.end() && range->begin <= t.offset);
    if (t.offset + t.elements > range->begin + range->n) return {};
    out.push_back(static_cast<const uint16_t*>(range->data) + (t.offset - range->begin));
  }
  return out;
}

Status Trainer::CheckStepParams(int64_t layer, const std::vector<ParamRange>& params) const {
  if (!TiedHead(layer)) return CheckLayerParams(params, LayerBegin(layer), LayerElements(layer));
  // The layer's ranges, then the table's: split where the layer's end.
  size_t split = 0;
  for (int64_t at = LayerBegin(layer); split < params.size() && at < LayerBegin(layer) + LayerElements(layer); ++split) at += params[split].n;
  TF_RETURN_IF_ERROR(CheckLayerParams({params.begin(), params.begin() + static_cast<std::ptrdiff_t>(split)}, LayerBegin(layer), LayerElements(layer)));
  const Status table = CheckLayerParams({params.begin() + static_cast<std::ptrdiff_t>(split), params.end()}, LayerBegin(0), LayerElements(0));
  if (!table.ok()) return InvalidArgument("the tied head's embedding table: " + table.message());
  return Status::Ok();
}

Trainer::Trainer(const TrainConfig& config) : config_(config), layout_(MakeParamLayout(config.spec.config)) {}

void Trainer::EmulateGpu() {
  if (ws_) return;
  w32_.resize(static_cast<size_t>(layout_.total));
  widened_in_.assign(static_cast<size_t>(layer_count()), -1);
  ws_ = std::make_unique<LlamaWorkspace<float>>(config_.spec, config_.batch, config_.seq);
}

std::vector<float> Trainer::InitialMaster() const {
  if (!config_.initial_weights.empty()) {
    TF_CHECK(static_cast<int64_t>(config_.initial_weights.size()) == layout_.total);  // the caller loaded them for this layout
    return config_.initial_weights;
  }
  std::vector<float> master(static_cast<size_t>(layout_.total));
  InitLlamaParams(layout_, master.data(), config_.init_seed);
  return master;
}

void Trainer::PrepareIteration(IterationState* it) const {
  const size_t rows = static_cast<size_t>(config_.batch * config_.seq);
  const size_t hidden = static_cast<size_t>(config_.spec.config.hidden);
  it->boundary.resize(static_cast<size_t>(config_.spec.config.layers + 1));
  for (auto& b : it->boundary) b.resize(rows * hidden);
  it->d_x.resize(rows * hidden);
}

void Trainer::Widen(int64_t layer, const std::vector<ParamRange>& params, int64_t iteration, CpuThreads& threads) {
  TF_CHECK(CheckStepParams(layer, params).ok());
  int64_t& widened = widened_in_[static_cast<size_t>(layer)];
  if (iteration >= 0 && widened == iteration) return;
  widened = iteration;
  for (const ParamRange& r : params) {
    cpu::Bf16ToFp32(w32_.data() + r.begin, static_cast<const uint16_t*>(r.data), r.n, threads);
  }
}

const float* Trainer::LmHead() const {
  const int64_t head = layer_count() - 1;
  if (config_.spec.config.tied_embeddings) return w32_.data();
  return w32_.data() + LayerBegin(head) + config_.spec.config.hidden;
}

void Trainer::Forward(int64_t layer, const std::vector<ParamRange>& params, IterationState* it, CpuThreads& threads) {
  const int64_t L = config_.spec.config.layers;
  Widen(layer, params, it->iteration, threads);
  if (layer == 0) {
    EmbedForward(config_.spec, w32_.data(), it->tokens.data(), it->boundary[0].data(), *ws_, threads);
  } else if (layer <= L) {
    const auto w = DecoderView<const float>(config_.spec.config, w32_.data() + LayerBegin(layer));
    DecoderForward<float>(config_.spec, w, it->boundary[static_cast<size_t>(layer - 1)].data(),
                          it->boundary[static_cast<size_t>(layer)].data(), *ws_, threads);
  } else {
    it->loss = HeadForwardBackward<float>(config_.spec, w32_.data() + LayerBegin(layer), LmHead(), nullptr, nullptr,
                                          it->boundary[static_cast<size_t>(L)].data(), it->targets.data(), nullptr,
                                          1.0, *ws_, threads);
  }
}

void Trainer::Backward(int64_t layer, const std::vector<ParamRange>& params, float* grad, IterationState* it,
                       CpuThreads& threads) {
  const int64_t L = config_.spec.config.layers;
  Widen(layer, params, it->iteration, threads);
  std::fill(grad, grad + StepGradElements(layer), 0.0f);
  if (layer == 0) {
    EmbedBackward(config_.spec, grad, it->tokens.data(), it->d_x.data(), *ws_, threads);
  } else if (layer <= L) {
    const auto w = DecoderView<const float>(config_.spec.config, w32_.data() + LayerBegin(layer));
    const auto g = DecoderView<float>(config_.spec.config, grad);
    DecoderBackward<float>(config_.spec, w, g, it->boundary[static_cast<size_t>(layer - 1)].data(), it->d_x.data(),
                           it->d_x.data(), *ws_, threads);
  } else {
    float* d_lm_head = grad + config_.spec.config.hidden;  // untied: the head's own; tied: after it (StepGradElements)
    HeadForwardBackward<float>(config_.spec, w32_.data() + LayerBegin(layer), LmHead(), grad, d_lm_head,
                               it->boundary[static_cast<size_t>(L)].data(), it->targets.data(), it->d_x.data(),
                               it->BackwardSeed(), *ws_, threads);
  }
  cpu::RoundToBf16(grad, StepGradElements(layer), threads);  // a bf16 model's gradients
}

}  // namespace tierflow::real
