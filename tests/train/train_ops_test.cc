// Finite-difference gradient checks of every CPU op's backward, in fp64 (the same templated
// kernels as fp32), and of the whole model; bit-identical results for any thread count.
//
// Check: for a random upstream gradient r, the scalar L = sum(r * op(x)); every analytic
// gradient entry dL/dx_i is compared with the central difference (L(x + h e_i) - L(x - h e_i))
// / 2h, h = 1e-6, as rel = max_i |analytic - numeric| / max_i |numeric|, tolerance 1e-6.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tierflow/real/cpu_ops.h"
#include "tierflow/real/llama.h"

namespace tierflow::real {
namespace {

using Vec = std::vector<double>;
constexpr double kStep = 1e-6;
constexpr double kTolerance = 1e-6;

Vec Random(size_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> dist(0.0, scale);
  Vec v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

double SumProduct(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Compares `analytic` (dL/dx) with central differences of loss() while perturbing x in place.
double FdCheck(const std::string& what, Vec& x, const Vec& analytic,
               const std::function<double()>& loss) {
  double max_diff = 0, max_ref = 0;
  size_t worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + kStep;
    const double plus = loss();
    x[i] = saved - kStep;
    const double minus = loss();
    x[i] = saved;
    const double numeric = (plus - minus) / (2 * kStep);
    const double diff = std::fabs(numeric - analytic[i]);
    if (diff > max_diff) {
      max_diff = diff;
      worst = i;
    }
    max_ref = std::max(max_ref, std::fabs(numeric));
  }
  const double rel = max_diff / std::max(max_ref, 1e-300);
  std::printf("fd %-28s rel_err %.3e (worst element %zu of %zu)\n", what.c_str(), rel, worst,
              x.size());
  EXPECT_LE(rel, kTolerance) << what;
  return rel;
}

CpuThreads& Threads() {
  static CpuThreads threads(2);
  return threads;
}

TEST(TrainOps, OpNamesRoundTripAndCpuSupportsAll) {
  for (int i = 0; i < static_cast<int>(ComputeOp::kCount); ++i) {
    const auto op = static_cast<ComputeOp>(i);
    EXPECT_EQ(ComputeOpFromName(ComputeOpName(op)), op);
    EXPECT_TRUE(cpu::SupportsOp(op)) << ComputeOpName(op);
  }
  EXPECT_FALSE(ComputeOpFromName("conv2d").has_value());
}

TEST(TrainOps, LinearGradients) {
  const int64_t N = 5, I = 11, O = 7;  // not multiples of 8: exercises the scalar tails
  Vec x = Random(N * I, 1), w = Random(O * I, 2), r = Random(N * O, 3);
  Vec out(N * O), dx(N * I, 0.0), dw(O * I, 0.0);
  auto loss = [&] {
    cpu::LinearForward(out.data(), x.data(), w.data(), N, I, O, Threads());
    return SumProduct(out, r);
  };
  cpu::LinearBackward(dx.data(), dw.data(), r.data(), x.data(), w.data(), N, I, O, Threads());
  FdCheck("linear dx", x, dx, loss);
  FdCheck("linear dw", w, dw, loss);
}

TEST(TrainOps, RmsNormGradients) {
  const int64_t N = 4, C = 13;
  Vec x = Random(N * C, 4), w = Random(C, 5), r = Random(N * C, 6);
  for (double& v : w) v += 1.0;
  Vec out(N * C), rstd(N), dx(N * C, 0.0), dw(C, 0.0);
  auto loss = [&] {
    cpu::RmsNormForward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5, Threads());
    return SumProduct(out, r);
  };
  loss();
  cpu::RmsNormBackward(dx.data(), dw.data(), r.data(), x.data(), w.data(), rstd.data(), N, C,
                       Threads());
  FdCheck("rmsnorm dx", x, dx, loss);
  FdCheck("rmsnorm dw", w, dw, loss);
}

TEST(TrainOps, RopeGradientAndInverse) {
  const int64_t B = 2, T = 5, H = 3, D = 8, N = B * T;
  Vec cos_t(T * D / 2), sin_t(T * D / 2);
  cpu::RopeTables(cos_t.data(), sin_t.data(), T, models::RopeInverseFrequencies(D, 10000.0));
  Vec x = Random(N * H * D, 7), r = Random(N * H * D, 8);
  auto loss = [&] {
    Vec y = x;
    cpu::RopeForward(y.data(), cos_t.data(), sin_t.data(), N, T, H, D, Threads());
    return SumProduct(y, r);
  };
  Vec dx = r;
  cpu::RopeBackward(dx.data(), cos_t.data(), sin_t.data(), N, T, H, D, Threads());
  FdCheck("rope dx", x, dx, loss);
  // Position 0 is the identity; backward undoes forward (a rotation's transpose is its inverse).
  Vec y = x;
  cpu::RopeForward(y.data(), cos_t.data(), sin_t.data(), N, T, H, D, Threads());
  for (int64_t i = 0; i < H * D; ++i) EXPECT_DOUBLE_EQ(y[i], x[i]);
  cpu::RopeBackward(y.data(), cos_t.data(), sin_t.data(), N, T, H, D, Threads());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 1e-12);
}

TEST(TrainOps, AttentionGradientsGroupedQuery) {
  const int64_t B = 2, T = 5, H = 4, KV = 2, D = 3, N = B * T;
  Vec q = Random(N * H * D, 9), k = Random(N * KV * D, 10), v = Random(N * KV * D, 11);
  Vec r = Random(N * H * D, 12);
  Vec out(N * H * D), probs(B * H * T * T);
  auto loss = [&] {
    cpu::AttentionForward(out.data(), probs.data(), q.data(), k.data(), v.data(), B, T, H, KV, D,
                          Threads());
    return SumProduct(out, r);
  };
  loss();
  // Causal: probabilities above the diagonal are 0 and each row sums to 1.
  for (int64_t bh = 0; bh < B * H; ++bh) {
    for (int64_t t = 0; t < T; ++t) {
      double sum = 0;
      for (int64_t s = 0; s < T; ++s) {
        const double p = probs[(bh * T + t) * T + s];
        if (s > t) {
          EXPECT_EQ(p, 0.0);
        }
        sum += p;
      }
      EXPECT_NEAR(sum, 1.0, 1e-12);
    }
  }
  Vec dq(q.size(), 0.0), dk(k.size(), 0.0), dv(v.size(), 0.0);
  cpu::AttentionBackward(dq.data(), dk.data(), dv.data(), r.data(), q.data(), k.data(), v.data(),
                         probs.data(), B, T, H, KV, D, Threads());
  FdCheck("attention dq", q, dq, loss);
  FdCheck("attention dk", k, dk, loss);
  FdCheck("attention dv", v, dv, loss);
}

TEST(TrainOps, SwiGluGradients) {
  const int64_t n = 37;
  Vec g = Random(n, 13, 2.0), u = Random(n, 14), r = Random(n, 15);
  Vec out(n), dg(n, 0.0), du(n, 0.0);
  auto loss = [&] {
    cpu::SwiGluForward(out.data(), g.data(), u.data(), n, Threads());
    return SumProduct(out, r);
  };
  cpu::SwiGluBackward(dg.data(), du.data(), r.data(), g.data(), u.data(), n, Threads());
  FdCheck("swiglu dgate", g, dg, loss);
  FdCheck("swiglu dup", u, du, loss);
}

TEST(TrainOps, EmbeddingGradientAccumulatesRepeatedTokens) {
  const int64_t N = 6, V = 5, C = 4;
  const std::vector<int32_t> tokens = {1, 3, 1, 0, 4, 1};
  Vec table = Random(V * C, 16), r = Random(N * C, 17), out(N * C), dtable(V * C, 0.0);
  auto loss = [&] {
    cpu::EmbeddingForward(out.data(), tokens.data(), table.data(), N, C, Threads());
    return SumProduct(out, r);
  };
  cpu::EmbeddingBackward(dtable.data(), tokens.data(), r.data(), N, C, Threads());
  FdCheck("embedding dtable", table, dtable, loss);
}

TEST(TrainOps, CrossEntropyGradientAndIgnoredTargets) {
  const int64_t N = 4, V = 9;
  const std::vector<int32_t> targets = {3, -1, 0, 8};
  Vec logits = Random(N * V, 18, 3.0), dlogits(N * V);
  auto loss = [&] {
    return cpu::CrossEntropyForwardBackward<double>(nullptr, logits.data(), targets.data(), N, V,
                                                    1.0, Threads());
  };
  const double value = cpu::CrossEntropyForwardBackward(dlogits.data(), logits.data(),
                                                        targets.data(), N, V, 1.0, Threads());
  // Independent value: mean of logsumexp - logit[target] over the 3 valid rows.
  double expect = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] < 0) continue;
    double sum = 0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(logits[n * V + j]);
    expect += (std::log(sum) - logits[n * V + targets[n]]) / 3.0;
  }
  EXPECT_NEAR(value, expect, 1e-12);
  for (int64_t j = 0; j < V; ++j) EXPECT_EQ(dlogits[1 * V + j], 0.0);
  FdCheck("cross_entropy dlogits", logits, dlogits, loss);
}

// The whole model in fp64, every parameter tensor: the composition of the steps (residuals,
// recompute under checkpointing, GQA, tied and untied heads) against finite differences.
void ModelFdCheck(bool tied) {
  LlamaSpec spec;
  spec.config = {};
  spec.config.name = tied ? "fd-tied" : "fd";
  spec.config.hidden = 8;
  spec.config.ffn = 12;
  spec.config.layers = 2;
  spec.config.heads = 4;
  spec.config.kv_heads = 2;
  spec.config.vocab = 11;
  spec.config.max_seq = 8;
  spec.config.tied_embeddings = tied;
  ASSERT_TRUE(ValidateLlamaSpec(spec).ok());
  const int64_t B = 2, T = 4;
  LlamaModel<double> model(spec, B, T, Threads());
  Vec init = Random(static_cast<size_t>(model.layout().total), 19, 0.5);
  for (const ParamTensor& t : model.layout().tensors) {
    if (t.shape.size() == 1) {
      for (int64_t i = 0; i < t.elements; ++i) init[t.offset + i] += 1.0;
    }
  }
  model.params() = init;
  const std::vector<int32_t> tokens = {1, 5, 7, 2, 9, 3, 3, 10};
  const std::vector<int32_t> targets = {5, 7, 2, -1, 3, 3, 10, 0};
  model.ZeroGrads();
  model.ForwardBackward(tokens.data(), targets.data());
  const Vec grads = model.grads();
  for (const ParamTensor& t : model.layout().tensors) {
    Vec x(model.params().begin() + t.offset, model.params().begin() + t.offset + t.elements);
    Vec g(grads.begin() + t.offset, grads.begin() + t.offset + t.elements);
    auto loss = [&] {
      std::copy(x.begin(), x.end(), model.params().begin() + t.offset);
      return model.Forward(tokens.data(), targets.data());
    };
    FdCheck(t.name.substr(t.name.find_last_of('.', t.name.size() - 8) + 1), x, g, loss);
    std::copy(x.begin(), x.end(), model.params().begin() + t.offset);
  }
}

TEST(TrainOps, WholeModelGradientsUntied) { ModelFdCheck(false); }
TEST(TrainOps, WholeModelGradientsTied) { ModelFdCheck(true); }

// InitLlamaParams draws its chunks in parallel, each from where one serial SplitMix64 sequence
// would be: the values of that sequence drawn one by one (the definition, written out here), bit
// for bit, on a layout whose tensors span many chunks and with the norms in between.
TEST(TrainOps, InitialParametersAreTheSerialSequences) {
  auto preset = models::LlmPreset("tiny");
  ASSERT_TRUE(preset.ok());
  const ParamLayout layout = MakeParamLayout(*preset);
  std::vector<float> got(static_cast<size_t>(layout.total)), want(got.size());
  InitLlamaParams(layout, got.data(), 1234, 0.02f);
  uint64_t state = 1234;
  auto uniform = [&state] {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (static_cast<double>((z ^ (z >> 31)) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  };
  for (const ParamTensor& t : layout.tensors) {
    for (int64_t i = 0; i < t.elements; ++i) {
      if (t.shape.size() == 1) {
        want[static_cast<size_t>(t.offset + i)] = 1.0f;
        continue;
      }
      const double u1 = uniform(), u2 = uniform();
      want[static_cast<size_t>(t.offset + i)] = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2) * 0.02f);
    }
  }
  int64_t largest = 0;
  for (const ParamTensor& t : layout.tensors) largest = std::max(largest, t.elements);
  ASSERT_GT(largest, int64_t{1} << 16);  // a tensor spans several chunks of the parallel draw
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

TEST(TrainOps, BitIdenticalForAnyThreadCount) {
  auto preset = models::LlmPreset("tiny");
  ASSERT_TRUE(preset.ok());
  LlamaSpec spec;
  spec.config = *preset;
  const int64_t B = 2, T = 32;
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int64_t i = 0; i < B * T; ++i) {
    tokens[i] = static_cast<int32_t>((i * 37 + 11) % 256);
    targets[i] = static_cast<int32_t>((i * 53 + 7) % 256);
  }
  std::vector<float> reference;
  double reference_loss = 0;
  for (int threads_count : {1, 2, 3}) {
    CpuThreads threads(threads_count);
    Llama model(spec, B, T, threads);
    InitLlamaParams(model.layout(), model.params().data(), 42);
    model.ZeroGrads();
    const double loss = model.ForwardBackward(tokens.data(), targets.data());
    if (reference.empty()) {
      reference = model.grads();
      reference_loss = loss;
      EXPECT_NEAR(loss, std::log(256.0), 0.05);  // near-uniform predictions at init
      continue;
    }
    EXPECT_EQ(loss, reference_loss) << threads_count << " threads";
    EXPECT_TRUE(model.grads() == reference) << threads_count << " threads";
  }
}

}  // namespace
}  // namespace tierflow::real
