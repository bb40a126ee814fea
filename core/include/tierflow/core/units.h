// Quantities with units, as written in scenario and hardware files and printed in reports.
//
// Every size, bandwidth, duration and rate in a tierflow input carries its unit in the text:
// "80 GiB", "6.8 GB/s", "2 us", "312 TFLOP/s". A bare number where a unit is required is an error
// that names the key and the accepted units. Decimal prefixes (k, M, G, T, P) are powers of 1000,
// binary prefixes (Ki, Mi, Gi, Ti) powers of 1024. Internally, sizes are int64 bytes, durations
// double seconds, bandwidths double bytes per second, compute rates double FLOP per second.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tierflow/core/status.h"

namespace tierflow {

// "4096", "4 KiB", "1.5 GB", "1e8 B". A bare number is bytes only when allow_bare is true.
StatusOr<int64_t> ParseBytes(std::string_view text, bool allow_bare = false);
// "25 GB/s", "6.8 GiB/s", "800 MB/s".
StatusOr<double> ParseBandwidth(std::string_view text);
// "2 us", "1.5 ms", "3 s", "10 ns".
StatusOr<double> ParseDuration(std::string_view text);
// "312 TFLOP/s", "1.2 PFLOP/s", "5e9 FLOP/s".
StatusOr<double> ParseFlopRate(std::string_view text);

// Human-readable forms used in tables: "68.98 GiB", "6.80 GB/s", "12.3 ms", "1.23 s".
std::string FormatBytes(double bytes);
std::string FormatBandwidth(double bytes_per_s);
std::string FormatDuration(double seconds);
std::string FormatCount(double count);  // "68.98 B", "8.03 M"

}  // namespace tierflow
