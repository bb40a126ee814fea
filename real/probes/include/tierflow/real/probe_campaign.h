// A probe campaign (`tierflow probe all`, docs/calibration.md): measuring steps run one after
// another, each step's records going to OUT/<file>.jsonl, built from the disk steps every
// campaign makes of its directories and whatever host steps the caller adds.
//
// Thread safety: one campaign per thread; its steps refer to what their closures capture.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tierflow/core/status.h"
#include "tierflow/core/trace_record.h"
#include "tierflow/real/disk_probe.h"
#include "tierflow/real/host_probes.h"

namespace tierflow::real {

struct ProbeStep {
  std::string file;   // its records go to OUT/<file>.jsonl (several steps may share one)
  std::string label;  // what it measures, for the caller to print
  std::function<StatusOr<std::vector<TraceRecord>>(const HostProbeOptions&)> run;
};

// The disk steps of a campaign over `dirs`, with `base`'s block sizes, depths, duration,
// repetitions, passes and back-end (its dirs, ops and streams are the campaign's):
//  - each directory alone, one op of `base.ops` at a time (the fits need one device's model per
//    device), then its reader and writer streams at once (1 MiB, each stream depth 8, 1+1, 2+2
//    and 4+4 streams: calibrate's mixed_streams); its records named nvme<i> after its place in
//    `dirs`, as `run --disk` numbers them;
//  - with several directories, a read and a write window of all at once (1 MiB, depth 8: whether
//    they are one device, calibrate's same_device_as).
// Each directory's probe file is filled once and serves all of its steps: the caller removes
// them (ProbeFilePath) when the campaign ends. `points`: the measurements the steps make (points
// × passes), one progress report each. No directories: no steps.
struct DiskCampaign {
  std::vector<ProbeStep> steps;
  double points = 0;
};
DiskCampaign MakeDiskCampaign(const DiskProbeOptions& base, const std::vector<std::string>& dirs);

// `steps` with `sample(k, n)` before the first and after each: n = steps.size() + 1 samples (a
// probe whose speed drifts on a shared machine, sampled all along instead of in one go).
std::vector<ProbeStep> InterleaveSamples(std::vector<ProbeStep> steps, const std::function<ProbeStep(int32_t k, int32_t n)>& sample);

// Runs `steps` in order into directory `out` (which must exist). Each record file is written
// again as each of its steps ends, so that a campaign stopped part-way leaves what it measured;
// OUT's files of these steps go first, so that what OUT holds is this campaign's alone.
// `options()` gives each step its HostProbeOptions (its progress); `ended(step, records,
// seconds)` follows each step that succeeded. A failing step stops the campaign with its error,
// naming the step and whether the steps before it are in OUT. Returns the records per file.
StatusOr<std::map<std::string, size_t>> RunProbeCampaign(const std::vector<ProbeStep>& steps, const std::string& out,
                                                         const std::function<HostProbeOptions()>& options,
                                                         const std::function<void(const ProbeStep&, size_t records, double seconds)>& ended);

// OUT/<file>.jsonl.
std::string ProbeRecordsPath(const std::string& out, const std::string& file);

}  // namespace tierflow::real
