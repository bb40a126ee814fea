// The report's figures that come from the scenario's model and hardware, beside the iteration
// report (tierflow/traces/iteration_report.h) in `sim`, `run`, `plan` and `validate`.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tierflow/models/perf.h"
#include "tierflow/policies/scenario.h"
#include "tierflow/traces/iteration_report.h"

namespace tierflow::cli {

using traces::BuildReport;
using traces::PlanNotes;
using traces::ReportToText;
using traces::RunFacts;
using traces::RunSetting;

// The report's setting of `scenario`: its model, hardware, batch and the model FLOPs of an
// iteration over every rank.
RunSetting SettingOf(const policies::Scenario& scenario);

// models::StorageLowerBound as {seconds, busiest, devices: [{device, read_bytes, write_bytes,
// seconds}]}, and as one paragraph set against `iteration_s` (empty text without storage I/O).
nlohmann::ordered_json StorageBoundJson(const models::StorageBound& bound);
std::string StorageBoundText(const models::StorageBound& bound, double iteration_s);

// models::MemoryFit as {fits, host_peak_bytes, host_bytes, host, gpu_peak_bytes, gpu_bytes,
// gpu_pool, problem} (problem only when it does not fit).
nlohmann::ordered_json MemoryFitJson(const models::MemoryFit& fit);

// The note a real run's disk bytes through the page cache get (run, validate): how many, and each
// buffered disk with why (RunResult::buffered_disks); empty when every byte went O_DIRECT.
std::string BufferedIoNote(int64_t direct_io_bytes, int64_t buffered_io_bytes, const std::vector<std::string>& buffered_disks);

}  // namespace tierflow::cli
