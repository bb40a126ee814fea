// The nccl back-end of a build without NCCL (collective.h): chosen at link time, in place of
// nccl_collective.cc.
#include "tierflow/real/collective.h"

namespace tierflow::real {

bool HaveNccl() { return false; }

StatusOr<std::unique_ptr<Collective>> OpenNcclCollective(Collective& /*bootstrap*/, int /*gpu*/, bool /*nccls_own_sums*/) {
  return Unavailable("collective back-end 'nccl': this build has no NCCL (it comes with the CUDA toolkit: build again where CMake finds it)");
}

StatusOr<std::unique_ptr<DeviceMemory>> OpenDeviceMemory(const Collective& collective) {
  return InvalidArgument("GPU memory of collective back-end '" + std::string(collective.backend()) + "': this build has no NCCL");
}

}  // namespace tierflow::real
