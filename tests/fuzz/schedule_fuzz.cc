// Fuzz target: schedule files (ScheduleFromJson parses and validates). What it accepts must write
// back and read again to the same bytes: the schedule is the contract `sim` and `run` share.
#include <string>

#include "fuzz_target.h"
#include "tierflow/core/schedule.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto schedule = tierflow::ScheduleFromJson(tierflow::fuzz::Bytes(data, size));
  if (!schedule.ok()) return 0;
  const std::string written = tierflow::ScheduleToJson(*schedule);
  auto again = tierflow::ScheduleFromJson(written);
  if (!again.ok()) tierflow::fuzz::Violation("an accepted schedule, written back, is refused: " + again.status().message());
  if (tierflow::ScheduleToJson(*again) != written) tierflow::fuzz::Violation("an accepted schedule does not write back byte for byte");
  return 0;
}
