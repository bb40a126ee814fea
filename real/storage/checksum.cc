#include "tierflow/real/checksum.h"

#include <cstdio>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace tierflow::real {
namespace {

struct Table {
  uint32_t t[256];
  Table() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
  }
};

uint32_t SoftCrc(const unsigned char* p, int64_t n, uint32_t crc) {
  static const Table table;
  for (int64_t i = 0; i < n; ++i) crc = table.t[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t HardCrc(const unsigned char* p, int64_t n, uint32_t crc) {
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}
bool HaveSse42() {
  static const bool have = __builtin_cpu_supports("sse4.2");
  return have;
}
#endif

}  // namespace

uint32_t Crc32c(const void* data, int64_t size_bytes, uint32_t crc) {
  auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  if (HaveSse42()) return ~HardCrc(p, size_bytes, crc);
#endif
  return ~SoftCrc(p, size_bytes, crc);
}

std::string FormatChecksum(uint32_t crc) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "crc32c:%08x", crc);
  return buf;
}

bool ParseChecksum(const std::string& text, uint32_t* crc) {
  if (text.size() != 15 || text.rfind("crc32c:", 0) != 0) return false;
  char* end = nullptr;
  unsigned long v = std::strtoul(text.c_str() + 7, &end, 16);
  if (end != text.c_str() + text.size()) return false;
  *crc = static_cast<uint32_t>(v);
  return true;
}

}  // namespace tierflow::real
