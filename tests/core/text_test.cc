// The UTF-8 check every text input passes at the door, and the one rule for every number.
#include "tierflow/core/text.h"

#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <string>

namespace tierflow {
namespace {

TEST(StrCat, JoinsStringsAndDecimalIntegersInOneString) {
  const std::string name = "layers.3.mlp";
  EXPECT_EQ(StrCat({"read.", name, ".f", int64_t{0}, ".r", 3}), "read.layers.3.mlp.f0.r3");
  EXPECT_EQ(StrCat({std::string_view("ab"), -12, "", uint64_t{18446744073709551615ull}}), "ab-1218446744073709551615");
  EXPECT_EQ(StrCat({int32_t{-2147483647 - 1}, int64_t{-9223372036854775807 - 1}}), "-2147483648-9223372036854775808");
  EXPECT_EQ(StrCat({}), "");
}

TEST(Utf8, WellFormedTextPasses) {
  EXPECT_TRUE(CheckUtf8("", "x").ok());
  EXPECT_TRUE(CheckUtf8("plain ascii", "x").ok());
  EXPECT_TRUE(CheckUtf8("\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "x").ok());  // été € and an emoji
  EXPECT_TRUE(CheckUtf8("\xf4\x8f\xbf\xbf", "x").ok());                                  // U+10FFFF
}

TEST(Utf8, EveryMalformedFormIsNamedWithItsOffset) {
  EXPECT_EQ(CheckUtf8("ab\xff", "f.yaml").message(), "f.yaml: byte 2 (0xFF) is not UTF-8");
  EXPECT_EQ(CheckUtf8("a\xc3", "x").message(), "x: byte 1 (0xC3) is not UTF-8");             // truncated
  EXPECT_EQ(CheckUtf8("\xc3(", "x").message(), "x: byte 0 (0xC3) is not UTF-8");             // bad continuation
  EXPECT_EQ(CheckUtf8("\xc0\xaf", "x").message(), "x: byte 0 (0xC0) is not UTF-8");          // overlong '/'
  EXPECT_EQ(CheckUtf8("\xe0\x80\xaf", "x").message(), "x: byte 0 (0xE0) is not UTF-8");      // overlong
  EXPECT_EQ(CheckUtf8("ok\xed\xa0\x80", "x").message(), "x: byte 2 (0xED) is not UTF-8");    // a surrogate
  EXPECT_EQ(CheckUtf8("\xf4\x90\x80\x80", "x").message(), "x: byte 0 (0xF4) is not UTF-8");  // above U+10FFFF
  EXPECT_EQ(CheckUtf8("\x80", "x").message(), "x: byte 0 (0x80) is not UTF-8");              // a lone continuation
}


TEST(Numbers, AnIntegerInItsRange) {
  EXPECT_EQ(*ParseInteger("42", "k", 1, 100), 42);
  EXPECT_EQ(*ParseInteger(" 1e2 ", "k", 1, 100), 100);
  EXPECT_EQ(*ParseInteger("2.0", "k", 1, 100), 2);
  EXPECT_EQ(*ParseInteger("-9223372036854775808", "k", INT64_MIN, INT64_MAX), INT64_MIN);
  EXPECT_EQ(*ParseInteger("9223372036854775807", "k", 0, INT64_MAX), INT64_MAX);
}

TEST(Numbers, EveryValuePastItsRangeNamesTheRange) {
  // The values of the hostile suite: 0, -1, 2^31, 2^63, 2^64, 1e308 and NaN against [1, 2^20].
  const std::map<std::string, std::string> want = {
      {"0", "k: '0' is below 1 (an integer from 1 to 1048576)"},
      {"-1", "k: '-1' is below 1 (an integer from 1 to 1048576)"},
      {"2147483648", "k: '2147483648' is above 1048576 (an integer from 1 to 1048576)"},
      {"9223372036854775808", "k: '9223372036854775808' is above 1048576 (an integer from 1 to 1048576)"},
      {"18446744073709551616", "k: '18446744073709551616' is above 1048576 (an integer from 1 to 1048576)"},
      {"-18446744073709551616", "k: '-18446744073709551616' is below 1 (an integer from 1 to 1048576)"},
      {"1e308", "k: '1e308' is above 1048576 (an integer from 1 to 1048576)"},
      {"-1e308", "k: '-1e308' is below 1 (an integer from 1 to 1048576)"},
      {"1e20", "k: '1e20' is above 1048576 (an integer from 1 to 1048576)"},
      {"nan", "k: 'nan' is not an integer (an integer from 1 to 1048576)"},
      {"inf", "k: 'inf' is above 1048576 (an integer from 1 to 1048576)"},
      {"1.5", "k: '1.5' is not an integer (an integer from 1 to 1048576)"},
      {"4 KiB", "k: '4 KiB' is not an integer (an integer from 1 to 1048576)"},
      {"", "k: '' is not an integer (an integer from 1 to 1048576)"},
  };
  for (const auto& [text, message] : want) {
    auto v = ParseInteger(text, "k", 1, 1 << 20);
    ASSERT_FALSE(v.ok()) << text;
    EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(v.status().message(), message);
  }
  EXPECT_EQ(ParseInteger("9223372036854775808", "k", 0, INT64_MAX).status().message(),
            "k: '9223372036854775808' is above 9223372036854775807 (an integer of at least 0)");
}

TEST(Numbers, ARealIsFiniteAndInItsRange) {
  EXPECT_EQ(*ParseReal("0.5", "f", 0, 1), 0.5);
  EXPECT_EQ(*ParseReal("1e-3", "f", 0, 1), 1e-3);
  EXPECT_EQ(ParseReal("nan", "f", 0, 1).status().message(), "f: 'nan' is not a number (a number from 0 to 1)");
  EXPECT_EQ(ParseReal("1e308", "f", 0, 1).status().message(), "f: '1e308' is above 1 (a number from 0 to 1)");
  EXPECT_EQ(ParseReal("-inf", "f", 0, 1).status().message(), "f: '-inf' is below 0 (a number from 0 to 1)");
  EXPECT_EQ(ParseReal("1e999", "f", 0, std::numeric_limits<double>::max()).status().message(),
            "f: '1e999' is above 1.7976931348623157e+308 (a number of at least 0)");
}

TEST(Numbers, AnErrorEchoesAFewDozenCharactersOfTheValue) {
  const std::string digits(100000, '9');
  auto v = ParseInteger(digits, "training.micro_batch_size", 1, 1 << 20);
  ASSERT_FALSE(v.ok());
  EXPECT_LT(v.status().message().size(), 200u);
  EXPECT_EQ(v.status().message(), "training.micro_batch_size: '" + std::string(40, '9') +
                                      "...' (100000 characters) is above 1048576 (an integer from 1 to 1048576)");
  EXPECT_EQ(Quoted("short"), "'short'");
  // A cut never splits a UTF-8 character: 39 ASCII bytes, then a two-byte one.
  EXPECT_EQ(Quoted(std::string(39, 'a') + "\xC3\xA9" + std::string(10, 'b')), "'" + std::string(39, 'a') + "...' (50 characters)");
}

}  // namespace
}  // namespace tierflow
