#include "tierflow/sweep/evaluate.h"

#include <malloc.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <optional>
#include <sstream>

#include "tierflow/core/units.h"
#include "tierflow/models/perf.h"
#include "tierflow/policies/policy.h"
#include "tierflow/sim/simulator.h"
#include "tierflow/traces/summary.h"

namespace tierflow::sweep {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The worker's answer: length-prefixed fields ("<len>:<bytes>") in a fixed order.
void PutField(std::string* out, const std::string& v) {
  *out += std::to_string(v.size());
  *out += ':';
  *out += v;
}
void PutNumber(std::string* out, double v) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  PutField(out, buf);
}
void PutInt(std::string* out, int64_t v) { PutField(out, std::to_string(v)); }

bool GetField(const std::string& in, size_t* pos, std::string* v) {
  const size_t colon = in.find(':', *pos);
  if (colon == std::string::npos) return false;
  char* end = nullptr;
  const unsigned long long len = std::strtoull(in.c_str() + *pos, &end, 10);
  if (end != in.c_str() + colon || colon + 1 + len > in.size()) return false;
  *v = in.substr(colon + 1, len);
  *pos = colon + 1 + len;
  return true;
}
bool GetNumber(const std::string& in, size_t* pos, double* v) {
  std::string f;
  if (!GetField(in, pos, &f)) return false;
  *v = std::strtod(f.c_str(), nullptr);
  return true;
}
bool GetInt(const std::string& in, size_t* pos, int64_t* v) {
  std::string f;
  if (!GetField(in, pos, &f)) return false;
  *v = std::strtoll(f.c_str(), nullptr, 10);
  return true;
}

std::string Encode(const Evaluation& e) {
  std::string out;
  PutInt(&out, (e.feasible ? 1 : 0) | (e.simulated ? 2 : 0));
  PutField(&out, e.reason);
  PutField(&out, e.policy);
  for (double v : {e.iteration_s, e.forward_s, e.backward_s, e.step_s}) PutNumber(&out, v);
  PutInt(&out, e.host_peak_bytes);
  PutInt(&out, e.gpu_peak_bytes);
  PutInt(&out, static_cast<int64_t>(e.pool_peak_bytes.size()));
  for (const auto& [name, bytes] : e.pool_peak_bytes) {
    PutField(&out, name);
    PutInt(&out, bytes);
  }
  PutInt(&out, e.tasks);
  PutNumber(&out, e.plan_s);
  PutNumber(&out, e.sim_s);
  return out;
}

bool Decode(const std::string& in, Evaluation* e) {
  size_t pos = 0;
  int64_t feasible = 0, pools = 0;
  bool ok = GetInt(in, &pos, &feasible) && GetField(in, &pos, &e->reason) && GetField(in, &pos, &e->policy) &&
            GetNumber(in, &pos, &e->iteration_s) && GetNumber(in, &pos, &e->forward_s) &&
            GetNumber(in, &pos, &e->backward_s) && GetNumber(in, &pos, &e->step_s) &&
            GetInt(in, &pos, &e->host_peak_bytes) && GetInt(in, &pos, &e->gpu_peak_bytes) &&
            GetInt(in, &pos, &pools);
  e->feasible = (feasible & 1) != 0;
  e->simulated = (feasible & 2) != 0;
  for (int64_t p = 0; ok && p < pools; ++p) {
    std::pair<std::string, int64_t> peak;
    ok = GetField(in, &pos, &peak.first) && GetInt(in, &pos, &peak.second);
    e->pool_peak_bytes.push_back(std::move(peak));
  }
  return ok && GetInt(in, &pos, &e->tasks) && GetNumber(in, &pos, &e->plan_s) && GetNumber(in, &pos, &e->sim_s) &&
         pos == in.size();
}

// What one evaluation builds. A worker process leaves it allocated when it exits: freeing a 70B
// schedule's tens of thousands of strings and vectors is a measurable part of a run.
struct Built {
  std::optional<StatusOr<policies::Scenario>> scenario;
  std::optional<StatusOr<Schedule>> schedule;
  std::optional<StatusOr<sim::SimResult>> result;
};

// Plans and simulates one variation. Never fails: what goes wrong is the Evaluation's reason.
// kInProcess is for a fresh worker process that has never run SimGrid (one run per process).
Evaluation EvaluateHere(const std::string& base_yaml, const std::string& origin, const Variation& variation,
                        int64_t iterations, sim::SimIsolation isolation, Built* built) {
  Evaluation e;
  const double t0 = Now();
  built->scenario.emplace(policies::LoadScenarioText(base_yaml, variation.overrides, origin));
  const auto& scenario = *built->scenario;
  if (!scenario.ok()) {
    e.reason = scenario.status().message();
    return e;
  }
  e.policy = scenario->policy;
  built->schedule.emplace(policies::Plan(*scenario));
  const auto& schedule = *built->schedule;
  e.plan_s = Now() - t0;
  if (!schedule.ok()) {
    e.reason = "plan: " + schedule.status().message();
    return e;
  }
  // Iteration bounds and phase spans, as traces::Summarize defines them (docs/trace-format.md),
  // over the same steady-state iterations (traces::SteadyIterations), from each instance as it
  // completes: no trace records are built.
  struct Span {
    double start = 0, end = 0;
    bool present = false;
    void Add(double s, double t) {
      if (!present) {
        start = s, end = t, present = true;
      } else {
        start = std::min(start, s), end = std::max(end, t);
      }
    }
  };
  // Per iteration, [kPhaseCount] the whole iteration; each task's phase apart from its spec (this
  // runs once per instance: a map lookup and a TaskSpec read each were a few percent of a run).
  std::vector<std::array<Span, kPhaseCount + 1>> spans;  // grown as iterations complete
  spans.reserve(static_cast<size_t>(std::min<int64_t>(iterations, 1024)));
  std::vector<uint8_t> phase_of(schedule->tasks().size());
  for (size_t t = 0; t < phase_of.size(); ++t) phase_of[t] = static_cast<uint8_t>(schedule->tasks()[t].phase);
  sim::SimOptions options;
  options.iterations = iterations;
  options.record_trace = false;
  options.on_complete = [&](int32_t task, int64_t iteration, double start_s, double end_s) {
    if (static_cast<size_t>(iteration) >= spans.size()) spans.resize(static_cast<size_t>(iteration) + 1);
    auto& s = spans[static_cast<size_t>(iteration)];
    s[phase_of[static_cast<size_t>(task)]].Add(start_s, end_s);
    s[kPhaseCount].Add(start_s, end_s);
  };
  options.schedule_validated = true;  // policies::Plan validates what it returns
  options.isolation = isolation;
  const double t1 = Now();
  built->result.emplace(sim::Simulate(*schedule, scenario->hardware, options));
  const auto& result = *built->result;
  e.sim_s = Now() - t1;
  if (!result.ok()) {
    e.reason = std::string(result.status().code() == StatusCode::kDeadlock ? "" : "sim: ") +
               result.status().ToString();
    return e;
  }
  std::vector<const std::array<Span, kPhaseCount + 1>*> ordered;  // by iteration number
  for (const auto& s : spans) {
    if (s[kPhaseCount].present) ordered.push_back(&s);
  }
  const traces::SteadyRange steady = traces::SteadyIterations(ordered.size());
  std::vector<double> ends;
  for (const auto* s : ordered) ends.push_back((*s)[kPhaseCount].end);
  e.iteration_s = traces::SteadyIterationTime(ends, ordered.empty() ? 0.0 : (*ordered[0])[kPhaseCount].start);
  const Phase phases[] = {Phase::kForward, Phase::kBackward, Phase::kStep};
  double* outs[] = {&e.forward_s, &e.backward_s, &e.step_s};
  for (int p = 0; p < 3; ++p) {
    double sum = 0;
    int n = 0;
    for (size_t i = steady.first; i < steady.end; ++i) {
      const Span& span = (*ordered[i])[static_cast<int>(phases[p])];
      if (span.present) {
        sum += span.end - span.start;
        ++n;
      }
    }
    *outs[p] = n ? sum / n : 0.0;
  }
  const auto& pools = schedule->pools();
  for (size_t p = 0; p < pools.size() && p < result->pool_peak_bytes.size(); ++p) {
    const int64_t peak = result->pool_peak_bytes[p];
    e.pool_peak_bytes.emplace_back(pools[p].name, peak);
    const DeviceKind kind = schedule->devices()[pools[p].device].kind;
    if (kind == DeviceKind::kHost) e.host_peak_bytes += peak;
    if (kind == DeviceKind::kGpu) e.gpu_peak_bytes = std::max(e.gpu_peak_bytes, peak);
  }
  e.tasks = result->tasks_simulated;
  // What the machine's memory cannot hold is no prediction; its figures stay for the table.
  const models::MemoryFit fit = models::CheckMemoryFit(*schedule, scenario->hardware, result->pool_peak_bytes);
  e.simulated = true;
  e.feasible = fit.fits();
  if (!fit.fits()) e.reason = "does not fit the machine: " + fit.Problem();
  return e;
}

void ApplyBudget(const MemoryBudget& budget, Evaluation* e) {
  if (!e->feasible) return;
  if (budget.host_bytes > 0 && e->host_peak_bytes > budget.host_bytes) {
    e->feasible = false;
    e->reason = "memory budget: host peak " + FormatBytes(static_cast<double>(e->host_peak_bytes)) + " > " +
                FormatBytes(static_cast<double>(budget.host_bytes));
  } else if (budget.gpu_bytes > 0 && e->gpu_peak_bytes > budget.gpu_bytes) {
    e->feasible = false;
    e->reason = "memory budget: gpu peak " + FormatBytes(static_cast<double>(e->gpu_peak_bytes)) + " > " +
                FormatBytes(static_cast<double>(budget.gpu_bytes));
  }
}

// A run grows its schedule's and simulation's vectors to a few MiB each, and glibc's malloc
// serves a block over its threshold (128 KiB at first) by a mapping of its own, unmapped again
// when the vector grows or is freed: each growth faulted fresh zeroed pages in, and the heap's top
// was given back to the kernel as it emptied, to be faulted in again. Served from the heap and
// kept there (blocks up to 32 MiB, the largest glibc allows; nothing given back under 1 GiB free),
// a 100-run sweep of the quickstart's variations took about half the system time and 0.90x the
// wall time (docs/sweep-format.md, "Parallelism and speed"). Set in each worker as it starts: the
// sweep's own process is left as it was.
void KeepFreedMemoryInTheHeap() {
  (void)::mallopt(M_MMAP_THRESHOLD, 32 << 20);
  (void)::mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

bool WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

struct Worker {
  pid_t pid = -1;
  int fd = -1;
  size_t index = 0;
  double start = 0;
  std::string received;
};

}  // namespace

StatusOr<MemoryBudget> ParseMemoryBudget(const std::string& text) {
  MemoryBudget budget;
  std::stringstream ss(text);
  for (std::string part; std::getline(ss, part, ',');) {
    const auto eq = part.find('=');
    const std::string key = part.substr(0, eq);
    if (eq == std::string::npos || (key != "host" && key != "gpu")) {
      return InvalidArgument("--memory-budget '" + text + "': expected host=SIZE,gpu=SIZE (e.g. host=200GiB,gpu=70GiB)");
    }
    auto bytes = ParseBytes(part.substr(eq + 1));
    if (!bytes.ok()) return bytes.status().WithContext("--memory-budget " + key);
    if (*bytes <= 0) return InvalidArgument("--memory-budget " + key + ": must be > 0");
    (key == "host" ? budget.host_bytes : budget.gpu_bytes) = *bytes;
  }
  return budget;
}

MemoryBudget HardwareMemoryBudget(const models::HardwareSpec& hw) {
  MemoryBudget b;
  b.host_bytes = (hw.node.cpu.host_memory_bytes - hw.node.cpu.HostReserveBytes()) * std::max(1, hw.nodes);
  b.gpu_bytes = hw.node.gpu.hbm_bytes;
  return b;
}

std::string MemoryBudgetToString(const MemoryBudget& b) {
  auto one = [](int64_t v) { return v > 0 ? FormatBytes(static_cast<double>(v)) : std::string("unlimited"); };
  return "host " + one(b.host_bytes) + ", gpu " + one(b.gpu_bytes);
}

namespace {

// Threads in this process load and plan; each Simulate() forks its own child and sends every
// trace record back. The comparison for kWorkerProcesses (docs/sweep-format.md, "Parallelism and
// speed").
StatusOr<std::vector<Evaluation>> EvaluateInThreads(const std::string& base_yaml, const std::string& origin,
                                                    const std::vector<Variation>& variations,
                                                    const EvaluateOptions& options) {
  std::vector<Evaluation> results(variations.size());
  std::mutex mu;
  std::condition_variable cv;
  size_t next = 0;
  int64_t done = 0;
  std::vector<size_t> completed;  // indices in the order they completed
  auto work = [&] {
    while (true) {
      size_t i;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (next >= variations.size()) return;
        i = next++;
      }
      const double t0 = Now();
      Built built;
      Evaluation e = EvaluateHere(base_yaml, origin, variations[i], options.iterations, sim::SimIsolation::kFork, &built);
      e.wall_s = Now() - t0;
      ApplyBudget(options.budget, &e);
      std::lock_guard<std::mutex> lock(mu);
      results[i] = std::move(e);
      completed.push_back(i);
      ++done;
      cv.notify_one();
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < options.jobs && static_cast<size_t>(t) < variations.size(); ++t) threads.emplace_back(work);
  int64_t reported = 0;
  while (reported < static_cast<int64_t>(variations.size())) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done > reported; });
    const int64_t now_done = done;
    const std::vector<size_t> order(completed.begin() + reported, completed.begin() + now_done);
    lock.unlock();
    for (size_t i : order) {
      ++reported;
      // results[i] is final: its worker wrote it before counting it done, and nothing writes it again.
      if (options.progress) options.progress(reported, static_cast<int64_t>(variations.size()), results[i]);
    }
  }
  for (auto& t : threads) t.join();
  return results;
}

StatusOr<std::vector<Evaluation>> EvaluateInWorkers(const std::string& base_yaml, const std::string& origin,
                                                    const std::vector<Variation>& variations,
                                                    const EvaluateOptions& options) {
  std::vector<Evaluation> results(variations.size());
  std::vector<Worker> running;
  size_t next = 0;
  int64_t done = 0;
  Status failure;
  auto finish = [&](Worker& w) {
    ::close(w.fd);
    int wstatus = 0;
    while (::waitpid(w.pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
    Evaluation& e = results[w.index];
    if (!(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) || !Decode(w.received, &e)) {
      e = Evaluation();
      e.reason = WIFSIGNALED(wstatus) ? "worker died of signal " + std::to_string(WTERMSIG(wstatus))
                                      : "worker failed (exit " + std::to_string(WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1) + ")";
    }
    e.wall_s = Now() - w.start;
    ApplyBudget(options.budget, &e);
    ++done;
    if (options.progress) options.progress(done, static_cast<int64_t>(variations.size()), e);
  };
  while (done < static_cast<int64_t>(variations.size())) {
    while (failure.ok() && next < variations.size() && running.size() < static_cast<size_t>(options.jobs)) {
      int fds[2];
      if (::pipe(fds) != 0) {
        failure = FromErrno(errno, "pipe for a sweep worker");
        break;
      }
      std::fflush(nullptr);  // or the child would write the parent's buffered output again
      Worker w;
      w.index = next;
      w.start = Now();
      w.pid = ::fork();
      if (w.pid < 0) {
        failure = FromErrno(errno, "fork of a sweep worker");
        ::close(fds[0]);
        ::close(fds[1]);
        break;
      }
      if (w.pid == 0) {
        ::close(fds[0]);
        for (const Worker& other : running) ::close(other.fd);
        KeepFreedMemoryInTheHeap();
        auto* built = new Built;  // never freed: the worker exits right after (see Built)
        const Evaluation e = EvaluateHere(base_yaml, origin, variations[next], options.iterations,
                                          sim::SimIsolation::kInProcess, built);
        const bool ok = WriteAll(fds[1], Encode(e));
        ::close(fds[1]);
        ::_exit(ok ? 0 : 3);  // no destructors or atexit handlers of the parent's state
      }
      ::close(fds[1]);
      w.fd = fds[0];
      running.push_back(std::move(w));
      ++next;
    }
    if (running.empty()) break;  // only after a failure to start one
    std::vector<pollfd> pfds;
    for (const Worker& w : running) pfds.push_back({w.fd, POLLIN, 0});
    if (::poll(pfds.data(), pfds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return FromErrno(errno, "poll of the sweep workers");
    }
    for (size_t i = running.size(); i-- > 0;) {
      if (!(pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      const ssize_t n = ::read(running[i].fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n > 0) {
        running[i].received.append(buf, static_cast<size_t>(n));
        continue;
      }
      finish(running[i]);
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  if (!failure.ok()) return failure;
  return results;
}

}  // namespace

StatusOr<std::vector<Evaluation>> EvaluateAll(const std::string& base_yaml, const std::string& origin,
                                              const std::vector<Variation>& variations,
                                              const EvaluateOptions& options) {
  if (options.jobs < 1) return InvalidArgument("jobs must be >= 1");
  if (options.iterations < 1) return InvalidArgument("iterations must be >= 1");
  // The SimGrid engine is a module opened on first use (docs/simulator.md "Start-up"): opened here,
  // before any worker is forked, every worker starts with it mapped instead of loading it again.
  TF_RETURN_IF_ERROR(sim::SimulatorAvailable());
  if (options.parallelism == Parallelism::kThreads) return EvaluateInThreads(base_yaml, origin, variations, options);
  return EvaluateInWorkers(base_yaml, origin, variations, options);
}

StatusOr<Evaluation> EvaluateOne(const std::string& base_yaml, const std::string& origin, const Variation& variation,
                                 const EvaluateOptions& options) {
  EvaluateOptions one = options;
  one.jobs = 1;
  one.progress = nullptr;
  TF_ASSIGN_OR_RETURN(std::vector<Evaluation> all, EvaluateAll(base_yaml, origin, {variation}, one));
  return all.front();
}

}  // namespace tierflow::sweep
