// Performance models: pure functions from a piece of work and the hardware to a time or a rate.
// The simulator uses them, calibrate fits their parameters, tests check them in closed form.
// docs/performance-models.md gives every formula.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>

#include "tierflow/core/ops.h"
#include "tierflow/models/hardware.h"

namespace tierflow::models {

// Roofline with a fitted efficiency: max(flops / (peak * eff), bytes / hbm_bw) + overhead, eff
// being the phase's own efficiency where the GPU has one (ComputeEfficiency).
double ComputeTime(const GpuSpec& gpu, double flops, double bytes, Phase phase = Phase::kOther);
double ComputeEfficiency(const GpuSpec& gpu, Phase phase);

// Sustained bandwidth of one stream of requests of `block_bytes` with `queue_depth` in flight.
double DiskReadBandwidth(const NvmeSpec& disk, int64_t block_bytes, int32_t queue_depth);
double DiskWriteBandwidth(const NvmeSpec& disk, int64_t block_bytes, int32_t queue_depth);
// Aggregate device bandwidth when `reads` read streams and `writes` write streams share it
// (each stream gets an equal share); equals the read or write peak when the other count is 0.
double DiskSharedCapacity(const NvmeSpec& disk, int32_t reads, int32_t writes);

// Host<->GPU copy of `bytes` (pinned or pageable), including latency.
double CopyTime(const PcieSpec& pcie, bool host_to_device, int64_t bytes, bool pinned);

enum class Collective { kAllGather, kReduceScatter, kAllReduce };
// Ring alpha-beta: (n-1) * alpha + (n-1)/n * bytes / busbw for all-gather and reduce-scatter
// (bytes = the full gathered size), twice that for all-reduce. 0 when ranks <= 1.
double CollectiveTime(const InterconnectSpec& ic, Collective kind, int64_t bytes, int32_t ranks);

// CPU Adam over `elements` fp32 parameters with `threads` threads: compute-bound per core, and
// bounded by host memory bandwidth at kAdamBytesPerElement bytes moved per element.
inline constexpr double kAdamBytesPerElement = 28.0;  // read p, g, m, v; write p, m, v (fp32)
double AdamTime(const CpuSpec& cpu, int64_t elements, int32_t threads);
// Host conversion (cast or accumulate) of `bytes` with `threads` threads.
double ConvertTime(const CpuSpec& cpu, int64_t bytes, int32_t threads);

}  // namespace tierflow::models
