// The executor's state bookkeeping (run_state.h): the kinds of model state, the version of every
// element range of a kind in a place (Versions), and what a buffer holds (pieces of state at byte
// offsets, each with its version). Values; no thread safety of their own (the dispatch thread owns
// them).
#pragma once

#include <cstdint>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "tierflow/core/schedule.h"
#include "tierflow/real/adamw.h"
#include "tierflow/real/pinned_arena.h"
#include "tierflow/real/train_config.h"

namespace tierflow::real::exec {

// ---- State kinds and versions ----------------------------------------------------------------

// The core's StateKind as an index, for per-kind arrays (kMaster + k is a moment's index).
enum Kind : int { kParam16, kGrad16, kGrad, kMaster, kAdamM, kAdamV, kKindCount };
// In a GPU buffer of a run of several ranks: the rank's partition of a unit's parameters, copied
// there by an h2d and not yet all-gathered (in the rank's element space; kParam16 pieces of GPU
// buffers are whole units in the model's, which computes read).
inline constexpr int kParam16Part = kKindCount;
static_assert(kKindCount == kStateKindCount && static_cast<int>(StateKind::kAdamV) == kAdamV);

inline int KindOf(StateKind kind) { return static_cast<int>(kind); }
constexpr int64_t KindBytes(int kind) { return StateKindBytes(static_cast<StateKind>(kind)); }
inline std::string KindName(int kind) { return std::string(StateKindName(static_cast<StateKind>(kind))); }

// Element range -> version: the number of optimizer updates the bytes reflect (gradients: the
// iteration that produced them). kNever where nothing was ever stored.
class Versions {
 public:
  static constexpr int64_t kNever = -1;
  static constexpr int64_t kMixed = -2;

  void Set(int64_t begin, int64_t end, int64_t version) {
    if (begin >= end) return;
    auto it = spans_.lower_bound(begin);
    if (it != spans_.begin()) {
      auto prev = std::prev(it);
      if (prev->second.end > begin) {  // split the span that starts before
        const Span tail = prev->second;
        prev->second.end = begin;
        if (tail.end > end) spans_[end] = {tail.end, tail.version};
      }
    }
    it = spans_.lower_bound(begin);
    while (it != spans_.end() && it->first < end) {
      if (it->second.end > end) spans_[end] = {it->second.end, it->second.version};
      it = spans_.erase(it);
    }
    spans_[begin] = {end, version};
  }
  // The one version of the whole range; kNever if any element was never stored; kMixed if
  // parts differ.
  int64_t Get(int64_t begin, int64_t end) const {
    int64_t version = kNever;
    int64_t at = begin;
    auto it = spans_.upper_bound(begin);
    if (it != spans_.begin()) --it;
    for (; it != spans_.end() && it->first < end; ++it) {
      if (it->second.end <= at) continue;
      if (it->first > at) return kNever;  // a hole
      if (version == kNever) version = it->second.version;
      else if (version != it->second.version) return kMixed;
      at = it->second.end;
      if (at >= end) return version;
    }
    return kNever;
  }

 private:
  struct Span {
    int64_t end;
    int64_t version;
  };
  std::map<int64_t, Span> spans_;
};

// What AdamW multiplies each gradient by: the inverse loss scale times the clip factor, in one
// place for the executor and the in-memory loop alike.
inline float UpdateGradScale(float loss_scale, float clip) { return 1.0f / loss_scale * clip; }

// The loss scaler the training set-up asks for.
inline LossScaler ScalerFor(const TrainConfig& config) {
  return config.dynamic_loss_scaling ? LossScaler(config.initial_loss_scale) : LossScaler::None();
}

// Whether the schedule decides each step after a global gradient check.
inline bool HasGlobalCheck(const Schedule& s) {
  for (const TaskSpec& t : s.tasks()) {
    if (t.op == Op::kConvert && t.kernel == Kernel::kOverflowCheckAndNorm) return true;
  }
  return false;
}

inline std::string VersionText(int64_t v) {
  if (v == Versions::kNever) return "nothing";
  if (v == Versions::kMixed) return "parts of different versions";
  return "version " + std::to_string(v);
}

// ---- Buffers -----------------------------------------------------------------------------------

struct Piece {  // state inside a buffer
  int kind;
  int64_t begin, elements;
  int64_t offset;   // bytes into the buffer
  int64_t version;
};

struct BufferState {
  char* data = nullptr;  // host memory, or gpu0 memory for a buffer in a GPU pool
  int64_t size = 0;
  bool on_gpu = false;
  int32_t pool = -1;  // its schedule pool (the host pool it is cut from: Run::MakeHostArenas)
  // Its own piece of that pool for the whole run, where the pool holds every instance of its
  // buffers at once; empty where pieces are cut as buffers are taken.
  PinnedBuffer home;
  // The piece of its pool `data` is while taken (empty for a home, a block of the cache or gpu0).
  PinnedBuffer piece;
  std::vector<Piece> pieces;
};

// Where a range of state lies in a buffer (RunState::FindSpan): its first byte there, and the one
// version of every element (Versions::kMixed when parts differ); data null when the buffer does
// not hold the whole range.
struct Span {
  char* data = nullptr;
  int64_t version = -1;
};

// GPU-resident parameters (param16 whose home is a GPU): elements [begin, begin + n) at data,
// in gpu0 memory.
struct ResidentRun {
  int64_t begin, n;
  char* data;
};

}  // namespace tierflow::real::exec
