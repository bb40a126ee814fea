// Fuzz target: trace record files (JSON Lines, ReadTraceStream). Every accepted record must write
// back and read again to the same record.
#include <sstream>
#include <string>

#include "fuzz_target.h"
#include "tierflow/core/trace_record.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream in(tierflow::fuzz::Bytes(data, size));
  auto records = tierflow::ReadTraceStream(in, "fuzz.jsonl");
  if (!records.ok()) return 0;
  for (const tierflow::TraceRecord& r : *records) {
    const std::string line = tierflow::TraceRecordToJson(r);
    auto again = tierflow::TraceRecordFromJson(line);
    if (!again.ok()) tierflow::fuzz::Violation("an accepted record, written back, is refused: " + again.status().message());
    if (tierflow::TraceRecordToJson(*again) != line) tierflow::fuzz::Violation("an accepted record does not write back the same: " + line);
  }
  return 0;
}
