// gpu_copy_probe.h in a build without the GPU probes (no CUDA toolkit or no NCCL).
#include "tierflow/real/gpu_copy_probe.h"

namespace tierflow::real {

StatusOr<std::vector<TraceRecord>> ProbeGpuZeroCopies(const std::vector<int64_t>&, int32_t, const std::function<void(const std::string&)>&) {
  return Unavailable("compute device 'cuda': this build has no GPU probes (build with the CUDA toolkit and NCCL)");
}

}  // namespace tierflow::real
