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

// The sharing weight of the I/O path's and the hand-overs' execs against user execs (weight 1):
// far above, so that they get their bound whatever else runs on the node's cores.
constexpr double kIoCpuPriority = 1e6;
// SimGrid's activity signals are process-wide statics: they are connected once and forward to
// the runner of the current (only) simulation in this process.
Runner* g_runner = nullptr;
// The data of an I/O path's load cancelled to be restarted at another bound (Runner::BoundLoads):
// its completion signals are not a flight's.
void* const kCancelledLoad = reinterpret_cast<void*>(static_cast<intptr_t>(-1));

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
    // The finest unit of bytes whose comms fit SimGrid's 64-bit payloads (ByteUnits).
    double most = 0;
    for (const TaskPlan& p : plan_.tasks) most = std::max({most, p.amount, p.network_amount});
    while (byte_units_ > 1 && most * byte_units_ > 0x1p62) byte_units_ /= 2;
  }

  Status Run(RunStats* stats) {
    BuildPlatform();
    Pump();
    sg4::Engine::get_instance()->run();
    retired_.clear();
    cancelled_.clear();
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
    if (activity.get_data<void>() == kCancelledLoad) {
      // Signalled twice: when cancelled (CANCELED), then once the model drops it (FAILED, at a
      // later date); it is released one callback after the second.
      if (activity.get_state() == sg4::Activity::State::FAILED) {
        for (size_t i = 0; i < cancelled_.size(); ++i) {
          if (cancelled_[i].get() != &activity) continue;
          retired_.push_back(std::move(cancelled_[i]));
          cancelled_[i] = std::move(cancelled_.back());
          cancelled_.pop_back();
          break;
        }
      }
      return;
    }
    // Trap 3: a reference dropped inside the completion path crashes the engine; the previous
    // callback's activities are released here, one callback later.
    retired_.clear();
    const auto id = static_cast<int32_t>(reinterpret_cast<intptr_t>(activity.get_data<void>()));
    TF_CHECK(id >= 0 && id < static_cast<int32_t>(flights_.size()));
    Flight& f = flights_[id];
    if (activity.get_state() != sg4::Activity::State::FINISHED && error_.ok()) {
      error_ = Internal("SimGrid activity of task '" + schedule_.tasks()[f.instance.task].id +
                        "' ended in state " + activity.get_state_str());
    }
    // A disk flow leaves its device when its comm ends, though its I/O path's exec may run on
    // (then at its full bound: the path catching up with the bytes already moved).
    if (f.disk >= 0 && f.comm >= 0 && f.activities[static_cast<size_t>(f.comm)].get() == &activity) LeaveDisk(id);
    if (f.user_exec >= 0 && f.activities[static_cast<size_t>(f.user_exec)].get() == &activity) {
      const TaskPlan& p = plan_.tasks[f.instance.task];
      HoldCores(p.node, -p.threads);
    }
    if (f.load >= 0 && f.activities[static_cast<size_t>(f.load)].get() == &activity) {
      f.load_done = true;
      if (!f.flowing) LeaveLoads(id);
    }
    if (--f.pending > 0) return;  // the level's comms on other nodes, or the I/O path's exec, are still under way
    const TaskPlan& p = plan_.tasks[f.instance.task];
    if (f.level == 0 && p.endpoint >= 0 && p.network_endpoint >= 0) {
      RemoveDemand(id);
      StartLevel(id, 1);  // a collective's level between the nodes follows the one within
      return;
    }
    for (sg4::ActivityPtr& a : f.activities) retired_.push_back(std::move(a));
    f.activities.clear();
    EndFlight(id);
  }

  // Flight `id` has ended now: its task instance completes and what that readies is launched.
  void EndFlight(int32_t id) {
    RemoveDemand(id);
    const Instance inst = flights_[id].instance;
    free_flights_.push_back(id);
    Finish(inst, flights_[id].start_s, sg4::Engine::get_clock());
    Pump();
  }

  // The NONLINEAR sharing callback of disk `disk`'s media link on its node (`slot`: node *
  // disks per node + disk): the aggregate bandwidth of the reads and writes flowing on it now. SimGrid calls it while solving, after every completion
  // callback of the same date has run and after every comm started at that date has been added,
  // so the counts are current; `n_flows` (SimGrid's own count) checks that.
  double DiskCapacity(int32_t disk, int32_t slot, int n_flows) {
    const int32_t reads = disk_reads_[slot], writes = disk_writes_[slot];
    if (reads + writes - disk_fast_[static_cast<size_t>(slot)] != n_flows) ++mismatches_;  // its comms: not the streams timed alone
    const models::NvmeSpec& spec = hw_.node.nvme[disk];
    if (reads + writes == 0) return std::max(spec.read_bw_bytes_per_s, spec.write_bw_bytes_per_s) * byte_units_;
    return models::DiskSharedCapacity(spec, reads, writes) * byte_units_;
  }

 private:
  // Shares the capacity of the device of disk slot `slot` (DiskCapacity) among the streams on it
  // in proportion to their bytes in flight, each up to its own Little's-law cap: an SSD serves
  // the requests queued on it, so a stream keeping 8 MiB queued gets eight times the service of
  // one keeping 1 MiB. Max-min sharing of the media link alone would split it equally per
  // stream and let a shallow stream keep its cap beside deep ones. SimGrid 3.32's comms carry no
  // weight, so the shares are set as the bandwidth of each class's FATPIPE endpoint link (a
  // per-flow bound), every time a stream on the device starts or ends. While user execs hold
  // every core of the node (HoldCores), each stream then keeps its class's share of that rate
  // (Endpoint::kept_beside_compute): its I/O path waits for a core, the device does not slow,
  // so what a slowed stream leaves is not handed to the others.
  void ShareDisk(int32_t slot) {
    const int32_t reads = disk_reads_[slot], writes = disk_writes_[slot];
    if (reads + writes == 0) return;
    const bool busy = CoresHeld(slot / plan_.nvmes);
    const double capacity = models::DiskSharedCapacity(hw_.node.nvme[static_cast<size_t>(slot % plan_.nvmes)], reads, writes);
    sharing_.clear();
    double weight = 0;
    for (int32_t e : slot_endpoints_[static_cast<size_t>(slot)]) {
      const int32_t flows = endpoint_flows_[static_cast<size_t>(e)];
      if (flows == 0) continue;
      sharing_.push_back(e);
      weight += flows * plan_.endpoints[static_cast<size_t>(e)].in_flight_bytes;
    }
    // Water-filling: the streams whose cap is below their weighted share keep their cap; the
    // others split what is left by weight.
    const auto cap_per_weight = [this](int32_t e) {
      const Endpoint& ep = plan_.endpoints[static_cast<size_t>(e)];
      return ep.cap_bw / ep.in_flight_bytes;
    };
    std::sort(sharing_.begin(), sharing_.end(), [&](int32_t a, int32_t b) { return cap_per_weight(a) < cap_per_weight(b); });
    double left = capacity;
    for (int32_t e : sharing_) {
      const Endpoint& ep = plan_.endpoints[static_cast<size_t>(e)];
      const double flows = endpoint_flows_[static_cast<size_t>(e)];
      const double rate = weight > 0 && left > 0 ? std::min(ep.cap_bw, left / weight * ep.in_flight_bytes) : ep.cap_bw;
      left -= flows * rate;
      weight -= flows * ep.in_flight_bytes;
      const double kept = busy ? rate * ep.kept_beside_compute : rate;
      SetEndpointRate(e, kept);
      TimeStreams(e, kept);
    }
  }

  // Whether the user execs running on node `node`'s cores now hold every one of them.
  bool CoresHeld(int32_t node) const { return node_threads_[static_cast<size_t>(node)] >= hw_.node.cpu.cores; }

  // A user exec of `threads` threads starts (threads > 0) or ends (< 0) on node `node`'s cores:
  // when that changes whether they hold every core, the node's disks are shared again (ShareDisk)
  // and their streams' I/O paths bounded to the new rates (BoundLoads).
  void HoldCores(int32_t node, int32_t threads) {
    const bool before = CoresHeld(node);
    node_threads_[static_cast<size_t>(node)] += threads;
    if (CoresHeld(node) == before) return;
    for (int32_t slot = node * plan_.nvmes; slot < (node + 1) * plan_.nvmes; ++slot) {
      ShareDisk(slot);
      BoundLoads(slot);
    }
  }

  // The streams on the device of disk slot `slot` have changed: it is shared again (ShareDisk)
  // and the I/O-path loads of every ring on it bounded to the new rates (BoundLoads).
  void Reshare(int32_t slot) {
    ShareDisk(slot);
    for (int32_t ring : device_rings_[static_cast<size_t>(slot)]) BoundLoads(ring);
  }

  struct Flight {
    // Its activities so far: one, or a collective's comms, one per node and level; referenced
    // until the flight ends (trap 3). Those from `unstarted` on wait for Begin.
    std::vector<sg4::ActivityPtr> activities;
    size_t unstarted = 0;
    int32_t pending = 0;  // started or waiting, not complete
    int32_t level = 0;    // of a collective: 0 within nodes (or the only one), 1 between them
    Instance instance;
    double start_s = 0;
    int32_t disk = -1;    // node * disks per node + disk, for the media link's flow counts
    int32_t ring = -1;    // node * disks per node + the entry whose ring serves it (Endpoint::ring)
    int32_t endpoint = -1;  // of a disk flow: its class
    bool write = false;
    int32_t comm = -1;      // of a disk flow: the index of its comm in `activities`
    int32_t user_exec = -1;  // of a user exec on a node's cores: its index in `activities` (HoldCores)
    bool flowing = false;   // a disk flow's comm is under way
    // Its I/O path's load (TaskPlan::cpu_amount): the index of its exec in `activities` once
    // started, whether it has ended, and the bound and its stream's rate when it last started.
    int32_t load = -1;
    bool load_done = false;
    double load_bound = 0;
    double load_rate = 0;
    // The watched links its flows cross (each node's root complex, each GPU's copy links), the
    // most its flows take of each, and whether that is counted in their demand now (CopyAlone).
    std::vector<int32_t> links;
    double bound = 0;
    bool counted = false;
    // Its route's ends and its bytes, for a copy or disk stream: its comm's, made when it begins
    // or when it is handed to SimGrid (Promote).
    sg4::Host* src = nullptr;
    sg4::Host* dst = nullptr;
    double bytes = 0;
    // A copy or disk stream timed without SimGrid (`fast`, from its begin until it ends or is
    // handed to SimGrid): its bytes left at `since_s`, its rate from then (a copy's bound; a
    // stream's share of its device, TimeStreams), and the timer of its end at that rate (Retime).
    bool fast = false;
    double left = 0;
    double since_s = 0;
    double rate = 0;
    simgrid::kernel::timer::Timer* timer = nullptr;
  };

  // A copy alone on its route: while the flows on each link a GPU copy crosses (its GPU's link,
  // its node's root complex) could all run at their most at once — the sum of their bounds
  // within the link's capacity — each does, so the copy's end is known when it begins and a timer
  // ends it, without a SimGrid comm. Every flow that crosses a watched link counts its bound
  // there from its begin (AddDemand) to its end (RemoveDemand), counted high where unsure (a disk
  // stream by its class's cap, a device's streams together by no more than the device can take:
  // DeviceDemand; a collective by its bus). Once a flow's bound would take a link
  // past its capacity, every copy timed on that link becomes a SimGrid comm of its bytes left
  // (Promote), and SimGrid shares the link from then on: the same rates as if it had been one
  // from the start.
  int32_t RootLink(int32_t node) const { return hw_.node.pcie.root_complex_bw_bytes_per_s > 0 ? node : -1; }
  int32_t GpuLink(int32_t gpu, bool to_device) const { return plan_.nodes + 2 * gpu + (to_device ? 0 : 1); }

  // Within the link's capacity, give or take the rounding of the sums (four 25 GB/s copies fill a
  // 100 GB/s root complex exactly, and still each gets its 25).
  bool Fits(int32_t link) const { return link_demand_[static_cast<size_t>(link)] <= link_cap_[static_cast<size_t>(link)] * (1 + 1e-9); }

  void AddDemand(int32_t id) {
    Flight& f = flights_[id];
    if (f.counted || f.links.empty()) return;
    f.counted = true;
    const double demand = f.disk >= 0 ? DeviceDemand(f.disk, f.bound, +1) : f.bound;
    for (const int32_t l : f.links) {
      link_demand_[static_cast<size_t>(l)] += demand;
      ++link_flows_[static_cast<size_t>(l)];
    }
    for (const int32_t l : f.links) {
      if (Fits(l)) continue;
      promoting_ = link_fast_[static_cast<size_t>(l)];
      for (const int32_t other : promoting_) Promote(other);
    }
  }

  void RemoveDemand(int32_t id) {
    Flight& f = flights_[id];
    if (f.counted) {
      const double demand = f.disk >= 0 ? -DeviceDemand(f.disk, f.bound, -1) : f.bound;
      for (const int32_t l : f.links) {
        // Exactly 0 once the link carries nothing: no rounding left over from the sums.
        link_demand_[static_cast<size_t>(l)] = --link_flows_[static_cast<size_t>(l)] == 0 ? 0 : link_demand_[static_cast<size_t>(l)] - demand;
      }
    }
    f.counted = false;
    f.links.clear();
  }

  // The streams of one device take no more at once than its largest capacity, whatever their
  // classes' caps add up to: they count on the root complex together, at the smaller of the two
  // (a device of 7 GB/s with four reads capped at 7 each counts 7, not 28). A disk stream of cap
  // `cap` on device slot `slot` begins (sign +1) or ends (-1): the change in its device's count.
  // Never below what the streams can take, so a fit still means max-min gives each flow its
  // bound; a stream's end never raises it.
  double DeviceDemand(int32_t slot, double cap, int32_t sign) {
    const size_t s = static_cast<size_t>(slot);
    const double before = std::min(device_caps_[s], device_peak_[s]);
    device_streams_[s] += sign;
    device_caps_[s] = device_streams_[s] == 0 ? 0 : device_caps_[s] + sign * cap;  // exactly 0 when none
    return std::min(device_caps_[s], device_peak_[s]) - before;
  }

  // Copy flight `id` begins, after its latency: timed alone if its links have room for every
  // flow on them, else a SimGrid comm.
  void BeginCopy(int32_t id) {
    AddDemand(id);
    Flight& f = flights_[id];
    const bool alone = std::all_of(f.links.begin(), f.links.end(), [this](int32_t l) { return Fits(l); });
    if (!alone) {
      Add(id, f.src, f.dst, f.bytes);
      Begin(id);
      return;
    }
    StartTimed(id);
    for (const int32_t l : f.links) link_fast_[static_cast<size_t>(l)].push_back(id);
    Retime(id, f.bound);
  }

  // Copy or disk stream `id` begins timed alone, its rate not yet set (Retime).
  void StartTimed(int32_t id) {
    Flight& f = flights_[id];
    f.fast = true;
    ++f.pending;
    f.left = f.bytes;
    f.since_s = sg4::Engine::get_clock();
    f.rate = 0;
  }

  // Flow `id`, timed alone, moves at `rate` from now: its bytes left brought to now, its end's
  // timer set again.
  void Retime(int32_t id, double rate) {
    Flight& f = flights_[id];
    const double now = sg4::Engine::get_clock();
    f.left = LeftNow(f);
    f.since_s = now;
    f.rate = rate;
    if (f.timer != nullptr) f.timer->remove();
    f.timer = rate > 0 ? simgrid::kernel::timer::Timer::set(now + f.left / rate, [this, id] { EndTimed(id); }) : nullptr;
  }

  double LeftNow(const Flight& f) const { return std::max(0.0, f.left - f.rate * (sg4::Engine::get_clock() - f.since_s)); }

  // Flow `id`, timed alone, has moved its bytes.
  void EndTimed(int32_t id) {
    Flight& f = flights_[id];
    f.timer = nullptr;
    Unlist(id);
    if (f.disk >= 0) LeaveDisk(id);
    if (--f.pending == 0) EndFlight(id);
  }

  // Copy or disk stream `id`, timed alone until now, goes on as a SimGrid comm of its bytes left.
  // A stream's class link is opened to its cap while the comm starts (Begin), its share set again
  // after.
  void Promote(int32_t id) {
    Flight& f = flights_[id];
    const double left = LeftNow(f);
    if (f.timer != nullptr) f.timer->remove();
    f.timer = nullptr;
    Unlist(id);
    --f.pending;
    if (f.disk >= 0) SetEndpointRate(f.endpoint, plan_.endpoints[static_cast<size_t>(f.endpoint)].cap_bw);
    f.comm = static_cast<int32_t>(f.activities.size());
    Add(id, f.src, f.dst, left);
    StartAdded(id);
    if (f.disk >= 0) ShareDisk(f.disk);
  }

  // Copy or disk stream `id` is no longer timed alone: off its links' lists (and its class's).
  void Unlist(int32_t id) {
    Flight& f = flights_[id];
    f.fast = false;
    const auto drop = [id](std::vector<int32_t>& on) { on.erase(std::find(on.begin(), on.end(), id)); };
    for (const int32_t l : f.links) drop(link_fast_[static_cast<size_t>(l)]);
    if (f.disk >= 0) {
      drop(endpoint_fast_[static_cast<size_t>(f.endpoint)]);
      --disk_fast_[static_cast<size_t>(f.disk)];
    }
  }

  // Sets the I/O path's load of every stream of ring slot `slot` (node * disks per node + the
  // entry whose ring serves it; TaskPlan::cpu_amount) to what the streams flowing through that
  // ring now call for: together the largest class figure among them, each
  // its share of that in proportion to its figure (models::IoPathScale). A load runs at that
  // bound for as long as its stream takes to move its bytes left at its rate now, plus any work
  // it is behind (a path short of cores holds its task's end back, not the transfer); once the
  // flow has left the device, the work left at the class's full figure. SimGrid 3.32 refuses a
  // new bound on a started exec: a load whose bound, or flowing stream's rate, changes is
  // cancelled and restarted. A stream still flowing after its load has ended counts in the
  // device's figures until its flow ends.
  void BoundLoads(int32_t slot) {
    const std::vector<int32_t>& loads = slot_loads_[static_cast<size_t>(slot)];
    load_cores_.clear();
    for (const int32_t id : loads) {
      const Flight& f = flights_[static_cast<size_t>(id)];
      if (f.flowing) load_cores_.push_back(plan_.tasks[f.instance.task].cpu_bound);
    }
    const double scale = models::IoPathScale(load_cores_);
    for (const int32_t id : loads) {
      Flight& f = flights_[static_cast<size_t>(id)];
      if (f.load_done) continue;
      const TaskPlan& p = plan_.tasks[f.instance.task];
      const double bound = f.flowing ? p.cpu_bound * scale : p.cpu_bound;
      // Its stream's rate now (ShareDisk sets it as its class's link bandwidth).
      const double rate = f.flowing ? endpoint_links_[static_cast<size_t>(f.endpoint)]->get_bandwidth() / byte_units_ : 0;
      const double bytes_left = f.flowing ? f.activities[static_cast<size_t>(f.comm)]->get_remaining() / byte_units_ : 0;
      double lag = 0;
      if (f.load >= 0) {
        // Unchanged: the same bound, and for a flowing stream the same rate (a load whose flow has
        // just ended at the same bound runs on with what it has left, its lag).
        if (std::abs(bound - f.load_bound) <= 1e-9 * p.cpu_bound &&
            (!f.flowing || std::abs(rate - f.load_rate) <= 1e-9 * f.load_rate)) {
          continue;
        }
        if (f.flowing && bytes_left <= 0) continue;  // its comm ends at this date
        sg4::ActivityPtr& load = f.activities[static_cast<size_t>(f.load)];
        const double left = load->get_remaining();
        if (left <= 0) continue;  // ends at this date
        lag = std::max(0.0, left - (f.load_rate > 0 ? f.load_bound * bytes_left / f.load_rate : 0));
        // Held in cancelled_ before the cancel signals it (OnActivityDone). Cancelled inside a
        // completion callback, an exec keeps its share of the cores until it would have ended
        // (its action is dropped only then, signalled FAILED); suspended first, it yields them
        // at once.
        cancelled_.push_back(load);
        load->set_data(kCancelledLoad);
        load->suspend();
        load->cancel();
      } else {
        f.load = static_cast<int32_t>(f.activities.size());
        f.activities.emplace_back();
        f.unstarted = f.activities.size();
      }
      sg4::ActivityPtr& load = f.activities[static_cast<size_t>(f.load)];
      load = CoreLoad(p.node, lag + (rate > 0 ? bound * bytes_left / rate : 0), bound);
      load->set_data(reinterpret_cast<void*>(static_cast<intptr_t>(id)));
      ++activities_;
      load->vetoable_start();
      f.load_bound = bound;
      f.load_rate = rate;
    }
  }

  // Flight `id`'s load has ended and its flow left the device: its device's figures no longer
  // count it.
  void LeaveLoads(int32_t id) {
    std::vector<int32_t>& loads = slot_loads_[static_cast<size_t>(flights_[static_cast<size_t>(id)].ring)];
    loads.erase(std::find(loads.begin(), loads.end(), id));
  }

  // A link of `bytes_per_s`, in SimGrid's units (ByteUnits).
  sg4::Link* NewLink(sg4::NetZone* zone, const std::string& name, double bytes_per_s) const {
    return zone->create_link(name, bytes_per_s * byte_units_);
  }

  sg4::Host* NewHost(sg4::NetZone* zone, const std::string& name, double speed, int cores = 1) {
    return zone->create_host(name, speed)->set_core_count(cores);
  }

  // One node's hosts and links: node n's names start with node{n}. on a cluster.
  struct NodeHosts {
    sg4::Host* mem = nullptr;
    sg4::Host* cpu = nullptr;
    sg4::Host* ic_sink = nullptr;   // where the node's within-node collectives flow
    sg4::Host* net_sink = nullptr;  // where its NIC's collective traffic flows
    sg4::Link* root = nullptr;
    sg4::Link* nic_rx = nullptr;
    sg4::Link* nic_tx = nullptr;
    sg4::Link* ic_bus = nullptr;
    std::vector<sg4::Link*> media;  // per nvme entry (null for a directory on another's device)
    std::vector<sg4::Link*> remote_read, remote_write;
  };

  void BuildPlatform() {
    const models::NodeSpec& node = hw_.node;
    using Policy = sg4::Link::SharingPolicy;
    sg4::NetZone* zone = sg4::create_full_zone(node.name.empty() ? "cluster" : node.name);
    auto route = [&](sg4::Host* src, sg4::Host* dst, std::initializer_list<sg4::Link*> links) {
      std::vector<sg4::LinkInRoute> hops;
      for (sg4::Link* l : links) {
        if (l != nullptr) hops.emplace_back(l);
      }
      zone->add_route(src->get_netpoint(), dst->get_netpoint(), nullptr, nullptr, hops, false);
    };
    disk_reads_.assign(static_cast<size_t>(plan_.nodes * plan_.nvmes), 0);
    disk_writes_.assign(disk_reads_.size(), 0);
    disk_fast_.assign(disk_reads_.size(), 0);
    device_caps_.assign(disk_reads_.size(), 0);
    device_streams_.assign(disk_reads_.size(), 0);
    device_peak_.assign(disk_reads_.size(), 0);
    for (size_t slot = 0; slot < device_peak_.size(); ++slot) {
      // The most DiskSharedCapacity gives any mix: a harmonic mean of the two peaks is below the
      // larger, times the mixed efficiency where that is above 1.
      const models::NvmeSpec& disk = node.nvme[slot % static_cast<size_t>(plan_.nvmes)];
      double efficiency = std::max(1.0, disk.mixed_efficiency);
      for (const auto& point : disk.mixed_efficiency_by_streams) efficiency = std::max(efficiency, point.second);
      device_peak_[slot] = std::max(disk.read_bw_bytes_per_s, disk.write_bw_bytes_per_s) * efficiency;
    }
    node_threads_.assign(static_cast<size_t>(plan_.nodes), 0);
    slot_loads_.assign(disk_reads_.size(), {});
    device_rings_.assign(disk_reads_.size(), {});
    for (int32_t n = 0; n < plan_.nodes; ++n) {
      for (int32_t ring = 0; ring < plan_.nvmes; ++ring) {
        const int32_t root = node.nvme[static_cast<size_t>(ring)].same_device_as;
        device_rings_[static_cast<size_t>(n * plan_.nvmes + (root >= 0 ? root : ring))].push_back(n * plan_.nvmes + ring);
      }
    }
    link_cap_.assign(static_cast<size_t>(plan_.nodes + 2 * plan_.gpus), 0);
    for (int32_t n = 0; n < plan_.nodes; ++n) link_cap_[static_cast<size_t>(n)] = node.pcie.root_complex_bw_bytes_per_s;
    for (int32_t g = 0; g < plan_.gpus; ++g) {
      link_cap_[static_cast<size_t>(GpuLink(g, true))] = node.pcie.h2d_bw_bytes_per_s;
      link_cap_[static_cast<size_t>(GpuLink(g, false))] = node.pcie.d2h_bw_bytes_per_s;
    }
    link_demand_.assign(link_cap_.size(), 0);
    link_flows_.assign(link_cap_.size(), 0);
    link_fast_.assign(link_cap_.size(), {});
    nodes_.resize(static_cast<size_t>(plan_.nodes));
    for (int32_t n = 0; n < plan_.nodes; ++n) {
      NodeHosts& h = nodes_[static_cast<size_t>(n)];
      const std::string at = plan_.nodes > 1 ? "node" + std::to_string(n) + "." : std::string();
      h.mem = NewHost(zone, at + "host.mem", 1);
      h.cpu = NewHost(zone, at + "cpu", kExecSpeed, std::max(1, node.cpu.cores));
      for (int32_t g = 0; g < plan_.gpus_per_node; ++g) gpu_.push_back(NewHost(zone, at + "gpu" + std::to_string(g), kExecSpeed));
      if (node.pcie.root_complex_bw_bytes_per_s > 0) h.root = NewLink(zone, at + "pcie.root", node.pcie.root_complex_bw_bytes_per_s);

      // GPU copies: one link per direction per GPU (a split-duplex link with h2d != d2h), then
      // the root complex.
      for (int32_t g = 0; g < plan_.gpus_per_node; ++g) {
        const std::string name = at + "gpu" + std::to_string(g);
        sg4::Host* gpu = gpu_[static_cast<size_t>(n * plan_.gpus_per_node + g)];
        if (node.pcie.h2d_bw_bytes_per_s > 0) route(h.mem, gpu, {h.root, NewLink(zone, name + ".h2d", node.pcie.h2d_bw_bytes_per_s)});
        if (node.pcie.d2h_bw_bytes_per_s > 0) route(gpu, h.mem, {NewLink(zone, name + ".d2h", node.pcie.d2h_bw_bytes_per_s), h.root});
      }

      // NVMe media: one link shared by reads and writes whose capacity is DiskSharedCapacity of
      // the flows on it (trap 2: links from a per-device host, never SimGrid's Disk/Io).
      h.media.assign(static_cast<size_t>(plan_.nvmes), nullptr);
      for (int32_t d = 0; d < plan_.nvmes; ++d) {
        const models::NvmeSpec& disk = node.nvme[d];
        if (disk.same_device_as >= 0) continue;  // its device's link: the routes name that one
        const double peak = std::max(disk.read_bw_bytes_per_s, disk.write_bw_bytes_per_s);
        if (peak <= 0) continue;
        const int32_t slot = n * plan_.nvmes + d;
        h.media[d] = NewLink(zone, at + "nvme" + std::to_string(d) + ".media", peak)
                         ->set_sharing_policy(Policy::NONLINEAR, [this, d, slot](double, int flows) { return DiskCapacity(d, slot, flows); });
      }
      h.remote_read.assign(static_cast<size_t>(plan_.remotes), nullptr);
      h.remote_write.assign(static_cast<size_t>(plan_.remotes), nullptr);
      for (int32_t r = 0; r < plan_.remotes; ++r) {
        const models::RemoteTierSpec& tier = node.remote[r];
        const std::string name = at + "remote" + std::to_string(r);
        if (tier.read_bw_bytes_per_s > 0) h.remote_read[r] = NewLink(zone, name + ".read", tier.read_bw_bytes_per_s);
        if (tier.write_bw_bytes_per_s > 0) h.remote_write[r] = NewLink(zone, name + ".write", tier.write_bw_bytes_per_s);
      }
      if (node.nic_bw_bytes_per_s > 0) {
        h.nic_rx = NewLink(zone, at + "nic.rx", node.nic_bw_bytes_per_s);
        h.nic_tx = NewLink(zone, at + "nic.tx", node.nic_bw_bytes_per_s);
      }
      h.ic_sink = NewHost(zone, at + "ic.sink", 1);
      h.net_sink = NewHost(zone, at + "net.sink", 1);
      if (node.interconnect.bus_bw_bytes_per_s > 0) h.ic_bus = NewLink(zone, at + "ic.bus", node.interconnect.bus_bw_bytes_per_s);
    }

    // Endpoints: a host and a private FATPIPE link (the per-flow cap) per class and node.
    endpoint_flows_.assign(plan_.endpoints.size(), 0);
    endpoint_fast_.assign(plan_.endpoints.size(), {});
    slot_endpoints_.assign(disk_reads_.size(), {});
    for (const Endpoint& e : plan_.endpoints) {
      const NodeHosts& h = nodes_[static_cast<size_t>(e.node)];
      sg4::Host* host = NewHost(zone, e.name, 1);
      sg4::Link* own = NewLink(zone, e.name + ".link", e.cap_bw)->set_sharing_policy(Policy::FATPIPE);
      endpoints_.push_back(host);
      endpoint_links_.push_back(own);
      if (e.disk >= 0) {
        slot_endpoints_[static_cast<size_t>(e.node * plan_.nvmes + e.disk)].push_back(static_cast<int32_t>(endpoints_.size() - 1));
        if (e.write) route(h.mem, host, {h.root, h.media[e.disk], own});
        else route(host, h.mem, {own, h.media[e.disk], h.root});
      } else if (e.remote >= 0) {
        if (e.write) route(h.mem, host, {h.root, h.nic_tx, h.remote_write[e.remote], own});
        else route(host, h.mem, {own, h.remote_read[e.remote], h.nic_rx, h.root});
      } else if (e.collective) {
        route(host, h.ic_sink, {own, h.ic_bus, plan_.collectives_cross_root ? h.root : nullptr});
      } else if (e.network) {
        // What the node sends and what it receives, both at once (a pass of a ring or tree); the
        // network between the NICs is not a bottleneck (a non-blocking fabric).
        route(host, h.net_sink, {own, h.nic_tx, h.nic_rx});
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
    f.ring = -1;
    f.endpoint = -1;
    f.write = false;
    f.level = 0;
    f.pending = 0;
    f.activities.clear();
    f.unstarted = 0;
    f.comm = -1;
    f.user_exec = -1;
    f.flowing = false;
    f.load = -1;
    f.load_done = false;
    f.links.clear();
    f.bound = 0;
    f.counted = false;
    f.fast = false;
    f.timer = nullptr;
    if (p.handover_amount > 0) {
      // The hand-over's load on the cores (TaskPlan::handover_amount), from the launch on, beside
      // the delay; the task ends when it has too.
      sg4::ExecPtr exec = CoreLoad(p.handover_node, p.handover_amount, p.handover_bound);
      exec->set_data(reinterpret_cast<void*>(static_cast<intptr_t>(id)));
      f.activities.push_back(exec);
      f.unstarted = 1;
      ++f.pending;
      ++activities_;
      exec->vetoable_start();
    }
    if (p.kind == ActivityKind::kExec && p.alone) {
      RunAlone(id, now);
      return;
    }
    if (p.kind == ActivityKind::kExec) {
      sg4::ExecPtr exec = sg4::Exec::init();
      exec->set_flops_amount(p.amount);
      exec->set_host(p.on_cpu ? nodes_[static_cast<size_t>(p.node)].cpu : gpu_[static_cast<size_t>(p.gpu)]);
      if (p.threads > 1) exec->set_thread_count(p.threads);
      if (p.on_cpu) f.user_exec = static_cast<int32_t>(f.activities.size());
      f.activities.push_back(exec);
      ++f.pending;
      BeginAfter(id, p.delay_s);
      return;
    }
    if (p.gpu >= 0) {
      const int32_t on_node = p.gpu / plan_.gpus_per_node;
      sg4::Host* mem = nodes_[static_cast<size_t>(on_node)].mem;
      sg4::Host* gpu = gpu_[static_cast<size_t>(p.gpu)];
      f.src = p.to_device ? mem : gpu;
      f.dst = p.to_device ? gpu : mem;
      f.bytes = static_cast<double>(std::llround(p.amount));  // as the comm's payload
      const int32_t own = GpuLink(p.gpu, p.to_device);
      f.links.push_back(own);
      f.bound = link_cap_[static_cast<size_t>(own)];
      if (const int32_t root = RootLink(on_node); root >= 0) {
        f.links.push_back(root);
        f.bound = std::min(f.bound, link_cap_[static_cast<size_t>(root)]);
      }
      const double latency_s = p.delay_s + hw_.node.pcie.latency_s;
      if (p.handover_amount > 0) {  // ends with its hand-over's load: always a SimGrid comm
        Transfer(id, f.src, f.dst, p.amount, latency_s);
      } else if (latency_s > 0) {
        SetTimer(sg4::Engine::get_clock() + latency_s, [this, id] { BeginCopy(id); });
      } else {
        BeginCopy(id);
      }
      return;
    }
    const Endpoint& e = plan_.endpoints[static_cast<size_t>(p.endpoint >= 0 ? p.endpoint : p.network_endpoint)];
    if (e.collective || e.network) {
      StartLevel(id, p.endpoint >= 0 ? 0 : 1, p.delay_s);
      return;
    }
    if (const int32_t root = RootLink(e.node); root >= 0) {
      // A disk stream takes at most its class's cap; a remote tier's, the tier's bandwidth.
      const models::RemoteTierSpec* tier = e.remote >= 0 ? &hw_.node.remote[static_cast<size_t>(e.remote)] : nullptr;
      f.links.push_back(root);
      f.bound = tier == nullptr ? e.cap_bw : e.write ? tier->write_bw_bytes_per_s : tier->read_bw_bytes_per_s;
    }
    sg4::Host* mem = nodes_[static_cast<size_t>(e.node)].mem;
    sg4::Host* far = endpoints_[static_cast<size_t>(p.endpoint)];
    f.src = e.write ? mem : far;
    f.dst = e.write ? far : mem;
    if (e.disk < 0) {
      Transfer(id, f.src, f.dst, p.amount, e.latency_s);
      return;
    }
    f.disk = e.node * plan_.nvmes + e.disk;
    f.ring = e.node * plan_.nvmes + e.ring;
    f.endpoint = p.endpoint;
    f.write = e.write;
    f.bytes = static_cast<double>(std::llround(p.amount));  // as the comm's payload
    if (p.cpu_amount > 0) {
      // The I/O path's CPU beside the transfer (TaskPlan::cpu_amount): started with it, once
      // the device's shares are known (Begin, BoundLoads).
      ++f.pending;
    }
    if (e.latency_s > 0) {
      SetTimer(sg4::Engine::get_clock() + e.latency_s, [this, id] { BeginStream(id); });
    } else {
      BeginStream(id);
    }
  }

  // Disk stream `id` begins, after its latency: timed alone (TimeStreams) when nothing else
  // shares its route but its device, else a SimGrid comm.
  void BeginStream(int32_t id) {
    AddDemand(id);
    Flight& f = flights_[id];
    const TaskPlan& p = plan_.tasks[f.instance.task];
    const bool alone = p.cpu_amount == 0 && p.handover_amount == 0 &&
                       std::all_of(f.links.begin(), f.links.end(), [this](int32_t l) { return Fits(l); });
    if (!alone) {
      f.comm = static_cast<int32_t>(f.activities.size());
      Add(id, f.src, f.dst, f.bytes);
      Begin(id);
      return;
    }
    StartTimed(id);
    for (const int32_t l : f.links) link_fast_[static_cast<size_t>(l)].push_back(id);
    endpoint_fast_[static_cast<size_t>(f.endpoint)].push_back(id);
    ++disk_fast_[static_cast<size_t>(f.disk)];
    JoinDisk(id);  // its device shared again, which times it
  }

  // A disk stream timed alone: on a device's streams, with a root complex (if any) whose flows
  // could all run at their most at once (as for copies, CopyAlone), the device is the only thing
  // a stream shares, and ShareDisk gives each its rate there exactly: the rates it sets on the
  // classes' links sum within the device's capacity, so SimGrid's max-min would give every
  // stream its class's link rate. Each such stream is so timed at that rate, and timed again
  // whenever ShareDisk changes it (a stream starting or ending on the device, the cores held or
  // let go); it counts in the device's figures as a comm does. Once the root complex's flows
  // would exceed it, it goes on as a SimGrid comm of its bytes left (Promote). A stream
  // with an I/O path's load (BoundLoads reads its comm) or a hand-over is always a comm.
  void TimeStreams(int32_t e, double rate) {
    for (const int32_t id : endpoint_fast_[static_cast<size_t>(e)]) {
      if (flights_[static_cast<size_t>(id)].rate != rate) Retime(id, rate);
    }
  }

  // Flight `id`, an exec alone on its host (TaskPlan::alone), launched at `now`: it begins after
  // its delay and runs at its full rate, one core per thread, so its end is known; a timer ends
  // it there. An exec on a node's cores holds them meanwhile (HoldCores), as a SimGrid one does.
  void RunAlone(int32_t id, double now) {
    const TaskPlan& p = plan_.tasks[flights_[id].instance.task];
    const double run_s = p.amount / kExecSpeed;
    if (!p.on_cpu) {
      SetTimer(now + p.delay_s + run_s, [this, id] { EndFlight(id); });
      return;
    }
    const auto begin = [this, id, run_s] {
      const TaskPlan& q = plan_.tasks[flights_[id].instance.task];
      HoldCores(q.node, q.threads);
      SetTimer(sg4::Engine::get_clock() + run_s, [this, id] {
        const TaskPlan& r = plan_.tasks[flights_[id].instance.task];
        HoldCores(r.node, -r.threads);
        EndFlight(id);
      });
    };
    if (p.delay_s > 0) {
      SetTimer(now + p.delay_s, begin);
    } else {
      begin();
    }
  }

  template <typename F>
  static void SetTimer(double date, F&& f) {
    simgrid::kernel::timer::Timer::set(date, std::forward<F>(f));
  }

  // A load on node `node`'s cores: `amount` (seconds * kExecSpeed of one core) at no more than
  // `bound`, served ahead of the user execs there (kIoCpuPriority): the I/O path's and the
  // hand-overs' (TaskPlan::cpu_amount, handover_amount).
  sg4::ExecPtr CoreLoad(int32_t node, double amount, double bound) {
    sg4::ExecPtr exec = sg4::Exec::init();
    exec->set_flops_amount(amount);
    exec->set_host(nodes_[static_cast<size_t>(node)].cpu);
    exec->set_bound(bound);
    exec->set_priority(kIoCpuPriority);
    return exec;
  }

  // Flight `id`'s collective comms of `level` on every node taking part, after the level's alpha
  // (and `delay_s` more).
  void StartLevel(int32_t id, int32_t level, double delay_s = 0) {
    Flight& f = flights_[id];
    const TaskPlan& p = plan_.tasks[f.instance.task];
    f.level = level;
    const int32_t first = level == 0 ? p.endpoint : p.network_endpoint;
    const double amount = level == 0 ? p.amount : p.network_amount;
    if (level == 0 && plan_.collectives_cross_root) {  // each node's comm crosses its root complex at its bus's pace at most
      for (int32_t n = 0; n < p.nodes; ++n) {
        if (const int32_t root = RootLink(n); root >= 0) f.links.push_back(root);
      }
      f.bound = hw_.node.interconnect.bus_bw_bytes_per_s;
    }
    for (int32_t n = 0; n < p.nodes; ++n) {
      const NodeHosts& h = nodes_[static_cast<size_t>(n)];
      Add(id, endpoints_[static_cast<size_t>(first + n)], level == 0 ? h.ic_sink : h.net_sink, amount);
    }
    BeginAfter(id, delay_s + plan_.endpoints[static_cast<size_t>(first)].latency_s);
  }

  void Transfer(int32_t id, sg4::Host* src, sg4::Host* dst, double amount, double latency_s) {
    Add(id, src, dst, amount);
    BeginAfter(id, latency_s);
  }

  // A comm of flight `id`, to be started by Begin.
  void Add(int32_t id, sg4::Host* src, sg4::Host* dst, double amount) {
    // sendto_init(src, dst) does not start the comm (set_source/set_destination would), and
    // Comm::set_rate is ignored on such comms in 3.32: per-flow caps are endpoint links.
    sg4::CommPtr comm = sg4::Comm::sendto_init(src, dst);
    comm->set_payload_size(static_cast<uint64_t>(std::llround(amount * byte_units_)));
    Flight& f = flights_[id];
    f.activities.push_back(comm);
    ++f.pending;
  }

  // Begins flight `id`'s added comms now or after `latency_s`.
  void BeginAfter(int32_t id, double latency_s) {
    if (latency_s > 0) {
      // Latency is a delay before the transfer, not a link latency: CM02 weighs each flow's
      // share by its route latency (RTT fairness), which would split a disk or the root complex
      // unevenly between flows of different latencies.
      SetTimer(sg4::Engine::get_clock() + latency_s, [this, id] { Begin(id); });
    } else {
      Begin(id);
    }
  }

  // Starts flight `id`'s activities not yet started.
  void Begin(int32_t id) {
    AddDemand(id);
    Flight& f = flights_[id];
    // CM02 bounds a comm for good by the narrowest link of its route when it starts: the
    // class's link is opened to its cap for that moment, then ShareDisk narrows it again.
    if (f.disk >= 0) SetEndpointRate(f.endpoint, plan_.endpoints[static_cast<size_t>(f.endpoint)].cap_bw);
    StartAdded(id);
    if (f.disk >= 0) {
      if (plan_.tasks[f.instance.task].cpu_amount > 0) slot_loads_[static_cast<size_t>(f.ring)].push_back(id);  // started by BoundLoads
      JoinDisk(id);
    }
  }

  // Starts flight `id`'s activities added since the last start.
  void StartAdded(int32_t id) {
    Flight& f = flights_[id];
    for (; f.unstarted < f.activities.size(); ++f.unstarted) {
      sg4::ActivityPtr& a = f.activities[f.unstarted];
      a->set_data(reinterpret_cast<void*>(static_cast<intptr_t>(id)));
      ++activities_;
      a->vetoable_start();
      if (static_cast<int32_t>(f.unstarted) == f.user_exec) HoldCores(plan_.tasks[f.instance.task].node, plan_.tasks[f.instance.task].threads);
    }
  }

  // Disk flow `id` starts flowing on its device (a comm or timed alone): counted in its figures,
  // the device shared again.
  void JoinDisk(int32_t id) {
    Flight& f = flights_[id];
    ++(f.write ? disk_writes_ : disk_reads_)[f.disk];
    ++endpoint_flows_[static_cast<size_t>(f.endpoint)];
    f.flowing = true;
    Reshare(f.disk);
  }

  // Disk flow `id` has left its device (its comm has ended, or its timer): its figures no longer
  // count it, the device is shared again, and an I/O path's load that has ended too leaves.
  void LeaveDisk(int32_t id) {
    Flight& f = flights_[id];
    --(f.write ? disk_writes_ : disk_reads_)[f.disk];
    --endpoint_flows_[static_cast<size_t>(f.endpoint)];
    f.flowing = false;
    Reshare(f.disk);
    if (f.load_done) LeaveLoads(id);
  }

  void SetEndpointRate(int32_t e, double rate) {
    sg4::Link* link = endpoint_links_[static_cast<size_t>(e)];
    if (link->get_bandwidth() != rate * byte_units_) link->set_bandwidth(rate * byte_units_);
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

  std::vector<NodeHosts> nodes_;
  std::vector<sg4::Host*> gpu_;  // over the cluster, node by node
  std::vector<sg4::Host*> endpoints_;
  std::vector<sg4::Link*> endpoint_links_;   // per endpoint: its private link
  std::vector<int32_t> endpoint_flows_;      // per endpoint: disk streams transferring now
  std::vector<std::vector<int32_t>> endpoint_fast_;  // per endpoint: its streams timed alone (TimeStreams)
  std::vector<std::vector<int32_t>> slot_endpoints_;  // per node and disk: the disk's endpoints
  std::vector<int32_t> sharing_;             // ShareDisk's scratch
  // Per node and ring (disk entry): the flights with an I/O path's load, from their flow's start
  // until both it and the load have ended.
  std::vector<std::vector<int32_t>> slot_loads_;
  // Per node and device (its first disk entry): the ring slots of the entries on it (Reshare).
  std::vector<std::vector<int32_t>> device_rings_;
  std::vector<double> load_cores_;  // BoundLoads' scratch

  std::vector<Flight> flights_;
  std::vector<int32_t> free_flights_;
  // Per watched link (each node's root complex, then each GPU's h2d and d2h links; CopyAlone):
  // its capacity (0: none, never fits), the bounds and number of the flows crossing it now, and
  // the copies timed alone on it.
  std::vector<double> link_cap_, link_demand_;
  std::vector<int32_t> link_flows_;
  std::vector<std::vector<int32_t>> link_fast_;
  std::vector<int32_t> promoting_;  // AddDemand's scratch
  // Per node and disk: streams transferring now, and how many of them are timed alone.
  std::vector<int32_t> disk_reads_, disk_writes_, disk_fast_;
  // Per node and disk (DeviceDemand): the caps of its streams counted on the root complex, how
  // many, and the most the device can take at once.
  std::vector<double> device_caps_, device_peak_;
  std::vector<int32_t> device_streams_;
  std::vector<int32_t> node_threads_;  // per node: threads of the user execs on its cores now (HoldCores)
  std::vector<sg4::ActivityPtr> retired_;
  std::vector<sg4::ActivityPtr> cancelled_;  // loads cancelled by BoundLoads, until signalled FAILED
  std::vector<Instance> to_start_;
  bool pumping_ = false;
  double makespan_s_ = 0;
  int64_t activities_ = 0;
  int64_t mismatches_ = 0;
  // ByteUnits: SimGrid's comms carry whole units (a 64-bit payload), and a copy or disk stream
  // handed to SimGrid mid-way (Promote) carries what it has left, rarely whole bytes: rounded to
  // a byte, each hand-over would move its end by up to half a byte's time, and the dates after
  // it. So SimGrid counts in 1/1024 bytes, every payload and link bandwidth scaled by it (a
  // power of two: the same sums and shares, exactly), unless the largest payload would not fit.
  double byte_units_ = 1024;
  Status error_;
};

}  // namespace

// The engine (engine.h, RunEngineFn), which the module's entry returns (below).
Status RunSimGrid(const Schedule& schedule, const models::HardwareSpec& hw, const Plan& plan,
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
    // Every step updates each network action's remaining bytes, where the default (Lazy) keeps
    // them in a heap and updates only the actions whose constraints changed. The same model and
    // the same sharing (the goldens agree to 1e-9); on this engine's platforms nearly every
    // event changes the root complex or a disk that most flows of the node cross, so Lazy's heap
    // was bookkeeping on top of updating them all: task instances per CPU second of the
    // quickstart 1.12x, of four nodes 1.17x, sixty-four nodes no slower (docs/simulator.md,
    // "Speed"). The execs keep the CPU model's Lazy (Full measured no faster).
    sg4::Engine::set_config("network/optim:Full");
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

// The module's exported entry (engine.h): the only symbol libtierflow_simgrid.so shows.
extern "C" __attribute__((visibility("default"))) tierflow::sim::internal::RunEngineFn tierflow_sim_run_engine() {
  return &tierflow::sim::internal::RunSimGrid;
}
