// Hardware descriptions: a node (GPUs, PCIe, host memory, CPU, NVMe SSDs, remote tiers, NIC)
// and a cluster of such nodes, with the parameters of every performance model. Presets are YAML
// texts compiled into the binary, each number citing its source; a calibrated profile written by
// `tierflow calibrate` overrides any field.
//
// Thread safety: values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tierflow/core/status.h"

namespace YAML {
class Node;
}

namespace tierflow::models {

struct GpuSpec {
  std::string name;
  int64_t hbm_bytes = 0;
  double peak_flops = 0;          // dense bf16 with fp32 accumulation, FLOP/s
  double hbm_bw_bytes_per_s = 0;
  double compute_efficiency = 0.5;  // achieved fraction of peak on large GEMM-bound steps
  // Per-phase efficiencies (calibrate fits them apart: backward kernels, with recomputation,
  // rarely run at the forward's rate); 0 means compute_efficiency.
  double forward_efficiency = 0;
  double backward_efficiency = 0;
  double kernel_overhead_s = 0;     // fixed cost per compute task (launches, sync)
  // AdamW on the GPU (a sub-group whose optimizer states live there): the bytes it moves per
  // second, kGpuAdamBytesPerElement per element (perf.h GpuAdamTime); calibrate fits it from the
  // compute probe's update. 0: the card's memory bandwidth (hbm_bw), its streaming bound.
  double adam_bw_bytes_per_s = 0;
  // The device is emulated on the node's CPU cores (the CPU reference executor): its compute
  // and copies take those cores, shared with the optimizer and the conversions, instead of
  // running on a device and links of their own.
  bool shares_host_cores = false;
};

struct PcieSpec {
  double h2d_bw_bytes_per_s = 0;       // pinned, per direction, per GPU
  double d2h_bw_bytes_per_s = 0;
  // A d2h that narrows fp32 gradients to bf16 on the way (the overflow check and the cast, then
  // the copy), bytes of bf16 out per second; 0: as d2h_bw (the narrowing free, as a GPU's kernel
  // beside a PCIe copy nearly is). An emulated GPU does it on the host's cores: calibrate measures it.
  double d2h_bf16_bw_bytes_per_s = 0;
  double pageable_factor = 0.5;        // pageable bandwidth / pinned bandwidth
  double latency_s = 0;
  double root_complex_bw_bytes_per_s = 0;  // shared by all GPUs and NVMe DMA of the node
};

// Disk throughput follows Little's law with a saturating peak and, where given, an IOPS limit
// (small requests: the device's or the host's per-request cost caps the rate whatever the depth):
//   bw(block, qd) = min(peak, qd * block / (latency + block / peak), iops * block)
// or, where the stream was measured (read_bw_by_request, write_bw_by_request) and (block, qd)
// lies within the measured grid, the measurement interpolated, at most the peak;
// and concurrent reads and writes share the device as
//   1 / mixed = r / read_peak + w / write_peak, scaled by mixed_efficiency, or, where measured,
// by mixed_efficiency_by_streams at the number of streams reading and writing at once.
// One measured stream: requests of `block_bytes`, `queue_depth` in flight, sustained bytes/s.
struct MeasuredBandwidth {
  int64_t block_bytes = 0;
  int32_t queue_depth = 0;
  double bytes_per_s = 0;
  bool operator==(const MeasuredBandwidth&) const = default;
};

struct NvmeSpec {
  std::string name;
  int64_t capacity_bytes = 0;
  double read_bw_bytes_per_s = 0;
  double write_bw_bytes_per_s = 0;
  double read_latency_s = 0;
  double write_latency_s = 0;
  double read_iops = 0;   // requests per second at most; 0 = no limit
  double write_iops = 0;
  double mixed_efficiency = 1.0;  // aggregate under mixed traffic / the harmonic mix
  // (streams, efficiency) points, streams >= 2 ascending, efficiency in (0, 1]: the mixed
  // efficiency as a function of how many streams read and write the device at once
  // (`probe disk --ops rw`, fitted by calibrate). Between points linear in log2(streams), beyond
  // them the nearest point's value. Empty: mixed_efficiency whatever the count.
  // YAML: `mixed_efficiency_by_streams: {2: 0.88, 8: 0.80}`.
  std::vector<std::pair<int32_t, double>> mixed_efficiency_by_streams;
  // One stream's measured bandwidth per (block, depth), sorted by block then depth (`probe disk`,
  // kept by calibrate beside its fit). Where (block, qd) has measured points at the blocks and
  // depths around it, DiskRead/WriteBandwidth interpolates them (bilinear in log2 block, log2
  // depth, on log bandwidth) instead of the fit, which three parameters cannot bend to every
  // device's depth scaling. Elsewhere the fit. YAML: `read_bw_by_request: {16384x1: 2.5e8, ...}`
  // (block bytes x depth: B/s).
  std::vector<MeasuredBandwidth> read_bw_by_request, write_bw_by_request;
  // >= 0: this entry is another directory (partition, file system) on the device of entry
  // nvme<same_device_as>, an earlier entry that shares with none: the two share one media link
  // and its mixed-traffic model (the first entry's), each keeping its own Little's-law curve.
  // YAML: `same_device_as: nvme0`. -1: a device of its own.
  int32_t same_device_as = -1;
};

struct RemoteTierSpec {  // e.g. a parallel file system mount shared by the cluster
  std::string name;
  double read_bw_bytes_per_s = 0;
  double write_bw_bytes_per_s = 0;
  double latency_s = 0;
};

// What the host's I/O path (the storage engine's ring thread and its wake-ups, the kernel's block
// layer and interrupts, a hypervisor's exits) takes from the cores while one stream of a class
// runs: `block_bytes` requests, `queue_depth` in flight, keep `cores` of them busy. Measured as
// the slowdown of compute on every core beside the stream (`probe io-cpu`: cores x (1 - time
// alone / time beside)), so it includes what a fork-join kernel loses when one of its threads is
// preempted. Not a function of the request rate alone: here a 16 KiB stream at depth 1 took 0.8
// cores at 16 k requests/s and at depth 8 0.5 cores at 56 k/s (the ring thread sleeps and wakes
// for each request at depth 1), so the classes are kept as measured (docs/performance-models.md).
struct IoCpuPoint {
  int64_t block_bytes = 0;
  int32_t queue_depth = 0;
  double cores = 0;
  bool operator==(const IoCpuPoint&) const = default;
};

// The share of its rate alone that a disk stream of a class keeps while compute holds every core
// of the node: the stream's I/O path (the ring thread and its wake-ups, a hypervisor's exits)
// then waits for a core, and each request's completion is handled later. Measured as the
// stream's rate beside compute on every core over its rate alone, the two windows close in time
// (`probe io-cpu`). Here 1 MiB x 8 reads kept 0.63 of 5.2 GB/s and 16 KiB x 1 writes 0.5
// (docs/calibration.md, `cpu.io_read_beside_compute`).
struct IoRateKept {
  int64_t block_bytes = 0;
  int32_t queue_depth = 0;
  double kept = 1;
  bool operator==(const IoRateKept&) const = default;
};

struct CpuSpec {
  int32_t cores = 0;
  int64_t host_memory_bytes = 0;
  double memory_bw_bytes_per_s = 0;
  double adam_elements_per_s_per_core = 0;  // fp32 Adam, one core
  double convert_bytes_per_s_per_core = 0;  // dtype casts and accumulation on the host
  // What the executor's hand-over of one task costs on this host: the dispatch thread wakes the
  // resource's worker, which wakes the dispatch thread when done (two thread wake-ups). A delay
  // before every task but reads and writes (docs/simulator.md); 0: none. Calibrate measures it.
  double task_overhead_s = 0;
  // What one hand-over takes from the cores, in core-seconds: its two wake-ups (and, on a VM,
  // the exits they cost) preempt the threads running there, and a fork-join compute on every
  // core waits for its preempted thread. Measured as the slowdown of compute on every core
  // beside a chain of hand-overs with idle gaps (`probe io-cpu`, stream "dispatch"). The
  // simulator runs it beside the task's hand-over delay (docs/simulator.md); 0: none.
  double task_overhead_cpu_s = 0;
  // The I/O path's load per stream class and direction (IoCpuPoint), sorted by block then depth;
  // a stream takes its nearest measured class's (IoCpuCores). Empty: none.
  // YAML: `io_read_cores: {16384x1: 0.85, 1048576x8: 0.27}` (block bytes x depth: cores).
  std::vector<IoCpuPoint> io_read_cores, io_write_cores;
  // The share of its rate a stream keeps while compute holds every core (IoRateKept), sorted by
  // block then depth; a stream takes its nearest measured class's (IoRateBesideCompute). Empty:
  // it keeps all of it. YAML: `io_read_beside_compute: {16384x1: 0.7, 1048576x8: 0.63}`.
  std::vector<IoRateKept> io_read_beside_compute, io_write_beside_compute;
  // DRAM kept from pinned buffers (the OS, the page cache, the framework): what `tune` may not
  // pin. -1 (absent): an eighth of host_memory (HostReserveBytes).
  int64_t host_reserve_bytes = -1;
  int64_t HostReserveBytes() const { return host_reserve_bytes >= 0 ? host_reserve_bytes : host_memory_bytes / 8; }
};

struct InterconnectSpec {       // the GPUs' collective path
  std::string kind;             // "pcie" or "nvlink"
  double bus_bw_bytes_per_s = 0;  // nccl-tests busbw for large messages
  double latency_s = 0;          // alpha per ring step
  // A reduction (reduce-scatter, all-reduce) of one rank moves nothing between GPUs, but its
  // library still copies the buffer (out of place: gloo's host copy, NCCL's device copy) at this
  // rate; 0: free. A one-rank all-gather is free (DeepSpeed hands over the partition).
  double local_bw_bytes_per_s = 0;
};

struct NodeSpec {
  std::string name;
  std::string source;
  int32_t gpu_count = 0;
  GpuSpec gpu;
  PcieSpec pcie;
  CpuSpec cpu;
  InterconnectSpec interconnect;
  std::vector<NvmeSpec> nvme;
  std::vector<RemoteTierSpec> remote;
  double nic_bw_bytes_per_s = 0;
  double nic_latency_s = 0;  // alpha per step of a collective between nodes
};

struct HardwareSpec {
  NodeSpec node;
  int32_t nodes = 1;
};

StatusOr<HardwareSpec> HardwarePreset(std::string_view name);  // error lists the known names
std::vector<std::string> HardwarePresetNames();
// The YAML text of a preset, with its source comments (what `tierflow hardware NAME` prints).
StatusOr<std::string> HardwarePresetYaml(std::string_view name);
// Accepts {preset: NAME, <overrides>} or a full description; sizes, bandwidths and durations
// need units ("80 GiB", "25 GB/s", "2 us"); unknown keys are errors naming the key path.
StatusOr<HardwareSpec> HardwareFromYaml(const YAML::Node& node);
// The same from YAML text (parse errors become Statuses); lets callers avoid yaml-cpp.
StatusOr<HardwareSpec> HardwareFromYamlText(std::string_view yaml_text);
// A full description in the format HardwareFromYaml reads, numbers in base units with 17
// significant digits, so HardwareFromYamlText(HardwareToYaml(hw)) == hw (what calibrate writes).
std::string HardwareToYaml(const HardwareSpec& hw);
// The same fields as the JSON object of a schedule's hardware section: what YamlToJson makes of
// HardwareToYaml's text, written directly.
std::string HardwareToJson(const HardwareSpec& hw);
Status ValidateHardware(const HardwareSpec& hw);

// ---- Device names (docs/hardware-format.md "Device names") -----------------------------------
// A schedule names the hardware's devices: on one node gpu{i}, host, nvme{i} and remote{i}; on a
// cluster (nodes > 1) each device of node n as `node{n}.` and its name on the node (node1.gpu3,
// node1.nvme0). `net` is the network between ranks. A name without a node is node 0's.
enum class HardwareDeviceKind { kGpu, kHost, kNvme, kRemote, kNet };
struct HardwareDevice {
  HardwareDeviceKind kind = HardwareDeviceKind::kHost;
  int32_t node = 0;
  int32_t index = 0;  // within the node: node.nvme[index], node.remote[index], its GPU index
};
// `local` (gpu0, host, nvme1, ...) on node `node`: the bare name on one node, else prefixed.
std::string NodeDeviceName(const HardwareSpec& hw, int32_t node, std::string_view local);
// InvalidArgument naming the device when it names no device of `hw` (an unknown name, a node or
// index out of range).
StatusOr<HardwareDevice> ParseHardwareDevice(std::string_view name, const HardwareSpec& hw);

}  // namespace tierflow::models
