// fio's JSON output (`fio --output-format=json`) as disk samples for calibration.
//
// Each entry of `jobs[]` is one steady-state sample of the device the caller names. Options come
// from the job's "job options", else from "global options", else fio's defaults: `rw` (read,
// randread -> a read sample; write, randwrite -> write; rw, randrw, readwrite -> mixed), `bs`
// (default 4k; a "read,write" pair takes the first; k/m/g suffixes are powers of 1024, fio's
// default kb_base), `iodepth` (default 1) times `numjobs` (default 1) = requests in flight.
// Rates are read.bw_bytes and write.bw_bytes (bytes/s) of directions whose `runtime` > 0.
// Jobs of one group (`groupid`) ran at the same time, so a group must be one entry
// (stonewall between jobs, or group_reporting); several entries of one group are an error.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tierflow/calibrate/calibrate.h"
#include "tierflow/core/status.h"

namespace tierflow::calibrate {

// `file_name` only names the input in errors ("fio file 'x.json': jobs[1].read.bw_bytes: missing").
StatusOr<std::vector<DiskSample>> DiskSamplesFromFioJson(std::string_view json_text, int32_t device,
                                                         const std::string& file_name);
// Reads `path` and parses it as above.
StatusOr<std::vector<DiskSample>> ReadFioFile(const std::string& path, int32_t device);

}  // namespace tierflow::calibrate
