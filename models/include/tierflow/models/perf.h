// Performance models: pure functions from a piece of work and the hardware to a time or a rate.
// The simulator uses them, calibrate fits their parameters, tests check them in closed form.
// docs/performance-models.md gives every formula.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tierflow/core/ops.h"
#include "tierflow/core/schedule.h"
#include "tierflow/core/status.h"
#include "tierflow/models/hardware.h"

namespace tierflow::models {

// Roofline with a fitted efficiency: max(flops / (peak * eff), bytes / hbm_bw) + overhead, eff
// being the phase's own efficiency where the GPU has one (ComputeEfficiency).
double ComputeTime(const GpuSpec& gpu, double flops, double bytes, Phase phase = Phase::kOther);
double ComputeEfficiency(const GpuSpec& gpu, Phase phase);

// Sustained bandwidth of one stream of requests of `block_bytes` with `queue_depth` in flight:
// the measured points where they surround it (NvmeSpec::read_bw_by_request), else Little's law.
double DiskReadBandwidth(const NvmeSpec& disk, int64_t block_bytes, int32_t queue_depth);
double DiskWriteBandwidth(const NvmeSpec& disk, int64_t block_bytes, int32_t queue_depth);
// Whether DiskReadBandwidth (write: DiskWriteBandwidth) takes the measured points at this
// request, rather than Little's law.
bool DiskStreamMeasured(const NvmeSpec& disk, bool write, int64_t block_bytes, int32_t queue_depth);
// Aggregate device bandwidth when `reads` read streams and `writes` write streams share it
// (sim divides it among them by their bytes in flight); equals the read or write peak when the
// other count is 0.
double DiskSharedCapacity(const NvmeSpec& disk, int32_t reads, int32_t writes);
// The mixed efficiency of `streams` concurrent streams (NvmeSpec::mixed_efficiency_by_streams,
// else mixed_efficiency).
double MixedEfficiency(const NvmeSpec& disk, int32_t streams);

// Host<->GPU copy of `bytes` (pinned or pageable), including latency.
double CopyTime(const PcieSpec& pcie, bool host_to_device, int64_t bytes, bool pinned);
// A pinned d2h that narrows fp32 gradients to `bytes` of bf16 (PcieSpec::d2h_bf16_bw, else
// d2h_bw), including latency.
double NarrowingCopyTime(const PcieSpec& pcie, int64_t bytes);

enum class Collective { kAllGather, kReduceScatter, kAllReduce };
// Ring alpha-beta: (n-1) * alpha + (n-1)/n * bytes / busbw for all-gather and reduce-scatter
// (bytes = the full gathered size), twice that for all-reduce. 0 when ranks <= 1.
double CollectiveTime(const InterconnectSpec& ic, Collective kind, int64_t bytes, int32_t ranks);

// A collective of `ranks` ranks on a cluster, the ranks filling nodes of hw.node.gpu_count GPUs in
// order: two levels, one after the other (hierarchical, as NCCL's tree and PXN paths and
// Megatron's two-level collectives): among the ranks of each node over the node's interconnect,
// and among the nodes over their NICs (nic_bw, nic_latency), each node's NIC carrying its share
// of the whole message, (nodes - 1) / nodes of it per pass. On one node, inter_s is 0 and intra_s
// is CollectiveTime over the interconnect. A reduction (reduce-scatter, all-reduce) of one rank
// in all moves nothing but its library's copy of the buffer: intra_s is bytes /
// interconnect.local_bw (0 when unset); a one-rank all-gather is the partition itself, free.
struct ClusterCollective {
  int32_t ranks_per_node = 1;  // on each node taking part (the last may hold fewer: the first's)
  int32_t nodes = 1;           // nodes taking part
  double intra_s = 0;          // CollectiveTime(node.interconnect, kind, bytes, ranks_per_node)
  double inter_s = 0;          // CollectiveTime({nic_bw, nic_latency}, kind, bytes, nodes)
};
ClusterCollective ClusterCollectiveTime(const HardwareSpec& hw, Collective kind, int64_t bytes, int32_t ranks);
// The NICs between nodes as an interconnect: bus bandwidth nic_bw, alpha nic_latency.
InterconnectSpec NetworkOf(const NodeSpec& node);

// CPU Adam over `elements` fp32 parameters with `threads` threads: compute-bound per core, and
// bounded by host memory bandwidth at kAdamBytesPerElement bytes moved per element.
inline constexpr double kAdamBytesPerElement = 28.0;  // read p, g, m, v; write p, m, v (fp32)
double AdamTime(const CpuSpec& cpu, int64_t elements, int32_t threads);
// AdamW on the GPU over `elements`, its states and fp32 gradient in the card's memory: streaming,
// kGpuAdamBytesPerElement bytes per element at GpuSpec::adam_bw (hbm_bw where none was
// measured), plus the kernel overhead. 0 when the GPU has neither rate.
inline constexpr double kGpuAdamBytesPerElement = 30.0;  // kAdamBytesPerElement and the bf16 copy written
double GpuAdamTime(const GpuSpec& gpu, int64_t elements);
// Host conversion (cast or accumulate) of `bytes` with `threads` threads.
double ConvertTime(const CpuSpec& cpu, int64_t bytes, int32_t threads);

// The cores the I/O path keeps busy while one stream of `block`-byte requests, `depth` in flight,
// runs (CpuSpec::io_read_cores, io_write_cores): the measured class nearest in log2 block plus
// log2 depth (the smaller block, then the smaller depth, on a tie); 0 when none was measured.
double IoCpuCores(const CpuSpec& cpu, bool write, int64_t block, int32_t depth);
// What the simulator runs beside such a stream alone: IoCpuCores, at most one core (the path's
// thread).
double IoPathCores(const CpuSpec& cpu, bool write, int64_t block, int32_t depth);

// The share of its rate alone that such a stream keeps while compute holds every core of its
// node (CpuSpec::io_read_beside_compute, io_write_beside_compute): the measured class nearest as
// IoCpuCores takes it; 1 when none was measured.
double IoRateBesideCompute(const CpuSpec& cpu, bool write, int64_t block, int32_t depth);

// The streams through one ring (one disk entry) at once, stream i of a class that keeps
// `cores[i]` busy alone (IoCpuCores): together they keep the largest of those figures busy,
// whatever their rates (the ring's thread serves its streams together, and what it takes does not
// follow the bytes it moves: docs/calibration.md, `cpu.io_rw`), shared among them in proportion
// to their figures. Different rings' loads add (`cpu.io_split`).
// The factor each figure is scaled by: the largest over the sum (1 for one stream, or none).
double IoPathScale(const std::vector<double>& cores);

// The least time one iteration of a schedule can spend on storage, whatever its order, request
// shapes and overlap: every device serves its bytes at no more than its peak rates, and reads and
// writes share an NVMe device at no better than the harmonic mix (mixed_efficiency <= 1), so the
// device needs read_bytes / read_bw + write_bytes / write_bw. Directories on one device
// (same_device_as) count on that device; a remote tier's reads and writes are taken as separate
// links (the larger of the two). Devices the schedule moves no bytes on are left out.
struct StorageLoad {
  std::string device;  // "nvme0", "remote0"
  int64_t read_bytes = 0;
  int64_t write_bytes = 0;
  double seconds = 0;
};
struct StorageBound {
  std::vector<StorageLoad> devices;
  double seconds = 0;   // the busiest device's
  std::string busiest;  // empty when the schedule does no storage I/O
};
// Errors name a task whose device is not in `hw` or lacks the bandwidth its op needs.
StatusOr<StorageBound> StorageLowerBound(const Schedule& schedule, const HardwareSpec& hw);

// Whether a run's memory fits the machine (docs/simulator.md, "Memory the machine has"): on each
// node, the peaks of its host pools (pinned memory) summed, against its DRAM less its reserve
// (cpu.host_reserve); each GPU pool's peak against one GPU's memory. `pool_peak_bytes` holds a
// run's peak per schedule pool. A hardware figure of 0 sets no limit. Sums of peaks, so that a
// plan is never called fitting when it does not.
struct MemoryFit {
  int64_t host_peak_bytes = 0;  // the fullest node's host pools, summed
  int64_t host_bytes = 0;       // what one node allows: host_memory - host_reserve
  std::string host_node;        // the fullest node's host device ("host", "node1.host")
  int64_t gpu_peak_bytes = 0;   // the largest GPU pool's peak
  int64_t gpu_bytes = 0;        // one GPU's memory
  std::string gpu_pool;         // which pool
  bool host_fits() const { return host_bytes <= 0 || host_peak_bytes <= host_bytes; }
  bool gpu_fits() const { return gpu_bytes <= 0 || gpu_peak_bytes <= gpu_bytes; }
  bool fits() const { return host_fits() && gpu_fits(); }
  // "" when it fits; else one sentence per memory exceeded, naming it and the bytes short.
  std::string Problem() const;
};
MemoryFit CheckMemoryFit(const Schedule& schedule, const HardwareSpec& hw, const std::vector<int64_t>& pool_peak_bytes);

}  // namespace tierflow::models
