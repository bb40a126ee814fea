// A build without the CUDA toolkit: `--compute cuda` is Unavailable, said by MakeComputeDevice
// (cpu_device.cc), which links this instead of cuda_device.cc.
#include "cuda_device.h"

namespace tierflow::real {

StatusOr<std::unique_ptr<ComputeDevice>> MakeCudaDevice(const TrainConfig& /*config*/, int /*local_rank*/) {
  return Unavailable("this build has no CUDA back-end (build with the CUDA toolkit)");
}

}  // namespace tierflow::real
