#include "sim/plan.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <tuple>

#include "tierflow/models/perf.h"

namespace tierflow::sim::internal {
namespace {

enum class HwKind { kGpu, kHost, kNvme, kRemote, kNet };
struct HwDevice {
  HwKind kind;
  int32_t index = 0;
};

std::optional<int32_t> ParseIndex(const std::string& name, std::string_view prefix) {
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  const char* begin = name.data() + prefix.size();
  const char* end = name.data() + name.size();
  if (*begin == '0' && end - begin > 1) return std::nullopt;  // "gpu01" is not "gpu1"
  int32_t value = -1;
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr != end || value < 0) return std::nullopt;
  return value;
}

StatusOr<HwDevice> MapDevice(const std::string& name, const models::HardwareSpec& hw) {
  const models::NodeSpec& node = hw.node;
  if (name == "host") return HwDevice{HwKind::kHost, 0};
  if (name == "net") return HwDevice{HwKind::kNet, 0};
  struct Family {
    std::string_view prefix;
    HwKind kind;
    int64_t count;
  };
  const Family families[] = {{"gpu", HwKind::kGpu, node.gpu_count},
                             {"nvme", HwKind::kNvme, static_cast<int64_t>(node.nvme.size())},
                             {"remote", HwKind::kRemote, static_cast<int64_t>(node.remote.size())}};
  for (const Family& f : families) {
    if (auto i = ParseIndex(name, f.prefix)) {
      if (*i >= f.count) {
        return InvalidArgument("schedule device '" + name + "' does not exist on hardware '" +
                               node.name + "', which has " + std::to_string(f.count) + " " +
                               std::string(f.prefix) + " device(s)");
      }
      return HwDevice{f.kind, *i};
    }
  }
  return InvalidArgument("schedule device '" + name +
                         "' names no hardware device (expected gpuN, host, nvmeN, remoteN or net)");
}

std::optional<models::Collective> CollectiveOf(Op op) {
  switch (op) {
    case Op::kAllGather: return models::Collective::kAllGather;
    case Op::kReduceScatter: return models::Collective::kReduceScatter;
    case Op::kAllReduce: return models::Collective::kAllReduce;
    default: return std::nullopt;
  }
}

}  // namespace

StatusOr<Plan> MakePlan(const Schedule& schedule, const models::HardwareSpec& hw) {
  const models::NodeSpec& node = hw.node;
  Plan plan;
  plan.gpus = node.gpu_count;
  plan.nvmes = static_cast<int32_t>(node.nvme.size());
  plan.remotes = static_cast<int32_t>(node.remote.size());
  plan.collectives_cross_root = node.interconnect.kind == "pcie";

  std::vector<HwDevice> devices;
  devices.reserve(schedule.devices().size());
  for (const DeviceSpec& d : schedule.devices()) {
    TF_ASSIGN_OR_RETURN(HwDevice hd, MapDevice(d.name, hw));
    devices.push_back(hd);
  }

  // Endpoints are shared by every task of one class: (kind, device, write, block, depth).
  std::map<std::tuple<int, int32_t, bool, int64_t, int32_t>, int32_t> endpoint_index;
  auto endpoint = [&](std::tuple<int, int32_t, bool, int64_t, int32_t> key, Endpoint e) {
    auto [it, inserted] = endpoint_index.emplace(key, static_cast<int32_t>(plan.endpoints.size()));
    if (inserted) plan.endpoints.push_back(std::move(e));
    return it->second;
  };

  const int32_t default_threads = std::max(1, node.cpu.cores);
  plan.tasks.resize(schedule.tasks().size());
  for (size_t ti = 0; ti < schedule.tasks().size(); ++ti) {
    const TaskSpec& t = schedule.tasks()[ti];
    TaskPlan& p = plan.tasks[ti];
    if (IsInstantOp(t.op)) continue;
    const ResourceSpec& res = schedule.resources()[t.resource];
    const std::string& dev_name = schedule.devices()[res.device].name;
    const HwDevice dev = devices[res.device];
    const std::string who = "task '" + t.id + "' (op " + std::string(OpName(t.op)) +
                            " on resource '" + res.name + "', device '" + dev_name + "')";
    auto need = [&](double value, const char* what) -> Status {
      if (value > 0) return Status::Ok();
      return InvalidArgument(who + ": hardware '" + node.name + "' has no " + what);
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
          Endpoint e;
          e.name = dev_name + (write ? ".w." : ".r.") + std::to_string(block) + "x" + std::to_string(depth);
          e.cap_bw = bw;
          e.latency_s = write ? disk.write_latency_s : disk.read_latency_s;
          // Directories on one device cross its one media link (NvmeSpec::same_device_as).
          e.disk = disk.same_device_as >= 0 ? disk.same_device_as : dev.index;
          e.write = write;
          p.endpoint = endpoint({0, dev.index, write, block, depth}, std::move(e));
          p.block_bytes = block;
          p.queue_depth = depth;
        } else if (dev.kind == HwKind::kRemote) {
          const models::RemoteTierSpec& tier = node.remote[dev.index];
          TF_RETURN_IF_ERROR(need(write ? tier.write_bw_bytes_per_s : tier.read_bw_bytes_per_s,
                                  write ? "remote write bandwidth" : "remote read bandwidth"));
          Endpoint e;
          e.name = dev_name + (write ? ".w" : ".r");
          e.cap_bw = kUnlimitedBw;
          e.latency_s = tier.latency_s;
          e.remote = dev.index;
          e.write = write;
          p.endpoint = endpoint({1, dev.index, write, 0, 0}, std::move(e));
          p.block_bytes = t.block_bytes;
          p.queue_depth = t.queue_depth;
        } else {
          return InvalidArgument(who + ": reads and writes need an nvme or remote device");
        }
        break;
      }
      case Op::kH2D:
      case Op::kD2H: {
        if (dev.kind != HwKind::kGpu) return InvalidArgument(who + ": copies need a gpu device");
        const bool h2d = t.op == Op::kH2D;
        TF_RETURN_IF_ERROR(need(h2d ? node.pcie.h2d_bw_bytes_per_s : node.pcie.d2h_bw_bytes_per_s,
                                h2d ? "PCIe h2d bandwidth" : "PCIe d2h bandwidth"));
        if (t.bytes == 0) break;
        p.kind = ActivityKind::kComm;
        p.gpu = dev.index;
        p.to_device = h2d;
        p.amount = static_cast<double>(t.bytes);
        break;
      }
      case Op::kCompute: {
        if (dev.kind != HwKind::kGpu) return InvalidArgument(who + ": compute needs a gpu device");
        const double d = models::ComputeTime(node.gpu, t.flops, static_cast<double>(t.bytes), t.phase);
        if (!(d > 0)) break;
        p.kind = ActivityKind::kExec;
        p.gpu = dev.index;
        p.amount = d * kExecSpeed;
        break;
      }
      case Op::kAllGather:
      case Op::kReduceScatter:
      case Op::kAllReduce: {
        const models::Collective kind = *CollectiveOf(t.op);
        const int32_t ranks = t.ranks > 0 ? t.ranks : node.gpu_count * std::max(1, hw.nodes);
        const double total = models::CollectiveTime(node.interconnect, kind, t.bytes, ranks);
        if (!(total > 0)) break;
        TF_RETURN_IF_ERROR(need(node.interconnect.bus_bw_bytes_per_s, "interconnect bus bandwidth"));
        // The alpha part (the time of an empty message) becomes the latency of the class's
        // private link; the beta part becomes bytes on the shared interconnect link at busbw,
        // so that alone the collective takes exactly CollectiveTime().
        // CollectiveTime is affine in bytes (alpha + beta * bytes) but returns 0 for an empty
        // message, so alpha is extrapolated from two sizes: alpha = 2 T(b) - T(2b).
        const double doubled = models::CollectiveTime(node.interconnect, kind, 2 * t.bytes, ranks);
        const double alpha = std::clamp(2 * total - doubled, 0.0, total);
        p.kind = ActivityKind::kComm;
        p.amount = std::max(0.0, total - alpha) * node.interconnect.bus_bw_bytes_per_s;
        p.record_threads = ranks;  // collective records carry the rank count (docs/trace-format.md)
        Endpoint e;
        e.name = "ic." + std::string(OpName(t.op)) + "." + std::to_string(ranks);
        e.cap_bw = kUnlimitedBw;
        e.latency_s = alpha;
        e.collective = true;
        p.endpoint = endpoint({2, static_cast<int32_t>(kind), false, ranks, 0}, std::move(e));
        break;
      }
      case Op::kOptimizer:
      case Op::kConvert: {
        const int32_t threads = std::clamp(t.ranks > 0 ? t.ranks : default_threads, 1, default_threads);
        const double d = t.op == Op::kOptimizer
                             ? models::AdamTime(node.cpu, t.bytes / 4, threads)
                             : models::ConvertTime(node.cpu, t.bytes, threads);
        p.record_threads = threads;
        if (!(d > 0)) break;
        p.kind = ActivityKind::kExec;
        p.on_cpu = true;
        p.threads = threads;
        p.amount = d * kExecSpeed;  // per thread: SimGrid's parallel execs take flops per thread
        break;
      }
      default:
        return Internal(who + ": op not handled by the simulator");
    }
  }
  return plan;
}

}  // namespace tierflow::sim::internal
