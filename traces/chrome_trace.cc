#include "tierflow/traces/chrome_trace.h"

#include <cerrno>
#include <cstdio>
#include <fmt/format.h>
#include <functional>
#include <map>
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

struct Track {
  int32_t pid = 0;
  int32_t tid = 0;
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

  Track Thread(const std::string& source, const std::string& device, const std::string& track) {
    int32_t pid = Process(source, device);
    auto key = std::make_pair(pid, track);
    auto it = tids_.find(key);
    if (it != tids_.end()) return {pid, it->second};
    int32_t tid = static_cast<int32_t>(tids_.size()) + 1;
    tids_.emplace(key, tid);
    Metadata("thread_name", pid, tid, track);
    SortIndex("thread_sort_index", pid, tid, tid);
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
  std::map<std::pair<int32_t, std::string>, int32_t> tids_;
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

  for (const auto& [source, indices] : by_source) {
    // Declare the schedule's devices and resources first, so tracks follow schedule order.
    if (schedule) {
      for (const ResourceSpec& rs : schedule->resources()) {
        layout.Thread(source, layout.DeviceOfResource(rs.name), rs.name);
      }
    }
    std::unordered_map<std::string, Track> track_of;
    for (size_t i : indices) {
      const TraceRecord& r = records[i];
      if (r.resource.empty() && !options.instant_ops) continue;
      auto it = track_of.find(r.resource);
      if (it == track_of.end()) {
        Track t = r.resource.empty() ? layout.Thread(source, kScheduleProcess, kInstantTrack)
                                     : layout.Thread(source, layout.DeviceOfResource(r.resource), r.resource);
        it = track_of.emplace(r.resource, t).first;
      }
      WriteRecord(r, it->second, &out);
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
