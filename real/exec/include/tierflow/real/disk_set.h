// The disk set of a real run: which directory stands for each of the schedule's NVMe devices
// (`tierflow run SCENARIO --disk DIR [--disk DIR2 ...]` maps nvme0, nvme1, ... to the --disk
// directories in order), and the checks that run before any training starts, so that a wrong
// --disk is one clear error naming the directory and the rule instead of a failure mid-run.
//
// The rules, each checked on the real file system:
//  - one --disk per NVMe device of the schedule, no fewer and no more (DiskDirsForSchedule);
//  - no remote device: tierflow run supports local NVMe directories only (DiskDirsForSchedule);
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

// The schedule's devices of kind kNvme in natural name order (nvme0, nvme1, ..., nvme10; a
// device file may list them in any order), matched to `dirs` in order, required_bytes 0.
// Errors (InvalidArgument): fewer or more directories than NVMe devices, and any device of kind
// kRemote ("schedule uses remote device 'remote0'; ...").
StatusOr<std::vector<DiskDir>> DiskDirsForSchedule(const Schedule& schedule,
                                                   const std::vector<std::string>& dirs);

// Checks every rule above on `disks` in order and returns the first broken one, as a Status whose
// message starts with "--disk 'DIR' (nvmeN): " (NotFound: missing; InvalidArgument: not a
// directory, or given twice; FailedPrecondition: not writable; ResourceExhausted: too little free
// space, with the needed and the free bytes). OK when every directory can hold its share.
Status CheckDiskDirs(const std::vector<DiskDir>& disks);

// One directory's writability: access(W_OK), then create (O_CREAT | O_EXCL), write one byte to,
// and remove a probe file in it. Requires `dir` to be an existing directory. Exposed for tests.
Status ProbeWritable(const std::string& dir);

}  // namespace tierflow::real
