#include "tierflow/traces/compare.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include "interval_math.h"

namespace tierflow::traces {
namespace {

struct Key {
  int64_t iteration;
  std::string_view task;
  int32_t rank;
  bool operator==(const Key&) const = default;
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    return std::hash<std::string_view>()(k.task) ^ (static_cast<uint64_t>(k.iteration) * 0x9E3779B97F4A7C15ULL) ^
           (static_cast<uint64_t>(k.rank + 1) * 0xC2B2AE3D27D4EB4FULL);
  }
};
Key KeyOf(const TraceRecord& r) { return {r.iteration, r.task, r.rank}; }

std::string Describe(const TraceRecord& r) {
  return "iteration " + std::to_string(r.iteration) + " task '" + r.task + "'" + (r.rank >= 0 ? " of rank " + std::to_string(r.rank) : "");
}

// `x` with each record of no rank (sim's record of a collective, which stands for every rank's; a
// file of records written before records had ranks) made one copy per rank that `other` has
// records of that instance for, so that it is compared with each.
std::vector<TraceRecord> ForEachRank(const std::vector<TraceRecord>& x, const std::vector<TraceRecord>& other) {
  std::map<std::pair<int64_t, std::string_view>, std::vector<int32_t>> ranks;
  for (const TraceRecord& r : other) {
    if (r.rank >= 0) ranks[{r.iteration, r.task}].push_back(r.rank);
  }
  std::vector<TraceRecord> out;
  out.reserve(x.size());
  for (const TraceRecord& r : x) {
    auto it = r.rank < 0 ? ranks.find({r.iteration, r.task}) : ranks.end();
    if (it == ranks.end()) {
      out.push_back(r);
      continue;
    }
    for (int32_t rank : it->second) {
      out.push_back(r);
      out.back().rank = rank;
    }
  }
  return out;
}

}  // namespace

double RelativeError(double reference, double value) { return internal::RelativeErrorOf(reference, value); }

TraceComparison Compare(const std::vector<TraceRecord>& a_in, const std::vector<TraceRecord>& b_in,
                        const CompareOptions& options) {
  // Records match by (iteration, task, rank): every rank's records are compared.
  const std::vector<TraceRecord> a = ForEachRank(a_in, b_in);
  const std::vector<TraceRecord> b = ForEachRank(b_in, a_in);
  TraceComparison c;
  c.a_records = static_cast<int64_t>(a.size());
  c.b_records = static_cast<int64_t>(b.size());

  std::unordered_map<Key, size_t, KeyHash> a_index;
  a_index.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a_index.emplace(KeyOf(a[i]), i).second) {
      ++c.a_unmatched;  // a duplicate instance in a can match nothing
      if (static_cast<int32_t>(c.a_unmatched_examples.size()) < options.example_count) {
        c.a_unmatched_examples.push_back(Describe(a[i]) + " (duplicate)");
      }
    }
  }
  std::vector<char> a_used(a.size(), 0);
  std::array<OpComparison, kOpCount> per_op{};
  std::array<int64_t, kOpCount> rel_count{};
  struct Diff {
    double abs_error_s;
    size_t a, b;
  };
  std::vector<Diff> diffs;
  diffs.reserve(std::min(a.size(), b.size()));
  for (size_t j = 0; j < b.size(); ++j) {
    auto it = a_index.find(KeyOf(b[j]));
    if (it == a_index.end() || a_used[it->second]) {
      ++c.b_unmatched;
      if (static_cast<int32_t>(c.b_unmatched_examples.size()) < options.example_count) {
        c.b_unmatched_examples.push_back(Describe(b[j]) + (it == a_index.end() ? "" : " (duplicate)"));
      }
      continue;
    }
    size_t i = it->second;
    a_used[i] = 1;
    ++c.matched;
    const TraceRecord& ra = a[i];
    const TraceRecord& rb = b[j];
    if (ra.op != rb.op) ++c.op_mismatches;
    OpComparison& oc = per_op[static_cast<int>(ra.op)];
    ++oc.count;
    double da = ra.duration_s(), db = rb.duration_s();
    oc.a_sum_s += da;
    oc.b_sum_s += db;
    if (da > 0) {
      oc.mean_abs_rel_error += std::fabs((db - da) / da);
      ++rel_count[static_cast<int>(ra.op)];
    }
    diffs.push_back({std::fabs(db - da), i, j});
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (a_used[i] || a_index.at(KeyOf(a[i])) != i) continue;  // dups counted
    ++c.a_unmatched;
    if (static_cast<int32_t>(c.a_unmatched_examples.size()) < options.example_count) {
      c.a_unmatched_examples.push_back(Describe(a[i]));
    }
  }
  for (int o = 0; o < kOpCount; ++o) {
    OpComparison& oc = per_op[o];
    if (oc.count == 0) continue;
    oc.op = static_cast<Op>(o);
    oc.rel_error = internal::RelativeErrorOf(oc.a_sum_s, oc.b_sum_s);
    oc.mean_abs_rel_error = rel_count[o] > 0 ? oc.mean_abs_rel_error / static_cast<double>(rel_count[o]) : 0;
    c.ops.push_back(oc);
  }

  std::vector<internal::IterationBound> ia = internal::IterationBounds(a);
  std::vector<internal::IterationBound> ib = internal::IterationBounds(b);
  for (size_t x = 0, y = 0; x < ia.size() && y < ib.size();) {
    if (ia[x].iteration < ib[y].iteration) ++x;
    else if (ib[y].iteration < ia[x].iteration) ++y;
    else {
      double ta = ia[x].end_s - ia[x].start_s, tb = ib[y].end_s - ib[y].start_s;
      c.iterations.push_back({ia[x].iteration, ta, tb, internal::RelativeErrorOf(ta, tb)});
      ++x;
      ++y;
    }
  }
  c.a_mean_iteration_s = internal::SteadyIterationTime(ia);
  c.b_mean_iteration_s = internal::SteadyIterationTime(ib);
  c.mean_iteration_rel_error = internal::RelativeErrorOf(c.a_mean_iteration_s, c.b_mean_iteration_s);

  size_t keep = std::min(diffs.size(), static_cast<size_t>(std::max(0, options.worst_count)));
  auto worse = [&](const Diff& x, const Diff& y) {
    if (x.abs_error_s != y.abs_error_s) return x.abs_error_s > y.abs_error_s;
    if (a[x.a].iteration != a[y.a].iteration) return a[x.a].iteration < a[y.a].iteration;
    return a[x.a].task < a[y.a].task;
  };
  std::partial_sort(diffs.begin(), diffs.begin() + static_cast<std::ptrdiff_t>(keep), diffs.end(), worse);
  for (size_t k = 0; k < keep; ++k) {
    const TraceRecord& ra = a[diffs[k].a];
    const TraceRecord& rb = b[diffs[k].b];
    c.worst.push_back({ra.iteration, ra.task, ra.op, ra.resource, ra.duration_s(), rb.duration_s(),
                       diffs[k].abs_error_s, internal::RelativeErrorOf(ra.duration_s(), rb.duration_s())});
  }
  return c;
}

std::vector<TraceRecord> GroupComputeByLayer(const std::vector<TraceRecord>& records) {
  std::vector<TraceRecord> out;
  out.reserve(records.size());
  std::map<std::tuple<std::string, int64_t, int32_t, int, int32_t>, size_t> group;  // -> index in out (a rank's own)
  for (const TraceRecord& r : records) {
    if (r.op != Op::kCompute || r.layer < 0) {
      out.push_back(r);
      continue;
    }
    auto [it, inserted] = group.try_emplace({r.source, r.iteration, r.layer, static_cast<int>(r.phase), r.rank}, out.size());
    if (inserted) {
      TraceRecord g = r;
      g.task = "compute." + std::string(PhaseName(r.phase)) + ".layer" + std::to_string(r.layer);
      g.tasks = TaskCount(r);
      out.push_back(std::move(g));
      continue;
    }
    TraceRecord& g = out[it->second];
    const double duration = g.duration_s() + r.duration_s();
    g.start_s = std::min(g.start_s, r.start_s);
    g.end_s = g.start_s + duration;
    g.flops += r.flops;
    g.bytes += r.bytes;
    g.tasks += TaskCount(r);
  }
  return out;
}

SimValidation ValidateAgainstRuns(const std::vector<const std::vector<TraceRecord>*>& real_runs,
                                  const std::vector<TraceRecord>& sim, const CompareOptions& options) {
  TF_CHECK(!real_runs.empty());
  SimValidation v;
  // Summarize's mean_iteration_s, without the rest of a summary.
  for (const std::vector<TraceRecord>* run : real_runs) {
    v.real_iteration_s.push_back(internal::SteadyIterationTime(internal::IterationBounds(*run)));
  }
  std::vector<size_t> order(real_runs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return v.real_iteration_s[x] < v.real_iteration_s[y]; });
  v.median = order[order.size() / 2];
  const std::vector<TraceRecord>& real = *real_runs[v.median];
  v.whole = Compare(real, sim, options);
  v.grouped = Compare(GroupComputeByLayer(real), GroupComputeByLayer(sim), options);
  v.grouped.iterations = v.whole.iterations;
  v.grouped.a_mean_iteration_s = v.whole.a_mean_iteration_s;
  v.grouped.b_mean_iteration_s = v.whole.b_mean_iteration_s;
  v.grouped.mean_iteration_rel_error = v.whole.mean_iteration_rel_error;
  return v;
}

}  // namespace tierflow::traces
