// The collective probe on the local back-end, three ranks on three threads: every point measured
// on every rank with the same result, nothing wrong, busbw as nccl-tests defines it and one record
// per repetition that calibrate reads as a collective of three ranks; a back-end that corrupts one
// element is caught in #wrong; bad options are refused naming them.
#include "tierflow/real/collective_probe.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

namespace tierflow::real {
namespace {

// Runs the probe on every rank of `group`, each on its own thread (the probe's barriers block).
std::vector<StatusOr<CollectiveProbeResult>> ProbeOnEveryRank(std::vector<std::unique_ptr<Collective>>& group,
                                                              const CollectiveProbeOptions& o) {
  std::vector<StatusOr<CollectiveProbeResult>> out(group.size(), Status(Internal("not run")));
  std::vector<std::thread> threads;
  for (size_t r = 0; r < group.size(); ++r) {
    threads.emplace_back([&, r] { out[r] = ProbeCollectives(*group[r], o); });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST(CollectiveProbe, EveryPointOnEveryRankNothingWrong) {
  auto group = MakeLocalGroup(3);
  CollectiveProbeOptions o;
  o.sizes = {4096, 65536};
  o.repetitions = 3;
  const auto results = ProbeOnEveryRank(group, o);
  for (const auto& r : results) ASSERT_TRUE(r.ok()) << r.status().ToString();
  const CollectiveProbeResult& r0 = *results[0];
  ASSERT_EQ(r0.rows.size(), 6u);  // three ops x two sizes
  ASSERT_EQ(r0.records.size(), 18u);
  for (const CollectiveProbeRow& row : r0.rows) {
    EXPECT_EQ(row.wrong, 0) << OpName(row.op) << " " << row.bytes;
    EXPECT_EQ(row.ranks, 3);
    EXPECT_EQ(row.count % 3, 0) << "whole elements per rank";
    EXPECT_EQ(row.bytes, row.count * 4);
    EXPECT_LE(row.bytes, 65536);
    EXPECT_GT(row.time_s, 0);
    EXPECT_DOUBLE_EQ(row.busbw, row.algbw * (row.op == Op::kAllReduce ? 4.0 / 3.0 : 2.0 / 3.0));
  }
  for (const TraceRecord& rec : r0.records) {
    EXPECT_TRUE(IsCollectiveOp(rec.op));
    EXPECT_EQ(rec.threads, 3) << "collective records carry the rank count";
    EXPECT_EQ(rec.source, "probe");
    EXPECT_EQ(rec.resource, "dp.comm");
    EXPECT_GT(rec.duration_s(), 0);
  }
  // Every rank reports the same slowest-rank times.
  for (size_t q = 1; q < results.size(); ++q) {
    ASSERT_EQ(results[q]->rows.size(), r0.rows.size());
    for (size_t i = 0; i < r0.rows.size(); ++i) EXPECT_EQ(results[q]->rows[i].time_s, r0.rows[i].time_s);
  }
}

class Done : public Pending {
 public:
  Status Wait() override { return Status::Ok(); }
};

// A back-end that gets one element of every all-reduce wrong on rank 1.
class OffByOne : public Collective {
 public:
  explicit OffByOne(std::unique_ptr<Collective> inner) : inner_(std::move(inner)) {}
  std::string_view backend() const override { return "off-by-one"; }
  int ranks() const override { return inner_->ranks(); }
  int rank() const override { return inner_->rank(); }
  StatusOr<std::unique_ptr<Pending>> AllGather(const void* s, void* r, int64_t n, ElementType t) override { return inner_->AllGather(s, r, n, t); }
  StatusOr<std::unique_ptr<Pending>> ReduceScatter(const void* s, void* r, int64_t n, ElementType t) override {
    return inner_->ReduceScatter(s, r, n, t);
  }
  StatusOr<std::unique_ptr<Pending>> AllReduce(const void* s, void* r, int64_t n, ElementType t) override {
    TF_RETURN_IF_ERROR(Complete(inner_->AllReduce(s, r, n, t)));
    if (rank() == 1 && n > 0) static_cast<float*>(r)[n / 2] += 1.0f;
    return std::unique_ptr<Pending>(std::make_unique<Done>());
  }
  StatusOr<std::unique_ptr<Pending>> Broadcast(void* b, int64_t n, int root) override { return inner_->Broadcast(b, n, root); }
  Status Barrier() override { return inner_->Barrier(); }

 private:
  std::unique_ptr<Collective> inner_;
};

TEST(CollectiveProbe, AWrongResultIsCounted) {
  auto local = MakeLocalGroup(2);
  std::vector<std::unique_ptr<Collective>> group;
  for (auto& c : local) group.push_back(std::make_unique<OffByOne>(std::move(c)));
  CollectiveProbeOptions o;
  o.sizes = {1024};
  o.ops = {Op::kAllReduce, Op::kAllGather};
  o.repetitions = 2;
  const auto results = ProbeOnEveryRank(group, o);
  for (const auto& r : results) ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const auto& r : results) {
    EXPECT_EQ(r->rows[0].wrong, 2) << "one element on rank 1 in each of two repetitions";
    EXPECT_EQ(r->rows[1].wrong, 0);
  }
}

TEST(CollectiveProbe, BadOptionsAreRefusedNamingThem) {
  auto group = MakeLocalGroup(1);
  CollectiveProbeOptions o;
  EXPECT_NE(ProbeCollectives(*group[0], o).status().message().find("no message sizes"), std::string::npos);
  o.sizes = {2};
  EXPECT_NE(ProbeCollectives(*group[0], o).status().message().find("below one fp32 element per rank"), std::string::npos);
  o.sizes = {4096};
  o.repetitions = 0;
  EXPECT_NE(ProbeCollectives(*group[0], o).status().message().find("--reps 0"), std::string::npos);
  o.repetitions = 1;
  o.ops = {Op::kRead};
  EXPECT_NE(ProbeCollectives(*group[0], o).status().message().find("'read' is not a collective"), std::string::npos);
  auto on_gpu = MakeLocalGroup(1, /*device_memory=*/true);
  o.ops = {Op::kAllReduce};
  const Status no_memory = ProbeCollectives(*on_gpu[0], o).status();
  EXPECT_EQ(no_memory.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_memory.message().find("back-end 'local' works on GPU memory, and no memory was given"), std::string::npos) << no_memory.ToString();
}

// "Device" memory in host blocks, counting what goes in and out and what is still held.
class CountedMemory : public DeviceMemory {
 public:
  StatusOr<void*> Allocate(int64_t bytes) override {
    ++held;
    return static_cast<void*>(new char[static_cast<size_t>(bytes)]);
  }
  void Free(void* block) override {
    --held;
    delete[] static_cast<char*>(block);
  }
  Status ToDevice(void* dst, const void* src, int64_t bytes) override {
    ++in;
    std::memcpy(dst, src, static_cast<size_t>(bytes));
    return Status::Ok();
  }
  Status ToHost(void* dst, const void* src, int64_t bytes) override {
    ++out;
    std::memcpy(dst, src, static_cast<size_t>(bytes));
    return Status::Ok();
  }
  std::atomic<int> held{0}, in{0}, out{0};
};

// A collective on GPU memory (nccl's path, with the local back-end standing in): every buffer it
// is handed is the memory's, filled and read through it outside the timed calls; nothing wrong,
// nothing left held.
TEST(CollectiveProbe, ACollectiveOnGpuMemoryIsHandedItsMemory) {
  auto group = MakeLocalGroup(2, /*device_memory=*/true);
  CountedMemory memory;
  CollectiveProbeOptions o;
  o.sizes = {4096};
  o.repetitions = 3;
  o.memory = &memory;
  const auto results = ProbeOnEveryRank(group, o);
  for (const auto& r : results) ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(results[0]->rows.size(), 3u);
  for (const CollectiveProbeRow& row : results[0]->rows) EXPECT_EQ(row.wrong, 0) << OpName(row.op);
  EXPECT_EQ(memory.held.load(), 0);
  // Per rank and op: the send buffer, the receive buffer before each repetition, and the two
  // gathers of times and wrong counts in; each repetition's result and the two gathers out.
  EXPECT_EQ(memory.in.load(), 2 * 3 * (1 + 3 + 2));
  EXPECT_EQ(memory.out.load(), 2 * 3 * (3 + 2));
}

}  // namespace
}  // namespace tierflow::real
