#include "tierflow/real/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tierflow/core/files.h"
#include "tierflow/core/json_checked.h"
#include "tierflow/real/adamw.h"

namespace tierflow::real {
namespace {

struct DtypeRow {
  StDtype dtype;
  const char* name;
  int64_t bytes;
};
constexpr DtypeRow kDtypes[] = {
    {StDtype::kF32, "F32", 4},  {StDtype::kF16, "F16", 2}, {StDtype::kBF16, "BF16", 2},
    {StDtype::kF64, "F64", 8},  {StDtype::kI32, "I32", 4}, {StDtype::kI64, "I64", 8},
    {StDtype::kU16, "U16", 2},  {StDtype::kU8, "U8", 1},
};

bool DtypeFromName(std::string_view name, StDtype* out) {
  for (const DtypeRow& row : kDtypes) {
    if (name == row.name) {
      *out = row.dtype;
      return true;
    }
  }
  return false;
}

std::string Where(const std::string& path, std::string_view tensor) {
  return "safetensors '" + path + "' tensor '" + std::string(tensor) + "'";
}

template <typename U>
U Load(const char* p) {
  U value;
  std::memcpy(&value, p, sizeof(U));  // little-endian hosts only (x86-64, aarch64)
  return value;
}

}  // namespace

std::string_view StDtypeName(StDtype dtype) {
  for (const DtypeRow& row : kDtypes) {
    if (row.dtype == dtype) return row.name;
  }
  return "?";
}

int64_t StDtypeBytes(StDtype dtype) {
  for (const DtypeRow& row : kDtypes) {
    if (row.dtype == dtype) return row.bytes;
  }
  return 0;
}

int64_t StTensorInfo::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open safetensors '" + path + "'");
  std::stringstream bytes;
  bytes << in.rdbuf();
  if (!in.good() && !in.eof()) return IoError("cannot read safetensors '" + path + "'");
  return Parse(bytes.str(), path);
}

StatusOr<SafetensorsFile> SafetensorsFile::Parse(std::string bytes, const std::string& path) {
  const std::string what = "safetensors '" + path + "'";
  if (bytes.size() < 8) return DataLoss(what + ": shorter than the 8-byte header length");
  const uint64_t header_len = Load<uint64_t>(bytes.data());
  if (header_len > bytes.size() - 8) {
    return DataLoss(what + ": header length " + std::to_string(header_len) +
                    " exceeds the file size " + std::to_string(bytes.size()));
  }
  nlohmann::json header = nlohmann::json::parse(bytes.begin() + 8,
                                                bytes.begin() + 8 + static_cast<int64_t>(header_len),
                                                nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return InvalidArgument(what + ": the header is not a JSON object");
  }
  SafetensorsFile file;
  file.path_ = path;
  file.data_start_ = 8 + static_cast<int64_t>(header_len);
  const int64_t data_size = static_cast<int64_t>(bytes.size()) - file.data_start_;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (!it->is_object()) return InvalidArgument(what + ": __metadata__ must be an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) return InvalidArgument(what + ": __metadata__ values must be strings");
        file.metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const std::string where = Where(path, name);
    const nlohmann::json& t = *it;
    if (!t.is_object() || !t.contains("dtype") || !t.contains("shape") ||
        !t.contains("data_offsets") || !t["dtype"].is_string() || !t["shape"].is_array() ||
        !t["data_offsets"].is_array() || t["data_offsets"].size() != 2) {
      return InvalidArgument(where + ": needs dtype, shape and data_offsets [begin, end]");
    }
    StTensorInfo info;
    if (!DtypeFromName(t["dtype"].get<std::string>(), &info.dtype)) {
      return InvalidArgument(where + ": unsupported dtype '" + t["dtype"].get<std::string>() + "'");
    }
    // Every count through the checked reader; the shape's product (saturated, not overflowed) at
    // most the data's bytes, so that elements() x dtype size below cannot overflow.
    int64_t elements = 1;
    for (const auto& d : t["shape"]) {
      auto dim = d.is_number_unsigned() ? JsonInteger<int64_t>(d, where + ": a shape entry") : InvalidArgument(where + ": shape entries must be >= 0");
      if (!dim.ok()) return dim.status();
      info.shape.push_back(*dim);
      if (__builtin_mul_overflow(elements, *dim, &elements)) elements = std::numeric_limits<int64_t>::max();
    }
    if (elements > data_size) return DataLoss(where + ": the shape holds more elements than the file has data bytes");
    for (const auto& o : t["data_offsets"]) {
      if (!o.is_number_unsigned()) return InvalidArgument(where + ": data_offsets must be >= 0");
    }
    TF_ASSIGN_OR_RETURN(info.begin, JsonInteger<int64_t>(t["data_offsets"][0], where + ": data_offsets[0]"));
    TF_ASSIGN_OR_RETURN(info.end, JsonInteger<int64_t>(t["data_offsets"][1], where + ": data_offsets[1]"));
    if (info.begin > info.end || info.end > data_size) {
      return DataLoss(where + ": data_offsets [" + std::to_string(info.begin) + ", " +
                      std::to_string(info.end) + ") outside the " + std::to_string(data_size) +
                      " data bytes");
    }
    if (info.end - info.begin != info.elements() * StDtypeBytes(info.dtype)) {
      return InvalidArgument(where + ": " + std::to_string(info.end - info.begin) +
                             " bytes do not match shape x dtype");
    }
    file.tensors_[name] = std::move(info);
  }
  file.bytes_ = std::move(bytes);
  return file;
}

std::vector<std::string> SafetensorsFile::Names() const {
  std::vector<std::pair<int64_t, std::string>> order;
  for (const auto& [name, info] : tensors_) order.emplace_back(info.begin, name);
  std::sort(order.begin(), order.end());
  std::vector<std::string> names;
  for (auto& [begin, name] : order) names.push_back(std::move(name));
  return names;
}

StatusOr<StTensorInfo> SafetensorsFile::Info(std::string_view name) const {
  auto it = tensors_.find(std::string(name));
  if (it == tensors_.end()) return NotFound(Where(path_, name) + ": no such tensor");
  return it->second;
}

Status SafetensorsFile::ReadF32(std::string_view name, float* out, int64_t out_elements) const {
  TF_ASSIGN_OR_RETURN(StTensorInfo info, Info(name));
  if (info.elements() != out_elements) {
    return InvalidArgument(Where(path_, name) + ": has " + std::to_string(info.elements()) +
                           " elements, expected " + std::to_string(out_elements));
  }
  const char* p = bytes_.data() + data_start_ + info.begin;
  const int64_t n = out_elements;
  switch (info.dtype) {
    case StDtype::kF32:
      // A zero-element tensor may come with a null `out` (an empty vector's data()).
      if (n > 0) std::memcpy(out, p, static_cast<size_t>(n) * 4);
      return Status::Ok();
    case StDtype::kBF16:
      for (int64_t i = 0; i < n; ++i) out[i] = Bf16ToFp32(Load<uint16_t>(p + 2 * i));
      return Status::Ok();
    case StDtype::kF16:
      for (int64_t i = 0; i < n; ++i) out[i] = Fp16ToFp32(Load<uint16_t>(p + 2 * i));
      return Status::Ok();
    case StDtype::kF64:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(Load<double>(p + 8 * i));
      return Status::Ok();
    default:
      return InvalidArgument(Where(path_, name) + ": dtype " +
                             std::string(StDtypeName(info.dtype)) + " is not a float type");
  }
}

StatusOr<std::vector<int64_t>> SafetensorsFile::ReadInts(std::string_view name) const {
  TF_ASSIGN_OR_RETURN(StTensorInfo info, Info(name));
  const char* p = bytes_.data() + data_start_ + info.begin;
  const int64_t n = info.elements();
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (info.dtype) {
      case StDtype::kI32: out[i] = Load<int32_t>(p + 4 * i); break;
      case StDtype::kI64: out[i] = Load<int64_t>(p + 8 * i); break;
      case StDtype::kU16: out[i] = Load<uint16_t>(p + 2 * i); break;
      case StDtype::kU8: out[i] = Load<uint8_t>(p + i); break;
      default:
        return InvalidArgument(Where(path_, name) + ": dtype " +
                               std::string(StDtypeName(info.dtype)) + " is not an integer type");
    }
  }
  return out;
}

Status SafetensorsWriter::AddRaw(const std::string& name, StDtype dtype,
                                 const std::vector<int64_t>& shape, std::string bytes) {
  int64_t elements = 1;
  for (int64_t d : shape) {
    if (d < 0) return InvalidArgument("safetensors tensor '" + name + "': negative dimension");
    elements *= d;
  }
  if (static_cast<int64_t>(bytes.size()) != elements * StDtypeBytes(dtype)) {
    return InvalidArgument("safetensors tensor '" + name + "': " + std::to_string(bytes.size()) +
                           " bytes do not match shape x dtype");
  }
  if (name == "__metadata__") return InvalidArgument("safetensors: '__metadata__' is reserved");
  for (const Entry& e : entries_) {
    if (e.name == name) return InvalidArgument("safetensors tensor '" + name + "' added twice");
  }
  entries_.push_back({name, dtype, shape, std::move(bytes)});
  return Status::Ok();
}

Status SafetensorsWriter::AddF32(const std::string& name, StDtype dtype,
                                 const std::vector<int64_t>& shape, const float* values) {
  int64_t n = 1;
  for (int64_t d : shape) n *= std::max<int64_t>(d, 0);
  std::string bytes;
  switch (dtype) {
    case StDtype::kF32:
      if (n > 0) bytes.assign(reinterpret_cast<const char*>(values), static_cast<size_t>(n) * 4);
      break;
    case StDtype::kBF16:
    case StDtype::kF16:
      bytes.resize(static_cast<size_t>(n) * 2);
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = dtype == StDtype::kBF16 ? Fp32ToBf16(values[i]) : Fp32ToFp16(values[i]);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
      break;
    default:
      return InvalidArgument("safetensors tensor '" + name + "': AddF32 writes F32, F16 or BF16");
  }
  return AddRaw(name, dtype, shape, std::move(bytes));
}

std::string SafetensorsWriter::Serialize() const {
  // nlohmann's ordered_json keeps insertion order, so the file reads in data order.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  int64_t offset = 0;
  for (const Entry& e : entries_) {
    const int64_t size = static_cast<int64_t>(e.bytes.size());
    header[e.name] = {{"dtype", std::string(StDtypeName(e.dtype))},
                      {"shape", e.shape},
                      {"data_offsets", {offset, offset + size}}};
    offset += size;
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');
  std::string out(8, '\0');
  const uint64_t len = text.size();
  std::memcpy(out.data(), &len, 8);
  out += text;
  for (const Entry& e : entries_) out += e.bytes;
  return out;
}

Status SafetensorsWriter::Write(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  const std::string bytes = Serialize();
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return FromErrno(errno, "open '" + tmp + "' for writing");
  const size_t written = std::fwrite(bytes.data(), 1, bytes.size(), f);
  const int write_errno = errno;
  if (std::fclose(f) != 0 || written != bytes.size()) {
    std::remove(tmp.c_str());
    return FromErrno(write_errno != 0 ? write_errno : EIO, "write '" + tmp + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return FromErrno(err, "rename '" + tmp + "' to '" + path + "'");
  }
  return Status::Ok();
}

namespace {

// One tensor of the layout from the file, checked for presence and shape.
Status LoadTensor(const SafetensorsFile& file, const ParamTensor& t, float* params) {
  if (!file.Has(t.name)) return NotFound(Where(file.path(), t.name) + ": missing (the model needs it)");
  TF_ASSIGN_OR_RETURN(StTensorInfo info, file.Info(t.name));
  if (info.shape != t.shape) {
    std::string got, want;
    for (int64_t d : info.shape) got += (got.empty() ? "" : ",") + std::to_string(d);
    for (int64_t d : t.shape) want += (want.empty() ? "" : ",") + std::to_string(d);
    return InvalidArgument(Where(file.path(), t.name) + ": shape [" + got + "], expected [" + want + "]");
  }
  return file.ReadF32(t.name, params + t.offset, t.elements);
}

}  // namespace

Status LoadLlamaWeights(const SafetensorsFile& file, const ParamLayout& layout, float* params,
                        bool strict) {
  for (const ParamTensor& t : layout.tensors) TF_RETURN_IF_ERROR(LoadTensor(file, t, params));
  if (strict) {
    for (const std::string& name : file.Names()) {
      if (layout.Find(name) == nullptr) {
        return InvalidArgument(Where(file.path(), name) + ": not a parameter of the model");
      }
    }
  }
  return Status::Ok();
}

Status LoadLlamaWeightsFromDir(const std::string& dir, const ParamLayout& layout, float* params) {
  namespace fs = std::filesystem;
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single = fs::path(dir) / "model.safetensors";
  std::error_code ec;
  if (!fs::exists(index_path, ec)) {
    if (!fs::exists(single, ec)) {
      return NotFound("Hugging Face model directory '" + dir +
                      "': neither model.safetensors nor model.safetensors.index.json is there");
    }
    TF_ASSIGN_OR_RETURN(const SafetensorsFile file, SafetensorsFile::Open(single.string()));
    return LoadLlamaWeights(file, layout, params);
  }
  const std::string where = "'" + index_path.string() + "'";
  TF_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(index_path.string(), "model.safetensors.index.json"));
  TF_ASSIGN_OR_RETURN(const nlohmann::ordered_json index, ParseJsonChecked(text, where));
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    return InvalidArgument(where + ": no 'weight_map' object (tensor name -> shard file)");
  }
  // The layout's tensors by the shard that holds them, each shard read once, in name order.
  std::map<std::string, std::vector<const ParamTensor*>> by_shard;
  const nlohmann::ordered_json& map = index["weight_map"];
  for (const ParamTensor& t : layout.tensors) {
    if (!map.contains(t.name)) return NotFound(where + ": weight_map has no '" + t.name + "' (the model needs it)");
    if (!map[t.name].is_string()) return InvalidArgument(where + ": weight_map '" + t.name + "' must be a file name");
    const std::string shard = map[t.name].get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..") {
      return InvalidArgument(where + ": weight_map '" + t.name + "' names '" + shard +
                             "', not a file of the directory (a shard is a plain file name)");
    }
    by_shard[shard].push_back(&t);
  }
  for (const auto& [shard, tensors] : by_shard) {
    const fs::path path = fs::path(dir) / shard;
    if (!fs::exists(path, ec)) {
      return NotFound(where + ": shard '" + shard + "' (of '" + tensors.front()->name + "') is missing");
    }
    TF_ASSIGN_OR_RETURN(const SafetensorsFile file, SafetensorsFile::Open(path.string()));
    for (const ParamTensor* t : tensors) TF_RETURN_IF_ERROR(LoadTensor(file, *t, params));
  }
  return Status::Ok();
}

Status SaveLlamaWeights(const std::string& path, const ParamLayout& layout, const float* params,
                        StDtype dtype) {
  SafetensorsWriter writer;
  writer.SetMetadata("format", "pt");
  for (const ParamTensor& t : layout.tensors) {
    TF_RETURN_IF_ERROR(writer.AddF32(t.name, dtype, t.shape, params + t.offset));
  }
  return writer.Write(path);
}

}  // namespace tierflow::real
