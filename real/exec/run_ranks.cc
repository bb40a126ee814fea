// What a run does with its ranks (run.h, docs/executor.md "Many ranks"), beyond running its
// part: the result gathered from every rank at the end.
#include "run.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace tierflow::real::exec {

StatusOr<std::vector<float>> Run::GatherModel(const std::vector<float>& local) {
  const int ranks = comm_->ranks();
  const int64_t n = space_.local_total();
  std::vector<float> all(static_cast<size_t>(n * ranks));
  TF_RETURN_IF_ERROR(Complete(comm_->AllGather(local.data(), all.data(), n, ElementType::kFloat32)));
  std::vector<float> master(static_cast<size_t>(trainer_.layout().total));
  for (const RankSpace::Unit& u : space_.units()) {
    for (int q = 0; q < ranks; ++q) {
      std::copy_n(all.data() + q * n + u.local, u.part, master.data() + u.global + q * u.part);
    }
  }
  return master;
}

Status Run::GatherRanks() {
  const int ranks = comm_->ranks();
  TF_ASSIGN_OR_RETURN(result_.master, GatherModel(result_.master));
  // The loss of each iteration: every rank's sum over its micro-steps, added in rank order.
  const auto n = static_cast<int64_t>(loss_sums_.size());
  std::vector<double> sums(static_cast<size_t>(n * ranks));
  TF_RETURN_IF_ERROR(Complete(comm_->AllGather(loss_sums_.data(), sums.data(), 2 * n, ElementType::kFloat32)));  // doubles as words
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0;
    for (int q = 0; q < ranks; ++q) sum += sums[static_cast<size_t>(q * n + i)];
    result_.loss[static_cast<size_t>(i)] = sum / (static_cast<double>(micro_steps_) * ranks);
  }
  // The instances every rank executed.
  std::vector<int64_t> tasks(static_cast<size_t>(ranks));
  TF_RETURN_IF_ERROR(Complete(comm_->AllGather(&result_.tasks, tasks.data(), 2, ElementType::kFloat32)));  // an int64 as 2 words
  result_.tasks = 0;
  for (const int64_t n : tasks) result_.tasks += n;
  // Every rank's trace records, rank after rank, as JSON lines.
  std::string mine;
  for (const TraceRecord& r : result_.records) mine += TraceRecordToJson(r) + "\n";
  TF_ASSIGN_OR_RETURN(const std::vector<std::string> texts, GatherText(mine));
  std::vector<TraceRecord> records;
  for (const std::string& text : texts) {
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      if (line.empty()) continue;
      TF_ASSIGN_OR_RETURN(TraceRecord r, TraceRecordFromJson(line));
      records.push_back(std::move(r));
    }
  }
  result_.records = std::move(records);
  return GatherFigures();
}

// Each rank's I/O bytes, GPU memory, host-pool peak, host name and pool peaks (by pool name), into the result:
// the I/O summed, every rank's pools (RankFigures; the executor maps them onto the whole
// schedule's pools), the ranks grouped into nodes by host name in rank order.
Status Run::GatherFigures() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "?");
  int64_t host_pools = 0;
  for (size_t p = 0; p < s_.pools().size(); ++p) {
    if (s_.devices()[static_cast<size_t>(s_.pools()[p].device)].kind == DeviceKind::kHost) host_pools += result_.pool_peak_bytes[p];
  }
  std::ostringstream mine;
  mine << result_.direct_io_bytes << ' ' << result_.buffered_io_bytes << ' ' << result_.gpu_memory.allocated << ' ' << result_.gpu_memory.reserved
       << ' ' << host_pools << ' ' << host << '\n';
  for (size_t p = 0; p < s_.pools().size(); ++p) mine << result_.pool_peak_bytes[p] << ' ' << s_.pools()[p].name << '\n';
  TF_ASSIGN_OR_RETURN(const std::vector<std::string> texts, GatherText(mine.str()));
  result_.direct_io_bytes = result_.buffered_io_bytes = 0;
  result_.ranks.clear();
  result_.pool_peaks.clear();
  std::vector<std::string> hosts;
  for (size_t q = 0; q < texts.size(); ++q) {
    std::istringstream in(texts[q]);
    RunResult::RankFigures f;
    f.rank = static_cast<int32_t>(q);
    std::string name;
    in >> f.direct_io_bytes >> f.buffered_io_bytes >> f.gpu_memory.allocated >> f.gpu_memory.reserved >> f.host_pool_peak_bytes >> name;
    const auto at = std::find(hosts.begin(), hosts.end(), name);
    f.node = static_cast<int32_t>(at - hosts.begin());
    if (at == hosts.end()) hosts.push_back(name);
    for (int64_t peak = 0; in >> peak >> name;) result_.pool_peaks.emplace_back(name, peak);
    if (!in.eof()) return Internal("rank " + std::to_string(q) + "'s figures: unreadable");
    result_.direct_io_bytes += f.direct_io_bytes;
    result_.buffered_io_bytes += f.buffered_io_bytes;
    result_.ranks.push_back(f);
  }
  return Status::Ok();
}

}  // namespace tierflow::real::exec
