#include "blocks.h"

#include <algorithm>
#include <deque>
#include <map>

#include "tierflow/models/llm.h"
#include "tierflow/models/training.h"
#include "tierflow/models/yaml_tree.h"

namespace tierflow::policies {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool IsLinearWeight(const models::TensorShape& t) { return t.shape.size() == 2; }

}  // namespace

StatusOr<ModelPlan> MakeModelPlan(const Scenario& s, int64_t sub_group_size, int64_t persistence_threshold,
                                  SubGroupRule rule) {
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
      if (m.tied_embeddings && layer.kind == models::LayerInfo::Kind::kEmbedding && plan.tied_unit < 0) {
        plan.tied_unit = static_cast<int32_t>(plan.units.size());  // the token table: the embedding's first tensor
        u.gpu_resident = true;
      }
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
  if (rule == SubGroupRule::kUnitsAtMost) {
    for (const ParamUnit& u : plan.units) {
      if (u.rank_elements == 0) continue;
      SubGroup* last = plan.subgroups.empty() ? nullptr : &plan.subgroups.back();
      if (last != nullptr && last->elements + u.rank_elements <= sub_group_size) {
        last->elements += u.rank_elements;
      } else {
        plan.subgroups.push_back({u.rank_offset, u.rank_elements});
      }
    }
  } else if (rule == SubGroupRule::kDeepSpeed) {
    SubGroup open{0, 0};
    for (const ParamUnit& u : plan.units) {
      open.elements += u.rank_elements;
      if (open.elements >= sub_group_size) {
        plan.subgroups.push_back(open);
        open = {open.begin + open.elements, 0};
      }
    }
    if (open.elements > 0) plan.subgroups.push_back(open);
  } else {
    const int64_t step = IoAlignedStep(sub_group_size);
    // Each sub-group is several tasks per iteration: bounded before they are built.
    if ((offset + step - 1) / step > kMaxSubGroups) {
      return InvalidArgument("policy.sub_group_size: " + std::to_string(sub_group_size) + " cuts each rank's " + std::to_string(offset) + " parameters into " +
                             std::to_string((offset + step - 1) / step) + " sub-groups; at most " + std::to_string(kMaxSubGroups) +
                             " (sub_group_size at least " + std::to_string((offset + kMaxSubGroups - 1) / kMaxSubGroups) + ")");
    }
    for (int64_t begin = 0; begin < offset; begin += step) plan.subgroups.push_back({begin, std::min(step, offset - begin)});
  }
  // What stays on each GPU: resident parameters; the activations backward needs at the training
  // sequence length — with checkpointing each layer's input plus one layer's full activations
  // while it is recomputed, without it every layer's full activations (ActivationBytesPerToken
  // is per layer and token); and the head's bf16 logits, whose gradient the loss writes in place.
  const int64_t seq = s.training.sequence_length;
  const int64_t full = models::ActivationBytesPerToken(m, dtype_bytes, false, seq);
  const int64_t kept = ckpt ? m.layers * models::ActivationBytesPerToken(m, dtype_bytes, true, seq) + full : m.layers * full;
  plan.gpu_resident_bytes = resident_params * dtype_bytes + plan.tokens * (kept + m.vocab * dtype_bytes);
  return plan;
}

ScheduleBuilder::ScheduleBuilder(const Scenario& s, std::string policy) : scenario_(s), policy_(std::move(policy)) {
  schedule_.name = s.name;
  schedule_.meta.emplace_back("policy", policy_);
  schedule_.meta.emplace_back("model", s.model.name);
  if (!s.model_dir.empty()) schedule_.meta.emplace_back("model.hf_dir", s.model_dir);
  schedule_.meta.emplace_back("hardware", s.hardware.node.name);
  // What `sim`, `run` and `validate` of the schedule file read (ScheduleToJson writes them as
  // JSON objects).
  schedule_.sections.model = models::YamlToJson(YAML::Load(models::LlmToYaml(s.model)));
  schedule_.sections.hardware = models::YamlToJson(YAML::Load(models::HardwareToYaml(s.hardware)));
  schedule_.sections.training = models::YamlToJson(YAML::Load(models::TrainingToYaml(s.training)));
  Host(0);
}

StatusOr<Schedule> ScheduleBuilder::Finish() {
  const Status st = schedule_.Validate();
  if (st.code() == StatusCode::kResourceExhausted) {
    return st.WithContext(policy_ + ": the scenario's memory budget is too small for this schedule");
  }
  TF_RETURN_IF_ERROR(st.WithContext(policy_ + " generated an invalid schedule (a bug)"));
  return std::move(schedule_);
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

int32_t ScheduleBuilder::NodeOf(int32_t rank) const { return rank / std::max(1, scenario_.hardware.node.gpu_count); }
std::string ScheduleBuilder::OnNode(int32_t rank, const std::string& local) const {
  return models::NodeDeviceName(scenario_.hardware, NodeOf(rank), local);
}
ScheduleBuilder::RankDevices& ScheduleBuilder::Of(int32_t rank) {
  TF_CHECK(rank >= 0);
  if (static_cast<size_t>(rank) >= ranks_.size()) ranks_.resize(static_cast<size_t>(rank) + 1);
  return ranks_[static_cast<size_t>(rank)];
}
std::string ScheduleBuilder::Gpu(int32_t rank) {
  RankDevices& d = Of(rank);
  if (d.gpu.empty()) {
    const int32_t local = scenario_.hardware.nodes > 1 ? rank % std::max(1, scenario_.hardware.node.gpu_count) : rank;
    d.gpu = OnNode(rank, "gpu" + std::to_string(local));
    Device(d.gpu, DeviceKind::kGpu);
  }
  return d.gpu;
}
std::string ScheduleBuilder::Host(int32_t rank) {
  std::string name = OnNode(rank, "host");
  Device(name, DeviceKind::kHost);
  return name;
}
std::string ScheduleBuilder::Nvme(int32_t rank, int32_t disk) {
  std::string name = OnNode(rank, "nvme" + std::to_string(disk));
  Device(name, DeviceKind::kNvme);
  return name;
}
std::string ScheduleBuilder::Remote(int32_t rank, int32_t tier) {
  std::string name = OnNode(rank, "remote" + std::to_string(tier));
  Device(name, DeviceKind::kRemote);
  return name;
}

int32_t ScheduleBuilder::GpuCompute(int32_t r) {
  if (Of(r).compute == kNoIndex) {
    const std::string g = Gpu(r);
    Of(r).compute = Resource(g + ".compute", g);
  }
  return Of(r).compute;
}
int32_t ScheduleBuilder::GpuH2D(int32_t r) {
  if (Of(r).h2d == kNoIndex) {
    const std::string g = Gpu(r);
    Of(r).h2d = Resource(g + ".h2d", g);
  }
  return Of(r).h2d;
}
int32_t ScheduleBuilder::GpuD2H(int32_t r) {
  if (Of(r).d2h == kNoIndex) {
    const std::string g = Gpu(r);
    Of(r).d2h = Resource(g + ".d2h", g);
  }
  return Of(r).d2h;
}
int32_t ScheduleBuilder::Cpu(int32_t r) {
  if (Of(r).cpu == kNoIndex) Of(r).cpu = Resource(OnNode(r, "cpu.r" + std::to_string(r)), Host(r));
  return Of(r).cpu;
}
int32_t ScheduleBuilder::Comm() {
  Device("net", DeviceKind::kNetwork);
  return Resource("dp.comm", "net");
}
int32_t ScheduleBuilder::GpuPool(int32_t r) {
  if (Of(r).pool == kNoIndex) {
    const std::string g = Gpu(r);
    Of(r).pool = Pool(g + ".hbm", g, scenario_.hardware.node.gpu.hbm_bytes);
  }
  return Of(r).pool;
}

void ScheduleBuilder::StateLayout(const ModelPlan& plan) {
  const int64_t mib = int64_t{1} << 20;
  // Each rank's stretch starts on an aligned boundary (kIoAlignElements).
  state_rank_elements_ = (plan.rank_elements + kIoAlignElements - 1) / kIoAlignElements * kIoAlignElements;
  state_region_bytes_ = (plan.ranks * state_rank_elements_ * 4 + mib - 1) / mib * mib;
}

int32_t ScheduleBuilder::State(StateKind kind, int32_t rank, int64_t begin, int64_t elements, int32_t device) {
  TF_CHECK(state_region_bytes_ > 0);  // StateLayout first, or every kind would share one region
  const auto [known, inserted] = states_.try_emplace(StateKey{begin, elements, rank, device, kind}, kNoIndex);
  if (!inserted) return known->second;
  const int64_t element_bytes = StateKindBytes(kind);
  const std::string name = std::string(StateKindName(kind)) + ".r" + std::to_string(rank) + "[" + std::to_string(begin) + "+" +
                           std::to_string(elements) + "]@" + schedule_.devices()[device].name;
  const int32_t existing = schedule_.FindTensor(name);
  if (existing != kNoIndex) return known->second = existing;
  TensorSpec t;
  t.name = name;
  t.kind = kind;
  t.dtype = StateKindDtype(kind);
  t.shape = {elements};
  t.rank = rank;
  t.device = device;
  t.element_offset = begin;
  t.size_bytes = elements * element_bytes;
  // The order of the kinds (StateKind) fixes each kind's region in a device's store.
  t.offset_bytes = static_cast<int64_t>(kind) * state_region_bytes_ + (rank * state_rank_elements_ + begin) * element_bytes;
  return known->second = schedule_.AddTensor(std::move(t));
}

int32_t ParamHome(ScheduleBuilder& b, const ModelPlan& plan, const FetchOptions& o, int32_t rank, int32_t unit) {
  if (plan.units[unit].gpu_resident || o.params_on_gpu) return b.GpuDevice(rank);
  if (o.InHost(unit)) return b.HostDevice(rank);
  return b.DeviceOfResource(o.read_resource_of ? o.read_resource_of(rank, unit) : o.read_resource[rank]);
}

std::vector<FetchedUnit> FetchUnits(ScheduleBuilder& b, const ModelPlan& plan, const std::vector<int32_t>& order,
                                    const FetchOptions& o, std::vector<int32_t>* last_h2d) {
  last_h2d->resize(static_cast<size_t>(plan.ranks), kNoIndex);
  const int32_t ranks = plan.ranks;
  std::vector<FetchedUnit> out;
  // Reads first: the coupled all-gathers refer to reads of later units.
  for (int32_t u : order) {
    const ParamUnit& unit = plan.units[u];
    if (unit.gpu_resident) continue;
    FetchedUnit f;
    f.unit = u;
    for (int32_t r = 0; r < ranks; ++r) {
      f.param_tensor.push_back(b.State(StateKind::kParam16, r, unit.rank_offset, unit.rank_elements, ParamHome(b, plan, o, r, u)));
      if (o.params_on_gpu || o.InHost(u)) {
        f.gathered_buffer.push_back(kNoIndex);  // nothing staged: the partition is on the GPU or in host memory
        continue;
      }
      const std::string id = unit.name + "." + o.tag + ".r" + std::to_string(r);
      const int64_t part_bytes = unit.rank_elements * 2;
      const int32_t slot = b.Buffer("slot." + id, o.slot_pool_of ? o.slot_pool_of(r, u) : o.slot_pool[r], o.slot_bytes ? o.slot_bytes : part_bytes);
      TaskSpec t;
      t.id = "read." + id;
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
    gather.id = "allgather." + unit.name + "." + o.tag;
    gather.op = Op::kAllGather;
    gather.resource = b.Comm();
    gather.bytes = unit.elements * 2;
    gather.ranks = ranks;
    gather.tensors = f.param_tensor;
    gather.phase = o.phase;
    gather.layer = unit.layer;
    if (previous_gather != kNoIndex) gather.deps.push_back(previous_gather);
    std::vector<int32_t> gathered;
    for (int32_t r = 0; r < ranks; ++r) {
      const std::string id = unit.name + "." + o.tag + ".r" + std::to_string(r);
      const int32_t full_pool = o.gather_pool.empty() ? b.GpuPool(r) : o.gather_pool[r];
      if (o.params_on_gpu) {
        const int32_t full = b.Buffer("gathered." + id, full_pool, unit.elements * 2);
        gather.allocs.push_back(full);
        gathered.push_back(full);
        continue;
      }
      // As DeepSpeed's all-gather: the full buffer is allocated first and the rank's partition
      // copied into its slice of it (here by the h2d, from the pinned slot), so the GPU memory
      // the h2d writes is the pool's from the start.
      const bool in_host = o.InHost(f.unit);
      const int32_t slot = in_host ? o.host_param_buffer[r] : f.gathered_buffer[r];
      const int32_t full = b.Buffer("gathered." + id, full_pool, unit.elements * 2);
      TaskSpec h2d;
      h2d.id = "h2d." + id;
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
    for (size_t k = i + 1; k < out.size() && k < i + static_cast<size_t>(std::max(1, o.coupled_reads)); ++k) {
      for (int32_t read : out[k].reads) gather.deps.push_back(read);
    }
    f.gathered_buffer = std::move(gathered);
    f.allgather = b.Task(std::move(gather));
    if (o.params_on_gpu) f.admit.assign(static_cast<size_t>(ranks), f.allgather);
    previous_gather = f.allgather;
  }
  return out;
}

namespace {

// The backward's gradient path of one pass (PassOptions::gradient_path and
// reduce_bucket_elements): each layer's gradients join the reduce bucket after its backward, and
// Flush issues what the bucket holds, per unit in the order it joined: the reduce-scatter, the
// d2h copies and, flushing to NVMe, the widening converts and the writes.
class GradientBucket {
 public:
  // What the gradient path keeps from pass to pass.
  struct Carry {
    // Per rank, the persistent bf16 buffer of the whole partition that d2h copies into: the kept
    // gradients, or the accumulator of a flush with micro-steps (GradientPath).
    std::vector<int32_t> accumulator;
    // Per rank and unit: the d2h of the unit's gradients before (an earlier micro-step's, the
    // tied head's part): the next adds to what it left, so it waits for it.
    std::vector<std::map<int32_t, int32_t>> last_contribution;
    // PassOptions::deepspeed_epilogue, per rank: the pool of the widened gradients, the most a
    // bucket put in it (its capacity once every pass is planned), the last task of the previous
    // bucket's epilogue (DeepSpeed's one thread runs the buckets one after the other), and the
    // task the rank's next compute waits for (kNoIndex once it has: DeepSpeed runs each epilogue
    // in a gradient hook of its backward call, so the backward, and the next micro-step's
    // forward, go on after it).
    std::vector<int32_t> grad32_pool;
    std::vector<int64_t> grad32_peak;
    std::vector<int32_t> epilogue_end;
    std::vector<int32_t> block;
  };

  GradientBucket(ScheduleBuilder& b, const ModelPlan& plan, const PassOptions& o, const FetchOptions& fo,
                 bool last_micro_step, Carry* carry, PassResult* res)
      : b_(b), plan_(plan), o_(o), fo_(fo), last_micro_step_(last_micro_step), carry_(*carry), res_(*res),
        flush_(o.gradient_path == GradientPath::kFlushToNvme), in_order_(o.deepspeed_epilogue) {
    TF_CHECK(!in_order_ || (flush_ && !carry_.accumulator.empty() && !carry_.grad32_pool.empty()));
  }

  // Layer `layer`'s gradients after its backward: `grad_gpu` (per rank) holds those of `units`
  // (in pass order), after the tied head's part of the table's gradient when `tied_head` (it
  // leaves first; the embedding's is added to it). A bucket the next unit would take past
  // reduce_bucket_elements is issued first; with 0, the layer is issued at once.
  void AddLayer(int32_t layer, const std::vector<int32_t>& grad_gpu, const std::vector<int32_t>& units, bool tied_head) {
    layers_.push_back({layer, grad_gpu, std::vector<std::vector<int32_t>>(static_cast<size_t>(plan_.ranks)), units.back()});
    if (tied_head) Add(&layers_.back(), plan_.tied_unit, /*head_part=*/true);
    for (int32_t u : units) Add(&layers_.back(), u, /*head_part=*/false);
    if (o_.reduce_bucket_elements <= 0) Flush();
  }

  // Issues what the bucket holds, after the backward computed so far.
  void Flush() {
    bucket_grads_.clear();
    for (size_t i = 0; i < bucket_.size(); ++i) {
      if (i == 0 || bucket_[i].layer != bucket_[i - 1].layer) {
        bucket_grads_.insert(bucket_grads_.end(), bucket_[i].layer->grad_gpu.begin(), bucket_[i].layer->grad_gpu.end());
      }
    }
    reductions_.clear();
    // In DeepSpeed's order the bucket is reduced at once, after the previous bucket's epilogue
    // and before any of its own copies.
    if (in_order_) {
      std::vector<int32_t> before;
      for (int32_t end : carry_.epilogue_end) {
        if (end != kNoIndex) before.push_back(end);
      }
      for (Entry& e : bucket_) {
        e.reduce = Reduce(e);
        b_.task(e.reduce).deps.insert(b_.task(e.reduce).deps.end(), before.begin(), before.end());
      }
      if (!bucket_.empty()) carry_.epilogue_end.assign(carry_.epilogue_end.size(), bucket_.back().reduce);
    }
    for (Entry& e : bucket_) {
      if (!in_order_) e.reduce = Reduce(e);
      if (e.head_part) {
        IssueHeadPart(*e.layer, e.reduce);
      } else {
        IssueUnit(*e.layer, e.unit, e.reduce);
      }
    }
    if (in_order_) {
      SwapOut();
      carry_.block = carry_.epilogue_end;
    }
    // A layer's GPU gradients are freed once every reduce-scatter that read them has run: its
    // own (before its d2h copies) and the other layers' of each bucket it was in.
    for (size_t i = 0; i < bucket_.size(); ++i) {
      LayerGrads* lg = bucket_[i].layer;
      if (i > 0 && lg == bucket_[i - 1].layer) continue;
      for (const auto& [task, of] : reductions_) {
        if (of != lg) lg->foreign_reductions.push_back(task);
      }
      for (int32_t d2h : lg->frees) {
        b_.task(d2h).deps.insert(b_.task(d2h).deps.end(), lg->foreign_reductions.begin(), lg->foreign_reductions.end());
      }
    }
    bucket_.clear();
    bucket_elements_ = 0;
  }

 private:
  struct LayerGrads {
    int32_t layer = 0;
    std::vector<int32_t> grad_gpu;             // per rank: the layer's GPU gradients
    std::vector<std::vector<int32_t>> d2h;     // per rank: the layer's d2h so far
    int32_t last_unit = 0;                     // its d2h frees grad_gpu
    std::vector<int32_t> foreign_reductions;   // other layers' reduce-scatters that read grad_gpu
    std::vector<int32_t> frees;                // per rank: the d2h that frees grad_gpu
  };
  struct Entry {
    LayerGrads* layer = nullptr;
    int32_t unit = 0;
    bool head_part = false;  // the tied head's part of the table's gradient
    int32_t reduce = kNoIndex;  // its reduce-scatter, once issued
  };
  // A gradient waiting for the bucket's swap-out (deepspeed_epilogue).
  struct Widened {
    std::string id;
    int32_t unit = 0;
    int32_t buffer = kNoIndex;       // widened in carry_.grad32_pool (device_memory_is_host), else none
    int32_t write_resource = kNoIndex;
    int32_t grad_tensor = kNoIndex;  // the fp32 gradient at its home on disk
    int32_t after = kNoIndex;        // the task that left it there: the widen, else the d2h
  };

  void Add(LayerGrads* lg, int32_t unit, bool head_part) {
    const int64_t elements = plan_.units[unit].elements;
    if (o_.reduce_bucket_elements > 0 && bucket_elements_ > 0 && bucket_elements_ + elements > o_.reduce_bucket_elements) {
      Flush();
    }
    bucket_.push_back({lg, unit, head_part});
    bucket_elements_ += elements;
  }

  void AfterLastContribution(int32_t rank, int32_t unit, TaskSpec* d2h) const {
    const auto& last = carry_.last_contribution[static_cast<size_t>(rank)];
    const auto it = last.find(unit);
    if (it != last.end()) d2h->deps.push_back(it->second);
  }

  // The reduce-scatter of unit `gu_index`'s gradients `name`, after the backward so far. It names
  // every rank's param16 partition of the unit: the elements each rank keeps the sum of. It reads
  // the whole bucket (DeepSpeed reduces it at once): it uses every GPU gradient buffer in it, so
  // a bucket larger than the GPU pool is refused when planned.
  int32_t ReduceScatter(const LayerGrads& lg, const std::string& name, int32_t gu_index) {
    const ParamUnit& gu = plan_.units[gu_index];
    TaskSpec rs;
    rs.id = "reducescatter." + name;
    rs.op = Op::kReduceScatter;
    rs.resource = b_.Comm();
    rs.bytes = gu.elements * 2;
    rs.ranks = plan_.ranks;
    rs.deps = res_.last_compute;
    rs.uses = bucket_grads_;
    for (int32_t r = 0; r < plan_.ranks; ++r) {
      rs.tensors.push_back(b_.State(StateKind::kParam16, r, gu.rank_offset, gu.rank_elements, ParamHome(b_, plan_, fo_, r, gu_index)));
    }
    rs.phase = Phase::kBackward;
    rs.layer = lg.layer;
    return b_.Task(std::move(rs));
  }

  // Entry e's reduce-scatter.
  int32_t Reduce(const Entry& e) {
    const int32_t unit = e.head_part ? plan_.tied_unit : e.unit;
    const int32_t rs_task = ReduceScatter(*e.layer, plan_.units[unit].name + (e.head_part ? ".head." : ".") + fo_.tag, unit);
    reductions_.emplace_back(rs_task, e.layer);
    return rs_task;
  }

  // deepspeed_epilogue: task `t` of rank r's epilogue runs after the one before it, on the one
  // thread; returns t.
  int32_t InOrder(int32_t r, int32_t t) {
    if (!in_order_) return t;
    int32_t& last = carry_.epilogue_end[static_cast<size_t>(r)];
    if (last != kNoIndex) b_.task(t).deps.push_back(last);
    last = t;
    return t;
  }

  // The tied head's part of the table's gradient, into the accumulator.
  void IssueHeadPart(LayerGrads& lg, int32_t rs_task) {
    const ParamUnit& tu = plan_.units[plan_.tied_unit];
    for (int32_t r = 0; r < plan_.ranks; ++r) {
      TaskSpec d2h;
      d2h.id = "d2h.grad." + tu.name + ".head." + fo_.tag + ".r" + std::to_string(r);
      d2h.op = Op::kD2H;
      d2h.rank = r;
      d2h.resource = b_.GpuD2H(r);
      d2h.bytes = tu.rank_elements * 2;
      d2h.uses = {carry_.accumulator[r], lg.grad_gpu[r]};
      d2h.tensors = {b_.State(StateKind::kGrad16, r, tu.rank_offset, tu.rank_elements, b_.HostDevice(r))};
      d2h.deps = {rs_task};
      AfterLastContribution(r, plan_.tied_unit, &d2h);
      d2h.phase = Phase::kBackward;
      d2h.layer = lg.layer;
      const int32_t partial = InOrder(r, b_.Task(std::move(d2h)));
      carry_.last_contribution[static_cast<size_t>(r)][plan_.tied_unit] = partial;
      lg.d2h[r].push_back(partial);
      res_.grad_copies[r].push_back(partial);
    }
  }

  // Unit `lu`'s gradients after its reduce-scatter: d2h, and the gradient path.
  void IssueUnit(LayerGrads& lg, int32_t lu, int32_t rs_task) {
    const ParamUnit& gu = plan_.units[lu];
    for (int32_t r = 0; r < plan_.ranks; ++r) {
      const std::string id = gu.name + "." + fo_.tag + ".r" + std::to_string(r);
      // Into the rank's persistent bf16 buffer (kept, or accumulated over micro-steps), else
      // the fp32 partition into pinned staging for the write.
      const bool to_accumulator = !carry_.accumulator.empty();
      const int64_t grad_bytes = gu.rank_elements * (to_accumulator ? 2 : 4);
      const int32_t write_resource =
          !flush_ ? kNoIndex : o_.grad_write_resource_of ? o_.grad_write_resource_of(r, lu) : o_.grad_write_resource[r];
      // Kept in host memory: in the rank's persistent fp32 buffer, never written.
      const bool keep = flush_ && !o_.grad_in_host.empty() && o_.grad_in_host[static_cast<size_t>(lu)];
      const int32_t grad_tensor =
          flush_ ? b_.State(StateKind::kGrad, r, gu.rank_offset, gu.rank_elements, keep ? b_.HostDevice(r) : b_.DeviceOfResource(write_resource))
                : kNoIndex;
      const bool written = flush_ && last_micro_step_ && !keep;
      // In DeepSpeed's order the bucket's writes wait for its swap-out (SwapOut).
      const bool swap_out_later = in_order_ && written;
      int32_t gbuf = to_accumulator ? carry_.accumulator[r] : kNoIndex;
      if (flush_ && last_micro_step_ && keep) gbuf = o_.host_grad_buffer[r];
      else if (written && !swap_out_later) gbuf = b_.Buffer("grad." + id, o_.grad_pool[r], gu.rank_elements * 4);
      TaskSpec d2h;
      d2h.id = "d2h.grad." + id;
      d2h.op = Op::kD2H;
      d2h.rank = r;
      d2h.resource = b_.GpuD2H(r);
      d2h.bytes = grad_bytes;
      if (to_accumulator) d2h.uses = {carry_.accumulator[r]};
      else if (keep) d2h.uses = {gbuf};
      else d2h.allocs = {gbuf};
      d2h.uses.push_back(lg.grad_gpu[r]);
      d2h.tensors = {to_accumulator ? Grad16(r, lu) : grad_tensor};
      d2h.deps = {rs_task};
      AfterLastContribution(r, lu, &d2h);
      if (lu == lg.last_unit) {  // the layer's last d2h frees its GPU gradients
        d2h.frees = {lg.grad_gpu[r]};
        d2h.deps.insert(d2h.deps.end(), lg.d2h[r].begin(), lg.d2h[r].end());
      }
      d2h.phase = Phase::kBackward;
      d2h.layer = gu.layer;
      const int32_t d2h_task = InOrder(r, b_.Task(std::move(d2h)));
      if (lu == lg.last_unit) lg.frees.push_back(d2h_task);
      carry_.last_contribution[static_cast<size_t>(r)][lu] = d2h_task;
      lg.d2h[r].push_back(d2h_task);
      res_.grad_copies[r].push_back(d2h_task);
      res_.grad_ready[r][lu] = d2h_task;
      if (!flush_ || !last_micro_step_) continue;
      if (swap_out_later) {
        Widened w{id, lu, kNoIndex, write_resource, grad_tensor, d2h_task};
        if (o_.device_memory_is_host) {  // widened in the loop, into device (= host) memory
          int32_t& pool = carry_.grad32_pool[static_cast<size_t>(r)];
          if (pool == kNoIndex) pool = b_.Pool("host.grad32.r" + std::to_string(r), b_.Host(r), 0);  // sized at the end
          w.buffer = b_.Buffer("grad32." + id, pool, gu.rank_elements * 4);
          w.after = InOrder(r, Widen(r, lu, id, w.buffer, /*into_kept=*/false, d2h_task));
        }
        widened_[static_cast<size_t>(r)].push_back(w);
        continue;
      }
      // The accumulated partition, widened into the staging buffer (or the kept fp32 buffer).
      const int32_t write_after = to_accumulator ? InOrder(r, Widen(r, lu, id, gbuf, keep, d2h_task)) : d2h_task;
      if (keep) {  // what the step waits for: the widened sums, when there are micro-steps
        if (write_after != d2h_task) res_.grad_writes[r].push_back(write_after);
        res_.grad_ready[r][lu] = write_after;
        continue;
      }
      Write(r, lu, id, gbuf, write_resource, grad_tensor, write_after);
    }
  }

  // Unit lu's bf16 gradient partition of rank r, in host memory.
  int32_t Grad16(int32_t r, int32_t lu) {
    const ParamUnit& gu = plan_.units[lu];
    return b_.State(StateKind::kGrad16, r, gu.rank_offset, gu.rank_elements, b_.HostDevice(r));
  }

  // Unit lu's accumulated bf16 partition widened to fp32 into `out`, which it allocates, or which
  // it writes in place when `into_kept` (the rank's persistent fp32 buffer), after `after`.
  int32_t Widen(int32_t r, int32_t lu, const std::string& id, int32_t out, bool into_kept, int32_t after) {
    const ParamUnit& gu = plan_.units[lu];
    TaskSpec widen;
    widen.id = "convert.grad." + id;
    widen.op = Op::kConvert;
    widen.rank = r;
    widen.kernel = Kernel::kBf16ToFp32;
    widen.resource = b_.Cpu(r);
    widen.bytes = gu.rank_elements * 6;
    widen.ranks = o_.cpu_threads;
    if (into_kept) {
      widen.uses = {carry_.accumulator[r], out};
    } else {
      widen.allocs = {out};
      widen.uses = {carry_.accumulator[r]};
    }
    widen.tensors = {Grad16(r, lu)};
    widen.deps = {after};
    widen.phase = Phase::kBackward;
    widen.layer = gu.layer;
    return b_.Task(std::move(widen));
  }

  // The write of unit lu's fp32 gradient from `gbuf`, which it frees, after `after`.
  void Write(int32_t r, int32_t lu, const std::string& id, int32_t gbuf, int32_t write_resource, int32_t grad_tensor,
             int32_t after) {
    const ParamUnit& gu = plan_.units[lu];
    TaskSpec w;
    w.id = "write.grad." + id;
    w.op = Op::kWrite;
    w.rank = r;
    w.resource = write_resource;
    w.bytes = gu.rank_elements * 4;  // the fp32 gradients
    w.block_bytes = o_.block_bytes;
    w.queue_depth = o_.queue_depth;
    w.uses = {gbuf};
    w.frees = {gbuf};
    w.tensors = {grad_tensor};
    w.deps = {after};
    w.phase = Phase::kBackward;
    w.layer = gu.layer;
    res_.grad_writes[r].push_back(b_.Task(std::move(w)));
    res_.grad_ready[r][lu] = res_.grad_writes[r].back();
  }

  // DeepSpeed's swap-out of the bucket's fp32 gradients (swap_out_gradients, after the loop): each
  // put into the pinned staging, one after the other, then written. On an emulated GPU that is a
  // copy of the widened gradient (host memory); on a GPU, DeepSpeed's 4-byte d2h of it, for which
  // the plan widens the partition buffer's bf16 into the staging. The staging pool bounds how far
  // these run ahead of the writes, as DeepSpeed's swap buffers do.
  void SwapOut() {
    for (int32_t r = 0; r < plan_.ranks; ++r) {
      int64_t held = 0;
      for (const Widened& w : widened_[static_cast<size_t>(r)]) {
        const ParamUnit& gu = plan_.units[w.unit];
        const int32_t staging = b_.Buffer("grad." + w.id, o_.grad_pool[r], gu.rank_elements * 4);
        int32_t staged = kNoIndex;
        if (w.buffer == kNoIndex) {
          staged = InOrder(r, Widen(r, w.unit, w.id, staging, /*into_kept=*/false, w.after));
        } else {
          held += gu.rank_elements * 4;
          TaskSpec copy;
          copy.id = "copy.grad." + w.id;
          copy.op = Op::kConvert;
          copy.kernel = Kernel::kCopy;
          copy.rank = r;
          copy.resource = b_.Cpu(r);
          copy.bytes = gu.rank_elements * 8;  // 4 read and 4 written per element
          copy.ranks = o_.cpu_threads;
          copy.uses = {w.buffer};
          copy.frees = {w.buffer};
          copy.allocs = {staging};
          copy.tensors = {b_.State(StateKind::kGrad, r, gu.rank_offset, gu.rank_elements, b_.HostDevice(r))};
          copy.deps = {w.after};
          copy.phase = Phase::kBackward;
          copy.layer = gu.layer;
          staged = InOrder(r, b_.Task(std::move(copy)));
        }
        Write(r, w.unit, w.id, staging, w.write_resource, w.grad_tensor, staged);
      }
      int64_t& peak = carry_.grad32_peak[static_cast<size_t>(r)];
      peak = std::max(peak, held);
      widened_[static_cast<size_t>(r)].clear();
    }
  }

  ScheduleBuilder& b_;
  const ModelPlan& plan_;
  const PassOptions& o_;
  const FetchOptions& fo_;
  const bool last_micro_step_;
  Carry& carry_;
  PassResult& res_;
  const bool flush_;
  std::deque<LayerGrads> layers_;
  std::vector<Entry> bucket_;
  int64_t bucket_elements_ = 0;
  std::vector<int32_t> bucket_grads_;                               // the bucket's GPU gradients
  std::vector<std::pair<int32_t, const LayerGrads*>> reductions_;  // the bucket's reduce-scatters
  const bool in_order_;                                            // PassOptions::deepspeed_epilogue
  std::vector<std::vector<Widened>> widened_ = std::vector<std::vector<Widened>>(static_cast<size_t>(plan_.ranks));
};

}  // namespace

// PassOptions::max_live_elements: the units gathered over an iteration's passes, in fetch order,
// each with its elements, its GPU admissions, the layer it is gathered for and the layer whose
// compute frees it. Layers are counted in compute order over the passes (positions); a unit
// kept across the forward-backward turn (PassOptions::kept_for_backward) is freed by a backward
// layer, long after the units gathered after it, so the units are freed out of fetch order.
class LiveParameters {
 public:
  LiveParameters(ScheduleBuilder& b, int64_t limit) : b_(b), limit_(limit) {}
  // A unit gathered for the layer being computed: its index, for LayerEnds.
  size_t Gathered(int64_t elements, const std::vector<int32_t>& admit) {
    units_.push_back({elements, admit, static_cast<int64_t>(computes_.size()), -1});
    return units_.size() - 1;
  }
  // The layer being computed ends with `compute` (per rank), which frees `units`.
  void LayerEnds(const std::vector<int32_t>& compute, const std::vector<size_t>& units) {
    for (size_t u : units) units_[u].freed_at = static_cast<int64_t>(computes_.size());
    computes_.push_back(compute);
  }
  // Once every pass is planned (every gathered unit freed): each unit is admitted once the units
  // gathered before it that are still alive hold, with it, at most the limit. Its admission waits
  // for the earliest layer whose compute frees enough of them, and never beyond the layer before
  // its own (DeepSpeed fetches the module it computes whatever the count).
  void Bound() {
    if (limit_ <= 0) return;
    // Elements freed by each layer, summed over layers (a Fenwick tree over positions).
    const size_t n = computes_.size();
    std::vector<int64_t> tree(n + 1, 0);
    int64_t alive = 0;  // elements gathered so far (alive or freed)
    int64_t waited = -1;
    for (const Unit& u : units_) {
      TF_CHECK(u.freed_at >= 0);  // every gathered unit is freed by a compute
      const int64_t need = alive + u.elements - limit_;  // elements that must be freed first
      if (need > 0 && u.gathered_for > 0) {
        int64_t at = FreedBy(tree, need);
        at = std::min(at, u.gathered_for - 1);
        if (at != waited) {  // else the admission before it, which it follows, waits already
          waited = at;
          // Per rank (one all-gather admitting every rank waits for each rank's compute).
          for (size_t r = 0; r < u.admit.size(); ++r) b_.task(u.admit[r]).deps.push_back(computes_[static_cast<size_t>(at)][r]);
        }
      }
      alive += u.elements;
      for (size_t i = static_cast<size_t>(u.freed_at) + 1; i <= n; i += i & (~i + 1)) tree[i] += u.elements;
    }
  }

 private:
  struct Unit {
    int64_t elements;
    std::vector<int32_t> admit;  // per rank
    int64_t gathered_for;        // the position of the layer that first computes it
    int64_t freed_at;            // the position of the layer whose compute frees it
  };
  // The first position by whose compute `need` elements are freed (past the last, when never).
  static int64_t FreedBy(const std::vector<int64_t>& tree, int64_t need) {
    size_t at = 0;
    size_t step = 1;
    while (step * 2 < tree.size()) step *= 2;
    for (; step > 0; step /= 2) {
      if (at + step < tree.size() && tree[at + step] < need) {
        at += step;
        need -= tree[at];
      }
    }
    return static_cast<int64_t>(at);  // positions 0 .. at-1 free less than need; `at` frees enough
  }
  ScheduleBuilder& b_;
  const int64_t limit_;
  std::vector<Unit> units_;
  std::vector<std::vector<int32_t>> computes_;  // per position: the layer's last compute, per rank
};

PassResult TrainingPasses(ScheduleBuilder& b, const ModelPlan& plan, const PassOptions& o) {
  const int32_t ranks = plan.ranks;
  b.StateLayout(plan);
  PassResult res;
  res.last_compute.assign(ranks, kNoIndex);
  res.grad_copies.resize(ranks);
  res.grad_writes.resize(ranks);
  res.grad_ready.assign(ranks, std::vector<int32_t>(plan.units.size(), kNoIndex));
  const int64_t micro_steps = b.scenario().training.gradient_accumulation_steps;
  const bool tied = plan.tied_unit >= 0;
  const int32_t head_layer = plan.units.empty() ? -1 : plan.units.back().layer;
  GradientBucket::Carry carry;
  carry.last_contribution.resize(static_cast<size_t>(ranks));
  if (o.deepspeed_epilogue) {
    carry.grad32_pool.assign(static_cast<size_t>(ranks), kNoIndex);  // created on first use
    carry.grad32_peak.assign(static_cast<size_t>(ranks), 0);
    carry.epilogue_end.assign(static_cast<size_t>(ranks), kNoIndex);
  }
  if (o.gradient_path == GradientPath::kKeepInHost) {
    for (int32_t r = 0; r < ranks; ++r) {
      res.host_grad_buffer.push_back(
          b.Buffer("grad.host.r" + std::to_string(r), o.grad_pool[r], plan.rank_elements * 2, /*persistent=*/true));
    }
    carry.accumulator = res.host_grad_buffer;
  } else if (micro_steps > 1 || tied || o.grad_partition_buffer) {  // several contributions, or DeepSpeed's buffer
    for (int32_t r = 0; r < ranks; ++r) {
      const std::string R = ".r" + std::to_string(r);
      const int32_t pool = b.Pool("host.pinned.grad_accum" + R, b.Host(r), plan.rank_elements * 2);
      carry.accumulator.push_back(b.Buffer("grad.accum" + R, pool, plan.rank_elements * 2, /*persistent=*/true));
    }
  }
  std::vector<int32_t> forward_order(plan.units.size()), backward_order;
  for (size_t i = 0; i < plan.units.size(); ++i) forward_order[i] = static_cast<int32_t>(i);
  backward_order.assign(forward_order.rbegin(), forward_order.rend());
  // The units each forward keeps gathered for its backward, which fetches the others only.
  const auto kept = [&](int32_t u) {
    return !o.kept_for_backward.empty() && o.kept_for_backward[static_cast<size_t>(u)] && !plan.units[static_cast<size_t>(u)].gpu_resident;
  };
  std::vector<int32_t> backward_fetches;
  for (int32_t u : backward_order) {
    if (!kept(u)) backward_fetches.push_back(u);
  }

  int32_t priority_base = 0;
  TF_CHECK(o.fetch.slot_ring == 0 || o.fetch.slot_ring >= o.fetch.coupled_reads);  // else a dep cycle
  // Per pinned pool, in fetch order: (read, the all-gather that frees its slot).
  std::map<int32_t, std::vector<std::pair<int32_t, int32_t>>> staged;
  std::vector<int32_t> last_h2d;  // per rank, over every pass: h2d copies in fetch order
  LiveParameters live(b, o.max_live_elements);
  for (int64_t m = 0; m < micro_steps; ++m) {
    const int32_t first_task = b.task_count();
    const bool last_micro_step = m + 1 == micro_steps;
    // The units this micro-step's forward keeps gathered: per rank their gathered buffers and
    // partitions, and their index in `live`.
    struct Held {
      std::vector<int32_t> buffer, tensor;
      size_t live = 0;
    };
    std::map<int32_t, Held> held;
    for (int pass = 0; pass < 2; ++pass) {
      const bool fwd = pass == 0;
      FetchOptions fo = o.fetch;
      fo.phase = fwd ? Phase::kForward : Phase::kBackward;
      fo.tag = (fwd ? "f" : "b") + std::to_string(m);
      fo.priority_base = priority_base;
      std::vector<FetchedUnit> fetched = FetchUnits(b, plan, fwd ? forward_order : backward_fetches, fo, &last_h2d);
      if (o.chain_passes && !fetched.empty() && !res.gathers.empty()) {
        b.task(fetched.front().allgather).deps.push_back(res.gathers.back());
      }
      priority_base += static_cast<int32_t>(fetched.size());
      for (const FetchedUnit& f : fetched) {
        if (m == 0 && fwd) res.first_forward_reads += f.reads.size();
        res.reads.insert(res.reads.end(), f.reads.begin(), f.reads.end());
        for (size_t r = 0; r < f.reads.size(); ++r) {
          res.read_rank_unit.emplace_back(static_cast<int32_t>(r), f.unit);
          const int32_t rank = static_cast<int32_t>(r);
          staged[fo.slot_pool_of ? fo.slot_pool_of(rank, f.unit) : fo.slot_pool[r]].emplace_back(f.reads[r], f.allgather);
        }
        res.gathers.push_back(f.allgather);
        if (fo.InHost(f.unit)) res.host_fetches.insert(res.host_fetches.end(), f.admit.begin(), f.admit.end());
      }
      // Every unit is computed, GPU-resident ones too. A layer's gradients are final only after
      // the backward of its last unit in pass order (activation checkpointing recomputes the
      // whole layer, and the real executor computes a layer at once), so the reduce-scatters
      // of a layer's units follow that compute.
      std::vector<int32_t> fetched_of(plan.units.size(), -1);
      for (size_t i = 0; i < fetched.size(); ++i) fetched_of[fetched[i].unit] = static_cast<int32_t>(i);
      const std::vector<int32_t>& order = fwd ? forward_order : backward_order;
      std::vector<int32_t> layer_units;
      // The executor computes a layer at once, at the layer's last compute task of the pass (the
      // one where the layer ends): that task reads every gathered buffer of the layer and frees
      // them (per rank, those of the layer's units so far), except, in a forward, those of the
      // units kept for the backward, whose backward frees them instead. In a backward pass it
      // writes the layer's fp32 gradients into a GPU buffer, first in its uses, which the layer's
      // reduce-scatters and d2h copies read and its last d2h frees. That buffer is allocated by
      // the last gathered-buffer admission at or before the layer in the pass's fetch order, so
      // the GPU pool admits everything in fetch order and prefetched units never hold the room a
      // compute still needs (a pool smaller than a layer's working set is still a deadlock,
      // reported with the pool). Without any admission before it in the pass (every unit so far
      // GPU-resident or kept from the forward), the compute allocates it.
      std::vector<int32_t> last_admit(static_cast<size_t>(ranks), kNoIndex);
      std::vector<std::vector<int32_t>> layer_gathered(ranks), layer_kept(ranks);
      std::vector<size_t> layer_live;  // the `live` units the layer's compute frees
      GradientBucket gradients(b, plan, o, fo, last_micro_step, &carry, &res);
      for (size_t pos = 0; pos < order.size(); ++pos) {
        const int32_t u = order[pos];
        const ParamUnit& unit = plan.units[u];
        const FetchedUnit* f = fetched_of[u] >= 0 ? &fetched[fetched_of[u]] : nullptr;
        const bool layer_ends = pos + 1 == order.size() || plan.units[order[pos + 1]].layer != unit.layer;
        layer_units.push_back(u);
        const bool keep = fwd && kept(u);
        const auto from_forward = fwd ? held.end() : held.find(u);
        if (f != nullptr) {
          const size_t index = live.Gathered(unit.elements, f->admit);
          if (keep) held[u] = {f->gathered_buffer, f->param_tensor, index};
          else layer_live.push_back(index);
        } else if (from_forward != held.end()) {
          layer_live.push_back(from_forward->second.live);
        }
        int64_t layer_elements = 0;
        for (int32_t lu : layer_units) layer_elements += plan.units[lu].elements;
        // The tied head computes with the embedding table too, and its backward writes the
        // table's gradient after the layer's own.
        const bool tied_head = tied && layer_ends && unit.layer == head_layer;
        if (tied_head && !fwd) layer_elements += plan.units[plan.tied_unit].elements;
        std::vector<int32_t> grad_gpu(ranks, kNoIndex);
        for (int32_t r = 0; r < ranks; ++r) {
          TaskSpec c;
          c.id = std::string(fwd ? "fwd." : "bwd.") + unit.name + "." + fo.tag.substr(1) + ".r" + std::to_string(r);
          c.op = Op::kCompute;
          c.rank = r;
          c.kernel = fwd ? Kernel::kForward : Kernel::kBackward;
          c.resource = b.GpuCompute(r);
          c.flops = ComputeTaskFlops(unit, fwd);
          c.bytes = ComputeTaskBytes(unit, fwd);
          if (f != nullptr) {
            c.uses = {f->gathered_buffer[r]};
            c.deps = {f->allgather};
            c.tensors = {f->param_tensor[r]};
            if (f->gathered_buffer[r] != kNoIndex) (keep ? layer_kept : layer_gathered)[r].push_back(f->gathered_buffer[r]);
            last_admit[r] = f->admit[r];
          } else if (from_forward != held.end()) {  // gathered by the forward, kept
            c.uses = {from_forward->second.buffer[r]};
            c.tensors = {from_forward->second.tensor[r]};
            layer_gathered[r].push_back(from_forward->second.buffer[r]);
          } else {
            c.tensors = {b.State(StateKind::kParam16, r, unit.rank_offset, unit.rank_elements, ParamHome(b, plan, fo, r, u))};
          }
          if (layer_ends) {
            c.uses = layer_gathered[r];
            c.uses.insert(c.uses.end(), layer_kept[r].begin(), layer_kept[r].end());
            c.frees = std::move(layer_gathered[r]);
            layer_gathered[r].clear();
            layer_kept[r].clear();
            if (!fwd) {
              grad_gpu[r] = b.Buffer("grad.gpu.l" + std::to_string(unit.layer) + "." + fo.tag + ".r" + std::to_string(r),
                                     b.GpuPool(r), layer_elements * 4);
              c.uses.insert(c.uses.begin(), grad_gpu[r]);
              if (last_admit[r] != kNoIndex) b.task(last_admit[r]).allocs.push_back(grad_gpu[r]);
              else c.allocs = {grad_gpu[r]};
            }
          }
          if (tied_head) {
            const ParamUnit& tu = plan.units[plan.tied_unit];
            c.tensors.push_back(b.State(StateKind::kParam16, r, tu.rank_offset, tu.rank_elements, b.GpuDevice(r)));
          }
          if (res.last_compute[r] != kNoIndex) c.deps.push_back(res.last_compute[r]);
          if (!carry.block.empty() && carry.block[r] != kNoIndex) c.deps.push_back(std::exchange(carry.block[r], kNoIndex));
          c.phase = fo.phase;
          c.layer = unit.layer;
          res.last_compute[r] = b.Task(std::move(c));
          if ((f == nullptr && from_forward == held.end()) || tied_head) res.resident_computes.push_back(res.last_compute[r]);
        }
        if (layer_ends) {
          live.LayerEnds(res.last_compute, layer_live);
          layer_live.clear();
        }
        if (fwd || !layer_ends) {
          if (layer_ends) layer_units.clear();
          continue;
        }
        gradients.AddLayer(unit.layer, grad_gpu, layer_units, tied_head);
        layer_units.clear();
      }
      if (!fwd) gradients.Flush();  // what is left: DeepSpeed's epilogue
    }
    for (int32_t t = first_task; t < b.task_count(); ++t) b.task(t).micro_step = static_cast<int32_t>(m);
  }
  live.Bound();
  // The widened gradients' pools hold the largest bucket's.
  for (size_t r = 0; r < carry.grad32_pool.size(); ++r) {
    if (carry.grad32_pool[r] != kNoIndex) b.pool(carry.grad32_pool[r]).capacity_bytes = carry.grad32_peak[r];
  }
  // The slot ring (FetchOptions::slot_ring): a read reuses the slot that the all-gather of the
  // read slot_ring earlier in its pool frees, in this iteration or at the end of the previous.
  const size_t ring = static_cast<size_t>(std::max(0, o.fetch.slot_ring));
  for (const auto& pool_reads : staged) {
    const auto& reads = pool_reads.second;
    const size_t n = reads.size();
    for (size_t k = 0; ring > 0 && k < n; ++k) {
      TaskSpec& read = b.task(reads[k].first);
      if (k >= ring) {
        read.deps.push_back(reads[k - ring].second);
      } else if (k + n >= ring) {
        read.carried.push_back({reads[k + n - ring].second, 1});
      }
    }
  }
  return res;
}

int32_t PinnedPool(ScheduleBuilder& b, int32_t rank, const std::string& name, int64_t capacity_bytes, bool rounding) {
  int64_t rounded = capacity_bytes;
  if (rounding && capacity_bytes > 0) {
    rounded = 1;
    while (rounded < capacity_bytes) rounded <<= 1;
  }
  const int32_t pool = b.Pool(name, b.Host(rank), rounded);
  if (rounded > capacity_bytes) b.Buffer(name + ".pad", pool, rounded - capacity_bytes, /*persistent=*/true);
  return pool;
}

Status UnfusedOverflowCheckNeedsFp16(const Scenario& s, const std::string& knob) {
  if (s.training.dtype == "fp16") return Status::Ok();
  return InvalidArgument(knob + ": DeepSpeed's unfused overflow check runs only in fp16 training (stage 3's has_overflow), "
                         "and training.dtype is " + s.training.dtype);
}

int32_t GradientNorm(ScheduleBuilder& b, const ModelPlan& plan, const std::vector<std::vector<int32_t>>& deps,
                     int32_t threads, int64_t host_bytes_per_element, const std::vector<int32_t>& temporaries) {
  std::vector<int32_t> norms;
  for (int32_t r = 0; r < plan.ranks; ++r) {
    TaskSpec norm;
    norm.id = "step.norm.r" + std::to_string(r);
    norm.op = Op::kConvert;
    norm.rank = r;
    norm.kernel = Kernel::kOverflowCheckAndNorm;
    norm.resource = b.Cpu(r);
    norm.bytes = plan.rank_elements * host_bytes_per_element;
    norm.ranks = threads;
    norm.deps = deps[r];
    if (!temporaries.empty()) {
      norm.allocs = {temporaries[r]};
      norm.frees = {temporaries[r]};
    }
    norm.phase = Phase::kStep;
    norms.push_back(b.Task(std::move(norm)));
  }
  TaskSpec norm_reduce;
  norm_reduce.id = "step.norm.allreduce";
  norm_reduce.op = Op::kAllReduce;
  norm_reduce.resource = b.Comm();
  norm_reduce.bytes = 8;
  norm_reduce.ranks = plan.ranks;
  norm_reduce.deps = norms;
  norm_reduce.phase = Phase::kStep;
  return b.Task(std::move(norm_reduce));
}

int32_t GatherResident(ScheduleBuilder& b, const ModelPlan& plan, const std::vector<int32_t>& refreshes) {
  if (plan.ranks < 2 || refreshes.empty()) return kNoIndex;
  TaskSpec gather;
  gather.id = "allgather.p16res";
  gather.op = Op::kAllGather;
  gather.resource = b.Comm();
  gather.ranks = plan.ranks;
  for (int32_t r = 0; r < plan.ranks; ++r) {
    for (const ParamUnit& u : plan.units) {
      if (!u.gpu_resident) continue;
      gather.tensors.push_back(b.State(StateKind::kParam16, r, u.rank_offset, u.rank_elements, b.GpuDevice(r)));
      gather.bytes += u.rank_elements * 2;
    }
  }
  if (gather.tensors.empty()) return kNoIndex;
  gather.deps = refreshes;
  gather.phase = Phase::kStep;
  return b.Task(std::move(gather));
}

std::vector<int32_t> SubGroupsOfUnit(const ModelPlan& plan, int32_t unit) {
  const ParamUnit& u = plan.units[unit];
  std::vector<int32_t> out;
  if (u.rank_elements == 0) return out;
  const int64_t begin = u.rank_offset, end = u.rank_offset + u.rank_elements;
  for (size_t g = 0; g < plan.subgroups.size(); ++g) {
    const SubGroup& sg = plan.subgroups[g];
    if (sg.begin < end && begin < sg.begin + sg.elements) out.push_back(static_cast<int32_t>(g));
  }
  return out;
}

std::vector<std::vector<int32_t>> SubGroupGradientDeps(const ModelPlan& plan, const std::vector<int32_t>& grad_ready) {
  std::vector<std::vector<int32_t>> deps(plan.subgroups.size());
  for (size_t u = 0; u < plan.units.size(); ++u) {
    if (grad_ready[u] == kNoIndex) continue;
    for (int32_t g : SubGroupsOfUnit(plan, static_cast<int32_t>(u))) deps[g].push_back(grad_ready[u]);
  }
  return deps;
}

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
  for (size_t i = 0; i < plan.units.size(); ++i) {
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
int32_t ResidentRefresh(ScheduleBuilder& b, int32_t rank, const std::string& id, int32_t buffer,
                        const std::vector<int32_t>& tensors, int32_t after) {
  TaskSpec h2d;
  h2d.id = id;
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

}  // namespace

SweepResult OptimizerSweep(ScheduleBuilder& b, const ModelPlan& plan, const SweepOptions& o) {
  const int32_t nsub = static_cast<int32_t>(plan.subgroups.size());
  TF_CHECK(!o.read_ahead || o.pipeline_read);
  b.StateLayout(plan);
  const int32_t host = b.HostDevice(o.rank);
  const int32_t gpu = b.GpuDevice(o.rank);
  auto states_at = [&](int64_t begin, int64_t n, int32_t device) {
    return std::vector<int32_t>{b.State(StateKind::kMaster, o.rank, begin, n, device), b.State(StateKind::kAdamM, o.rank, begin, n, device),
                                b.State(StateKind::kAdamV, o.rank, begin, n, device)};
  };
  // The updated bf16 parameters [begin, begin + n): offloaded runs to `device`, resident runs
  // to the GPU, runs kept in host memory to the host. Returns (offloaded, resident, host).
  struct P16Tensors {
    std::vector<int32_t> offloaded, resident, in_host;
  };
  auto p16_tensors = [&](int64_t begin, int64_t n, int32_t device) {
    P16Tensors t;
    for (const ParamRun& run : ParamRuns(plan, o.param_in_host, begin, n)) {
      const int32_t home = run.home == ParamHomeKind::kGpu ? gpu : run.home == ParamHomeKind::kHost ? host : device;
      const int32_t tensor = b.State(StateKind::kParam16, o.rank, run.begin, run.elements, home);
      (run.home == ParamHomeKind::kGpu ? t.resident : run.home == ParamHomeKind::kHost ? t.in_host : t.offloaded).push_back(tensor);
    }
    return t;
  };
  auto bytes_of = [&](const std::vector<int32_t>& tensors) {
    int64_t sum = 0;
    for (int32_t t : tensors) sum += b.tensor_bytes(t);
    return sum;
  };
  const std::string R = ".r" + std::to_string(o.rank);
  SweepResult res;
  res.read_states.assign(nsub, kNoIndex);
  res.write_states.assign(nsub, kNoIndex);
  res.param_done.assign(nsub, kNoIndex);
  res.adam.assign(nsub, kNoIndex);
  auto is_cached = [&](int32_t g) { return !o.cached.empty() && o.cached[g]; };
  auto io = [&](TaskSpec& t) {
    t.block_bytes = o.block_bytes;
    t.queue_depth = o.queue_depth;
  };
  std::vector<int32_t> prev_done = o.first_deps;
  int32_t prev_read_end = kNoIndex, prev_param_write = kNoIndex;
  // Read-ahead: the first states' read, and the last task in update order that takes a buffer
  // from the optimizer pool (a read, or a cached sub-group's gradient task).
  int32_t first_read = kNoIndex, last_take = kNoIndex;
  std::vector<int32_t> cached_writes;  // (g, write) of cached sub-groups still written back
  for (size_t pos = 0; pos < o.order.size(); ++pos) {
    const int32_t g = o.order[pos];
    const int64_t n = plan.subgroups[g].elements;
    const int64_t first = plan.subgroups[g].begin;
    const std::string G = ".sg" + std::to_string(g) + R;
    const bool cached = is_cached(g);
    const std::vector<int32_t> home_states =
        cached ? states_at(first, n, host) : states_at(first, n, b.DeviceOfResource(o.read_resource[g]));
    const int32_t states = cached ? b.Buffer("states" + G, o.cache_pool, 3 * n * 4, /*persistent=*/true)
                                  : b.Buffer("states" + G, o.opt_pool, 3 * n * 4);
    const bool grad_host32 = !o.grads_in_host32.empty() && o.grads_in_host32[g];
    const int32_t grad = grad_host32 ? o.host_grad32_buffer : b.Buffer("gradin" + G, o.opt_pool, n * 4);
    // Serial: after the previous sub-group is done. Pipelined: as soon as the previous
    // sub-group's reads are done. `gate` is what the update itself waits for (the global check,
    // flushed gradients, the sub-group's gradients final); without read-ahead the reads wait
    // for it too, with it only the gradient's task and Adam do.
    std::vector<int32_t> chain, gate;
    if (o.pipeline_read && prev_read_end != kNoIndex) {
      chain = {prev_read_end};
      gate = o.pipelined_read_deps;
    } else if (o.read_ahead) {
      gate = prev_done;  // the first read: nothing before it in this iteration
    } else {
      chain = prev_done;
    }
    if (o.read_ahead && pos > 0) gate.insert(gate.end(), o.first_deps.begin(), o.first_deps.end());
    if (!o.ready_deps.empty()) gate.insert(gate.end(), o.ready_deps[g].begin(), o.ready_deps[g].end());
    std::vector<int32_t> read_deps = chain;
    if (!o.read_ahead) read_deps.insert(read_deps.end(), gate.begin(), gate.end());
    // What the gradient's task (or Adam, when the gradient is in place) waits for beyond its read.
    const std::vector<int32_t> update_gate = o.read_ahead ? gate : std::vector<int32_t>{};
    auto with_gate = [&](std::vector<int32_t> deps) {
      deps.insert(deps.end(), update_gate.begin(), update_gate.end());
      return deps;
    };
    int32_t read_states = kNoIndex;
    if (!cached) {
      TaskSpec rs;
      rs.id = "read.states" + G;
      rs.op = Op::kRead;
      rs.rank = o.rank;
      rs.resource = o.read_resource[g];
      rs.bytes = 3 * n * 4;
      rs.tensors = home_states;
      io(rs);
      // With gradients in host memory (or read ahead) the states' read also reserves the fp32
      // gradient buffer, so that read-ahead can never take the space a gradient needs (deadlock).
      const bool reserve_grad = !grad_host32 && (!o.grads_on_nvme || o.read_ahead);
      rs.allocs = reserve_grad ? std::vector<int32_t>{states, grad} : std::vector<int32_t>{states};
      rs.phase = Phase::kStep;
      rs.priority = static_cast<int32_t>(pos);
      rs.deps = read_deps;
      read_states = b.Task(std::move(rs));
      res.read_states[g] = read_states;
      if (first_read == kNoIndex) first_read = read_states;
      last_take = read_states;
    }
    int32_t grad_task;  // after which the sub-group's fp32 gradients are in `grad`
    if (grad_host32) {
      grad_task = read_states;  // already there: the update waits for its states only
      if (!cached) prev_read_end = read_states;
    } else if (o.grads_on_nvme) {
      TaskSpec rg;
      rg.id = "read.grad" + G;
      rg.op = Op::kRead;
      rg.rank = o.rank;
      rg.resource = o.read_resource[g];
      rg.bytes = n * 4;
      rg.tensors = {b.State(StateKind::kGrad, o.rank, first, n, b.DeviceOfResource(o.read_resource[g]))};
      io(rg);
      if (cached || !o.read_ahead) {
        rg.allocs = {grad};
      } else {
        rg.uses = {grad};  // reserved by the states' read
      }
      rg.deps = with_gate(cached ? read_deps : std::vector<int32_t>{read_states});
      rg.phase = Phase::kStep;
      rg.priority = static_cast<int32_t>(pos);
      grad_task = b.Task(std::move(rg));
      if (cached) last_take = grad_task;
      // Read-ahead chains the states' reads only: the gradient's read waits for the gate.
      prev_read_end = o.read_ahead && !cached ? read_states : grad_task;
    } else {
      TaskSpec cg = CpuStepTask(b, "convert.grad" + G, Op::kConvert, Kernel::kBf16ToFp32, o.rank, o.threads);
      cg.bytes = n * 6;  // reads bf16, writes fp32
      if (cached) cg.allocs = {grad};
      cg.uses = {o.host_grad_buffer};
      if (!cached) cg.uses.push_back(grad);  // reserved by the states' read
      cg.tensors = {b.State(StateKind::kGrad16, o.rank, first, n, host)};
      cg.deps = with_gate(cached ? read_deps : std::vector<int32_t>{read_states});
      grad_task = b.Task(std::move(cg));
      if (cached) last_take = grad_task;
      if (!cached) prev_read_end = read_states;
    }
    TaskSpec adam = CpuStepTask(b, "adam" + G, Op::kOptimizer, Kernel::kAdam, o.rank, o.threads);
    adam.bytes = n * 4;
    adam.uses = {states, grad};
    if (!grad_host32) adam.frees = {grad};
    adam.tensors = home_states;
    adam.deps = grad_task != kNoIndex ? std::vector<int32_t>{grad_task} : read_deps;
    if (grad_host32) adam.deps = with_gate(adam.deps);
    if (o.adam_waits_param_write && prev_param_write != kNoIndex) adam.deps.push_back(prev_param_write);
    const int32_t adam_task = b.Task(std::move(adam));
    res.adam[g] = adam_task;
    int32_t param_done = kNoIndex;
    int32_t last_convert = kNoIndex;  // the conversions read the master weights from `states`
    if (o.param_path == ParamUpdatePath::kChunkedBlocking) {
      // Parameters kept in host memory are updated in place: one conversion into the rank's
      // flat buffer (DeepSpeed copies the sub-group's fp32 weights into its CPU flat buffer, or
      // each such parameter's partition).
      const P16Tensors all = p16_tensors(first, n, b.DeviceOfResource(o.param_write_resource[g]));
      int32_t host_convert = kNoIndex;
      if (!all.in_host.empty()) {
        TaskSpec conv = CpuStepTask(b, "convert.p16" + G, Op::kConvert, Kernel::kFp32ToBf16, o.rank, o.threads);
        for (int32_t t : all.in_host) conv.bytes += b.tensor_bytes(t) * 2;  // the fp32 weights read
        conv.uses = {states, o.host_param_buffer};
        conv.tensors = all.in_host;
        conv.deps = {adam_task};
        host_convert = last_convert = b.Task(std::move(conv));
      }
      // Then the rest, fp32 -> fp16 through the parameter swapper's slots, each chunk on a disk
      // written with a blocking wait, resident ones copied to the GPU from the slot (DeepSpeed's
      // _partitioned_params_swap_out copies the parameters it keeps, then swaps out the others).
      std::vector<int32_t> chunk_ends;
      if (host_convert != kNoIndex) chunk_ends.push_back(host_convert);
      const int64_t step = IoAlignedStep(o.chunk_elements);
      for (int64_t c0 = 0, c = 0; c0 < n; c0 += step, ++c) {
        const int64_t chunk = std::min(step, n - c0);
        const std::string C = G + ".c" + std::to_string(c);
        const P16Tensors part = p16_tensors(first + c0, chunk, b.DeviceOfResource(o.param_write_resource[g]));
        if (part.offloaded.empty() && part.resident.empty()) continue;
        const int32_t slot = b.Buffer("p16" + C, o.param_pool, o.chunk_elements * 2);
        TaskSpec conv = CpuStepTask(b, "convert.p16" + C, Op::kConvert, Kernel::kFp32ToBf16, o.rank, o.threads);
        conv.bytes = (bytes_of(part.offloaded) + bytes_of(part.resident)) * 2;
        conv.allocs = {slot};
        conv.uses = {states};
        conv.tensors = part.offloaded;
        conv.tensors.insert(conv.tensors.end(), part.resident.begin(), part.resident.end());
        conv.deps = {adam_task};
        if (!chunk_ends.empty()) conv.deps.push_back(chunk_ends.back());
        const int32_t conv_task = b.Task(std::move(conv));
        last_convert = conv_task;
        int32_t refresh = kNoIndex;
        if (!part.resident.empty()) {
          refresh = ResidentRefresh(b, o.rank, "h2d.p16res" + C, slot, part.resident, conv_task);
          res.resident_refreshes.push_back(refresh);
        }
        if (part.offloaded.empty()) {  // nothing to write: the refresh ends the chunk
          b.task(refresh).frees = {slot};
          chunk_ends.push_back(refresh);
          continue;
        }
        TaskSpec pw;
        pw.id = "write.p16" + C;
        pw.op = Op::kWrite;
        pw.rank = o.rank;
        pw.resource = o.param_write_resource[g];
        pw.bytes = bytes_of(part.offloaded);
        io(pw);
        pw.uses = {slot};
        pw.frees = {slot};
        pw.tensors = part.offloaded;
        pw.deps = {conv_task};
        if (refresh != kNoIndex) pw.deps.push_back(refresh);
        pw.phase = Phase::kStep;
        chunk_ends.push_back(b.Task(std::move(pw)));
      }
      param_done = chunk_ends.back();
    } else {
      const int32_t p16 = b.Buffer("p16" + G, o.param_pool, n * 2);  // exact size
      TaskSpec conv = CpuStepTask(b, "convert.p16" + G, Op::kConvert, Kernel::kFp32ToBf16, o.rank, o.threads);
      conv.bytes = n * 4;
      conv.allocs = {p16};
      conv.uses = {states};
      const bool to_gpu = o.param_path == ParamUpdatePath::kToGpu;
      const P16Tensors split = p16_tensors(first, n, to_gpu ? gpu : b.DeviceOfResource(o.param_write_resource[g]));
      TF_CHECK(split.in_host.empty());  // parameters kept in host memory: kChunkedBlocking only
      const std::vector<int32_t>& offloaded = split.offloaded;
      const std::vector<int32_t>& resident = split.resident;
      std::vector<int32_t> converted = offloaded;
      converted.insert(converted.end(), resident.begin(), resident.end());
      conv.tensors = converted;
      conv.deps = {adam_task};
      const int32_t conv_task = b.Task(std::move(conv));
      last_convert = conv_task;
      TaskSpec out;
      out.uses = {p16};
      out.frees = {p16};
      out.deps = {conv_task};
      out.phase = Phase::kStep;
      if (!to_gpu) {
        out.id = "write.p16" + G;
        out.op = Op::kWrite;
        out.rank = o.rank;
        out.resource = o.param_write_resource[g];
        out.bytes = bytes_of(offloaded);
        out.tensors = offloaded;
        io(out);
        out.priority = o.isolate_reads_first ? nsub + static_cast<int32_t>(pos) : 0;
        if (!resident.empty()) {
          const int32_t refresh = ResidentRefresh(b, o.rank, "h2d.p16res" + G, p16, resident, conv_task);
          res.resident_refreshes.push_back(refresh);
          out.deps.push_back(refresh);
        }
      } else {
        out.id = "h2d.p16" + G;
        out.op = Op::kH2D;
        out.rank = o.rank;
        out.resource = b.GpuH2D(o.rank);
        out.bytes = n * 2;
        out.tensors = std::move(converted);  // every converted range: all of them live on the GPU
      }
      param_done = b.Task(std::move(out));
      if (to_gpu) res.resident_refreshes.push_back(param_done);
    }
    res.param_done[g] = param_done;
    int32_t write_states = kNoIndex;
    if (!cached || o.write_cached) {
      TaskSpec ws;
      ws.id = "write.states" + G;
      ws.op = Op::kWrite;
      ws.rank = o.rank;
      ws.resource = o.write_resource[g];
      ws.bytes = 3 * n * 4;
      ws.tensors = states_at(first, n, b.DeviceOfResource(o.write_resource[g]));
      io(ws);
      ws.uses = {states};
      if (!cached) ws.frees = {states};
      ws.deps = {o.states_after_params ? param_done : last_convert};
      ws.phase = Phase::kStep;
      // Isolation: among ready I/O, every read of the sweep goes before any write.
      ws.priority = o.isolate_reads_first ? nsub + static_cast<int32_t>(pos) : 0;
      write_states = b.Task(std::move(ws));
      res.write_states[g] = write_states;
      // The next iteration's read of the same states waits for this write: with semi-async
      // write-back instead of the step, and with read-ahead because the read no longer waits for
      // anything of its own iteration that comes after the step.
      if ((o.semi_async_writes || o.read_ahead) && read_states != kNoIndex) b.task(read_states).carried.push_back({write_states, 1});
      // A cached sub-group's states are updated in place: the next update waits for the write.
      if (cached) b.task(adam_task).carried.push_back({write_states, 1});
    }
    prev_read_end = prev_read_end == kNoIndex ? grad_task : prev_read_end;
    prev_param_write = param_done;
    const int32_t done = write_states != kNoIndex ? write_states : param_done;
    prev_done = o.pipeline_write ? std::vector<int32_t>{param_done} : std::vector<int32_t>{done};
    if (write_states != kNoIndex && !o.semi_async_writes) res.tails.push_back(write_states);
    res.tails.push_back(param_done);
  }
  // Read-ahead: the next iteration's first read waits until this one's last buffer of the pool
  // is taken, so that the pool is taken in update order across iterations (a next iteration's
  // read holding the buffers this iteration's last sub-groups need would deadlock: their update
  // comes before the next iteration's gradients).
  if (o.read_ahead && first_read != kNoIndex && first_read != last_take) {
    b.task(first_read).carried.push_back({last_take, 1});
  }
  return res;
}

}  // namespace tierflow::policies
