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
#include <unordered_set>
#include <vector>

#include "tierflow/core/status.h"
#include "tierflow/core/text.h"

namespace tierflow {

namespace internal {

// nlohmann's DOM builder behind a SAX handler that also records the first key given twice in
// one object. (A parser callback would do it too, but nlohmann's callback parser scans the whole
// enclosing array after each object ends: a schedule of 10^6 tasks took minutes to load.)
template <typename Json>
class KeyCheckingSax {
 public:
  using number_integer_t = typename Json::number_integer_t;
  using number_unsigned_t = typename Json::number_unsigned_t;
  using number_float_t = typename Json::number_float_t;
  using string_t = typename Json::string_t;
  using binary_t = typename Json::binary_t;

  explicit KeyCheckingSax(Json& root) : dom_(root, /*allow_exceptions=*/true) {}
  const std::string& duplicate() const { return duplicate_; }

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(number_float_t v, const string_t& s) { return dom_.number_float(v, s); }
  bool string(string_t& v) { return dom_.string(v); }
  bool binary(binary_t& v) { return dom_.binary(v); }
  bool start_object(std::size_t n) {
    keys_.emplace_back();
    return dom_.start_object(n);
  }
  bool key(string_t& k) {
    if (!keys_.back().Add(k) && duplicate_.empty()) duplicate_ = k;
    return dom_.key(k);
  }
  bool end_object() {
    keys_.pop_back();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) { return dom_.start_array(n); }
  bool end_array() { return dom_.end_array(); }
  template <class Exception>
  bool parse_error(std::size_t position, const std::string& token, const Exception& e) {
    return dom_.parse_error(position, token, e);  // throws
  }

 private:
  // An object's keys so far: a linear look while they are few (every object of a schedule has a
  // dozen at most), a hash set past that.
  struct Keys {
    std::vector<std::string> few;
    std::unordered_set<std::string> many;
    bool Add(const std::string& k) {  // false: seen before
      if (many.empty()) {
        for (const std::string& s : few) {
          if (s == k) return false;
        }
        few.push_back(k);
        if (few.size() > 32) many.insert(few.begin(), few.end());
        return true;
      }
      return many.insert(k).second;
    }
  };
  nlohmann::detail::json_sax_dom_parser<Json> dom_;
  std::vector<Keys> keys_;  // per open object
  std::string duplicate_;
};

}  // namespace internal

// InvalidArgument "<origin>: not valid JSON at byte N: <what the parser expected>",
// "<origin>: not valid JSON: number overflow parsing '1e99999'" or
// "<origin>: key 'k' appears twice in one object".
inline StatusOr<nlohmann::ordered_json> ParseJsonChecked(const std::string& text, const std::string& origin) {
  using Json = nlohmann::ordered_json;
  Json root;
  internal::KeyCheckingSax<Json> sax(root);
  std::string duplicate;
  try {
    Json::sax_parse(text, &sax);
    duplicate = sax.duplicate();
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
// holds (1e6). Anything else gets core's one rule for numbers (ParseInteger, core/text.h): "<what>:
// '2e+22' is above 9223372036854775807 (an integer from ...)", the value cut to 40 characters.
template <typename T, typename Json>
StatusOr<T> JsonInteger(const Json& v, std::string_view what) {
  static_assert(std::is_integral_v<T> && std::is_signed_v<T>, "JsonInteger reads signed integers");
  constexpr T lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
  // Schedules of 10^6 tasks read their integers here: what fits is returned without a text form.
  if (v.is_number_unsigned() && v.template get<uint64_t>() <= static_cast<uint64_t>(hi)) return static_cast<T>(v.template get<uint64_t>());
  if (v.is_number_integer() && !v.is_number_unsigned()) {
    const int64_t i = v.template get<int64_t>();
    if (i >= static_cast<int64_t>(lo) && i <= static_cast<int64_t>(hi)) return static_cast<T>(i);
  }
  TF_ASSIGN_OR_RETURN(const int64_t i, ParseInteger(v.dump(), what, lo, hi));
  return static_cast<T>(i);
}

}  // namespace tierflow
