// A probe campaign (probe_campaign.h).
#include "tierflow/real/probe_campaign.h"

#include <filesystem>
#include <iterator>
#include <utility>

#include "tierflow/real/storage.h"

namespace tierflow::real {
namespace {

// Directory i of `dirs` alone under `options` (one op), its records named nvme<i>.
ProbeStep OneDir(const std::string& label, const std::vector<std::string>& dirs, size_t i, DiskProbeOptions options) {
  options.dirs = {dirs[i]};
  options.device_counts = {1};
  const std::string dir = dirs[i];
  return {"disk", label, [i, dir, options](const HostProbeOptions& o) -> StatusOr<std::vector<TraceRecord>> {
            std::vector<TraceRecord> trace;
            TF_RETURN_IF_ERROR(RunDiskProbe(options, &trace, [&](const DiskProbeResult&, bool) {
                                 if (o.progress) o.progress("disk point");
                               }).status().WithContext("--dir '" + dir + "'"));
            for (TraceRecord& r : trace) r.resource = "nvme" + std::to_string(i) + r.resource.substr(r.resource.find('.'));
            return trace;
          }};
}

}  // namespace

DiskCampaign MakeDiskCampaign(const DiskProbeOptions& base, const std::vector<std::string>& dirs) {
  if (dirs.empty()) return {};
  DiskProbeOptions disk = base;
  disk.dirs = dirs;
  disk.keep_files = true;  // each directory's file is filled once and serves all of its steps
  DiskProbeOptions rw = disk;
  rw.ops = {"rw"};
  rw.block_bytes = {int64_t{1} << 20};
  rw.queue_depths = {8};
  rw.streams = {{1, 1}, {2, 2}, {4, 4}};
  DiskProbeOptions joint = disk;
  joint.block_bytes = {int64_t{1} << 20};
  joint.queue_depths = {8};
  joint.ops = {"read", "write"};
  joint.device_counts = {static_cast<int32_t>(dirs.size())};

  DiskCampaign c;
  for (size_t i = 0; i < dirs.size(); ++i) {
    for (const std::string& op : disk.ops) {
      DiskProbeOptions one = disk;
      one.ops = {op};
      c.steps.push_back(OneDir("disk nvme" + std::to_string(i) + " " + op, dirs, i, one));
    }
    c.steps.push_back(OneDir("disk nvme" + std::to_string(i) + " rw", dirs, i, rw));
  }
  // Progress: each directory alone for each op and for the stream pairs, then all at once.
  DiskProbeOptions one = disk, one_rw = rw;
  one.dirs = one_rw.dirs = {dirs.front()};
  one.device_counts = one_rw.device_counts = {1};
  int64_t points = (DiskProbePoints(one) + DiskProbePoints(one_rw)) * static_cast<int64_t>(dirs.size());
  if (dirs.size() > 1) {
    c.steps.push_back({"disk", "disk all at once", [joint](const HostProbeOptions& o) -> StatusOr<std::vector<TraceRecord>> {
                         std::vector<TraceRecord> trace;
                         TF_RETURN_IF_ERROR(RunDiskProbe(joint, &trace, [&](const DiskProbeResult&, bool) {
                                              if (o.progress) o.progress("disk point (all directories at once)");
                                            }).status().WithContext("all --dir at once"));
                         return trace;
                       }});
    points += DiskProbePoints(joint);
  }
  c.points = static_cast<double>(points) * disk.passes;
  return c;
}

std::vector<ProbeStep> InterleaveSamples(std::vector<ProbeStep> steps, const std::function<ProbeStep(int32_t k, int32_t n)>& sample) {
  const int32_t n = static_cast<int32_t>(steps.size()) + 1;
  std::vector<ProbeStep> out;
  for (int32_t k = 0; k < n; ++k) {
    out.push_back(sample(k, n));
    if (k < n - 1) out.push_back(std::move(steps[static_cast<size_t>(k)]));
  }
  return out;
}

std::string ProbeRecordsPath(const std::string& out, const std::string& file) {
  return (std::filesystem::path(out) / (file + ".jsonl")).string();
}

StatusOr<std::map<std::string, size_t>> RunProbeCampaign(const std::vector<ProbeStep>& steps, const std::string& out,
                                                         const std::function<HostProbeOptions()>& options,
                                                         const std::function<void(const ProbeStep&, size_t, double)>& ended) {
  std::error_code ec;
  for (const ProbeStep& step : steps) std::filesystem::remove(ProbeRecordsPath(out, step.file), ec);
  std::map<std::string, std::vector<TraceRecord>> files;
  for (const ProbeStep& step : steps) {
    const double start = MonotonicSeconds();
    auto records = step.run(options());
    if (!records.ok()) {
      return Status(records.status().code(), "probe all: " + step.label + ": " + records.status().message() +
                                                 (files.empty() ? " (no record file written)"
                                                                : " (the steps before it are in " + out + ": an incomplete probe)"));
    }
    const size_t count = records->size();
    const double seconds = MonotonicSeconds() - start;  // the measuring, not the file's writing
    std::vector<TraceRecord>& all = files[step.file];
    all.insert(all.end(), std::make_move_iterator(records->begin()), std::make_move_iterator(records->end()));
    TF_RETURN_IF_ERROR(WriteTraceFile(ProbeRecordsPath(out, step.file), all));
    if (ended) ended(step, count, seconds);
  }
  std::map<std::string, size_t> counts;
  for (const auto& [file, records] : files) counts[file] = records.size();
  return counts;
}

}  // namespace tierflow::real
