// The UTF-8 check every text input passes at the door.
#include "tierflow/core/text.h"

#include <gtest/gtest.h>

namespace tierflow {
namespace {

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

}  // namespace
}  // namespace tierflow
