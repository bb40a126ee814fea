// The ranks of a run (ranks.h).
#include "ranks.h"

#include <algorithm>

#include "tierflow/real/adamw.h"
#include <string>

namespace tierflow::real::exec {

namespace {
bool Everyone(const TaskSpec& t) { return IsCollectiveOp(t.op) || t.op == Op::kBarrier; }
}  // namespace

std::vector<int32_t> RankPartOrder(const Schedule& s, int32_t rank) {
  std::vector<int32_t> part_index(s.tasks().size(), kNoIndex);
  int32_t kept = 0;
  for (size_t i = 0; i < s.tasks().size(); ++i) {
    if (Everyone(s.tasks()[i]) || s.tasks()[i].rank == rank) part_index[i] = kept++;  // RankPart keeps them in this order
  }
  std::vector<int32_t> order;
  order.reserve(static_cast<size_t>(kept));
  for (const int32_t t : s.TopologicalOrder()) {
    if (part_index[static_cast<size_t>(t)] != kNoIndex) order.push_back(part_index[static_cast<size_t>(t)]);
  }
  return order;
}

std::vector<std::string> NodeSharedResources(const Schedule& s) {
  constexpr int32_t kNone = INT32_MIN;
  std::vector<int32_t> first(s.resources().size(), kNone);
  std::vector<uint8_t> shared(s.resources().size(), 0);
  for (const TaskSpec& t : s.tasks()) {
    if (Everyone(t) || t.resource == kNoIndex) continue;
    int32_t& seen = first[static_cast<size_t>(t.resource)];
    if (seen == kNone) seen = t.rank;
    else if (seen != t.rank) shared[static_cast<size_t>(t.resource)] = 1;
  }
  std::vector<std::string> names;
  for (size_t r = 0; r < shared.size(); ++r) {
    if (shared[r]) names.push_back(s.resources()[r].name);
  }
  return names;
}

StatusOr<Schedule> RankPart(const Schedule& s, int32_t rank) {
  const size_t nt = s.tasks().size();
  auto everyone = Everyone;
  std::vector<uint8_t> keep_task(nt, 0), keep_buffer(s.buffers().size(), 0), keep_pool(s.pools().size(), 0),
      keep_resource(s.resources().size(), 0), comm_resource(s.resources().size(), 0);
  for (size_t i = 0; i < nt; ++i) {
    const TaskSpec& t = s.tasks()[i];
    if (everyone(t)) {
      keep_task[i] = 1;
      if (t.resource != kNoIndex) comm_resource[static_cast<size_t>(t.resource)] = 1;
      continue;
    }
    if (t.rank == kEveryRank) {
      return InvalidArgument("task '" + t.id + "' says no rank, in a schedule of several ranks: plan it again with this tierflow (every task but a collective or barrier names the rank that runs it)");
    }
    if (t.rank != rank) continue;
    keep_task[i] = 1;
    for (const auto* list : {&t.allocs, &t.uses, &t.frees}) {
      for (int32_t b : *list) keep_buffer[static_cast<size_t>(b)] = 1;
    }
  }
  for (size_t b = 0; b < s.buffers().size(); ++b) {
    if (keep_buffer[b]) keep_pool[static_cast<size_t>(s.buffers()[b].pool)] = 1;
  }
  for (size_t b = 0; b < s.buffers().size(); ++b) {
    if (s.buffers()[b].persistent && keep_pool[static_cast<size_t>(s.buffers()[b].pool)]) keep_buffer[b] = 1;
  }
  for (size_t i = 0; i < nt; ++i) {
    if (keep_task[i] && s.tasks()[i].resource != kNoIndex) keep_resource[static_cast<size_t>(s.tasks()[i].resource)] = 1;
  }
  int32_t collectives = 0;
  for (const TaskSpec& t : s.tasks()) collectives += IsCollectiveOp(t.op) ? 1 : 0;

  Schedule part;
  part.name = s.name;
  part.iteration_window = s.iteration_window;
  part.meta = s.meta;
  part.sections = s.sections;
  for (const DeviceSpec& d : s.devices()) part.AddDevice(d);
  std::vector<int32_t> resource(s.resources().size(), kNoIndex), pool(s.pools().size(), kNoIndex),
      buffer(s.buffers().size(), kNoIndex), tensor(s.tensors().size(), kNoIndex), task(nt, kNoIndex);
  for (size_t r = 0; r < s.resources().size(); ++r) {
    if (!keep_resource[r]) continue;
    ResourceSpec spec = s.resources()[r];
    if (comm_resource[r]) spec.concurrency = std::max(spec.concurrency, std::max(1, collectives) * std::max(1, s.iteration_window));
    resource[r] = part.AddResource(spec);
  }
  for (size_t p = 0; p < s.pools().size(); ++p) {
    if (keep_pool[p]) pool[p] = part.AddPool(s.pools()[p]);
  }
  for (size_t b = 0; b < s.buffers().size(); ++b) {
    if (!keep_buffer[b]) continue;
    BufferSpec spec = s.buffers()[b];
    spec.pool = pool[static_cast<size_t>(spec.pool)];
    buffer[b] = part.AddBuffer(spec);
  }
  for (size_t x = 0; x < s.tensors().size(); ++x) {
    if (s.tensors()[x].rank == rank) tensor[x] = part.AddTensor(s.tensors()[x]);
  }
  int32_t next = 0;
  for (size_t i = 0; i < nt; ++i) {
    if (keep_task[i]) task[i] = next++;
  }
  auto remap = [](const IndexList& from, const std::vector<int32_t>& index) {
    IndexList out;
    for (int32_t v : from) {
      if (index[static_cast<size_t>(v)] != kNoIndex) out.push_back(index[static_cast<size_t>(v)]);
    }
    return out;
  };
  for (size_t i = 0; i < nt; ++i) {
    if (!keep_task[i]) continue;
    TaskSpec t = s.tasks()[i];
    if (t.resource != kNoIndex) t.resource = resource[static_cast<size_t>(t.resource)];
    t.tensors = remap(t.tensors, tensor);
    t.allocs = remap(t.allocs, buffer);
    t.uses = remap(t.uses, buffer);
    t.frees = remap(t.frees, buffer);
    t.deps = remap(t.deps, task);
    std::vector<CarriedDep> carried;
    for (const CarriedDep& c : t.carried) {
      if (task[static_cast<size_t>(c.task)] != kNoIndex) carried.push_back({task[static_cast<size_t>(c.task)], c.distance});
    }
    t.carried = std::move(carried);
    part.AddTask(std::move(t));
  }
  Status st = part.Validate();
  if (!st.ok()) return Status(st.code(), "rank " + std::to_string(rank) + "'s part of schedule '" + s.name + "': " + st.message());
  return part;
}

StatusOr<RankSpace> RankSpace::Make(const ParamLayout& layout, int32_t rank, int32_t ranks) {
  if (ranks < 1 || rank < 0 || rank >= ranks) return InvalidArgument("rank " + std::to_string(rank) + " of " + std::to_string(ranks));
  RankSpace space;
  space.rank_ = rank;
  space.ranks_ = ranks;
  int64_t local = 0;
  for (const ParamTensor& t : layout.tensors) {
    if (t.elements % ranks != 0) {
      return InvalidArgument("tensor '" + t.name + "' has " + std::to_string(t.elements) + " elements, which do not split into " +
                             std::to_string(ranks) + " equal partitions: tierflow run over several ranks needs every tensor of the model to");
    }
    const int64_t part = t.elements / ranks;
    space.units_.push_back({t.offset, t.elements, local, part});
    local += part;
  }
  space.local_total_ = local;
  return space;
}

const RankSpace::Unit& RankSpace::UnitAt(int64_t at) const {
  auto it = std::upper_bound(units_.begin(), units_.end(), at, [](int64_t v, const Unit& u) { return v < u.local; });
  TF_CHECK(it != units_.begin());
  return *std::prev(it);
}

std::vector<const RankSpace::Unit*> RankSpace::UnitsIn(int64_t begin, int64_t n) const {
  std::vector<const Unit*> out;
  for (int64_t at = begin; at < begin + n;) {
    const Unit& u = UnitAt(at);
    out.push_back(&u);
    at = u.local + u.part;
  }
  return out;
}

std::vector<RankSpace::DecayRun> RankSpace::DecayRuns(const ParamLayout& layout, int64_t begin, int64_t n) const {
  std::vector<DecayRun> out;
  for (const Unit* u : UnitsIn(begin, n)) {
    const auto tensor = std::lower_bound(layout.tensors.begin(), layout.tensors.end(), u->global,
                                         [](const ParamTensor& t, int64_t at) { return t.offset < at; });
    TF_CHECK(tensor != layout.tensors.end() && tensor->offset == u->global);  // a unit is a tensor
    const bool decay = tensor->shape.size() >= 2;
    const int64_t from = std::max(begin, u->local), to = std::min(begin + n, u->local + u->part);
    if (!out.empty() && out.back().decay == decay) {
      out.back().n += to - from;
    } else {
      out.push_back({from - begin, to - from, decay});
    }
  }
  return out;
}

Status ForEachAdamWRun(const RankSpace& space, const TrainConfig& config, const ParamLayout& layout, int64_t begin, int64_t n, int64_t step,
                       const std::function<Status(int64_t offset, int64_t elements, const AdamWConfig& config)>& update) {
  AdamWConfig cfg = config.adam;
  cfg.lr = LearningRate(config.lr_schedule, cfg.lr, step);
  if (cfg.weight_decay == 0) return update(0, n, cfg);
  for (const RankSpace::DecayRun& r : space.DecayRuns(layout, begin, n)) {
    AdamWConfig run_cfg = cfg;
    if (!r.decay) run_cfg.weight_decay = 0;
    TF_RETURN_IF_ERROR(update(r.offset, r.n, run_cfg));
  }
  return Status::Ok();
}

void AdamWSparingVectors(const RankSpace& space, const TrainConfig& config, const ParamLayout& layout, int64_t begin, int64_t n,
                         float* param, float* m, float* v, const float* grad, int64_t step, float grad_scale, CpuThreads& threads) {
  (void)ForEachAdamWRun(space, config, layout, begin, n, step, [&](int64_t at, int64_t elements, const AdamWConfig& cfg) {
    cpu::AdamW(param + at, m + at, v + at, grad + at, nullptr, elements, step, grad_scale, cfg, threads);
    return Status::Ok();
  });
}

std::vector<RankSpace::Segment> RankSpace::Segments(int64_t begin, int64_t n) const {
  if (ranks_ == 1) return {{begin, begin, n}};
  std::vector<Segment> out;
  for (int64_t at = begin; at < begin + n;) {
    const Unit& u = UnitAt(at);
    const int64_t take = std::min(begin + n, u.local + u.part) - at;
    out.push_back({at, u.global + rank_ * u.part + (at - u.local), take});
    at += take;
  }
  return out;
}

}  // namespace tierflow::real::exec
