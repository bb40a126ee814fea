// A Google Benchmark console reporter that also keeps, per benchmark, the median of one counter
// over its repetitions: for the tables of ratios the bench programs print after their runs.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

namespace tierflow::bench {

class MedianReporter : public benchmark::ConsoleReporter {
 public:
  // counter: the name of the counter to keep ("bytes_per_second", or one the benchmark sets).
  explicit MedianReporter(std::string counter) : counter_(std::move(counter)) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.run_type == Run::RT_Aggregate && run.aggregate_name == "median") {
        auto it = run.counters.find(counter_);
        if (it != run.counters.end()) median[run.run_name.function_name] = it->second;
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }

  std::map<std::string, double> median;  // benchmark name -> median of the counter

 private:
  std::string counter_;
};

}  // namespace tierflow::bench
