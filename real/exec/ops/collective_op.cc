// Collective tasks (op_handler.h) over several ranks, each run by the rank's CommEngine in the order
// every rank agrees on (ranks.h). With one rank they move nothing: the partition is the whole.
//   allgather      the units whose partitions it names become whole: in the GPU buffer the h2d
//                  copied this rank's partition into, or that it allocates when the partition is
//                  kept on the GPU (the fetch); at the GPU-resident home (in the step, after the
//                  refresh of the resident units)
//   reducescatter  the units whose partitions it names: each rank keeps, in the layer's gradient
//                  buffer at its own part, the sum in rank order of every rank's gradients (fp32,
//                  then rounded once to bf16, as a bf16 model's reduced gradients are)
//   allreduce      the global gradient check: every rank's part combined in rank order decides
//                  the step (its overflow check, norm and clip factor)
// The collectives of gpu0's buffers go through one on gpu0's memory where the run opened one at
// set-up (OpenCollectives: NCCL, or RunOptions::device_collective), else through the run's own
// group. Their parts are packed side by side for one call (Packed): on gpu0 for a collective on
// its memory, copied there by the compute device (D2D); else in host memory, copied off and onto
// gpu0 (D2H, H2D: a memory copy where gpu0 is emulated, a copy engine's on a GPU), so that the
// host back-ends serve ranks on GPUs too and two ranks can share one GPU.
#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "tierflow/real/cpu_ops.h"
#include "../run_state.h"
#include "op_handler.h"

namespace tierflow::real::exec {

namespace {

// Memory a collective reads and writes, into which parts of gpu0's buffers are packed and from
// which they are unpacked: gpu0 memory (a block of the device's) for a collective on it, else
// host memory.
class Packed {
 public:
  static StatusOr<Packed> Make(ComputeDevice& device, const Collective& comm, int64_t bytes) {
    Packed p(device, comm.device_memory());
    if (p.on_device_) {
      TF_ASSIGN_OR_RETURN(p.block_, device.Allocate(bytes));
    } else {
      p.host_.resize(static_cast<size_t>(bytes));
    }
    return p;
  }
  Packed(Packed&& o) noexcept : device_(o.device_), on_device_(o.on_device_), host_(std::move(o.host_)), block_(std::exchange(o.block_, nullptr)) {}
  Packed(const Packed&) = delete;
  Packed& operator=(const Packed&) = delete;
  Packed& operator=(Packed&&) = delete;
  ~Packed() {
    if (block_ != nullptr) device_->Free(block_);
  }

  char* data() { return on_device_ ? static_cast<char*>(block_) : host_.data(); }
  // `bytes` of gpu0 memory at `from` into the pack at byte `at`, and back out to gpu0 memory.
  Status In(int64_t at, const void* from, int64_t bytes) {
    return on_device_ ? device_->D2D(data() + at, from, bytes) : device_->D2H(data() + at, from, bytes);
  }
  Status Out(void* to, int64_t at, int64_t bytes) {
    return on_device_ ? device_->D2D(to, data() + at, bytes) : device_->H2D(to, data() + at, bytes, nullptr);
  }

 private:
  Packed(ComputeDevice& device, bool on_device) : device_(&device), on_device_(on_device) {}
  ComputeDevice* device_;
  bool on_device_;
  std::vector<char> host_;
  void* block_ = nullptr;
};

// What the family keeps for the run (OpenCollectives): the collective of gpu0's buffers, on its
// memory, and the NCCL group the run opened for it, if it did.
struct DeviceCollectives : RunState::Kept {
  Collective* comm = nullptr;
  std::unique_ptr<Collective> nccl;
};

// The collective of gpu0's buffers: the one on gpu0's memory where the run has it, else the run's.
Collective& OfGpuBuffers(const RunState& run) {
  const auto* kept = run.Find<DeviceCollectives>();
  return kept != nullptr ? *kept->comm : *run.comm();
}

// One unit made whole: this rank's part at `mine` (bf16, in gpu0's memory), the whole unit
// written at `whole` (gpu0's).
struct Gathered {
  const RankSpace::Unit* unit;
  const char* mine;
  char* whole;
};

// All-gathers `units` in one call: this rank's parts packed side by side, every rank's packed
// alike, then each unit's parts laid out in rank order.
Status GatherUnits(ComputeDevice& device, Collective& comm, const std::vector<Gathered>& units) {
  int64_t per_rank = 0;
  for (const Gathered& g : units) per_rank += g.unit->part;
  TF_ASSIGN_OR_RETURN(Packed send, Packed::Make(device, comm, per_rank * 2));
  TF_ASSIGN_OR_RETURN(Packed recv, Packed::Make(device, comm, per_rank * 2 * comm.ranks()));
  int64_t at = 0;
  for (const Gathered& g : units) {
    TF_RETURN_IF_ERROR(send.In(at * 2, g.mine, g.unit->part * 2));
    at += g.unit->part;
  }
  TF_RETURN_IF_ERROR(Complete(comm.AllGather(send.data(), recv.data(), per_rank, ElementType::kBf16)));
  at = 0;
  for (const Gathered& g : units) {
    for (int q = 0; q < comm.ranks(); ++q) {
      TF_RETURN_IF_ERROR(recv.Out(g.whole + q * g.unit->part * 2, (q * per_rank + at) * 2, g.unit->part * 2));
    }
    at += g.unit->part;
  }
  return Status::Ok();
}

}  // namespace

// With several ranks, the collectives of gpu0's buffers (DeviceCollectives): RunOptions's
// device_collective, or NCCL where gpu0 is a GPU, the build has NCCL, no two ranks share a GPU
// and it opens on every rank; else none (they go through the run's group, staged through host
// memory). Every rank decides alike, and the run's notes say what.
Status OpenCollectives(RunState& run) {
  Collective* const comm = run.comm();
  ComputeDevice* const device = run.device();
  if (comm == nullptr) return Status::Ok();
  if (Collective* given = run.options().device_collective; given != nullptr) {
    if (!given->device_memory() || given->ranks() != comm->ranks() || given->rank() != comm->rank()) {
      return InvalidArgument("RunOptions::device_collective: rank " + std::to_string(given->rank()) + " of " + std::to_string(given->ranks()) +
                             (given->device_memory() ? "" : ", on host memory") + ", where the run is rank " + std::to_string(comm->rank()) +
                             " of " + std::to_string(comm->ranks()) + " and needs a group on gpu0's memory");
    }
    run.Keep(std::make_unique<DeviceCollectives>()).comm = given;
    run.Note("collectives of gpu0's buffers: " + std::string(given->backend()) + ", on gpu0's memory");
    return Status::Ok();
  }
  if (device->gpu() < 0 || !HaveNccl()) return Status::Ok();  // alike on every rank: one build, one --compute
  // NCCL where every rank has a GPU of its own (MakeComputeDevice gives a rank the GPU of its
  // place on the machine, modulo the GPUs there); ranks sharing one stage through host memory.
  const Status own = device->gpu() == comm->local_rank()
                         ? Status::Ok()
                         : FailedPrecondition("its GPU " + std::to_string(device->gpu()) + " is another rank's too");
  if (const Status all = run.AgreeAcrossRanks(own); !all.ok()) {
    run.Note("collectives of gpu0's buffers: " + std::string(comm->backend()) + ", staged through host memory (" + all.message() + ")");
    return Status::Ok();
  }
  // Where NCCL does not open on every rank, every rank stages instead (what a rank that opened it
  // holds is aborted: its peers are not there to close it with).
  auto nccl = OpenNcclCollective(*comm, device->gpu());
  if (const Status all = run.AgreeAcrossRanks(nccl.status()); !all.ok()) {
    if (nccl.ok()) (*nccl)->Abort(1);
    run.Note("collectives of gpu0's buffers: " + std::string(comm->backend()) + ", staged through host memory (NCCL did not open: " +
             all.message() + ")");
    return Status::Ok();
  }
  DeviceCollectives& kept = run.Keep(std::make_unique<DeviceCollectives>());
  kept.nccl = std::move(nccl).value();
  kept.comm = kept.nccl.get();
  run.Note("collectives of gpu0's buffers: nccl, on the GPUs");
  return Status::Ok();
}

Status PrepareAllGather(RunState& run, const TaskSpec& t, int32_t /*task*/, int64_t iteration, Job& job) {
  if (run.comm() == nullptr) return Status::Ok();
  // The units it names, each whole parts of this rank's space.
  struct Part {
    const TensorSpec* ts;
    const RankSpace::Unit* unit;
  };
  std::vector<Part> parts;
  for (int32_t ti : t.tensors) {
    const TensorSpec& ts = run.T(ti);
    const std::vector<const RankSpace::Unit*> units = run.space().UnitsIn(ts.element_offset, run.Elements(ts));
    if (units.front()->local != ts.element_offset || units.back()->local + units.back()->part != ts.element_offset + run.Elements(ts)) {
      return InvalidArgument(run.Who(t, iteration) + " gathers " + run.Range(ts) + ", which is not whole partitions of the model's tensors");
    }
    for (const RankSpace::Unit* u : units) parts.push_back({&ts, u});
  }
  auto gathered = std::make_shared<std::vector<Gathered>>();
  if (t.phase == Phase::kStep) {
    // After the step: each rank refreshed its own part at the resident home; the units become
    // whole there at the version of that part.
    int64_t version = Versions::kNever;
    for (const Part& p : parts) {
      const int64_t mine = p.unit->global + run.space().rank() * p.unit->part;
      const ResidentRun* r = run.ResidentAt(p.unit->global);
      if (r == nullptr || p.unit->global + p.unit->n > r->begin + r->n) {
        return FailedPrecondition(run.Who(t, iteration) + " gathers " + run.Range(*p.ts) + " at the GPU-resident home, which does not hold its units");
      }
      const int64_t v = run.resident_versions().Get(mine, mine + p.unit->part);
      if (version == Versions::kNever) version = v;
      if (v != version || v != iteration + 1) {
        return FailedPrecondition(run.Who(t, iteration) + " gathers resident parameters at " + VersionText(v) + ", expected version " +
                                  std::to_string(iteration + 1) + " (after this iteration's update): a dependency on their refresh is missing");
      }
      char* whole = r->data + (p.unit->global - r->begin) * 2;
      gathered->push_back({p.unit, whole + run.space().rank() * p.unit->part * 2, whole});
    }
    job.work = [&run, gathered] { return GatherUnits(*run.device(), OfGpuBuffers(run), *gathered); };
    job.finish = [&run, gathered, version] {
      for (const Gathered& g : *gathered) run.resident_versions().Set(g.unit->global, g.unit->global + g.unit->n, version);
    };
    return Status::Ok();
  }
  // The fetch: this rank's partitions in the GPU buffer it uses, where the h2d put them, or at
  // their GPU-resident home (parameters kept on the GPU); the units made whole in that buffer,
  // side by side in the order named.
  const int32_t gpu = run.GpuBufferOf(t);
  if (gpu == kNoIndex) return InvalidArgument(run.Who(t, iteration) + ": an all-gather of fetched parameters names no GPU buffer it gathers into");
  int64_t need = 0;
  for (const Part& p : parts) need += p.unit->n * 2;
  if (need > run.Buf(gpu).size) {
    return InvalidArgument(run.Who(t, iteration) + ": the whole units (" + std::to_string(need) + " bytes) do not fit GPU buffer '" +
                           run.BufferName(gpu) + "'");
  }
  // The parts are copied out before any unit is written (GatherUnits packs them first), so a
  // unit written over a later one's part loses nothing.
  std::vector<Piece> whole;
  int64_t offset = 0;
  for (const Part& p : parts) {
    Span held = run.FindSpan(gpu, kParam16Part, p.unit->local, p.unit->part);
    if (held.data == nullptr && run.schedule().devices()[static_cast<size_t>(p.ts->device)].kind == DeviceKind::kGpu) {
      const int64_t mine = p.unit->global + run.space().rank() * p.unit->part;
      const ResidentRun* r = run.ResidentAt(mine);
      if (r != nullptr && mine + p.unit->part <= r->begin + r->n) held = {r->data + (mine - r->begin) * 2, run.resident_versions().Get(mine, mine + p.unit->part)};
    }
    if (held.data == nullptr || held.version != iteration) {
      return FailedPrecondition(run.Who(t, iteration) + " gathers " + run.Range(*p.ts) + ", but GPU buffer '" + run.BufferName(gpu) +
                                "' holds " + (held.data == nullptr ? std::string("none of it") : VersionText(held.version)) +
                                " of this rank's partition, not version " + std::to_string(iteration) + ": a dependency on its h2d is missing");
    }
    gathered->push_back({p.unit, held.data, run.Buf(gpu).data + offset});
    whole.push_back({kParam16, p.unit->global, p.unit->n, offset, held.version});
    offset += p.unit->n * 2;
  }
  job.work = [&run, gathered] { return GatherUnits(*run.device(), OfGpuBuffers(run), *gathered); };
  job.finish = [&run, gpu, whole] {
    run.Buf(gpu).pieces.clear();
    for (const Piece& p : whole) run.Buf(gpu).pieces.push_back(p);
  };
  return Status::Ok();
}

Status PrepareReduceScatter(RunState& run, const TaskSpec& t, int32_t /*task*/, int64_t iteration, Job& job) {
  if (run.comm() == nullptr) return Status::Ok();
  // The layer's gradients in the GPU buffer it uses (what the backward wrote), of this
  // micro-step; each unit it names reduced into this rank's part of it there.
  struct Reduced {
    const RankSpace::Unit* unit;
    float* whole;
  };
  auto units = std::make_shared<std::vector<Reduced>>();
  const int64_t want = run.GradVersion(iteration, t.micro_step);
  // It uses every GPU gradient buffer of its bucket; its unit's gradient is in the one of its
  // layer, which the layer's own gradients start. With tied embeddings the table's range is in two
  // of them: the embedding's own gradient, and the head's part of it, after the head's own.
  auto of_its_layer = [&run, &t](int32_t b) {
    if (t.layer < 0) return true;
    const int64_t begin = run.trainer().LayerBegin(t.layer);
    for (const Piece& p : run.Buf(b).pieces) {
      if (p.kind == kGrad && p.offset == 0 && p.begin == begin) return true;
    }
    return false;
  };
  for (int32_t ti : t.tensors) {
    const TensorSpec& ts = run.T(ti);
    const RankSpace::Unit& u = run.space().UnitAt(ts.element_offset);
    if (ts.element_offset != u.local || run.Elements(ts) != u.part) {
      return InvalidArgument(run.Who(t, iteration) + " reduces " + run.Range(ts) + ", which is not one partition of a tensor of the model");
    }
    float* whole = nullptr;
    for (int32_t b : t.uses) {
      if (!run.HoldsGpuMemory(b) || !of_its_layer(b)) continue;
      const Span p = run.FindSpan(b, kGrad, u.global, u.n);
      if (p.data == nullptr) continue;
      if (p.version != want) {
        return FailedPrecondition(run.Who(t, iteration) + " reduces gradients of " + run.GradVersionText(p.version) + ", not " + run.GradVersionText(want) +
                                  ": it runs before the backward that computes them");
      }
      whole = reinterpret_cast<float*>(p.data);
      break;
    }
    if (whole == nullptr) return FailedPrecondition(run.Who(t, iteration) + " reduces " + run.Range(ts) + "'s gradients, but no GPU buffer it uses holds them");
    units->push_back({&u, whole});
  }
  CpuThreads* threads = &run.ThreadsOf(t.resource);
  job.work = [&run, units, threads] {
    // Block q of what is sent is rank q's to keep: every unit's q-th part, side by side.
    Collective& comm = OfGpuBuffers(run);
    const int ranks = comm.ranks(), me = comm.rank();
    int64_t per_rank = 0;
    for (const Reduced& r : *units) per_rank += r.unit->part;
    TF_ASSIGN_OR_RETURN(Packed send, Packed::Make(*run.device(), comm, per_rank * ranks * 4));
    TF_ASSIGN_OR_RETURN(Packed recv, Packed::Make(*run.device(), comm, per_rank * 4));
    for (int q = 0; q < ranks; ++q) {
      int64_t at = q * per_rank;
      for (const Reduced& r : *units) {
        TF_RETURN_IF_ERROR(send.In(at * 4, r.whole + q * r.unit->part, r.unit->part * 4));
        at += r.unit->part;
      }
    }
    TF_RETURN_IF_ERROR(Complete(comm.ReduceScatter(send.data(), recv.data(), per_rank, ElementType::kFloat32)));
    int64_t at = 0;
    for (const Reduced& r : *units) {
      float* mine = r.whole + me * r.unit->part;
      TF_RETURN_IF_ERROR(recv.Out(mine, at * 4, r.unit->part * 4));
      TF_RETURN_IF_ERROR(run.device()->RoundToBf16(mine, r.unit->part, *threads));
      at += r.unit->part;
    }
    return Status::Ok();
  };
  return Status::Ok();
}

Status PrepareNormAllReduce(RunState& run, const TaskSpec& t, int32_t /*task*/, int64_t iteration, Job& job) {
  if (run.comm() == nullptr || !run.global_check()) return Status::Ok();
  if (run.next_norm_iteration() != iteration || run.Step(iteration).decided != -1) {
    return FailedPrecondition(run.Who(t, iteration) + ": the all-reduce of the gradient check runs before this rank's check of iteration " +
                              std::to_string(iteration) + " finished");
  }
  auto total = std::make_shared<cpu::GradCheck>();
  const cpu::GradCheck mine = run.Step(iteration).partial;
  job.work = [&run, total, mine] {
    // Every rank's (finite, sum of squares), combined in rank order.
    const double send[2] = {mine.finite ? 1.0 : 0.0, mine.sum_sq};
    std::vector<double> recv(static_cast<size_t>(2 * run.comm()->ranks()));
    TF_RETURN_IF_ERROR(Complete(run.comm()->AllGather(send, recv.data(), 4, ElementType::kFloat32)));  // 2 doubles as 4 words
    for (int q = 0; q < run.comm()->ranks(); ++q) {
      *total = cpu::CombineGradChecks(*total, cpu::GradCheck{recv[2 * q] != 0.0, recv[2 * q + 1]});
    }
    return Status::Ok();
  };
  job.finish = [&run, iteration, total] { run.DecideStep(iteration, *total); };
  return Status::Ok();
}

}  // namespace tierflow::real::exec
