// Private to models/: reads the fields of one YAML map with unit-carrying values and key paths in
// every error ("hardware.node.nvme[0].read_bw: '7' has no unit (write e.g. '7 GB/s')").
//
// A FieldReader wraps one map node. Each accessor reads the key if present (leaving the output
// untouched when absent), records it as known, and returns an error naming the key path when the
// value is malformed. Finish() reports the first key of the map that no accessor asked for.
// yaml-cpp exceptions never escape: the accessors catch them and turn them into Statuses.
//
// Thread safety: one reader per thread.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tierflow/core/status.h"

namespace tierflow::models::internal {

class FieldReader {
 public:
  // `node` must outlive the reader. A null node reads as an empty map; a non-map is an error
  // reported by status().
  FieldReader(const YAML::Node& node, std::string path);

  const Status& status() const { return status_; }
  const std::string& path() const { return path_; }
  std::string KeyPath(const std::string& key) const;
  bool Has(const std::string& key);  // marks the key as known

  Status String(const std::string& key, std::string* out);
  // Numbers follow core's one rule (ParseInteger, ParseReal in tierflow/core/text.h): the error
  // names the key path and the range, and echoes at most a few dozen characters of the value.
  Status Int(const std::string& key, int64_t* out, int64_t lo = 0, int64_t hi = INT64_MAX);  // a count: no unit
  Status Int32(const std::string& key, int32_t* out, int32_t lo = 0, int32_t hi = INT32_MAX);
  Status Fraction(const std::string& key, double* out);  // a finite bare number (ratios, efficiencies)
  Status Bool(const std::string& key, bool* out);
  Status Bytes(const std::string& key, int64_t* out);       // "80 GiB"
  Status Bandwidth(const std::string& key, double* out);    // "25 GB/s"
  Status Duration(const std::string& key, double* out);     // "2 us"
  Status FlopRate(const std::string& key, double* out);     // "312 TFLOP/s"
  Status ElementRate(const std::string& key, double* out);  // "150 M elements/s"
  // The child node under `key` (null when absent) for nested maps and lists.
  YAML::Node Child(const std::string& key);

  // Error for the first key present in the map that no accessor above asked for.
  Status Finish() const;

 private:
  StatusOr<std::string> Scalar(const std::string& key, bool* present);
  const YAML::Node node_;  // const: operator[] on a const node never inserts keys
  std::string path_;
  std::vector<std::string> known_;
  Status status_;
};

// "7" (and "7.5", "1e9") — a number with nothing after it.
bool IsBareNumber(const std::string& text);
// Parses "150 M elements/s", "1.5e8 elements/s", "2 G elem/s" into elements per second.
StatusOr<double> ParseElementRate(const std::string& text);
// Text of a YAML scalar for error messages, or a description of the node kind.
std::string Describe(const YAML::Node& node);

}  // namespace tierflow::models::internal
