// The training passes (passes.h).
#include "passes.h"

#include <map>

#include "gradient_bucket.h"

namespace tierflow::policies {
namespace {

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

// The passes of every micro-step (TrainingPasses): forward, then backward, each fetching its
// units and computing them layer by layer, the backward's gradients handed to the gradient path
// (GradientBucket). Tasks, tensors and buffers are added in the same order as ever, so that
// every schedule keeps its task numbers.
class Passes {
 public:
  Passes(ScheduleBuilder& b, const ModelPlan& plan, const PassOptions& o)
      : b_(b), plan_(plan), o_(o), ranks_(plan.ranks), micro_steps_(b.scenario().training.gradient_accumulation_steps),
        tied_(plan.tied_unit >= 0), head_layer_(plan.units.empty() ? -1 : plan.units.back().layer), live_(b, o.max_live_elements) {
    res_.last_compute.assign(ranks_, kNoIndex);
    res_.grad_copies.resize(ranks_);
    res_.grad_writes.resize(ranks_);
    res_.grad_ready.assign(ranks_, std::vector<int32_t>(plan.units.size(), kNoIndex));
    carry_.last_contribution.assign(static_cast<size_t>(ranks_), std::vector<int32_t>(plan.units.size(), kNoIndex));
    if (o.deepspeed_epilogue) {
      carry_.grad32_pool.assign(static_cast<size_t>(ranks_), kNoIndex);  // created on first use
      carry_.grad32_peak.assign(static_cast<size_t>(ranks_), 0);
      carry_.epilogue_end.assign(static_cast<size_t>(ranks_), kNoIndex);
    }
    if (o.gradient_path == GradientPath::kKeepInHost) {
      for (int32_t r = 0; r < ranks_; ++r) {
        res_.host_grad_buffer.push_back(
            b.Buffer("grad.host.r" + std::to_string(r), o.grad_pool[r], plan.rank_elements * 2, /*persistent=*/true));
      }
      carry_.accumulator = res_.host_grad_buffer;
    } else if (micro_steps_ > 1 || tied_ || o.grad_partition_buffer) {  // several contributions, or DeepSpeed's buffer
      for (int32_t r = 0; r < ranks_; ++r) {
        const std::string R = ".r" + std::to_string(r);
        const int32_t pool = b.Pool("host.pinned.grad_accum" + R, b.Host(r), plan.rank_elements * 2);
        carry_.accumulator.push_back(b.Buffer("grad.accum" + R, pool, plan.rank_elements * 2, /*persistent=*/true));
      }
    }
    forward_order_.resize(plan.units.size());
    for (size_t i = 0; i < plan.units.size(); ++i) forward_order_[i] = static_cast<int32_t>(i);
    backward_order_.assign(forward_order_.rbegin(), forward_order_.rend());
    for (int32_t u : backward_order_) {
      if (!Kept(u)) backward_fetches_.push_back(u);
    }
  }

  PassResult Plan() {
    TF_CHECK(o_.fetch.slot_ring == 0 || o_.fetch.slot_ring >= o_.fetch.coupled_reads);  // else a dep cycle
    for (int64_t m = 0; m < micro_steps_; ++m) {
      const int32_t first_task = b_.task_count();
      held_.clear();
      Pass(m, /*fwd=*/true);
      Pass(m, /*fwd=*/false);
      for (int32_t t = first_task; t < b_.task_count(); ++t) b_.task(t).micro_step = static_cast<int32_t>(m);
    }
    live_.Bound();
    // The widened gradients' pools hold the largest bucket's.
    for (size_t r = 0; r < carry_.grad32_pool.size(); ++r) {
      if (carry_.grad32_pool[r] != kNoIndex) b_.pool(carry_.grad32_pool[r]).capacity_bytes = carry_.grad32_peak[r];
    }
    RingSlots();
    return std::move(res_);
  }

 private:
  // A unit this micro-step's forward keeps gathered: per rank its gathered buffer and partition,
  // and its index in `live_`.
  struct Held {
    std::vector<int32_t> buffer, tensor;
    size_t live = 0;
  };
  // One pass as its layers are computed. The executor computes a layer at once, at the layer's
  // last compute task of the pass (the one where the layer ends): that task reads every gathered
  // buffer of the layer and frees them (per rank, those of the layer's units so far), except, in
  // a forward, those of the units kept for the backward, whose backward frees them instead. In a
  // backward pass it writes the layer's fp32 gradients into a GPU buffer, first in its uses,
  // which the layer's reduce-scatters and d2h copies read and its last d2h frees. That buffer is
  // allocated by the last gathered-buffer admission at or before the layer in the pass's fetch
  // order, so the GPU pool admits everything in fetch order and prefetched units never hold the
  // room a compute still needs (a pool smaller than a layer's working set is still a deadlock,
  // reported with the pool). A layer with no admission before it in the pass (every unit so far
  // GPU-resident or kept from the forward: the head, where a backward begins) allocates it in an
  // alloc task of its own, once the compute before it has ended, and the pass's first admission
  // follows that task: the backward's prefetches begin when the backward does, as DeepSpeed's
  // pre-backward hook issues them. Allocated by the compute while the prefetches were admitted
  // from the forward's last gather on, the head's gradients waited for room that those
  // prefetches held until computes after the head's freed it: a deadlock whenever they filled
  // the pool first (scenarios/llama3.2-1b-offload.yaml on its own node did). Without any
  // admission in the pass at all, the compute allocates it.
  struct Layer {
    std::vector<int32_t> units;                          // the layer's units so far
    std::vector<int32_t> last_admit;                     // per rank
    std::vector<int32_t> first_admit;                    // per rank: the pass's first admission, if any
    std::vector<std::vector<int32_t>> gathered, kept;   // per rank: its gathered buffers
    std::vector<size_t> live;                            // the `live_` units the layer's compute frees
  };
  // One unit's compute at one position of the pass.
  struct Step {
    bool fwd = true;
    int32_t u = 0;
    const FetchedUnit* f = nullptr;  // fetched in this pass, else null
    const Held* held = nullptr;      // gathered by the forward and kept, else null
    bool keep = false;               // a forward keeping it for the backward
    bool layer_ends = false;
    bool tied_head = false;          // the tied head's last unit: computes with the table too
    int64_t layer_elements = 0;      // the layer's gradients (the table's included)
  };

  // The units each forward keeps gathered for its backward, which fetches the others only.
  bool Kept(int32_t u) const {
    return !o_.kept_for_backward.empty() && o_.kept_for_backward[static_cast<size_t>(u)] && !plan_.units[static_cast<size_t>(u)].gpu_resident;
  }

  // The pass's fetches, recorded in the result: reads, gathers, host fetches, staged slots.
  std::vector<FetchedUnit> Fetch(int64_t m, bool fwd, const FetchOptions& fo) {
    std::vector<FetchedUnit> fetched = FetchUnits(b_, plan_, fwd ? forward_order_ : backward_fetches_, fo, &last_h2d_);
    if (o_.chain_passes && !fetched.empty() && !res_.gathers.empty()) {
      b_.task(fetched.front().allgather).deps.push_back(res_.gathers.back());
    }
    priority_base_ += static_cast<int32_t>(fetched.size());
    for (const FetchedUnit& f : fetched) {
      if (m == 0 && fwd) res_.first_forward_reads += f.reads.size();
      res_.reads.insert(res_.reads.end(), f.reads.begin(), f.reads.end());
      for (size_t r = 0; r < f.reads.size(); ++r) {
        res_.read_rank_unit.emplace_back(static_cast<int32_t>(r), f.unit);
        const int32_t rank = static_cast<int32_t>(r);
        staged_[fo.slot_pool_of ? fo.slot_pool_of(rank, f.unit) : fo.slot_pool[r]].emplace_back(f.reads[r], f.allgather);
      }
      res_.gathers.push_back(f.allgather);
      if (fo.InHost(f.unit)) res_.host_fetches.insert(res_.host_fetches.end(), f.admit.begin(), f.admit.end());
    }
    return fetched;
  }

  // Every unit is computed, GPU-resident ones too. A layer's gradients are final only after the
  // backward of its last unit in pass order (activation checkpointing recomputes the whole layer,
  // and the real executor computes a layer at once), so the reduce-scatters of a layer's units
  // follow that compute.
  void Pass(int64_t m, bool fwd) {
    FetchOptions fo = o_.fetch;
    fo.phase = fwd ? Phase::kForward : Phase::kBackward;
    fo.tag = (fwd ? "f" : "b") + std::to_string(m);
    fo.priority_base = priority_base_;
    const std::vector<FetchedUnit> fetched = Fetch(m, fwd, fo);
    std::vector<int32_t> fetched_of(plan_.units.size(), -1);
    for (size_t i = 0; i < fetched.size(); ++i) fetched_of[fetched[i].unit] = static_cast<int32_t>(i);
    const std::vector<int32_t>& order = fwd ? forward_order_ : backward_order_;
    Layer layer;
    layer.last_admit.assign(static_cast<size_t>(ranks_), kNoIndex);
    layer.first_admit = fetched.empty() ? std::vector<int32_t>(static_cast<size_t>(ranks_), kNoIndex) : fetched.front().admit;
    layer.gathered.resize(ranks_);
    layer.kept.resize(ranks_);
    GradientBucket gradients(b_, plan_, o_, fo, /*last_micro_step=*/m + 1 == micro_steps_, &carry_, &res_);
    for (size_t pos = 0; pos < order.size(); ++pos) {
      Step s;
      s.fwd = fwd;
      s.u = order[pos];
      const ParamUnit& unit = plan_.units[s.u];
      s.f = fetched_of[s.u] >= 0 ? &fetched[fetched_of[s.u]] : nullptr;
      s.layer_ends = pos + 1 == order.size() || plan_.units[order[pos + 1]].layer != unit.layer;
      layer.units.push_back(s.u);
      s.keep = fwd && Kept(s.u);
      const auto from_forward = fwd ? held_.end() : held_.find(s.u);
      if (from_forward != held_.end()) s.held = &from_forward->second;
      if (s.f != nullptr) {
        const size_t index = live_.Gathered(unit.elements, s.f->admit);
        if (s.keep) held_[s.u] = {s.f->gathered_buffer, s.f->param_tensor, index};
        else layer.live.push_back(index);
      } else if (s.held != nullptr) {
        layer.live.push_back(s.held->live);
      }
      for (int32_t lu : layer.units) s.layer_elements += plan_.units[lu].elements;
      // The tied head computes with the embedding table too, and its backward writes the
      // table's gradient after the layer's own.
      s.tied_head = tied_ && s.layer_ends && unit.layer == head_layer_;
      if (s.tied_head && !fwd) s.layer_elements += plan_.units[plan_.tied_unit].elements;
      std::vector<int32_t> grad_gpu(ranks_, kNoIndex);
      for (int32_t r = 0; r < ranks_; ++r) Compute(s, fo, r, &layer, &grad_gpu[r]);
      if (s.layer_ends) {
        live_.LayerEnds(res_.last_compute, layer.live);
        layer.live.clear();
      }
      if (fwd || !s.layer_ends) {
        if (s.layer_ends) layer.units.clear();
        continue;
      }
      gradients.AddLayer(unit.layer, grad_gpu, layer.units, s.tied_head);
      layer.units.clear();
    }
    if (!fwd) gradients.Flush();  // what is left: DeepSpeed's epilogue
  }

  // Rank r's compute task of step `s`; at a backward layer's end, its gradient buffer.
  void Compute(const Step& s, const FetchOptions& fo, int32_t r, Layer* layer, int32_t* grad_gpu) {
    const ParamUnit& unit = plan_.units[s.u];
    TaskSpec c;
    c.id = StrCat({s.fwd ? "fwd." : "bwd.", unit.name, ".", std::string_view(fo.tag).substr(1), ".r", r});
    c.op = Op::kCompute;
    c.rank = r;
    c.kernel = s.fwd ? Kernel::kForward : Kernel::kBackward;
    c.resource = b_.GpuCompute(r);
    c.flops = ComputeTaskFlops(unit, s.fwd);
    c.bytes = ComputeTaskBytes(unit, s.fwd);
    if (s.f != nullptr) {
      c.uses = {s.f->gathered_buffer[r]};
      c.deps = {s.f->allgather};
      c.tensors = {s.f->param_tensor[r]};
      if (s.f->gathered_buffer[r] != kNoIndex) (s.keep ? layer->kept : layer->gathered)[r].push_back(s.f->gathered_buffer[r]);
      layer->last_admit[r] = s.f->admit[r];
    } else if (s.held != nullptr) {  // gathered by the forward, kept
      c.uses = {s.held->buffer[r]};
      c.tensors = {s.held->tensor[r]};
      layer->gathered[r].push_back(s.held->buffer[r]);
    } else {
      c.tensors = {b_.State(StateKind::kParam16, r, unit.rank_offset, unit.rank_elements, ParamHome(b_, plan_, fo, r, s.u))};
    }
    if (s.layer_ends) {
      c.uses = layer->gathered[r];
      c.uses.insert(c.uses.end(), layer->kept[r].begin(), layer->kept[r].end());
      c.frees = std::move(layer->gathered[r]);
      layer->gathered[r].clear();
      layer->kept[r].clear();
      if (!s.fwd) {
        *grad_gpu = b_.Buffer(StrCat({"grad.gpu.l", unit.layer, ".", fo.tag, ".r", r}), b_.GpuPool(r),
                              s.layer_elements * 4);
        c.uses.insert(c.uses.begin(), *grad_gpu);
        if (layer->last_admit[r] != kNoIndex) {
          b_.task(layer->last_admit[r]).allocs.push_back(*grad_gpu);
        } else if (layer->first_admit[r] != kNoIndex && res_.last_compute[r] != kNoIndex) {
          TaskSpec a;
          a.id = StrCat({"alloc.grad.gpu.l", unit.layer, ".", fo.tag, ".r", r});  // "alloc." and its buffer's name
          a.op = Op::kAlloc;
          a.rank = r;
          a.allocs = {*grad_gpu};
          a.deps = {res_.last_compute[r]};
          a.phase = fo.phase;
          a.layer = unit.layer;
          const int32_t alloc = b_.Task(std::move(a));
          c.deps.push_back(alloc);
          b_.task(layer->first_admit[r]).deps.push_back(alloc);
        } else {
          c.allocs = {*grad_gpu};
        }
      }
    }
    if (s.tied_head) {
      const ParamUnit& tu = plan_.units[plan_.tied_unit];
      c.tensors.push_back(b_.State(StateKind::kParam16, r, tu.rank_offset, tu.rank_elements, b_.GpuDevice(r)));
    }
    if (res_.last_compute[r] != kNoIndex) c.deps.push_back(res_.last_compute[r]);
    if (!carry_.block.empty() && carry_.block[r] != kNoIndex) c.deps.push_back(std::exchange(carry_.block[r], kNoIndex));
    c.phase = fo.phase;
    c.layer = unit.layer;
    res_.last_compute[r] = b_.Task(std::move(c));
    if ((s.f == nullptr && s.held == nullptr) || s.tied_head) res_.resident_computes.push_back(res_.last_compute[r]);
  }

  // The slot ring (FetchOptions::slot_ring): a read reuses the slot that the all-gather of the
  // read slot_ring earlier in its pool frees, in this iteration or at the end of the previous.
  void RingSlots() {
    const size_t ring = static_cast<size_t>(std::max(0, o_.fetch.slot_ring));
    for (const auto& pool_reads : staged_) {
      const auto& reads = pool_reads.second;
      const size_t n = reads.size();
      for (size_t k = 0; ring > 0 && k < n; ++k) {
        TaskSpec& read = b_.task(reads[k].first);
        if (k >= ring) {
          read.deps.push_back(reads[k - ring].second);
        } else if (k + n >= ring) {
          read.carried.push_back({reads[k + n - ring].second, 1});
        }
      }
    }
  }

  ScheduleBuilder& b_;
  const ModelPlan& plan_;
  const PassOptions& o_;
  const int32_t ranks_;
  const int64_t micro_steps_;
  const bool tied_;
  const int32_t head_layer_;
  PassResult res_;
  GradientBucket::Carry carry_;
  std::vector<int32_t> forward_order_, backward_order_, backward_fetches_;
  int32_t priority_base_ = 0;
  // Per pinned pool, in fetch order: (read, the all-gather that frees its slot).
  std::map<int32_t, std::vector<std::pair<int32_t, int32_t>>> staged_;
  std::vector<int32_t> last_h2d_;  // per rank, over every pass: h2d copies in fetch order
  LiveParameters live_;
  std::map<int32_t, Held> held_;   // this micro-step's
};

}  // namespace

PassResult TrainingPasses(ScheduleBuilder& b, const ModelPlan& plan, const PassOptions& o) {
  b.StateLayout(plan);
  return Passes(b, plan, o).Plan();
}

}  // namespace tierflow::policies
