#include "tierflow/models/perf.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

namespace tierflow::models {
namespace {

// Little's law with a saturating peak: `queue_depth` requests in flight, each taking the fixed
// latency plus its transfer time at peak bandwidth.
double LittlesLawBandwidth(double peak_bw, double latency_s, double iops, int64_t block_bytes,
                           int32_t queue_depth) {
  if (block_bytes <= 0 || queue_depth <= 0 || peak_bw <= 0) return 0.0;
  const double block = static_cast<double>(block_bytes);
  const double per_request_s = latency_s + block / peak_bw;
  const double bw = std::min(peak_bw, static_cast<double>(queue_depth) * block / per_request_s);
  return iops > 0 ? std::min(bw, iops * block) : bw;
}

// Threads that do useful work: at least one, at most the cores there are.
double UsefulThreads(const CpuSpec& cpu, int32_t threads) {
  int32_t t = std::max(threads, 1);
  if (cpu.cores > 0) t = std::min(t, cpu.cores);
  return static_cast<double>(t);
}

// The measured bandwidth at (block, depth), interpolated between the four measured points
// around it (bilinear in log2 block and log2 depth, on log bandwidth); none when the point lies
// outside the measured blocks or depths, or a corner was not measured.
std::optional<double> MeasuredStreamBandwidth(const std::vector<MeasuredBandwidth>& points, int64_t block,
                                              int32_t depth) {
  if (points.empty() || block <= 0 || depth <= 0) return std::nullopt;
  int64_t b0 = 0, b1 = 0;
  int32_t q0 = 0, q1 = 0;
  for (const MeasuredBandwidth& p : points) {
    if (p.block_bytes <= block && p.block_bytes > b0) b0 = p.block_bytes;
    if (p.block_bytes >= block && (b1 == 0 || p.block_bytes < b1)) b1 = p.block_bytes;
    if (p.queue_depth <= depth && p.queue_depth > q0) q0 = p.queue_depth;
    if (p.queue_depth >= depth && (q1 == 0 || p.queue_depth < q1)) q1 = p.queue_depth;
  }
  if (b0 == 0 || b1 == 0 || q0 == 0 || q1 == 0) return std::nullopt;
  const auto at = [&](int64_t b, int32_t q) -> std::optional<double> {
    for (const MeasuredBandwidth& p : points) {
      if (p.block_bytes == b && p.queue_depth == q && p.bytes_per_s > 0) return p.bytes_per_s;
    }
    return std::nullopt;
  };
  if (b0 == b1 && q0 == q1) return at(b0, q0);  // a measured point, as measured
  std::optional<double> v00 = at(b0, q0), v01 = at(b0, q1), v10 = at(b1, q0), v11 = at(b1, q1);
  if (!v00 || !v01 || !v10 || !v11) return std::nullopt;
  for (std::optional<double>* v : {&v00, &v01, &v10, &v11}) **v = std::log(**v);
  const auto weight = [](double lo, double hi, double x) {
    return hi > lo ? (std::log2(x) - std::log2(lo)) / (std::log2(hi) - std::log2(lo)) : 0.0;
  };
  const double tb = weight(static_cast<double>(b0), static_cast<double>(b1), static_cast<double>(block));
  const double tq = weight(q0, q1, depth);
  const double lo = *v00 + tq * (*v01 - *v00), hi = *v10 + tq * (*v11 - *v10);
  return std::exp(lo + tb * (hi - lo));
}

}  // namespace

double ComputeEfficiency(const GpuSpec& gpu, Phase phase) {
  if (phase == Phase::kForward && gpu.forward_efficiency > 0) return gpu.forward_efficiency;
  if (phase == Phase::kBackward && gpu.backward_efficiency > 0) return gpu.backward_efficiency;
  return gpu.compute_efficiency;
}

double ComputeTime(const GpuSpec& gpu, double flops, double bytes, Phase phase) {
  double t = 0.0;
  const double efficiency = ComputeEfficiency(gpu, phase);
  if (flops > 0 && gpu.peak_flops > 0 && efficiency > 0) t = flops / (gpu.peak_flops * efficiency);
  if (bytes > 0 && gpu.hbm_bw_bytes_per_s > 0) t = std::max(t, bytes / gpu.hbm_bw_bytes_per_s);
  return t + gpu.kernel_overhead_s;
}

double DiskReadBandwidth(const NvmeSpec& disk, int64_t block_bytes, int32_t queue_depth) {
  if (const auto measured = MeasuredStreamBandwidth(disk.read_bw_by_request, block_bytes, queue_depth)) {
    return std::min(*measured, disk.read_bw_bytes_per_s);
  }
  return LittlesLawBandwidth(disk.read_bw_bytes_per_s, disk.read_latency_s, disk.read_iops, block_bytes,
                             queue_depth);
}

double DiskWriteBandwidth(const NvmeSpec& disk, int64_t block_bytes, int32_t queue_depth) {
  if (const auto measured = MeasuredStreamBandwidth(disk.write_bw_by_request, block_bytes, queue_depth)) {
    return std::min(*measured, disk.write_bw_bytes_per_s);
  }
  return LittlesLawBandwidth(disk.write_bw_bytes_per_s, disk.write_latency_s, disk.write_iops, block_bytes,
                             queue_depth);
}

bool DiskStreamMeasured(const NvmeSpec& disk, bool write, int64_t block_bytes, int32_t queue_depth) {
  return MeasuredStreamBandwidth(write ? disk.write_bw_by_request : disk.read_bw_by_request, block_bytes, queue_depth).has_value();
}

double DiskSharedCapacity(const NvmeSpec& disk, int32_t reads, int32_t writes) {
  reads = std::max(reads, 0);
  writes = std::max(writes, 0);
  if (reads == 0 && writes == 0) return 0.0;
  if (writes == 0) return disk.read_bw_bytes_per_s;
  if (reads == 0) return disk.write_bw_bytes_per_s;
  const double total = static_cast<double>(reads) + static_cast<double>(writes);
  const double r = static_cast<double>(reads) / total;
  const double w = static_cast<double>(writes) / total;
  const double harmonic = 1.0 / (r / disk.read_bw_bytes_per_s + w / disk.write_bw_bytes_per_s);
  return harmonic * MixedEfficiency(disk, reads + writes);
}

double MixedEfficiency(const NvmeSpec& disk, int32_t streams) {
  const auto& points = disk.mixed_efficiency_by_streams;
  if (points.empty()) return disk.mixed_efficiency;
  if (streams <= points.front().first) return points.front().second;
  if (streams >= points.back().first) return points.back().second;
  size_t i = 1;
  while (points[i].first < streams) ++i;
  const auto& [n0, e0] = points[i - 1];
  const auto& [n1, e1] = points[i];
  const double t = (std::log2(static_cast<double>(streams)) - std::log2(static_cast<double>(n0))) /
                   (std::log2(static_cast<double>(n1)) - std::log2(static_cast<double>(n0)));
  return e0 + t * (e1 - e0);
}

double CopyTime(const PcieSpec& pcie, bool host_to_device, int64_t bytes, bool pinned) {
  if (bytes <= 0) return 0.0;
  double bw = host_to_device ? pcie.h2d_bw_bytes_per_s : pcie.d2h_bw_bytes_per_s;
  if (!pinned) bw *= pcie.pageable_factor;
  return pcie.latency_s + static_cast<double>(bytes) / bw;
}

double NarrowingCopyTime(const PcieSpec& pcie, int64_t bytes) {
  if (bytes <= 0) return 0.0;
  const double bw = pcie.d2h_bf16_bw_bytes_per_s > 0 ? pcie.d2h_bf16_bw_bytes_per_s : pcie.d2h_bw_bytes_per_s;
  return pcie.latency_s + static_cast<double>(bytes) / bw;
}

double CollectiveTime(const InterconnectSpec& ic, Collective kind, int64_t bytes, int32_t ranks) {
  if (ranks <= 1 || bytes <= 0) return 0.0;
  const double n = static_cast<double>(ranks);
  const double one_pass =
      (n - 1.0) * ic.latency_s + (n - 1.0) / n * static_cast<double>(bytes) / ic.bus_bw_bytes_per_s;
  return kind == Collective::kAllReduce ? 2.0 * one_pass : one_pass;
}

InterconnectSpec NetworkOf(const NodeSpec& node) {
  InterconnectSpec net;
  net.kind = "network";
  net.bus_bw_bytes_per_s = node.nic_bw_bytes_per_s;
  net.latency_s = node.nic_latency_s;
  return net;
}

ClusterCollective ClusterCollectiveTime(const HardwareSpec& hw, Collective kind, int64_t bytes, int32_t ranks) {
  ClusterCollective c;
  const int32_t per_node = std::max(1, hw.node.gpu_count);
  if (ranks <= 1) {  // the whole collective is one rank's: a reduction's local copy
    c.intra_s = bytes > 0 && kind != Collective::kAllGather && hw.node.interconnect.local_bw_bytes_per_s > 0
                    ? static_cast<double>(bytes) / hw.node.interconnect.local_bw_bytes_per_s
                    : 0.0;
    return c;
  }
  c.ranks_per_node = std::clamp(ranks, 1, per_node);
  c.nodes = std::max(1, (ranks + per_node - 1) / per_node);
  c.intra_s = CollectiveTime(hw.node.interconnect, kind, bytes, c.ranks_per_node);
  if (c.nodes > 1) c.inter_s = CollectiveTime(NetworkOf(hw.node), kind, bytes, c.nodes);
  return c;
}

double AdamTime(const CpuSpec& cpu, int64_t elements, int32_t threads) {
  if (elements <= 0) return 0.0;
  const double compute_rate = UsefulThreads(cpu, threads) * cpu.adam_elements_per_s_per_core;
  const double memory_rate = cpu.memory_bw_bytes_per_s / kAdamBytesPerElement;
  return static_cast<double>(elements) / std::min(compute_rate, memory_rate);
}

double GpuAdamTime(const GpuSpec& gpu, int64_t elements) {
  const double bw = gpu.adam_bw_bytes_per_s > 0 ? gpu.adam_bw_bytes_per_s : gpu.hbm_bw_bytes_per_s;
  if (elements <= 0 || !(bw > 0)) return 0.0;
  return gpu.kernel_overhead_s + static_cast<double>(elements) * kGpuAdamBytesPerElement / bw;
}

double ConvertTime(const CpuSpec& cpu, int64_t bytes, int32_t threads) {
  if (bytes <= 0) return 0.0;
  const double rate = std::min(UsefulThreads(cpu, threads) * cpu.convert_bytes_per_s_per_core,
                               cpu.memory_bw_bytes_per_s);
  return static_cast<double>(bytes) / rate;
}

namespace {

// The point of `points` (sorted by block, then depth) whose class is nearest to `block` x
// `depth` in log2 block plus log2 depth, the first (smaller) of equal distances; null when there
// is none or the class is not a stream's.
template <typename Point>
const Point* NearestClass(const std::vector<Point>& points, int64_t block, int32_t depth) {
  if (block <= 0 || depth <= 0) return nullptr;
  const Point* best = nullptr;
  double best_distance = 0;
  for (const Point& p : points) {
    const double distance = std::fabs(std::log2(static_cast<double>(block) / static_cast<double>(p.block_bytes))) +
                            std::fabs(std::log2(static_cast<double>(depth) / p.queue_depth));
    if (best == nullptr || distance < best_distance) {
      best = &p;
      best_distance = distance;
    }
  }
  return best;
}

}  // namespace

double IoCpuCores(const CpuSpec& cpu, bool write, int64_t block, int32_t depth) {
  const IoCpuPoint* p = NearestClass(write ? cpu.io_write_cores : cpu.io_read_cores, block, depth);
  return p != nullptr ? p->cores : 0.0;
}

double IoRateBesideCompute(const CpuSpec& cpu, bool write, int64_t block, int32_t depth) {
  const IoRateKept* p = NearestClass(write ? cpu.io_write_beside_compute : cpu.io_read_beside_compute, block, depth);
  return p != nullptr ? p->kept : 1.0;
}

double IoPathCores(const CpuSpec& cpu, bool write, int64_t block, int32_t depth) {
  return std::min(1.0, IoCpuCores(cpu, write, block, depth));
}

double IoPathScale(const std::vector<double>& cores) {
  double most = 0, sum = 0;
  for (const double c : cores) {
    most = std::max(most, c);
    sum += c;
  }
  return sum > most ? most / sum : 1.0;
}

StatusOr<StorageBound> StorageLowerBound(const Schedule& schedule, const HardwareSpec& hw) {
  const NodeSpec& node = hw.node;
  // Per node and hardware device (NVMe roots first, then remote tiers): bytes read and written.
  const size_t nvmes = node.nvme.size();
  const size_t per_node = nvmes + node.remote.size();
  const size_t nodes = static_cast<size_t>(std::max(1, hw.nodes));
  std::vector<StorageLoad> load(nodes * per_node);
  for (size_t n = 0; n < nodes; ++n) {
    for (size_t i = 0; i < per_node; ++i) {
      const std::string local = i < nvmes ? "nvme" + std::to_string(i) : "remote" + std::to_string(i - nvmes);
      load[n * per_node + i].device = NodeDeviceName(hw, static_cast<int32_t>(n), local);
    }
  }
  // Each schedule device's slot in `load` (its root device's, for a directory on another's
  // device); load.size() where the hardware has no such storage device.
  std::vector<size_t> slot_of(schedule.devices().size(), load.size());
  for (size_t d = 0; d < slot_of.size(); ++d) {
    const StatusOr<HardwareDevice> hd = ParseHardwareDevice(schedule.devices()[d].name, hw);
    if (!hd.ok()) continue;
    const size_t base = static_cast<size_t>(hd->node) * per_node;
    if (hd->kind == HardwareDeviceKind::kNvme) {
      const NvmeSpec& disk = node.nvme[static_cast<size_t>(hd->index)];
      slot_of[d] = base + static_cast<size_t>(disk.same_device_as >= 0 ? disk.same_device_as : hd->index);
    } else if (hd->kind == HardwareDeviceKind::kRemote) {
      slot_of[d] = base + nvmes + static_cast<size_t>(hd->index);
    }
  }
  for (const TaskSpec& t : schedule.tasks()) {
    if ((t.op != Op::kRead && t.op != Op::kWrite) || t.bytes == 0) continue;
    const int32_t device = t.resource >= 0 ? schedule.resources()[t.resource].device : kNoIndex;
    if (device < 0) return InvalidArgument("task '" + t.id + "': " + std::string(OpName(t.op)) + " on no device");
    const size_t slot = slot_of[static_cast<size_t>(device)];
    if (slot == load.size()) {
      return InvalidArgument("task '" + t.id + "': " + std::string(OpName(t.op)) + " on device '" +
                             schedule.devices()[device].name + "', which hardware '" + node.name + "' does not have");
    }
    (t.op == Op::kRead ? load[slot].read_bytes : load[slot].write_bytes) += t.bytes;
  }
  StorageBound bound;
  for (size_t i = 0; i < load.size(); ++i) {
    StorageLoad& l = load[i];
    if (l.read_bytes == 0 && l.write_bytes == 0) continue;
    const size_t k = i % per_node;  // the device on its node
    const double rbw = k < nvmes ? node.nvme[k].read_bw_bytes_per_s : node.remote[k - nvmes].read_bw_bytes_per_s;
    const double wbw = k < nvmes ? node.nvme[k].write_bw_bytes_per_s : node.remote[k - nvmes].write_bw_bytes_per_s;
    if ((l.read_bytes > 0 && rbw <= 0) || (l.write_bytes > 0 && wbw <= 0)) {
      return InvalidArgument("hardware '" + node.name + "': " + l.device + " has no " +
                             (l.read_bytes > 0 && rbw <= 0 ? "read" : "write") + " bandwidth for the schedule's I/O");
    }
    const double r = l.read_bytes > 0 ? static_cast<double>(l.read_bytes) / rbw : 0.0;
    const double w = l.write_bytes > 0 ? static_cast<double>(l.write_bytes) / wbw : 0.0;
    l.seconds = k < nvmes ? r + w : std::max(r, w);
    if (l.seconds > bound.seconds) {
      bound.seconds = l.seconds;
      bound.busiest = l.device;
    }
    bound.devices.push_back(l);
  }
  return bound;
}

MemoryFit CheckMemoryFit(const Schedule& schedule, const HardwareSpec& hw, const std::vector<int64_t>& pool_peak_bytes) {
  MemoryFit fit;
  fit.host_bytes = hw.node.cpu.host_memory_bytes > 0 ? hw.node.cpu.host_memory_bytes - hw.node.cpu.HostReserveBytes() : 0;
  fit.gpu_bytes = hw.node.gpu.hbm_bytes;
  std::vector<int64_t> host_by_node(static_cast<size_t>(std::max(1, hw.nodes)), 0);
  int64_t fullest = -1;
  for (size_t p = 0; p < schedule.pools().size() && p < pool_peak_bytes.size(); ++p) {
    const PoolSpec& pool = schedule.pools()[p];
    if (pool.device < 0) continue;
    const DeviceSpec& device = schedule.devices()[static_cast<size_t>(pool.device)];
    if (device.kind == DeviceKind::kGpu && pool_peak_bytes[p] > fit.gpu_peak_bytes) {
      fit.gpu_peak_bytes = pool_peak_bytes[p];
      fit.gpu_pool = pool.name;
    }
    if (device.kind != DeviceKind::kHost) continue;
    const StatusOr<HardwareDevice> hd = ParseHardwareDevice(device.name, hw);
    const size_t node = hd.ok() ? static_cast<size_t>(hd->node) : 0;
    if (node >= host_by_node.size()) continue;
    host_by_node[node] += pool_peak_bytes[p];
    if (host_by_node[node] > fit.host_peak_bytes) {
      fit.host_peak_bytes = host_by_node[node];
      fullest = static_cast<int64_t>(node);
    }
  }
  if (fullest >= 0) fit.host_node = NodeDeviceName(hw, static_cast<int32_t>(fullest), "host");
  return fit;
}

std::string MemoryFit::Problem() const {
  std::string out;
  auto gib = [](int64_t b) { return fmt::format("{:.2f} GiB", static_cast<double>(b) / (1024.0 * 1024 * 1024)); };
  if (!host_fits()) {
    out += fmt::format("pinned host memory on {} peaks at {}, and the node has {} (cpu.host_memory less cpu.host_reserve): {} short", host_node,
                       gib(host_peak_bytes), gib(host_bytes), gib(host_peak_bytes - host_bytes));
  }
  if (!gpu_fits()) {
    out += fmt::format("{}{} peaks at {}, and the GPU has {} (gpu.hbm): {} short", out.empty() ? "" : "; ", gpu_pool, gib(gpu_peak_bytes),
                       gib(gpu_bytes), gib(gpu_peak_bytes - gpu_bytes));
  }
  return out;
}

}  // namespace tierflow::models
