// The collective probe (collective_probe.h). Inputs are small integers, so that every sum is
// exact in fp32 and the expected result is known on every rank without communication: rank r's
// element i is ((7 i + 13 r) mod 17) - 8.
#include "tierflow/real/collective_probe.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace tierflow::real {
namespace {

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

float Pattern(int32_t rank, int64_t i) { return static_cast<float>((7 * i + 13 * static_cast<int64_t>(rank)) % 17 - 8); }

// n fp32 elements the collective works on: a host vector, or a block of GPU memory (`memory`)
// written from and read into host vectors.
class ProbeBuffer {
 public:
  static StatusOr<ProbeBuffer> Make(DeviceMemory* memory, int64_t n) {
    ProbeBuffer b(memory, n);
    if (memory != nullptr) {
      TF_ASSIGN_OR_RETURN(b.block_, memory->Allocate(std::max<int64_t>(1, n) * 4));
    } else {
      b.host_.resize(static_cast<size_t>(n));
    }
    return b;
  }
  ProbeBuffer(ProbeBuffer&& o) noexcept : memory_(o.memory_), n_(o.n_), host_(std::move(o.host_)), block_(std::exchange(o.block_, nullptr)) {}
  ProbeBuffer(const ProbeBuffer&) = delete;
  ProbeBuffer& operator=(const ProbeBuffer&) = delete;
  ProbeBuffer& operator=(ProbeBuffer&&) = delete;
  ~ProbeBuffer() {
    if (block_ != nullptr) memory_->Free(block_);
  }
  float* data() { return memory_ != nullptr ? static_cast<float*>(block_) : host_.data(); }
  Status Write(const std::vector<float>& from) {
    if (memory_ == nullptr) {
      std::copy(from.begin(), from.end(), host_.begin());
      return Status::Ok();
    }
    return memory_->ToDevice(block_, from.data(), n_ * 4);
  }
  // The values on the host: the buffer itself, or `scratch` read back into.
  StatusOr<const std::vector<float>*> Read(std::vector<float>* scratch) {
    if (memory_ == nullptr) return &host_;
    scratch->resize(static_cast<size_t>(n_));
    TF_RETURN_IF_ERROR(memory_->ToHost(scratch->data(), block_, n_ * 4));
    return scratch;
  }

 private:
  ProbeBuffer(DeviceMemory* memory, int64_t n) : memory_(memory), n_(n) {}
  DeviceMemory* memory_;
  int64_t n_;
  std::vector<float> host_;
  void* block_ = nullptr;
};

// Every rank's `mine` (host memory), in rank order, through the collective (and its memory).
StatusOr<std::vector<float>> GatherToHost(Collective& c, DeviceMemory* memory, const std::vector<float>& mine) {
  const auto n = static_cast<int64_t>(mine.size());
  TF_ASSIGN_OR_RETURN(ProbeBuffer send, ProbeBuffer::Make(memory, n));
  TF_ASSIGN_OR_RETURN(ProbeBuffer recv, ProbeBuffer::Make(memory, n * c.ranks()));
  TF_RETURN_IF_ERROR(send.Write(mine));
  TF_RETURN_IF_ERROR(Complete(c.AllGather(send.data(), recv.data(), n, ElementType::kFloat32)));
  std::vector<float> scratch;
  TF_ASSIGN_OR_RETURN(const std::vector<float>* all, recv.Read(&scratch));
  return *all;
}

// Elements of `out` not equal to `expect(i)`.
template <typename F>
int64_t Wrong(const std::vector<float>& out, F expect) {
  int64_t wrong = 0;
  for (size_t i = 0; i < out.size(); ++i) wrong += out[i] != expect(static_cast<int64_t>(i));
  return wrong;
}

}  // namespace

double BusBandwidthFactor(Op op, int32_t ranks) {
  const double n = ranks;
  return op == Op::kAllReduce ? 2 * (n - 1) / n : (n - 1) / n;
}

StatusOr<CollectiveProbeResult> ProbeCollectives(Collective& c, const CollectiveProbeOptions& o) {
  const int32_t ranks = c.ranks(), rank = c.rank();
  if (o.sizes.empty()) return InvalidArgument("probe collective: no message sizes");
  if (o.repetitions < 1) return InvalidArgument("probe collective: --reps " + std::to_string(o.repetitions) + " must be at least 1");
  for (Op op : o.ops) {
    if (!IsCollectiveOp(op)) return InvalidArgument("probe collective: '" + std::string(OpName(op)) + "' is not a collective");
  }
  for (int64_t bytes : o.sizes) {
    if (bytes < 4 * static_cast<int64_t>(ranks)) {
      return InvalidArgument("probe collective: size " + std::to_string(bytes) + " B is below one fp32 element per rank (" +
                             std::to_string(4 * ranks) + " B on " + std::to_string(ranks) + " ranks)");
    }
  }
  if (c.device_memory() && o.memory == nullptr) {
    return InvalidArgument("probe collective: back-end '" + std::string(c.backend()) + "' works on GPU memory, and no memory was given for its buffers");
  }
  DeviceMemory* memory = c.device_memory() ? o.memory : nullptr;
  CollectiveProbeResult result;
  const double t0 = Now();
  for (Op op : o.ops) {
    for (int64_t size : o.sizes) {
      const int64_t per_rank = size / 4 / ranks;
      const int64_t count = per_rank * ranks;
      // What this rank sends and what it must receive.
      const bool gather = op == Op::kAllGather;
      std::vector<float> send_values(static_cast<size_t>(gather ? per_rank : count));
      for (size_t i = 0; i < send_values.size(); ++i) send_values[i] = Pattern(rank, static_cast<int64_t>(i));
      const int64_t recv_count = op == Op::kReduceScatter ? per_rank : count;
      TF_ASSIGN_OR_RETURN(ProbeBuffer send, ProbeBuffer::Make(memory, static_cast<int64_t>(send_values.size())));
      TF_ASSIGN_OR_RETURN(ProbeBuffer recv, ProbeBuffer::Make(memory, recv_count));
      TF_RETURN_IF_ERROR(send.Write(send_values));
      const std::vector<float> unwritten(static_cast<size_t>(recv_count), 1e30f);  // a result left unwritten counts as wrong
      std::vector<float> out;
      auto sum_at = [ranks](int64_t i) {
        float s = 0;
        for (int32_t q = 0; q < ranks; ++q) s += Pattern(q, i);
        return s;
      };
      auto expect = [&](int64_t i) -> float {
        if (op == Op::kAllGather) return Pattern(static_cast<int32_t>(i / per_rank), i % per_rank);
        if (op == Op::kReduceScatter) return sum_at(rank * per_rank + i);
        return sum_at(i);
      };
      auto issue = [&]() -> Status {
        switch (op) {
          case Op::kAllGather: return Complete(c.AllGather(send.data(), recv.data(), per_rank, ElementType::kFloat32));
          case Op::kReduceScatter: return Complete(c.ReduceScatter(send.data(), recv.data(), per_rank, ElementType::kFloat32));
          default: return Complete(c.AllReduce(send.data(), recv.data(), count, ElementType::kFloat32));
        }
      };
      TF_RETURN_IF_ERROR(c.Barrier());
      TF_RETURN_IF_ERROR(issue());  // warm-up: connections, first-touch pages
      std::vector<float> mine(static_cast<size_t>(o.repetitions));
      std::vector<double> starts(mine.size());
      float wrong = 0;
      for (int k = 0; k < o.repetitions; ++k) {
        TF_RETURN_IF_ERROR(recv.Write(unwritten));
        TF_RETURN_IF_ERROR(c.Barrier());
        const double begin = Now();
        TF_RETURN_IF_ERROR(issue());
        mine[static_cast<size_t>(k)] = static_cast<float>(Now() - begin);
        starts[static_cast<size_t>(k)] = begin - t0;
        TF_ASSIGN_OR_RETURN(const std::vector<float>* got, recv.Read(&out));
        wrong += static_cast<float>(Wrong(*got, expect));
      }
      // Every rank's times and wrong counts to every rank: a repetition takes its slowest rank's.
      TF_ASSIGN_OR_RETURN(const std::vector<float> all_times, GatherToHost(c, memory, mine));
      TF_ASSIGN_OR_RETURN(const std::vector<float> all_wrong, GatherToHost(c, memory, {wrong}));
      CollectiveProbeRow row;
      row.op = op;
      row.bytes = count * 4;
      row.count = count;
      row.ranks = ranks;
      std::vector<double> slowest(mine.size(), 0.0);
      for (int32_t q = 0; q < ranks; ++q) {
        for (size_t k = 0; k < mine.size(); ++k) slowest[k] = std::max(slowest[k], static_cast<double>(all_times[q * mine.size() + k]));
        row.wrong += static_cast<int64_t>(all_wrong[static_cast<size_t>(q)]);
      }
      for (size_t k = 0; k < slowest.size(); ++k) {
        TraceRecord r = ProbeRecord("probe.collective." + std::string(OpName(op)) + "." + std::to_string(row.bytes), op, "dp.comm",
                                    static_cast<int64_t>(k), row.bytes, starts[k], starts[k] + slowest[k]);
        r.threads = ranks;  // collective records carry the rank count (docs/trace-format.md)
        result.records.push_back(std::move(r));
      }
      std::vector<double> sorted = slowest;
      std::sort(sorted.begin(), sorted.end());
      row.time_s = sorted.size() % 2 ? sorted[sorted.size() / 2] : 0.5 * (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]);
      row.algbw = row.time_s > 0 ? static_cast<double>(row.bytes) / row.time_s : 0;
      row.busbw = row.algbw * BusBandwidthFactor(op, ranks);
      result.rows.push_back(row);
      if (o.progress) o.progress(std::string(OpName(op)) + " " + std::to_string(row.bytes));
    }
  }
  return result;
}

}  // namespace tierflow::real
