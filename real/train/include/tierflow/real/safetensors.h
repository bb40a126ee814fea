// Safetensors files (the format of Hugging Face checkpoints): an 8-byte little-endian header
// length, a JSON header {"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
// "__metadata__": {string: string}} and the raw little-endian tensor bytes after it.
//
// SafetensorsHeader validates a header (dtypes, that offsets lie inside the data and match
// shape * dtype size); SafetensorsFile reads a whole file into memory with its header (small
// files: test data, --init; Hugging Face directories stream through hf_model.h). SafetensorsWriter collects tensors and
// writes a file atomically (to "<path>.tmp", then rename). Errors name the file and the tensor.
// Also here: loading and saving a Llama's flat fp32 parameter buffer by Hugging Face names.
// Thread safety: values; distinct objects may be used from distinct threads.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tierflow/core/status.h"
#include "tierflow/real/llama.h"

namespace tierflow::real {

enum class StDtype { kF32, kF16, kBF16, kF64, kI32, kI64, kU16, kU8 };
std::string_view StDtypeName(StDtype dtype);  // "F32", "BF16", ...
int64_t StDtypeBytes(StDtype dtype);
bool StDtypeIsFloat(StDtype dtype);  // F32, F16, BF16, F64

struct StTensorInfo {
  StDtype dtype = StDtype::kF32;
  std::vector<int64_t> shape;
  int64_t begin = 0;  // byte offsets in the data section
  int64_t end = 0;
  int64_t elements() const;
};

// A file's header: its tensors and metadata, validated against the file's size (dtypes, that
// offsets lie inside the data and match shape * dtype size) without its data.
class SafetensorsHeader {
 public:
  // The header's length in bytes after the first 8: `first` holds at least the file's first 8
  // bytes; a length past `file_size` is DataLoss naming the file.
  static StatusOr<int64_t> Length(std::string_view first, int64_t file_size, const std::string& path);
  // `head` holds at least the file's first 8 + Length() bytes; `file_size` is the whole file's.
  static StatusOr<SafetensorsHeader> Parse(std::string_view head, int64_t file_size, const std::string& path);

  const std::string& path() const { return path_; }
  int64_t data_start() const { return data_start_; }  // the data section's offset in the file
  // Names in file order of their data offsets.
  std::vector<std::string> Names() const;
  bool Has(std::string_view name) const { return tensors_.count(std::string(name)) != 0; }
  // NotFound naming the file and tensor when absent.
  StatusOr<StTensorInfo> Info(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::string path_;
  int64_t data_start_ = 0;
  std::map<std::string, StTensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A whole file in memory: its header and its bytes.
class SafetensorsFile {
 public:
  static StatusOr<SafetensorsFile> Open(const std::string& path);
  // The same from bytes already in memory; `path` names it in errors.
  static StatusOr<SafetensorsFile> Parse(std::string bytes, const std::string& path);

  const SafetensorsHeader& header() const { return header_; }
  const std::string& path() const { return header_.path(); }
  std::vector<std::string> Names() const { return header_.Names(); }
  bool Has(std::string_view name) const { return header_.Has(name); }
  StatusOr<StTensorInfo> Info(std::string_view name) const { return header_.Info(name); }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata(); }

  // Converts a floating-point tensor (F32, F16, BF16, F64) to fp32 into out[0, elements).
  // Requires out.size() == elements; errors name the file and tensor.
  Status ReadF32(std::string_view name, float* out, int64_t out_elements) const;
  // Integer tensors (I32, I64, U16, U8) widened to int64.
  StatusOr<std::vector<int64_t>> ReadInts(std::string_view name) const;

 private:
  SafetensorsHeader header_;
  std::string bytes_;
};

// n elements of a float dtype (F32, F16, BF16, F64) at `src` (any alignment) to fp32; false for
// another dtype.
bool ConvertToF32(StDtype dtype, const char* src, int64_t n, float* out);

class SafetensorsWriter {
 public:
  // Adds a tensor from fp32 values, converted to `dtype` (F32, F16 or BF16, round to nearest
  // even). Names must be unique (InvalidArgument otherwise).
  Status AddF32(const std::string& name, StDtype dtype, const std::vector<int64_t>& shape,
                const float* values);
  // Adds raw bytes of any dtype; bytes.size() must equal elements * dtype size.
  Status AddRaw(const std::string& name, StDtype dtype, const std::vector<int64_t>& shape,
                std::string bytes);
  void SetMetadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  // Serialises (tensors in insertion order, header padded with spaces to 8 bytes).
  std::string Serialize() const;
  // Writes "<path>.tmp" then renames it over path.
  Status Write(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    StDtype dtype;
    std::vector<int64_t> shape;
    std::string bytes;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// The header's entry for a tensor of the layout: NotFound when it is missing, InvalidArgument when
// its shape differs or its dtype is not a float type; each names the file and the tensor.
StatusOr<StTensorInfo> LayoutTensorInfo(const SafetensorsHeader& header, const ParamTensor& t);

// Fills params (layout.total elements) from the file: every tensor of the layout must be present
// with its shape (any float dtype); tensors the layout does not have are ignored unless
// `strict` (then an error names the first one). Errors name the file and tensor.
Status LoadLlamaWeights(const SafetensorsFile& file, const ParamLayout& layout, float* params,
                        bool strict = false);
// Saves every tensor of the layout under its Hugging Face name in `dtype` (F32, F16 or BF16).
Status SaveLlamaWeights(const std::string& path, const ParamLayout& layout, const float* params,
                        StDtype dtype);

}  // namespace tierflow::real
