#include "tierflow/traces/summary.h"

#include <algorithm>
#include <set>
#include <unordered_map>

#include "interval_math.h"
#include "tierflow/traces/occupancy.h"

namespace tierflow::traces {
namespace {

using internal::Interval;
using internal::IntervalUnion;

// Per-resource accumulation while sweeping the records in start order.
struct ResourceState {
  ResourceSummary summary;
  IntervalUnion busy{/*keep=*/true};
  std::vector<Interval> merged;
  int32_t schedule_index = kNoIndex;
};

struct InstanceKeyHash {
  size_t operator()(const std::pair<int64_t, int32_t>& k) const {
    uint64_t h = static_cast<uint64_t>(k.first) * 0x9E3779B97F4A7C15ULL ^ static_cast<uint32_t>(k.second);
    return std::hash<uint64_t>()(h);
  }
};

void BuildCriticalPath(const std::vector<TraceRecord>& records, const Schedule& schedule,
                       const std::vector<int32_t>& resource_of, int32_t resource_count,
                       TraceSummary* summary) {
  CriticalPath& path = summary->critical_path;
  const size_t n = records.size();
  // Which schedule task each record is, and each (iteration, task) instance's record.
  std::vector<int32_t> task_of(n, kNoIndex);
  std::unordered_map<std::pair<int64_t, int32_t>, size_t, InstanceKeyHash> instance;
  instance.reserve(n);
  int64_t unmatched = 0, duplicates = 0;
  for (size_t i = 0; i < n; ++i) {
    task_of[i] = schedule.FindTask(records[i].task);
    if (task_of[i] == kNoIndex) {
      ++unmatched;
      continue;
    }
    if (!instance.emplace(std::make_pair(records[i].iteration, task_of[i]), i).second) ++duplicates;
  }
  if (unmatched > 0) {
    summary->notes.push_back(std::to_string(unmatched) +
                             " records name tasks the schedule lacks; they are left out of the "
                             "critical path and the pool occupancy");
  }
  if (duplicates > 0) {
    summary->notes.push_back(std::to_string(duplicates) +
                             " records repeat an (iteration, task) instance; the critical path "
                             "uses the first of each");
  }
  if (instance.empty()) {
    path.explanation = "no record names a task of the schedule";
    return;
  }
  // Per resource, its records by end time, for "the instance that ended last before t".
  std::vector<std::vector<std::pair<double, size_t>>> by_end(resource_count);
  for (size_t i = 0; i < n; ++i) {
    if (resource_of[i] != kNoIndex && task_of[i] != kNoIndex) {
      by_end[resource_of[i]].push_back({records[i].end_s, i});
    }
  }
  for (auto& v : by_end) std::sort(v.begin(), v.end());

  size_t cur = n;
  for (size_t i = 0; i < n; ++i) {
    if (task_of[i] == kNoIndex) continue;
    // The last to end; among ties the last to start (a closing barrier rather than its dep).
    if (cur == n || records[i].end_s > records[cur].end_s ||
        (records[i].end_s == records[cur].end_s && records[i].start_s >= records[cur].start_s)) {
      cur = i;
    }
  }
  auto find = [&](int64_t iteration, int32_t task) -> size_t {
    auto it = instance.find({iteration, task});
    return it == instance.end() ? n : it->second;
  };

  std::vector<char> visited(n, 0);
  std::vector<CriticalStep> reversed;
  while (true) {
    visited[cur] = 1;
    const TraceRecord& r = records[cur];
    const TaskSpec& t = schedule.tasks()[task_of[cur]];
    size_t best_dep = n;
    auto consider = [&](size_t d) {
      if (d != n && (best_dep == n || records[d].end_s > records[best_dep].end_s)) best_dep = d;
    };
    for (int32_t d : t.deps) consider(find(r.iteration, d));
    for (const CarriedDep& c : t.carried) consider(find(r.iteration - c.distance, c.task));
    size_t res_pred = n;
    if (resource_of[cur] != kNoIndex) {
      const auto& v = by_end[resource_of[cur]];
      auto it = std::upper_bound(v.begin(), v.end(), std::make_pair(r.start_s, n));
      while (it != v.begin()) {
        --it;
        if (it->second != cur) {
          res_pred = it->second;
          break;
        }
      }
    }
    CriticalStep step{r.iteration, r.task, r.op, r.resource, r.start_s, r.end_s,
                      CriticalReason::kFirst, 0};
    size_t next = n;
    if (best_dep != n && (res_pred == n || records[best_dep].end_s >= records[res_pred].end_s)) {
      step.reason = CriticalReason::kDep;
      next = best_dep;
    } else if (res_pred != n) {
      step.reason = CriticalReason::kResource;
      next = res_pred;
    }
    if (next != n && visited[next]) {
      // Only reachable through inconsistent timestamps (a dep ending after its successor
      // started, at equal times); stop rather than loop.
      summary->notes.push_back("critical path stopped at a repeated instance of task '" + r.task +
                               "' (inconsistent timestamps)");
      step.reason = CriticalReason::kFirst;
      next = n;
    }
    if (next != n) step.gap_s = r.start_s - records[next].end_s;
    reversed.push_back(std::move(step));
    if (next == n) break;
    cur = next;
  }
  path.steps.assign(std::make_move_iterator(reversed.rbegin()),
                    std::make_move_iterator(reversed.rend()));
  for (const CriticalStep& s : path.steps) {
    path.time_by_op_s[static_cast<int>(s.op)] += s.end_s - s.start_s;
    path.gap_s += s.gap_s;
  }
  path.length_s = path.steps.back().end_s - path.steps.front().start_s;
  path.available = true;
}

}  // namespace

std::string_view CriticalReasonName(CriticalReason reason) {
  switch (reason) {
    case CriticalReason::kFirst: return "first";
    case CriticalReason::kDep: return "dep";
    case CriticalReason::kResource: return "resource";
  }
  return "?";
}

SteadyRange SteadyIterations(size_t count) {
  if (count <= 1) return {0, count};
  return {1, count >= 3 ? count - 1 : count};
}

double SteadyIterationTime(const std::vector<double>& end_s, double first_start_s) {
  if (end_s.empty()) return 0;
  if (end_s.size() == 1) return end_s[0] - first_start_s;
  const SteadyRange r = SteadyIterations(end_s.size());
  return (end_s[r.end - 1] - end_s[r.first - 1]) / static_cast<double>(r.end - r.first);
}

TraceSummary Summarize(const std::vector<TraceRecord>& records, const Schedule* schedule) {
  TraceSummary summary;
  const size_t n = records.size();
  summary.records = static_cast<int64_t>(n);
  if (n == 0) {
    summary.notes.push_back("the trace has no records");
    summary.critical_path.explanation = "the trace has no records";
    return summary;
  }

  std::set<std::string> sources;
  summary.start_s = records[0].start_s;
  summary.end_s = records[0].end_s;
  for (const TraceRecord& r : records) {
    sources.insert(r.source);
    summary.start_s = std::min(summary.start_s, r.start_s);
    summary.end_s = std::max(summary.end_s, r.end_s);
  }
  summary.sources.assign(sources.begin(), sources.end());
  summary.span_s = summary.end_s - summary.start_s;
  if (sources.size() > 1) {
    summary.notes.push_back("records come from " + std::to_string(sources.size()) +
                            " sources; summarise one run at a time (select one source)");
  }

  // Resources: schedule order first, then the others by name.
  std::vector<ResourceState> resources;
  std::unordered_map<std::string, int32_t> resource_id;
  if (schedule) {
    for (const ResourceSpec& rs : schedule->resources()) {
      ResourceState st;
      st.summary.name = rs.name;
      st.summary.device = rs.device >= 0 ? schedule->devices()[rs.device].name : "";
      st.schedule_index = static_cast<int32_t>(resources.size());
      resource_id.emplace(rs.name, static_cast<int32_t>(resources.size()));
      resources.push_back(std::move(st));
    }
  }
  std::set<std::string> extra;
  for (const TraceRecord& r : records) {
    if (!r.resource.empty() && !resource_id.count(r.resource)) extra.insert(r.resource);
  }
  for (const std::string& name : extra) {
    ResourceState st;
    st.summary.name = name;
    st.summary.device = internal::DeviceOfResourceName(name);
    resource_id.emplace(name, static_cast<int32_t>(resources.size()));
    resources.push_back(std::move(st));
  }
  std::vector<int32_t> resource_of(n, kNoIndex);
  for (size_t i = 0; i < n; ++i) {
    const TraceRecord& r = records[i];
    if (r.resource.empty()) continue;
    int32_t id = resource_id.at(r.resource);
    resource_of[i] = id;
    ResourceSummary& rs = resources[id].summary;
    ++rs.records;
    rs.bytes += r.bytes;
    rs.request_s += r.duration_s();
    if (r.op == Op::kCompute) rs.is_compute = true;
  }

  // Iterations and their phases.
  std::vector<internal::IterationBound> bounds = internal::IterationBounds(records);
  std::unordered_map<int64_t, size_t> iteration_pos;
  summary.iterations.resize(bounds.size());
  for (size_t k = 0; k < bounds.size(); ++k) {
    IterationSummary& it = summary.iterations[k];
    it.iteration = bounds[k].iteration;
    it.records = bounds[k].records;
    it.start_s = bounds[k].start_s;
    it.end_s = bounds[k].end_s;
    it.time_s = it.end_s - it.start_s;
    it.period_s = k == 0 ? 0 : it.end_s - bounds[k - 1].end_s;
    iteration_pos.emplace(it.iteration, k);
  }
  summary.mean_iteration_s = internal::SteadyIterationTime(bounds);
  std::vector<IntervalUnion> phase_busy(bounds.size() * kPhaseCount, IntervalUnion(true));
  // Per iteration, rank 0's segments of forward and backward GPU work in time order (timer_s).
  struct Segment {
    Phase phase;
    double start_s, end_s;
  };
  std::vector<std::vector<Segment>> segments(bounds.size());

  // One sweep in start order feeds every union.
  IntervalUnion compute_busy(true), other_busy(true);
  for (size_t i : internal::OrderByStart(records)) {
    const TraceRecord& r = records[i];
    size_t k = iteration_pos.at(r.iteration);
    PhaseSpan& ph = summary.iterations[k].phases[static_cast<int>(r.phase)];
    if (!ph.present) {
      ph.present = true;
      ph.start_s = r.start_s;
      ph.end_s = r.end_s;
    } else {
      ph.end_s = std::max(ph.end_s, r.end_s);  // starts arrive in order
    }
    phase_busy[k * kPhaseCount + static_cast<int>(r.phase)].Add(r.start_s, r.end_s);
    if (r.rank <= 0 && (r.phase == Phase::kForward || r.phase == Phase::kBackward)) {
      std::vector<Segment>& segs = segments[k];
      const bool gradient_out = r.phase == Phase::kBackward && (r.op == Op::kReduceScatter || r.op == Op::kD2H || r.op == Op::kConvert);
      if (r.op == Op::kCompute && (segs.empty() || segs.back().phase != r.phase)) {
        segs.push_back({r.phase, r.start_s, r.end_s});
      } else if ((r.op == Op::kCompute || gradient_out) && !segs.empty() && segs.back().phase == r.phase) {
        segs.back().end_s = std::max(segs.back().end_s, r.end_s);
      }
    }
    if (resource_of[i] == kNoIndex) continue;
    ResourceState& st = resources[resource_of[i]];
    st.busy.Add(r.start_s, r.end_s);
    (st.summary.is_compute ? compute_busy : other_busy).Add(r.start_s, r.end_s);
  }
  for (size_t k = 0; k < bounds.size(); ++k) {
    IterationSummary& it = summary.iterations[k];
    // The timers: each segment from where the one before ended (the iteration's start for the
    // first) to its own end; the step from the last one's end to the iteration's end.
    std::array<std::vector<Interval>, kPhaseCount> windows;
    double at = it.start_s;
    for (const Segment& seg : segments[k]) {
      const double end = std::min(std::max(at, seg.end_s), it.end_s);
      it.timer_s[static_cast<int>(seg.phase)] += end - at;
      if (end > at) windows[static_cast<int>(seg.phase)].push_back({at, end});
      at = end;
    }
    it.timer_s[static_cast<int>(Phase::kStep)] += it.end_s - at;
    if (it.end_s > at) windows[static_cast<int>(Phase::kStep)].push_back({at, it.end_s});
    for (int p = 0; p < kPhaseCount; ++p) {
      PhaseSpan& ph = it.phases[p];
      ph.span_s = ph.end_s - ph.start_s;
      IntervalUnion& busy = phase_busy[k * kPhaseCount + p];
      ph.busy_s = busy.length_s();
      it.overlap_s[p] = std::max(0.0, ph.busy_s - internal::IntersectionLength(busy.Finish(), windows[p]));
    }
  }
  summary.compute_busy_s = compute_busy.length_s();
  std::vector<Interval> compute_merged = compute_busy.Finish();
  std::vector<Interval> other_merged = other_busy.Finish();
  summary.exposed_s = other_busy.length_s() - internal::IntersectionLength(other_merged, compute_merged);
  for (ResourceState& st : resources) {
    ResourceSummary& rs = st.summary;
    rs.busy_s = st.busy.length_s();
    st.merged = st.busy.Finish();
    rs.utilization = summary.span_s > 0 ? rs.busy_s / summary.span_s : 0;
    rs.exposed_s = rs.is_compute ? 0 : rs.busy_s - internal::IntersectionLength(st.merged, compute_merged);
    rs.bytes_per_s = rs.busy_s > 0 ? static_cast<double>(rs.bytes) / rs.busy_s : 0;
  }
  if (compute_merged.empty()) {
    summary.notes.push_back("no record has op compute, so every busy second counts as exposed");
  }
  for (ResourceState& st : resources) {
    // Schedule resources that never ran are listed too (records == 0): an idle queue is news.
    summary.resources.push_back(std::move(st.summary));
  }

  if (!schedule) {
    summary.critical_path.explanation =
        "no schedule given: the critical path needs the schedule's deps (pass --schedule)";
    return summary;
  }
  OccupancyResult occ = ReconstructPoolOccupancy(records, *schedule, /*keep_samples=*/false);
  for (const PoolOccupancy& po : occ.pools) {
    const PoolSpec& spec = schedule->pools()[po.pool];
    summary.pools.push_back({po.name, spec.device >= 0 ? schedule->devices()[spec.device].name : "",
                             po.capacity_bytes, po.persistent_bytes, po.peak_bytes, po.peak_time_s});
  }
  BuildCriticalPath(records, *schedule, resource_of, static_cast<int32_t>(resources.size()), &summary);
  return summary;
}

}  // namespace tierflow::traces
