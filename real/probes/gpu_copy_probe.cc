// gpu_copy_probe.h with the GPU probes: ProbeGpuCopies on a context of GPU 0.
#include "tierflow/real/gpu_copy_probe.h"

#include "tierflow/real/cuda_compute.h"
#include "tierflow/real/gpu_probes.h"

namespace tierflow::real {

StatusOr<std::vector<TraceRecord>> ProbeGpuZeroCopies(const std::vector<int64_t>& sizes, int32_t repetitions,
                                                      const std::function<void(const std::string&)>& progress) {
  auto ctx = cuda::Context::Open(0);
  if (!ctx.ok()) return Status(ctx.status().code(), "compute device 'cuda': " + ctx.status().message());
  GpuProbeOptions g;
  g.repetitions = repetitions;
  g.progress = progress;
  return ProbeGpuCopies(**ctx, sizes, g);
}

}  // namespace tierflow::real
