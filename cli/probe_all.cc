// `tierflow probe all` (probe.h): the probe campaign — each disk alone per op and with reader
// and writer streams, all disks at once, the host probes, the I/O path's load on the cores — with
// the compute probe sampled between the steps, in a bounded time, one records file each.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <map>
#include <tuple>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command.h"
#include "inputs.h"
#include "tierflow/core/files.h"
#include "tierflow/core/text.h"
#include "tierflow/core/units.h"
#include "tierflow/policies/policy.h"
#include "tierflow/real/collective_probe.h"
#include "tierflow/real/disk_probe.h"
#include "tierflow/real/host_probes.h"
#include "tierflow/real/io_memory.h"
#include "tierflow/real/probe_campaign.h"
#include "tierflow/real/storage.h"

#include "probe.h"

namespace tierflow::cli::probe {

namespace {

namespace fs = std::filesystem;

using real::ProbeStep;

// The campaign of one `probe all`: checked and laid out in steps before anything is measured
// (Prepare), announced with its expected time (Announce), then run step by step (Run). Its steps
// refer to its options, so it stays where it was made.
class Campaign {
 public:
  explicit Campaign(const AllArgs& a) : a_(a), host_(a.host), several_(a.dirs.size() > 1) {}
  Campaign(const Campaign&) = delete;
  Campaign& operator=(const Campaign&) = delete;

  // Everything is checked before anything is measured (or created).
  Status Prepare() {
    std::error_code ec;
    if (a_.host.compute != "cpu" && a_.host.compute != "cuda") {
      return InvalidArgument("compute device " + Quoted(a_.host.compute) + " (known: cpu, cuda)");
    }
    for (const std::string& dir : a_.dirs) {
      if (!fs::is_directory(dir, ec)) return InvalidArgument("--dir '" + dir + "': not a directory");
    }
    TF_ASSIGN_OR_RETURN(locks_, LockDirs(a_.dirs, "--dir", false,
                                         {{"-o", a_.out, PathUse::kWritesIn}, {"--scenario", a_.host.scenario, PathUse::kReads}}));
    TF_RETURN_IF_ERROR(DiskOptions());
    TF_ASSIGN_OR_RETURN(compute_scenario_, ComputeScenario(a_.host.scenario, a_.host.sets));
    TF_RETURN_IF_ERROR(real::CheckDiskProbeOptions(disk_).WithContext("probe all"));
    fs::create_directories(a_.out, ec);
    if (ec) return InvalidArgument("-o '" + a_.out + "': cannot create the directory (" + ec.message() + ")");
    real::DiskCampaign disk = real::MakeDiskCampaign(disk_, a_.dirs);
    steps_ = std::move(disk.steps);
    disk_points_ = disk.points;
    HostSteps();
    SampleComputeBetween();
    return Status::Ok();
  }

  // What it will measure and for about how long.
  Status Announce();
  Status Run();

 private:
  static StatusOr<int64_t> Bytes(const std::string& s) { return ParseBytes(s, true); }

  // The disk probe's options (real::MakeDiskCampaign makes its steps of them).
  Status DiskOptions() {
    disk_.dirs = a_.dirs;
    TF_ASSIGN_OR_RETURN(disk_.block_bytes, ParseList<int64_t>(a_.disk_sizes, Bytes));
    TF_ASSIGN_OR_RETURN(disk_.queue_depths, ParseList<int32_t>(a_.disk_qds, ParseInt));
    disk_.file_bytes = int64_t{512} << 20;
    disk_.duration_s = a_.disk_duration_s;
    disk_.warmup_s = 0.1;
    disk_.repetitions = a_.disk_reps;
    disk_.passes = a_.disk_passes;
    disk_.backend = a_.backend;
    return Status::Ok();
  }

  // The host probes; then the I/O path's load on the cores, on the first directory's disk (with
  // two, also a reader on the first beside a writer on the second): compute alone and beside each
  // stream, windows three disk repetitions long, two rounds at most (an emulated GPU only: its
  // compute is what shares the cores with the I/O path).
  void HostSteps() {
    for (const auto& [file, kind] : {std::pair{"copy", HostProbe::kCopy}, {"optimizer", HostProbe::kOptimizer},
                                      {"memory", HostProbe::kMemory}, {"dispatch", HostProbe::kDispatch}}) {
      const HostProbe which = kind;  // a structured binding is not captured before clang 16
      steps_.push_back({file, file, [this, which](const real::HostProbeOptions& o) { return RunHostProbe(which, host_, o); }});
    }
    io_cpu_ = host_.compute == "cpu";
    host_.io.dir = a_.dirs.front();
    if (several_) {
      host_.io.split_dir = a_.dirs[1];
      host_.io.streams.push_back(kSplitStream);
    }
    host_.io.backend = a_.backend;
    host_.io.window_s = std::max(0.2, 3 * a_.disk_duration_s);
    io_cpu_rounds_ = std::min(host_.reps, 2);
    io_cpu_points_ = io_cpu_ ? static_cast<double>(io_cpu_rounds_) * static_cast<double>(host_.io.streams.size()) : 0.0;
    // Its read and write streams run alone for a window too (real::ProbeIoCpu).
    const auto io_alone = std::count_if(host_.io.streams.begin(), host_.io.streams.end(),
                                        [](const real::IoCpuProbeOptions::Stream& s) { return s.op == "read" || s.op == "write"; });
    io_cpu_s_ = io_cpu_ ? io_cpu_points_ * (2 * host_.io.window_s + 0.2) +
                              static_cast<double>(io_cpu_rounds_ * io_alone) * (host_.io.window_s + 0.1)
                        : 0.0;
    if (!io_cpu_) return;
    steps_.push_back({"io_cpu", "io-cpu", [this](const real::HostProbeOptions& o) {
                        real::HostProbeOptions rounds = o;
                        rounds.repetitions = io_cpu_rounds_;
                        return RunHostProbe(HostProbe::kIoCpu, host_, rounds);
                      }});
  }

  // Compute is sampled all along, not in one go: one repetition of every probed shape before the
  // first step and after each (14 with two directories). On a shared VM the speed of a
  // two-thread layer halves and comes back in spells of seconds to minutes (measured here: one
  // probe at 26 GFLOP/s and the next, 90 s later, at 13), so a probe taken in one go measures
  // the spell it fell in; samples spread over the whole probe measure the machine's mix, which
  // is what the runs that follow see on average. Calibrate pools them into each point's trimmed
  // mean.
  void SampleComputeBetween() {
    slices_ = static_cast<int32_t>(steps_.size()) + 1;
    steps_ = real::InterleaveSamples(std::move(steps_), [this](int32_t k, int32_t n) -> ProbeStep {
      return {"compute", fmt::format("compute {} of {}", k + 1, n), [this, k](const real::HostProbeOptions& o) -> StatusOr<std::vector<TraceRecord>> {
                real::HostProbeOptions one = o;
                one.repetitions = 1;
                TF_ASSIGN_OR_RETURN(std::vector<TraceRecord> r, ProbeComputeOf(compute_scenario_, one, host_.threads));
                for (TraceRecord& x : r) x.iteration = k;
                return r;
              }};
    });
  }

  const AllArgs& a_;
  HostArgs host_;
  const bool several_;
  std::vector<real::DirLock> locks_;
  policies::Scenario compute_scenario_;
  real::DiskProbeOptions disk_;
  std::vector<ProbeStep> steps_;
  bool io_cpu_ = false;
  int32_t io_cpu_rounds_ = 0;
  double io_cpu_points_ = 0, io_cpu_s_ = 0;
  int32_t slices_ = 0;
  double disk_points_ = 0, host_points_ = 0;  // progress steps (Announce)
};

Status Campaign::Announce() {
  const auto& t = compute_scenario_.training;
  std::printf("# tierflow probe all: %zu disk dir(s); gpu0 on %s; compute on %s (batch %lld, sequence %lld and shorter); "
              "records -> %s/\n",
              a_.dirs.size(), a_.host.compute == "cpu" ? "the CPU (emulated)" : "GPU 0 (cuda)", compute_scenario_.model.name.c_str(),
              static_cast<long long>(t.micro_batch_size), static_cast<long long>(t.sequence_length), a_.out.c_str());
  const double point_s = disk_.warmup_s + disk_.repetitions * disk_.duration_s;
  std::printf("# disk: %.0f measurements (points x passes) of %.1f s each, one directory at a time%s (about %.0f s, and the syncs after the points that wrote); the host probes take about "
              "%.0f s, compute sampled %d times in between\n",
              disk_points_, point_s, several_ ? ", then all at once" : "", disk_points_ * (point_s + 0.02), 20 + io_cpu_s_, slices_);
  // The fits and the simulator share a device fairly between streams; a scheduler that does not
  // is worth knowing before the profile is trusted for schedules that overlap streams on one disk.
  for (size_t i = 0; i < a_.dirs.size(); ++i) {
    const std::string note = real::IoSchedulerNote("nvme" + std::to_string(i), a_.dirs[i]);
    if (!note.empty()) std::printf("# %s\n", note.c_str());
  }
  if (const std::string note = real::HugePageNote(real::TransparentHugePageMode()); !note.empty()) std::printf("# %s\n", note.c_str());
  std::fflush(stdout);
  // Progress in points: disk points, then each host probe's reports (host_probes.h: one per copy
  // size and kind, per compute repetition with its warm-up and shape, per optimizer count and
  // thread count, per memory thread count).
  TF_ASSIGN_OR_RETURN(std::vector<int64_t> copy_sizes, ParseList<int64_t>(host_.sizes, Bytes));
  TF_ASSIGN_OR_RETURN(std::vector<int64_t> counts, ParseList<int64_t>(host_.elements, Bytes));
  const double threads = host_.threads > 0 ? host_.threads : std::max(1u, std::thread::hardware_concurrency());
  // A compute slice reports a warm-up and a repetition per probed sequence length.
  const double compute_points = slices_ * 2.0 * static_cast<double>(ProbedSequences(t.sequence_length).size());
  host_points_ = 2.0 * static_cast<double>(copy_sizes.size()) + compute_points + static_cast<double>(counts.size()) * threads + threads + 1 +
                 io_cpu_points_;
  return Status::Ok();
}

// The steps, through real::RunProbeCampaign (a probe stopped part-way leaves what it measured),
// each reported as it ends.
Status Campaign::Run() {
  Progress progress("probing", disk_points_ + host_points_);
  double done = 0;
  const double t0 = real::MonotonicSeconds();
  auto files = real::RunProbeCampaign(
      steps_, a_.out, [&] { return HostOptions(host_, &progress, &done); },
      [&](const ProbeStep& step, size_t records, double seconds) {
        progress.Update(done);
        progress.Finish();
        std::printf("  %-20s %6zu records  %6.1f s\n", step.label.c_str(), records, seconds);
        std::fflush(stdout);
      });
  progress.Update(done);  // as far as it got, a failed step's points included
  progress.Finish();
  std::error_code ec;
  for (const std::string& dir : a_.dirs) fs::remove(real::ProbeFilePath(dir), ec);  // kept between the steps
  TF_RETURN_IF_ERROR(files.status());
  for (const auto& [name, records] : *files) {
    std::printf("  %-10s %6zu records -> %s\n", name.c_str(), records, real::ProbeRecordsPath(a_.out, name).c_str());
  }
  std::printf("  %-10s skipped: measure it across ranks with `mpirun -np N tierflow probe collective --trace %s/collective.jsonl`\n",
              "collective", a_.out.c_str());
  std::printf("# done in %.1f s; next: tierflow calibrate %s -o profile.yaml\n", real::MonotonicSeconds() - t0, a_.out.c_str());
  return Status::Ok();
}

}  // namespace

Status RunProbeAll(const AllArgs& a) {
  Campaign campaign(a);
  TF_RETURN_IF_ERROR(campaign.Prepare());
  TF_RETURN_IF_ERROR(campaign.Announce());
  return campaign.Run();
}

}  // namespace tierflow::cli::probe
