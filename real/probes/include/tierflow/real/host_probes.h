// Probes of what runs on this host, each writing trace records (source "probe") that
// `tierflow calibrate` fits (docs/calibration.md): the emulated GPU's copies, gpu0's compute (each
// layer of a model, forward and backward, at given shapes, on the compute device a run would use:
// the CPU or, with `compute` "cuda", GPU 0), CPU AdamW and the fp32 -> bf16 cast by thread count,
// and memory bandwidth. Each probe runs the very functions `tierflow run` runs for the same tasks,
// on buffers larger than the last-level cache where a run's data would be cold. (A real GPU's
// copies: ProbeGpuCopies, gpu_probes.h, in the same record conventions.)
//
// Record conventions (the contract with calibrate):
//   copies   op h2d/d2h, task "probe.copy.pinned" | "probe.copy.pageable", resource gpu0.h2d/d2h
//   compute  op compute, task "probe.compute.<label>", resource gpu0.compute, layer, phase, and
//            the flops and bytes the schedule gives that layer's compute tasks (LayerCost);
//            threads: the CPU device's threads (0 on a GPU)
//   adam     op optimizer, task "probe.adam", bytes = 4 x elements, threads
//   convert  op convert, task "probe.convert.fp32_to_bf16", bytes = 4 x elements (the schedule's
//            convention for that cast), threads
//   memory   op convert, task "probe.memory.update", bytes = bytes read + written, threads
//   I/O path compute "probe.io_cpu.alone" | "probe.io_cpu.beside" (as compute) and stream windows
//            "probe.io_cpu.read" | "probe.io_cpu.write" (as the disk probe's) or
//            "probe.io_cpu.dispatch" (op barrier, tasks = hand-overs), one time origin
// One record per measured repetition; `iteration` is the repetition index.
//
// Thread safety: each probe is self-contained; run one at a time (they measure the machine).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tierflow/core/status.h"
#include "tierflow/core/trace_record.h"
#include "tierflow/real/train_config.h"

namespace tierflow::real {

struct HostProbeOptions {
  int32_t repetitions = 5;     // measured repetitions per point (after one warm-up)
  int32_t max_threads = 0;     // thread counts 1..max_threads are probed; 0 = the hardware's
  std::string compute = "cpu"; // the device ProbeCompute runs the layers on (RunOptions::compute)
  bool gpu_update = true;      // ProbeCompute also times the device's AdamW (once is enough per device)
  // Called after each point with a short description, for progress bars.
  std::function<void(const std::string&)> progress;
};

// h2d and d2h of the emulated GPU at each size (bytes), pinned and pageable host memory; and the
// pinned d2h that narrows fp32 gradients to `size` bytes of bf16 (records with `narrows`).
StatusOr<std::vector<TraceRecord>> ProbeCopies(const std::vector<int64_t>& sizes, const HostProbeOptions& options);

// What the schedule charges one layer (models::Layers() index) for its compute tasks, summed,
// and how many tasks that is in each phase (the probe record's `tasks`: the simulator charges
// its per-task overhead that often).
struct LayerCost {
  double forward_flops = 0, backward_flops = 0;
  double forward_bytes = 0, backward_bytes = 0;
  int32_t tasks = 1;
};

// Forward of every layer in order, then backward in reverse, `repetitions` times, on the compute
// device options.compute names (ComputeDevice: the CPU's math at config.threads threads, or
// GPU 0's layer steps, each timed from its call to its completion on the GPU, as the executor
// sees a compute task) with config.spec at config.batch x config.seq; `costs[l]` gives layer l's
// flops and bytes. `label` goes into the task names. Then, with options.gpu_update, the device's
// AdamW (an update on the GPU: docs/performance-models.md "GPU Adam") over kGpuUpdateProbeElements elements in its
// memory, `repetitions` records "probe.gpu_adam" (op optimizer, resource gpu0.compute, bytes 4
// per element; on a real GPU its span there), from which calibrate fits gpu.adam_bw.
// Unavailable, naming what is missing, when the device cannot be had.
inline constexpr int64_t kGpuUpdateProbeElements = int64_t{1} << 22;  // on the emulated GPU
inline constexpr int64_t kGpuUpdateProbeElementsCuda = int64_t{1} << 26;  // on a card: 1.9 GB moved
StatusOr<std::vector<TraceRecord>> ProbeCompute(const TrainConfig& config, const std::vector<LayerCost>& costs,
                                                const std::string& label, const HostProbeOptions& options);

// What the I/O path and the executor's hand-overs take from the cores (docs/calibration.md,
// `cpu.io_read`, `cpu.dispatch_load`): compute on every core (the layers of `config`, as
// ProbeCompute) alone for a window, then beside one stream for a window, stream by stream,
// `repetitions` rounds; a read or write stream also runs alone for a window in between (what
// the compute takes from the stream: `cpu.io_read_beside_compute`). A stream is a disk stream (the disk probe's, on `dir`) or, op
// "dispatch", the executor's hand-overs (ProbeDispatch's), each after an idle gap of 100 us, so
// that the threads sleep between them as between a run's small tasks. Records: compute
// "probe.io_cpu.alone" and "probe.io_cpu.beside" (as ProbeCompute's; a beside record counts when
// it lies inside its stream's window), and each stream's window: op read or write, task
// "probe.io_cpu.read" | "probe.io_cpu.write" (as the disk probe's windows; op "rw", a reader and
// a writer at once, one record of each op, task "probe.io_cpu.rw"; op "split", a reader on `dir`
// and a writer on `split_dir` at once, each directory through a ring of its own as a run's two
// disk entries are, likewise task "probe.io_cpu.split", resources nvme0.read and nvme1.write), or op barrier, task
// "probe.io_cpu.dispatch", `tasks` = the hand-overs in it; a stream's window alone: task
// "probe.io_cpu.read_alone" | "probe.io_cpu.write_alone"; all timed from one origin. The probe
// files are removed when done.
struct IoCpuProbeOptions {
  std::string dir;
  std::string split_dir;  // the writer's directory of op "split" (another disk entry)
  std::string backend = "auto";  // uring, posix, auto
  struct Stream {
    // read, write, rw (a reader and a writer at once, each of the block and depth), split (the
    // same over `dir` and `split_dir`, one ring each) or dispatch (block and depth unused)
    std::string op;
    int64_t block_bytes = 0;
    int32_t queue_depth = 0;
  };
  std::vector<Stream> streams = {{"read", 16 << 10, 1},  {"read", 256 << 10, 4},  {"read", 1 << 20, 8},
                                 {"write", 16 << 10, 1}, {"write", 256 << 10, 4}, {"write", 1 << 20, 8},
                                 {"rw", 16 << 10, 1},    {"rw", 1 << 20, 8},      {"dispatch", 0, 0}};
  double window_s = 1.0;
  int64_t file_bytes = int64_t{256} << 20;
};
StatusOr<std::vector<TraceRecord>> ProbeIoCpu(const TrainConfig& config, const std::vector<LayerCost>& costs,
                                              const IoCpuProbeOptions& io, const HostProbeOptions& options);

// AdamW and the fp32 -> bf16 cast over each element count, at 1..max_threads threads.
StatusOr<std::vector<TraceRecord>> ProbeOptimizer(const std::vector<int64_t>& element_counts,
                                                  const HostProbeOptions& options);

// The executor's hand-over of a task to a worker thread and of its completion back (two thread
// wake-ups), 50 x repetitions times: records "probe.dispatch" (op barrier, no bytes).
StatusOr<std::vector<TraceRecord>> ProbeDispatch(const HostProbeOptions& options);

// The optimizer's memory traffic without its arithmetic (four fp32 streams of `bytes` each,
// three updated in place; 28 bytes per element), at 1..max_threads threads.
StatusOr<std::vector<TraceRecord>> ProbeMemory(int64_t bytes, const HostProbeOptions& options);

}  // namespace tierflow::real
