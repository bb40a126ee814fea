#include "tierflow/traces/chrome_trace.h"

#include "tierflow/core/files.h"

#include <cerrno>
#include <cstdio>
#include <fmt/format.h>
#include <functional>
#include <algorithm>
#include <map>
#include <queue>
#include <set>
#include <tuple>
#include <unordered_map>

#include "interval_math.h"

namespace tierflow::traces {
namespace {

using internal::AppendJsonNumber;
using internal::AppendJsonString;

bool IsTransferOp(Op op) {
  return op == Op::kRead || op == Op::kWrite || op == Op::kH2D || op == Op::kD2H || IsCollectiveOp(op);
}

constexpr const char* kScheduleProcess = "schedule";
constexpr const char* kInstantTrack = "instant";

// Collects events into a buffer and hands full chunks to a sink, so a file never needs the
// whole JSON text in memory.
class EventStream {
 public:
  explicit EventStream(std::function<bool(const std::string&)> sink) : sink_(std::move(sink)) {
    buf_ = "{\"traceEvents\":[\n";
  }
  // Starts a new event object; the caller appends its body (without braces) to text().
  std::string& Begin() {
    if (!first_) buf_.append(",\n");
    first_ = false;
    buf_.push_back('{');
    return buf_;
  }
  void End() {
    buf_.push_back('}');
    if (buf_.size() >= (1u << 20)) Flush();
  }
  bool Finish() {
    buf_.append("\n],\"displayTimeUnit\":\"ms\"}\n");
    Flush();
    return ok_;
  }

 private:
  void Flush() {
    if (ok_ && !buf_.empty()) ok_ = sink_(buf_);
    buf_.clear();
  }
  std::function<bool(const std::string&)> sink_;
  std::string buf_;
  bool first_ = true;
  bool ok_ = true;
};

// Interval partitioning: instances fed in start order get the lowest lane whose previous
// instance has ended, so the instances of one lane never overlap. O(log lanes) per instance.
struct Track {
  int32_t pid = 0;
  int32_t tid = 0;
};

class Lanes {
 public:
  std::vector<Track> tracks;  // the track of each lane, filled by the caller
  int32_t Take(double start_s, double end_s) {
    while (!busy_.empty() && busy_.top().first <= start_s) {
      free_.insert(busy_.top().second);
      busy_.pop();
    }
    int32_t lane;
    if (free_.empty()) {
      lane = count_++;
    } else {
      lane = *free_.begin();
      free_.erase(free_.begin());
    }
    busy_.push({end_s, lane});
    return lane;
  }

 private:
  using Busy = std::pair<double, int32_t>;
  std::priority_queue<Busy, std::vector<Busy>, std::greater<>> busy_;
  std::set<int32_t> free_;
  int32_t count_ = 0;
};


class Layout {
 public:
  Layout(const Schedule* schedule, EventStream* out) : schedule_(schedule), out_(out) {}

  int32_t Process(const std::string& source, const std::string& device) {
    auto key = std::make_pair(source, device);
    auto it = pids_.find(key);
    if (it != pids_.end()) return it->second;
    int32_t pid = static_cast<int32_t>(pids_.size()) + 1;
    pids_.emplace(key, pid);
    std::string name = source.empty() ? device : device + " (" + source + ")";
    Metadata("process_name", pid, 0, name);
    SortIndex("process_sort_index", pid, 0, pid);
    return pid;
  }

  // The track of `resource` in its device's process; lane k > 0 is an extra track named
  // "<resource> #<k+1>" for instances that overlap on a queue with concurrency > 1 (Perfetto
  // needs the complete events of one track to nest). Lanes sort right after their resource.
  Track Thread(const std::string& source, const std::string& device, const std::string& resource,
               int32_t lane) {
    int32_t pid = Process(source, device);
    auto key = std::make_tuple(pid, resource, lane);
    auto it = tids_.find(key);
    if (it != tids_.end()) return {pid, it->second};
    int32_t tid = static_cast<int32_t>(tids_.size()) + 1;
    tids_.emplace(key, tid);
    auto [ord, inserted] = resource_order_.try_emplace(std::make_pair(pid, resource),
                                                       static_cast<int32_t>(resource_order_.size()));
    (void)inserted;
    Metadata("thread_name", pid, tid, lane == 0 ? resource : fmt::format("{} #{}", resource, lane + 1));
    SortIndex("thread_sort_index", pid, tid, ord->second * kMaxLanesSorted + std::min(lane, kMaxLanesSorted - 1));
    return {pid, tid};
  }

  std::string DeviceOfResource(const std::string& resource) const {
    if (schedule_) {
      int32_t r = schedule_->FindResource(resource);
      if (r != kNoIndex && schedule_->resources()[r].device >= 0) {
        return schedule_->devices()[schedule_->resources()[r].device].name;
      }
    }
    return internal::DeviceOfResourceName(resource);
  }

 private:
  void Metadata(const char* what, int32_t pid, int32_t tid, const std::string& name) {
    std::string& s = out_->Begin();
    fmt::format_to(std::back_inserter(s), "\"name\":\"{}\",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":",
                   what, pid, tid);
    AppendJsonString(&s, name);
    s.push_back('}');
    out_->End();
  }
  void SortIndex(const char* what, int32_t pid, int32_t tid, int32_t index) {
    std::string& s = out_->Begin();
    fmt::format_to(std::back_inserter(s),
                   "\"name\":\"{}\",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":{{\"sort_index\":{}}}",
                   what, pid, tid, index);
    out_->End();
  }

  const Schedule* schedule_;
  EventStream* out_;
  std::map<std::pair<std::string, std::string>, int32_t> pids_;
  std::map<std::tuple<int32_t, std::string, int32_t>, int32_t> tids_;
  std::map<std::pair<int32_t, std::string>, int32_t> resource_order_;
  static constexpr int32_t kMaxLanesSorted = 4096;
};

void WriteRecord(const TraceRecord& r, Track track, EventStream* out) {
  const bool instant = r.resource.empty() && r.end_s == r.start_s;
  std::string& s = out->Begin();
  s.append("\"name\":");
  AppendJsonString(&s, r.task);
  fmt::format_to(std::back_inserter(s), ",\"cat\":\"{}\",\"ph\":\"{}\",\"pid\":{},\"tid\":{},\"ts\":",
                 OpName(r.op), instant ? "i" : "X", track.pid, track.tid);
  AppendJsonNumber(&s, r.start_s * 1e6);
  if (instant) {
    s.append(",\"s\":\"t\"");
  } else {
    s.append(",\"dur\":");
    AppendJsonNumber(&s, r.duration_s() * 1e6);
  }
  fmt::format_to(std::back_inserter(s), ",\"args\":{{\"iteration\":{},\"layer\":{},\"phase\":\"{}\",\"bytes\":{},\"flops\":",
                 r.iteration, r.layer, PhaseName(r.phase), r.bytes);
  AppendJsonNumber(&s, r.flops);
  s.append(",\"source\":");
  AppendJsonString(&s, r.source);
  if (IsTransferOp(r.op) && r.bytes > 0 && r.duration_s() > 0) {
    s.append(",\"gb_per_s\":");
    AppendJsonNumber(&s, static_cast<double>(r.bytes) / r.duration_s() / 1e9);
  }
  if (r.block_bytes) fmt::format_to(std::back_inserter(s), ",\"block_bytes\":{}", r.block_bytes);
  if (r.queue_depth) fmt::format_to(std::back_inserter(s), ",\"queue_depth\":{}", r.queue_depth);
  if (r.threads) fmt::format_to(std::back_inserter(s), ",\"threads\":{}", r.threads);
  if (r.device_end_s != 0) {  // the GPU's part of the task (trace_record.h)
    s.append(",\"device_start_us\":");
    AppendJsonNumber(&s, r.device_start_s * 1e6);
    s.append(",\"device_us\":");
    AppendJsonNumber(&s, (r.device_end_s - r.device_start_s) * 1e6);
  }
  s.append("}");
  out->End();
}

bool Emit(const std::vector<TraceRecord>& records, const Schedule* schedule,
          const ChromeTraceOptions& options, std::function<bool(const std::string&)> sink) {
  EventStream out(std::move(sink));
  Layout layout(schedule, &out);
  // Sources in sorted order, each with its records' indices.
  std::map<std::string, std::vector<size_t>> by_source;
  for (size_t i = 0; i < records.size(); ++i) by_source[records[i].source].push_back(i);

  // Records of several ranks (a run under mpirun, gathered): one process, a track group, per rank
  // and source, the rank's resources its tracks; sim's collectives, which stand for every rank's,
  // in a group of their own.
  std::set<int32_t> ranks;
  for (const TraceRecord& r : records) {
    if (r.rank >= 0) ranks.insert(r.rank);
  }
  const bool ranked = ranks.size() > 1;
  auto group = [&](const TraceRecord& r) { return r.rank >= 0 ? "rank " + std::to_string(r.rank) : std::string("every rank"); };
  for (const auto& [source, indices] : by_source) {
    // Declare the schedule's devices and resources first, so tracks follow schedule order.
    if (schedule && !ranked) {
      for (const ResourceSpec& rs : schedule->resources()) {
        layout.Thread(source, layout.DeviceOfResource(rs.name), rs.name, 0);
      }
    }
    // Records in start order, each on the lowest lane of its resource that is free by then.
    std::vector<size_t> order(indices);
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
      const TraceRecord& a = records[x];
      const TraceRecord& b = records[y];
      if (a.start_s != b.start_s) return a.start_s < b.start_s;
      if (a.end_s != b.end_s) return a.end_s < b.end_s;
      return x < y;
    });
    std::unordered_map<std::string, Lanes> lanes_of;
    for (size_t i : order) {
      const TraceRecord& r = records[i];
      if (r.resource.empty() && !options.instant_ops) continue;
      Lanes& lanes = lanes_of[ranked ? group(r) + "/" + r.resource : r.resource];
      int32_t lane = lanes.Take(r.start_s, r.end_s);
      if (lane == static_cast<int32_t>(lanes.tracks.size())) {
        const std::string process = ranked ? group(r) : r.resource.empty() ? kScheduleProcess : layout.DeviceOfResource(r.resource);
        lanes.tracks.push_back(layout.Thread(source, process, r.resource.empty() ? kInstantTrack : r.resource, lane));
      }
      WriteRecord(r, lanes.tracks[lane], &out);
    }
    if (schedule && options.pool_counters) {
      OccupancyResult occ = internal::ReconstructPoolOccupancyOf(records, &indices, *schedule, true);
      for (const PoolOccupancy& po : occ.pools) {
        const PoolSpec& spec = schedule->pools()[po.pool];
        std::string device = spec.device >= 0 ? schedule->devices()[spec.device].name : kScheduleProcess;
        int32_t pid = layout.Process(source, device);
        for (const OccupancySample& sample : po.samples) {
          std::string& s = out.Begin();
          s.append("\"name\":");
          AppendJsonString(&s, po.name);
          fmt::format_to(std::back_inserter(s), ",\"cat\":\"pool\",\"ph\":\"C\",\"pid\":{},\"tid\":0,\"ts\":", pid);
          AppendJsonNumber(&s, sample.time_s * 1e6);
          fmt::format_to(std::back_inserter(s), ",\"args\":{{\"bytes\":{}}}", sample.bytes);
          out.End();
        }
      }
    }
  }
  return out.Finish();
}

}  // namespace

std::string ChromeTraceToString(const std::vector<TraceRecord>& records, const Schedule* schedule,
                                const ChromeTraceOptions& options) {
  std::string text;
  Emit(records, schedule, options, [&](const std::string& chunk) {
    text.append(chunk);
    return true;
  });
  return text;
}

Status WriteChromeTrace(const std::string& path, const std::vector<TraceRecord>& records,
                        const Schedule* schedule, const ChromeTraceOptions& options) {
  TF_RETURN_IF_ERROR(CreateParentDirectories(path, "Chrome trace file"));
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return FromErrno(errno, "open Chrome trace file '" + path + "'");
  int write_errno = 0;
  bool ok = Emit(records, schedule, options, [&](const std::string& chunk) {
    if (std::fwrite(chunk.data(), 1, chunk.size(), f) != chunk.size()) {
      write_errno = errno;
      return false;
    }
    return true;
  });
  int rc = std::fclose(f);
  if (!ok) return FromErrno(write_errno ? write_errno : EIO, "write Chrome trace file '" + path + "'");
  if (rc != 0) return FromErrno(errno, "close Chrome trace file '" + path + "'");
  return Status::Ok();
}

}  // namespace tierflow::traces
