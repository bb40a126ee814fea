// Small schedules and a discrete-event loop with fixed task durations, shared by the core tests.
// The loop drives the real Dispatcher, so the tests check the dispatcher's decisions in time.
#pragma once

#include <map>
#include <queue>
#include <string>
#include <vector>

#include "tierflow/core/dispatcher.h"
#include "tierflow/core/schedule.h"

namespace tierflow::testing {

// Builds schedules by name for readable tests.
class Builder {
 public:
  Builder() {
    s.name = "test";
    s.AddDevice({"host", DeviceKind::kHost});
  }
  Builder& Resource(const std::string& name, int32_t concurrency = 1) {
    s.AddResource({name, 0, concurrency});
    return *this;
  }
  Builder& Pool(const std::string& name, int64_t capacity) {
    s.AddPool({name, 0, capacity});
    return *this;
  }
  Builder& Buffer(const std::string& name, const std::string& pool, int64_t size, bool persistent = false) {
    s.AddBuffer({name, s.FindPool(pool), size, persistent});
    return *this;
  }
  // deps and buffers by name; op is compute unless the resource is empty (then barrier).
  Builder& Task(const std::string& id, const std::string& resource, std::vector<std::string> deps = {},
                std::vector<std::string> allocs = {}, std::vector<std::string> frees = {}, int32_t priority = 0) {
    TaskSpec t;
    t.id = id;
    t.op = resource.empty() ? Op::kBarrier : Op::kCompute;
    t.resource = resource.empty() ? kNoIndex : s.FindResource(resource);
    for (const auto& d : deps) t.deps.push_back(s.FindTask(d));
    for (const auto& b : allocs) t.allocs.push_back(s.FindBuffer(b));
    for (const auto& b : frees) t.frees.push_back(s.FindBuffer(b));
    t.priority = priority;
    s.AddTask(std::move(t));
    return *this;
  }
  Builder& Carried(const std::string& task, const std::string& on, int32_t distance) {
    s.mutable_tasks()[s.FindTask(task)].carried.push_back({s.FindTask(on), distance});
    return *this;
  }
  Schedule s;
};

struct Span {
  double start = 0, end = 0;
};

struct RunResult {
  std::map<std::pair<std::string, int64_t>, Span> spans;  // (task id, iteration)
  double makespan = 0;
  Status status;
  std::vector<int64_t> peaks;
  const Span& at(const std::string& id, int64_t it = 0) const { return spans.at({id, it}); }
};

// Runs the dispatcher with each task taking durations[id] seconds (0 if absent).
inline RunResult RunTimed(const Schedule& s, int64_t iterations, const std::map<std::string, double>& durations) {
  Dispatcher d(s, iterations);
  struct Event {
    double time;
    int64_t seq;
    Instance inst;
    bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
  };
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
  std::vector<Instance> start;
  RunResult r;
  double now = 0;
  int64_t seq = 0;
  auto launch = [&]() {
    start.clear();
    d.Dispatch(&start);
    for (const Instance& i : start) {
      const std::string& id = s.tasks()[i.task].id;
      auto it = durations.find(id);
      double dur = it == durations.end() ? 0.0 : it->second;
      r.spans[{id, i.iteration}] = {now, now + dur};
      events.push({now + dur, seq++, i});
    }
  };
  launch();
  while (!events.empty()) {
    Event e = events.top();
    events.pop();
    now = e.time;
    d.Complete(e.inst);
    launch();
  }
  r.makespan = now;
  r.status = d.done() ? Status::Ok() : d.DeadlockReport();
  for (size_t p = 0; p < s.pools().size(); ++p) r.peaks.push_back(d.pool_peak_bytes(static_cast<int32_t>(p)));
  return r;
}

}  // namespace tierflow::testing
