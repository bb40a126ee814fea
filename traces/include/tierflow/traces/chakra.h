// Chakra execution traces of a schedule (MLCommons Chakra, the format ASTRA-sim replays;
// docs/trace-format.md "Chakra"): one file per data-parallel rank, a stream of messages each
// preceded by its length as a varint, GlobalMetadata first, then one Node per task of the rank.
//
//   compute                      COMP_NODE       num_ops (flops), tensor_size (bytes touched)
//   h2d / d2h                    MEM_LOAD_NODE / MEM_STORE_NODE   tensor_size
//   read / write                 STORAGE_NODE (level DEVICE), or MEM_LOAD / MEM_STORE with
//                                storage_as_memory; tensor_size, the device, request size, depth
//   allgather, reducescatter,    COMM_COLL_NODE  comm_type, comm_size (bytes)
//   allreduce
//   optimizer, convert           COMP_NODE (tierflow.device: the host; work the iteration waits
//                                for, so not is_cpu_op, which ASTRA-sim passes over)
//   alloc, free, barrier         COMP_NODE of no work, is_cpu_op (ASTRA-sim passes over them)
//
// A task's deps are its node's data_deps (what ASTRA-sim's feeder waits for); its ctrl_deps are
// the task that ran before it on its resource in the timed iteration, where the resource runs
// one at a time (the order the dispatcher's queue added beside the deps). Each node's start and
// duration are the timed iteration's, in microseconds from that iteration's first start, and
// exactly in seconds as attributes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "tierflow/core/schedule.h"
#include "tierflow/core/status.h"

namespace tierflow::traces {

// Each task's start and end in one iteration (seconds), indexed as schedule.tasks().
struct IterationTimes {
  int64_t iteration = 0;
  std::vector<double> start_s;
  std::vector<double> end_s;
};

struct ChakraOptions {
  // Disk reads and writes as memory loads and stores with the device as an attribute, for tools
  // that predate STORAGE_NODE (ASTRA-sim 2.x's feeder does not know it).
  bool storage_as_memory = false;
  std::string prefix = "tierflow";  // files are <dir>/<prefix>.<rank>.et, as ASTRA-sim names them
};

struct ChakraFile {
  std::string path;
  int32_t rank = 0;
  int64_t nodes = 0;
  int64_t bytes = 0;
};

// The number of data-parallel ranks whose tasks the schedule names (1 when none says).
inline int32_t ScheduleRanks(const Schedule& schedule) {
  int32_t ranks = 1;
  for (const TaskSpec& t : schedule.tasks()) ranks = std::max(ranks, t.rank + 1);
  return ranks;
}

// Writes one trace per rank into `dir` (created if missing; each file written atomically). Rank
// r's nodes are its tasks and every task of every rank (collectives, barriers). InvalidArgument
// when `times` does not cover every task; Unavailable when this build has no protobuf.
StatusOr<std::vector<ChakraFile>> WriteChakraTraces(const Schedule& schedule, const IterationTimes& times,
                                                    const std::string& dir, const ChakraOptions& options);

}  // namespace tierflow::traces
