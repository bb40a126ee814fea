// The nccl back-end of a build without NCCL (collective.h): chosen at link time, in place of
// nccl_collective.cc.
#include "tierflow/real/collective.h"

namespace tierflow::real {

bool HaveNccl() { return false; }

StatusOr<std::unique_ptr<Collective>> OpenNcclCollective(Collective& /*bootstrap*/, int /*gpu*/) {
  return Unavailable("collective back-end 'nccl': this build has no NCCL (it comes with the CUDA toolkit: build again where CMake finds it)");
}

}  // namespace tierflow::real
