// The executor's op table: what each op of the schedule does in a run. One handler per op family,
// each in its own file here, owns both halves of its op:
//   check    what the op asks of a task, run when the schedule is loaded (CheckRunnable), so that
//            a schedule the executor cannot run is refused before the first byte moves, naming
//            the task and the rule;
//   open     what the family needs for the whole run beyond the run's state, opened once at
//            set-up (a back-end of its own: the collectives' NCCL) and kept in the run's state
//            for the family (RunState::Keep), so that no other file knows of it;
//   prepare  a started instance: its tensors resolved to bytes in the run's state (RunState),
//            their versions checked, and its work (on the resource's worker) and finish (on the
//            dispatch thread, after success) left in the Job.
//   io_op.cc          read, write: disk homes <-> host buffers (IoWindow requests)
//   copy_op.cc        h2d, d2h: parameters onto gpu0, gradients off it (with the overflow check)
//   compute_op.cc     compute: a layer's forward or backward on the compute device
//   optimizer_op.cc   optimizer: AdamW over one sub-group, on the CPU or on the GPU
//   convert_op.cc     convert: the global gradient check, fp32 -> bf16 parameters, bf16 -> fp32
//                     gradients, a tensor copied between host buffers
//   collective_op.cc  allgather, reducescatter, allreduce over the ranks (ranks.h)
// The dispatch loop (run_loop.cc) knows ops only through HandlerOf. A new op is one handler file
// and its lines in op_table.cc (the build compiles every ops/*.cc).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "tierflow/core/dispatcher.h"
#include "tierflow/core/schedule.h"
#include "tierflow/core/status.h"
#include "tierflow/real/compute_device.h"
#include "tierflow/real/io_window.h"

namespace tierflow::real::exec {

class RunState;

// One started instance of a task.
struct Job {
  Instance instance;
  size_t index = 0;                  // its place among the run's jobs (RunState::JobDone)
  double start_s = 0;
  std::function<Status()> work;      // on a worker; empty for I/O and instant ops
  std::function<void()> finish;      // on the dispatch thread, after success
  std::unique_ptr<IoWindow> sink;    // reads and writes: their requests, completing the job
  DeviceSpan device_span;      // its work's span on a real GPU, set by work (the record's)
  int32_t tier_slot = -1;            // the node-wide lock slot it holds (tier_locks.h), or -1
};

struct OpHandler {
  // What the op asks of task `t` beyond the rules every op shares; `who` names the task. Null:
  // nothing more.
  Status (*check)(const Schedule& s, const TaskSpec& t, const std::string& who) = nullptr;
  // Prepares instance `iteration` of task `task` (`t`). Null: nothing to do (alloc, free, barrier).
  Status (*prepare)(RunState& run, const TaskSpec& t, int32_t task, int64_t iteration, Job& job) = nullptr;
  // Its work runs on host memory only: every buffer it names is in a host pool.
  bool host_memory = false;
  // Its work runs on the CPU threads of its resource's pool (its trace record counts them).
  bool cpu_threads = false;
  // It may also run on a GPU's resource, its work then on gpu0 memory only (the optimizer: a
  // sub-group whose states live on the GPU); the flags above describe it on a CPU's.
  bool on_gpu_too = false;
  // Opens what the family keeps for the whole run (RunState::Keep), once, at set-up: after the
  // compute device is made and before any buffer or store. Every rank calls it at the same
  // point, so that it may agree with the others (RunState::AgreeAcrossRanks). Null: nothing.
  Status (*open)(RunState& run) = nullptr;
};

// The handler of `op`.
const OpHandler& HandlerOf(Op op);

// Every family's open (OpHandler::open), once each, in the table's order.
Status OpenHandlers(RunState& run);

// Every task's contract: the rules every op shares, then its op's check. InvalidArgument naming
// the task and the rule.
Status CheckTaskContracts(const Schedule& schedule);

}  // namespace tierflow::real::exec
