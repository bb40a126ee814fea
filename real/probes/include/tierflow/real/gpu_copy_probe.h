// The copies of GPU 0 as `tierflow probe copy --compute cuda` times them, with no CUDA type in
// sight: the CLI calls this in every build. With the GPU probes (the CUDA toolkit and NCCL) it is
// gpu_probes.h's ProbeGpuCopies on a context of GPU 0; without, Unavailable, naming what the build
// lacks (real/probes/gpu_copy_probe_unavailable.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tierflow/core/status.h"
#include "tierflow/core/trace_record.h"

namespace tierflow::real {

// Host-to-device and device-to-host copies of each size in `sizes`, from pinned and pageable
// memory, `repetitions` each (more for small ones); `progress` after each point. Unavailable
// when GPU 0 cannot be opened, or the build has no GPU probes.
StatusOr<std::vector<TraceRecord>> ProbeGpuZeroCopies(const std::vector<int64_t>& sizes, int32_t repetitions,
                                                      const std::function<void(const std::string&)>& progress);

}  // namespace tierflow::real
