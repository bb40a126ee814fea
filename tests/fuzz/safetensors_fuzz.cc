// Fuzz target: safetensors files (SafetensorsFile::Parse), and reading every tensor of one that
// parses, as `tierflow run` reads a Hugging Face checkpoint.
#include <string>
#include <vector>

#include "fuzz_target.h"
#include "tierflow/real/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tierflow::real;
  auto file = SafetensorsFile::Parse(tierflow::fuzz::Bytes(data, size), "fuzz.safetensors");
  if (!file.ok()) return 0;
  for (const std::string& name : file->Names()) {
    auto info = file->Info(name);
    if (!info.ok()) tierflow::fuzz::Violation("a listed tensor has no info: " + name);
    // A tensor that parsed lies inside the file, so its element count is bounded by the input.
    if (info->end - info->begin > static_cast<int64_t>(size)) tierflow::fuzz::Violation("tensor '" + name + "' extends past the file");
    switch (info->dtype) {
      case StDtype::kF32: case StDtype::kF16: case StDtype::kBF16: case StDtype::kF64: {
        std::vector<float> out(static_cast<size_t>(info->elements()));
        (void)file->ReadF32(name, out.data(), info->elements());
        break;
      }
      default: (void)file->ReadInts(name);
    }
  }
  return 0;
}
