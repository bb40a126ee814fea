// Fuzz target: scenario YAML (policies::LoadScenarioText), the parser behind every verb's
// SCENARIO argument. Inputs from the first line "#set key=value" on are also --set overrides, so
// the override parser is fuzzed with the document it applies to.
#include <string>
#include <vector>

#include "fuzz_target.h"
#include "tierflow/policies/scenario.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = tierflow::fuzz::Bytes(data, size);
  std::vector<std::string> sets;
  size_t pos = 0;
  while (text.compare(pos, 5, "#set ") == 0) {
    const size_t eol = text.find('\n', pos);
    sets.push_back(text.substr(pos + 5, eol == std::string::npos ? std::string::npos : eol - pos - 5));
    if (eol == std::string::npos) break;
    pos = eol + 1;
  }
  (void)tierflow::policies::LoadScenarioText(text, sets, "fuzz.yaml");
  return 0;
}
