#include "tierflow/core/schedule.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/depth_first_search.hpp>
#include <nlohmann/json.hpp>
#include <queue>
#include <span>
#include <tuple>

namespace tierflow {
namespace {

// Appends `s` to `v` and its name to `index`, placed there at once or pending until
// Schedule::IndexNames. A duplicate name is a bug of the caller.
template <typename Spec, typename NameOf>
int32_t Append(std::vector<Spec>* v, NameIndex* index, bool pending, Spec&& s, NameOf name_of) {
  const int32_t i = static_cast<int32_t>(v->size());
  if (pending) {
    index->AddPending(name_of(s));
  } else {
    TF_CHECK(index->Add(name_of(s), *v, name_of));
  }
  v->push_back(std::move(s));
  return i;
}

std::string Quote(const std::string& s) { return "'" + s + "'"; }

using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;

// Lists of indices per row, in two flat arrays (compressed rows): Validate's lists of each task's
// deps and buffers and of each task's successors and each buffer's users, without a vector per
// task or buffer. Rows are appended in order, as the one pass over the tasks meets them (a pass
// to count them first read every task's lists a second time, and on a schedule of 10^5 tasks
// those reads are what the validation waits on); the lists by the other side are their
// transpose, made from these packed rows.
class Rows {
 public:
  Rows() : begin_(1, 0) {}
  void Reserve(size_t rows, size_t items) {
    begin_.reserve(rows + 1);
    items_.reserve(items);
  }
  void Add(int32_t item) { items_.push_back(item); }
  void EndRow() { begin_.push_back(static_cast<int32_t>(items_.size())); }
  size_t rows() const { return begin_.size() - 1; }
  std::span<const int32_t> operator[](int32_t row) const {
    return {items_.data() + begin_[static_cast<size_t>(row)], items_.data() + begin_[static_cast<size_t>(row) + 1]};
  }
  // Row c of the result lists the rows that hold item c, in order (`columns` rows: items below it).
  Rows Transposed(size_t columns) const {
    Rows t;
    t.begin_.assign(columns + 1, 0);
    for (int32_t c : items_) ++t.begin_[static_cast<size_t>(c) + 1];
    for (size_t c = 1; c <= columns; ++c) t.begin_[c] += t.begin_[c - 1];
    std::vector<int32_t> fill(t.begin_.begin(), t.begin_.end() - 1);
    t.items_.resize(items_.size());
    for (size_t r = 0; r < rows(); ++r) {
      for (int32_t c : (*this)[static_cast<int32_t>(r)]) t.items_[fill[static_cast<size_t>(c)]++] = static_cast<int32_t>(r);
    }
    return t;
  }

 private:
  std::vector<int32_t> begin_, items_;
};

// An index with a key to sort it by: `high`, then `low`.
struct Keyed {
  uint64_t low;
  uint32_t high;
  int32_t index;
};

// Sorts by key, stably (equal keys keep their order): least significant byte first, `low`'s
// then `high`'s, a counting pass a byte, skipping the bytes that every key has alike. Validate's
// 10^4 tensors by (device, offset) in a tenth of the time std::sort took.
void RadixSort(std::vector<Keyed>* items) {
  uint64_t any_low = 0, all_low = ~uint64_t{0}, any_high = 0, all_high = ~uint64_t{0};
  for (const Keyed& k : *items) {
    any_low |= k.low;
    all_low &= k.low;
    any_high |= k.high;
    all_high &= k.high;
  }
  std::vector<Keyed> out(items->size());
  for (int pass = 0; pass < 12; ++pass) {  // the 8 bytes of low, then the 4 of high
    const bool low = pass < 8;
    const int shift = 8 * (low ? pass : pass - 8);
    const auto byte = [low, shift](const Keyed& k) { return static_cast<size_t>(((low ? k.low : uint64_t{k.high}) >> shift) & 0xFF); };
    if ((((low ? any_low ^ all_low : any_high ^ all_high) >> shift) & 0xFF) == 0) continue;  // alike in every key
    std::array<size_t, 257> at{};
    for (const Keyed& k : *items) ++at[byte(k) + 1];
    for (size_t b = 1; b < at.size(); ++b) at[b] += at[b - 1];
    for (const Keyed& k : *items) out[at[byte(k)]++] = k;
    items->swap(out);
  }
}

// Records the first back edge a DFS meets: its presence means a cycle.
struct CycleFinder : public boost::default_dfs_visitor {
  explicit CycleFinder(std::pair<int32_t, int32_t>* edge) : edge_(edge) {}
  void back_edge(Graph::edge_descriptor e, const Graph& g) {
    if (edge_->first == kNoIndex) {
      *edge_ = {static_cast<int32_t>(boost::source(e, g)), static_cast<int32_t>(boost::target(e, g))};
    }
  }
  std::pair<int32_t, int32_t>* edge_;
};

}  // namespace

int32_t Schedule::AddDevice(DeviceSpec d) { return Append(&devices_, &device_index_, false, std::move(d), NameOf<DeviceSpec>); }
int32_t Schedule::AddResource(ResourceSpec r) { return Append(&resources_, &resource_index_, false, std::move(r), NameOf<ResourceSpec>); }
int32_t Schedule::AddPool(PoolSpec p) { return Append(&pools_, &pool_index_, false, std::move(p), NameOf<PoolSpec>); }
int32_t Schedule::AddBuffer(BufferSpec b) { return Append(&buffers_, &buffer_index_, names_deferred_, std::move(b), NameOf<BufferSpec>); }
int32_t Schedule::AddTensor(TensorSpec t) { return Append(&tensors_, &tensor_index_, names_deferred_, std::move(t), NameOf<TensorSpec>); }
int32_t Schedule::AddTask(TaskSpec t) { return Append(&tasks_, &task_index_, names_deferred_, std::move(t), IdOf); }

void Schedule::Reserve(size_t tasks, size_t buffers, size_t tensors) {
  tasks_.reserve(tasks);
  buffers_.reserve(buffers);
  tensors_.reserve(tensors);
}

void Schedule::IndexNames() {
  names_deferred_ = false;
  TF_CHECK(buffer_index_.PlacePending(buffers_, NameOf<BufferSpec>));
  TF_CHECK(tensor_index_.PlacePending(tensors_, NameOf<TensorSpec>));
  TF_CHECK(task_index_.PlacePending(tasks_, IdOf));
}

bool Schedule::operator==(const Schedule& o) const {
  return name == o.name && iteration_window == o.iteration_window && meta == o.meta && sections == o.sections &&
         devices_ == o.devices_ && resources_ == o.resources_ && pools_ == o.pools_ &&
         buffers_ == o.buffers_ && tensors_ == o.tensors_ && tasks_ == o.tasks_;
}

std::vector<int32_t> Schedule::TopologicalOrder() const {
  const int32_t n = static_cast<int32_t>(tasks_.size());
  std::vector<int32_t> indegree(n, 0);
  std::vector<std::vector<int32_t>> succ(n);
  for (int32_t t = 0; t < n; ++t) {
    for (int32_t d : tasks_[t].deps) {
      succ[d].push_back(t);
      ++indegree[t];
    }
  }
  // Kahn's algorithm with a min-heap keeps schedule order among ties, which makes the order
  // (and everything derived from it) deterministic and readable.
  std::priority_queue<int32_t, std::vector<int32_t>, std::greater<>> ready;
  for (int32_t t = 0; t < n; ++t) {
    if (indegree[t] == 0) ready.push(t);
  }
  std::vector<int32_t> order;
  order.reserve(n);
  while (!ready.empty()) {
    int32_t t = ready.top();
    ready.pop();
    order.push_back(t);
    for (int32_t s : succ[t]) {
      if (--indegree[s] == 0) ready.push(s);
    }
  }
  TF_CHECK(static_cast<int32_t>(order.size()) == n);
  return order;
}

bool Schedule::Sections::operator==(const Sections& o) const {
  auto same = [](const std::string& a, const std::string& b) {
    if (a.empty() || b.empty()) return a.empty() && b.empty();
    return nlohmann::json::parse(a, nullptr, false) == nlohmann::json::parse(b, nullptr, false);
  };
  return same(model, o.model) && same(hardware, o.hardware) && same(training, o.training);
}

int32_t Schedule::MicroSteps() const {
  int32_t most = 0;
  for (const TaskSpec& t : tasks_) most = std::max(most, t.micro_step);
  return most + 1;
}

Status Schedule::Validate() const {
  const int32_t n = static_cast<int32_t>(tasks_.size());
  auto in_range = [](int32_t i, size_t size) { return i >= 0 && static_cast<size_t>(i) < size; };

  if (iteration_window < 1) return InvalidArgument("iteration_window must be >= 1");
  for (const auto& r : resources_) {
    if (!in_range(r.device, devices_.size())) return InvalidArgument("resource " + Quote(r.name) + ": device out of range");
    if (r.concurrency < 1) return InvalidArgument("resource " + Quote(r.name) + ": concurrency must be >= 1");
  }
  // What the pass over the tasks reads of each buffer and tensor, packed (16 bytes each, where a
  // spec is over a hundred): it reads them in no order, and a spec's cache line each time was a
  // fifth of the pass.
  struct BufferFacts {
    int64_t size_bytes;
    int32_t pool;
    bool persistent;
  };
  struct TensorFacts {
    int64_t size_bytes;
    int32_t rank;
  };
  std::vector<BufferFacts> buffer_facts;
  buffer_facts.reserve(buffers_.size());
  std::vector<TensorFacts> tensor_facts;
  tensor_facts.reserve(tensors_.size());
  std::vector<int64_t> persistent_bytes(pools_.size(), 0);
  for (const auto& p : pools_) {
    if (!in_range(p.device, devices_.size())) return InvalidArgument("pool " + Quote(p.name) + ": device out of range");
    if (p.capacity_bytes < 0) return InvalidArgument("pool " + Quote(p.name) + ": capacity_bytes must be >= 0");
  }
  for (const auto& b : buffers_) {
    if (!in_range(b.pool, pools_.size())) return InvalidArgument("buffer " + Quote(b.name) + ": pool out of range");
    if (b.size_bytes < 0) return InvalidArgument("buffer " + Quote(b.name) + ": size_bytes must be >= 0");
    const PoolSpec& pool = pools_[b.pool];
    if (b.size_bytes > pool.capacity_bytes) {
      return ResourceExhausted("buffer " + Quote(b.name) + " (" + std::to_string(b.size_bytes) +
                               " bytes) is larger than pool " + Quote(pool.name) + " (" +
                               std::to_string(pool.capacity_bytes) + " bytes)");
    }
    if (b.persistent) persistent_bytes[b.pool] += b.size_bytes;
    buffer_facts.push_back({b.size_bytes, b.pool, b.persistent});
  }
  for (size_t p = 0; p < pools_.size(); ++p) {
    if (persistent_bytes[p] > pools_[p].capacity_bytes) {
      return ResourceExhausted("pool " + Quote(pools_[p].name) + ": persistent buffers need " +
                               std::to_string(persistent_bytes[p]) + " bytes, capacity is " +
                               std::to_string(pools_[p].capacity_bytes));
    }
  }
  for (const auto& t : tensors_) {
    if (!in_range(t.device, devices_.size())) return InvalidArgument("tensor " + Quote(t.name) + ": device out of range");
    if (t.size_bytes < 0 || t.offset_bytes < 0 || t.element_offset < 0) {
      return InvalidArgument("tensor " + Quote(t.name) + ": size_bytes, offset_bytes and element_offset must be >= 0");
    }
    for (int64_t d : t.shape) {
      if (d < 0) return InvalidArgument("tensor " + Quote(t.name) + ": shape has a negative dimension");
    }
    if (t.size_bytes % StateKindBytes(t.kind) != 0) {
      return InvalidArgument("tensor " + Quote(t.name) + ": size_bytes " + std::to_string(t.size_bytes) + " is not whole " +
                             std::string(StateKindName(t.kind)) + " elements of " + std::to_string(StateKindBytes(t.kind)) + " bytes");
    }
    tensor_facts.push_back({t.size_bytes, t.rank});
  }

  // Each byte of a device's store holds one element of one kind of one rank: tensors may overlap
  // only where they name the same elements at the same bytes (a unit's gradient and the
  // sub-group's gradient read back), never state of another kind, rank or element.
  {
    // Sorted by where they start (device, then offset), ties in the schedule's order; the keys
    // beside the indices, so that the sort reads no TensorSpec.
    std::vector<Keyed> order;
    order.reserve(tensors_.size());
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const TensorSpec& t = tensors_[i];  // device in range and offset >= 0, checked above
      if (t.size_bytes > 0) order.push_back({static_cast<uint64_t>(t.offset_bytes), static_cast<uint32_t>(t.device), static_cast<int32_t>(i)});
    }
    RadixSort(&order);
    auto base = [](const TensorSpec& t) { return t.offset_bytes - t.element_offset * StateKindBytes(t.kind); };
    int32_t widest = kNoIndex;  // of the tensors so far on this device, the one reaching furthest
    for (const Keyed& start : order) {
      const int32_t i = start.index;
      const TensorSpec& t = tensors_[i];
      if (widest != kNoIndex && tensors_[widest].device == t.device &&
          t.offset_bytes < tensors_[widest].offset_bytes + tensors_[widest].size_bytes) {
        const TensorSpec& w = tensors_[widest];
        if (w.kind != t.kind || w.rank != t.rank || base(w) != base(t)) {
          const int64_t end = std::min(w.offset_bytes + w.size_bytes, t.offset_bytes + t.size_bytes);
          return InvalidArgument("tensors " + Quote(w.name) + " and " + Quote(t.name) + " share bytes [" + std::to_string(t.offset_bytes) + ", " +
                                 std::to_string(end) + ") of device " + Quote(devices_[t.device].name) +
                                 " but name different state: each byte of a device's store holds one element of one kind of one rank");
        }
        if (t.offset_bytes + t.size_bytes <= w.offset_bytes + w.size_bytes) continue;
      }
      widest = i;
    }
  }

  // One pass over the tasks (each task's lists read once, while they are in cache: on a schedule
  // of 10^5 tasks the passes were bound by those reads): per-task fields, who allocates and frees
  // each buffer, each task's deps and buffers (packed, then transposed into the successor lists
  // and each buffer's users), and whether each task's buffers fit its pools. The errors come in
  // the same order as checks made pass by pass would give them: every field error first, then
  // the first task whose buffers do not fit.
  std::vector<int32_t> alloc_by(buffers_.size(), kNoIndex), free_by(buffers_.size(), kNoIndex);
  Rows pred, used;  // per task: its deps; the buffers it uses, then those it frees
  pred.Reserve(static_cast<size_t>(n), static_cast<size_t>(n) * 4);
  used.Reserve(static_cast<size_t>(n), static_cast<size_t>(n) * 4);
  std::vector<int32_t> indegree(n, 0);
  // A task's buffers are all live while it runs: those it uses, allocates and frees. Beside its
  // pool's persistent buffers they must fit, or no order of the other tasks lets it start (a
  // layer's working set larger than the GPU pool is found here, not as a deadlock at run time).
  std::vector<int64_t> held(pools_.size(), 0);
  std::vector<int32_t> seen(buffers_.size(), kNoIndex), touched;
  Status does_not_fit = Status::Ok();
  for (int32_t i = 0; i < n; ++i) {
    const TaskSpec& t = tasks_[i];
    auto who = [&t] { return "task " + Quote(t.id); };
    if (IsInstantOp(t.op)) {
      if (t.resource != kNoIndex) return InvalidArgument(who() + ": op '" + std::string(OpName(t.op)) + "' runs on no resource");
    } else if (!in_range(t.resource, resources_.size())) {
      return InvalidArgument(who() + ": op '" + std::string(OpName(t.op)) + "' needs a resource");
    }
    if (!KernelFitsOp(t.kernel, t.op)) {
      const std::string takes = KernelsOf(t.op);
      return InvalidArgument(who() + ": op '" + std::string(OpName(t.op)) + "' " +
                             (takes.empty() ? "takes no kernel" : "takes " + takes) + ", not '" + std::string(KernelName(t.kernel)) + "'");
    }
    if (t.bytes < 0) return InvalidArgument(who() + ": bytes must be >= 0");
    if (t.flops < 0) return InvalidArgument(who() + ": flops must be >= 0");
    if (t.block_bytes < 0 || t.queue_depth < 0 || t.ranks < 0 || t.micro_step < 0) {
      return InvalidArgument(who() + ": block_bytes, queue_depth, ranks and micro_step must be >= 0");
    }
    int64_t tensor_bytes = 0;
    for (int32_t x : t.tensors) {
      if (!in_range(x, tensors_.size())) return InvalidArgument(who() + ": tensor out of range");
      const int64_t size = tensor_facts[x].size_bytes;  // >= 0, checked above
      tensor_bytes = size > INT64_MAX - tensor_bytes ? INT64_MAX : tensor_bytes + size;
    }
    // A disk or PCIe transfer moves exactly the state it names: sim times `bytes`, run moves the
    // tensors, and a task of 2^62 bytes over a tensor of a few MiB simulated without complaint.
    if ((t.op == Op::kRead || t.op == Op::kWrite || t.op == Op::kH2D || t.op == Op::kD2H) && !t.tensors.empty() && t.bytes != tensor_bytes) {
      return InvalidArgument(who() + ": moves " + std::to_string(t.bytes) + " bytes, but its tensors hold " + std::to_string(tensor_bytes) +
                             " (a " + std::string(OpName(t.op)) + " moves exactly the state it names)");
    }
    if (t.rank < kEveryRank) return InvalidArgument(who() + ": rank must be >= 0 (or absent: every rank)");
    if (t.rank != kEveryRank && (IsCollectiveOp(t.op) || t.op == Op::kBarrier)) {
      return InvalidArgument(who() + ": a " + std::string(OpName(t.op)) + " runs on every rank, so it has no rank");
    }
    for (int32_t x : t.tensors) {
      if (t.rank != kEveryRank && tensor_facts[x].rank != t.rank) {
        return InvalidArgument(who() + " runs on rank " + std::to_string(t.rank) + " but names tensor " + Quote(tensors_[x].name) + " of rank " +
                               std::to_string(tensors_[x].rank));
      }
    }
    for (int32_t d : t.deps) {
      if (!in_range(d, tasks_.size())) return InvalidArgument(who() + ": dep names no task");
      if (d == i) return InvalidArgument(who() + ": depends on itself");
    }
    for (const CarriedDep& c : t.carried) {
      if (!in_range(c.task, tasks_.size())) return InvalidArgument(who() + ": carried dep names no task");
      if (c.distance < 1) return InvalidArgument(who() + ": carried dep on " + Quote(tasks_[c.task].id) + " needs distance >= 1");
    }
    for (int32_t b : t.uses) {
      if (!in_range(b, buffers_.size())) return InvalidArgument(who() + ": uses a buffer out of range");
    }
    for (int32_t b : t.allocs) {
      if (!in_range(b, buffers_.size())) return InvalidArgument(who() + ": allocates a buffer out of range");
      if (buffer_facts[b].persistent) return InvalidArgument(who() + ": allocates persistent buffer " + Quote(buffers_[b].name));
      if (alloc_by[b] != kNoIndex) return InvalidArgument(who() + ": buffer " + Quote(buffers_[b].name) + " is already allocated by task " + Quote(tasks_[alloc_by[b]].id));
      alloc_by[b] = i;
    }
    for (int32_t b : t.frees) {
      if (!in_range(b, buffers_.size())) return InvalidArgument(who() + ": frees a buffer out of range");
      if (buffer_facts[b].persistent) return InvalidArgument(who() + ": frees persistent buffer " + Quote(buffers_[b].name));
      if (free_by[b] != kNoIndex) return InvalidArgument(who() + ": buffer " + Quote(buffers_[b].name) + " is already freed by task " + Quote(tasks_[free_by[b]].id));
      free_by[b] = i;
    }
    for (int32_t d : t.deps) pred.Add(d);
    pred.EndRow();
    indegree[i] = static_cast<int32_t>(t.deps.size());
    for (int32_t b : t.uses) used.Add(b);
    for (int32_t b : t.frees) used.Add(b);
    used.EndRow();
    if (!does_not_fit.ok()) continue;
    touched.clear();  // (pool, non-persistent buffer) of the task, each buffer once
    for (const auto* list : {&t.uses, &t.allocs, &t.frees}) {
      for (int32_t b : *list) {
        if (buffer_facts[b].persistent || seen[b] == i) continue;
        seen[b] = i;
        touched.push_back(b);
        held[buffer_facts[b].pool] += buffer_facts[b].size_bytes;
      }
    }
    for (int32_t b : touched) {
      const int32_t p = buffer_facts[b].pool;
      if (held[p] + persistent_bytes[p] > pools_[p].capacity_bytes) {
        int32_t count = 0, largest = b;
        for (int32_t x : touched) {
          if (buffers_[x].pool != p) continue;
          ++count;
          if (buffers_[x].size_bytes > buffers_[largest].size_bytes) largest = x;
        }
        does_not_fit = ResourceExhausted("task " + Quote(t.id) + " holds " + std::to_string(count) + " buffers of pool " +
                                         Quote(pools_[p].name) + " at once (" + std::to_string(held[p]) + " bytes, the largest " +
                                         Quote(buffers_[largest].name) + ") beside " + std::to_string(persistent_bytes[p]) +
                                         " persistent bytes: needs " + std::to_string(held[p] + persistent_bytes[p]) +
                                         " bytes, capacity is " + std::to_string(pools_[p].capacity_bytes));
        break;
      }
    }
    for (int32_t b : touched) held[buffer_facts[b].pool] = 0;
  }
  if (!does_not_fit.ok()) return does_not_fit;
  // The lifetime searches below read deps and successors in no order: packed, not from the tasks.
  const Rows succ = pred.Transposed(static_cast<size_t>(n)), users = used.Transposed(buffers_.size());

  // Cycles among same-iteration deps, and a topological order: Kahn's algorithm over the
  // successor lists (a task is placed once all its deps are). Tasks left unplaced lie on or after
  // a cycle; a depth-first search then names one of its edges. Carried deps always point at
  // earlier iterations, so the unrolled graph is acyclic exactly when this one is.
  std::vector<int32_t> order;
  order.reserve(n);
  for (int32_t i = 0; i < n; ++i) {
    if (indegree[i] == 0) order.push_back(i);
  }
  for (size_t head = 0; head < order.size(); ++head) {
    for (int32_t s : succ[order[head]]) {
      if (--indegree[s] == 0) order.push_back(s);
    }
  }
  if (static_cast<int32_t>(order.size()) < n) {
    Graph g(n);
    for (int32_t i = 0; i < n; ++i) {
      for (int32_t d : tasks_[i].deps) boost::add_edge(d, i, g);
    }
    std::pair<int32_t, int32_t> back{kNoIndex, kNoIndex};
    boost::depth_first_search(g, boost::visitor(CycleFinder(&back)));
    TF_CHECK(back.first != kNoIndex);
    return InvalidArgument("task " + Quote(tasks_[back.second].id) + " is on a dependency cycle (through task " +
                           Quote(tasks_[back.first].id) + ")");
  }

  // Buffer lifetimes: allocated by one task and freed by one task, every use between them.
  std::vector<int32_t> position(n);
  for (int32_t k = 0; k < n; ++k) position[order[k]] = k;
  // Each user must descend from the allocation and the free from each user. A user is searched
  // back over deps (depth first, no further than the allocation's position) for a task already
  // known to descend from the allocation: the allocation itself, a user proven before (users go
  // in topological order), or a task on the path that proved one. A layer's users follow each
  // other through its computes and gathers, so each is found a few steps from the one before (a
  // breadth-first search from the allocation for all of them visited every rank's tasks of the
  // layer in between). The free is found from each user the same way forwards, users in reverse
  // order, tasks known to precede the free. An error names the first user in the buffer's own
  // order that fails, each then checked alone.
  std::vector<int32_t> mark(n, -1), known(n, -1), parent(n, kNoIndex), stack;
  int32_t next_stamp = 0;  // each search and each known set has a fresh stamp: nothing is cleared
  // Whether `from` links to a task t with known[t] == kin, over next_of(), never past `beyond`;
  // if so, every task on the path (`from` included) is marked known too.
  auto links = [&](int32_t from, int32_t kin, auto&& next_of, auto&& beyond) {
    for (const int32_t x : next_of(from)) {  // most are a step from a known task: no search to set up
      if (known[x] == kin) {
        known[from] = kin;
        return true;
      }
    }
    const int32_t stamp = next_stamp++;
    stack.assign(1, from);
    mark[from] = stamp;
    parent[from] = kNoIndex;
    while (!stack.empty()) {
      const int32_t t = stack.back();
      stack.pop_back();
      for (int32_t x : next_of(t)) {
        if (mark[x] == stamp || beyond(x)) continue;
        mark[x] = stamp;
        if (known[x] == kin) {
          for (int32_t y = t; y != kNoIndex; y = parent[y]) known[y] = kin;
          return true;
        }
        parent[x] = t;
        stack.push_back(x);
      }
    }
    return false;
  };
  auto descends = [&](int32_t user, int32_t alloc, int32_t kin) {
    return links(user, kin, [&](int32_t t) { return pred[t]; },
                 [&](int32_t t) { return position[t] < position[alloc]; });
  };
  auto precedes = [&](int32_t user, int32_t free, int32_t kin) {
    return links(user, kin, [&](int32_t t) { return succ[t]; }, [&](int32_t t) { return position[t] > position[free]; });
  };
  std::vector<int32_t> in_order;
  for (size_t b = 0; b < buffers_.size(); ++b) {
    const BufferSpec& buf = buffers_[b];
    if (buf.persistent) continue;
    auto what = [&buf] { return "buffer " + Quote(buf.name); };
    const int32_t alloc = alloc_by[b], free = free_by[b];
    if (alloc == kNoIndex) {
      if (users[b].empty() && free == kNoIndex) continue;  // declared, never used
      return InvalidArgument(what() + " is used by task " + Quote(tasks_[users[b].front()].id) + " but no task allocates it");
    }
    if (free == kNoIndex) return InvalidArgument(what() + " is allocated by task " + Quote(tasks_[alloc].id) + " but no task frees it");
    in_order.assign(users[b].begin(), users[b].end());
    std::sort(in_order.begin(), in_order.end(), [&](int32_t x, int32_t y) { return position[x] < position[y]; });
    int32_t kin = next_stamp++;
    known[alloc] = kin;
    bool ok = true;
    for (size_t i = 0; i < in_order.size() && ok; ++i) {
      if (known[in_order[i]] != kin && !descends(in_order[i], alloc, kin)) ok = false;
    }
    for (int32_t u : users[b]) {
      if (ok) break;
      known[alloc] = kin = next_stamp++;  // alone: the allocation only
      if (u != alloc && !descends(u, alloc, kin)) {
        return InvalidArgument("task " + Quote(tasks_[u].id) + " uses " + what() + " without depending on task " +
                               Quote(tasks_[alloc].id) + " that allocates it");
      }
    }
    kin = next_stamp++;
    known[free] = kin;
    ok = true;
    for (auto u = in_order.rbegin(); u != in_order.rend() && ok; ++u) {
      if (known[*u] != kin && !precedes(*u, free, kin)) ok = false;
    }
    for (int32_t u : users[b]) {
      if (ok) break;
      known[free] = kin = next_stamp++;
      if (u != free && !precedes(u, free, kin)) {
        return InvalidArgument("task " + Quote(tasks_[free].id) + " frees " + what() + " before task " + Quote(tasks_[u].id) +
                               " that uses it has completed (missing dep)");
      }
    }
  }
  return Status::Ok();
}

}  // namespace tierflow
