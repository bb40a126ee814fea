#include "tierflow/real/hf_model.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "hf_io.h"
#include "tierflow/core/files.h"
#include "tierflow/real/llama.h"

namespace tierflow::real {
namespace {

namespace fs = std::filesystem;

std::string ShardName(size_t k, size_t n) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, n);
  return name;
}

// Every file of the model into `tmp` (an empty directory), each written and synced, then the
// directory's entries.
Status WriteModelFiles(const fs::path& tmp, const models::LlmConfig& config, std::string_view base_config_json,
                       const float* params, const HfSaveOptions& o) {
  TF_ASSIGN_OR_RETURN(const std::string config_json, models::LlmToHfConfig(config, base_config_json, HfDtypeName(o.dtype)));
  TF_RETURN_IF_ERROR(WriteFileAtomically((tmp / "config.json").string(), config_json, "config.json"));
  // Shards in layout order, each at most max_shard_bytes unless one tensor alone is larger.
  const ParamLayout layout = MakeParamLayout(config);
  std::vector<std::vector<const ParamTensor*>> shards(1);
  int64_t shard_bytes = 0, total_bytes = 0;
  for (const ParamTensor& t : layout.tensors) {
    const int64_t bytes = t.elements * StDtypeBytes(o.dtype);
    if (!shards.back().empty() && shard_bytes + bytes > o.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(&t);
    shard_bytes += bytes;
    total_bytes += bytes;
  }
  std::map<std::string, std::string> weight_map;  // sorted by name, as transformers writes it
  for (size_t k = 0; k < shards.size(); ++k) {
    const std::string name = shards.size() == 1 ? "model.safetensors" : ShardName(k, shards.size());
    for (const ParamTensor* t : shards[k]) weight_map[t->name] = name;
    TF_RETURN_IF_ERROR(WriteHfShard((tmp / name).string(), shards[k], params, o.dtype, o.io));
  }
  if (shards.size() > 1) {
    nlohmann::ordered_json index;
    index["metadata"] = {{"total_size", total_bytes}};
    index["weight_map"] = nlohmann::ordered_json::object();
    for (const auto& [tensor, file] : weight_map) index["weight_map"][tensor] = file;
    TF_RETURN_IF_ERROR(WriteFileAtomically((tmp / "model.safetensors.index.json").string(), index.dump(2) + "\n",
                                           "model.safetensors.index.json"));
  }
  return SyncDirectory(tmp.string());
}

fs::path Target(const std::string& dir) {
  fs::path target = fs::path(dir).lexically_normal();
  if (target.filename().empty()) target = target.parent_path();  // "DIR/"
  return target;
}

}  // namespace

Status CheckHfSaveTarget(const std::string& dir) {
  const fs::path target = Target(dir);
  const std::string label = "save model '" + target.string() + "'";
  std::error_code ec;
  if (!fs::exists(target, ec)) return Status::Ok();
  if (!fs::is_directory(target, ec)) return FailedPrecondition(label + ": a file is there, not a directory");
  if (!fs::is_empty(target, ec) && !fs::exists(target / "config.json", ec)) {
    return FailedPrecondition(label + ": the directory holds files but no config.json, so it is not a model a save may replace"
                                      " (give a new directory, or an earlier save's)");
  }
  return Status::Ok();
}

std::string_view HfDtypeName(StDtype dtype) {
  switch (dtype) {
    case StDtype::kBF16:
      return "bfloat16";
    case StDtype::kF16:
      return "float16";
    default:
      return "float32";
  }
}

Status SaveHfModel(const std::string& dir, const models::LlmConfig& config, std::string_view base_config_json,
                   const float* params, const HfSaveOptions& o) {
  if (o.dtype != StDtype::kBF16 && o.dtype != StDtype::kF16 && o.dtype != StDtype::kF32) {
    return InvalidArgument("save model '" + dir + "': dtype " + std::string(StDtypeName(o.dtype)) + " (BF16, F16 or F32)");
  }
  if (o.max_shard_bytes <= 0) return InvalidArgument("save model '" + dir + "': the shard size must be positive");
  TF_RETURN_IF_ERROR(CheckHfSaveTarget(dir));
  const fs::path target = Target(dir);
  const std::string label = "save model '" + target.string() + "'";
  std::error_code ec;
  const bool exists = fs::exists(target, ec);
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  fs::create_directories(parent, ec);
  if (ec) return FromErrno(ec.value(), label + ": create its parent directory '" + parent.string() + "'");
  const fs::path tmp = target.string() + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(tmp, ec);  // a crashed save's, of this process id
  if (!fs::create_directory(tmp, ec)) return FromErrno(ec ? ec.value() : EEXIST, label + ": create '" + tmp.string() + "'");
  if (Status s = WriteModelFiles(tmp, config, base_config_json, params, o); !s.ok()) {
    fs::remove_all(tmp, ec);
    return s.WithContext(label);
  }
  // The complete directory takes the target's place in one step.
  bool exchanged = false;
  if (exists) {
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
      exchanged = true;
    } else if (errno != EINVAL && errno != ENOSYS) {
      const int err = errno;
      fs::remove_all(tmp, ec);
      return FromErrno(err, label + ": put the new model in place of the old");
    } else {
      // A file system without the atomic exchange: the old one out of the way first (a crash
      // between the two renames leaves the old model at DIR.old-PID, whole).
      const fs::path old = target.string() + ".old-" + std::to_string(::getpid());
      fs::remove_all(old, ec);
      if (::rename(target.c_str(), old.c_str()) != 0) {
        const int err = errno;
        fs::remove_all(tmp, ec);
        return FromErrno(err, label + ": move the old model aside");
      }
      if (::rename(tmp.c_str(), target.c_str()) != 0) {
        const int err = errno;
        ::rename(old.c_str(), target.c_str());
        fs::remove_all(tmp, ec);
        return FromErrno(err, label + ": put the new model in place");
      }
      fs::remove_all(old, ec);
    }
  } else if (::rename(tmp.c_str(), target.c_str()) != 0) {
    const int err = errno;
    fs::remove_all(tmp, ec);
    return FromErrno(err, label + ": put the new model in place");
  }
  TF_RETURN_IF_ERROR(SyncDirectory(parent.string()).WithContext(label));
  if (exchanged) fs::remove_all(tmp, ec);  // now the old model's files
  return Status::Ok();
}

}  // namespace tierflow::real
