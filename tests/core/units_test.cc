#include "tierflow/core/units.h"

#include <gtest/gtest.h>

namespace tierflow {
namespace {

TEST(Units, ParsesSizesWithDecimalAndBinaryPrefixes) {
  EXPECT_EQ(ParseBytes("4096 B").value(), 4096);
  EXPECT_EQ(ParseBytes("4 KiB").value(), 4096);
  EXPECT_EQ(ParseBytes("1.5 GB").value(), 1500000000);
  EXPECT_EQ(ParseBytes("80 GiB").value(), int64_t{80} << 30);
  EXPECT_EQ(ParseBytes("1e8 B").value(), 100000000);
  EXPECT_EQ(ParseBytes("12", /*allow_bare=*/true).value(), 12);
}

TEST(Units, RejectsMissingWrongOrNegativeUnits) {
  auto bare = ParseBytes("4096");
  ASSERT_FALSE(bare.ok());
  EXPECT_NE(bare.status().message().find("has no unit"), std::string::npos);
  EXPECT_FALSE(ParseBytes("4 GB/s").ok());
  auto negative = ParseBytes("-1 MiB");
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("negative"), std::string::npos);
  EXPECT_FALSE(ParseBytes("lots").ok());
  EXPECT_FALSE(ParseBandwidth("25 GB").ok());
  EXPECT_FALSE(ParseDuration("2").ok());
  EXPECT_FALSE(ParseFlopRate("312 T").ok());
}

TEST(Units, ParsesRatesAndDurations) {
  EXPECT_DOUBLE_EQ(ParseBandwidth("25 GB/s").value(), 25e9);
  EXPECT_DOUBLE_EQ(ParseBandwidth("1 GiB/s").value(), 1073741824.0);
  EXPECT_DOUBLE_EQ(ParseDuration("2 us").value(), 2e-6);
  EXPECT_DOUBLE_EQ(ParseDuration("1.5 ms").value(), 1.5e-3);
  EXPECT_DOUBLE_EQ(ParseFlopRate("312 TFLOP/s").value(), 312e12);
}

TEST(Units, FormatsForTables) {
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBandwidth(6.8e9), "6.80 GB/s");
  EXPECT_EQ(FormatDuration(0.0123), "12.3 ms");
  EXPECT_EQ(FormatCount(68.98e9), "68.98 B");
  EXPECT_EQ(FormatCount(510.82), "510.82") << "no unit, no trailing space";
}

}  // namespace
}  // namespace tierflow
