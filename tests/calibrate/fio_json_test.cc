// fio's JSON output as disk samples: the committed file (written by fio 3.33: a sequential read,
// a random write and a 70/30 random mix, one after another) and malformed files, whose errors
// name the file and the field.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tierflow/calibrate/fio.h"

namespace tierflow::calibrate {
namespace {

const std::string kData = std::string(TIERFLOW_SOURCE_DIR) + "/tests/calibrate/data/";

TEST(FioJsonTest, ParsesTheCommittedFile) {
  auto s = ReadFioFile(kData + "fio_read_write_mix.json", 1);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->size(), 3u);
  const DiskSample& read = (*s)[0];
  EXPECT_EQ(read.kind, DiskSample::Kind::kRead);
  EXPECT_EQ(read.device, 1);
  EXPECT_EQ(read.block_bytes, 1 << 20);  // bs=1M: fio's k/M are powers of 1024
  EXPECT_EQ(read.queue_depth, 4);
  EXPECT_EQ(read.read_bytes_per_s, 903549070.0);
  EXPECT_EQ(read.write_bytes_per_s, 0.0);
  const DiskSample& write = (*s)[1];
  EXPECT_EQ(write.kind, DiskSample::Kind::kWrite);
  EXPECT_EQ(write.block_bytes, 64 << 10);
  EXPECT_EQ(write.queue_depth, 8);
  EXPECT_EQ(write.write_bytes_per_s, 1068479040.0);
  const DiskSample& mix = (*s)[2];
  EXPECT_EQ(mix.kind, DiskSample::Kind::kMixed);
  EXPECT_EQ(mix.block_bytes, 256 << 10);
  EXPECT_EQ(mix.queue_depth, 16);
  EXPECT_EQ(mix.read_bytes_per_s, 824928671.0);
  EXPECT_EQ(mix.write_bytes_per_s, 359564147.0);
  EXPECT_NE(mix.origin.find("randrw-256k-qd16"), std::string::npos) << mix.origin;
}

std::string Job(const std::string& options, const std::string& read, const std::string& write, int group = 0) {
  return R"({"jobname":"j)" + std::to_string(group) + R"(","groupid":)" + std::to_string(group) +
         R"(,"error":0,"job options":{)" + options + R"(},"read":)" + read + R"(,"write":)" + write + "}";
}

const std::string kRead = R"({"bw_bytes":1000000,"runtime":1000})";
const std::string kIdle = R"({"bw_bytes":0,"runtime":0})";

TEST(FioJsonTest, OptionsFallBackToGlobalsAndDefaults) {
  // No bs and no iodepth anywhere: fio's 4k and 1; numjobs multiplies the depth (group_reporting).
  const std::string text =
      R"({"global options":{"numjobs":"2"},"jobs":[)" + Job(R"("rw":"randread")", kRead, kIdle) + "]}";
  auto s = DiskSamplesFromFioJson(text, 0, "x.json");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)[0].block_bytes, 4096);
  EXPECT_EQ((*s)[0].queue_depth, 2);
}

void ExpectError(const std::string& text, const std::string& needle) {
  auto s = DiskSamplesFromFioJson(text, 0, "bad.json");
  ASSERT_FALSE(s.ok()) << "accepted: " << text;
  EXPECT_NE(s.status().message().find("fio file 'bad.json'"), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find(needle), std::string::npos) << s.status().message();
}

TEST(FioJsonTest, MalformedInputNamesTheFileAndField) {
  ExpectError("{not json", "not valid JSON");
  ExpectError(R"({"fio version":"x"})", "jobs: missing");
  ExpectError(R"({"jobs":[]})", "jobs: empty");
  ExpectError(R"({"jobs":[)" + Job(R"("rw":"read","bs":"1M")", R"({"runtime":1000})", kIdle) + "]}",
              "jobs[0] ('j0').read.bw_bytes: missing");
  ExpectError(R"({"jobs":[)" + Job(R"("rw":"read","bs":"1M")", kIdle, kIdle) + "]}", "must be positive");
  ExpectError(R"({"jobs":[)" + Job(R"("rw":"trim")", kRead, kIdle) + "]}",
              "'trim' is not a read, write or mixed workload");
  ExpectError(R"({"jobs":[)" + Job(R"("rw":"read","bs":"lots")", kRead, kIdle) + "]}", "job options.bs: 'lots'");
  ExpectError(R"({"jobs":[)" + Job(R"("rw":"read","iodepth":"-3")", kRead, kIdle) + "]}", "job options.iodepth");
  // Two jobs of one group ran at the same time: neither is one stream's steady state.
  ExpectError(R"({"jobs":[)" + Job(R"("rw":"read")", kRead, kIdle) + "," + Job(R"("rw":"read")", kRead, kIdle) + "]}",
              "share group 0");
}

TEST(FioJsonTest, MalformedFileOnDiskNamesThePath) {
  const std::string path = std::string(TIERFLOW_BINARY_DIR) + "/tests/calibrate/malformed_fio.json";
  {
    std::ofstream f(path);
    f << R"({"jobs":[{"jobname":"x","job options":{"rw":"write"},"write":{"runtime":1000}}]})";
  }
  auto s = ReadFioFile(path, 0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find(path), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find("write.bw_bytes"), std::string::npos) << s.status().message();
  auto missing = ReadFioFile(path + ".absent", 0);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("cannot be opened"), std::string::npos);
}

}  // namespace
}  // namespace tierflow::calibrate
