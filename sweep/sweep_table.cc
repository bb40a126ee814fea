// The sweep CSV: writing, parsing, merging shards, the ranked table and the gnuplot PNG.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "tierflow/core/files.h"
#include "tierflow/core/units.h"
#include "tierflow/sweep/sweep.h"

namespace tierflow::sweep {
namespace {

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string Num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

bool ParseNumber(const std::string& s, double* v) {
  if (s.empty()) return false;
  char* end = nullptr;
  *v = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(*v);
}

}  // namespace

std::string SweepCsv(const SweepSpec& spec, std::vector<SweepRow> rows) {
  std::sort(rows.begin(), rows.end(), [](const SweepRow& a, const SweepRow& b) { return a.run.index < b.run.index; });
  std::string out = "run,run_count";
  for (const auto& k : spec.keys) out += "," + CsvField(k);
  out += ",policy,iteration_s,forward_s,backward_s,step_s,host_peak_bytes,gpu_peak_bytes,pool_peak_bytes,feasible,reason\n";
  for (const SweepRow& r : rows) {
    out += std::to_string(r.run.index) + "," + std::to_string(spec.runs.size());
    for (const auto& k : spec.keys) {
      std::string value;  // empty: this run leaves the key as in the base
      for (const auto& [rk, rv] : r.run.settings) {
        if (rk == k) value = rv;
      }
      out += "," + CsvField(value);
    }
    const Evaluation& e = r.eval;
    std::string pools;
    for (const auto& [name, bytes] : e.pool_peak_bytes) pools += (pools.empty() ? "" : ";") + name + "=" + std::to_string(bytes);
    out += "," + CsvField(e.policy);
    if (e.feasible || e.iteration_s > 0) {  // a run over a memory budget still has its figures
      out += "," + Num(e.iteration_s) + "," + Num(e.forward_s) + "," + Num(e.backward_s) + "," + Num(e.step_s) + "," +
             std::to_string(e.host_peak_bytes) + "," + std::to_string(e.gpu_peak_bytes);
    } else {
      out += ",,,,,,";
    }
    out += "," + CsvField(pools) + "," + (e.feasible ? "true" : "false") + "," + CsvField(e.reason) + "\n";
  }
  return out;
}

Status WriteTextFile(const std::string& path, const std::string& text) { return WriteFileAtomically(path, text); }

int CsvTable::Column(const std::string& name) const {
  for (size_t i = 0; i < header.size(); ++i) {
    if (header[i] == name) return static_cast<int>(i);
  }
  return -1;
}

StatusOr<CsvTable> ParseCsv(const std::string& text, const std::string& origin) {
  CsvTable t;
  std::vector<std::string> record;
  std::string field;
  bool quoted = false, any = false;
  int64_t line = 1;
  auto end_record = [&]() -> Status {
    record.push_back(field);
    field.clear();
    if (t.header.empty()) {
      t.header = std::move(record);
    } else if (record.size() != t.header.size()) {
      return InvalidArgument(origin + ":" + std::to_string(line) + ": " + std::to_string(record.size()) +
                             " fields, the header has " + std::to_string(t.header.size()));
    } else {
      t.rows.push_back(std::move(record));
    }
    record.clear();
    any = false;
    return Status::Ok();
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        if (c == '\n') ++line;
        field += c;
      }
      continue;
    }
    if (c == '"') {
      quoted = any = true;
    } else if (c == ',') {
      record.push_back(field);
      field.clear();
      any = true;
    } else if (c == '\n') {
      TF_RETURN_IF_ERROR(end_record());
      ++line;
    } else if (c != '\r') {
      field += c;
      any = true;
    }
  }
  if (quoted) return InvalidArgument(origin + ": unterminated quoted field");
  if (any || !field.empty()) TF_RETURN_IF_ERROR(end_record());
  if (t.header.empty()) return InvalidArgument(origin + ": empty file (no header)");
  return t;
}

std::string CsvToText(const CsvTable& table) {
  std::string out;
  auto line = [&](const std::vector<std::string>& r) {
    for (size_t i = 0; i < r.size(); ++i) out += (i ? "," : "") + CsvField(r[i]);
    out += "\n";
  };
  line(table.header);
  for (const auto& r : table.rows) line(r);
  return out;
}

StatusOr<CsvTable> MergeCsvs(const std::vector<std::string>& paths) {
  if (paths.empty()) return InvalidArgument("sweep merge: no CSV files given");
  CsvTable merged;
  int64_t run_count = -1;
  std::map<int64_t, std::string> seen;  // run index -> the file it came from
  for (const std::string& path : paths) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return NotFound("sweep merge: '" + path + "' cannot be opened");
    std::stringstream ss;
    ss << in.rdbuf();
    TF_ASSIGN_OR_RETURN(CsvTable t, ParseCsv(ss.str(), path));
    if (t.Column("run") != 0 || t.Column("run_count") != 1) {
      return InvalidArgument("sweep merge: '" + path + "' is not a sweep CSV (its first columns are not run,run_count)");
    }
    if (merged.header.empty()) {
      merged.header = t.header;
    } else if (t.header != merged.header) {
      return InvalidArgument("sweep merge: '" + path + "' has other columns than '" + paths.front() +
                             "' (slices of different sweeps?)");
    }
    for (auto& row : t.rows) {
      char* end = nullptr;
      const int64_t index = std::strtoll(row[0].c_str(), &end, 10);
      const int64_t count = std::strtoll(row[1].c_str(), nullptr, 10);
      if (*end != '\0' || row[0].empty() || index < 0) return InvalidArgument("sweep merge: '" + path + "': bad run index '" + row[0] + "'");
      if (run_count >= 0 && count != run_count) {
        return InvalidArgument("sweep merge: '" + path + "' is a slice of a sweep of " + row[1] + " runs, not " +
                               std::to_string(run_count));
      }
      run_count = count;
      if (index >= run_count) return InvalidArgument("sweep merge: '" + path + "': run " + row[0] + " >= run_count " + row[1]);
      auto [it, fresh] = seen.emplace(index, path);
      if (!fresh) return InvalidArgument("sweep merge: run " + row[0] + " is in both '" + it->second + "' and '" + path + "'");
      merged.rows.push_back(std::move(row));
    }
  }
  if (run_count < 0) return InvalidArgument("sweep merge: the files hold no rows");
  if (static_cast<int64_t>(seen.size()) != run_count) {
    std::string missing;
    int shown = 0;
    for (int64_t i = 0; i < run_count && shown < 5; ++i) {
      if (!seen.count(i)) {
        missing += (shown++ ? ", " : "") + std::to_string(i);
      }
    }
    return InvalidArgument("sweep merge: " + std::to_string(run_count - static_cast<int64_t>(seen.size())) + " of " +
                           std::to_string(run_count) + " runs are missing (first: " + missing + "); a slice is absent");
  }
  std::sort(merged.rows.begin(), merged.rows.end(), [](const auto& a, const auto& b) {
    return std::strtoll(a[0].c_str(), nullptr, 10) < std::strtoll(b[0].c_str(), nullptr, 10);
  });
  return merged;
}

namespace {
// Knob columns: between run_count and policy.
std::vector<int> KnobColumns(const CsvTable& t) {
  std::vector<int> out;
  const int policy = t.Column("policy");
  for (int c = 2; c < policy; ++c) out.push_back(c);
  return out;
}
}  // namespace

std::string RankedTable(const CsvTable& t, int top) {
  const int it = t.Column("iteration_s"), fw = t.Column("forward_s"), bw = t.Column("backward_s"),
            st = t.Column("step_s"), hp = t.Column("host_peak_bytes"), gp = t.Column("gpu_peak_bytes"),
            fe = t.Column("feasible"), re = t.Column("reason");
  if (it < 0 || fe < 0 || re < 0) return "not a sweep CSV: no iteration_s, feasible or reason column\n";
  std::vector<std::pair<double, size_t>> feasible;
  std::map<std::string, int64_t> reasons;
  for (size_t i = 0; i < t.rows.size(); ++i) {
    double v = 0;
    if (t.rows[i][fe] == "true" && ParseNumber(t.rows[i][it], &v)) {
      feasible.emplace_back(v, i);
    } else {
      std::string r = t.rows[i][re];
      r = r.substr(0, r.find('\n'));
      if (r.size() > 100) r = r.substr(0, 97) + "...";
      ++reasons[r];
    }
  }
  std::stable_sort(feasible.begin(), feasible.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string out;
  char line[512];
  std::snprintf(line, sizeof(line), "%zu runs: %zu feasible, %zu not\n", t.rows.size(), feasible.size(),
                t.rows.size() - feasible.size());
  out += line;
  if (!feasible.empty()) {
    std::snprintf(line, sizeof(line), "\n%4s %6s %11s %10s %10s %10s %11s %11s  %s\n", "rank", "run", "iteration",
                  "forward", "backward", "step", "host peak", "gpu peak", "changes from the base");
    out += line;
    const double best = feasible.front().first;
    for (size_t k = 0; k < feasible.size() && k < static_cast<size_t>(top); ++k) {
      const auto& row = t.rows[feasible[k].second];
      auto dur = [&](int c) {
        double v = 0;
        return c >= 0 && ParseNumber(row[c], &v) ? FormatDuration(v) : std::string("-");
      };
      auto bytes = [&](int c) {
        double v = 0;
        return c >= 0 && ParseNumber(row[c], &v) ? FormatBytes(v) : std::string("-");
      };
      std::string changes;
      for (int c : KnobColumns(t)) {
        if (!row[c].empty()) changes += (changes.empty() ? "" : " ") + t.header[c] + "=" + row[c];
      }
      if (changes.empty()) changes = "(the base)";
      std::snprintf(line, sizeof(line), "%4zu %6s %11s %10s %10s %10s %11s %11s  %s\n", k + 1, row[0].c_str(),
                    dur(it).c_str(), dur(fw).c_str(), dur(bw).c_str(), dur(st).c_str(), bytes(hp).c_str(),
                    bytes(gp).c_str(), changes.c_str());
      out += line;
    }
    const double worst = feasible.back().first;
    std::snprintf(line, sizeof(line), "\nfastest %s, slowest feasible %s (%.2fx)\n", FormatDuration(best).c_str(),
                  FormatDuration(worst).c_str(), best > 0 ? worst / best : 0.0);
    out += line;
  }
  if (!reasons.empty()) {
    out += "\nnot feasible:\n";
    std::vector<std::pair<int64_t, std::string>> by_count;
    for (const auto& [r, n] : reasons) by_count.emplace_back(n, r);
    std::stable_sort(by_count.begin(), by_count.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (const auto& [n, r] : by_count) {
      std::snprintf(line, sizeof(line), "  %6lld  %s\n", static_cast<long long>(n), r.c_str());
      out += line;
    }
  }
  return out;
}

Status PlotSweep(const CsvTable& t, const std::string& title, const std::string& png_path) {
  const int it = t.Column("iteration_s"), fe = t.Column("feasible");
  if (it < 0 || fe < 0) return InvalidArgument("plot: not a sweep CSV (no iteration_s or feasible column)");
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    return Unavailable("plot: gnuplot is not installed (apt-get install gnuplot-nox, or scripts/setup.sh)");
  }
  std::vector<double> ranked;
  for (const auto& row : t.rows) {
    double v = 0;
    if (row[fe] == "true" && ParseNumber(row[it], &v)) ranked.push_back(v);
  }
  if (ranked.empty()) return FailedPrecondition("plot: no feasible run to plot");
  std::sort(ranked.begin(), ranked.end());
  // Knob panels: each knob column with at least two values (at most 8 panels).
  struct Panel {
    std::string key;
    std::vector<std::string> values;               // x positions, in order
    std::vector<std::pair<double, double>> points;  // (x position, iteration_s)
  };
  std::vector<Panel> panels;
  for (int c : KnobColumns(t)) {
    Panel p;
    p.key = t.header[c];
    std::set<std::string> distinct;
    for (const auto& row : t.rows) distinct.insert(row[c].empty() ? "(base)" : row[c]);
    if (distinct.size() < 2) continue;
    p.values.assign(distinct.begin(), distinct.end());
    bool numeric = true;
    for (const auto& v : p.values) {
      double d = 0;
      numeric = numeric && ParseNumber(v, &d);
    }
    if (numeric) {
      std::sort(p.values.begin(), p.values.end(),
                [](const std::string& a, const std::string& b) { return std::strtod(a.c_str(), nullptr) < std::strtod(b.c_str(), nullptr); });
    }
    for (const auto& row : t.rows) {
      double v = 0;
      if (row[fe] != "true" || !ParseNumber(row[it], &v)) continue;
      const std::string x = row[c].empty() ? "(base)" : row[c];
      const auto pos = std::find(p.values.begin(), p.values.end(), x) - p.values.begin();
      p.points.emplace_back(static_cast<double>(pos), v);
    }
    panels.push_back(std::move(p));
    if (panels.size() == 8) break;
  }

  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::temp_directory_path(ec);
  std::string data_path = (dir / "tierflow-plot-XXXXXX").string();
  const int fd = ::mkstemp(data_path.data());
  if (fd < 0) return FromErrno(errno, "plot: temporary data file in " + dir.string());
  ::close(fd);
  std::string data;
  char line[128];
  for (size_t i = 0; i < ranked.size(); ++i) {
    std::snprintf(line, sizeof(line), "%zu %.9g\n", i + 1, ranked[i]);
    data += line;
  }
  for (const Panel& p : panels) {
    data += "\n\n";
    for (const auto& [x, y] : p.points) {
      std::snprintf(line, sizeof(line), "%.9g %.9g\n", x, y);
      data += line;
    }
  }
  Status written = WriteTextFile(data_path, data);
  if (!written.ok()) {
    std::filesystem::remove(data_path, ec);
    return written;
  }
  auto quote = [](std::string s) {
    std::string out = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    return out + "\"";
  };
  const size_t n = 1 + panels.size();
  const size_t cols = n == 1 ? 1 : 2;
  const size_t rows = (n + cols - 1) / cols;
  std::string g;
  g += "set terminal pngcairo noenhanced size " + std::to_string(cols * 640) + "," + std::to_string(rows * 400 + 40) +
       " font 'sans,10'\n";
  g += "set output " + quote(png_path) + "\n";
  g += "set multiplot layout " + std::to_string(rows) + "," + std::to_string(cols) + " title " +
       quote(title + " (" + std::to_string(ranked.size()) + " of " + std::to_string(t.rows.size()) + " runs feasible)") +
       "\n";
  g += "set grid\nset key off\nset ylabel 'iteration time (s)'\nset offsets graph 0.02, 0.02, 0.05, 0.05\n";
  g += "set title 'all feasible runs, fastest first'\nset xlabel 'rank'\n";
  g += "plot " + quote(data_path) + " index 0 using 1:2 with linespoints pt 7 ps 0.4 lc rgb '#1f77b4'\n";
  for (size_t k = 0; k < panels.size(); ++k) {
    const Panel& p = panels[k];
    std::string tics;
    for (size_t i = 0; i < p.values.size(); ++i) tics += (i ? ", " : "") + quote(p.values[i]) + " " + std::to_string(i);
    g += "set title " + quote("iteration time by " + p.key) + "\nset xlabel " + quote(p.key) + "\n";
    g += "set xrange [-0.5:" + std::to_string(static_cast<double>(p.values.size()) - 0.5) + "]\n";
    g += "set xtics (" + tics + ")\n";
    // A little horizontal jitter (by row, so the PNG is reproducible) keeps equal runs visible.
    g += "plot " + quote(data_path) + " index " + std::to_string(k + 1) +
         " using ($1 + 0.03*((int($0) % 9) - 4)):2 with points pt 7 ps 0.5 lc rgb '#d62728'\n";
    g += "set xtics autofreq\nset xrange [*:*]\n";
  }
  g += "unset multiplot\n";
  FILE* pipe = ::popen("gnuplot", "w");
  if (!pipe) {
    std::filesystem::remove(data_path, ec);
    return FromErrno(errno, "plot: starting gnuplot");
  }
  std::fwrite(g.data(), 1, g.size(), pipe);
  const int rc = ::pclose(pipe);
  std::filesystem::remove(data_path, ec);
  if (rc != 0) return Internal("plot: gnuplot failed (exit status " + std::to_string(rc) + ") writing '" + png_path + "'");
  return Status::Ok();
}

}  // namespace tierflow::sweep
