#include "sim/plan.h"

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include "tierflow/core/trace_record.h"
#include "tierflow/core/units.h"
#include "tierflow/models/perf.h"

namespace tierflow::sim::internal {
namespace {

using models::HardwareDevice;
using HwKind = models::HardwareDeviceKind;

std::optional<models::Collective> CollectiveOf(Op op) {
  switch (op) {
    case Op::kAllGather: return models::Collective::kAllGather;
    case Op::kReduceScatter: return models::Collective::kReduceScatter;
    case Op::kAllReduce: return models::Collective::kAllReduce;
    default: return std::nullopt;
  }
}

// Sets TaskPlan::alone on every exec of a host that never runs more threads than it has cores:
// the execs of a resource there run at most `concurrency` at once, each with at most the most
// threads of that resource's execs; the I/O path's loads and the hand-overs (CoreLoad in the
// engine) run on a node's CPU, which so is never alone when there are any. A task with a
// hand-over is never alone itself: it ends with its hand-over's load, a SimGrid exec.
void MarkExecsAlone(const Schedule& schedule, const models::HardwareSpec& hw, Plan* plan) {
  // Hosts: a node's CPU, node, or GPU g over the cluster, plan->nodes + g.
  const size_t hosts = static_cast<size_t>(plan->nodes + plan->gpus);
  const auto host_of = [&](const TaskPlan& p) { return static_cast<size_t>(p.on_cpu ? p.node : plan->nodes + p.gpu); };
  // Per resource and host: the most threads of the resource's execs there.
  std::vector<int32_t> most_threads(schedule.resources().size() * hosts, 0);
  std::vector<bool> loaded(hosts, false);  // a CPU with the I/O path's or hand-overs' loads
  for (size_t ti = 0; ti < plan->tasks.size(); ++ti) {
    const TaskPlan& p = plan->tasks[ti];
    if (p.cpu_amount > 0) loaded[static_cast<size_t>(plan->endpoints[static_cast<size_t>(p.endpoint)].node)] = true;
    if (p.handover_amount > 0) loaded[static_cast<size_t>(p.handover_node)] = true;
    if (p.kind != ActivityKind::kExec) continue;
    int32_t& most = most_threads[static_cast<size_t>(schedule.tasks()[ti].resource) * hosts + host_of(p)];
    most = std::max(most, p.threads);
  }
  std::vector<int64_t> threads(hosts, 0);  // per host: the threads its execs may run at once
  for (size_t i = 0; i < most_threads.size(); ++i) {
    threads[i % hosts] += static_cast<int64_t>(schedule.resources()[i / hosts].concurrency) * most_threads[i];
  }
  for (TaskPlan& p : plan->tasks) {
    if (p.kind != ActivityKind::kExec) continue;
    const size_t h = host_of(p);
    const int64_t cores = p.on_cpu ? std::max(1, hw.node.cpu.cores) : 1;
    p.alone = threads[h] <= cores && !(p.on_cpu && loaded[h]) && p.handover_amount == 0;
  }
}

}  // namespace

StatusOr<Plan> MakePlan(const Schedule& schedule, const models::HardwareSpec& hw) {
  const models::NodeSpec& node = hw.node;
  Plan plan;
  plan.nodes = std::max(1, hw.nodes);
  plan.gpus_per_node = node.gpu_count;
  plan.gpus = node.gpu_count * plan.nodes;
  plan.nvmes = static_cast<int32_t>(node.nvme.size());
  plan.remotes = static_cast<int32_t>(node.remote.size());
  plan.collectives_cross_root = node.interconnect.kind == "pcie";

  std::vector<HardwareDevice> devices;
  devices.reserve(schedule.devices().size());
  for (const DeviceSpec& d : schedule.devices()) {
    TF_ASSIGN_OR_RETURN(HardwareDevice hd, models::ParseHardwareDevice(d.name, hw));
    devices.push_back(hd);
  }
  // A tensor on a disk lies within the disk (a store at 2^62 bytes simulated without complaint).
  for (const TensorSpec& t : schedule.tensors()) {
    const HardwareDevice& hd = devices[static_cast<size_t>(t.device)];
    if (hd.kind != models::HardwareDeviceKind::kNvme) continue;
    const int64_t capacity = node.nvme[static_cast<size_t>(hd.index)].capacity_bytes;
    if (capacity > 0 && t.offset_bytes > capacity - t.size_bytes) {
      return InvalidArgument("tensor '" + t.name + "': its bytes [" + std::to_string(t.offset_bytes) + ", +" + std::to_string(t.size_bytes) + ") end past " +
                             schedule.devices()[static_cast<size_t>(t.device)].name + "'s capacity, " + FormatBytes(static_cast<double>(capacity)) +
                             " (hardware.node.nvme[" + std::to_string(hd.index) + "].capacity)");
    }
  }

  // Endpoints are shared by every task of one class: (kind, node, device, write, block, depth,
  // bytes in flight).
  using EndpointKey = std::tuple<int, int32_t, int32_t, bool, int64_t, int32_t, int64_t>;
  std::map<EndpointKey, int32_t> endpoint_index;
  // The class's endpoint, made by `make` the first time (most tasks find theirs made).
  auto endpoint = [&](EndpointKey key, const auto& make) {
    auto [it, inserted] = endpoint_index.emplace(key, static_cast<int32_t>(plan.endpoints.size()));
    if (inserted) plan.endpoints.push_back(make());
    return it->second;
  };

  const int32_t default_threads = std::max(1, node.cpu.cores);
  // An emulated GPU (GpuSpec::shares_host_cores) works on its node's CPU: compute with every
  // core, as the CPU executor's kernels do, copies and a rank's local collective copy with one.
  // SimGrid shares the cores among the execs in flight in proportion to their threads, so they
  // slow each other, the optimizer and the conversions down as the threads of one process do.
  const auto host_exec = [&](TaskPlan& p, int32_t on_node, int32_t threads, double seconds) {
    p.kind = ActivityKind::kExec;
    p.on_cpu = true;
    p.node = on_node;
    p.threads = threads;
    p.amount = seconds * kExecSpeed;  // per thread
  };
  // Work of GPU `gpu` (over the cluster) on node `on_node`: on the GPU, or, emulated, on the
  // node's cores with `host_threads` threads.
  const auto gpu_exec = [&](TaskPlan& p, int32_t on_node, int32_t gpu, int32_t host_threads, double seconds) {
    if (node.gpu.shares_host_cores) {
      host_exec(p, on_node, host_threads, seconds);
      return;
    }
    p.kind = ActivityKind::kExec;
    p.gpu = gpu;
    p.amount = seconds * kExecSpeed;
  };
  plan.tasks.resize(schedule.tasks().size());
  for (size_t ti = 0; ti < schedule.tasks().size(); ++ti) {
    const TaskSpec& t = schedule.tasks()[ti];
    TaskPlan& p = plan.tasks[ti];
    if (IsInstantOp(t.op)) continue;
    const ResourceSpec& res = schedule.resources()[t.resource];
    const std::string& dev_name = schedule.devices()[res.device].name;
    const HardwareDevice dev = devices[res.device];
    // Named only in an error: building it for every task was a fifth of planning the quickstart.
    const auto who = [&] {
      return "task '" + t.id + "' (op " + std::string(OpName(t.op)) + " on resource '" + res.name + "', device '" + dev_name + "')";
    };
    auto need = [&](double value, const char* what) -> Status {
      if (value > 0) return Status::Ok();
      return InvalidArgument(who() + ": hardware '" + node.name + "' has no " + what);
    };

    switch (t.op) {
      case Op::kRead:
      case Op::kWrite: {
        const bool write = t.op == Op::kWrite;
        if (t.bytes == 0) break;  // nothing to move: completes when it starts
        p.kind = ActivityKind::kComm;
        p.to_device = write;
        p.amount = static_cast<double>(t.bytes);
        if (dev.kind == HwKind::kNvme) {
          const models::NvmeSpec& disk = node.nvme[dev.index];
          const int64_t block = IoBlockBytes(t);
          const int32_t depth = IoQueueDepth(t);
          TF_RETURN_IF_ERROR(need(write ? disk.write_bw_bytes_per_s : disk.read_bw_bytes_per_s,
                                  write ? "nvme write bandwidth" : "nvme read bandwidth"));
          const double bw = write ? models::DiskWriteBandwidth(disk, block, depth)
                                  : models::DiskReadBandwidth(disk, block, depth);
          TF_RETURN_IF_ERROR(need(bw, "positive disk bandwidth for this block size and depth"));
          // What the stream keeps queued on the device: its window, or all of a smaller transfer.
          const int64_t in_flight = std::min(block * depth, t.bytes);
          p.endpoint = endpoint({0, dev.node, dev.index, write, block, depth, in_flight}, [&] {
            Endpoint e;
            e.name = dev_name + (write ? ".w." : ".r.") + std::to_string(block) + "x" + std::to_string(depth);
            if (in_flight < block * depth) e.name += "." + std::to_string(in_flight);
            e.cap_bw = bw;
            e.in_flight_bytes = static_cast<double>(in_flight);
            e.kept_beside_compute = models::IoRateBesideCompute(node.cpu, write, block, depth);
            e.latency_s = write ? disk.write_latency_s : disk.read_latency_s;
            // Directories on one device cross its one media link (NvmeSpec::same_device_as).
            e.disk = disk.same_device_as >= 0 ? disk.same_device_as : dev.index;
            e.ring = dev.index;
            e.node = dev.node;
            e.write = write;
            return e;
          });
          p.block_bytes = block;
          p.queue_depth = depth;
          // The I/O path's CPU: its class's cores (at most one: the path's thread) for as long as
          // the transfer takes at the stream's own rate.
          const double cores = models::IoPathCores(node.cpu, write, block, depth);
          if (cores > 0) {
            p.node = dev.node;
            p.cpu_bound = cores * kExecSpeed;
            p.cpu_amount = cores * static_cast<double>(t.bytes) / bw * kExecSpeed;
          }
        } else if (dev.kind == HwKind::kRemote) {
          const models::RemoteTierSpec& tier = node.remote[dev.index];
          TF_RETURN_IF_ERROR(need(write ? tier.write_bw_bytes_per_s : tier.read_bw_bytes_per_s,
                                  write ? "remote write bandwidth" : "remote read bandwidth"));
          p.endpoint = endpoint({1, dev.node, dev.index, write, 0, 0, 0}, [&] {
            Endpoint e;
            e.name = dev_name + (write ? ".w" : ".r");
            e.cap_bw = kUnlimitedBw;
            e.latency_s = tier.latency_s;
            e.remote = dev.index;
            e.node = dev.node;
            e.write = write;
            return e;
          });
          p.block_bytes = t.block_bytes;
          p.queue_depth = t.queue_depth;
        } else {
          return InvalidArgument(who() + ": reads and writes need an nvme or remote device");
        }
        break;
      }
      case Op::kH2D:
      case Op::kD2H: {
        if (dev.kind != HwKind::kGpu) return InvalidArgument(who() + ": copies need a gpu device");
        const bool h2d = t.op == Op::kH2D;
        TF_RETURN_IF_ERROR(need(h2d ? node.pcie.h2d_bw_bytes_per_s : node.pcie.d2h_bw_bytes_per_s,
                                h2d ? "PCIe h2d bandwidth" : "PCIe d2h bandwidth"));
        if (t.bytes == 0) break;
        // A d2h into bf16 gradients narrows on the way: the overflow check and the cast, at the
        // measured narrowing rate (PcieSpec::d2h_bf16_bw; as d2h_bw where none was measured).
        const bool narrows = D2HNarrows(schedule, t);
        const double seconds = narrows ? models::NarrowingCopyTime(node.pcie, t.bytes)
                                       : models::CopyTime(node.pcie, h2d, t.bytes, /*pinned=*/true);
        if (node.gpu.shares_host_cores) {
          // Work in host memory on the node's cores: a plain copy is a memcpy on one; the
          // narrowing passes run on every core, as the CPU executor's copy kernels do.
          host_exec(p, dev.node, narrows ? default_threads : 1, seconds);
          break;
        }
        p.kind = ActivityKind::kComm;
        p.gpu = dev.node * plan.gpus_per_node + dev.index;
        p.to_device = h2d;
        // The link carries the bytes; a measured narrowing rate holds the link for as long as
        // the narrowing takes, as if it carried proportionally more.
        p.amount = static_cast<double>(t.bytes);
        if (narrows && node.pcie.d2h_bf16_bw_bytes_per_s > 0) p.amount *= node.pcie.d2h_bw_bytes_per_s / node.pcie.d2h_bf16_bw_bytes_per_s;
        break;
      }
      case Op::kCompute: {
        if (dev.kind != HwKind::kGpu) return InvalidArgument(who() + ": compute needs a gpu device");
        const double d = models::ComputeTime(node.gpu, t.flops, static_cast<double>(t.bytes), t.phase);
        if (!(d > 0)) break;
        gpu_exec(p, dev.node, dev.node * plan.gpus_per_node + dev.index, default_threads, d);
        break;
      }
      case Op::kAllGather:
      case Op::kReduceScatter:
      case Op::kAllReduce: {
        const models::Collective kind = *CollectiveOf(t.op);
        const int32_t ranks = t.ranks > 0 ? t.ranks : plan.gpus;
        if (ranks > plan.gpus) {
          return InvalidArgument(who() + ": " + std::to_string(ranks) + " ranks, more than the " + std::to_string(plan.gpus) +
                                 " GPUs of hardware '" + node.name + "'" + (plan.nodes > 1 ? " on " + std::to_string(plan.nodes) + " nodes" : ""));
        }
        const models::ClusterCollective levels = models::ClusterCollectiveTime(hw, kind, t.bytes, ranks);
        if (!(levels.intra_s + levels.inter_s > 0)) break;
        if (ranks == 1) {  // one rank's local copy (interconnect.local_bw): work on its GPU (the job's only one, gpu 0), no link
          p.record_threads = 1;
          gpu_exec(p, 0, 0, 1, levels.intra_s);
          break;
        }
        p.kind = ActivityKind::kComm;
        p.nodes = levels.nodes;
        p.record_threads = ranks;  // collective records carry the rank count (docs/trace-format.md)
        // Each level's alpha part (the time of an empty message) becomes the latency of its
        // class's private link; the beta part becomes bytes on the shared link (the node's
        // interconnect, its NIC) at that link's bandwidth, so that alone each level takes exactly
        // its CollectiveTime. CollectiveTime is affine in bytes (alpha + beta * bytes) but returns
        // 0 for an empty message, so alpha is extrapolated from two sizes: alpha = 2 T(b) - T(2b).
        const auto split = [&](double total, double doubled, double bw, double* alpha) {
          *alpha = std::clamp(2 * total - doubled, 0.0, total);
          return std::max(0.0, total - *alpha) * bw;
        };
        const models::ClusterCollective twice = models::ClusterCollectiveTime(hw, kind, 2 * t.bytes, ranks);
        // One endpoint of the class per node, consecutive: node n's is the first's + n.
        const auto per_node = [&](int level, double alpha) {
          int32_t first = -1;
          for (int32_t n = 0; n < levels.nodes; ++n) {
            const int32_t at = endpoint({level, n, static_cast<int32_t>(kind), false, ranks, 0, 0}, [&] {
              Endpoint e;
              e.name = (plan.nodes > 1 ? "node" + std::to_string(n) + "." : std::string()) + (level == 2 ? "ic." : "net.") +
                       std::string(OpName(t.op)) + "." + std::to_string(ranks);
              e.node = n;
              e.cap_bw = kUnlimitedBw;
              e.latency_s = alpha;
              (level == 2 ? e.collective : e.network) = true;
              return e;
            });
            TF_CHECK(first < 0 || at == first + n);
            if (first < 0) first = at;
          }
          return first;
        };
        if (levels.intra_s > 0) {
          TF_RETURN_IF_ERROR(need(node.interconnect.bus_bw_bytes_per_s, "interconnect bus bandwidth"));
          double alpha = 0;
          p.amount = split(levels.intra_s, twice.intra_s, node.interconnect.bus_bw_bytes_per_s, &alpha);
          p.endpoint = per_node(2, alpha);
        }
        if (levels.inter_s > 0) {
          TF_RETURN_IF_ERROR(need(node.nic_bw_bytes_per_s, "NIC bandwidth (nic_bw) between its nodes"));
          double alpha = 0;
          p.network_amount = split(levels.inter_s, twice.inter_s, node.nic_bw_bytes_per_s, &alpha);
          p.network_endpoint = per_node(3, alpha);
        }
        break;
      }
      case Op::kOptimizer:
      case Op::kConvert: {
        const int32_t threads = std::clamp(t.ranks > 0 ? t.ranks : default_threads, 1, default_threads);
        if (dev.kind == HwKind::kGpu) {  // an update on the GPU, its states there (models::GpuAdamTime)
          if (t.op != Op::kOptimizer) return InvalidArgument(who() + ": a convert runs on the host's CPU, not on a GPU");
          const double d = node.gpu.shares_host_cores ? models::AdamTime(node.cpu, t.bytes / 4, threads) : models::GpuAdamTime(node.gpu, t.bytes / 4);
          p.record_threads = threads;
          if (!(d > 0)) break;
          gpu_exec(p, dev.node, dev.node * plan.gpus_per_node + dev.index, threads, d);
          break;
        }
        const double d = t.op == Op::kOptimizer
                             ? models::AdamTime(node.cpu, t.bytes / 4, threads)
                             : models::ConvertTime(node.cpu, t.bytes, threads);
        p.record_threads = threads;
        if (!(d > 0)) break;
        host_exec(p, dev.node, threads, d);  // per thread: SimGrid's parallel execs take flops per thread
        break;
      }
      default:
        return Internal(who() + ": op not handled by the simulator");
    }
    // The executor hands every task but reads and writes (which it submits itself) to the
    // resource's worker and is told back: two thread wake-ups, a delay before the task begins.
    if (p.kind != ActivityKind::kInstant && t.op != Op::kRead && t.op != Op::kWrite) {
      p.delay_s = node.cpu.task_overhead_s;
      // Its wake-ups preempt the threads on the task's node: all of their core-time, spread over
      // the hand-over (at most one core: one thread wakes at a time).
      if (node.cpu.task_overhead_cpu_s > 0) {
        p.handover_node = dev.node;
        p.handover_amount = node.cpu.task_overhead_cpu_s * kExecSpeed;
        p.handover_bound = (p.delay_s > 0 ? std::min(1.0, node.cpu.task_overhead_cpu_s / p.delay_s) : 1.0) * kExecSpeed;
      }
    }
  }
  MarkExecsAlone(schedule, hw, &plan);
  return plan;
}

}  // namespace tierflow::sim::internal
