// tierflow-gpu-probe: the GPU probes of gpu_probes.h in one program. Writes the trace records of
// each probe (copies.jsonl, ops.jsonl, nccl.jsonl) into --out, which `tierflow calibrate` reads,
// and prints the medians as a table (or, with --json, as one JSON object). Built with the CUDA
// back-end and NCCL only, so that tests/gpu/run.sh can build and run it on a bare GPU machine.
//
// Exit status: 0 done, 1 a probe failed (the error is printed), 2 bad arguments, 3 no usable GPU
// (the reason is printed).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "tierflow/core/trace_record.h"
#include "tierflow/models/llm.h"
#include "tierflow/real/cuda_compute.h"
#include "tierflow/real/gpu_probes.h"
#include "tierflow/real/nccl_comm.h"

namespace tf = tierflow;

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

tf::Status WriteRecords(const std::string& path, const std::vector<tf::TraceRecord>& records) {
  TF_ASSIGN_OR_RETURN(tf::TraceWriter w, tf::TraceWriter::Open(path));
  for (const auto& r : records) TF_RETURN_IF_ERROR(w.Write(r));
  return w.Close();
}

// One row per (task, op, bytes): the median duration and the rate it gives.
nlohmann::json Summarise(const std::vector<tf::TraceRecord>& records) {
  std::map<std::tuple<std::string, int, int64_t>, std::vector<double>> times;
  std::map<std::tuple<std::string, int, int64_t>, double> flops;
  for (const auto& r : records) {
    const auto key = std::make_tuple(r.task, static_cast<int>(r.op), r.bytes);
    times[key].push_back(r.duration_s());
    flops[key] = r.flops;
  }
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& [key, t] : times) {
    const double median = Median(t);
    nlohmann::json row = {{"task", std::get<0>(key)}, {"op", std::string(tf::OpName(static_cast<tf::Op>(std::get<1>(key))))},
                          {"bytes", std::get<2>(key)}, {"median_s", median}, {"samples", t.size()},
                          {"gb_per_s", median > 0 ? std::get<2>(key) / median / 1e9 : 0.0}};
    if (flops[key] > 0) row["tflop_per_s"] = median > 0 ? flops[key] / median / 1e12 : 0.0;
    rows.push_back(row);
  }
  return rows;
}

void PrintTable(const std::string& title, const nlohmann::json& rows) {
  std::printf("%s\n  %-44s %-13s %12s %12s %10s %10s\n", title.c_str(), "task", "op", "bytes", "median us", "GB/s",
              "TFLOP/s");
  for (const auto& row : rows) {
    const std::string tflops = row.contains("tflop_per_s") ? std::to_string(row["tflop_per_s"].get<double>()) : "-";
    std::printf("  %-44s %-13s %12lld %12.1f %10.2f %10.10s\n", row["task"].get<std::string>().c_str(),
                row["op"].get<std::string>().c_str(), static_cast<long long>(row["bytes"].get<int64_t>()),
                row["median_s"].get<double>() * 1e6, row["gb_per_s"].get<double>(), tflops.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tierflow-gpu-probe: copy bandwidth, every compute op of a decoder layer, and NCCL, on GPU 0"};
  std::string out_dir, model = "llama3.2-1b";
  int64_t batch = 1, seq = 2048;
  int32_t reps = 5;
  bool json = false;
  std::vector<int64_t> copy_sizes = {int64_t{1} << 16, int64_t{1} << 20, int64_t{1} << 24, int64_t{1} << 27};
  std::vector<int64_t> nccl_sizes = {int64_t{1} << 16, int64_t{1} << 20, int64_t{1} << 24, int64_t{1} << 27};
  app.add_option("--out", out_dir, "directory for copies.jsonl, ops.jsonl and nccl.jsonl")->required();
  app.add_option("--model", model, "model preset whose decoder layer the op probe runs")->capture_default_str();
  app.add_option("--batch", batch, "micro-batch of the op probe")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--seq", seq, "sequence length of the op probe")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--repetitions", reps, "measured repetitions per point")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--copy-sizes", copy_sizes, "copy sizes in bytes")->capture_default_str();
  app.add_option("--nccl-sizes", nccl_sizes, "collective sizes in bytes per rank")->capture_default_str();
  app.add_flag("--json", json, "print the summary as JSON instead of tables");
  CLI11_PARSE(app, argc, argv);

  auto preset = tf::models::LlmPreset(model);
  if (!preset.ok()) {
    std::fprintf(stderr, "tierflow-gpu-probe: --model: %s\n", preset.status().ToString().c_str());
    return 2;
  }
  auto ctx = tf::real::cuda::Context::Open(0);
  if (!ctx.ok()) {
    std::fprintf(stderr, "tierflow-gpu-probe: %s\n", ctx.status().ToString().c_str());
    return 3;
  }
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) {
    std::fprintf(stderr, "tierflow-gpu-probe: --out %s: %s\n", out_dir.c_str(), ec.message().c_str());
    return 2;
  }
  tf::real::GpuProbeOptions options;
  options.repetitions = reps;
  options.progress = [&](const std::string& what) {
    if (!json) std::fprintf(stderr, "\r\033[K  probing %s", what.c_str());
  };
  tf::real::LlamaSpec spec;
  spec.config = *preset;

  nlohmann::json summary = {{"device", (*ctx)->device_name()}, {"compute_capability", (*ctx)->compute_capability()},
                            {"model", model}, {"batch", batch}, {"seq", seq}};
  auto run = [&](const std::string& name, const tf::StatusOr<std::vector<tf::TraceRecord>>& records) -> bool {
    if (!json) std::fprintf(stderr, "\r\033[K");
    if (!records.ok()) {
      std::fprintf(stderr, "tierflow-gpu-probe: %s: %s (no %s.jsonl written)\n", name.c_str(),
                   records.status().ToString().c_str(), name.c_str());
      return false;
    }
    const std::string path = (std::filesystem::path(out_dir) / (name + ".jsonl")).string();
    if (const tf::Status st = WriteRecords(path, *records); !st.ok()) {
      std::fprintf(stderr, "tierflow-gpu-probe: %s\n", st.ToString().c_str());
      return false;
    }
    summary[name] = Summarise(*records);
    if (!json) PrintTable(name + " (" + path + ")", summary[name]);
    return true;
  };
  bool ok = run("copies", tf::real::ProbeGpuCopies(**ctx, copy_sizes, options));
  ok = run("ops", tf::real::ProbeGpuOps(**ctx, spec, batch, seq, options)) && ok;
  auto comm = tf::real::nccl::Communicator::OpenSingle(**ctx);
  if (comm.ok()) {
    ok = run("nccl", tf::real::ProbeNccl(**ctx, **comm, nccl_sizes, options)) && ok;
  } else {
    std::fprintf(stderr, "tierflow-gpu-probe: NCCL: %s\n", comm.status().ToString().c_str());
    ok = false;
  }
  if (json) std::printf("%s\n", summary.dump(2).c_str());
  return ok ? 0 : 1;
}
