#include <cctype>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tierflow/calibrate/fio.h"
#include "tierflow/core/json_checked.h"

namespace tierflow::calibrate {
namespace {

using Json = nlohmann::json;

// "4k", "1M", "64KiB", "4096", "2m" -> bytes; fio's default kb_base is 1024, so k = 1024.
bool ParseFioSize(std::string text, int64_t* out) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  size_t i = 0;
  int64_t number = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    number = number * 10 + (text[i] - '0');
    if (number > (int64_t{1} << 50)) return false;
    ++i;
  }
  if (i == 0) return false;
  std::string suffix = text.substr(i);
  for (char& c : suffix) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!suffix.empty() && suffix.back() == 'b') suffix.pop_back();
  if (!suffix.empty() && suffix.back() == 'i') suffix.pop_back();
  int64_t mult = 1;
  if (suffix.empty())
    mult = 1;
  else if (suffix == "k")
    mult = int64_t{1} << 10;
  else if (suffix == "m")
    mult = int64_t{1} << 20;
  else if (suffix == "g")
    mult = int64_t{1} << 30;
  else if (suffix == "t")
    mult = int64_t{1} << 40;
  else
    return false;
  *out = number * mult;
  return true;
}

bool ParsePositiveInt(const std::string& text, int64_t* out) {
  if (text.empty()) return false;
  int64_t v = 0;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    v = v * 10 + (c - '0');
    if (v > (int64_t{1} << 31)) return false;
  }
  if (v <= 0) return false;
  *out = v;
  return true;
}

}  // namespace

StatusOr<std::vector<DiskSample>> DiskSamplesFromFioJson(std::string_view json_text, int32_t device,
                                                         const std::string& file_name) {
  const std::string where = "fio file '" + file_name + "'";
  Json doc = Json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgument(where + ": not valid JSON (write it with fio --output-format=json)");
  if (!doc.is_object() || !doc.contains("jobs") || !doc["jobs"].is_array()) {
    return InvalidArgument(where + ": jobs: missing or not an array (not fio --output-format=json output)");
  }
  const Json global =
      doc.contains("global options") && doc["global options"].is_object() ? doc["global options"] : Json::object();
  std::vector<DiskSample> out;
  std::map<int64_t, std::string> group_job;  // groupid -> first job name
  const Json& jobs = doc["jobs"];
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Json& job = jobs[i];
    std::string at = where + ": jobs[" + std::to_string(i) + "]";
    if (!job.is_object()) return InvalidArgument(at + ": not an object");
    const std::string name =
        job.contains("jobname") && job["jobname"].is_string() ? job["jobname"].get<std::string>() : "";
    if (!name.empty()) at += " ('" + name + "')";
    if (job.contains("error") && job["error"].is_number() && job["error"] != 0) {
      return InvalidArgument(at + ".error: fio reports error " + job["error"].dump().substr(0, 40));
    }
    if (job.contains("groupid") && job["groupid"].is_number_integer()) {
      TF_ASSIGN_OR_RETURN(const int64_t group, JsonInteger<int64_t>(job["groupid"], at + ".groupid"));
      auto [it, fresh] = group_job.emplace(group, name);
      if (!fresh) {
        return InvalidArgument(at + ".groupid: jobs '" + it->second + "' and '" + name + "' share group " +
                               std::to_string(group) +
                               " (they ran at the same time): separate them with stonewall or use group_reporting");
      }
    }
    const Json options =
        job.contains("job options") && job["job options"].is_object() ? job["job options"] : Json::object();
    // A job option, else the global one, else "".
    auto option = [&](const char* key) -> std::string {
      if (options.contains(key) && options[key].is_string()) return options[key].get<std::string>();
      if (global.contains(key) && global[key].is_string()) return global[key].get<std::string>();
      return "";
    };
    std::string rw = option("rw");
    if (rw.empty()) rw = option("readwrite");
    if (rw.empty()) rw = "read";      // fio's default
    rw = rw.substr(0, rw.find(':'));  // "randread:8" (offset modifier)
    DiskSample s;
    s.device = device;
    s.origin = where + " job '" + name + "'";
    if (rw == "read" || rw == "randread")
      s.kind = DiskSample::Kind::kRead;
    else if (rw == "write" || rw == "randwrite")
      s.kind = DiskSample::Kind::kWrite;
    else if (rw == "rw" || rw == "randrw" || rw == "readwrite")
      s.kind = DiskSample::Kind::kMixed;
    else
      return InvalidArgument(at + ".job options.rw: '" + rw + "' is not a read, write or mixed workload");

    std::string bs = option("bs");
    if (bs.empty()) bs = option("blocksize");
    if (bs.empty()) bs = "4k";  // fio's default
    const size_t comma = bs.find(',');
    std::string read_bs = bs.substr(0, comma);
    std::string write_bs = comma == std::string::npos ? read_bs : bs.substr(comma + 1);
    if (write_bs.empty()) write_bs = read_bs;
    int64_t rb = 0, wb = 0;
    if (!ParseFioSize(read_bs, &rb) || !ParseFioSize(write_bs, &wb) || rb <= 0 || wb <= 0) {
      return InvalidArgument(at + ".job options.bs: '" + bs + "' is not a block size (e.g. 4k, 1M)");
    }
    if (s.kind == DiskSample::Kind::kMixed && rb != wb) {
      return InvalidArgument(at + ".job options.bs: '" + bs +
                             "' gives reads and writes different sizes (the mixed model needs one)");
    }
    s.block_bytes = s.kind == DiskSample::Kind::kWrite ? wb : rb;

    int64_t depth = 1, numjobs = 1;
    const std::string iodepth = option("iodepth");
    if (!iodepth.empty() && !ParsePositiveInt(iodepth, &depth)) {
      return InvalidArgument(at + ".job options.iodepth: '" + iodepth + "' is not a positive integer");
    }
    const std::string nj = option("numjobs");
    if (!nj.empty() && !ParsePositiveInt(nj, &numjobs)) {
      return InvalidArgument(at + ".job options.numjobs: '" + nj + "' is not a positive integer");
    }
    s.queue_depth = static_cast<int32_t>(depth * numjobs);

    // bw_bytes of one direction, required when that direction ran.
    auto rate = [&](const char* dir, bool required, double* bw) -> Status {
      if (!job.contains(dir) || !job[dir].is_object()) {
        return required ? InvalidArgument(at + "." + dir + ": missing") : Status::Ok();
      }
      const Json& d = job[dir];
      if (!d.contains("runtime") || !d["runtime"].is_number()) {
        return InvalidArgument(at + "." + dir + ".runtime: missing or not a number");
      }
      if (!d.contains("bw_bytes") || !d["bw_bytes"].is_number()) {
        return InvalidArgument(at + "." + dir + ".bw_bytes: missing or not a number");
      }
      const double runtime_ms = d["runtime"].get<double>();
      *bw = d["bw_bytes"].get<double>();
      if (required && (runtime_ms <= 0 || *bw <= 0)) {
        return InvalidArgument(at + "." + dir + ": runtime " + std::to_string(runtime_ms) + " ms and bw_bytes " +
                               std::to_string(*bw) + " must be positive for an rw=" + rw + " job");
      }
      return Status::Ok();
    };
    const bool reads = s.kind != DiskSample::Kind::kWrite;
    const bool writes = s.kind != DiskSample::Kind::kRead;
    TF_RETURN_IF_ERROR(rate("read", reads, &s.read_bytes_per_s));
    TF_RETURN_IF_ERROR(rate("write", writes, &s.write_bytes_per_s));
    if (!reads) s.read_bytes_per_s = 0;
    if (!writes) s.write_bytes_per_s = 0;
    out.push_back(std::move(s));
  }
  if (out.empty()) return InvalidArgument(where + ": jobs: empty (no measurement)");
  return out;
}

StatusOr<std::vector<DiskSample>> ReadFioFile(const std::string& path, int32_t device) {
  std::ifstream in(path);
  if (!in) return NotFound("fio file '" + path + "' cannot be opened");
  std::stringstream ss;
  ss << in.rdbuf();
  return DiskSamplesFromFioJson(ss.str(), device, path);
}

}  // namespace tierflow::calibrate
