// Sweeps: a base scenario and its variations (a grid's cross product and/or a list of runs),
// evaluated in parallel (evaluate.h) into one CSV row per run. docs/sweep-format.md documents
// the SWEEP.yaml file and the CSV columns.
//
// Runs are numbered 0..N-1 in a fixed order (the `runs:` entries outer, the grid inner with its
// last key varying fastest). `--shard I/N` evaluates the runs whose index % N == I; the rows of
// every shard, merged, equal the rows of the unsharded sweep byte for byte, whatever the number
// of worker processes.
//
// Thread safety: values and pure functions, except RunSweep (see EvaluateAll).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tierflow/core/status.h"
#include "tierflow/sweep/evaluate.h"

namespace tierflow::sweep {

struct SweepRun {
  int64_t index = 0;
  // (key.path, value) in the sweep's key order: the run's differences from the base.
  std::vector<std::pair<std::string, std::string>> settings;
  Variation variation() const;
};

struct SweepSpec {
  std::string name;         // the `name:` key, or the file's stem
  std::string base_yaml;    // the base scenario (the file `base:` names, or the inline map)
  std::string base_origin;  // that file's path, or "<sweep file> (inline base)"
  int64_t iterations = 1;
  MemoryBudget budget;      // `memory_budget:`; runs above it are infeasible
  std::vector<std::string> keys;  // every key any run sets: the CSV's knob columns, in file order
  std::vector<SweepRun> runs;
};

// Reads and validates a sweep: unknown keys, empty lists, a key both in the grid and a run, a
// base that does not load, and a key path or value the scenario rejects (each distinct setting
// is checked against the base) are errors naming the key. `overrides` ("key.path=value") are
// applied to the base scenario of every run. A relative `base:` path is relative to the file.
StatusOr<SweepSpec> LoadSweepFile(const std::string& path, const std::vector<std::string>& overrides = {});
StatusOr<SweepSpec> LoadSweepText(const std::string& yaml, const std::string& origin, const std::string& base_dir,
                                  const std::vector<std::string>& overrides = {});

// "I/N" with 0 <= I < N.
struct Shard {
  int64_t index = 0;
  int64_t count = 1;
};
StatusOr<Shard> ParseShard(const std::string& text);
std::vector<SweepRun> RunsOfShard(const SweepSpec& spec, const Shard& shard);

struct SweepRow {
  SweepRun run;
  Evaluation eval;
};

// Evaluates `runs` of `spec` (options.iterations and options.budget are taken from the spec).
StatusOr<std::vector<SweepRow>> RunSweep(const SweepSpec& spec, const std::vector<SweepRun>& runs,
                                         EvaluateOptions options);

// The CSV: a header line, then one line per row sorted by run index. Columns: run, run_count,
// each key of spec.keys, policy, iteration_s, forward_s, backward_s, step_s, host_peak_bytes,
// gpu_peak_bytes, pool_peak_bytes ("pool=bytes;..."), feasible, reason.
std::string SweepCsv(const SweepSpec& spec, std::vector<SweepRow> rows);
Status WriteTextFile(const std::string& path, const std::string& text);

// A parsed sweep CSV (any of the above), for merge, tables and plots.
struct CsvTable {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  int Column(const std::string& name) const;  // -1 when absent
};
StatusOr<CsvTable> ParseCsv(const std::string& text, const std::string& origin);
std::string CsvToText(const CsvTable& table);

// Joins the slices of one sweep: headers must match, run_count must agree, and the union must
// hold every run index 0..run_count-1 exactly once. Rows come out sorted by run index.
StatusOr<CsvTable> MergeCsvs(const std::vector<std::string>& paths);

// The `top` fastest feasible runs, with what each changes from the base, and a count of
// infeasible runs by reason.
std::string RankedTable(const CsvTable& table, int top);

// Writes a PNG with gnuplot (a subprocess): iteration time of every feasible run ranked, and one
// panel per knob column (iteration time against the knob's values). Unavailable when gnuplot is
// not installed (scripts/setup.sh installs gnuplot-nox).
Status PlotSweep(const CsvTable& table, const std::string& title, const std::string& png_path);

}  // namespace tierflow::sweep
