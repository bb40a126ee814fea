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

bool StDtypeIsFloat(StDtype dtype) {
  return dtype == StDtype::kF32 || dtype == StDtype::kF16 || dtype == StDtype::kBF16 || dtype == StDtype::kF64;
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
  SafetensorsFile file;
  TF_ASSIGN_OR_RETURN(file.header_, SafetensorsHeader::Parse(bytes, static_cast<int64_t>(bytes.size()), path));
  file.bytes_ = std::move(bytes);
  return file;
}

StatusOr<int64_t> SafetensorsHeader::Length(std::string_view first, int64_t file_size, const std::string& path) {
  const std::string what = "safetensors '" + path + "'";
  if (first.size() < 8 || file_size < 8) return DataLoss(what + ": shorter than the 8-byte header length");
  const uint64_t header_len = Load<uint64_t>(first.data());
  if (header_len > static_cast<uint64_t>(file_size - 8)) {
    return DataLoss(what + ": header length " + std::to_string(header_len) +
                    " exceeds the file size " + std::to_string(file_size));
  }
  return static_cast<int64_t>(header_len);
}

StatusOr<SafetensorsHeader> SafetensorsHeader::Parse(std::string_view head, int64_t file_size, const std::string& path) {
  const std::string what = "safetensors '" + path + "'";
  TF_ASSIGN_OR_RETURN(const int64_t header_len, Length(head, file_size, path));
  if (static_cast<int64_t>(head.size()) < 8 + header_len) {
    return DataLoss(what + ": the header's " + std::to_string(header_len) + " bytes were not all read");
  }
  nlohmann::json header = nlohmann::json::parse(head.begin() + 8, head.begin() + 8 + header_len,
                                                nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return InvalidArgument(what + ": the header is not a JSON object");
  }
  SafetensorsHeader parsed;
  parsed.path_ = path;
  parsed.data_start_ = 8 + header_len;
  const int64_t data_size = file_size - parsed.data_start_;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (!it->is_object()) return InvalidArgument(what + ": __metadata__ must be an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) return InvalidArgument(what + ": __metadata__ values must be strings");
        parsed.metadata_[m.key()] = m->get<std::string>();
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
    parsed.tensors_[name] = std::move(info);
  }
  return parsed;
}

std::vector<std::string> SafetensorsHeader::Names() const {
  std::vector<std::pair<int64_t, std::string>> order;
  for (const auto& [name, info] : tensors_) order.emplace_back(info.begin, name);
  std::sort(order.begin(), order.end());
  std::vector<std::string> names;
  for (auto& [begin, name] : order) names.push_back(std::move(name));
  return names;
}

StatusOr<StTensorInfo> SafetensorsHeader::Info(std::string_view name) const {
  auto it = tensors_.find(std::string(name));
  if (it == tensors_.end()) return NotFound(Where(path_, name) + ": no such tensor");
  return it->second;
}

bool ConvertToF32(StDtype dtype, const char* p, int64_t n, float* out) {
  switch (dtype) {
    case StDtype::kF32:
      // A zero-element tensor may come with a null `out` (an empty vector's data()).
      if (n > 0) std::memcpy(out, p, static_cast<size_t>(n) * 4);
      return true;
    case StDtype::kBF16:
      for (int64_t i = 0; i < n; ++i) out[i] = Bf16ToFp32(Load<uint16_t>(p + 2 * i));
      return true;
    case StDtype::kF16:
      for (int64_t i = 0; i < n; ++i) out[i] = Fp16ToFp32(Load<uint16_t>(p + 2 * i));
      return true;
    case StDtype::kF64:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(Load<double>(p + 8 * i));
      return true;
    default:
      return false;
  }
}

Status SafetensorsFile::ReadF32(std::string_view name, float* out, int64_t out_elements) const {
  TF_ASSIGN_OR_RETURN(StTensorInfo info, Info(name));
  if (info.elements() != out_elements) {
    return InvalidArgument(Where(path(), name) + ": has " + std::to_string(info.elements()) +
                           " elements, expected " + std::to_string(out_elements));
  }
  if (!ConvertToF32(info.dtype, bytes_.data() + header_.data_start() + info.begin, out_elements, out)) {
    return InvalidArgument(Where(path(), name) + ": dtype " + std::string(StDtypeName(info.dtype)) + " is not a float type");
  }
  return Status::Ok();
}

StatusOr<std::vector<int64_t>> SafetensorsFile::ReadInts(std::string_view name) const {
  TF_ASSIGN_OR_RETURN(StTensorInfo info, Info(name));
  const char* p = bytes_.data() + header_.data_start() + info.begin;
  const int64_t n = info.elements();
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (info.dtype) {
      case StDtype::kI32: out[i] = Load<int32_t>(p + 4 * i); break;
      case StDtype::kI64: out[i] = Load<int64_t>(p + 8 * i); break;
      case StDtype::kU16: out[i] = Load<uint16_t>(p + 2 * i); break;
      case StDtype::kU8: out[i] = Load<uint8_t>(p + i); break;
      default:
        return InvalidArgument(Where(path(), name) + ": dtype " +
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
  return WriteFileAtomically(path, Serialize(), "safetensors file");
}

StatusOr<StTensorInfo> LayoutTensorInfo(const SafetensorsHeader& header, const ParamTensor& t) {
  if (!header.Has(t.name)) return NotFound(Where(header.path(), t.name) + ": missing (the model needs it)");
  TF_ASSIGN_OR_RETURN(StTensorInfo info, header.Info(t.name));
  if (info.shape != t.shape) {
    std::string got, want;
    for (int64_t d : info.shape) got += (got.empty() ? "" : ",") + std::to_string(d);
    for (int64_t d : t.shape) want += (want.empty() ? "" : ",") + std::to_string(d);
    return InvalidArgument(Where(header.path(), t.name) + ": shape [" + got + "], expected [" + want + "]");
  }
  if (!StDtypeIsFloat(info.dtype)) {
    return InvalidArgument(Where(header.path(), t.name) + ": dtype " + std::string(StDtypeName(info.dtype)) + " is not a float type");
  }
  return info;
}

Status LoadLlamaWeights(const SafetensorsFile& file, const ParamLayout& layout, float* params,
                        bool strict) {
  for (const ParamTensor& t : layout.tensors) {
    TF_RETURN_IF_ERROR(LayoutTensorInfo(file.header(), t).status());
    TF_RETURN_IF_ERROR(file.ReadF32(t.name, params + t.offset, t.elements));
  }
  if (strict) {
    for (const std::string& name : file.Names()) {
      if (layout.Find(name) == nullptr) {
        return InvalidArgument(Where(file.path(), name) + ": not a parameter of the model");
      }
    }
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
