// Private helpers of traces/: interval unions and iteration bounds shared by the summary, the
// comparison and the Chrome export, so that one definition of each metric exists.
//
// Thread safety: pure functions and plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tierflow/core/schedule.h"
#include "tierflow/core/trace_record.h"
#include "tierflow/traces/occupancy.h"

namespace tierflow::traces::internal {

struct Interval {
  double start_s = 0;
  double end_s = 0;
};

// Builds the union of intervals fed in non-decreasing order of start_s, as a sorted list of
// disjoint intervals. Zero-length intervals add no length. Linear in the number of Add calls.
class IntervalUnion {
 public:
  // Requires start_s >= the start_s of the previous call and end_s >= start_s.
  void Add(double start_s, double end_s);
  // Total length of the union so far.
  double length_s() const { return closed_length_s_ + (open_ ? open_end_s_ - open_start_s_ : 0); }
  // When `keep` is false no interval list is stored (only the length is tracked).
  explicit IntervalUnion(bool keep = true) : keep_(keep) {}
  // Closes the union and returns its disjoint intervals, sorted (empty when keep is false).
  std::vector<Interval> Finish();

 private:
  bool keep_;
  bool open_ = false;
  double open_start_s_ = 0, open_end_s_ = 0;
  double closed_length_s_ = 0;
  std::vector<Interval> merged_;
};

// Length of the intersection of two sorted lists of disjoint intervals. O(|a| + |b|).
double IntersectionLength(const std::vector<Interval>& a, const std::vector<Interval>& b);

// Record indices ordered by (start_s, end_s, index): the one sort every sweep builds on.
std::vector<size_t> OrderByStart(const std::vector<TraceRecord>& records);

struct IterationBound {
  int64_t iteration = 0;
  double start_s = 0;  // first start among the iteration's records
  double end_s = 0;    // last end among the iteration's records
  int64_t records = 0;
};
// One entry per iteration present, sorted by iteration number. O(n log I).
std::vector<IterationBound> IterationBounds(const std::vector<TraceRecord>& records);

// Steady-state mean iteration time over traces::SteadyIterations(bounds.size()): the mean period
// end(i) - end(i - 1) over those iterations; with one iteration, its time end - start; 0 with none.
double SteadyIterationTime(const std::vector<IterationBound>& bounds);

// (value - reference) / reference; 0 when both are 0; +infinity when only the reference is 0.
double RelativeErrorOf(double reference, double value);

// The device a resource belongs to when no schedule says: the part of its name before the
// first '.', or the whole name ("gpu0.compute" -> "gpu0", "dp" -> "dp"); a device of a
// cluster's node keeps its node ("node2.gpu1.compute" -> "node2.gpu1").
std::string DeviceOfResourceName(const std::string& resource);

// Appends `s` as a JSON string literal (quotes and escapes included).
void AppendJsonString(std::string* out, const std::string& s);
// Appends a JSON number; non-finite values become null.
void AppendJsonNumber(std::string* out, double v);

// ReconstructPoolOccupancy over records[i] for i in `subset` only (all records when null).
OccupancyResult ReconstructPoolOccupancyOf(const std::vector<TraceRecord>& records,
                                           const std::vector<size_t>* subset,
                                           const Schedule& schedule, bool keep_samples);

}  // namespace tierflow::traces::internal
