#include "tierflow/traces/occupancy.h"

#include <algorithm>

#include "interval_math.h"

namespace tierflow::traces {
namespace {
struct Event {
  double time_s;
  int32_t pool;
  int64_t delta_bytes;
};
}  // namespace

namespace internal {
OccupancyResult ReconstructPoolOccupancyOf(const std::vector<TraceRecord>& records,
                                           const std::vector<size_t>* subset,
                                           const Schedule& schedule, bool keep_samples) {
  OccupancyResult result;
  const auto& pools = schedule.pools();
  const auto& buffers = schedule.buffers();
  result.pools.resize(pools.size());
  for (size_t p = 0; p < pools.size(); ++p) {
    result.pools[p].pool = static_cast<int32_t>(p);
    result.pools[p].name = pools[p].name;
    result.pools[p].capacity_bytes = pools[p].capacity_bytes;
  }
  for (const BufferSpec& b : buffers) {
    if (b.persistent && b.pool >= 0) result.pools[b.pool].persistent_bytes += b.size_bytes;
  }

  double t0 = 0;
  std::vector<Event> events;
  const size_t count = subset ? subset->size() : records.size();
  for (size_t k = 0; k < count; ++k) {
    const TraceRecord& r = records[subset ? (*subset)[k] : k];
    int32_t task = schedule.FindTask(r.task);
    if (task == kNoIndex) {
      ++result.unmatched_records;
      continue;
    }
    const TaskSpec& t = schedule.tasks()[task];
    t0 = std::min(t0, r.start_s);
    for (int32_t b : t.allocs) events.push_back({r.start_s, buffers[b].pool, buffers[b].size_bytes});
    for (int32_t b : t.frees) events.push_back({r.end_s, buffers[b].pool, -buffers[b].size_bytes});
  }
  std::stable_sort(events.begin(), events.end(),
                   [](const Event& a, const Event& b) { return a.time_s < b.time_s; });

  std::vector<int64_t> level(pools.size());
  for (size_t p = 0; p < pools.size(); ++p) {
    PoolOccupancy& po = result.pools[p];
    level[p] = po.persistent_bytes;
    po.peak_bytes = po.persistent_bytes;
    po.peak_time_s = t0;
    if (keep_samples) po.samples.push_back({t0, po.persistent_bytes});
  }
  std::vector<char> touched(pools.size(), 0);
  std::vector<int32_t> touched_list;
  for (size_t i = 0; i < events.size();) {
    const double t = events[i].time_s;
    for (; i < events.size() && events[i].time_s == t; ++i) {
      int32_t p = events[i].pool;
      level[p] += events[i].delta_bytes;
      if (!touched[p]) {
        touched[p] = 1;
        touched_list.push_back(p);
      }
    }
    for (int32_t p : touched_list) {
      touched[p] = 0;
      PoolOccupancy& po = result.pools[p];
      if (level[p] > po.peak_bytes) {
        po.peak_bytes = level[p];
        po.peak_time_s = t;
      }
      if (keep_samples) {
        if (!po.samples.empty() && po.samples.back().time_s == t) po.samples.back().bytes = level[p];
        else po.samples.push_back({t, level[p]});
      }
    }
    touched_list.clear();
  }
  return result;
}
}  // namespace internal

OccupancyResult ReconstructPoolOccupancy(const std::vector<TraceRecord>& records,
                                         const Schedule& schedule, bool keep_samples) {
  return internal::ReconstructPoolOccupancyOf(records, nullptr, schedule, keep_samples);
}

}  // namespace tierflow::traces
