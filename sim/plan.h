// Private to sim/: how each task of a schedule becomes a SimGrid activity on the platform built
// from a HardwareSpec. Planning is plain C++ (no SimGrid) so that every input error is found
// before a simulation process is started.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tierflow/core/schedule.h"
#include "tierflow/core/status.h"
#include "tierflow/models/hardware.h"

namespace tierflow::sim::internal {

// Exec amounts are in units of 1e-9 s of one core: hosts run at 1e9 "flop"/s per core, so
// SimGrid's work-amount precision (1e-5) is 1e-14 s, far below anything we report.
inline constexpr double kExecSpeed = 1e9;
// FATPIPE links that only carry a latency (or a per-flow cap) use this bandwidth when uncapped.
inline constexpr double kUnlimitedBw = 1e15;

enum class ActivityKind : uint8_t { kInstant, kComm, kExec };

// A source or destination endpoint of a Comm that needs its own first link: one per disk and
// direction and (block, queue depth, bytes in flight) class, carrying that class's per-flow rate
// cap and latency; one per collective (kind, ranks) class carrying its alpha term.
struct Endpoint {
  std::string name;      // host name
  int32_t node = 0;      // whose links the route crosses
  double cap_bw = 0;     // FATPIPE bandwidth of its private link, bytes/s
  double latency_s = 0;  // latency of its private link
  // A disk stream's bytes queued on the device: min(block x depth, the transfer's bytes). The
  // device shares its capacity among the streams on it in proportion to these (sim/engine.cc).
  double in_flight_bytes = 0;
  // A disk stream's share of its rate kept while user execs hold every core of its node
  // (models::IoRateBesideCompute; sim/engine.cc ShareDisk); 1 for every other endpoint.
  double kept_beside_compute = 1;
  int32_t disk = -1;     // nvme index whose media link the route crosses (its device's first entry), or -1
  // nvme index whose I/O path serves the stream: the entry itself, a directory on another's
  // device included (the executor runs one ring and its thread per entry), or -1. The loads of
  // one ring's streams combine (models::IoPathScale); those of different rings add.
  int32_t ring = -1;
  int32_t remote = -1;   // remote tier index, or -1
  bool collective = false;  // within the node, over its interconnect
  bool network = false;     // between nodes, over its NIC
  bool write = false;    // towards the device (disk/remote write)
};

struct TaskPlan {
  ActivityKind kind = ActivityKind::kInstant;
  // Comm: `endpoint` indexes Plan::endpoints; `gpu` >= 0 for h2d/d2h (endpoint unused).
  int32_t endpoint = -1;
  int32_t gpu = -1;        // over the cluster: node * gpus per node + its index on the node
  int32_t node = 0;        // of an exec on the CPU
  bool to_device = false;  // comm direction: host memory -> device (write, h2d)
  bool on_cpu = false;     // exec on the CPU host; otherwise on gpu
  double amount = 0;       // comm: bytes; exec: seconds * kExecSpeed per thread
  // A collective over `nodes` nodes is one comm per node and level, the levels one after the
  // other (models::ClusterCollectiveTime): `endpoint` is node 0's endpoint of the within-node
  // level, the nodes' next to it; `network_endpoint` likewise for the level between nodes, whose
  // comms carry `network_amount` bytes each (none on one node).
  int32_t nodes = 1;
  int32_t network_endpoint = -1;
  double network_amount = 0;
  int32_t threads = 1;
  // An exec on a host whose execs can never outnumber its cores (MakePlan: every resource
  // that runs execs there, at its concurrency and its tasks' most threads, fits, no load of the
  // I/O path or a hand-over runs there, and it has no hand-over of its own): it always runs at
  // its full rate, so the engine times it, `delay_s` then `amount / kExecSpeed`, without a
  // SimGrid activity.
  bool alone = false;
  // A disk read or write's load on its node's cores (CpuSpec::io_read_cores, io_write_cores), an
  // exec beside the transfer, ahead of every other exec there (the kernel and interrupts preempt
  // user threads): alone at its own rate, `cpu_amount` (seconds * kExecSpeed of one core) at
  // `cpu_bound` (cores * kExecSpeed, at most one core). Beside other streams on its device the
  // engine scales its bound (models::IoPathScale) and runs it for as long as its stream flows
  // (Runner::BoundLoads). The task ends when both have. 0: none.
  double cpu_amount = 0;
  double cpu_bound = 0;
  // Before it begins: the executor's hand-over of the task to its worker (cpu.task_overhead),
  // and, from its launch, that hand-over's load on its node's cores (cpu.task_overhead_cpu): an
  // exec of `handover_amount` (seconds * kExecSpeed of one core) at no more than
  // `handover_bound`, ahead of user execs, as the I/O path's. 0: none.
  double delay_s = 0;
  double handover_amount = 0;
  double handover_bound = 0;
  int32_t handover_node = 0;
  // For the trace record.
  int64_t block_bytes = 0;
  int32_t queue_depth = 0;
  int32_t record_threads = 0;
};

struct Plan {
  std::vector<TaskPlan> tasks;  // per schedule task
  std::vector<Endpoint> endpoints;
  int32_t nodes = 1;
  int32_t gpus_per_node = 0;
  int32_t gpus = 0;  // over the cluster
  int32_t nvmes = 0;
  int32_t remotes = 0;
  bool collectives_cross_root = false;  // PCIe interconnect: collectives load the root complex
};

// Maps schedule devices to the hardware and each task to its activity. Errors: InvalidArgument
// naming the device (unknown or out of range) or the task (op not possible on its device, or a
// bandwidth it needs left at 0 in the hardware).
StatusOr<Plan> MakePlan(const Schedule& schedule, const models::HardwareSpec& hw);

}  // namespace tierflow::sim::internal
