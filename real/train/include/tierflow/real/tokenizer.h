// The byte-level tokenizer of the `tiny` model: token id = byte value (vocab 256), so every text
// round-trips exactly and no vocabulary file is needed.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tierflow::real {

inline constexpr int32_t kByteVocab = 256;

std::vector<int32_t> ByteEncode(std::string_view text);
// Requires 0 <= id < 256 for every id (TF_CHECK).
std::string ByteDecode(const std::vector<int32_t>& ids);

}  // namespace tierflow::real
