// The GPU Llama steps (cuda_llama.h) against the fp32 CPU model (llama.h) on the same
// bf16-rounded parameters: the loss, and every layer's gradient, layer by layer in the
// schedule's order (forward 0..L+1, backward L+1..0), each layer's tensors cut from one flat
// buffer; then the same steps again with every tensor in a device allocation of its own (as the
// executor's gathered buffers hold them), bit-identical. Skips, with the reason, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tierflow/models/llm.h"
#include "tierflow/real/adamw.h"
#include "tierflow/real/cpu_threads.h"
#include "tierflow/real/cuda_compute.h"
#include "tierflow/real/cuda_llama.h"
#include "tierflow/real/llama.h"

namespace tierflow::real {
namespace {

TEST(CudaLlama, StepsMatchTheCpuModel) {
  auto ctx = cuda::Context::Open(0);
  if (!ctx.ok()) GTEST_SKIP() << "no GPU: " << ctx.status().ToString();
  auto tiny = models::LlmPreset("tiny");
  ASSERT_TRUE(tiny.ok());
  LlamaSpec spec;
  spec.config = *tiny;
  spec.config.kv_heads = 2;  // grouped-query, as Llama 3
  const int64_t batch = 2, seq = 64, rows = batch * seq;
  CpuThreads threads(2);
  Llama cpu_model(spec, batch, seq, threads);
  const ParamLayout& layout = cpu_model.layout();
  InitLlamaParams(layout, cpu_model.params().data(), 99);
  std::vector<uint16_t> p16(cpu_model.params().size());
  for (size_t i = 0; i < p16.size(); ++i) cpu_model.params()[i] = Bf16ToFp32(p16[i] = Fp32ToBf16(cpu_model.params()[i]));
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(spec.config.vocab - 1));
  std::vector<int32_t> tokens(rows), targets(rows);
  for (int64_t n = 0; n < rows; ++n) tokens[n] = token(rng), targets[n] = n % 9 == 8 ? -100 : token(rng);
  const float loss_scale = 1024.0f;
  cpu_model.ZeroGrads();
  const double want_loss = cpu_model.ForwardBackward(tokens.data(), targets.data(), loss_scale);

  auto steps = cuda::LlamaSteps::Create(**ctx, spec, batch, seq);
  ASSERT_TRUE(steps.ok()) << steps.status().ToString();
  auto params = (*ctx)->Allocate(layout.total * 2);
  auto grads = (*ctx)->Allocate(layout.total * 4);
  ASSERT_TRUE(params.ok() && grads.ok());
  ASSERT_TRUE(params->CopyFromHost(**ctx, p16.data(), layout.total * 2).ok());
  ASSERT_TRUE((*steps)->SetBatch(tokens.data(), targets.data()).ok());
  const auto* p = static_cast<const uint16_t*>(params->data());
  auto* g = static_cast<float*>(grads->data());
  const int64_t layers = (*steps)->layers();
  std::vector<cuda::LlamaSteps::LayerParams> sliced(static_cast<size_t>(layers)), scattered(sliced.size());
  std::vector<cuda::DeviceBuffer> own;  // a block per tensor, copied from the flat buffer
  for (int64_t l = 0; l < layers; ++l) {
    sliced[l] = LayerTensorPointers<const uint16_t>(layout, l, p + layout.layer_offset[l]);
    for (const ParamTensor& t : layout.LayerTensors(l)) {
      auto block = (*ctx)->Allocate(t.elements * 2);
      ASSERT_TRUE(block.ok()) << block.status().ToString();
      ASSERT_TRUE(block->CopyFromHost(**ctx, p16.data() + t.offset, t.elements * 2).ok());
      scattered[l].push_back(static_cast<const uint16_t*>(block->data()));
      own.push_back(std::move(*block));
    }
  }
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    const auto& tensors = run == 0 ? sliced : scattered;
    for (int64_t l = 0; l < layers; ++l) ASSERT_TRUE((*steps)->Forward(l, tensors[l]).ok()) << l;
    for (int64_t l = layers; l-- > 0;) {
      const Status st = (*steps)->Backward(l, tensors[l], g + layout.layer_offset[l], loss_scale);
      ASSERT_TRUE(st.ok()) << "layer " << l << ": " << st.ToString();
    }
    std::vector<float> got(static_cast<size_t>(layout.total));
    ASSERT_TRUE((*ctx)->Synchronize().ok());
    ASSERT_TRUE(grads->CopyToHost(**ctx, got.data(), layout.total * 4).ok());
    if (run == 1) {
      EXPECT_EQ(std::memcmp(got.data(), first.data(), got.size() * 4), 0) << "tensors in blocks of their own differ";
      break;
    }
    first = got;
    std::printf("loss: gpu %.6f cpu %.6f\n", (*steps)->loss(), want_loss);
    EXPECT_NEAR((*steps)->loss(), want_loss, 1e-2 * want_loss);
    // Each layer's gradient relative to its largest element. bf16 activations through ~30 ops
    // compound the 1e-2 per-op bound; 5e-2 is that composition's bound, printed per layer.
    for (int64_t l = 0; l < layers; ++l) {
      const size_t b = static_cast<size_t>(layout.layer_offset[l]), n = static_cast<size_t>(layout.layer_elements[l]);
      double scale = 0, worst = 0;
      for (size_t i = b; i < b + n; ++i) scale = std::max(scale, std::fabs(static_cast<double>(cpu_model.grads()[i])));
      for (size_t i = b; i < b + n; ++i) {
        double err = std::fabs(static_cast<double>(got[i]) - cpu_model.grads()[i]) / scale;
        if (std::isnan(err)) err = INFINITY;
        worst = std::max(worst, err);
      }
      std::printf("layer %lld gradient: worst %.2e of the largest (%.4g)\n", static_cast<long long>(l), worst, scale);
      EXPECT_LE(worst, 5e-2) << "layer " << l;
    }
  }
  // Bad input is refused before the GPU sees it.
  cuda::LlamaSteps::LayerParams short_of_one = sliced[1];
  short_of_one.pop_back();
  EXPECT_EQ((*steps)->Forward(1, short_of_one).code(), StatusCode::kInvalidArgument);
  cuda::LlamaSteps::LayerParams with_null = sliced[1];
  with_null[2] = nullptr;
  EXPECT_EQ((*steps)->Backward(1, with_null, g + layout.layer_offset[1], loss_scale).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*steps)->Forward(layers, sliced[0]).code(), StatusCode::kInvalidArgument);
  std::vector<int32_t> bad = tokens;
  bad[3] = static_cast<int32_t>(spec.config.vocab);
  EXPECT_EQ((*steps)->SetBatch(bad.data(), targets.data()).code(), StatusCode::kInvalidArgument);
  LlamaSpec tied = spec;
  tied.config.tied_embeddings = true;
  EXPECT_EQ(cuda::LlamaSteps::Create(**ctx, tied, 1, 8).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tierflow::real
