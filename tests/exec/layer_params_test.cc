// How a layer step is given its parameters (tierflow/real/trainer.h): ranges that must cover the
// layer in order (CheckLayerParams), and a pointer per tensor found in them (TensorStarts), which
// the CUDA device hands to LlamaSteps instead of copying the ranges into one slice. On the CPU,
// over host arrays standing for gpu0 memory.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "tierflow/models/llm.h"
#include "tierflow/real/llama.h"
#include "tierflow/real/trainer.h"

namespace tierflow::real {
namespace {

ParamLayout TinyLayout() {
  auto tiny = models::LlmPreset("tiny");
  TF_CHECK(tiny.ok());
  return MakeParamLayout(*tiny);
}

// The layer's tensors are its share of the layout's, in order, and cover its slice exactly.
TEST(LayerParams, LayerTensorsAreTheLayersSliceInOrder) {
  const ParamLayout layout = TinyLayout();
  size_t seen = 0;
  for (int64_t l = 0; l < static_cast<int64_t>(layout.layer_offset.size()); ++l) {
    int64_t at = layout.layer_offset[static_cast<size_t>(l)];
    for (const ParamTensor& t : layout.LayerTensors(l)) {
      EXPECT_EQ(&t, &layout.tensors[seen++]);
      EXPECT_EQ(t.layer, l);
      EXPECT_EQ(t.offset, at);
      at += t.elements;
    }
    EXPECT_EQ(at, layout.layer_offset[static_cast<size_t>(l)] + layout.layer_elements[static_cast<size_t>(l)]);
  }
  EXPECT_EQ(seen, layout.tensors.size());
  EXPECT_EQ(layout.LayerTensors(1).size(), 9u);  // a decoder
  EXPECT_EQ(layout.LayerTensors(static_cast<int64_t>(layout.layer_offset.size()) - 1).size(), 2u);  // norm, lm_head
}

// Cut from one slice, the decoder's tensors are where DecoderView puts them.
TEST(LayerParams, DecoderFromTensorsMatchesDecoderView) {
  const ParamLayout layout = TinyLayout();
  auto tiny = models::LlmPreset("tiny");
  ASSERT_TRUE(tiny.ok());
  std::vector<uint16_t> flat(static_cast<size_t>(layout.total));
  const uint16_t* base = flat.data() + layout.layer_offset[2];
  const auto view = DecoderView<const uint16_t>(*tiny, base);
  const auto cut = DecoderFromTensors(LayerTensorPointers<const uint16_t>(layout, 2, base));
  const uint16_t* const want[] = {view.input_norm, view.q, view.k, view.v, view.o, view.post_norm, view.gate, view.up, view.down};
  const uint16_t* const got[] = {cut.input_norm, cut.q, cut.k, cut.v, cut.o, cut.post_norm, cut.gate, cut.up, cut.down};
  for (int i = 0; i < 9; ++i) EXPECT_EQ(got[i], want[i]) << "tensor " << i;
}

// The tied head's step reads the layer and then the embedding table; its backward writes the
// table's part of the gradient after the layer's own.
TEST(LayerParams, TheTiedHeadStepAlsoCoversTheEmbeddingTable) {
  TrainConfig config;
  auto tiny = models::LlmPreset("tiny");
  ASSERT_TRUE(tiny.ok());
  config.spec.config = *tiny;
  config.spec.config.tied_embeddings = true;
  const Trainer trainer(config);
  const int64_t head = trainer.layer_count() - 1;
  ASSERT_TRUE(trainer.TiedHead(head));
  EXPECT_FALSE(trainer.TiedHead(0));
  EXPECT_EQ(trainer.StepGradElements(head), trainer.LayerElements(head) + trainer.LayerElements(0));
  EXPECT_EQ(trainer.StepGradElements(1), trainer.LayerElements(1));
  std::vector<uint16_t> flat(static_cast<size_t>(trainer.layout().total));
  const ParamRange layer{trainer.LayerBegin(head), trainer.LayerElements(head), flat.data() + trainer.LayerBegin(head)};
  const ParamRange table{0, trainer.LayerElements(0), flat.data()};
  EXPECT_TRUE(trainer.CheckStepParams(head, {layer, table}).ok());
  EXPECT_FALSE(trainer.CheckStepParams(head, {layer}).ok());  // the table missing
  const Status st = trainer.CheckStepParams(head, {layer, {0, trainer.LayerElements(0) - 1, flat.data()}});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("tied head's embedding table"), std::string::npos) << st.ToString();
  EXPECT_TRUE(trainer.InLayer(0, 0, trainer.LayerElements(0)));
  EXPECT_FALSE(trainer.InLayer(head, 0, trainer.LayerElements(0)));
}

TEST(LayerParams, RangesMustCoverTheLayerInOrder) {
  uint16_t a[8], b[8];
  EXPECT_TRUE(CheckLayerParams({{10, 8, a}, {18, 8, b}}, 10, 16).ok());
  EXPECT_FALSE(CheckLayerParams({}, 10, 0).ok());                        // nothing given
  EXPECT_FALSE(CheckLayerParams({{18, 8, b}, {10, 8, a}}, 10, 16).ok());  // out of order
  EXPECT_FALSE(CheckLayerParams({{10, 8, a}, {19, 7, b}}, 10, 16).ok());  // a gap
  EXPECT_FALSE(CheckLayerParams({{10, 8, a}}, 10, 16).ok());              // short
  EXPECT_FALSE(CheckLayerParams({{10, 8, a}, {18, 8, nullptr}}, 10, 16).ok());
  const Status st = CheckLayerParams({{10, 8, a}, {18, 9, b}}, 10, 16);  // long
  EXPECT_EQ(st.ToString(), "invalid argument: layer parameters: the ranges given do not cover elements [10, 26) in order");
}

// Each tensor in a range of its own (the executor's gathered buffer per unit), in one range (the
// resident home, a flat buffer), several tensors per range: a pointer to each where it lies.
TEST(LayerParams, TensorStartsFindEachTensorWhereItLies) {
  const ParamLayout layout = TinyLayout();
  const int64_t layer = 1;
  const auto tensors = layout.LayerTensors(layer);
  const int64_t begin = layout.layer_offset[layer], n = layout.layer_elements[layer];

  std::vector<std::vector<uint16_t>> own;
  std::vector<ParamRange> per_tensor;
  for (const ParamTensor& t : tensors) {
    own.emplace_back(static_cast<size_t>(t.elements));
    per_tensor.push_back({t.offset, t.elements, own.back().data()});
  }
  ASSERT_TRUE(CheckLayerParams(per_tensor, begin, n).ok());
  std::vector<const void*> starts = TensorStarts(layout, layer, per_tensor);
  ASSERT_EQ(starts.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) EXPECT_EQ(starts[i], own[i].data()) << tensors[i].name;

  std::vector<uint16_t> slice(static_cast<size_t>(n));
  starts = TensorStarts(layout, layer, {{begin, n, slice.data()}});
  ASSERT_EQ(starts.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) EXPECT_EQ(starts[i], slice.data() + (tensors[i].offset - begin)) << tensors[i].name;

  // Two ranges split between tensors 3 and 4 (q, k, v with the input norm; the rest).
  const int64_t cut = tensors[4].offset;
  std::vector<uint16_t> head(static_cast<size_t>(cut - begin)), tail(static_cast<size_t>(begin + n - cut));
  starts = TensorStarts(layout, layer, {{begin, cut - begin, head.data()}, {cut, begin + n - cut, tail.data()}});
  ASSERT_EQ(starts.size(), tensors.size());
  EXPECT_EQ(starts[3], head.data() + (tensors[3].offset - begin));
  EXPECT_EQ(starts[4], tail.data());
  EXPECT_EQ(starts[8], tail.data() + (tensors[8].offset - cut));
}

// A range boundary inside a tensor: no pointer can stand for it (the CUDA device then copies the
// ranges into one block).
TEST(LayerParams, ATensorCutInTwoHasNoStart) {
  const ParamLayout layout = TinyLayout();
  const int64_t layer = 1;
  const int64_t begin = layout.layer_offset[layer], n = layout.layer_elements[layer];
  const int64_t cut = layout.LayerTensors(layer)[1].offset + 1;  // one element into q_proj
  std::vector<uint16_t> head(static_cast<size_t>(cut - begin)), tail(static_cast<size_t>(begin + n - cut));
  const std::vector<ParamRange> ranges = {{begin, cut - begin, head.data()}, {cut, begin + n - cut, tail.data()}};
  ASSERT_TRUE(CheckLayerParams(ranges, begin, n).ok());
  EXPECT_TRUE(TensorStarts(layout, layer, ranges).empty());
}

}  // namespace
}  // namespace tierflow::real
