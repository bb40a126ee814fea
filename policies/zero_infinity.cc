// zero-infinity: DeepSpeed ZeRO-3 with parameters and optimizer states on NVMe, as DeepSpeed
// actually schedules it (../shared/reference/offload-systems.md §1), weaknesses included:
//  - one nvme_path: every rank's parameters, gradients and optimizer states on nvme0;
//  - parameter partitions read into `buffer_count` pinned slots of `buffer_size` elements each
//    (every slot sized for the largest partition), the read-ahead bounded by free slots;
//  - the all-gather of a parameter waits for ALL reads outstanding on the rank's aio handle;
//  - all-gathers issued one at a time in module order;
//  - backward: reduce-scatter, fp32 gradient partition to a pinned buffer, async write to NVMe;
//  - step: gradient norm over all groups (after backward ends), then per sub-group in ascending
//    order: swap in states, swap in gradients, CPU Adam, fp16 copy and blocking parameter write,
//    swap out states — serial, or pipelined with pipeline_read / pipeline_write;
//  - step() is synchronous: the next iteration starts after the last write.
#include "blocks.h"
#include "policies_internal.h"

namespace tierflow::policies {

StatusOr<Schedule> PlanZeroInfinity(const Scenario& s) {
  Knobs knobs = s.knobs;
  // DeepSpeed's names and defaults (offload_param, offload_optimizer, aio, zero_optimization).
  TF_ASSIGN_OR_RETURN(const int64_t buffer_count, knobs.Int("buffer_count", 5));
  TF_ASSIGN_OR_RETURN(const int64_t buffer_size, knobs.Int("buffer_size", 100000000));
  TF_ASSIGN_OR_RETURN(const int64_t optimizer_buffer_count, knobs.Int("optimizer_buffer_count", 4));
  TF_ASSIGN_OR_RETURN(const bool pipeline_read, knobs.Bool("pipeline_read", false));
  TF_ASSIGN_OR_RETURN(const bool pipeline_write, knobs.Bool("pipeline_write", false));
  TF_ASSIGN_OR_RETURN(const int64_t sub_group_size, knobs.Int("sub_group_size", 1000000000));
  TF_ASSIGN_OR_RETURN(const int64_t block_size, knobs.Bytes("block_size", 1 << 20));
  TF_ASSIGN_OR_RETURN(const int64_t queue_depth, knobs.Int("queue_depth", 8));
  TF_ASSIGN_OR_RETURN(const int64_t persistence, knobs.Int("param_persistence_threshold", 100000));
  TF_ASSIGN_OR_RETURN(const int64_t cpu_threads, knobs.Int("cpu_threads", 0));
  TF_RETURN_IF_ERROR(knobs.Finish("zero-infinity"));
  if (buffer_count < 1) return InvalidArgument("policy.buffer_count must be >= 1");
  if (optimizer_buffer_count < 1) return InvalidArgument("policy.optimizer_buffer_count must be >= 1");
  if (queue_depth < 1) return InvalidArgument("policy.queue_depth must be >= 1");
  if (s.hardware.node.nvme.empty()) return InvalidArgument("hardware has no NVMe device for zero-infinity's nvme_path");

  TF_ASSIGN_OR_RETURN(ModelPlan plan, MakeModelPlan(s, sub_group_size, persistence));
  const int32_t ranks = plan.ranks;
  for (const ParamUnit& u : plan.units) {
    if (!u.gpu_resident && u.rank_elements > buffer_size) {
      // DeepSpeed asserts here too; users raise buffer_size and pay for it in every slot.
      return InvalidArgument("policy.buffer_size: the partition of '" + u.name + "' has " +
                             std::to_string(u.rank_elements) + " elements, more than buffer_size " +
                             std::to_string(buffer_size) + " (raise policy.buffer_size to at least " +
                             std::to_string(u.rank_elements) + ")");
    }
  }
  const int32_t threads = static_cast<int32_t>(
      cpu_threads > 0 ? cpu_threads : std::max<int64_t>(1, s.hardware.node.cpu.cores / ranks));
  int64_t max_subgroup = 0;
  for (const SubGroup& g : plan.subgroups) max_subgroup = std::max(max_subgroup, g.elements);

  ScheduleBuilder b(s, "zero-infinity");
  for (const auto& [k, v] : s.knobs.values()) b.Meta("policy." + k, v);
  b.Meta("scenario_yaml", s.yaml);
  const std::string nvme = ScheduleBuilder::Nvme(0);
  b.Device(nvme, DeviceKind::kNvme);

  // Per rank: the aio handles (param swapper; optimizer read and write), the pinned pools, the
  // GPU's resident state.
  std::vector<int32_t> param_io(ranks), opt_read(ranks), opt_write(ranks), param_pool(ranks), opt_pool(ranks);
  const int32_t opt_slots = static_cast<int32_t>(
      std::max<int64_t>(optimizer_buffer_count, (pipeline_read || pipeline_write) ? 12 : 4));
  for (int32_t r = 0; r < ranks; ++r) {
    const std::string R = ".r" + std::to_string(r);
    param_io[r] = b.Resource(nvme + R + ".param", nvme);
    opt_read[r] = b.Resource(nvme + R + ".opt_read", nvme);
    opt_write[r] = b.Resource(nvme + R + ".opt_write", nvme);
    param_pool[r] = b.Pool("host.pinned.param" + R, "host", buffer_count * buffer_size * 2);
    opt_pool[r] = b.Pool("host.pinned.opt" + R, "host", opt_slots * max_subgroup * 4);
    b.Buffer("gpu.resident" + R, b.GpuPool(r), plan.gpu_resident_bytes, /*persistent=*/true);
    b.GpuCompute(r);
  }

  // The step ends with this barrier; the next iteration's reads wait for it (step() is blocking).
  TaskSpec step_end_spec;
  step_end_spec.id = "step.end";
  step_end_spec.op = Op::kBarrier;
  step_end_spec.phase = Phase::kStep;
  // Added last, but referred to by carried deps: its index is known once everything else is in.

  std::vector<int32_t> forward_order(plan.units.size()), backward_order;
  for (size_t i = 0; i < plan.units.size(); ++i) forward_order[i] = static_cast<int32_t>(i);
  backward_order.assign(forward_order.rbegin(), forward_order.rend());

  std::vector<int32_t> carried_reads;  // every parameter read: step() blocks the next iteration
  std::vector<int32_t> last_compute(ranks, kNoIndex);
  std::vector<std::vector<int32_t>> grad_writes(ranks), grad_copies(ranks);
  const int64_t micro_steps = s.training.gradient_accumulation_steps;
  int32_t priority_base = 0;
  for (int64_t m = 0; m < micro_steps; ++m) {
    for (int pass = 0; pass < 2; ++pass) {
      const bool fwd = pass == 0;
      FetchOptions fo;
      fo.phase = fwd ? Phase::kForward : Phase::kBackward;
      fo.tag = (fwd ? "f" : "b") + std::to_string(m);
      fo.slot_pool = param_pool;
      fo.slot_bytes = buffer_size * 2;
      fo.read_resource = param_io;
      fo.block_bytes = block_size;
      fo.queue_depth = static_cast<int32_t>(queue_depth);
      fo.coupled_reads = static_cast<int32_t>(buffer_count);
      fo.priority_base = priority_base;
      std::vector<FetchedUnit> fetched = FetchUnits(b, plan, fwd ? forward_order : backward_order, fo);
      priority_base += static_cast<int32_t>(fetched.size());
      for (const FetchedUnit& f : fetched) carried_reads.insert(carried_reads.end(), f.reads.begin(), f.reads.end());
      for (const FetchedUnit& f : fetched) {
        const ParamUnit& unit = plan.units[f.unit];
        std::vector<int32_t> computes;
        for (int32_t r = 0; r < ranks; ++r) {
          TaskSpec c;
          c.id = std::string(fwd ? "fwd." : "bwd.") + unit.name + "." + fo.tag.substr(1) + ".r" + std::to_string(r);
          c.op = Op::kCompute;
          c.kernel = fwd ? "fwd" : "bwd";
          c.resource = b.GpuCompute(r);
          c.flops = fwd ? unit.fwd_flops : unit.bwd_flops;
          c.bytes = unit.compute_bytes * (fwd ? 1 : 2);
          c.uses = {f.gathered_buffer[r]};
          c.frees = {f.gathered_buffer[r]};
          c.deps = {f.allgather};
          if (last_compute[r] != kNoIndex) c.deps.push_back(last_compute[r]);
          c.phase = fo.phase;
          c.layer = unit.layer;
          last_compute[r] = b.Task(std::move(c));
          computes.push_back(last_compute[r]);
        }
        if (fwd) continue;
        // Gradient path: reduce-scatter, fp32 partition to pinned memory, async write.
        TaskSpec rs;
        rs.id = "reducescatter." + unit.name + "." + fo.tag;
        rs.op = Op::kReduceScatter;
        rs.resource = b.Comm();
        rs.bytes = unit.elements * 2;
        rs.ranks = ranks;
        rs.deps = computes;
        rs.phase = Phase::kBackward;
        rs.layer = unit.layer;
        const int32_t rs_task = b.Task(std::move(rs));
        for (int32_t r = 0; r < ranks; ++r) {
          const std::string id = unit.name + "." + fo.tag + ".r" + std::to_string(r);
          const int32_t gbuf = b.Buffer("grad." + id, opt_pool[r], unit.rank_elements * 4);
          TaskSpec d2h;
          d2h.id = "d2h.grad." + id;
          d2h.op = Op::kD2H;
          d2h.resource = b.GpuD2H(r);
          d2h.bytes = unit.rank_elements * 4;
          d2h.allocs = {gbuf};
          d2h.deps = {rs_task};
          d2h.phase = Phase::kBackward;
          d2h.layer = unit.layer;
          const int32_t d2h_task = b.Task(std::move(d2h));
          grad_copies[r].push_back(d2h_task);
          TaskSpec w;
          w.id = "write.grad." + id;
          w.op = Op::kWrite;
          w.resource = opt_write[r];
          w.bytes = unit.rank_elements * 4;
          w.block_bytes = block_size;
          w.queue_depth = static_cast<int32_t>(queue_depth);
          w.uses = {gbuf};
          w.frees = {gbuf};
          w.deps = {d2h_task};
          w.phase = Phase::kBackward;
          w.layer = unit.layer;
          grad_writes[r].push_back(b.Task(std::move(w)));
        }
      }
    }
  }

  // Step. The global gradient norm needs every rank's gradients: backward must end first.
  std::vector<int32_t> norms;
  for (int32_t r = 0; r < ranks; ++r) {
    TaskSpec norm;
    norm.id = "step.norm.r" + std::to_string(r);
    norm.op = Op::kConvert;
    norm.kernel = "overflow_check_and_norm";
    norm.resource = b.Cpu(r);
    norm.bytes = plan.rank_elements * 4;
    norm.ranks = threads;
    norm.deps = grad_copies[r];
    norm.deps.push_back(last_compute[r]);
    norm.phase = Phase::kStep;
    norms.push_back(b.Task(std::move(norm)));
  }
  TaskSpec norm_reduce;
  norm_reduce.id = "step.norm.allreduce";
  norm_reduce.op = Op::kAllReduce;
  norm_reduce.resource = b.Comm();
  norm_reduce.bytes = 8;
  norm_reduce.ranks = ranks;
  norm_reduce.deps = norms;
  norm_reduce.phase = Phase::kStep;
  const int32_t norm_done = b.Task(std::move(norm_reduce));

  std::vector<int32_t> step_tails;
  for (int32_t r = 0; r < ranks; ++r) {
    const std::string R = ".r" + std::to_string(r);
    // Gradients are flushed at the first swap-in of the step.
    std::vector<int32_t> prev_done = grad_writes[r];
    prev_done.push_back(norm_done);
    int32_t prev_read_grad = kNoIndex, prev_param_write = kNoIndex;
    for (size_t g = 0; g < plan.subgroups.size(); ++g) {
      const int64_t n = plan.subgroups[g].elements;
      const std::string G = ".sg" + std::to_string(g) + R;
      const int32_t states = b.Buffer("states" + G, opt_pool[r], 3 * n * 4);
      const int32_t grad = b.Buffer("gradin" + G, opt_pool[r], n * 4);
      TaskSpec rs;
      rs.id = "read.states" + G;
      rs.op = Op::kRead;
      rs.resource = opt_read[r];
      rs.bytes = 3 * n * 4;
      rs.block_bytes = block_size;
      rs.queue_depth = static_cast<int32_t>(queue_depth);
      rs.allocs = {states};
      rs.phase = Phase::kStep;
      rs.priority = static_cast<int32_t>(g);
      // Serial: after the previous sub-group is written back. pipeline_read: one sub-group
      // ahead, as soon as the previous sub-group's reads are done.
      rs.deps = pipeline_read && prev_read_grad != kNoIndex ? std::vector<int32_t>{prev_read_grad} : prev_done;
      if (pipeline_read && prev_read_grad != kNoIndex) rs.deps.push_back(norm_done);
      const int32_t read_states = b.Task(std::move(rs));
      TaskSpec rg;
      rg.id = "read.grad" + G;
      rg.op = Op::kRead;
      rg.resource = opt_read[r];
      rg.bytes = n * 4;
      rg.block_bytes = block_size;
      rg.queue_depth = static_cast<int32_t>(queue_depth);
      rg.allocs = {grad};
      rg.deps = {read_states};
      rg.phase = Phase::kStep;
      rg.priority = static_cast<int32_t>(g);
      const int32_t read_grad = b.Task(std::move(rg));
      TaskSpec adam;
      adam.id = "adam" + G;
      adam.op = Op::kOptimizer;
      adam.kernel = "adam";
      adam.resource = b.Cpu(r);
      adam.bytes = n * 4;
      adam.ranks = threads;
      adam.uses = {states};
      adam.frees = {grad};
      adam.deps = {read_grad};
      if (prev_param_write != kNoIndex) adam.deps.push_back(prev_param_write);
      adam.phase = Phase::kStep;
      const int32_t adam_task = b.Task(std::move(adam));
      // fp32 -> fp16 copy through the parameter swapper's slots, each written with a blocking wait.
      std::vector<int32_t> param_writes;
      for (int64_t c0 = 0, c = 0; c0 < n; c0 += buffer_size, ++c) {
        const int64_t chunk = std::min(buffer_size, n - c0);
        const std::string C = G + ".c" + std::to_string(c);
        const int32_t slot = b.Buffer("p16" + C, param_pool[r], buffer_size * 2);
        TaskSpec conv;
        conv.id = "convert.p16" + C;
        conv.op = Op::kConvert;
        conv.kernel = "fp32_to_bf16";
        conv.resource = b.Cpu(r);
        conv.bytes = chunk * 4;
        conv.ranks = threads;
        conv.allocs = {slot};
        conv.deps = {adam_task};
        if (!param_writes.empty()) conv.deps.push_back(param_writes.back());
        conv.phase = Phase::kStep;
        const int32_t conv_task = b.Task(std::move(conv));
        TaskSpec pw;
        pw.id = "write.p16" + C;
        pw.op = Op::kWrite;
        pw.resource = param_io[r];
        pw.bytes = chunk * 2;
        pw.block_bytes = block_size;
        pw.queue_depth = static_cast<int32_t>(queue_depth);
        pw.uses = {slot};
        pw.frees = {slot};
        pw.deps = {conv_task};
        pw.phase = Phase::kStep;
        param_writes.push_back(b.Task(std::move(pw)));
      }
      TaskSpec ws;
      ws.id = "write.states" + G;
      ws.op = Op::kWrite;
      ws.resource = opt_write[r];
      ws.bytes = 3 * n * 4;
      ws.block_bytes = block_size;
      ws.queue_depth = static_cast<int32_t>(queue_depth);
      ws.uses = {states};
      ws.frees = {states};
      ws.deps = {param_writes.back()};
      ws.phase = Phase::kStep;
      const int32_t write_states = b.Task(std::move(ws));
      prev_read_grad = read_grad;
      prev_param_write = param_writes.back();
      // Serial: the next swap-in waits for this swap-out. pipeline_write: only for the compute
      // and the blocking parameter write.
      prev_done = pipeline_write ? std::vector<int32_t>{param_writes.back()} : std::vector<int32_t>{write_states};
      step_tails.push_back(write_states);
      step_tails.push_back(param_writes.back());
    }
  }
  step_end_spec.deps = step_tails;
  const int32_t step_end = b.Task(std::move(step_end_spec));
  for (int32_t read : carried_reads) b.task(read).carried.push_back({step_end, 1});

  Schedule schedule = b.Finish();
  TF_RETURN_IF_ERROR(schedule.Validate().WithContext("zero-infinity generated an invalid schedule (a bug)"));
  return schedule;
}

// What a DeepSpeed user can change without touching DeepSpeed: the swap buffers, the
// optimizer pipelining, the sub-group size and the aio request shape.
std::vector<KnobChoice> ZeroInfinityTunableKnobs(const Scenario&) {
  return {{"buffer_count", {"3", "5", "8"}},
          {"pipeline_read", {"false", "true"}},
          {"pipeline_write", {"false", "true"}},
          {"sub_group_size", {"1e8", "5e8", "1e9"}},
          {"block_size", {"1 MiB", "8 MiB"}},
          {"queue_depth", {"8", "32", "128"}}};
}

}  // namespace tierflow::policies
