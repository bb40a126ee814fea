// JSON text parsed at the door — where it is not valid JSON, the byte where
// the parser stopped; an object with a key twice refused (the parser would keep the last
// silently). What the schedule, trace-record and DeepSpeed-config readers parse with.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "tierflow/core/status.h"

namespace tierflow {

// InvalidArgument "<origin>: not valid JSON at byte N: <what the parser expected>" or
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
  }
  if (!duplicate.empty()) {
    return InvalidArgument(origin + ": key '" + duplicate.substr(0, 80) + "' appears twice in one object (the last would be used silently)");
  }
  return root;
}

}  // namespace tierflow
