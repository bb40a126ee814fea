// Probes of a real GPU, writing trace records (source "probe") in the conventions of the host
// probes (host_probes.h), timed on the GPU by events (cuda::Timeline):
//   copies       op h2d/d2h, task "probe.copy.pinned" | "probe.copy.pageable", resource
//                gpu0.h2d/d2h, bytes: cudaMemcpyAsync on the context's copy streams, from
//                cudaMallocHost memory or from pageable memory
//   ops          op compute, task "probe.gpu.<op name>" (compute_ops.h names), resource
//                gpu0.compute, flops and bytes of the op: every op of one decoder layer of the
//                model, forward and backward, in bf16 at batch x seq (the linear projections
//                one by one: "probe.gpu.linear_fwd.q_proj", ...)
//   collectives  op allgather/reducescatter/allreduce, task "probe.nccl.<op>", resource
//                gpu0.coll, bytes per rank
// One record per measured repetition (after one warm-up); `iteration` is the repetition index.
//
// Thread safety: run one probe at a time (they measure the machine).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tierflow/core/status.h"
#include "tierflow/core/trace_record.h"
#include "tierflow/real/cuda_compute.h"
#include "tierflow/real/llama.h"

namespace tierflow::real {

namespace nccl {
class Communicator;
}

struct GpuProbeOptions {
  int32_t repetitions = 5;
  std::function<void(const std::string&)> progress;  // after each point, for progress bars
};

StatusOr<std::vector<TraceRecord>> ProbeGpuCopies(const cuda::Context& ctx, const std::vector<int64_t>& sizes,
                                                  const GpuProbeOptions& options);

StatusOr<std::vector<TraceRecord>> ProbeGpuOps(const cuda::Context& ctx, const LlamaSpec& spec, int64_t batch,
                                               int64_t seq, const GpuProbeOptions& options);

// Sizes are bytes per rank of fp32 data.
StatusOr<std::vector<TraceRecord>> ProbeNccl(const cuda::Context& ctx, nccl::Communicator& comm,
                                             const std::vector<int64_t>& sizes, const GpuProbeOptions& options);

}  // namespace tierflow::real
