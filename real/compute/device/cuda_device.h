// Private to real/compute/device: the GPU device MakeComputeDevice opens for "cuda" — defined by
// cuda_device.cc in a build with the CUDA toolkit, by cuda_device_unavailable.cc (Unavailable,
// saying why) in one without.
#pragma once

#include <memory>

#include "tierflow/real/compute_device.h"

namespace tierflow::real {

StatusOr<std::unique_ptr<ComputeDevice>> MakeCudaDevice(const TrainConfig& config, int local_rank);

}  // namespace tierflow::real
