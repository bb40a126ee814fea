// The entry point every fuzz target defines (libFuzzer's), and the rule the targets share: a
// parser may refuse any input with a Status, but it never crashes, never throws, never reads out
// of bounds, and what it accepts survives a write-and-read-back unchanged. A broken property is
// reported through Violation(), which aborts so that libFuzzer (or the replay driver) keeps the
// input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace tierflow::fuzz {

[[noreturn]] inline void Violation(const std::string& what) {
  std::fprintf(stderr, "fuzz property violated: %s\n", what.c_str());
  std::abort();
}

inline std::string Bytes(const uint8_t* data, size_t size) { return std::string(reinterpret_cast<const char*>(data), size); }

}  // namespace tierflow::fuzz
