#include "tierflow/core/trace_record.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "tierflow/core/text.h"
#include "tierflow/core/files.h"
#include "tierflow/core/json_checked.h"

namespace tierflow {

using Json = nlohmann::ordered_json;

std::string TraceRecordToJson(const TraceRecord& r) {
  Json j;
  j["iteration"] = r.iteration;
  j["task"] = r.task;
  j["op"] = OpName(r.op);
  j["resource"] = r.resource;
  j["layer"] = r.layer;
  j["phase"] = PhaseName(r.phase);
  j["bytes"] = r.bytes;
  j["flops"] = r.flops;
  j["start_s"] = r.start_s;
  j["end_s"] = r.end_s;
  j["source"] = r.source;
  if (r.block_bytes) j["block_bytes"] = r.block_bytes;
  if (r.queue_depth) j["queue_depth"] = r.queue_depth;
  if (r.threads) j["threads"] = r.threads;
  if (r.tasks) j["tasks"] = r.tasks;
  if (r.rank >= 0) j["rank"] = r.rank;
  if (r.narrows) j["narrows"] = true;
  if (r.device_start_s != 0 || r.device_end_s != 0) {
    j["device_start_s"] = r.device_start_s;
    j["device_end_s"] = r.device_end_s;
  }
  return j.dump();
}

namespace {
template <typename T>
Status Integer(const Json& v, const char* key, T* out) {
  TF_ASSIGN_OR_RETURN(*out, JsonInteger<T>(v, key));
  return Status::Ok();
}
}  // namespace

StatusOr<TraceRecord> TraceRecordFromJson(const std::string& line) {
  TF_ASSIGN_OR_RETURN(const Json j, ParseJsonChecked(line, "trace record"));
  if (!j.is_object()) return InvalidArgument("trace record: not a JSON object");
  TraceRecord r;
  try {
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& key = it.key();
      const Json& v = it.value();
      if (key == "iteration") TF_RETURN_IF_ERROR(Integer<int64_t>(v, "iteration", &r.iteration));
      else if (key == "task") r.task = v.get<std::string>();
      else if (key == "op") {
        auto op = OpFromName(v.get<std::string>());
        if (!op) return InvalidArgument("unknown op '" + v.get<std::string>() + "'");
        r.op = *op;
      } else if (key == "resource") r.resource = v.get<std::string>();
      else if (key == "layer") TF_RETURN_IF_ERROR(Integer<int32_t>(v, "layer", &r.layer));
      else if (key == "phase") {
        auto phase = PhaseFromName(v.get<std::string>());
        if (!phase) return InvalidArgument("unknown phase '" + v.get<std::string>() + "'");
        r.phase = *phase;
      } else if (key == "bytes") TF_RETURN_IF_ERROR(Integer<int64_t>(v, "bytes", &r.bytes));
      else if (key == "flops") r.flops = v.get<double>();
      else if (key == "start_s") r.start_s = v.get<double>();
      else if (key == "end_s") r.end_s = v.get<double>();
      else if (key == "source") r.source = v.get<std::string>();
      else if (key == "block_bytes") TF_RETURN_IF_ERROR(Integer<int64_t>(v, "block_bytes", &r.block_bytes));
      else if (key == "queue_depth") TF_RETURN_IF_ERROR(Integer<int32_t>(v, "queue_depth", &r.queue_depth));
      else if (key == "threads") TF_RETURN_IF_ERROR(Integer<int32_t>(v, "threads", &r.threads));
      else if (key == "tasks") TF_RETURN_IF_ERROR(Integer<int32_t>(v, "tasks", &r.tasks));
      else if (key == "rank") TF_RETURN_IF_ERROR(Integer<int32_t>(v, "rank", &r.rank));
      else if (key == "narrows") r.narrows = v.get<bool>();
      else if (key == "device_start_s") r.device_start_s = v.get<double>();
      else if (key == "device_end_s") r.device_end_s = v.get<double>();
      else return InvalidArgument("unknown key " + Quoted(key));
    }
  } catch (const Json::exception& e) {
    return InvalidArgument(std::string("wrong type: ") + e.what());
  }
  // Field by field: no value a summary would misread, and what every record has.
  if (r.iteration < 0) return InvalidArgument("iteration is negative");
  // Seconds from the start of one run or probe: 1e9 s is 31 years, and a time past it (1e308) would
  // be summarised as a span no run has.
  constexpr double kMostSeconds = 1e9;
  if (!(r.start_s >= 0 && r.start_s <= kMostSeconds) || !(r.end_s >= 0 && r.end_s <= kMostSeconds)) {
    char text[160];
    std::snprintf(text, sizeof text, "start_s %g and end_s %g: each must be seconds from 0 to 1e9 (31 years) since the run began", r.start_s, r.end_s);
    return InvalidArgument(text);
  }
  if (!std::isfinite(r.device_start_s) || !std::isfinite(r.device_end_s)) return InvalidArgument("device_start_s and device_end_s must be finite");
  if (r.end_s < r.start_s) return InvalidArgument("end_s is before start_s");
  if (r.bytes < 0) return InvalidArgument("bytes is negative");
  if (!(r.flops >= 0) || !std::isfinite(r.flops)) return InvalidArgument("flops must be finite and >= 0");
  if (r.block_bytes < 0 || r.queue_depth < 0 || r.threads < 0 || r.layer < -1) return InvalidArgument("block_bytes, queue_depth and threads must be >= 0, layer >= -1");
  if (r.tasks < 0) return InvalidArgument("tasks is negative");
  if (j.contains("rank") && r.rank < 0) return InvalidArgument("rank is negative");
  if (j.contains("device_start_s") != j.contains("device_end_s")) return InvalidArgument("device_start_s and device_end_s go together");
  if (r.device_end_s < r.device_start_s) return InvalidArgument("device_end_s is before device_start_s");
  for (const char* key : {"iteration", "task", "op", "start_s", "end_s"}) {
    if (!j.contains(key)) return InvalidArgument(std::string("missing key '") + key + "'");
  }
  return r;
}

StatusOr<TraceWriter> TraceWriter::Open(const std::string& path) {
  TF_RETURN_IF_ERROR(CreateParentDirectories(path, "trace file"));
  std::string tmp = TemporaryPath(path);
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) return FromErrno(errno, "open trace file '" + tmp + "'");
  return TraceWriter(f, path, std::move(tmp));
}

TraceWriter::TraceWriter(TraceWriter&& o) noexcept : file_(o.file_), path_(std::move(o.path_)), tmp_(std::move(o.tmp_)) {
  o.file_ = nullptr;
}

TraceWriter& TraceWriter::operator=(TraceWriter&& o) noexcept {
  if (this != &o) {
    Abandon();
    file_ = o.file_;
    path_ = std::move(o.path_);
    tmp_ = std::move(o.tmp_);
    o.file_ = nullptr;
  }
  return *this;
}

TraceWriter::~TraceWriter() { Abandon(); }

void TraceWriter::Abandon() {
  if (!file_) return;
  std::fclose(file_);
  file_ = nullptr;
  std::remove(tmp_.c_str());
}

Status TraceWriter::Write(const TraceRecord& record) {
  if (!file_) return FailedPrecondition("trace writer for '" + path_ + "' is closed");
  std::string line = TraceRecordToJson(record);
  line.push_back('\n');
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size()) {
    const Status st = FromErrno(errno, "write trace file '" + path_ + "' (the previous file, if any, is kept)");
    Abandon();
    return st;
  }
  return Status::Ok();
}

Status TraceWriter::Close() {
  if (!file_) return FailedPrecondition("trace writer for '" + path_ + "' is closed");
  const int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) {
    const Status st = FromErrno(errno, "close trace file '" + path_ + "' (the previous file, if any, is kept)");
    std::remove(tmp_.c_str());
    return st;
  }
  return ReplaceWith(tmp_, path_, "trace file");
}

StatusOr<std::vector<TraceRecord>> ReadTraceFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("trace file '" + path + "' cannot be opened");
  return ReadTraceStream(in, path);
}

StatusOr<std::vector<TraceRecord>> ReadTraceStream(std::istream& in, const std::string& path) {
  std::vector<TraceRecord> records;
  // A record twice (a file appended to itself, two runs' records concatenated) would count its
  // task twice in every sum: refused, naming both lines.
  std::unordered_map<std::string, int64_t> first_line;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    auto r = TraceRecordFromJson(line);
    if (!r.ok()) {
      return InvalidArgument("trace file '" + path + "' line " + std::to_string(line_no) + ": " +
                             r.status().message());
    }
    std::string key = r->source + '\x1f' + r->task + '\x1f' + r->resource + '\x1f' + std::to_string(r->iteration);
    key.append(reinterpret_cast<const char*>(&r->start_s), sizeof(double));
    key.append(reinterpret_cast<const char*>(&r->end_s), sizeof(double));
    const auto [it, fresh] = first_line.try_emplace(std::move(key), line_no);
    if (!fresh) {
      return InvalidArgument("trace file '" + path + "' line " + std::to_string(line_no) + ": repeats the record of line " +
                             std::to_string(it->second) + " (task '" + r->task.substr(0, 100) + "', iteration " +
                             std::to_string(r->iteration) + ")");
    }
    records.push_back(std::move(r).value());
  }
  if (records.empty()) return InvalidArgument("trace file '" + path + "' holds no records");
  return records;
}

Status WriteTraceFile(const std::string& path, const std::vector<TraceRecord>& records) {
  // Streamed (a sim of many iterations has millions of records), then put in place whole.
  TF_ASSIGN_OR_RETURN(TraceWriter w, TraceWriter::Open(path));
  for (const auto& r : records) TF_RETURN_IF_ERROR(w.Write(r));
  return w.Close();
}

TraceRecord TaskRecord(const Schedule& schedule, int32_t task, int64_t iteration, double start_s, double end_s,
                       std::string source, int32_t threads) {
  const TaskSpec& t = schedule.tasks()[static_cast<size_t>(task)];
  TraceRecord r;
  r.iteration = iteration;
  r.task = t.id;
  r.op = t.op;
  if (t.resource != kNoIndex) r.resource = schedule.resources()[static_cast<size_t>(t.resource)].name;
  r.layer = t.layer;
  r.phase = t.phase;
  r.bytes = t.bytes;
  r.flops = t.flops;
  r.start_s = start_s;
  r.end_s = end_s;
  r.source = std::move(source);
  if (t.op == Op::kRead || t.op == Op::kWrite) {
    r.block_bytes = IoBlockBytes(t);
    r.queue_depth = IoQueueDepth(t);
  }
  if (t.op == Op::kOptimizer || t.op == Op::kConvert || IsCollectiveOp(t.op)) r.threads = threads;
  r.narrows = D2HNarrows(schedule, t);
  r.rank = t.rank;
  return r;
}

bool D2HNarrows(const Schedule& schedule, const TaskSpec& t) {
  if (t.op != Op::kD2H) return false;
  for (int32_t ti : t.tensors) {
    if (schedule.tensors()[static_cast<size_t>(ti)].kind == StateKind::kGrad16) return true;
  }
  return false;
}

TraceRecord ProbeRecord(std::string task, Op op, std::string resource, int64_t repetition, int64_t bytes,
                        double start_s, double end_s) {
  TraceRecord r;
  r.iteration = repetition;
  r.task = std::move(task);
  r.op = op;
  r.resource = std::move(resource);
  r.bytes = bytes;
  r.start_s = start_s;
  r.end_s = end_s;
  r.source = "probe";
  return r;
}

}  // namespace tierflow
