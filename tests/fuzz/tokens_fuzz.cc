// Fuzz target: token files (the llm.c .bin format `run --data` reads), then a loader over what
// parsed: each target must be the token after its input, as the loader's contract says.
#include <string>
#include <utility>

#include "fuzz_target.h"
#include "tierflow/real/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tierflow::real;
  auto tokens = ParseTokenFile(tierflow::fuzz::Bytes(data, size), "fuzz.bin");
  if (!tokens.ok()) return 0;
  constexpr int64_t kBatch = 2, kSeq = 3;
  auto loader = TokenLoader::Create(std::move(tokens).value(), kBatch, kSeq, /*seed=*/size);
  if (!loader.ok()) return 0;
  for (int step = 0; step < 3; ++step) {
    const TokenBatch b = loader->Next();
    if (b.inputs.size() != kBatch * kSeq || b.targets.size() != kBatch * kSeq) tierflow::fuzz::Violation("a batch of the wrong size");
    for (int64_t row = 0; row < kBatch; ++row) {
      for (int64_t t = 0; t + 1 < kSeq; ++t) {
        if (b.targets[row * kSeq + t] != b.inputs[row * kSeq + t + 1]) tierflow::fuzz::Violation("a target is not the next input");
      }
    }
  }
  return 0;
}
