#include "tierflow/core/trace_record.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>

#include "tierflow/core/json_checked.h"

namespace tierflow {
namespace {

TEST(TraceRecord, RoundTripsThroughJsonLines) {
  TraceRecord a;
  a.iteration = 3;
  a.task = "fwd.read.L7.r0";
  a.op = Op::kRead;
  a.resource = "nvme0.read";
  a.layer = 7;
  a.phase = Phase::kForward;
  a.bytes = 1 << 20;
  a.flops = 0;
  a.start_s = 0.125;
  a.end_s = 0.3;
  a.source = "sim";
  a.block_bytes = 1 << 20;
  a.queue_depth = 8;
  TraceRecord b = a;
  b.task = "fwd.L7.r0";
  b.op = Op::kCompute;
  b.flops = 1.5e12;
  b.block_bytes = 0;
  b.queue_depth = 0;
  b.tasks = 9;  // a compute probe's layer sample
  b.device_start_s = 0.2;  // its work's span on the GPU
  b.device_end_s = 0.29;
  b.rank = 1;  // a record of rank 1 of several
  TraceRecord c = a;
  c.task = "d2h.grad.L7.b0.r0";
  c.op = Op::kD2H;
  c.block_bytes = 0;
  c.queue_depth = 0;
  c.narrows = true;  // fp32 gradients cast to bf16 on the way
  auto path = (std::filesystem::temp_directory_path() / "tierflow_trace_record_test.jsonl").string();
  ASSERT_TRUE(WriteTraceFile(path, {a, b, c}).ok());
  auto back = ReadTraceFile(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->size(), 3u);
  EXPECT_EQ((*back)[0], a);
  EXPECT_EQ((*back)[1], b);
  EXPECT_EQ((*back)[2], c);
  EXPECT_EQ(TraceRecordToJson(a).find("narrows"), std::string::npos);
  EXPECT_NE(TraceRecordToJson(c).find(R"("narrows":true)"), std::string::npos);
  std::filesystem::remove(path);
  // Optional keys are written only when set: a record without a GPU-side span has no such keys.
  EXPECT_EQ(TraceRecordToJson(a).find("device_"), std::string::npos);
  EXPECT_EQ(TraceRecordToJson(a).find("rank"), std::string::npos);  // no rank: not written
  EXPECT_NE(TraceRecordToJson(b).find(R"("rank":1)"), std::string::npos);
  std::string negative = TraceRecordToJson(b);
  negative.replace(negative.find(R"("rank":1)"), 8, R"("rank":-1)");
  EXPECT_FALSE(TraceRecordFromJson(negative).ok());
  EXPECT_NE(TraceRecordToJson(b).find(R"("device_start_s":0.2,"device_end_s":0.29)"), std::string::npos)
      << TraceRecordToJson(b);
}

// A d2h whose tensors are bf16 gradients narrows the device's fp32 ones on the way: sim's and
// real's records of it say so (D2HNarrows), those of any other task do not.
TEST(TraceRecord, ATaskRecordSaysWhetherItsD2HNarrows) {
  Schedule s;
  const int32_t gpu = s.AddDevice({"gpu0", DeviceKind::kGpu});
  const int32_t host = s.AddDevice({"host", DeviceKind::kHost});
  const int32_t d2h = s.AddResource({"gpu0.d2h", gpu, 1});
  const int32_t h2d = s.AddResource({"gpu0.h2d", gpu, 1});
  const int32_t g16 = s.AddTensor({"g16", StateKind::kGrad16, "bf16", {1024}, 0, host, 0, 2048, 0});
  const int32_t g32 = s.AddTensor({"g32", StateKind::kGrad, "fp32", {1024}, 0, host, 4096, 4096, 0});
  const int32_t p16 = s.AddTensor({"p16", StateKind::kParam16, "bf16", {1024}, 0, host, 8192, 2048, 0});
  const auto task = [&](const std::string& id, Op op, int32_t resource, int32_t tensor) {
    TaskSpec t;
    t.id = id;
    t.op = op;
    t.resource = resource;
    t.bytes = 2048;
    t.tensors = {tensor};
    return s.AddTask(std::move(t));
  };
  const int32_t narrowing = task("narrowing", Op::kD2H, d2h, g16);
  const int32_t plain = task("plain", Op::kD2H, d2h, g32);
  const int32_t up = task("up", Op::kH2D, h2d, p16);
  EXPECT_TRUE(TaskRecord(s, narrowing, 0, 0, 1, "sim", 0).narrows);
  EXPECT_FALSE(TaskRecord(s, plain, 0, 0, 1, "sim", 0).narrows);
  EXPECT_FALSE(TaskRecord(s, up, 0, 0, 1, "real", 0).narrows);
}

// A record twice would count its task twice in every sum; a file of no records summarises nothing.
TEST(TraceRecord, RepeatedRecordsAndEmptyFilesAreRefused) {
  TraceRecord a;
  a.iteration = 1;
  a.task = "read.L1";
  a.op = Op::kRead;
  a.resource = "nvme0.read";
  a.start_s = 1;
  a.end_s = 2;
  a.source = "real";
  TraceRecord later = a;
  later.iteration = 2;  // the same task in the next iteration is another record
  const auto path = (std::filesystem::temp_directory_path() / "tierflow_trace_record_repeat.jsonl").string();
  ASSERT_TRUE(WriteTraceFile(path, {a, later, a}).ok());
  auto back = ReadTraceFile(path);
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(back.status().message().find("line 3: repeats the record of line 1 (task 'read.L1', iteration 1)"), std::string::npos)
      << back.status().ToString();
  ASSERT_TRUE(WriteTraceFile(path, {a, later}).ok());
  EXPECT_TRUE(ReadTraceFile(path).ok());
  ASSERT_TRUE(WriteTraceFile(path, {}).ok());
  back = ReadTraceFile(path);
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("holds no records"), std::string::npos) << back.status().ToString();
  std::filesystem::remove(path);
}

TEST(TraceRecord, BadLinesAreRejectedWithTheReason) {
  EXPECT_EQ(TraceRecordFromJson("{").status().message(), "trace record: not valid JSON at byte 2: expected string literal");
  EXPECT_EQ(TraceRecordFromJson(R"({"task":"a","task":"b"})").status().message(),
            "trace record: key 'task' appears twice in one object (the last would be used silently)");
  // What a summary would misread, and what every record has.
  EXPECT_EQ(TraceRecordFromJson(R"({"iteration":-1,"task":"a","op":"read","start_s":0,"end_s":1})").status().message(), "iteration is negative");
  EXPECT_EQ(TraceRecordFromJson(R"({"iteration":0,"task":"a","op":"read","start_s":0,"end_s":1,"flops":-5})").status().message(),
            "flops must be finite and >= 0");
  EXPECT_EQ(TraceRecordFromJson(R"({"iteration":0,"task":"a","start_s":0,"end_s":1})").status().message(), "missing key 'op'");
  EXPECT_TRUE(TraceRecordFromJson(R"({"iteration":0,"task":"a","op":"read","start_s":0,"end_s":1})").ok());
  auto op = TraceRecordFromJson(R"({"op":"teleport"})");
  ASSERT_FALSE(op.ok());
  EXPECT_NE(op.status().message().find("teleport"), std::string::npos);
  auto key = TraceRecordFromJson(R"({"colour":"red"})");
  ASSERT_FALSE(key.ok());
  EXPECT_NE(key.status().message().find("colour"), std::string::npos);
  EXPECT_FALSE(TraceRecordFromJson(R"({"start_s":2,"end_s":1})").ok());
  EXPECT_FALSE(TraceRecordFromJson(R"({"bytes":"many"})").ok());
  auto tasks = TraceRecordFromJson(R"({"tasks":-1})");
  ASSERT_FALSE(tasks.ok());
  EXPECT_NE(tasks.status().message().find("tasks"), std::string::npos);
  auto half = TraceRecordFromJson(R"({"device_start_s":1})");
  ASSERT_FALSE(half.ok());
  EXPECT_NE(half.status().message().find("device_start_s and device_end_s go together"), std::string::npos);
  auto backwards = TraceRecordFromJson(R"({"device_start_s":2,"device_end_s":1})");
  ASSERT_FALSE(backwards.ok());
  EXPECT_NE(backwards.status().message().find("device_end_s is before device_start_s"), std::string::npos);
}

// Counts go through JsonInteger: a number past the field's width, a fraction or a non-number is
// refused with the field, the range and the value as written, never cast (2e22 into an int64 is
// undefined behaviour; 2^64 - 1 would wrap to -1).
TEST(TraceRecord, CountsOutOfTheirWidthAreRefusedNotCast) {
  EXPECT_EQ(TraceRecordFromJson(R"({"bytes":2e22})").status().message(),
            "bytes: '2e+22' is above 9223372036854775807 (an integer from -9223372036854775808 to 9223372036854775807)");
  EXPECT_EQ(TraceRecordFromJson(R"({"iteration":18446744073709551615})").status().message(),
            "iteration: '18446744073709551615' is above 9223372036854775807 (an integer from -9223372036854775808 to 9223372036854775807)");
  EXPECT_EQ(TraceRecordFromJson(R"({"threads":2147483648})").status().message(),
            "threads: '2147483648' is above 2147483647 (an integer from -2147483648 to 2147483647)");
  EXPECT_EQ(TraceRecordFromJson(R"({"layer":1.5})").status().message(), "layer: '1.5' is not an integer (an integer from -2147483648 to 2147483647)");
  EXPECT_EQ(TraceRecordFromJson(R"({"bytes":1e99999})").status().message(), "trace record: not valid JSON: number overflow parsing '1e99999'");
  auto written_as_float = TraceRecordFromJson(R"({"iteration":0,"task":"a","op":"read","start_s":0,"end_s":1,"bytes":1e6})");
  ASSERT_TRUE(written_as_float.ok()) << written_as_float.status().ToString();
  EXPECT_EQ(written_as_float->bytes, 1000000);
}

TEST(JsonInteger, TakesExactlyTheIntegersTheTypeHolds) {
  using Json = nlohmann::ordered_json;
  EXPECT_EQ(*JsonInteger<int64_t>(Json(-9223372036854775807LL - 1), "n"), INT64_MIN);
  EXPECT_EQ(*JsonInteger<int64_t>(Json(-9.223372036854775808e18), "n"), INT64_MIN);  // -2^63 as a float: exact
  EXPECT_FALSE(JsonInteger<int64_t>(Json(9.223372036854775808e18), "n").ok());       // 2^63: one past the end
  EXPECT_EQ(*JsonInteger<int32_t>(Json(2147483647), "n"), 2147483647);
  EXPECT_FALSE(JsonInteger<int32_t>(Json(2147483648.0), "n").ok());
  EXPECT_FALSE(JsonInteger<int32_t>(Json(-2147483649LL), "n").ok());
  EXPECT_FALSE(JsonInteger<int64_t>(Json(std::nan("")), "n").ok());
  EXPECT_FALSE(JsonInteger<int64_t>(Json("12"), "n").ok());
  EXPECT_FALSE(JsonInteger<int64_t>(Json(true), "n").ok());
  EXPECT_EQ(JsonInteger<int64_t>(Json::parse(std::string(300, '9')), "count").status().message(),
            "count: '1e+300' is above 9223372036854775807 (an integer from -9223372036854775808 to 9223372036854775807)");
}

}  // namespace
}  // namespace tierflow
