// Tokenized datasets in llm.c's .bin format and a deterministic batch loader.
//
// File format (little-endian): a header of 256 int32 — [0] magic, [1] version, [2] token count,
// the rest 0 — then the tokens:
//   magic 20240520, version 1: uint16 tokens (llm.c's GPT-2 files, vocab <= 65536)
//   magic 20240801, version 7: uint32 tokens (llm.c's Llama-3 files)
// Errors name the file and what is wrong (magic, version, a truncated file).
//
// TokenLoader cuts the tokens into windows of seq + 1 tokens starting every seq tokens (the last
// token of a window is the first of the next, so every token but the first is a target once per
// epoch), shuffles the window order per epoch with a portable generator seeded by (seed, epoch),
// and yields batches of `batch` windows: inputs = window[0, seq), targets = window[1, seq].
// The same (tokens, batch, seq, seed) gives the same batches on every platform.
// Thread safety: TokenLoader is not thread-safe; the free functions are.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tierflow/core/status.h"

namespace tierflow::real {

inline constexpr int32_t kTokenFileMagicU16 = 20240520;
inline constexpr int32_t kTokenFileMagicU32 = 20240801;

// Writes tokens as uint16 (version 1) when every id < 65536 and wide_tokens is false, else as
// uint32 (version 7). Ids must be >= 0. Written atomically (tmp file, rename).
Status WriteTokenFile(const std::string& path, const std::vector<int32_t>& tokens,
                      bool wide_tokens = false);
StatusOr<std::vector<int32_t>> ReadTokenFile(const std::string& path);
// The same from a file's bytes already in memory; `path` names it in errors.
StatusOr<std::vector<int32_t>> ParseTokenFile(std::string_view bytes, const std::string& path);

struct TokenBatch {
  std::vector<int32_t> inputs;   // [batch * seq], row b * seq + t
  std::vector<int32_t> targets;  // the next token of each input
  int64_t epoch = 0;
};

// A corpus with its last `batch` windows held out for evaluation (tierflow run --eval-every): the
// held-out batch is the last batch * seq + 1 tokens, as `batch` windows of seq + 1 tokens starting
// every seq tokens (window r: inputs tokens[start + r seq, + seq), targets one further), and
// training reads the tokens before them, so no token of the held-out batch is trained on.
// InvalidArgument when what is left does not make one training batch (TokenLoader::Create).
struct HeldOutSplit {
  std::vector<int32_t> train;
  TokenBatch eval;
};
StatusOr<HeldOutSplit> SplitHeldOut(const std::vector<int32_t>& tokens, int64_t batch, int64_t seq);

class TokenLoader {
 public:
  // Requires batch >= 1, seq >= 1 and at least batch windows (tokens.size() >= batch*seq + 1);
  // InvalidArgument otherwise.
  static StatusOr<TokenLoader> Create(std::vector<int32_t> tokens, int64_t batch, int64_t seq,
                                      uint64_t seed);
  int64_t windows() const { return static_cast<int64_t>(order_.size()); }
  int64_t batches_per_epoch() const { return windows() / batch_; }
  // The next batch; an epoch ends when fewer than `batch` unused windows remain (they are
  // dropped), and the next epoch is reshuffled.
  TokenBatch Next();

 private:
  TokenLoader() = default;
  void Shuffle();

  std::vector<int32_t> tokens_;
  int64_t batch_ = 0, seq_ = 0;
  uint64_t seed_ = 0;
  std::vector<int64_t> order_;
  int64_t epoch_ = 0, cursor_ = 0;
};

}  // namespace tierflow::real
