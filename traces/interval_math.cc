#include "interval_math.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <limits>
#include <map>
#include <numeric>

#include "tierflow/traces/summary.h"

namespace tierflow::traces::internal {

void IntervalUnion::Add(double start_s, double end_s) {
  if (open_ && start_s <= open_end_s_) {
    open_end_s_ = std::max(open_end_s_, end_s);
    return;
  }
  if (open_) {
    closed_length_s_ += open_end_s_ - open_start_s_;
    if (keep_ && open_end_s_ > open_start_s_) merged_.push_back({open_start_s_, open_end_s_});
  }
  open_ = true;
  open_start_s_ = start_s;
  open_end_s_ = end_s;
}

std::vector<Interval> IntervalUnion::Finish() {
  if (open_) {
    closed_length_s_ += open_end_s_ - open_start_s_;
    if (keep_ && open_end_s_ > open_start_s_) merged_.push_back({open_start_s_, open_end_s_});
    open_ = false;
  }
  return std::move(merged_);
}

double IntersectionLength(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  double total = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    double lo = std::max(a[i].start_s, b[j].start_s);
    double hi = std::min(a[i].end_s, b[j].end_s);
    if (hi > lo) total += hi - lo;
    if (a[i].end_s < b[j].end_s) ++i;
    else ++j;
  }
  return total;
}

std::vector<size_t> OrderByStart(const std::vector<TraceRecord>& records) {
  std::vector<size_t> order(records.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    const TraceRecord& a = records[x];
    const TraceRecord& b = records[y];
    if (a.start_s != b.start_s) return a.start_s < b.start_s;
    if (a.end_s != b.end_s) return a.end_s < b.end_s;
    return x < y;
  });
  return order;
}

std::vector<IterationBound> IterationBounds(const std::vector<TraceRecord>& records) {
  std::map<int64_t, IterationBound> by_iteration;
  for (const TraceRecord& r : records) {
    auto [it, inserted] = by_iteration.try_emplace(r.iteration);
    IterationBound& b = it->second;
    if (inserted) {
      b = {r.iteration, r.start_s, r.end_s, 0};
    } else {
      b.start_s = std::min(b.start_s, r.start_s);
      b.end_s = std::max(b.end_s, r.end_s);
    }
    ++b.records;
  }
  std::vector<IterationBound> out;
  out.reserve(by_iteration.size());
  for (auto& [k, v] : by_iteration) out.push_back(v);
  return out;
}

double SteadyIterationTime(const std::vector<IterationBound>& bounds) {
  std::vector<double> ends;
  ends.reserve(bounds.size());
  for (const IterationBound& b : bounds) ends.push_back(b.end_s);
  return traces::SteadyIterationTime(ends, bounds.empty() ? 0 : bounds[0].start_s);
}

double RelativeErrorOf(double reference, double value) {
  if (reference == 0) return value == 0 ? 0 : std::numeric_limits<double>::infinity();
  return (value - reference) / reference;
}

std::string DeviceOfResourceName(const std::string& resource) {
  size_t dot = resource.find('.');
  // A device of a cluster's node carries the node: "node2.gpu1.compute" -> "node2.gpu1".
  if (dot != std::string::npos && dot > 4 && resource.compare(0, 4, "node") == 0 &&
      std::all_of(resource.begin() + 4, resource.begin() + static_cast<std::ptrdiff_t>(dot), [](char c) { return c >= '0' && c <= '9'; })) {
    dot = resource.find('.', dot + 1);
  }
  return dot == std::string::npos ? resource : resource.substr(0, dot);
}

void AppendJsonString(std::string* out, const std::string& s) {
  out->push_back('"');
  for (char c : s) {
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out->append(fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c))));
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

void AppendJsonNumber(std::string* out, double v) {
  if (!std::isfinite(v)) {
    out->append("null");
    return;
  }
  fmt::format_to(std::back_inserter(*out), "{}", v);
}

}  // namespace tierflow::traces::internal
