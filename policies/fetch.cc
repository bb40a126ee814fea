// Fetching parameter units (fetch.h).
#include "fetch.h"

#include <algorithm>

#include "tierflow/core/text.h"

namespace tierflow::policies {

int32_t ParamHome(ScheduleBuilder& b, const ModelPlan& plan, const FetchOptions& o, int32_t rank, int32_t unit) {
  if (plan.units[unit].gpu_resident || o.params_on_gpu) return b.GpuDevice(rank);
  if (o.InHost(unit)) return b.HostDevice(rank);
  return b.DeviceOfResource(o.read_resource_of ? o.read_resource_of(rank, unit) : o.read_resource[rank]);
}

namespace {

// What a rank's fetch of `unit` names its tasks and buffers: "<what><unit>.<tag>.r<rank>", in one
// allocation.
std::string UnitName(std::string_view what, const ParamUnit& unit, const FetchOptions& o, int32_t rank) {
  return StrCat({what, unit.name, ".", o.tag, ".r", rank});
}

}  // namespace

std::vector<FetchedUnit> FetchUnits(ScheduleBuilder& b, const ModelPlan& plan, const std::vector<int32_t>& order,
                                    const FetchOptions& o, std::vector<int32_t>* last_h2d) {
  last_h2d->resize(static_cast<size_t>(plan.ranks), kNoIndex);
  const int32_t ranks = plan.ranks;
  std::vector<FetchedUnit> out;
  out.reserve(order.size());
  // Reads first: the coupled all-gathers refer to reads of later units.
  for (int32_t u : order) {
    const ParamUnit& unit = plan.units[u];
    if (unit.gpu_resident) continue;
    FetchedUnit f;
    f.unit = u;
    f.param_tensor.reserve(static_cast<size_t>(ranks));  // each list one allocation, not one a doubling
    f.gathered_buffer.reserve(static_cast<size_t>(ranks));
    f.reads.reserve(static_cast<size_t>(ranks));
    for (int32_t r = 0; r < ranks; ++r) {
      f.param_tensor.push_back(b.State(StateKind::kParam16, r, unit.rank_offset, unit.rank_elements, ParamHome(b, plan, o, r, u)));
      if (o.params_on_gpu || o.InHost(u)) {
        f.gathered_buffer.push_back(kNoIndex);  // nothing staged: the partition is on the GPU or in host memory
        continue;
      }
      const int64_t part_bytes = unit.rank_elements * 2;
      const int32_t slot = b.Buffer(UnitName("slot.", unit, o, r), o.slot_pool_of ? o.slot_pool_of(r, u) : o.slot_pool[r], o.slot_bytes ? o.slot_bytes : part_bytes);
      TaskSpec t;
      t.id = UnitName("read.", unit, o, r);
      t.op = Op::kRead;
      t.rank = r;
      t.resource = o.read_resource_of ? o.read_resource_of(r, u) : o.read_resource[r];
      t.bytes = part_bytes;
      t.block_bytes = o.block_bytes;
      t.queue_depth = o.queue_depth;
      t.allocs = {slot};
      t.tensors = {f.param_tensor[r]};
      t.phase = o.phase;
      t.layer = unit.layer;
      t.priority = o.priority_base + static_cast<int32_t>(out.size());
      for (int32_t c : o.carried_to) t.carried.push_back({c, 1});
      f.reads.push_back(b.Task(std::move(t)));
      f.gathered_buffer.push_back(slot);  // temporarily: the slot, replaced below
    }
    out.push_back(std::move(f));
  }
  int32_t previous_gather = kNoIndex;
  for (size_t i = 0; i < out.size(); ++i) {
    FetchedUnit& f = out[i];
    const ParamUnit& unit = plan.units[f.unit];
    TaskSpec gather;
    gather.id = StrCat({"allgather.", unit.name, ".", o.tag});
    gather.op = Op::kAllGather;
    gather.resource = b.Comm();
    gather.bytes = unit.elements * 2;
    gather.ranks = ranks;
    gather.tensors = f.param_tensor;
    gather.phase = o.phase;
    gather.layer = unit.layer;
    const size_t coupled = std::min(out.size() - i, static_cast<size_t>(std::max(1, o.coupled_reads)));
    gather.deps.reserve(1 + static_cast<size_t>(ranks) * coupled);  // below: the previous, an h2d a rank, coupled reads
    if (previous_gather != kNoIndex) gather.deps.push_back(previous_gather);
    std::vector<int32_t> gathered;
    gathered.reserve(static_cast<size_t>(ranks));
    f.admit.reserve(static_cast<size_t>(ranks));
    for (int32_t r = 0; r < ranks; ++r) {
      const int32_t full_pool = o.gather_pool.empty() ? b.GpuPool(r) : o.gather_pool[r];
      if (o.params_on_gpu) {
        const int32_t full = b.Buffer(UnitName("gathered.", unit, o, r), full_pool, unit.elements * 2);
        gather.allocs.push_back(full);
        gathered.push_back(full);
        continue;
      }
      // As DeepSpeed's all-gather: the full buffer is allocated first and the rank's partition
      // copied into its slice of it (here by the h2d, from the pinned slot), so the GPU memory
      // the h2d writes is the pool's from the start.
      const bool in_host = o.InHost(f.unit);
      const int32_t slot = in_host ? o.host_param_buffer[r] : f.gathered_buffer[r];
      const int32_t full = b.Buffer(UnitName("gathered.", unit, o, r), full_pool, unit.elements * 2);
      TaskSpec h2d;
      h2d.id = UnitName("h2d.", unit, o, r);
      h2d.op = Op::kH2D;
      h2d.rank = r;
      h2d.resource = b.GpuH2D(r);
      h2d.bytes = unit.rank_elements * 2;
      h2d.allocs = {full};
      h2d.uses = {slot};
      h2d.tensors = {f.param_tensor[r]};
      if (!in_host) h2d.deps = {f.reads[r]};
      if ((*last_h2d)[r] != kNoIndex) h2d.deps.push_back((*last_h2d)[r]);
      h2d.phase = o.phase;
      h2d.layer = unit.layer;
      (*last_h2d)[r] = b.Task(std::move(h2d));
      f.admit.push_back((*last_h2d)[r]);
      gather.deps.push_back((*last_h2d)[r]);
      if (!in_host) gather.frees.push_back(slot);
      gather.uses.push_back(full);
      gathered.push_back(full);
    }
    // Coupling: wait for every read issued so far on each handle (units i+1 .. i+k-1).
    for (size_t k = i + 1; k < i + coupled; ++k) {
      for (int32_t read : out[k].reads) gather.deps.push_back(read);
    }
    f.gathered_buffer = std::move(gathered);
    f.allgather = b.Task(std::move(gather));
    if (o.params_on_gpu) f.admit.assign(static_cast<size_t>(ranks), f.allgather);
    previous_gather = f.allgather;
  }
  return out;
}

}  // namespace tierflow::policies
