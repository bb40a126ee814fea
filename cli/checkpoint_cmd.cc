// `tierflow checkpoint save|load|bench --dir D [--dir D2 ...]`: saves a set of tensors with the
// aggregated (default) or file-per-tensor strategy, loads and verifies it, or benchmarks both.
// The tensor set is a documented size distribution (real::DefaultCheckpointSizes) per rank, or
// with --preset a model's ZeRO-3 shards per rank: each parameter's partition in bf16 and its fp32
// master weights and Adam moments.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "command.h"
#include "inputs.h"
#include "tierflow/core/files.h"
#include "tierflow/core/units.h"
#include "tierflow/models/llm.h"
#include "tierflow/real/checkpoint.h"
#include "tierflow/real/storage.h"

namespace tierflow::cli {
namespace {

struct CkptArgs {
  std::vector<std::string> dirs;
  std::string strategy = "aggregated";        // save
  std::string bench_strategy = "both";        // bench
  std::string name = "ckpt";
  std::string backend = "auto";
  std::string preset;
  std::string model_file;                     // a YAML model ({preset: NAME, overrides} or all dims)
  int ranks = 1;
  int small_count = 2000;
  int large_count = 12;
  int reps = 3;
  std::string request_size = "8MiB";
  int queue_depth = 16;
  std::string staging = "32MiB";
  std::string align = "4KiB";                 // aggregated: tensor offsets in a file
  bool buffered = false;                      // aggregated: through the page cache, not O_DIRECT
  bool no_coalesce = false;                   // aggregated save: one request (or more) per tensor
  bool json = false;
  bool keep = false;
};

// Per-rank tensor sizes: a preset's shards, or the default size distribution.
StatusOr<std::vector<std::pair<std::string, int64_t>>> TensorSizes(const CkptArgs& a, int32_t rank) {
  if (!a.preset.empty() || !a.model_file.empty()) {
    models::LlmConfig model;
    if (!a.model_file.empty()) {
      TF_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(a.model_file, "model file"));
      auto parsed = models::LlmFromYamlText(text);
      if (!parsed.ok()) return parsed.status().WithContext("model file '" + a.model_file + "'");
      model = *parsed;
    } else {
      TF_ASSIGN_OR_RETURN(model, models::LlmPreset(a.preset));
    }
    std::vector<std::pair<std::string, int64_t>> sizes;
    const std::string R = ".r" + std::to_string(rank);
    for (const models::LayerInfo& layer : models::Layers(model)) {
      for (const models::TensorShape& t : layer.tensors) {
        // ZeRO-3 partition: ceil(elements / ranks), the last rank takes what is left.
        const int64_t per_rank = (t.elements() + a.ranks - 1) / a.ranks;
        const int64_t n = std::max<int64_t>(0, std::min(per_rank, t.elements() - rank * per_rank));
        if (n == 0) continue;
        sizes.emplace_back(t.name + R + ".bf16", n * 2);
        for (const char* state : {".fp32", ".exp_avg", ".exp_avg_sq"}) sizes.emplace_back(t.name + R + state, n * 4);
      }
    }
    return sizes;
  }
  real::SizeDistribution d;
  d.small_count = a.small_count;
  d.large_count = a.large_count;
  return real::DefaultCheckpointSizes(d, rank);
}

// A tensor's element type: a shard's by its suffix; the default set's are raw bytes.
std::string DtypeOf(const CkptArgs& a, const std::string& name) {
  if (a.preset.empty() && a.model_file.empty()) return "u8";
  return name.ends_with(".bf16") ? "bf16" : "fp32";
}

// The tensors' bytes (deterministic, incompressible-ish) and their descriptors.
struct TensorSet {
  std::vector<std::unique_ptr<char[]>> data;
  std::vector<real::CheckpointTensor> tensors;
  int64_t bytes = 0;
};

// Every flag in its range, checked first by each verb, before any tensor is made (a million
// ranks took minutes).
Status CheckArgs(const CkptArgs& a) {
  if (!a.preset.empty() && !a.model_file.empty()) return InvalidArgument("give --preset or --model, not both");
  TF_ASSIGN_OR_RETURN(const int64_t align, ParseBytes(a.align, true));
  if (align < 1 || align > (int64_t{1} << 30)) return InvalidArgument("--align " + a.align + " must be between 1 B and 1 GiB");
  if (!a.buffered && a.no_coalesce && align % real::kDirectAlignment != 0) {
    return InvalidArgument("--no-coalesce with O_DIRECT writes each tensor as its own requests, which start at its offset: --align " + a.align +
                           " must be a multiple of 4 KiB (or add --buffered)");
  }
  TF_ASSIGN_OR_RETURN(const int64_t staging, ParseBytes(a.staging, true));
  TF_ASSIGN_OR_RETURN(const int64_t request, ParseBytes(a.request_size, true));
  for (const auto& [flag, bytes] : {std::pair{"--staging", staging}, std::pair{"--request-size", request}}) {
    if (bytes < real::kDirectAlignment || bytes > (int64_t{1} << 30)) {
      return InvalidArgument(std::string(flag) + " " + FormatBytes(static_cast<double>(bytes)) + " must be between 4 KiB and 1 GiB (whole O_DIRECT blocks)");
    }
  }
  return Status::Ok();
}

StatusOr<TensorSet> MakeTensors(const CkptArgs& a) {
  // The whole set is held in memory: its size is known before anything is allocated.
  int64_t total = 0;
  std::vector<std::vector<std::pair<std::string, int64_t>>> per_rank;
  for (int32_t r = 0; r < a.ranks; ++r) {
    TF_ASSIGN_OR_RETURN(auto sizes, TensorSizes(a, r));
    for (const auto& [name, size] : sizes) total += size;
    per_rank.push_back(std::move(sizes));
  }
  const int64_t memory = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
  if (memory > 0 && total > memory / 2) {
    return ResourceExhausted("the tensor set is " + FormatBytes(static_cast<double>(total)) + ", held in memory, and this machine has " +
                             FormatBytes(static_cast<double>(memory)) + ": at most half of it is used (a smaller --preset, --ranks or counts)");
  }
  TensorSet s;
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (int32_t r = 0; r < a.ranks; ++r) {
    auto& sizes = per_rank[static_cast<size_t>(r)];
    for (auto& [name, size] : sizes) {
      s.data.emplace_back(new char[size]);
      char* p = s.data.back().get();
      int64_t i = 0;
      for (; i + 8 <= size; i += 8) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        std::memcpy(p + i, &x, 8);
      }
      for (; i < size; ++i) p[i] = static_cast<char>(x >> (i % 8));
      s.tensors.push_back(real::CheckpointTensor{name, DtypeOf(a, name), r, p, size});
      s.bytes += size;
    }
  }
  return s;
}

StatusOr<std::unique_ptr<real::Storage>> StorageFor(const CkptArgs& a, real::CheckpointStrategy strategy) {
  real::StorageOptions so;
  TF_ASSIGN_OR_RETURN(so.request_bytes, ParseBytes(a.request_size, true));
  so.queue_depth = a.queue_depth;
  // The file-per-tensor baseline is what frameworks do: buffered writes from the caller's thread.
  if (strategy == real::CheckpointStrategy::kFilePerTensor) return real::NewStorage("posix", so);
  return real::NewStorage(a.backend, so);
}

StatusOr<real::CheckpointOptions> Options(const CkptArgs& a, real::CheckpointStrategy strategy) {
  real::CheckpointOptions o;
  o.dirs = a.dirs;
  o.name = a.name;
  o.strategy = strategy;
  TF_ASSIGN_OR_RETURN(o.staging_bytes, ParseBytes(a.staging, true));
  TF_ASSIGN_OR_RETURN(o.align_bytes, ParseBytes(a.align, true));
  o.direct = !a.buffered;
  o.coalesce = !a.no_coalesce;
  return o;
}

Status Save(const CkptArgs& a) {
  TF_RETURN_IF_ERROR(CheckArgs(a));
  TF_ASSIGN_OR_RETURN(auto strategy, real::CheckpointStrategyFromName(a.strategy));
  TF_ASSIGN_OR_RETURN(const auto locks, LockDirs(a.dirs, "--dir", true));
  TF_ASSIGN_OR_RETURN(auto set, MakeTensors(a));
  TF_ASSIGN_OR_RETURN(auto storage, StorageFor(a, strategy));
  TF_ASSIGN_OR_RETURN(auto o, Options(a, strategy));
  TF_ASSIGN_OR_RETURN(auto st, real::SaveCheckpoint(*storage, set.tensors, o));
  std::printf("saved checkpoint '%s' generation %lld: %lld tensors, %s in %lld files, %s, %.3f s, %s (%s, %s)\n",
              a.name.c_str(), static_cast<long long>(st.generation), static_cast<long long>(st.tensors),
              FormatBytes(static_cast<double>(st.bytes)).c_str(), static_cast<long long>(st.files),
              real::CheckpointStrategyName(strategy), st.duration_s,
              FormatBandwidth(static_cast<double>(st.bytes) / st.duration_s).c_str(), storage->name().c_str(),
              st.direct ? "O_DIRECT" : "buffered");
  return Status::Ok();
}

Status Load(const CkptArgs& a) {
  TF_RETURN_IF_ERROR(CheckArgs(a));
  TF_ASSIGN_OR_RETURN(auto storage, real::NewStorage(a.backend, real::StorageOptions{}));
  TF_ASSIGN_OR_RETURN(auto o, Options(a, real::CheckpointStrategy::kAggregated));
  std::vector<std::unique_ptr<char[]>> bufs;
  auto sink = [&](const real::CheckpointEntry& e) {
    bufs.emplace_back(new char[std::max<int64_t>(1, e.size_bytes)]);
    return static_cast<void*>(bufs.back().get());
  };
  TF_ASSIGN_OR_RETURN(auto st, real::LoadCheckpoint(*storage, o, sink));
  std::printf("loaded and verified checkpoint '%s' generation %lld: %lld tensors, %s from %lld files, %.3f s, %s\n",
              a.name.c_str(), static_cast<long long>(st.generation), static_cast<long long>(st.tensors),
              FormatBytes(static_cast<double>(st.bytes)).c_str(), static_cast<long long>(st.files), st.duration_s,
              FormatBandwidth(static_cast<double>(st.bytes) / st.duration_s).c_str());
  return Status::Ok();
}

// The tensor set that save and bench would use, without making it: for peers that save the same
// tensors (bench/checkpoint_peers.py).
Status Tensors(const CkptArgs& a) {
  TF_RETURN_IF_ERROR(CheckArgs(a));
  nlohmann::json out = nlohmann::json::array();
  int64_t total = 0, count = 0;
  for (int32_t r = 0; r < a.ranks; ++r) {
    TF_ASSIGN_OR_RETURN(auto sizes, TensorSizes(a, r));
    for (const auto& [name, size] : sizes) {
      total += size;
      ++count;
      if (a.json) out.push_back({{"name", name}, {"rank", r}, {"dtype", DtypeOf(a, name)}, {"size_bytes", size}});
      else std::printf("%d %s %s %lld\n", r, DtypeOf(a, name).c_str(), name.c_str(), static_cast<long long>(size));
    }
  }
  if (a.json) std::printf("%s\n", out.dump().c_str());
  else std::printf("# %lld tensors, %s over %d rank(s)\n", static_cast<long long>(count), FormatBytes(static_cast<double>(total)).c_str(), a.ranks);
  return Status::Ok();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

Status Bench(const CkptArgs& a) {
  TF_RETURN_IF_ERROR(CheckArgs(a));
  TF_ASSIGN_OR_RETURN(auto set, MakeTensors(a));
  TF_ASSIGN_OR_RETURN(const auto locks, LockDirs(a.dirs, "--dir", true));
  std::vector<real::CheckpointStrategy> strategies;
  if (a.bench_strategy == "both" || a.bench_strategy.empty()) {
    strategies = {real::CheckpointStrategy::kAggregated, real::CheckpointStrategy::kFilePerTensor};
  } else {
    TF_ASSIGN_OR_RETURN(auto s, real::CheckpointStrategyFromName(a.bench_strategy));
    strategies = {s};
  }
  if (!a.json) {
    std::printf("# tierflow checkpoint bench: %zu tensors, %s, %d rank(s), %zu dir(s), %d repetitions (median)\n",
                set.tensors.size(), FormatBytes(static_cast<double>(set.bytes)).c_str(), a.ranks, a.dirs.size(), a.reps);
    std::printf("# write = save incl. fsync, renames and manifest; read = load incl. checksum verification, page cache dropped\n");
    std::printf("# aggregated: %s, %s, tensor offsets aligned to %s, requests of at most %s, %d in flight\n",
                a.buffered ? "through the page cache" : "O_DIRECT", a.no_coalesce ? "a request per tensor" : "coalesced",
                a.align.c_str(), a.request_size.c_str(), a.queue_depth);
    std::printf("#%16s %8s %12s %10s %10s %8s %8s\n", "strategy", "tensors", "bytes", "write GB/s", "read GB/s", "files", "direct");
  }
  // Pinned staging kept across repetitions, as a training job keeps it.
  TF_ASSIGN_OR_RETURN(int64_t staging_bytes, ParseBytes(a.staging, true));
  TF_ASSIGN_OR_RETURN(const int64_t request_bytes, ParseBytes(a.request_size, true));
  real::ArenaOptions ao;
  ao.allow_unlocked = true;
  TF_ASSIGN_OR_RETURN(auto arena, real::PinnedArena::Create(4 * staging_bytes, ao));
  TF_ASSIGN_OR_RETURN(real::SlotPool * staging, arena->CreateSlotPool("checkpoint.staging", staging_bytes, 4));
  nlohmann::json out = nlohmann::json::array();
  for (auto strategy : strategies) {
    TF_ASSIGN_OR_RETURN(auto storage, StorageFor(a, strategy));
    TF_ASSIGN_OR_RETURN(auto o, Options(a, strategy));
    o.name = a.name + "-bench-" + real::CheckpointStrategyName(strategy);
    o.staging = staging;
    std::vector<double> w, r;
    real::CheckpointStats last;
    std::vector<std::unique_ptr<char[]>> bufs;
    for (int rep = 0; rep < a.reps; ++rep) {
      TF_ASSIGN_OR_RETURN(last, real::SaveCheckpoint(*storage, set.tensors, o));
      w.push_back(static_cast<double>(last.bytes) / last.duration_s);
      TF_RETURN_IF_ERROR(real::DropCheckpointCache(*storage, o));
      if (bufs.empty()) {
        for (auto& t : set.tensors) bufs.emplace_back(new char[std::max<int64_t>(1, t.size_bytes)]);
      }
      std::map<std::pair<int32_t, std::string>, size_t> index;
      for (size_t i = 0; i < set.tensors.size(); ++i) index[{set.tensors[i].rank, set.tensors[i].name}] = i;
      auto sink = [&](const real::CheckpointEntry& e) -> void* {
        auto it = index.find({e.rank, e.name});
        return it == index.end() ? nullptr : bufs[it->second].get();
      };
      TF_ASSIGN_OR_RETURN(auto ls, real::LoadCheckpoint(*storage, o, sink));
      r.push_back(static_cast<double>(ls.bytes) / ls.duration_s);
    }
    if (!a.keep) TF_RETURN_IF_ERROR(real::RemoveCheckpoint(*storage, o));
    double wm = Median(w), rm = Median(r);
    out.push_back({{"strategy", real::CheckpointStrategyName(strategy)}, {"bytes", last.bytes}, {"tensors", last.tensors},
                   {"files", last.files}, {"write_bytes_per_s", wm}, {"read_bytes_per_s", rm}, {"direct", last.direct},
                   {"backend", storage->name()}, {"coalesce", o.coalesce}, {"align_bytes", o.align_bytes}, {"requests", last.requests},
                   {"request_bytes", request_bytes}, {"queue_depth", a.queue_depth}, {"reps", a.reps},
                   {"write_bytes_per_s_all", w}, {"read_bytes_per_s_all", r}});
    if (!a.json) {
      std::printf(" %16s %8lld %12lld %10.3f %10.3f %8lld %8s\n", real::CheckpointStrategyName(strategy),
                  static_cast<long long>(last.tensors), static_cast<long long>(last.bytes), wm / 1e9, rm / 1e9,
                  static_cast<long long>(last.files), last.direct ? "yes" : "no");
      std::fflush(stdout);
    }
  }
  if (a.json) std::printf("%s\n", out.dump(1).c_str());
  return Status::Ok();
}

Command MakeCheckpoint(CLI::App& parent) {
  CLI::App* ck = parent.add_subcommand("checkpoint", "Save, load (verified) or benchmark checkpoints");
  ck->require_subcommand(1);
  auto* a = Keep<CkptArgs>();
  auto* which = Keep<std::string>();
  auto common = [&](CLI::App* s) {
    s->add_option("--dir", a->dirs, "A directory per device (repeat); the manifest lives in the first")->required();
    s->add_option("--name", a->name, "Checkpoint name");
    s->add_option("--backend", a->backend, "Storage back-end for aggregated I/O: auto, uring, posix");
    s->add_option("--preset", a->preset, "Model preset whose per-rank ZeRO-3 shards to save (bf16 parameters, fp32 master, Adam m and v; held in memory)");
    s->add_option("--model", a->model_file, "YAML model file ({preset: NAME, overrides} or all dims) whose shards to save, as --preset");
    AddNumber(s, "--ranks", &a->ranks, "Ranks (one file per rank per device)", 1, 65536);
    AddNumber(s, "--small-count", &a->small_count, "Small tensors per rank (4 KiB - 256 KiB, log-uniform)", 0, 1000000);
    AddNumber(s, "--large-count", &a->large_count, "Large tensors per rank (16 - 64 MiB)", 0, 1000000);
    s->add_option("--request-size", a->request_size, "Largest I/O request");
    AddNumber(s, "--qd", &a->queue_depth, "Queue depth per device", 1, 4096);
    s->add_option("--staging", a->staging, "Size of one pinned staging buffer");
    s->add_flag("--buffered", a->buffered, "Aggregated files through the page cache, not O_DIRECT");
  };
  auto writes = [&](CLI::App* s) {
    s->add_option("--align", a->align, "Aggregated: alignment of tensor offsets in a file (default 4KiB)");
    s->add_flag("--no-coalesce", a->no_coalesce, "Aggregated: write every tensor as its own request(s), not packed into staging-sized ones");
  };
  CLI::App* save = ck->add_subcommand("save", "Save the tensor set atomically");
  common(save);
  save->add_option("--strategy", a->strategy, "aggregated or file-per-tensor");
  writes(save);
  save->callback([which] { *which = "save"; });
  CLI::App* load = ck->add_subcommand("load", "Load the committed checkpoint and verify every checksum");
  common(load);
  load->callback([which] { *which = "load"; });
  CLI::App* bench = ck->add_subcommand("bench", "Save and load with each strategy; median bandwidths");
  common(bench);
  bench->add_option("--strategy", a->bench_strategy, "aggregated, file-per-tensor or both");
  writes(bench);
  CLI::App* tensors = ck->add_subcommand("tensors", "List the tensor set save and bench use (rank, dtype, name, bytes), for peers to save the same");
  tensors->add_option("--preset", a->preset, "Model preset whose per-rank ZeRO-3 shards to list");
  tensors->add_option("--model", a->model_file, "YAML model file, as --preset");
  AddNumber(tensors, "--ranks", &a->ranks, "Ranks", 1, 65536);
  AddNumber(tensors, "--small-count", &a->small_count, "Small tensors per rank (the default set)", 0, 1000000);
  AddNumber(tensors, "--large-count", &a->large_count, "Large tensors per rank (the default set)", 0, 1000000);
  tensors->add_flag("--json", a->json, "Print JSON: [{name, rank, dtype, size_bytes}]");
  tensors->callback([which] { *which = "tensors"; });
  AddNumber(bench, "--reps", &a->reps, "Repetitions", 1, 1000000);
  bench->add_flag("--json", a->json, "Print JSON");
  bench->add_flag("--keep", a->keep, "Keep the benchmark checkpoints");
  return Command{ck, [a, which]() -> Status {
                   if (*which == "save") return Save(*a);
                   if (*which == "load") return Load(*a);
                   if (*which == "tensors") return Tensors(*a);
                   return Bench(*a);
                 }};
}

TIERFLOW_COMMAND(MakeCheckpoint);

}  // namespace
}  // namespace tierflow::cli
