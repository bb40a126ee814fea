#include "yaml_fields.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "tierflow/core/text.h"
#include "tierflow/core/units.h"

namespace tierflow::models::internal {
namespace {

std::string Trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}


}  // namespace

bool IsBareNumber(const std::string& text) {
  std::string s = Trim(text);
  if (s.empty()) return false;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return end != s.c_str() && *end == '\0';
}

StatusOr<double> ParseElementRate(const std::string& text) {
  std::string s = Trim(text);
  char* end = nullptr;
  double number = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || !std::isfinite(number)) {
    return InvalidArgument(Quoted(s) + " is not an element rate (write e.g. '150 M elements/s')");
  }
  std::string unit;
  for (const char* p = end; *p; ++p) {
    if (!std::isspace(static_cast<unsigned char>(*p))) unit += *p;
  }
  double mult = 1.0;
  if (!unit.empty() && (unit[0] == 'k' || unit[0] == 'K' || unit[0] == 'M' || unit[0] == 'G') &&
      unit.size() > 1 && unit[1] == 'e') {
    // "Melements/s" or "M elements/s" (spaces already removed).
    mult = unit[0] == 'G' ? 1e9 : unit[0] == 'M' ? 1e6 : 1e3;
    unit.erase(0, 1);
  }
  if (unit != "elements/s" && unit != "elem/s") {
    return InvalidArgument("element rate " + Quoted(s) + " needs a unit (accepted: elements/s, k elements/s, M elements/s, "
                           "G elements/s; 'elem/s' also accepted)");
  }
  if (number <= 0) return InvalidArgument("element rate " + Quoted(s) + " must be positive");
  return number * mult;
}

std::string Describe(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "null";
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a map";
  return "an unknown node";
}

FieldReader::FieldReader(const YAML::Node& node, std::string path)
    : node_(node), path_(std::move(path)) {
  if (node_.IsDefined() && !node_.IsNull() && !node_.IsMap()) {
    status_ = InvalidArgument(path_ + ": expected a map of keys, got " + Describe(node_));
  }
}

std::string FieldReader::KeyPath(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

bool FieldReader::Has(const std::string& key) {
  if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.push_back(key);
  if (!status_.ok() || !node_.IsDefined() || node_.IsNull()) return false;
  try {
    YAML::Node child = node_[key];
    return child.IsDefined();
  } catch (const YAML::Exception&) {
    return false;
  }
}

YAML::Node FieldReader::Child(const std::string& key) {
  if (!Has(key)) return YAML::Node();
  try {
    return node_[key];
  } catch (const YAML::Exception&) {
    return YAML::Node();
  }
}

StatusOr<std::string> FieldReader::Scalar(const std::string& key, bool* present) {
  *present = false;
  if (!status_.ok()) return status_;
  if (!Has(key)) return std::string();
  *present = true;
  try {
    YAML::Node child = node_[key];
    if (!child.IsScalar()) {
      return InvalidArgument(KeyPath(key) + ": expected a value, got " + Describe(child));
    }
    return child.Scalar();
  } catch (const YAML::Exception& e) {
    return InvalidArgument(KeyPath(key) + ": " + e.what());
  }
}

Status FieldReader::String(const std::string& key, std::string* out) {
  bool present = false;
  TF_ASSIGN_OR_RETURN(std::string s, Scalar(key, &present));
  if (present) *out = s;
  return Status::Ok();
}

Status FieldReader::Int(const std::string& key, int64_t* out, int64_t lo, int64_t hi) {
  bool present = false;
  TF_ASSIGN_OR_RETURN(std::string s, Scalar(key, &present));
  if (!present) return Status::Ok();
  TF_ASSIGN_OR_RETURN(*out, ParseInteger(s, KeyPath(key), lo, hi));
  return Status::Ok();
}

Status FieldReader::Int32(const std::string& key, int32_t* out, int32_t lo, int32_t hi) {
  int64_t v = *out;
  TF_RETURN_IF_ERROR(Int(key, &v, lo, hi));
  *out = static_cast<int32_t>(v);
  return Status::Ok();
}

Status FieldReader::Fraction(const std::string& key, double* out) {
  bool present = false;
  TF_ASSIGN_OR_RETURN(std::string s, Scalar(key, &present));
  if (!present) return Status::Ok();
  if (!IsBareNumber(s)) {
    return InvalidArgument(KeyPath(key) + ": " + Quoted(s) + " is not a number (a plain ratio, no unit)");
  }
  TF_ASSIGN_OR_RETURN(*out, ParseReal(s, KeyPath(key), std::numeric_limits<double>::lowest(), std::numeric_limits<double>::max()));
  return Status::Ok();
}

Status FieldReader::Bool(const std::string& key, bool* out) {
  bool present = false;
  TF_ASSIGN_OR_RETURN(std::string s, Scalar(key, &present));
  if (!present) return Status::Ok();
  std::string t = Trim(s);
  if (t == "true" || t == "yes" || t == "on") {
    *out = true;
  } else if (t == "false" || t == "no" || t == "off") {
    *out = false;
  } else {
    return InvalidArgument(KeyPath(key) + ": " + Quoted(s) + " is not true or false");
  }
  return Status::Ok();
}

namespace {
template <typename T, typename Parser>
Status ReadQuantity(FieldReader* reader, const std::string& key, const std::string& example_unit,
                    const StatusOr<std::string>& scalar, bool present, Parser parse, T* out) {
  if (!scalar.ok()) return scalar.status();
  if (!present) return Status::Ok();
  const std::string& s = scalar.value();
  if (IsBareNumber(s)) {
    std::string t = Trim(s);
    return InvalidArgument(reader->KeyPath(key) + ": " + Quoted(t) + " has no unit (write e.g. '" + (t.size() <= 40 ? t : "80") + " " +
                           example_unit + "')");
  }
  auto v = parse(s);
  if (!v.ok()) return InvalidArgument(reader->KeyPath(key) + ": " + v.status().message());
  *out = v.value();
  return Status::Ok();
}
}  // namespace

Status FieldReader::Bytes(const std::string& key, int64_t* out) {
  bool present = false;
  auto s = Scalar(key, &present);
  return ReadQuantity(
      this, key, "GiB", s, present, [](const std::string& t) { return ParseBytes(t); }, out);
}

Status FieldReader::Bandwidth(const std::string& key, double* out) {
  bool present = false;
  auto s = Scalar(key, &present);
  return ReadQuantity(
      this, key, "GB/s", s, present, [](const std::string& t) { return ParseBandwidth(t); }, out);
}

Status FieldReader::Duration(const std::string& key, double* out) {
  bool present = false;
  auto s = Scalar(key, &present);
  return ReadQuantity(
      this, key, "us", s, present, [](const std::string& t) { return ParseDuration(t); }, out);
}

Status FieldReader::FlopRate(const std::string& key, double* out) {
  bool present = false;
  auto s = Scalar(key, &present);
  return ReadQuantity(
      this, key, "TFLOP/s", s, present, [](const std::string& t) { return ParseFlopRate(t); }, out);
}

Status FieldReader::ElementRate(const std::string& key, double* out) {
  bool present = false;
  auto s = Scalar(key, &present);
  return ReadQuantity(
      this, key, "M elements/s", s, present,
      [](const std::string& t) { return ParseElementRate(t); }, out);
}

Status FieldReader::Finish() const {
  if (!status_.ok()) return status_;
  if (!node_.IsDefined() || node_.IsNull()) return Status::Ok();
  try {
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      std::string key = it->first.Scalar();
      if (std::find(known_.begin(), known_.end(), key) == known_.end()) {
        return InvalidArgument(KeyPath(key) + ": unknown key (known here: " + JoinNames(known_) + ")");
      }
    }
  } catch (const YAML::Exception& e) {
    return InvalidArgument(path_ + ": " + e.what());
  }
  return Status::Ok();
}

}  // namespace tierflow::models::internal
