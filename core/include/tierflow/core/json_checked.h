// JSON text parsed at the door — where it is not valid JSON, the byte where
// the parser stopped; an object with a key twice refused (the parser would keep the last
// silently). What the schedule, trace-record and DeepSpeed-config readers parse with.
// JsonInteger reads a number as an integer of a given width, checked: every reader of integers
// from JSON goes through it (nlohmann's get<int>() casts 2e22 with undefined behaviour, wraps
// 2^64 - 1 to -1 and truncates 2.5 to 2, all silently).
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "tierflow/core/status.h"

namespace tierflow {

// InvalidArgument "<origin>: not valid JSON at byte N: <what the parser expected>",
// "<origin>: not valid JSON: number overflow parsing '1e99999'" or
// "<origin>: key 'k' appears twice in one object".
inline StatusOr<nlohmann::ordered_json> ParseJsonChecked(const std::string& text, const std::string& origin) {
  using Json = nlohmann::ordered_json;
  std::vector<std::vector<std::string>> keys;  // per open object: the keys so far
  std::string duplicate;
  const Json::parser_callback_t check = [&](int /*depth*/, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) keys.emplace_back();
    if (event == Json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    if (event == Json::parse_event_t::key && !keys.empty() && duplicate.empty()) {
      const std::string key = parsed.get<std::string>();
      for (const std::string& k : keys.back()) {
        if (k == key) duplicate = key;
      }
      keys.back().push_back(key);
    }
    return true;
  };
  Json root;
  try {
    root = Json::parse(text, check);
  } catch (const Json::parse_error& e) {
    std::string why = e.what();
    const size_t at = why.find("; ");  // "[json.exception.parse_error.101] parse error at line 1, column 2: syntax error ...; expected ..."
    why = at == std::string::npos ? "" : ": " + why.substr(at + 2, 160);
    return InvalidArgument(origin + ": not valid JSON at byte " + std::to_string(e.byte) + why);
  } catch (const Json::out_of_range& e) {  // a number past a double: "number overflow parsing '1e99999'"
    std::string why = e.what();
    const size_t at = why.find("] ");
    why = at == std::string::npos ? why : why.substr(at + 2);
    if (why.size() > 100) why = why.substr(0, 100) + "...";
    return InvalidArgument(origin + ": not valid JSON: " + why);
  }
  if (!duplicate.empty()) {
    return InvalidArgument(origin + ": key '" + duplicate.substr(0, 80) + "' appears twice in one object (the last would be used silently)");
  }
  return root;
}

// A JSON number as an integer of type T: an integer T holds, or a float with no fraction that T
// holds (1e6). InvalidArgument "<what> must be an integer from MIN to MAX, not VALUE" otherwise
// (VALUE as the file spells it, cut to 40 characters).
template <typename T, typename Json>
StatusOr<T> JsonInteger(const Json& v, std::string_view what) {
  static_assert(std::is_integral_v<T> && std::is_signed_v<T>, "JsonInteger reads signed integers");
  constexpr T lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
  auto refuse = [&] {
    std::string value = v.dump();
    if (value.size() > 40) value = value.substr(0, 40) + "...";
    return InvalidArgument(std::string(what) + " must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi) +
                           ", not " + value);
  };
  if (v.is_number_unsigned()) {
    const uint64_t u = v.template get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) return refuse();
    return static_cast<T>(u);
  }
  if (v.is_number_integer()) {
    const int64_t i = v.template get<int64_t>();
    if (i < static_cast<int64_t>(lo) || i > static_cast<int64_t>(hi)) return refuse();
    return static_cast<T>(i);
  }
  if (v.is_number_float()) {
    const double d = v.template get<double>();
    // lo = -2^k and 2^k are exact doubles: the integral doubles in [lo, 2^k) are those T holds.
    if (!std::isfinite(d) || d != std::floor(d) || d < static_cast<double>(lo) || d >= -static_cast<double>(lo)) {
      return refuse();
    }
    return static_cast<T>(d);
  }
  return refuse();
}

}  // namespace tierflow
