#include "tierflow/real/dataset.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "tierflow/core/files.h"
#include "tierflow/real/tokenizer.h"

namespace tierflow::real {

std::vector<int32_t> ByteEncode(std::string_view text) {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteDecode(const std::vector<int32_t>& ids) {
  std::string text(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    TF_CHECK(ids[i] >= 0 && ids[i] < kByteVocab);
    text[i] = static_cast<char>(static_cast<unsigned char>(ids[i]));
  }
  return text;
}

Status WriteTokenFile(const std::string& path, const std::vector<int32_t>& tokens,
                      bool wide_tokens) {
  bool wide = wide_tokens;
  for (int32_t t : tokens) {
    if (t < 0) return InvalidArgument("token file '" + path + "': negative token id");
    if (t > 65535) wide = true;
  }
  std::vector<int32_t> header(256, 0);
  header[0] = wide ? kTokenFileMagicU32 : kTokenFileMagicU16;
  header[1] = wide ? 7 : 1;
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return InvalidArgument("token file '" + path + "': more than 2^31 - 1 tokens");
  }
  header[2] = static_cast<int32_t>(tokens.size());
  std::string bytes(reinterpret_cast<const char*>(header.data()), header.size() * 4);
  for (int32_t t : tokens) {
    if (wide) {
      const uint32_t v = static_cast<uint32_t>(t);
      bytes.append(reinterpret_cast<const char*>(&v), 4);
    } else {
      const uint16_t v = static_cast<uint16_t>(t);
      bytes.append(reinterpret_cast<const char*>(&v), 2);
    }
  }
  return WriteFileAtomically(path, bytes, "token file");
}

StatusOr<std::vector<int32_t>> ReadTokenFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open token file '" + path + "'");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return ParseTokenFile(buffer.str(), path);
}

StatusOr<std::vector<int32_t>> ParseTokenFile(std::string_view bytes, const std::string& path) {
  const std::string what = "token file '" + path + "'";
  if (bytes.size() < 1024) return DataLoss(what + ": shorter than the 1024-byte header");
  int32_t header[3];
  std::memcpy(header, bytes.data(), sizeof(header));
  int64_t width = 0;
  if (header[0] == kTokenFileMagicU16 && header[1] == 1) {
    width = 2;
  } else if (header[0] == kTokenFileMagicU32 && header[1] == 7) {
    width = 4;
  } else {
    return InvalidArgument(what + ": magic " + std::to_string(header[0]) + " version " +
                           std::to_string(header[1]) + " is not 20240520/1 (uint16) or " +
                           "20240801/7 (uint32)");
  }
  const int64_t count = header[2];
  if (count < 0 || static_cast<int64_t>(bytes.size()) != 1024 + count * width) {
    return DataLoss(what + ": header says " + std::to_string(count) + " tokens but the file has " +
                    std::to_string(bytes.size()) + " bytes");
  }
  std::vector<int32_t> tokens(static_cast<size_t>(count));
  const char* p = bytes.data() + 1024;
  for (int64_t i = 0; i < count; ++i) {
    if (width == 2) {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      tokens[i] = v;
    } else {
      uint32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      if (v > static_cast<uint32_t>(INT32_MAX)) {
        return InvalidArgument(what + ": token " + std::to_string(i) + " exceeds int32");
      }
      tokens[i] = static_cast<int32_t>(v);
    }
  }
  return tokens;
}

StatusOr<HeldOutSplit> SplitHeldOut(const std::vector<int32_t>& tokens, int64_t batch, int64_t seq) {
  if (batch < 1 || seq < 1) return InvalidArgument("held-out split: batch and seq must be >= 1");
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t held = batch * seq + 1;
  // The training part must make one batch of windows too: batch * seq + 1 tokens.
  if (n < 2 * held) {
    return InvalidArgument("held-out split: " + std::to_string(n) + " tokens, fewer than the " + std::to_string(2 * held) +
                           " that a held-out batch and a training batch of " + std::to_string(batch) + " x " + std::to_string(seq + 1) +
                           " tokens need");
  }
  HeldOutSplit split;
  const int64_t start = n - held;
  split.train.assign(tokens.begin(), tokens.begin() + start);
  split.eval.inputs.resize(static_cast<size_t>(batch * seq));
  split.eval.targets.resize(static_cast<size_t>(batch * seq));
  for (int64_t r = 0; r < batch; ++r) {
    for (int64_t t = 0; t < seq; ++t) {
      split.eval.inputs[static_cast<size_t>(r * seq + t)] = tokens[static_cast<size_t>(start + r * seq + t)];
      split.eval.targets[static_cast<size_t>(r * seq + t)] = tokens[static_cast<size_t>(start + r * seq + t + 1)];
    }
  }
  return split;
}

StatusOr<TokenLoader> TokenLoader::Create(std::vector<int32_t> tokens, int64_t batch, int64_t seq,
                                          uint64_t seed) {
  if (batch < 1 || seq < 1) return InvalidArgument("token loader: batch and seq must be >= 1");
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t windows = n > 0 ? (n - 1) / seq : 0;
  if (windows < batch) {
    return InvalidArgument("token loader: " + std::to_string(n) + " tokens make " +
                           std::to_string(windows) + " windows of " + std::to_string(seq + 1) +
                           " tokens, fewer than batch " + std::to_string(batch));
  }
  TokenLoader loader;
  loader.tokens_ = std::move(tokens);
  loader.batch_ = batch;
  loader.seq_ = seq;
  loader.seed_ = seed;
  loader.order_.resize(static_cast<size_t>(windows));
  loader.Shuffle();
  return loader;
}

void TokenLoader::Shuffle() {
  for (size_t i = 0; i < order_.size(); ++i) order_[i] = static_cast<int64_t>(i);
  // splitmix64 seeded by (seed, epoch); Fisher-Yates (portable).
  uint64_t state = seed_ ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(epoch_ + 1));
  auto next = [&state] {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  for (size_t i = order_.size(); i > 1; --i) {
    const uint64_t j = next() % i;  // the modulo bias (< i / 2^64) is irrelevant here
    std::swap(order_[i - 1], order_[j]);
  }
  cursor_ = 0;
}

TokenBatch TokenLoader::Next() {
  if (cursor_ + batch_ > windows()) {
    ++epoch_;
    Shuffle();
  }
  TokenBatch b;
  b.epoch = epoch_;
  b.inputs.resize(static_cast<size_t>(batch_ * seq_));
  b.targets.resize(static_cast<size_t>(batch_ * seq_));
  for (int64_t r = 0; r < batch_; ++r) {
    const int64_t start = order_[static_cast<size_t>(cursor_ + r)] * seq_;
    for (int64_t t = 0; t < seq_; ++t) {
      b.inputs[r * seq_ + t] = tokens_[start + t];
      b.targets[r * seq_ + t] = tokens_[start + t + 1];
    }
  }
  cursor_ += batch_;
  return b;
}

}  // namespace tierflow::real
