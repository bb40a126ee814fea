// The optimizer sweep over one rank's sub-groups (optimizer_sweep.h).
#include "optimizer_sweep.h"

#include <algorithm>

#include "tierflow/core/text.h"

namespace tierflow::policies {
namespace {

// Where a unit's bf16 partition lives while the optimizer updates it.
enum class ParamHomeKind { kDisk, kGpu, kHost };

// The parameter elements [begin, begin + n) of a rank split where their home changes: runs of
// GPU-resident units, of units kept in host memory and of units on a disk.
struct ParamRun {
  int64_t begin, elements;
  ParamHomeKind home;
};
std::vector<ParamRun> ParamRuns(const ModelPlan& plan, const std::vector<bool>& in_host, int64_t begin, int64_t n) {
  std::vector<ParamRun> runs;
  const int64_t end = begin + n;
  // The units lie one after the other in the rank's flat space (MakeModelPlan): from the first
  // that ends past `begin` to the last that starts before `end`.
  const auto first = std::partition_point(plan.units.begin(), plan.units.end(),
                                          [begin](const ParamUnit& u) { return u.rank_offset + u.rank_elements <= begin; });
  for (size_t i = static_cast<size_t>(first - plan.units.begin()); i < plan.units.size() && plan.units[i].rank_offset < end; ++i) {
    const ParamUnit& u = plan.units[i];
    const int64_t b = std::max(begin, u.rank_offset), e = std::min(end, u.rank_offset + u.rank_elements);
    if (b >= e) continue;
    const ParamHomeKind home = u.gpu_resident ? ParamHomeKind::kGpu : !in_host.empty() && in_host[i] ? ParamHomeKind::kHost : ParamHomeKind::kDisk;
    if (!runs.empty() && runs.back().home == home && runs.back().begin + runs.back().elements == b) {
      runs.back().elements += e - b;
    } else {
      runs.push_back({b, e - b, home});
    }
  }
  return runs;
}

// The updated bf16 values of GPU-resident parameters, copied from `buffer` to the GPU after
// their conversion: what keeps a resident unit current for the next iteration's compute.
int32_t ResidentRefresh(ScheduleBuilder& b, int32_t rank, std::string id, int32_t buffer,
                        const std::vector<int32_t>& tensors, int32_t after) {
  TaskSpec h2d;
  h2d.id = std::move(id);
  h2d.op = Op::kH2D;
  h2d.rank = rank;
  h2d.resource = b.GpuH2D(rank);
  for (int32_t t : tensors) h2d.bytes += b.tensor_bytes(t);
  h2d.uses = {buffer};
  h2d.tensors = tensors;
  h2d.deps = {after};
  h2d.phase = Phase::kStep;
  return b.Task(std::move(h2d));
}

// A task of the rank's CPU: a conversion or the optimizer, on `threads` threads, in the step.
TaskSpec CpuStepTask(ScheduleBuilder& b, std::string id, Op op, Kernel kernel, int32_t rank, int32_t threads) {
  TaskSpec t;
  t.id = std::move(id);
  t.op = op;
  t.rank = rank;
  t.kernel = kernel;
  t.resource = b.Cpu(rank);
  t.ranks = threads;
  t.phase = Phase::kStep;
  return t;
}

// One rank's optimizer sweep (OptimizerSweep), planned sub-group by sub-group in update order:
// what each sub-group's tasks wait for, its states and gradients in, Adam, its bf16 parameters
// out, its states back. The tasks, tensors and buffers are added in the same order as ever, so
// that every schedule keeps its task numbers.
class Sweep {
 public:
  Sweep(ScheduleBuilder& b, const ModelPlan& plan, const SweepOptions& o)
      : b_(b), plan_(plan), o_(o), nsub_(static_cast<int32_t>(plan.subgroups.size())), host_(b.HostDevice(o.rank)),
        gpu_(b.GpuDevice(o.rank)), prev_done_(o.first_deps) {
    res_.read_states.assign(nsub_, kNoIndex);
    res_.write_states.assign(nsub_, kNoIndex);
    res_.param_done.assign(nsub_, kNoIndex);
    res_.adam.assign(nsub_, kNoIndex);
  }

  SweepResult Plan() {
    for (size_t pos = 0; pos < o_.order.size(); ++pos) {
      Group s = Begin(pos);
      ReadStates(s);
      GradientIn(s);
      if (s.gpu) {
        GpuAdam(s);
        End(s);
        continue;
      }
      Adam(s);
      if (o_.param_path == ParamUpdatePath::kChunkedBlocking) {
        ParamsInChunks(s);
      } else {
        ParamsWhole(s);
      }
      res_.param_done[s.g] = s.param_done;
      WriteStates(s);
      End(s);
    }
    // Read-ahead: the next iteration's first read waits until this one's last buffer of the pool
    // is taken, so that the pool is taken in update order across iterations (a next iteration's
    // read holding the buffers this iteration's last sub-groups need would deadlock: their update
    // comes before the next iteration's gradients).
    if (o_.read_ahead && first_read_ != kNoIndex && first_read_ != last_take_) {
      b_.task(first_read_).carried.push_back({last_take_, 1});
    }
    return std::move(res_);
  }

 private:
  // The sub-group being planned: its place, its buffers, what its tasks wait for, and its tasks.
  struct Group {
    size_t pos = 0;
    int32_t g = 0;
    int64_t n = 0, first = 0;
    std::string G;  // its name suffix: ".sg{g}.r{rank}"
    bool cached = false;
    bool gpu = false;                      // its states live on the GPU (SweepOptions::on_gpu)
    bool grad_host32 = false;              // its fp32 gradients are in host memory already
    bool grad16_up = false;                // on the GPU: its bf16 gradients go up from host_grad_buffer
    std::vector<int32_t> home_states;      // master, adam_m, adam_v at their home
    int32_t states = kNoIndex, grad = kNoIndex;  // buffers
    std::vector<int32_t> read_deps;        // what the states' read waits for
    std::vector<int32_t> update_gate;      // what the gradient's task (or Adam) waits for beyond its read
    int32_t read_states = kNoIndex, grad_task = kNoIndex, adam = kNoIndex, last_convert = kNoIndex;
    int32_t param_done = kNoIndex, write_states = kNoIndex;
  };

  // The sub-group at `pos` of the update order: its home states and buffers, and its waits.
  Group Begin(size_t pos) {
    Group s;
    s.pos = pos;
    s.g = o_.order[pos];
    s.n = plan_.subgroups[s.g].elements;
    s.first = plan_.subgroups[s.g].begin;
    s.G = ".sg" + std::to_string(s.g) + ".r" + std::to_string(o_.rank);
    s.gpu = !o_.on_gpu.empty() && o_.on_gpu[s.g];
    // Kept in memory, never read: the GPU's states as a cached sub-group's (below, s.cached).
    s.cached = s.gpu || (!o_.cached.empty() && o_.cached[s.g]);
    s.home_states = StatesAt(s.first, s.n, s.gpu ? gpu_ : s.cached ? host_ : b_.DeviceOfResource(o_.read_resource[s.g]));
    s.states = s.gpu      ? b_.Buffer("states" + s.G, o_.gpu_pool, 3 * s.n * 4, /*persistent=*/true)
               : s.cached ? b_.Buffer("states" + s.G, o_.cache_pool, 3 * s.n * 4, /*persistent=*/true)
                          : b_.Buffer("states" + s.G, o_.opt_pool, 3 * s.n * 4);
    s.grad_host32 = !o_.grads_in_host32.empty() && o_.grads_in_host32[s.g];
    // An update on the GPU takes the bf16 gradients up as the backward left them in host memory
    // and widens them itself (exactly): no conversion on the host, half the bytes up.
    s.grad16_up = s.gpu && !s.grad_host32 && !o_.grads_on_nvme;
    TF_CHECK(!s.grad16_up || o_.host_grad_buffer != kNoIndex);  // SweepOptions: grads_on_nvme false names the buffer
    s.grad = s.grad_host32 ? o_.host_grad32_buffer
             : s.grad16_up ? o_.host_grad_buffer
                           : b_.Buffer("gradin" + s.G, o_.opt_pool, s.n * 4);
    // Serial: after the previous sub-group is done. Pipelined: as soon as the previous
    // sub-group's reads are done. `gate` is what the update itself waits for (the global check,
    // flushed gradients, the sub-group's gradients final); without read-ahead the reads wait
    // for it too, with it only the gradient's task and Adam do.
    std::vector<int32_t> chain, gate;
    if (o_.pipeline_read && prev_read_end_ != kNoIndex) {
      chain = {prev_read_end_};
      gate = o_.pipelined_read_deps;
    } else if (o_.read_ahead) {
      gate = prev_done_;  // the first read: nothing before it in this iteration
    } else {
      chain = prev_done_;
    }
    if (o_.read_ahead && pos > 0) gate.insert(gate.end(), o_.first_deps.begin(), o_.first_deps.end());
    if (!o_.ready_deps.empty()) gate.insert(gate.end(), o_.ready_deps[s.g].begin(), o_.ready_deps[s.g].end());
    s.read_deps = chain;
    if (!o_.read_ahead) s.read_deps.insert(s.read_deps.end(), gate.begin(), gate.end());
    if (o_.read_ahead) s.update_gate = gate;
    return s;
  }

  // The states' read from their home (none for a cached sub-group).
  void ReadStates(Group& s) {
    if (s.cached) return;
    TaskSpec rs;
    rs.id = "read.states" + s.G;
    rs.op = Op::kRead;
    rs.rank = o_.rank;
    rs.resource = o_.read_resource[s.g];
    rs.bytes = 3 * s.n * 4;
    rs.tensors = s.home_states;
    Io(rs);
    // With gradients in host memory (or read ahead) the states' read also reserves the fp32
    // gradient buffer, so that read-ahead can never take the space a gradient needs (deadlock).
    const bool reserve_grad = !s.grad_host32 && (!o_.grads_on_nvme || o_.read_ahead);
    rs.allocs = reserve_grad ? std::vector<int32_t>{s.states, s.grad} : std::vector<int32_t>{s.states};
    rs.phase = Phase::kStep;
    rs.priority = static_cast<int32_t>(s.pos);
    rs.deps = s.read_deps;
    s.read_states = b_.Task(std::move(rs));
    res_.read_states[s.g] = s.read_states;
    if (first_read_ == kNoIndex) first_read_ = s.read_states;
    last_take_ = s.read_states;
  }

  // The sub-group's fp32 gradients into `grad`: there already, read from NVMe, or widened from
  // the bf16 gradients in host memory. Sets s.grad_task, after which they are there.
  void GradientIn(Group& s) {
    if (s.grad16_up) return;  // GpuAdam's copy up takes them from the bf16 gradients (and is s.grad_task)
    if (s.grad_host32) {
      s.grad_task = s.read_states;  // already there: the update waits for its states only
      if (!s.cached) prev_read_end_ = s.read_states;
      return;
    }
    const std::vector<int32_t> after_read = WithGate(s.cached ? s.read_deps : std::vector<int32_t>{s.read_states}, s);
    if (o_.grads_on_nvme) {
      TaskSpec rg;
      rg.id = "read.grad" + s.G;
      rg.op = Op::kRead;
      rg.rank = o_.rank;
      rg.resource = o_.read_resource[s.g];
      rg.bytes = s.n * 4;
      rg.tensors = {b_.State(StateKind::kGrad, o_.rank, s.first, s.n, b_.DeviceOfResource(o_.read_resource[s.g]))};
      Io(rg);
      if (s.cached || !o_.read_ahead) {
        rg.allocs = {s.grad};
      } else {
        rg.uses = {s.grad};  // reserved by the states' read
      }
      rg.deps = after_read;
      rg.phase = Phase::kStep;
      rg.priority = static_cast<int32_t>(s.pos);
      s.grad_task = b_.Task(std::move(rg));
      if (s.cached) last_take_ = s.grad_task;
      // Read-ahead chains the states' reads only: the gradient's read waits for the gate.
      prev_read_end_ = o_.read_ahead && !s.cached ? s.read_states : s.grad_task;
      return;
    }
    TaskSpec cg = CpuStepTask(b_, "convert.grad" + s.G, Op::kConvert, Kernel::kBf16ToFp32, o_.rank, o_.threads);
    cg.bytes = s.n * 6;  // reads bf16, writes fp32
    if (s.cached) cg.allocs = {s.grad};
    cg.uses = {o_.host_grad_buffer};
    if (!s.cached) cg.uses.push_back(s.grad);  // reserved by the states' read
    cg.tensors = {b_.State(StateKind::kGrad16, o_.rank, s.first, s.n, host_)};
    cg.deps = after_read;
    s.grad_task = b_.Task(std::move(cg));
    if (s.cached) last_take_ = s.grad_task;
    if (!s.cached) prev_read_end_ = s.read_states;
  }

  void Adam(Group& s) {
    TaskSpec adam = CpuStepTask(b_, "adam" + s.G, Op::kOptimizer, Kernel::kAdam, o_.rank, o_.threads);
    adam.bytes = s.n * 4;
    adam.uses = {s.states, s.grad};
    if (!s.grad_host32) adam.frees = {s.grad};
    adam.tensors = s.home_states;
    adam.deps = s.grad_task != kNoIndex ? std::vector<int32_t>{s.grad_task} : s.read_deps;
    if (s.grad_host32) adam.deps = WithGate(std::move(adam.deps), s);
    if (o_.adam_waits_param_write && prev_param_write_ != kNoIndex) adam.deps.push_back(prev_param_write_);
    s.adam = b_.Task(std::move(adam));
    res_.adam[s.g] = s.adam;
  }

  // The update on the GPU (gpu_update.h): the states kept there, the gradient copied up, the
  // rounded parameters refreshed in place or, with kWrite, sent to their disk.
  void GpuAdam(Group& s) {
    const bool to_gpu = o_.param_path == ParamUpdatePath::kToGpu;
    const P16Tensors params = P16(s.first, s.n, to_gpu ? gpu_ : b_.DeviceOfResource(o_.param_write_resource[s.g]));
    TF_CHECK(params.in_host.empty() && (to_gpu || o_.param_path == ParamUpdatePath::kWrite || params.offloaded.empty()));  // SweepOptions::on_gpu
    GpuUpdateSpec u;
    u.rank = o_.rank;
    u.suffix = s.G;
    u.first = s.first;
    u.n = s.n;
    u.states = s.states;
    u.home_states = s.home_states;
    u.grad = s.grad;
    u.grad16 = s.grad16_up;
    u.grad_persistent = s.grad_host32 || s.grad16_up;
    // Its gradient is there once the sub-group's gate opens (the global check, and the
    // gradients final); else after the task that brought it.
    u.grad_deps = s.grad_host32 || s.grad16_up ? WithGate(s.read_deps, s) : std::vector<int32_t>{s.grad_task};
    if (to_gpu) u.in_place = params.offloaded;  // homed on the GPU
    u.in_place.insert(u.in_place.end(), params.resident.begin(), params.resident.end());
    if (!to_gpu) u.homeward = params.offloaded;
    u.gpu_pool = o_.gpu_pool;
    u.param_pool = o_.param_pool;
    u.param_write_resource = o_.param_write_resource[s.g];
    u.block_bytes = o_.block_bytes;
    u.queue_depth = o_.queue_depth;
    u.write_priority = o_.isolate_reads_first ? nsub_ + static_cast<int32_t>(s.pos) : 0;
    const GpuUpdateTasks tasks = GpuUpdate(b_, u);
    // The copy up brings the bf16 gradients as a convert brings the others: what the next
    // sub-group's gradient waits for when the sweep is pipelined (End), not this one's update.
    if (s.grad16_up) s.grad_task = tasks.copy;
    s.adam = s.last_convert = tasks.adam;
    s.param_done = tasks.done;
    res_.adam[s.g] = s.adam;
    if (!u.in_place.empty()) res_.resident_refreshes.push_back(s.adam);
    res_.param_done[s.g] = s.param_done;
  }

  // ParamUpdatePath::kChunkedBlocking. Parameters kept in host memory are updated in place: one
  // conversion into the rank's flat buffer (DeepSpeed copies the sub-group's fp32 weights into
  // its CPU flat buffer, or each such parameter's partition). Then the rest, fp32 -> fp16
  // through the parameter swapper's slots, each chunk on a disk written with a blocking wait,
  // resident ones copied to the GPU from the slot (DeepSpeed's _partitioned_params_swap_out
  // copies the parameters it keeps, then swaps out the others).
  void ParamsInChunks(Group& s) {
    const int32_t device = b_.DeviceOfResource(o_.param_write_resource[s.g]);
    const P16Tensors all = P16(s.first, s.n, device);
    std::vector<int32_t> chunk_ends;
    if (!all.in_host.empty()) {
      TaskSpec conv = CpuStepTask(b_, "convert.p16" + s.G, Op::kConvert, Kernel::kFp32ToBf16, o_.rank, o_.threads);
      for (int32_t t : all.in_host) conv.bytes += b_.tensor_bytes(t) * 2;  // the fp32 weights read
      conv.uses = {s.states, o_.host_param_buffer};
      conv.tensors = all.in_host;
      conv.deps = {s.adam};
      s.last_convert = b_.Task(std::move(conv));
      chunk_ends.push_back(s.last_convert);
    }
    const int64_t step = IoAlignedStep(o_.chunk_elements);
    for (int64_t c0 = 0, c = 0; c0 < s.n; c0 += step, ++c) {
      const int64_t chunk = std::min(step, s.n - c0);
      // Names: "<what>p16<group>.c<chunk>", each made in one allocation.
      const auto name = [&s, c](std::string_view what) { return StrCat({what, "p16", s.G, ".c", c}); };
      const P16Tensors part = P16(s.first + c0, chunk, device);
      if (part.offloaded.empty() && part.resident.empty()) continue;
      const int32_t slot = b_.Buffer(name(""), o_.param_pool, o_.chunk_elements * 2);
      TaskSpec conv = CpuStepTask(b_, name("convert."), Op::kConvert, Kernel::kFp32ToBf16, o_.rank, o_.threads);
      conv.bytes = (BytesOf(part.offloaded) + BytesOf(part.resident)) * 2;
      conv.allocs = {slot};
      conv.uses = {s.states};
      conv.tensors = part.offloaded;
      conv.tensors.insert(conv.tensors.end(), part.resident.begin(), part.resident.end());
      conv.deps = {s.adam};
      if (!chunk_ends.empty()) conv.deps.push_back(chunk_ends.back());
      const int32_t conv_task = b_.Task(std::move(conv));
      s.last_convert = conv_task;
      int32_t refresh = kNoIndex;
      if (!part.resident.empty()) {
        refresh = ResidentRefresh(b_, o_.rank, StrCat({"h2d.p16res", s.G, ".c", c}), slot, part.resident, conv_task);
        res_.resident_refreshes.push_back(refresh);
      }
      if (part.offloaded.empty()) {  // nothing to write: the refresh ends the chunk
        b_.task(refresh).frees = {slot};
        chunk_ends.push_back(refresh);
        continue;
      }
      TaskSpec pw;
      pw.id = name("write.");
      pw.op = Op::kWrite;
      pw.rank = o_.rank;
      pw.resource = o_.param_write_resource[s.g];
      pw.bytes = BytesOf(part.offloaded);
      Io(pw);
      pw.uses = {slot};
      pw.frees = {slot};
      pw.tensors = part.offloaded;
      pw.deps = {conv_task};
      if (refresh != kNoIndex) pw.deps.push_back(refresh);
      pw.phase = Phase::kStep;
      chunk_ends.push_back(b_.Task(std::move(pw)));
    }
    s.param_done = chunk_ends.back();
  }

  // ParamUpdatePath::kWrite and kToGpu: one exact-size buffer, written to the parameter store
  // (resident ranges copied to the GPU first) or copied to the GPU whole.
  void ParamsWhole(Group& s) {
    const int32_t p16 = b_.Buffer("p16" + s.G, o_.param_pool, s.n * 2);  // exact size
    TaskSpec conv = CpuStepTask(b_, "convert.p16" + s.G, Op::kConvert, Kernel::kFp32ToBf16, o_.rank, o_.threads);
    conv.bytes = s.n * 4;
    conv.allocs = {p16};
    conv.uses = {s.states};
    const bool to_gpu = o_.param_path == ParamUpdatePath::kToGpu;
    const P16Tensors split = P16(s.first, s.n, to_gpu ? gpu_ : b_.DeviceOfResource(o_.param_write_resource[s.g]));
    TF_CHECK(split.in_host.empty());  // parameters kept in host memory: kChunkedBlocking only
    std::vector<int32_t> converted = split.offloaded;
    converted.insert(converted.end(), split.resident.begin(), split.resident.end());
    conv.tensors = converted;
    conv.deps = {s.adam};
    const int32_t conv_task = b_.Task(std::move(conv));
    s.last_convert = conv_task;
    TaskSpec out;
    out.uses = {p16};
    out.frees = {p16};
    out.deps = {conv_task};
    out.phase = Phase::kStep;
    if (!to_gpu) {
      out.id = "write.p16" + s.G;
      out.op = Op::kWrite;
      out.rank = o_.rank;
      out.resource = o_.param_write_resource[s.g];
      out.bytes = BytesOf(split.offloaded);
      out.tensors = split.offloaded;
      Io(out);
      out.priority = o_.isolate_reads_first ? nsub_ + static_cast<int32_t>(s.pos) : 0;
      if (!split.resident.empty()) {
        const int32_t refresh = ResidentRefresh(b_, o_.rank, "h2d.p16res" + s.G, p16, split.resident, conv_task);
        res_.resident_refreshes.push_back(refresh);
        out.deps.push_back(refresh);
      }
    } else {
      out.id = "h2d.p16" + s.G;
      out.op = Op::kH2D;
      out.rank = o_.rank;
      out.resource = b_.GpuH2D(o_.rank);
      out.bytes = s.n * 2;
      out.tensors = std::move(converted);  // every converted range: all of them live on the GPU
    }
    s.param_done = b_.Task(std::move(out));
    if (to_gpu) res_.resident_refreshes.push_back(s.param_done);
  }

  // The states written back (a cached sub-group's only with write_cached).
  void WriteStates(Group& s) {
    if (s.cached && !o_.write_cached) return;
    TaskSpec ws;
    ws.id = "write.states" + s.G;
    ws.op = Op::kWrite;
    ws.rank = o_.rank;
    ws.resource = o_.write_resource[s.g];
    ws.bytes = 3 * s.n * 4;
    ws.tensors = StatesAt(s.first, s.n, b_.DeviceOfResource(o_.write_resource[s.g]));
    Io(ws);
    ws.uses = {s.states};
    if (!s.cached) ws.frees = {s.states};
    ws.deps = {o_.states_after_params ? s.param_done : s.last_convert};
    ws.phase = Phase::kStep;
    // Isolation: among ready I/O, every read of the sweep goes before any write.
    ws.priority = o_.isolate_reads_first ? nsub_ + static_cast<int32_t>(s.pos) : 0;
    s.write_states = b_.Task(std::move(ws));
    res_.write_states[s.g] = s.write_states;
    // The next iteration's read of the same states waits for this write: with semi-async
    // write-back instead of the step, and with read-ahead because the read no longer waits for
    // anything of its own iteration that comes after the step.
    if ((o_.semi_async_writes || o_.read_ahead) && s.read_states != kNoIndex) b_.task(s.read_states).carried.push_back({s.write_states, 1});
    // A cached sub-group's states are updated in place: the next update waits for the write.
    if (s.cached) b_.task(s.adam).carried.push_back({s.write_states, 1});
  }

  // What the next sub-group waits for, and what the step waits for.
  void End(const Group& s) {
    prev_read_end_ = prev_read_end_ == kNoIndex ? s.grad_task : prev_read_end_;
    prev_param_write_ = s.param_done;
    const int32_t done = s.write_states != kNoIndex ? s.write_states : s.param_done;
    prev_done_ = o_.pipeline_write ? std::vector<int32_t>{s.param_done} : std::vector<int32_t>{done};
    if (s.write_states != kNoIndex && !o_.semi_async_writes) res_.tails.push_back(s.write_states);
    res_.tails.push_back(s.param_done);
  }

  std::vector<int32_t> StatesAt(int64_t begin, int64_t n, int32_t device) {
    return {b_.State(StateKind::kMaster, o_.rank, begin, n, device), b_.State(StateKind::kAdamM, o_.rank, begin, n, device),
            b_.State(StateKind::kAdamV, o_.rank, begin, n, device)};
  }
  // The updated bf16 parameters [begin, begin + n): offloaded runs to `device`, resident runs to
  // the GPU, runs kept in host memory to the host.
  struct P16Tensors {
    std::vector<int32_t> offloaded, resident, in_host;
  };
  P16Tensors P16(int64_t begin, int64_t n, int32_t device) {
    P16Tensors t;
    for (const ParamRun& run : ParamRuns(plan_, o_.param_in_host, begin, n)) {
      const int32_t home = run.home == ParamHomeKind::kGpu ? gpu_ : run.home == ParamHomeKind::kHost ? host_ : device;
      const int32_t tensor = b_.State(StateKind::kParam16, o_.rank, run.begin, run.elements, home);
      (run.home == ParamHomeKind::kGpu ? t.resident : run.home == ParamHomeKind::kHost ? t.in_host : t.offloaded).push_back(tensor);
    }
    return t;
  }
  int64_t BytesOf(const std::vector<int32_t>& tensors) const {
    int64_t sum = 0;
    for (int32_t t : tensors) sum += b_.tensor_bytes(t);
    return sum;
  }
  void Io(TaskSpec& t) const {
    t.block_bytes = o_.block_bytes;
    t.queue_depth = o_.queue_depth;
  }
  template <typename List>  // std::vector<int32_t> or a task's IndexList, extended in place
  static List WithGate(List deps, const Group& s) {
    deps.insert(deps.end(), s.update_gate.begin(), s.update_gate.end());
    return deps;
  }

  ScheduleBuilder& b_;
  const ModelPlan& plan_;
  const SweepOptions& o_;
  const int32_t nsub_;
  const int32_t host_, gpu_;
  SweepResult res_;
  std::vector<int32_t> prev_done_;
  int32_t prev_read_end_ = kNoIndex, prev_param_write_ = kNoIndex;
  // Read-ahead: the first states' read, and the last task in update order that takes a buffer
  // from the optimizer pool (a read, or a cached sub-group's gradient task).
  int32_t first_read_ = kNoIndex, last_take_ = kNoIndex;
};

}  // namespace

SweepResult OptimizerSweep(ScheduleBuilder& b, const ModelPlan& plan, const SweepOptions& o) {
  TF_CHECK(!o.read_ahead || o.pipeline_read);
  b.StateLayout(plan);
  return Sweep(b, plan, o).Plan();
}

}  // namespace tierflow::policies
