// Checksums. CRC-32C (Castagnoli), the checksum of every checkpoint entry: the SSE4.2 instruction
// where the CPU has it, a table otherwise (same values). SHA-256, the digest of a run's final
// weights (`weights_sha256`). Thread safety: pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tierflow::real {

// Extends `crc` (0 for a fresh checksum) over `size_bytes` at `data`.
uint32_t Crc32c(const void* data, int64_t size_bytes, uint32_t crc = 0);
// "crc32c:0a1b2c3d"
std::string FormatChecksum(uint32_t crc);
// Parses FormatChecksum's output; false when malformed.
bool ParseChecksum(const std::string& text, uint32_t* crc);

// SHA-256 of `size` bytes at `data` (FIPS 180-4), lower-case hex.
std::string Sha256Hex(const void* data, size_t size);

}  // namespace tierflow::real
