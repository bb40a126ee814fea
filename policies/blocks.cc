#include "blocks.h"

#include <algorithm>

#include "tierflow/models/llm.h"

namespace tierflow::policies {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool IsLinearWeight(const models::TensorShape& t) { return t.shape.size() == 2; }

}  // namespace

StatusOr<ModelPlan> MakeModelPlan(const Scenario& s, int64_t sub_group_size, int64_t persistence_threshold) {
  if (sub_group_size <= 0) return InvalidArgument("policy.sub_group_size must be > 0");
  ModelPlan plan;
  plan.ranks = std::max(1, s.training.data_parallel);
  plan.tokens = s.training.micro_batch_size * s.training.sequence_length;
  const models::LlmConfig& m = s.model;
  const bool ckpt = s.training.activation_checkpointing;
  const int64_t dtype_bytes = 2;

  for (const models::LayerInfo& layer : models::Layers(m)) {
    const models::Flops lf =
        models::LayerFlops(m, layer, s.training.micro_batch_size, s.training.sequence_length, ckpt);
    // Linear layers: 2 FLOPs per MAC per token. What the layer's FLOPs hold beyond its linear
    // layers (attention scores and values) is charged to its attention output projection.
    double linear_fwd = 0;
    for (const auto& t : layer.tensors) {
      if (IsLinearWeight(t) && layer.kind != models::LayerInfo::Kind::kEmbedding) {
        linear_fwd += 2.0 * static_cast<double>(plan.tokens) * static_cast<double>(t.elements());
      }
    }
    const double extra_fwd = std::max(0.0, lf.forward - linear_fwd);
    const double bwd_ratio = lf.forward > 0 ? (lf.backward + lf.recompute) / lf.forward : 0.0;
    bool extra_charged = false;
    for (const auto& t : layer.tensors) {
      ParamUnit u;
      u.name = t.name;
      u.layer = layer.index;
      u.elements = t.elements();
      u.rank_elements = CeilDiv(u.elements, plan.ranks);
      u.gpu_resident = u.elements < persistence_threshold;
      if (IsLinearWeight(t) && layer.kind != models::LayerInfo::Kind::kEmbedding) {
        u.fwd_flops = 2.0 * static_cast<double>(plan.tokens) * static_cast<double>(u.elements);
        const bool attn_out = t.name.find("o_proj") != std::string::npos || t.name.find("attn.c_proj") != std::string::npos;
        if (attn_out && !extra_charged) {
          u.fwd_flops += extra_fwd;
          extra_charged = true;
        }
        u.compute_bytes = u.elements * dtype_bytes + plan.tokens * (t.shape[0] + t.shape[1]) * dtype_bytes;
      } else {
        u.compute_bytes = u.elements * dtype_bytes + plan.tokens * m.hidden * dtype_bytes;
      }
      u.bwd_flops = u.fwd_flops * bwd_ratio;
      plan.units.push_back(std::move(u));
    }
    if (!extra_charged && extra_fwd > 0 && !plan.units.empty()) {
      plan.units.back().fwd_flops += extra_fwd;  // a layer without o_proj keeps its FLOPs anyway
      plan.units.back().bwd_flops = plan.units.back().fwd_flops * bwd_ratio;
    }
  }
  int64_t offset = 0;
  int64_t resident_params = 0;
  for (ParamUnit& u : plan.units) {
    u.rank_offset = offset;
    offset += u.rank_elements;
    if (u.gpu_resident) resident_params += u.elements;
  }
  plan.rank_elements = offset;
  for (int64_t begin = 0; begin < offset; begin += sub_group_size) {
    plan.subgroups.push_back({begin, std::min(sub_group_size, offset - begin)});
  }
  // What stays on each GPU: resident parameters, the layer inputs kept by checkpointing, and one
  // layer's full activations as working memory.
  plan.gpu_resident_bytes = resident_params * dtype_bytes +
                            m.layers * plan.tokens * models::ActivationBytesPerToken(m, dtype_bytes, true) +
                            plan.tokens * models::ActivationBytesPerToken(m, dtype_bytes, false) / std::max<int64_t>(1, m.layers);
  return plan;
}

ScheduleBuilder::ScheduleBuilder(const Scenario& s, std::string policy) : scenario_(s) {
  schedule_.name = s.name;
  schedule_.meta.emplace_back("policy", std::move(policy));
  schedule_.meta.emplace_back("model", s.model.name);
  schedule_.meta.emplace_back("hardware", s.hardware.node.name);
  Device("host", DeviceKind::kHost);
}

int32_t ScheduleBuilder::Device(const std::string& name, DeviceKind kind) {
  int32_t d = schedule_.FindDevice(name);
  return d != kNoIndex ? d : schedule_.AddDevice({name, kind});
}

int32_t ScheduleBuilder::Resource(const std::string& name, const std::string& device, int32_t concurrency) {
  int32_t r = schedule_.FindResource(name);
  if (r != kNoIndex) return r;
  int32_t d = schedule_.FindDevice(device);
  TF_CHECK(d != kNoIndex);
  return schedule_.AddResource({name, d, concurrency});
}

int32_t ScheduleBuilder::Pool(const std::string& name, const std::string& device, int64_t capacity_bytes) {
  int32_t p = schedule_.FindPool(name);
  if (p != kNoIndex) return p;
  int32_t d = schedule_.FindDevice(device);
  TF_CHECK(d != kNoIndex);
  return schedule_.AddPool({name, d, capacity_bytes});
}

int32_t ScheduleBuilder::Buffer(const std::string& name, int32_t pool, int64_t size_bytes, bool persistent) {
  return schedule_.AddBuffer({name, pool, size_bytes, persistent});
}

int32_t ScheduleBuilder::GpuCompute(int32_t r) {
  const std::string g = "gpu" + std::to_string(r);
  Device(g, DeviceKind::kGpu);
  return Resource(g + ".compute", g);
}
int32_t ScheduleBuilder::GpuH2D(int32_t r) {
  const std::string g = "gpu" + std::to_string(r);
  Device(g, DeviceKind::kGpu);
  return Resource(g + ".h2d", g);
}
int32_t ScheduleBuilder::GpuD2H(int32_t r) {
  const std::string g = "gpu" + std::to_string(r);
  Device(g, DeviceKind::kGpu);
  return Resource(g + ".d2h", g);
}
int32_t ScheduleBuilder::Cpu(int32_t r) { return Resource("cpu.r" + std::to_string(r), "host"); }
int32_t ScheduleBuilder::Comm() {
  Device("net", DeviceKind::kNetwork);
  return Resource("dp.comm", "net");
}
int32_t ScheduleBuilder::GpuPool(int32_t r) {
  const std::string g = "gpu" + std::to_string(r);
  Device(g, DeviceKind::kGpu);
  return Pool(g + ".hbm", g, scenario_.hardware.node.gpu.hbm_bytes);
}

std::vector<FetchedUnit> FetchUnits(ScheduleBuilder& b, const ModelPlan& plan, const std::vector<int32_t>& order,
                                    const FetchOptions& o) {
  const int32_t ranks = plan.ranks;
  std::vector<FetchedUnit> out;
  // Reads first: the coupled all-gathers refer to reads of later units.
  for (int32_t u : order) {
    const ParamUnit& unit = plan.units[u];
    if (unit.gpu_resident) continue;
    FetchedUnit f;
    f.unit = u;
    for (int32_t r = 0; r < ranks; ++r) {
      const std::string id = unit.name + "." + o.tag + ".r" + std::to_string(r);
      const int64_t part_bytes = unit.rank_elements * 2;
      const int32_t slot = b.Buffer("slot." + id, o.slot_pool[r], o.slot_bytes ? o.slot_bytes : part_bytes);
      TaskSpec t;
      t.id = "read." + id;
      t.op = Op::kRead;
      t.resource = o.read_resource[r];
      t.bytes = part_bytes;
      t.block_bytes = o.block_bytes;
      t.queue_depth = o.queue_depth;
      t.allocs = {slot};
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
    gather.id = "allgather." + unit.name + "." + o.tag;
    gather.op = Op::kAllGather;
    gather.resource = b.Comm();
    gather.bytes = unit.elements * 2;
    gather.ranks = ranks;
    gather.phase = o.phase;
    gather.layer = unit.layer;
    if (previous_gather != kNoIndex) gather.deps.push_back(previous_gather);
    std::vector<int32_t> gathered;
    for (int32_t r = 0; r < ranks; ++r) {
      const std::string id = unit.name + "." + o.tag + ".r" + std::to_string(r);
      const int32_t slot = f.gathered_buffer[r];
      TaskSpec h2d;
      h2d.id = "h2d." + id;
      h2d.op = Op::kH2D;
      h2d.resource = b.GpuH2D(r);
      h2d.bytes = unit.rank_elements * 2;
      h2d.uses = {slot};
      h2d.deps = {f.reads[r]};
      h2d.phase = o.phase;
      h2d.layer = unit.layer;
      gather.deps.push_back(b.Task(std::move(h2d)));
      gather.frees.push_back(slot);
      const int32_t full = b.Buffer("gathered." + id, b.GpuPool(r), unit.elements * 2);
      gather.allocs.push_back(full);
      gathered.push_back(full);
    }
    // Coupling: wait for every read issued so far on each handle (units i+1 .. i+k-1).
    for (size_t k = i + 1; k < out.size() && k < i + static_cast<size_t>(std::max(1, o.coupled_reads)); ++k) {
      for (int32_t read : out[k].reads) gather.deps.push_back(read);
    }
    f.gathered_buffer = std::move(gathered);
    f.allgather = b.Task(std::move(gather));
    previous_gather = f.allgather;
  }
  return out;
}

}  // namespace tierflow::policies
