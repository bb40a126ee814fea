// The collective interface's shared parts (collective.h): the rank-order sum every back-end
// reduces with, the local group, and the back-end by name.
#include "tierflow/real/collective.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>

#include "tierflow/real/adamw.h"
#include "mpi_collective.h"

namespace tierflow::real {

int64_t ElementBytes(ElementType type) { return type == ElementType::kFloat32 ? 4 : 2; }
std::string_view ElementTypeName(ElementType type) { return type == ElementType::kFloat32 ? "float32" : "bf16"; }

void SumInRankOrder(const std::vector<const void*>& parts, void* out, int64_t count, ElementType type) {
  if (parts.empty()) return;
  const auto load = [type](const void* p, int64_t i) {
    return type == ElementType::kFloat32 ? static_cast<const float*>(p)[i] : Bf16ToFp32(static_cast<const uint16_t*>(p)[i]);
  };
  for (int64_t i = 0; i < count; ++i) {
    float sum = load(parts[0], i);
    for (size_t r = 1; r < parts.size(); ++r) sum += load(parts[r], i);
    if (type == ElementType::kFloat32) static_cast<float*>(out)[i] = sum;
    else static_cast<uint16_t*>(out)[i] = Fp32ToBf16(sum);
  }
}

Status Complete(StatusOr<std::unique_ptr<Pending>> pending) {
  if (!pending.ok()) return pending.status();
  return (*pending)->Wait();
}

namespace {

// ---- The local group: ranks in one process -----------------------------------------------------

enum class OpKind { kAllGather, kReduceScatter, kAllReduce, kBroadcast, kBarrier };
std::string_view OpKindName(OpKind k) {
  switch (k) {
    case OpKind::kAllGather: return "AllGather";
    case OpKind::kReduceScatter: return "ReduceScatter";
    case OpKind::kAllReduce: return "AllReduce";
    case OpKind::kBroadcast: return "Broadcast";
    case OpKind::kBarrier: return "Barrier";
  }
  return "?";
}

struct Call {
  OpKind kind = OpKind::kBarrier;
  const void* send = nullptr;
  void* recv = nullptr;
  int64_t count = 0;  // elements (bytes for Broadcast)
  ElementType type = ElementType::kFloat32;
  int root = 0;
  std::string Describe() const {
    std::string d = std::string(OpKindName(kind));
    if (kind == OpKind::kBroadcast) return d + " of " + std::to_string(count) + " bytes from rank " + std::to_string(root);
    if (kind == OpKind::kBarrier) return d;
    return d + " of " + std::to_string(count) + " " + std::string(ElementTypeName(type));
  }
  bool Matches(const Call& o) const { return kind == o.kind && count == o.count && type == o.type && root == o.root; }
};

// One operation of the group: every rank's call, filled as they are issued; the last rank to
// issue it carries it out for all.
struct Round {
  std::vector<Call> calls;
  std::vector<bool> issued;
  int waiting = 0;  // ranks issued so far
  int handles = 0;  // Pendings of it not yet destroyed
  bool done = false;
  Status status;
};

class LocalGroup {
 public:
  explicit LocalGroup(int ranks) : ranks_(ranks), next_(static_cast<size_t>(ranks), 0) {}

  // Rank `rank` issues its next operation; returns the round's index. Each index is released
  // once (Release) when its Pending goes.
  int64_t Issue(int rank, const Call& call) {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t index = next_[static_cast<size_t>(rank)]++;
    Round& round = RoundAt(index);
    ++round.handles;
    round.calls[static_cast<size_t>(rank)] = call;
    round.issued[static_cast<size_t>(rank)] = true;
    if (++round.waiting == ranks_) {
      Execute(round);
      round.done = true;
      cv_.notify_all();
    }
    return index;
  }

  Status Wait(int64_t index) {
    std::unique_lock<std::mutex> lock(mu_);
    Round& round = RoundAt(index);
    cv_.wait(lock, [&] { return round.done; });
    return round.status;
  }

  // A Pending of round `index` is gone: rounds done and no longer referred to are dropped, so a
  // long run's group holds only the rounds in flight.
  void Release(int64_t index) {
    std::lock_guard<std::mutex> lock(mu_);
    --RoundAt(index).handles;
    while (!rounds_.empty() && rounds_.front().done && rounds_.front().handles == 0 && rounds_.front().waiting == ranks_) {
      rounds_.pop_front();
      ++first_;
    }
  }

 private:
  Round& RoundAt(int64_t index) {
    while (first_ + static_cast<int64_t>(rounds_.size()) <= index) {
      rounds_.emplace_back();
      rounds_.back().calls.resize(static_cast<size_t>(ranks_));
      rounds_.back().issued.assign(static_cast<size_t>(ranks_), false);
    }
    return rounds_[static_cast<size_t>(index - first_)];
  }

  void Execute(Round& round) {
    const Call& first = round.calls[0];
    for (int r = 1; r < ranks_; ++r) {
      if (!round.calls[static_cast<size_t>(r)].Matches(first)) {
        round.status = FailedPrecondition("collective: rank " + std::to_string(r) + " issued " + round.calls[static_cast<size_t>(r)].Describe() +
                                          " where rank 0 issued " + first.Describe() + " (every rank must issue the same operations in the same order)");
        return;
      }
    }
    const int64_t n = first.count, bytes = n * ElementBytes(first.type);
    std::vector<const void*> parts(static_cast<size_t>(ranks_));
    switch (first.kind) {
      case OpKind::kAllGather:
        for (const Call& to : round.calls) {
          for (int r = 0; r < ranks_; ++r) {
            std::memmove(static_cast<char*>(to.recv) + r * bytes, round.calls[static_cast<size_t>(r)].send, static_cast<size_t>(bytes));
          }
        }
        break;
      case OpKind::kReduceScatter: {
        for (int dst = 0; dst < ranks_; ++dst) {
          for (int r = 0; r < ranks_; ++r) parts[static_cast<size_t>(r)] = static_cast<const char*>(round.calls[static_cast<size_t>(r)].send) + dst * bytes;
          SumInRankOrder(parts, round.calls[static_cast<size_t>(dst)].recv, n, first.type);
        }
        break;
      }
      case OpKind::kAllReduce: {
        // Into one sum first: a rank's recv may be its send, which the others still read.
        std::vector<char> sum(static_cast<size_t>(bytes));
        for (int r = 0; r < ranks_; ++r) parts[static_cast<size_t>(r)] = round.calls[static_cast<size_t>(r)].send;
        SumInRankOrder(parts, sum.data(), n, first.type);
        for (const Call& to : round.calls) std::memcpy(to.recv, sum.data(), static_cast<size_t>(bytes));
        break;
      }
      case OpKind::kBroadcast: {
        const void* from = round.calls[static_cast<size_t>(first.root)].recv;
        for (int r = 0; r < ranks_; ++r) {
          if (r != first.root) std::memcpy(round.calls[static_cast<size_t>(r)].recv, from, static_cast<size_t>(first.count));
        }
        break;
      }
      case OpKind::kBarrier: break;
    }
  }

  const int ranks_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int64_t> next_;  // per rank: its next operation's index
  std::deque<Round> rounds_;   // the rounds from index first_ on (deque: references stay valid as it grows)
  int64_t first_ = 0;
};

class LocalPending : public Pending {
 public:
  LocalPending(std::shared_ptr<LocalGroup> group, int64_t index) : group_(std::move(group)), index_(index) {}
  ~LocalPending() override { group_->Release(index_); }
  Status Wait() override { return group_->Wait(index_); }

 private:
  std::shared_ptr<LocalGroup> group_;
  int64_t index_;
};

class LocalCollective : public Collective {
 public:
  LocalCollective(std::shared_ptr<LocalGroup> group, int ranks, int rank, bool device_memory)
      : group_(std::move(group)), ranks_(ranks), rank_(rank), device_memory_(device_memory) {}
  std::string_view backend() const override { return "local"; }
  int ranks() const override { return ranks_; }
  int rank() const override { return rank_; }
  bool device_memory() const override { return device_memory_; }

  StatusOr<std::unique_ptr<Pending>> AllGather(const void* send, void* recv, int64_t count, ElementType type) override {
    return Issue({OpKind::kAllGather, send, recv, count, type, 0});
  }
  StatusOr<std::unique_ptr<Pending>> ReduceScatter(const void* send, void* recv, int64_t count, ElementType type) override {
    return Issue({OpKind::kReduceScatter, send, recv, count, type, 0});
  }
  StatusOr<std::unique_ptr<Pending>> AllReduce(const void* send, void* recv, int64_t count, ElementType type) override {
    return Issue({OpKind::kAllReduce, send, recv, count, type, 0});
  }
  StatusOr<std::unique_ptr<Pending>> Broadcast(void* buf, int64_t bytes, int root) override {
    if (root < 0 || root >= ranks_) return InvalidArgument("Broadcast: root " + std::to_string(root) + " of " + std::to_string(ranks_) + " ranks");
    return Issue({OpKind::kBroadcast, buf, buf, bytes, ElementType::kFloat32, root});
  }
  Status Barrier() override { return Complete(Issue({OpKind::kBarrier, nullptr, nullptr, 0, ElementType::kFloat32, 0})); }

 private:
  StatusOr<std::unique_ptr<Pending>> Issue(const Call& call) {
    if (call.kind != OpKind::kBarrier && call.count < 1) {
      return InvalidArgument(std::string(OpKindName(call.kind)) + ": count " + std::to_string(call.count) + " (must be >= 1)");
    }
    return std::unique_ptr<Pending>(new LocalPending(group_, group_->Issue(rank_, call)));
  }

  std::shared_ptr<LocalGroup> group_;
  int ranks_, rank_;
  bool device_memory_;
};

}  // namespace

std::vector<std::unique_ptr<Collective>> MakeLocalGroup(int ranks, bool device_memory) {
  TF_CHECK(ranks >= 1);
  auto group = std::make_shared<LocalGroup>(ranks);
  std::vector<std::unique_ptr<Collective>> out;
  for (int r = 0; r < ranks; ++r) out.push_back(std::make_unique<LocalCollective>(group, ranks, r, device_memory));
  return out;
}

std::string CollectiveBackends() { return internal::HaveMpi() ? "local, mpi" : "local"; }

StatusOr<std::unique_ptr<Collective>> OpenCollective(std::string_view name) {
  if (name == "local") return std::move(MakeLocalGroup(1)[0]);
  if (name == "mpi") {
    if (!internal::HaveMpi()) return Unavailable("collective back-end 'mpi': this build has no MPI (apt-get install libopenmpi-dev, then build again)");
    return internal::OpenMpiCollective();
  }
  return InvalidArgument("collective back-end '" + std::string(name) + "' (this build has: " + CollectiveBackends() + ")");
}

}  // namespace tierflow::real
