#include "sim/engine.h"

#include <simgrid/kernel/Timer.hpp>
#include <simgrid/s4u.hpp>
#include <xbt/log.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <string>

#include "tierflow/core/dispatcher.h"
#include "tierflow/models/perf.h"

namespace tierflow::sim::internal {
namespace {

namespace sg4 = simgrid::s4u;

class Runner;
// SimGrid's activity signals are process-wide statics: they are connected once and forward to
// the runner of the current (only) simulation in this process.
Runner* g_runner = nullptr;

class Runner {
 public:
  Runner(const Schedule& schedule, const models::HardwareSpec& hw, const Plan& plan,
         int64_t iterations, bool want_progress, RunSink* sink)
      : schedule_(schedule),
        hw_(hw),
        plan_(plan),
        sink_(sink),
        dispatcher_(schedule, iterations),
        want_progress_(want_progress) {
    progress_step_ = std::max<int64_t>(1, dispatcher_.total() / 100);
  }

  Status Run(RunStats* stats) {
    BuildPlatform();
    Pump();
    sg4::Engine::get_instance()->run();
    retired_.clear();
    if (!error_.ok()) return error_;
    if (!dispatcher_.done()) {
      Status deadlock = dispatcher_.DeadlockReport();
      if (deadlock.ok()) {
        return Internal("simulation ended with " + std::to_string(dispatcher_.running()) +
                        " instances in flight and work left (simulated time " +
                        std::to_string(sg4::Engine::get_clock()) + " s)");
      }
      return deadlock.WithContext("at simulated time " + std::to_string(sg4::Engine::get_clock()) + " s");
    }
    if (want_progress_) {
      sink_->OnProgress({dispatcher_.completed(), dispatcher_.total(), makespan_s_});
    }
    stats->makespan_s = makespan_s_;
    stats->pool_peak_bytes.clear();
    for (size_t p = 0; p < schedule_.pools().size(); ++p) {
      stats->pool_peak_bytes.push_back(dispatcher_.pool_peak_bytes(static_cast<int32_t>(p)));
    }
    stats->completed = dispatcher_.completed();
    stats->activities = activities_;
    stats->disk_sharing_mismatches = mismatches_;
    return Status::Ok();
  }

  void OnActivityDone(const sg4::Activity& activity) {
    // Trap 3: a reference dropped inside the completion path crashes the engine; the previous
    // callback's activity is released here, one callback later.
    retired_.clear();
    const auto id = static_cast<int32_t>(reinterpret_cast<intptr_t>(activity.get_data<void>()));
    TF_CHECK(id >= 0 && id < static_cast<int32_t>(flights_.size()));
    Flight& f = flights_[id];
    if (activity.get_state() != sg4::Activity::State::FINISHED && error_.ok()) {
      error_ = Internal("SimGrid activity of task '" + schedule_.tasks()[f.instance.task].id +
                        "' ended in state " + activity.get_state_str());
    }
    retired_.push_back(std::move(f.activity));
    if (f.disk >= 0) --(f.write ? disk_writes_ : disk_reads_)[f.disk];
    free_flights_.push_back(id);
    Finish(f.instance, f.start_s, sg4::Engine::get_clock());
    Pump();
  }

  // The NONLINEAR sharing callback of disk `disk`'s media link: the aggregate bandwidth of the
  // reads and writes flowing on it now. SimGrid calls it while solving, after every completion
  // callback of the same date has run and after every comm started at that date has been added,
  // so the counts are current; `n_flows` (SimGrid's own count) checks that.
  double DiskCapacity(int32_t disk, int n_flows) {
    const int32_t reads = disk_reads_[disk], writes = disk_writes_[disk];
    if (reads + writes != n_flows) ++mismatches_;
    const models::NvmeSpec& spec = hw_.node.nvme[disk];
    if (reads + writes == 0) return std::max(spec.read_bw_bytes_per_s, spec.write_bw_bytes_per_s);
    return models::DiskSharedCapacity(spec, reads, writes);
  }

 private:
  struct Flight {
    sg4::ActivityPtr activity;
    Instance instance;
    double start_s = 0;
    int32_t disk = -1;
    bool write = false;
  };

  sg4::Host* NewHost(sg4::NetZone* zone, const std::string& name, double speed, int cores = 1) {
    return zone->create_host(name, speed)->set_core_count(cores);
  }

  void BuildPlatform() {
    const models::NodeSpec& node = hw_.node;
    using Policy = sg4::Link::SharingPolicy;
    sg4::NetZone* zone = sg4::create_full_zone(node.name.empty() ? "node" : node.name);
    mem_ = NewHost(zone, "host.mem", 1);
    cpu_ = NewHost(zone, "cpu", kExecSpeed, std::max(1, node.cpu.cores));
    for (int32_t g = 0; g < plan_.gpus; ++g) gpu_.push_back(NewHost(zone, "gpu" + std::to_string(g), kExecSpeed));

    sg4::Link* root = nullptr;
    if (node.pcie.root_complex_bw_bytes_per_s > 0) {
      root = zone->create_link("pcie.root", node.pcie.root_complex_bw_bytes_per_s);
    }
    auto route = [&](sg4::Host* src, sg4::Host* dst, std::initializer_list<sg4::Link*> links) {
      std::vector<sg4::LinkInRoute> hops;
      for (sg4::Link* l : links) {
        if (l != nullptr) hops.emplace_back(l);
      }
      zone->add_route(src->get_netpoint(), dst->get_netpoint(), nullptr, nullptr, hops, false);
    };

    // GPU copies: one link per direction per GPU (a split-duplex link with h2d != d2h), then
    // the root complex.
    for (int32_t g = 0; g < plan_.gpus; ++g) {
      const std::string name = "gpu" + std::to_string(g);
      sg4::Link* h2d = nullptr;
      sg4::Link* d2h = nullptr;
      if (node.pcie.h2d_bw_bytes_per_s > 0) {
        h2d = zone->create_link(name + ".h2d", node.pcie.h2d_bw_bytes_per_s);
        route(mem_, gpu_[g], {root, h2d});
      }
      if (node.pcie.d2h_bw_bytes_per_s > 0) {
        d2h = zone->create_link(name + ".d2h", node.pcie.d2h_bw_bytes_per_s);
        route(gpu_[g], mem_, {d2h, root});
      }
    }

    // NVMe media: one link shared by reads and writes whose capacity is DiskSharedCapacity of
    // the flows on it (trap 2: links from a per-device host, never SimGrid's Disk/Io).
    disk_reads_.assign(plan_.nvmes, 0);
    disk_writes_.assign(plan_.nvmes, 0);
    std::vector<sg4::Link*> media(plan_.nvmes, nullptr);
    for (int32_t d = 0; d < plan_.nvmes; ++d) {
      const models::NvmeSpec& disk = node.nvme[d];
      if (disk.same_device_as >= 0) continue;  // its device's link: the routes name that one
      const double peak = std::max(disk.read_bw_bytes_per_s, disk.write_bw_bytes_per_s);
      if (peak <= 0) continue;
      media[d] = zone->create_link("nvme" + std::to_string(d) + ".media", peak)
                     ->set_sharing_policy(Policy::NONLINEAR, [this, d](double, int n) { return DiskCapacity(d, n); });
    }
    std::vector<sg4::Link*> remote_read(plan_.remotes, nullptr), remote_write(plan_.remotes, nullptr);
    for (int32_t r = 0; r < plan_.remotes; ++r) {
      const models::RemoteTierSpec& tier = node.remote[r];
      const std::string name = "remote" + std::to_string(r);
      if (tier.read_bw_bytes_per_s > 0) remote_read[r] = zone->create_link(name + ".read", tier.read_bw_bytes_per_s);
      if (tier.write_bw_bytes_per_s > 0) remote_write[r] = zone->create_link(name + ".write", tier.write_bw_bytes_per_s);
    }
    sg4::Link* nic_rx = nullptr;
    sg4::Link* nic_tx = nullptr;
    if (node.nic_bw_bytes_per_s > 0) {
      nic_rx = zone->create_link("nic.rx", node.nic_bw_bytes_per_s);
      nic_tx = zone->create_link("nic.tx", node.nic_bw_bytes_per_s);
    }
    ic_sink_ = NewHost(zone, "ic.sink", 1);
    sg4::Link* ic_bus = nullptr;
    if (node.interconnect.bus_bw_bytes_per_s > 0) {
      ic_bus = zone->create_link("ic.bus", node.interconnect.bus_bw_bytes_per_s);
    }

    // Endpoints: a host and a private FATPIPE link (the per-flow cap) per class.
    for (const Endpoint& e : plan_.endpoints) {
      sg4::Host* h = NewHost(zone, e.name, 1);
      sg4::Link* own = zone->create_link(e.name + ".link", e.cap_bw)->set_sharing_policy(Policy::FATPIPE);
      endpoints_.push_back(h);
      if (e.disk >= 0) {
        if (e.write) route(mem_, h, {root, media[e.disk], own});
        else route(h, mem_, {own, media[e.disk], root});
      } else if (e.remote >= 0) {
        if (e.write) route(mem_, h, {root, nic_tx, remote_write[e.remote], own});
        else route(h, mem_, {own, remote_read[e.remote], nic_rx, root});
      } else if (e.collective) {
        route(h, ic_sink_, {own, ic_bus, plan_.collectives_cross_root ? root : nullptr});
      }
    }
    zone->seal();
  }

  void Pump() {
    if (pumping_) return;
    pumping_ = true;
    while (true) {
      to_start_.clear();
      if (dispatcher_.Dispatch(&to_start_) == 0) break;
      for (const Instance& inst : to_start_) Launch(inst);
    }
    pumping_ = false;
  }

  void Launch(const Instance& inst) {
    const TaskPlan& p = plan_.tasks[inst.task];
    const double now = sg4::Engine::get_clock();
    if (p.kind == ActivityKind::kInstant) {
      Finish(inst, now, now);
      return;
    }
    int32_t id;
    if (!free_flights_.empty()) {
      id = free_flights_.back();
      free_flights_.pop_back();
    } else {
      id = static_cast<int32_t>(flights_.size());
      flights_.emplace_back();
    }
    Flight& f = flights_[id];
    f.instance = inst;
    f.start_s = now;
    f.disk = -1;
    f.write = false;
    if (p.kind == ActivityKind::kExec) {
      sg4::ExecPtr exec = sg4::Exec::init();
      exec->set_flops_amount(p.amount);
      exec->set_host(p.on_cpu ? cpu_ : gpu_[p.gpu]);
      if (p.threads > 1) exec->set_thread_count(p.threads);
      f.activity = exec;
      Begin(id);
      return;
    }
    sg4::Host* src;
    sg4::Host* dst;
    double latency_s;
    if (p.gpu >= 0) {
      src = p.to_device ? mem_ : gpu_[p.gpu];
      dst = p.to_device ? gpu_[p.gpu] : mem_;
      latency_s = hw_.node.pcie.latency_s;
    } else {
      const Endpoint& e = plan_.endpoints[p.endpoint];
      src = e.write ? mem_ : endpoints_[p.endpoint];
      dst = e.collective ? ic_sink_ : (e.write ? endpoints_[p.endpoint] : mem_);
      latency_s = e.latency_s;
      if (e.disk >= 0) {
        f.disk = e.disk;
        f.write = e.write;
      }
    }
    // sendto_init(src, dst) does not start the comm (set_source/set_destination would), and
    // Comm::set_rate is ignored on such comms in 3.32: per-flow caps are endpoint links.
    sg4::CommPtr comm = sg4::Comm::sendto_init(src, dst);
    comm->set_payload_size(static_cast<uint64_t>(std::llround(p.amount)));
    f.activity = comm;
    if (latency_s > 0) {
      // Latency is a delay before the transfer, not a link latency: CM02 weighs each flow's
      // share by its route latency (RTT fairness), which would split a disk or the root complex
      // unevenly between flows of different latencies.
      simgrid::kernel::timer::Timer::set(now + latency_s, [this, id] { Begin(id); });
    } else {
      Begin(id);
    }
  }

  // Starts the SimGrid activity of flight `id`.
  void Begin(int32_t id) {
    Flight& f = flights_[id];
    if (f.disk >= 0) ++(f.write ? disk_writes_ : disk_reads_)[f.disk];
    f.activity->set_data(reinterpret_cast<void*>(static_cast<intptr_t>(id)));
    ++activities_;
    f.activity->vetoable_start();
  }

  void Finish(const Instance& inst, double start_s, double end_s) {
    sink_->OnComplete(inst.task, inst.iteration, start_s, end_s);
    makespan_s_ = std::max(makespan_s_, end_s);
    dispatcher_.Complete(inst);
    if (want_progress_ && dispatcher_.completed() % progress_step_ == 0) {
      sink_->OnProgress({dispatcher_.completed(), dispatcher_.total(), end_s});
    }
  }

  const Schedule& schedule_;
  const models::HardwareSpec& hw_;
  const Plan& plan_;
  RunSink* sink_;
  Dispatcher dispatcher_;
  bool want_progress_;
  int64_t progress_step_ = 1;

  sg4::Host* mem_ = nullptr;
  sg4::Host* cpu_ = nullptr;
  sg4::Host* ic_sink_ = nullptr;
  std::vector<sg4::Host*> gpu_;
  std::vector<sg4::Host*> endpoints_;

  std::vector<Flight> flights_;
  std::vector<int32_t> free_flights_;
  std::vector<int32_t> disk_reads_, disk_writes_;  // per disk: comms transferring now
  std::vector<sg4::ActivityPtr> retired_;
  std::vector<Instance> to_start_;
  bool pumping_ = false;
  double makespan_s_ = 0;
  int64_t activities_ = 0;
  int64_t mismatches_ = 0;
  Status error_;
};

}  // namespace

Status RunEngine(const Schedule& schedule, const models::HardwareSpec& hw, const Plan& plan,
                 int64_t iterations, bool want_progress, const std::vector<std::string>& extra_config,
                 RunSink* sink, RunStats* stats) {
  static bool engine_used = false;
  if (engine_used) {
    return FailedPrecondition("SimGrid 3.32 runs one engine per process; use SimIsolation::kFork");
  }
  engine_used = true;
  try {
    xbt_log_control_set("xbt_cfg.thres:warning");
    int argc = 1;
    char arg0[] = "tierflow-sim";
    char* argv[] = {arg0, nullptr};
    sg4::Engine engine(&argc, argv);
    // Trap 4: the default network model caps fast links (TCP window) and adds cross traffic.
    sg4::Engine::set_config("network/model:CM02");
    sg4::Engine::set_config("network/crosstraffic:0");
    sg4::Engine::set_config("network/TCP-gamma:0");
    for (const std::string& item : extra_config) sg4::Engine::set_config(item);
    Runner runner(schedule, hw, plan, iterations, want_progress, sink);
    g_runner = &runner;
    sg4::Activity::on_completion_cb([](const sg4::Activity& a) {
      if (g_runner != nullptr) g_runner->OnActivityDone(a);
    });
    Status s = runner.Run(stats);
    g_runner = nullptr;
    return s;
  } catch (const std::exception& e) {
    g_runner = nullptr;
    return Internal(std::string("SimGrid: ") + e.what());
  }
}

}  // namespace tierflow::sim::internal
