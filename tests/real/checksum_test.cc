// The checksums against their standards' test vectors: CRC-32C's check value (RFC 3720 B.4 and
// the CRC catalogue) and FIPS 180-4's SHA-256 examples, whole and split across calls.
#include "tierflow/real/checksum.h"

#include <gtest/gtest.h>

#include <string>

namespace tierflow::real {
namespace {

TEST(Crc32c, MatchesTheCheckValueAndExtendsAcrossCalls) {
  const std::string digits = "123456789";
  EXPECT_EQ(Crc32c(digits.data(), static_cast<int64_t>(digits.size())), 0xE3069283u);
  const uint32_t first = Crc32c(digits.data(), 4);
  EXPECT_EQ(Crc32c(digits.data() + 4, 5, first), 0xE3069283u);
  const std::string zeros(32, '\0');  // RFC 3720 B.4: 32 bytes of zeros
  EXPECT_EQ(Crc32c(zeros.data(), 32), 0x8A9136AAu);
  uint32_t parsed = 0;
  EXPECT_TRUE(ParseChecksum(FormatChecksum(0xE3069283u), &parsed));
  EXPECT_EQ(parsed, 0xE3069283u);
  EXPECT_FALSE(ParseChecksum("crc32c:xyz", &parsed));
}

TEST(Sha256, MatchesTheStandardVectors) {
  EXPECT_EQ(Sha256Hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(Sha256Hex(two_blocks.data(), two_blocks.size()), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

}  // namespace
}  // namespace tierflow::real
