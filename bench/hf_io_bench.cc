// A Hugging Face directory of 1.5 B parameters (Qwen2.5-1.5B's shape: 28 layers, hidden 1536,
// GQA 12/2, FFN 8960, vocabulary 151936, tied, q/k/v biases; 3.09 GB in bf16) saved from fp32
// master weights and loaded back into them (SaveHfModel, LoadHfWeights), against fio moving the
// same bytes on the same directory: a sequential O_DIRECT write with an fsync at the end (what a
// save pays for durability) and a sequential O_DIRECT read, both 1 MiB requests at depth 32, the
// shape of our own requests (16 MiB chunks cut into 1 MiB pieces, 32 in flight). Each repetition
// runs the four back to back, alternating which of ours and fio's goes first; counters are
// medians and the ratios ours / fio of those medians.
//   hf_io_bench [--dir=D] [--layers=N]  (fewer layers: a smaller model, for a quick look)
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "storage_bench_util.h"
#include "tierflow/models/llm.h"
#include "tierflow/real/adamw.h"
#include "tierflow/real/hf_model.h"
#include "tierflow/real/llama.h"
#include "tierflow/real/storage.h"

namespace {

using tierflow::bench::BenchDir;
using tierflow::bench::Median;
namespace real = tierflow::real;

constexpr int kReps = 5;
constexpr int64_t kBlock = 1 << 20;
constexpr int kDepth = 32;

int& Layers() {
  static int layers = 28;
  return layers;
}

tierflow::models::LlmConfig Qwen15B() {
  tierflow::models::LlmConfig c = tierflow::models::LlmPreset("llama3.2-1b").value();
  c.name = "qwen2.5-1.5b-shaped";
  c.hidden = 1536;
  c.ffn = 8960;
  c.layers = Layers();
  c.heads = 12;
  c.kv_heads = 2;
  c.vocab = 151936;
  c.max_seq = 32768;
  c.tied_embeddings = true;
  c.qkv_bias = true;
  c.rope_theta = 1000000;
  c.rope_scaling = {};
  return c;
}

double Seconds(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void BM_HfSaveLoad(benchmark::State& state) {
  const tierflow::models::LlmConfig config = Qwen15B();
  const real::ParamLayout layout = real::MakeParamLayout(config);
  std::vector<float> master(static_cast<size_t>(layout.total));
  real::InitLlamaParams(layout, master.data(), 1, 0.02f);
  std::vector<float> loaded(master.size(), 0.0f);  // touched before timing, as a run's buffer is
  const std::string dir = BenchDir() + "/model";
  int64_t bytes = 0;
  for (const real::ParamTensor& t : layout.tensors) bytes += 2 * t.elements;
  std::vector<double> save, load, fio_write, fio_read;
  for (auto _ : state) {
    for (int rep = 0; rep < kReps; ++rep) {
      for (int turn = 0; turn < 2; ++turn) {
        if ((turn == 0) == (rep % 2 == 0)) {
          tierflow::Status s;
          save.push_back(static_cast<double>(bytes) / Seconds([&] { s = real::SaveHfModel(dir, config, "", master.data()); }));
          if (!s.ok()) return state.SkipWithError(s.ToString().c_str());
          tierflow::StatusOr<real::HfLoadStats> stats = tierflow::Internal("not run");
          load.push_back(static_cast<double>(bytes) / Seconds([&] { stats = real::LoadHfWeights(dir, layout, loaded.data()); }));
          if (!stats.ok()) return state.SkipWithError(stats.status().ToString().c_str());
          if (!stats->direct) return state.SkipWithError("the file system refused O_DIRECT: give --dir=D on a disk");
        } else {
          const double w = tierflow::bench::RunFio("write", kBlock, kDepth, real::AlignUp(bytes, kBlock), 0, "--end_fsync=1");
          const double r = tierflow::bench::RunFio("read", kBlock, kDepth, real::AlignUp(bytes, kBlock), 0);
          tierflow::bench::RemoveFioFile();
          if (w <= 0 || r <= 0) return state.SkipWithError("fio failed (is fio installed with io_uring support?)");
          fio_write.push_back(w);
          fio_read.push_back(r);
        }
      }
    }
  }
  for (size_t i = 0; i < master.size(); ++i) {  // the load gives what the save wrote
    if (loaded[i] != real::Bf16ToFp32(real::Fp32ToBf16(master[i]))) return state.SkipWithError("the loaded weights differ");
  }
  std::filesystem::remove_all(dir);
  state.counters["params"] = static_cast<double>(layout.total);
  state.counters["bytes"] = static_cast<double>(bytes);
  state.counters["save_GBps"] = Median(save) / 1e9;
  state.counters["fio_write_GBps"] = Median(fio_write) / 1e9;
  state.counters["load_GBps"] = Median(load) / 1e9;
  state.counters["fio_read_GBps"] = Median(fio_read) / 1e9;
  state.counters["save_vs_fio"] = Median(save) / Median(fio_write);
  state.counters["load_vs_fio"] = Median(load) / Median(fio_read);
}

BENCHMARK(BM_HfSaveLoad)->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace

int main(int argc, char** argv) {
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--layers=", 0) == 0) Layers() = std::atoi(a.c_str() + 9);
    else argv[out++] = argv[i];
  }
  argc = out;
  return tierflow::bench::RunBenchmarksInBenchDir(argc, argv);
}
