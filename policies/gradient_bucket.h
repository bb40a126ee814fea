// The backward's gradient path (passes.h, used by TrainingPasses in passes.cc only).
#pragma once

#include <deque>

#include "passes.h"
#include "tierflow/core/text.h"

namespace tierflow::policies {

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
    // tied head's part), kNoIndex before the first: the next adds to what it left, so it waits
    // for it.
    std::vector<std::vector<int32_t>> last_contribution;
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
    const int32_t last = carry_.last_contribution[static_cast<size_t>(rank)][static_cast<size_t>(unit)];
    if (last != kNoIndex) d2h->deps.push_back(last);
  }

  // The reduce-scatter of unit `gu_index`'s gradients `name`, after the backward so far. It names
  // every rank's param16 partition of the unit: the elements each rank keeps the sum of. It reads
  // the whole bucket (DeepSpeed reduces it at once): it uses every GPU gradient buffer in it, so
  // a bucket larger than the GPU pool is refused when planned.
  int32_t ReduceScatter(const LayerGrads& lg, const std::string& name, int32_t gu_index) {
    const ParamUnit& gu = plan_.units[gu_index];
    TaskSpec rs;
    rs.id = StrCat({"reducescatter.", name});
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
    const int32_t rs_task = ReduceScatter(*e.layer, StrCat({plan_.units[unit].name, e.head_part ? ".head." : ".", fo_.tag}), unit);
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
      d2h.id = StrCat({"d2h.grad.", tu.name, ".head.", fo_.tag, ".r", r});
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
      carry_.last_contribution[static_cast<size_t>(r)][static_cast<size_t>(plan_.tied_unit)] = partial;
      lg.d2h[r].push_back(partial);
      res_.grad_copies[r].push_back(partial);
    }
  }

  // Unit `lu`'s gradients after its reduce-scatter: d2h, and the gradient path.
  void IssueUnit(LayerGrads& lg, int32_t lu, int32_t rs_task) {
    const ParamUnit& gu = plan_.units[lu];
    for (int32_t r = 0; r < plan_.ranks; ++r) {
      std::string id = StrCat({gu.name, ".", fo_.tag, ".r", r});
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
      else if (written && !swap_out_later) gbuf = b_.Buffer(StrCat({"grad.", id}), o_.grad_pool[r], gu.rank_elements * 4);
      TaskSpec d2h;
      d2h.id = StrCat({"d2h.grad.", id});
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
      carry_.last_contribution[static_cast<size_t>(r)][static_cast<size_t>(lu)] = d2h_task;
      lg.d2h[r].push_back(d2h_task);
      res_.grad_copies[r].push_back(d2h_task);
      res_.grad_ready[r][lu] = d2h_task;
      if (!flush_ || !last_micro_step_) continue;
      if (swap_out_later) {
        Widened w{std::string(), lu, kNoIndex, write_resource, grad_tensor, d2h_task};
        if (o_.device_memory_is_host) {  // widened in the loop, into device (= host) memory
          int32_t& pool = carry_.grad32_pool[static_cast<size_t>(r)];
          if (pool == kNoIndex) pool = b_.Pool("host.grad32.r" + std::to_string(r), b_.Host(r), 0);  // sized at the end
          w.buffer = b_.Buffer(StrCat({"grad32.", id}), pool, gu.rank_elements * 4);
          w.after = InOrder(r, Widen(r, lu, id, w.buffer, /*into_kept=*/false, d2h_task));
        }
        w.id = std::move(id);
        widened_[static_cast<size_t>(r)].push_back(std::move(w));
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
    widen.id = StrCat({"convert.grad.", id});
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
    w.id = StrCat({"write.grad.", id});
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
        const int32_t staging = b_.Buffer(StrCat({"grad.", w.id}), o_.grad_pool[r], gu.rank_elements * 4);
        int32_t staged = kNoIndex;
        if (w.buffer == kNoIndex) {
          staged = InOrder(r, Widen(r, w.unit, w.id, staging, /*into_kept=*/false, w.after));
        } else {
          held += gu.rank_elements * 4;
          TaskSpec copy;
          copy.id = StrCat({"copy.grad.", w.id});
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

}  // namespace tierflow::policies
