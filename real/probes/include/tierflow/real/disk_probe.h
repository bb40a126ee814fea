// The disk probe: measures what the storage back-end gets from each directory's device as a
// function of request size, queue depth, operation (read, write, a 70/30 read/write mix, or
// separate reader and writer streams at once) and the number of devices driven at once — nccl-tests style: warm-up, repetitions, median and spread,
// and a correctness column (#wrong: reads whose 4 KiB block headers do not match the pattern
// written, plus failed requests). It writes one file per directory
// (`tierflow-probe-<pid>.dat`), only there, and removes it when done (also on error).
//
// Formulas (docs/storage.md): GB/s = bytes completed in the measured window / window seconds,
// summed over devices, median over repetitions; IOPS = requests completed / window seconds;
// latency = completion time - submission time per request, p50/p99 over all repetitions.
//
// Thread safety: RunDiskProbe is self-contained; do not run two probes on the same directory.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tierflow/core/status.h"
#include "tierflow/core/trace_record.h"
#include "tierflow/real/storage.h"

namespace tierflow::real {

struct DiskProbeOptions {
  std::vector<std::string> dirs;
  std::vector<int64_t> block_bytes = {4 << 10, 64 << 10, 1 << 20, 16 << 20};
  std::vector<int32_t> queue_depths = {1, 8, 32, 128};
  std::vector<std::string> ops = {"read", "write", "mix"};  // mix: 70 % reads, 30 % writes
  // Op "rw": per (readers, writers) pair, that many reader and writer streams at once, each its
  // own sequential stream of queue-depth requests over its own stretch of the file (what a
  // schedule's concurrent read and write tasks on one device are).
  std::vector<std::pair<int32_t, int32_t>> streams = {{1, 1}, {2, 2}, {4, 4}};
  // Op "rw" over several devices: stream k (readers first) sends all its requests to device
  // k mod devices, as a run's tasks on two disk entries do, each entry with its own ring; false:
  // every stream spreads its requests over every device.
  bool split_streams = false;
  std::vector<int32_t> device_counts;  // how many of dirs at once; empty: 1 and dirs.size()
  int64_t file_bytes = int64_t{1} << 30;
  double warmup_s = 0.25;
  double duration_s = 1.0;             // per repetition
  int32_t repetitions = 3;
  // Passes over the whole sweep, every other one backwards, each measuring every point with a
  // warm-up and `repetitions` windows: a point is the median of its windows from all passes. On
  // a shared machine whose disk runs fast and slow spells of a second or so, windows one right
  // after the other share a spell; passes apart, they sample several.
  int32_t passes = 1;
  bool random = false;                 // random block offsets instead of sequential
  std::string backend = "auto";        // uring, posix, auto
  // Leave the probe files in place, and reuse them (without refilling) when they exist with the
  // right size — for benchmarks that call the probe repeatedly. The caller removes them
  // (ProbeFilePath).
  bool keep_files = false;
  // Faults injected into the storage of every measured point (not the files' fill): for tests of
  // the probe's error paths, e.g. a failed sync after a point that wrote.
  std::vector<FaultRule> faults;
};

// The probe's file in `dir` for this process.
std::string ProbeFilePath(const std::string& dir);

// Most streams of one "rw" point: readers + writers.
inline constexpr int32_t kMaxProbeStreams = 64;

struct DiskProbeResult {
  std::string op;
  int32_t readers = 0;          // op "rw": reader and writer streams (each queue_depth deep)
  int32_t writers = 0;
  double read_bytes_per_s = 0;  // op "rw": medians over repetitions of each direction's rate
  double write_bytes_per_s = 0;
  int64_t block_bytes = 0;
  int32_t queue_depth = 0;
  int32_t devices = 0;
  double bytes_per_s = 0;       // median over repetitions, summed over devices
  double bytes_per_s_min = 0;
  double bytes_per_s_max = 0;
  double iops = 0;              // median
  double p50_latency_s = 0;
  double p99_latency_s = 0;
  int64_t wrong = 0;
  int64_t bytes = 0;            // total bytes measured over all repetitions
  // Seconds spent, after each pass over the point, handing what it wrote to the device (a sync
  // of its files, outside every window, so the next point starts with the host's write cache
  // drained), summed over passes; 0 for a point that wrote nothing.
  double sync_s = 0;
  std::string backend;
};

// InvalidArgument naming the first option RunDiskProbe cannot take (no directory, the memory
// back-end, a file under 16 MiB, a block size that is not a positive multiple of 4 KiB, an
// unknown op, a device count out of range, a queue depth below 1, "rw" stream counts that are
// negative, none or more than kMaxProbeStreams, fewer than one repetition or pass, an empty
// window); nothing is touched.
Status CheckDiskProbeOptions(const DiskProbeOptions& options);

// How many points one pass of the sweep measures (the points whose buffers fit the file).
int64_t DiskProbePoints(const DiskProbeOptions& options);

// Runs the sweep (CheckDiskProbeOptions first) and returns one result per point, in sweep
// order. `progress` (optional) is called after each point of each pass: with `final` false and
// an empty result before the last pass, with the point's result and `final` true in it. Trace
// records (one per device, op and window, source "probe", iteration = pass * repetitions +
// repetition) are appended to `trace` when non-null; an "rw" window's read record has `tasks` =
// its reader streams, its write record the writer streams.
using DiskProbeProgress = std::function<void(const DiskProbeResult& result, bool final)>;
StatusOr<std::vector<DiskProbeResult>> RunDiskProbe(const DiskProbeOptions& options, std::vector<TraceRecord>* trace,
                                                    const DiskProbeProgress& progress = {});

// The Linux block layer's I/O scheduler of the device under `dir` ("none", "mq-deadline",
// "kyber", "bfq", ...), from /sys/dev/block/<major>:<minor>[/..]/queue/scheduler; "" where
// there is none to read (tmpfs, overlay, not Linux). It matters to prediction: mq-deadline
// serves a deep sequential stream in sector order ahead of a shallow stream on the same device
// (measured on a virtual disk: 1 MiB writes at depth 1 beside a depth-8 stream got 3 MB/s under
// mq-deadline, 161 MB/s under none), where the simulator shares a device fairly.
std::string IoSchedulerOf(const std::string& dir);
// The active scheduler in the text of a queue/scheduler file: the bracketed name
// ("none [mq-deadline] kyber" -> "mq-deadline"), or the one name when there is no choice.
std::string ActiveIoScheduler(const std::string& text);
// A line for `probe all` and `validate` when `dir` (disk `device`, e.g. "nvme0") is behind a
// scheduler other than none, saying what it means for prediction; "" otherwise.
std::string IoSchedulerNote(const std::string& device, const std::string& dir);

// Formats results as the probe's table (header + one line per result).
std::string FormatDiskProbeTable(const std::vector<DiskProbeResult>& results, bool header = true);

}  // namespace tierflow::real
