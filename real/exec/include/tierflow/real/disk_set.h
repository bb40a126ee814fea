// The disk set of a real run: which directory stands for each of the schedule's storage devices
// (`tierflow run SCENARIO --disk DIR [--disk DIR2 ...]` maps nvme0, nvme1, ..., then remote0, ...
// to the --disk directories in order; `--disk NAME=DIR` names one; `--disk-root DIR` gives each
// the rest a subdirectory), and the checks that run before any training starts, so that a wrong
// --disk is one clear error naming the directory and the rule instead of a failure mid-run.
//
// The rules, each checked on the real file system:
//  - one directory per storage device of the schedule (NVMe devices and remote tiers), no fewer
//    and no more (DiskDirsForSchedule);
//  - each directory exists, is a directory, and is writable — checked with access(W_OK) and by
//    really creating, writing and removing a probe file, because as root (CI, this machine)
//    permission bits do not stop writes but a read-only or pseudo file system still does;
//  - no directory given twice (compared after realpath, so a symlink or "a/../a" is caught);
//  - enough free space: statvfs f_bavail * f_frsize >= the bytes the run stores there, and when
//    several directories share one file system, >= the sum of what they store.
//
// Thread safety: free functions without shared state. The checks create and remove a file named
// `.tierflow-disk-probe-<pid>` in each directory; do not run two checks of one directory at once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tierflow/core/schedule.h"
#include "tierflow/core/status.h"

namespace tierflow::real {

struct DiskDir {
  std::string device;          // the schedule's device: "nvme0", "nvme1", ...
  std::string dir;             // the --disk directory as the user gave it
  int64_t required_bytes = 0;  // what the run stores on this device; the caller fills it in
};

// The schedule's storage devices — kNvme in natural name order (nvme0, nvme1, ..., nvme10; a
// device file may list them in any order), then kRemote alike (remote0, ...) — each with its
// directory, required_bytes 0. `dirs` are `tierflow run --disk` values: "NAME=DIR" gives device
// NAME its directory; a plain "DIR" goes to the next device, in that order, that has none; with
// `root`, every device still without one gets root/NAME. InvalidArgument: a NAME the schedule does
// not have, or given twice; a device left without a directory; a directory left without a device.
StatusOr<std::vector<DiskDir>> DiskDirsForSchedule(const Schedule& schedule, const std::vector<std::string>& dirs,
                                                   const std::string& root = "");

// Creates the root/NAME directories DiskDirsForSchedule chose under `root` (none when root is
// empty). NotFound or InvalidArgument when root is missing or not a directory.
Status MakeRootDirs(const std::vector<DiskDir>& disks, const std::string& root);

// Checks every rule above on `disks` in order and returns the first broken one, as a Status whose
// message starts with "--disk 'DIR' (nvmeN): " (NotFound: missing; InvalidArgument: not a
// directory, or given twice; FailedPrecondition: not writable; ResourceExhausted: too little free
// space, with the needed and the free bytes). OK when every directory can hold its share.
Status CheckDiskDirs(const std::vector<DiskDir>& disks);

// One directory's writability: access(W_OK), then create (O_CREAT | O_EXCL), write one byte to,
// and remove a probe file in it. Requires `dir` to be an existing directory. Exposed for tests.
Status ProbeWritable(const std::string& dir);

}  // namespace tierflow::real
