// Chakra execution traces (traces/chakra.h) read back field by field with protobuf's classes for
// Chakra's schema: the quickstart (Llama-2-70B under zero-infinity on 4 x A100, one iteration
// simulated), every node against its task. The writer is compiled into this test (see
// CMakeLists.txt), and called through the entry its module exports.
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/delimited_message_util.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "chakra/chakra_et.pb.h"
#include "chakra_module.h"
#include "tierflow/core/files.h"
#include "tierflow/policies/policy.h"
#include "tierflow/sim/simulator.h"
#include "tierflow/traces/chakra.h"

extern "C" tierflow::traces::internal::WriteChakraFn tierflow_chakra_writer();

namespace tierflow::traces {
namespace {

namespace pb = ChakraProtoMsg;

StatusOr<std::vector<ChakraFile>> Write(const Schedule& s, const IterationTimes& times, const std::string& dir,
                                        const ChakraOptions& options) {
  return tierflow_chakra_writer()(s, times, dir, options);
}

struct ReadBack {
  pb::GlobalMetadata meta;
  std::vector<pb::Node> nodes;
};

ReadBack Read(const std::string& path) {
  auto text = ReadFileToString(path);
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  ReadBack r;
  google::protobuf::io::ArrayInputStream in(text->data(), static_cast<int>(text->size()));
  bool clean_eof = false;
  EXPECT_TRUE(google::protobuf::util::ParseDelimitedFromZeroCopyStream(&r.meta, &in, &clean_eof));
  while (true) {
    pb::Node n;
    if (!google::protobuf::util::ParseDelimitedFromZeroCopyStream(&n, &in, &clean_eof)) break;
    r.nodes.push_back(std::move(n));
  }
  EXPECT_TRUE(clean_eof) << path << ": a message was cut short";
  return r;
}

std::map<std::string, const pb::AttributeProto*> Attrs(const pb::Node& n) {
  std::map<std::string, const pb::AttributeProto*> m;
  for (const auto& a : n.attr()) m[a.name()] = &a;
  return m;
}

std::string TempDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/chakra_test_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

// Every node of every rank against its task: type, attributes, deps, times.
void CheckAgainstSchedule(const Schedule& s, const IterationTimes& times, const std::vector<ChakraFile>& files,
                          const ChakraOptions& options) {
  double t0 = times.start_s.at(0);
  for (double v : times.start_s) t0 = std::min(t0, v);
  ASSERT_EQ(static_cast<int32_t>(files.size()), ScheduleRanks(s));
  for (const ChakraFile& f : files) {
    SCOPED_TRACE(f.path);
    const ReadBack back = Read(f.path);
    EXPECT_EQ(back.meta.version(), "0.0.4");
    ASSERT_EQ(static_cast<int64_t>(back.nodes.size()), f.nodes);
    size_t expected_nodes = 0;
    for (const TaskSpec& t : s.tasks()) expected_nodes += (t.rank == f.rank || t.rank == kEveryRank) ? 1 : 0;
    EXPECT_EQ(back.nodes.size(), expected_nodes);
    for (const pb::Node& n : back.nodes) {
      ASSERT_LT(n.id(), s.tasks().size());
      const TaskSpec& t = s.tasks()[n.id()];
      SCOPED_TRACE(t.id);
      EXPECT_TRUE(t.rank == f.rank || t.rank == kEveryRank);
      EXPECT_EQ(n.name(), t.id);
      EXPECT_EQ(n.duration_micros(), static_cast<uint64_t>(std::llround((times.end_s[n.id()] - times.start_s[n.id()]) * 1e6)));
      EXPECT_EQ(n.start_time_micros(), static_cast<uint64_t>(std::llround((times.start_s[n.id()] - t0) * 1e6)));
      std::vector<uint64_t> deps;
      for (int32_t d : t.deps) {
        const int32_t r = s.tasks()[static_cast<size_t>(d)].rank;
        if (r == f.rank || r == kEveryRank) deps.push_back(static_cast<uint64_t>(d));
      }
      EXPECT_EQ(std::vector<uint64_t>(n.data_deps().begin(), n.data_deps().end()), deps);
      for (uint64_t c : n.ctrl_deps()) {  // the task before it on its resource, which runs one at a time
        EXPECT_EQ(s.tasks()[c].resource, t.resource);
        EXPECT_EQ(s.resources()[t.resource].concurrency, 1);
        EXPECT_LE(times.start_s[c], times.start_s[n.id()]);
      }
      const auto a = Attrs(n);
      ASSERT_TRUE(a.count("is_cpu_op"));
      ASSERT_TRUE(a.count("tierflow.op"));
      EXPECT_EQ(a.at("tierflow.op")->string_val(), OpName(t.op));
      EXPECT_DOUBLE_EQ(a.at("tierflow.duration_s")->double_val(), times.end_s[n.id()] - times.start_s[n.id()]);
      switch (t.op) {
        case Op::kCompute:
        case Op::kOptimizer:
        case Op::kConvert:
          EXPECT_EQ(n.type(), pb::COMP_NODE);
          EXPECT_FALSE(a.at("is_cpu_op")->bool_val());
          EXPECT_EQ(a.at("num_ops")->int64_val(), static_cast<int64_t>(t.flops));
          EXPECT_EQ(a.at("tensor_size")->uint64_val(), static_cast<uint64_t>(t.bytes));
          break;
        case Op::kH2D:
        case Op::kD2H:
          EXPECT_EQ(n.type(), t.op == Op::kH2D ? pb::MEM_LOAD_NODE : pb::MEM_STORE_NODE);
          EXPECT_EQ(a.at("tensor_size")->uint64_val(), static_cast<uint64_t>(t.bytes));
          break;
        case Op::kRead:
        case Op::kWrite:
          if (options.storage_as_memory) {
            EXPECT_EQ(n.type(), t.op == Op::kRead ? pb::MEM_LOAD_NODE : pb::MEM_STORE_NODE);
            EXPECT_FALSE(n.has_storage());
          } else {
            EXPECT_EQ(n.type(), pb::STORAGE_NODE);
            ASSERT_TRUE(n.has_storage());
            EXPECT_EQ(n.storage().level(), pb::STORAGE_LEVEL_DEVICE);
          }
          EXPECT_EQ(a.at("tensor_size")->uint64_val(), static_cast<uint64_t>(t.bytes));
          EXPECT_EQ(a.at("tierflow.storage_op")->string_val(), t.op == Op::kRead ? "read" : "write");
          EXPECT_EQ(a.at("tierflow.block_bytes")->int64_val(), IoBlockBytes(t));
          EXPECT_EQ(a.at("tierflow.queue_depth")->int64_val(), IoQueueDepth(t));
          EXPECT_EQ(a.at("tierflow.device")->string_val(), s.devices()[s.resources()[t.resource].device].name);
          break;
        case Op::kAllGather:
        case Op::kReduceScatter:
        case Op::kAllReduce:
          EXPECT_EQ(n.type(), pb::COMM_COLL_NODE);
          EXPECT_EQ(a.at("comm_type")->int64_val(), t.op == Op::kAllGather       ? pb::ALL_GATHER
                                                    : t.op == Op::kReduceScatter ? pb::REDUCE_SCATTER
                                                                                 : pb::ALL_REDUCE);
          EXPECT_EQ(a.at("comm_size")->int64_val(), t.bytes);
          break;
        case Op::kAlloc:
        case Op::kFree:
        case Op::kBarrier:
          EXPECT_EQ(n.type(), pb::COMP_NODE);
          EXPECT_TRUE(a.at("is_cpu_op")->bool_val());
          EXPECT_EQ(n.duration_micros(), 0u);
          break;
      }
    }
  }
}

TEST(Chakra, TheQuickstartReadsBackFieldByField) {
  auto scenario = policies::LoadScenarioFile(std::string(TIERFLOW_SOURCE_DIR) + "/scenarios/quickstart.yaml", {});
  ASSERT_TRUE(scenario.ok()) << scenario.status().ToString();
  auto schedule = policies::Plan(*scenario);
  ASSERT_TRUE(schedule.ok()) << schedule.status().ToString();
  IterationTimes times;
  times.start_s.assign(schedule->tasks().size(), -1);
  times.end_s.assign(schedule->tasks().size(), -1);
  sim::SimOptions options;
  options.iterations = 1;
  options.record_trace = false;
  options.on_complete = [&](int32_t task, int64_t, double start_s, double end_s) {
    times.start_s[static_cast<size_t>(task)] = start_s;
    times.end_s[static_cast<size_t>(task)] = end_s;
  };
  auto result = sim::Simulate(*schedule, scenario->hardware, options);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  for (const bool as_memory : {false, true}) {
    ChakraOptions chakra;
    chakra.storage_as_memory = as_memory;
    const std::string dir = TempDir(as_memory ? "qs_memory" : "qs");
    auto files = Write(*schedule, times, dir, chakra);
    ASSERT_TRUE(files.ok()) << files.status().ToString();
    EXPECT_EQ(files->size(), 4u);  // four data-parallel ranks
    CheckAgainstSchedule(*schedule, times, *files, chakra);
  }
}

TEST(Chakra, TimesMustCoverEveryTask) {
  Schedule s;
  TaskSpec t;
  t.id = "only";
  s.AddTask(t);
  IterationTimes times;
  auto files = Write(s, times, TempDir("short"), {});
  ASSERT_FALSE(files.ok());
  EXPECT_NE(files.status().message().find("times of 0 tasks for a schedule of 1"), std::string::npos);
}

}  // namespace
}  // namespace tierflow::traces
