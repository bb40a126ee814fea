// calibrate.h's Calibrate in a build without Eigen 3.3, which the fits need (calibrate/CMakeLists.txt):
// `tierflow calibrate` says so, and every other verb is built as ever.
#include "tierflow/calibrate/calibrate.h"

namespace tierflow::calibrate {

StatusOr<Calibration> Calibrate(const std::vector<TraceRecord>&, const std::vector<DiskSample>&, const models::HardwareSpec&,
                                const CalibrateOptions&) {
  return Unavailable("calibrate: this build has no fits (Eigen 3.3 was not found when it was configured: apt-get install libeigen3-dev)");
}

}  // namespace tierflow::calibrate
