// What the host probes share (host_probes.cc, compute_probes.cc): their options' checks, progress
// and records, and the executor's hand-over of a task as they time it.
#pragma once

#include <algorithm>
#include <string>
#include <thread>

#include "tierflow/core/trace_record.h"
#include "tierflow/real/host_probes.h"
#include "tierflow/real/workers.h"

namespace tierflow::real::probe_internal {

// The idle gap before each hand-over of probe io-cpu's stream "dispatch" (ProbeIoCpu): a run's
// chain of small copies hands a task over every 60 to 130 us (tiny's forward, calibrate_node's
// traces), so its threads sleep between hand-overs, as they do here.
inline constexpr double kHandOverGapS = 100e-6;

inline int32_t MaxThreads(const HostProbeOptions& o) {
  if (o.max_threads > 0) return o.max_threads;
  return std::max(1, static_cast<int32_t>(std::thread::hardware_concurrency()));
}

inline Status CheckOptions(const HostProbeOptions& o, const char* probe) {
  if (o.repetitions < 1) return InvalidArgument(std::string(probe) + ": repetitions must be at least 1");
  if (o.max_threads < 0) return InvalidArgument(std::string(probe) + ": max_threads must not be negative");
  return Status::Ok();
}

inline void Report(const HostProbeOptions& o, const std::string& what) {
  if (o.progress) o.progress(what);
}

// The executor's hand-over of a task, with its own classes: the caller posts to a resource's
// worker, which pushes the completion to the event queue the caller sleeps on (ProbeDispatch,
// ProbeIoCpu's stream "dispatch").
class HandOvers {
 public:
  Status One() {
    worker_.Post([this] { events_.Push({0, Status::Ok()}); });
    return events_.Pop().status;
  }

 private:
  exec::EventQueue events_;  // declared first: the worker's thread pushes to it until joined
  exec::Worker worker_;
};

inline TraceRecord Record(std::string task, Op op, std::string resource, int64_t rep, int64_t bytes, double start,
                   double end, int32_t threads) {
  TraceRecord r = ProbeRecord(std::move(task), op, std::move(resource), rep, bytes, start, end);
  r.threads = threads;
  return r;
}

}  // namespace tierflow::real::probe_internal
