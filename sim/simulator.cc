#include "tierflow/sim/simulator.h"

#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "sim/engine.h"
#include "sim/plan.h"

namespace tierflow::sim {
namespace {

using internal::Plan;
using internal::RunSink;
using internal::RunStats;

double CpuSeconds(int who) {
  rusage u{};
  ::getrusage(who, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  return s(u.ru_utime) + s(u.ru_stime);
}

// What the calling process does with each completed instance: a trace record
// (options.record_trace) and the caller's own callback (options.on_complete).
class Completions {
 public:
  Completions(const Schedule& schedule, const Plan& plan, const SimOptions& options, SimResult* result)
      : schedule_(schedule), plan_(plan), options_(options), result_(result) {}
  // Whether anything reads completions (else the engine's child sends none).
  static bool Wanted(const SimOptions& options) { return options.record_trace || static_cast<bool>(options.on_complete); }
  void Add(int32_t task, int64_t iteration, double start_s, double end_s) {
    if (options_.record_trace) {
      result_->records.push_back(TaskRecord(schedule_, task, iteration, start_s, end_s, "sim", plan_.tasks[task].record_threads));
    }
    if (options_.on_complete) options_.on_complete(task, iteration, start_s, end_s);
  }

 private:
  const Schedule& schedule_;
  const Plan& plan_;
  const SimOptions& options_;
  SimResult* result_;
};

class InProcessSink : public RunSink {
 public:
  InProcessSink(Completions* completions, const SimOptions& options) : completions_(completions), options_(options) {}
  void OnComplete(int32_t task, int64_t iteration, double start_s, double end_s) override {
    completions_->Add(task, iteration, start_s, end_s);
  }
  void OnProgress(const SimProgress& progress) override {
    if (options_.progress) options_.progress(progress);
  }

 private:
  Completions* completions_;
  const SimOptions& options_;
};

// ---- The child -> parent pipe protocol: frames of [type u8][length u32][payload]. ----
enum FrameType : uint8_t { kCompletions = 'C', kProgress = 'P', kStats = 'S', kError = 'E' };
struct WireCompletion {
  int64_t iteration;
  double start_s;
  double end_s;
  int32_t task;
  int32_t pad;
};

bool WriteAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// 0 on EOF before any byte, 1 when `size` bytes were read, -1 on error or a truncated read.
int ReadAll(int fd, void* data, size_t size) {
  char* p = static_cast<char*>(data);
  size_t got = 0;
  while (got < size) {
    ssize_t n = ::read(fd, p + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) return got == 0 ? 0 : -1;
    got += static_cast<size_t>(n);
  }
  return 1;
}

class FrameWriter {
 public:
  explicit FrameWriter(int fd) : fd_(fd) {}
  void Frame(FrameType type, const std::string& payload) {
    const uint32_t len = static_cast<uint32_t>(payload.size());
    char header[5];
    header[0] = static_cast<char>(type);
    std::memcpy(header + 1, &len, 4);
    ok_ = ok_ && WriteAll(fd_, header, 5) && WriteAll(fd_, payload.data(), payload.size());
  }
  bool ok() const { return ok_; }

 private:
  int fd_;
  bool ok_ = true;
};

template <typename T>
void Put(std::string* out, const T& v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}
template <typename T>
bool Get(const std::string& in, size_t* pos, T* v) {
  if (*pos + sizeof(T) > in.size()) return false;
  std::memcpy(v, in.data() + *pos, sizeof(T));
  *pos += sizeof(T);
  return true;
}

class PipeSink : public RunSink {
 public:
  PipeSink(FrameWriter* writer, bool record) : writer_(writer), record_(record) {}
  void OnComplete(int32_t task, int64_t iteration, double start_s, double end_s) override {
    if (!record_) return;
    Put(&batch_, WireCompletion{iteration, start_s, end_s, task, 0});
    if (batch_.size() >= (64 << 10)) Flush();
  }
  void OnProgress(const SimProgress& p) override {
    Flush();
    std::string payload;
    Put(&payload, p.instances_completed);
    Put(&payload, p.instances_total);
    Put(&payload, p.simulated_s);
    writer_->Frame(kProgress, payload);
  }
  void Flush() {
    if (batch_.empty()) return;
    writer_->Frame(kCompletions, batch_);
    batch_.clear();
  }

 private:
  FrameWriter* writer_;
  bool record_;
  std::string batch_;
};

[[noreturn]] void RunChild(int fd, internal::RunEngineFn engine, const Schedule& schedule, const models::HardwareSpec& hw,
                           const Plan& plan, const SimOptions& options) {
  FrameWriter writer(fd);
  PipeSink sink(&writer, Completions::Wanted(options));
  RunStats stats;
  Status s = engine(schedule, hw, plan, options.iterations, static_cast<bool>(options.progress), options.simgrid_config,
                    &sink, &stats);
  sink.Flush();
  std::string payload;
  if (s.ok()) {
    Put(&payload, CpuSeconds(RUSAGE_SELF));  // a forked child's usage starts at zero
    Put(&payload, stats.makespan_s);
    Put(&payload, stats.completed);
    Put(&payload, stats.activities);
    Put(&payload, stats.disk_sharing_mismatches);
    Put(&payload, static_cast<int64_t>(stats.pool_peak_bytes.size()));
    for (int64_t b : stats.pool_peak_bytes) Put(&payload, b);
    writer.Frame(kStats, payload);
  } else {
    Put(&payload, static_cast<int32_t>(s.code()));
    payload += s.message();
    writer.Frame(kError, payload);
  }
  ::close(fd);
  // No destructors, no atexit handlers, no stdio flush of buffers inherited from the parent.
  ::_exit(writer.ok() ? 0 : 3);
}

Status RunForked(internal::RunEngineFn engine, const Schedule& schedule, const models::HardwareSpec& hw, const Plan& plan,
                 const SimOptions& options, Completions* completions, SimResult* result) {
  int fds[2];
  if (::pipe(fds) != 0) return FromErrno(errno, "pipe for the simulation process");
  // Output buffered in this process would otherwise be written a second time by the child
  // (SimGrid flushes stdio).
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return FromErrno(err, "fork of the simulation process");
  }
  if (pid == 0) {
    ::close(fds[0]);
    RunChild(fds[1], engine, schedule, hw, plan, options);
  }
  ::close(fds[1]);
  Status status = Internal("simulation process sent no result");
  bool finished = false;
  std::string payload;
  while (true) {
    char header[5];
    const int h = ReadAll(fds[0], header, 5);
    if (h == 0) break;
    uint32_t len = 0;
    std::memcpy(&len, header + 1, 4);
    payload.resize(len);
    if (h < 0 || ReadAll(fds[0], payload.data(), len) != 1) {
      status = Internal("truncated message from the simulation process");
      break;
    }
    size_t pos = 0;
    switch (static_cast<FrameType>(header[0])) {
      case kCompletions: {
        WireCompletion c;
        while (Get(payload, &pos, &c)) completions->Add(c.task, c.iteration, c.start_s, c.end_s);
        break;
      }
      case kProgress: {
        SimProgress p;
        if (Get(payload, &pos, &p.instances_completed) && Get(payload, &pos, &p.instances_total) &&
            Get(payload, &pos, &p.simulated_s) && options.progress) {
          options.progress(p);
        }
        break;
      }
      case kStats: {
        int64_t pools = 0;
        bool ok = Get(payload, &pos, &result->cpu_s) && Get(payload, &pos, &result->makespan_s) && Get(payload, &pos, &result->tasks_simulated) &&
                  Get(payload, &pos, &result->activities) &&
                  Get(payload, &pos, &result->disk_sharing_mismatches) && Get(payload, &pos, &pools);
        result->pool_peak_bytes.resize(ok ? static_cast<size_t>(pools) : 0);
        for (int64_t& b : result->pool_peak_bytes) ok = ok && Get(payload, &pos, &b);
        status = ok ? Status::Ok() : Internal("malformed statistics from the simulation process");
        finished = true;
        break;
      }
      case kError: {
        int32_t code = 0;
        Get(payload, &pos, &code);
        status = Status(static_cast<StatusCode>(code), payload.substr(pos));
        finished = true;
        break;
      }
      default:
        status = Internal("unknown message from the simulation process");
        finished = true;
        break;
    }
  }
  ::close(fds[0]);
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (!finished) {
    if (WIFSIGNALED(wstatus)) {
      return Internal("simulation process died of signal " + std::to_string(WTERMSIG(wstatus)) +
                      " (SimGrid aborted; see its message on stderr)");
    }
    return status.WithContext("simulation process exited with code " +
                              std::to_string(WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1));
  }
  return status;
}

}  // namespace

Status SimulatorAvailable() { return internal::LoadEngine().status(); }

StatusOr<SimResult> Simulate(const Schedule& schedule, const models::HardwareSpec& hw,
                             const SimOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  if (options.iterations < 0) return InvalidArgument("iterations must be >= 0");
  if (!options.schedule_validated) TF_RETURN_IF_ERROR(schedule.Validate());
  TF_ASSIGN_OR_RETURN(Plan plan, internal::MakePlan(schedule, hw));
  // Opened in this process, so that the child has it mapped and never opens anything itself.
  TF_ASSIGN_OR_RETURN(const internal::RunEngineFn engine, internal::LoadEngine());

  SimResult result;
  if (options.record_trace) {
    result.records.reserve(static_cast<size_t>(schedule.tasks().size() * options.iterations));
  }
  Completions completions(schedule, plan, options, &result);
  if (options.isolation == SimIsolation::kFork) {
    TF_RETURN_IF_ERROR(RunForked(engine, schedule, hw, plan, options, &completions, &result));
  } else {
    InProcessSink sink(&completions, options);
    RunStats stats;
    const double cpu0 = CpuSeconds(RUSAGE_THREAD);
    TF_RETURN_IF_ERROR(engine(schedule, hw, plan, options.iterations, static_cast<bool>(options.progress),
                              options.simgrid_config, &sink, &stats));
    result.cpu_s = CpuSeconds(RUSAGE_THREAD) - cpu0;
    result.makespan_s = stats.makespan_s;
    result.pool_peak_bytes = stats.pool_peak_bytes;
    result.tasks_simulated = stats.completed;
    result.activities = stats.activities;
    result.disk_sharing_mismatches = stats.disk_sharing_mismatches;
  }
  result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace tierflow::sim
