// The real executor: runs a schedule for real — the same schedule file that `tierflow sim`
// evaluates — fine-tuning a Llama-family model with `gpu0` emulated in host memory or, with
// RunOptions::compute = "cuda", on GPU 0 (tierflow/real/compute_device.h).
//
// One dispatch thread drives the core Dispatcher. Each started instance is prepared on that
// thread (operands resolved, versions checked), then its work runs where the schedule says:
// reads and writes on the Storage back-end (io_uring, or posix threads) against one store file
// per --disk directory, everything else on a worker thread per resource. Completions come back
// through one queue the dispatch thread sleeps on; nothing busy-waits.
//
// What each task does with its tensors is docs/schedule-format.md "Tensors". Every piece of
// state carries a version (the number of optimizer updates it reflects), so a schedule whose
// dependencies let a task use stale state — a compute before its parameters arrive, an update
// before its gradient — stops with an error naming the task, the state and both versions,
// instead of training on the wrong bytes. The math is the same as RunInMemory's plain loop, so
// the final weights are bit-identical whatever the schedule (tests/exec).
//
// Thread safety: calls are independent (each owns its threads, buffers and files); two runs must
// not share --disk or checkpoint directories.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tierflow/core/schedule.h"
#include "tierflow/core/status.h"
#include "tierflow/core/trace_record.h"
#include "tierflow/real/collective.h"
#include "tierflow/real/storage.h"
#include "tierflow/real/train_config.h"

namespace tierflow::real {

// Every `every` iterations done (counted as checkpoints count them, from the first iteration of
// a resumed run's start), the fp32 master weights after that iteration, gathered from wherever
// the schedule keeps them (MakeParamLayout order), are handed to `fn` on the calling thread; an
// error it returns ends the run. One rank only (RunSchedule refuses it with several).
struct MasterHook {
  int64_t every = 0;  // 0: never
  std::function<Status(int64_t iterations_done, const std::vector<float>& master)> fn;
};

struct RunOptions {
  int64_t iterations = 1;
  // A directory per storage device: "DIR" for nvme0, nvme1, ..., then remote0, ... in order, or
  // "NAME=DIR"; with disk_root, each device without one gets disk_root/NAME (disk_set.h).
  std::vector<std::string> disks;
  std::string disk_root;
  std::string storage = "auto";     // "uring", "posix", "memory" (store files in RAM), "auto"
  // Where gpu0 is: "cpu" (emulated in host memory, fp32 math on bf16 parameters) or "cuda" (GPU 0,
  // bf16 activations, cuBLAS and our kernels; needs a build with the CUDA toolkit).
  std::string compute = "cpu";
  // No dispatcher and no threads: each iteration runs every task in the schedule's topological
  // order, one at a time on the calling thread (I/O submitted and waited for): "the same ops in a
  // plain loop", the baseline of the dispatcher's overhead. Pools are not enforced.
  bool plain_loop = false;
  // Checkpoints: with `checkpoint_dir` and `checkpoint_every` > 0, the training state (master
  // weights, Adam moments, step, loss scaler, iterations done) is saved atomically there after
  // every `checkpoint_every` iterations (real/checkpoint.h). With `resume`, a committed checkpoint
  // in `checkpoint_dir` is the starting point and `iterations` is the total to reach: the result
  // is bit-identical to an uninterrupted run.
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  bool resume = false;
  // For tests of I/O failures: the storage back-end is wrapped in the fault-injecting one with
  // these rules (storage.h).
  std::vector<FaultRule> faults;
  // For tests of crash recovery: after this many task completions the process exits at once
  // (std::_Exit, no clean-up), as a kill -9 would leave it. 0 = never.
  int64_t exit_after_tasks = 0;
  // With several ranks, the same once this process has written its part of the K-th checkpoint the
  // run saves, before that checkpoint is committed. 0 = never.
  int64_t exit_in_checkpoint = 0;
  // Called on the calling thread after each iteration completes, with its loss.
  std::function<void(int64_t iteration, double loss)> on_iteration;
  // The master weights every few iterations (--save-every: a Hugging Face directory).
  MasterHook on_master;
  // Trace records held, so that a long run's memory stays flat: with keep_iterations > 0,
  // RunResult::records ends with the records of the last keep_iterations iterations only (the
  // run drops older ones as it goes, in batches). With on_record, every record is handed over once,
  // in completion order, on the calling thread: as it leaves that window, or at the run's end;
  // an error it returns ends the run with that error.
  int64_t keep_iterations = 0;  // 0: every record
  std::function<Status(const TraceRecord&)> on_record;
  // Several ranks (training.data_parallel > 1): this process's rank of them, whose collectives
  // (collective.h: mpi under mpirun, or a local group of ranks on threads) it runs. Each rank
  // runs its part of the schedule; the result's master weights and losses are every rank's
  // (docs/executor.md "Many ranks"). Null: one rank.
  Collective* collective = nullptr;
  // With `collective`: a group of the same ranks whose operations take gpu0 memory
  // (Collective::device_memory()), for the collectives of gpu0's buffers (the all-gathers of
  // parameters, the reduce-scatters of gradients). Tests give a local group standing in for NCCL
  // over the emulated gpu0. Null: the run opens NCCL where gpu0 is a GPU, the build has NCCL and
  // every rank has a GPU of its own; else those collectives go through `collective`, staged
  // through host memory.
  Collective* device_collective = nullptr;
};

struct RunResult {
  // One per instance, source "real", times from run start; the last RunOptions::keep_iterations
  // iterations' only, when that is set.
  std::vector<TraceRecord> records;
  std::vector<double> loss;                // per iteration run now (from first_iteration)
  // The records' zero on the machine's monotonic clock (MonotonicSeconds): the records of ranks
  // on one machine line up by it.
  double clock_origin_s = 0;
  int64_t first_iteration = 0;             // > 0 when resumed from a checkpoint
  std::vector<int64_t> pool_peak_bytes;    // per schedule pool (from the dispatcher): every rank's
  // Several ranks: each rank's own figures, in rank order, and every rank's pool peaks by pool
  // name (pool_peak_bytes maps them onto the schedule's pools; direct_io_bytes and
  // buffered_io_bytes are the ranks' sums). `node` numbers the ranks' hosts in rank order.
  struct RankFigures {
    int32_t rank = 0;
    int32_t node = 0;
    int64_t direct_io_bytes = 0, buffered_io_bytes = 0;
    MemoryPeak gpu_memory;  // its GPU's
    int64_t host_pool_peak_bytes = 0;  // its host pools' peaks, summed
  };
  std::vector<RankFigures> ranks;
  std::vector<std::pair<std::string, int64_t>> pool_peaks;
  // The most gpu0 memory the run's GPU buffers and GPU-resident parameters held at once
  // (allocated), and the most the compute device kept for them, in use or for reuse (reserved):
  // its count. Its own working memory (activations, workspace) is not included. With several
  // ranks, this rank's GPU (each rank's: RankFigures).
  MemoryPeak gpu_memory;
  int64_t tasks = 0;                       // instances executed
  double wall_s = 0;
  // RunInMemory, which has no records: when each iteration ended, seconds from its start.
  std::vector<double> iteration_end_s;
  // Time the dispatch thread spent working (dispatching, preparing, finishing, recording), not
  // waiting for completions: the executor's own overhead.
  double dispatch_busy_s = 0;
  // Bytes the tasks read and wrote with O_DIRECT, and through the page cache (a tensor whose
  // offset, size or buffer place is not aligned as the file's O_DIRECT needs; a file system
  // without O_DIRECT). Page-cache bytes run at memory speed, not the disk's.
  int64_t direct_io_bytes = 0;
  int64_t buffered_io_bytes = 0;
  // Host memory made for buffers and staging blocks once the iterations had begun: each fresh
  // block is mapped on the dispatch thread while tasks are in flight. Each host pool's arena is
  // made at set-up (docs/executor.md), so this stays 0 unless a buffer finds no free run in an
  // arena that cannot hold every instance of its pool's several buffer sizes at once
  // (fragmentation), or an O_DIRECT request needs an aligned staging block of a new size.
  int64_t host_bytes_made_in_run = 0;
  // Why each disk that goes through the page cache does ("nvme0: ..."): its file system refuses
  // O_DIRECT, or needs more alignment than host blocks have, or the first tensor homed there
  // that is not aligned as O_DIRECT needs. Empty when every disk is O_DIRECT.
  std::vector<std::string> buffered_disks;
  // Where the run does otherwise than the schedule says, a line each (a CPU resource given fewer
  // or more threads than its tasks ask for: --threads, or fewer cores than planned, or the
  // rank's share of them where ranks share the machine).
  std::vector<std::string> notes;
  std::vector<float> master;               // the final fp32 master weights, ParamLayout order
  // Each training checkpoint this run saved (RunOptions::checkpoint_every), in order: the
  // iterations done at it, the seconds spent gathering the states from their homes (disk reads
  // for offloaded states), the seconds of the atomic save (written, fsynced, committed), and its
  // payload bytes. The dispatch loop starts nothing new meanwhile: training is paused.
  struct CheckpointTiming {
    int64_t iterations_done = 0;
    double gather_s = 0;
    double save_s = 0;
    int64_t bytes = 0;
  };
  std::vector<CheckpointTiming> checkpoints;
};

// The model and training set-up a schedule needs and the run supports: the training's ranks and
// micro-steps, a compute resource of concurrency 1, param16 units matching the model's layout,
// and a global gradient check (an overflow_check_and_norm task) wherever the training's math
// needs one (dynamic loss scaling, clipping). InvalidArgument naming the first unsupported thing.
Status CheckRunnable(const Schedule& schedule, const TrainConfig& config);

// Runs `options.iterations` iterations of `schedule`. Errors: CheckRunnable's, the disk checks
// (disk_set.h), a task's failure (named), and the dispatcher's deadlock report.
StatusOr<RunResult> RunSchedule(const Schedule& schedule, const TrainConfig& config, const RunOptions& options);

// The same training as a plain loop with everything in memory (on the `compute` device, as
// RunOptions::compute; the optimizer on the CPU): the reference the executor's weights are
// compared against, and the baseline of the dispatcher's overhead.
StatusOr<RunResult> RunInMemory(const TrainConfig& config, int64_t iterations,
                                const std::function<void(int64_t, double)>& on_iteration = {},
                                const std::string& compute = "cpu", const MasterHook& on_master = {});

}  // namespace tierflow::real
