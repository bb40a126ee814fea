// Trace records: one per executed task instance, identical in shape whether the simulator or the
// real executor produced it. Calibration fits models from them, traces/ turns them into
// summaries and Perfetto timelines, and `tierflow trace compare` lines sim up against real.
//
// File format: JSON Lines, one object per record, keys in the order of the struct below
// (docs/trace-format.md). Reading validates every field and names the line of a bad record.
//
// Thread safety: TraceWriter is not thread-safe; give each thread its own or serialise calls.
#pragma once

#include <cstdint>
#include <cstdio>
#include <iosfwd>
#include <string>
#include <vector>

#include "tierflow/core/ops.h"
#include "tierflow/core/schedule.h"
#include "tierflow/core/status.h"

namespace tierflow {

struct TraceRecord {
  int64_t iteration = 0;
  std::string task;      // the schedule's task id, or a probe's name for probe records
  Op op = Op::kCompute;
  std::string resource;  // the resource it ran on ("" for instant ops)
  int32_t layer = -1;    // -1 when the task belongs to no layer
  Phase phase = Phase::kOther;
  int64_t bytes = 0;
  double flops = 0;
  double start_s = 0;
  double end_s = 0;
  std::string source;    // "sim", "real", "probe"
  // Optional parameters of the request that calibration keys fits by (0 when not applicable).
  int64_t block_bytes = 0;
  int32_t queue_depth = 0;
  int32_t threads = 0;
  // Schedule tasks the record stands for (0: one). A compute probe times a whole layer, which a
  // schedule runs as several compute tasks, each charged the model's per-task overhead.
  int32_t tasks = 0;
  // A task whose work ran on a real GPU: when that work began and ended on the GPU (CUDA
  // events), on the clock of start_s; the rest of [start_s, end_s] is the host's part (launch,
  // waiting, synchronising). Both 0 when there is no such span (host work, the emulated GPU, sim).
  double device_start_s = 0;
  double device_end_s = 0;
  // The data-parallel rank whose record it is: its task's rank (TaskSpec::rank); a real run of
  // several ranks also gives each rank's record of a collective its rank. -1: none (sim's record of
  // a collective, which stands for every rank's; a probe).
  int32_t rank = -1;
  // A d2h that narrows fp32 gradients to bf16 on the way (D2HNarrows): the work is the overflow
  // check and the cast of `bytes / 2` elements, not a plain copy of `bytes`.
  bool narrows = false;

  double duration_s() const { return end_s - start_s; }
  bool operator==(const TraceRecord&) const = default;
};

// Whether d2h task `t` narrows: its tensors are bf16 gradients (StateKind::kGrad16), which the
// device's fp32 gradients are cast to on the way out.
bool D2HNarrows(const Schedule& schedule, const TaskSpec& t);

// The record of instance (task, iteration) of `schedule`, as sim and real both write it: the
// task's id, op, resource, layer, phase, bytes and flops; a read's or write's request shape
// (IoBlockBytes, IoQueueDepth); for optimizer and convert tasks and collectives, `threads` (the
// CPU threads it ran on; a collective's rank count); a d2h's `narrows`. Times and source as given.
TraceRecord TaskRecord(const Schedule& schedule, int32_t task, int64_t iteration, double start_s, double end_s,
                       std::string source, int32_t threads);

// A probe's record (source "probe") of one measured repetition: `iteration` is its index.
TraceRecord ProbeRecord(std::string task, Op op, std::string resource, int64_t repetition, int64_t bytes,
                        double start_s, double end_s);

// Writes a JSON Lines file of records as a stream, put in place whole: records go to
// TemporaryPath(path) (files.h) and Close() renames it over `path`. Destroyed before a successful
// Close (an error, an early return), it removes the temporary file and `path` is left as it was.
class TraceWriter {
 public:
  static StatusOr<TraceWriter> Open(const std::string& path);
  TraceWriter(TraceWriter&& other) noexcept;
  TraceWriter& operator=(TraceWriter&& other) noexcept;
  ~TraceWriter();

  Status Write(const TraceRecord& record);
  Status Close();

 private:
  TraceWriter(std::FILE* file, std::string path, std::string tmp)
      : file_(file), path_(std::move(path)), tmp_(std::move(tmp)) {}
  void Abandon();  // closes and removes the temporary file
  std::FILE* file_ = nullptr;
  std::string path_, tmp_;
};

std::string TraceRecordToJson(const TraceRecord& record);
StatusOr<TraceRecord> TraceRecordFromJson(const std::string& line);
// Reads every record of a JSON Lines file; an error names the file and line.
StatusOr<std::vector<TraceRecord>> ReadTraceFile(const std::string& path);
// The same from a stream; `path` names it in errors.
StatusOr<std::vector<TraceRecord>> ReadTraceStream(std::istream& in, const std::string& path);
Status WriteTraceFile(const std::string& path, const std::vector<TraceRecord>& records);

}  // namespace tierflow
