// Private to real/train: one safetensors shard written through a Storage, streamed (hf_io.cc).
#pragma once

#include <string>
#include <vector>

#include "tierflow/core/status.h"
#include "tierflow/real/hf_model.h"
#include "tierflow/real/llama.h"

namespace tierflow::real {

// Writes `tensors` (each params + t->offset, fp32) to `path` as a safetensors file in `dtype`,
// metadata {"format": "pt"}, the header padded with spaces to a multiple of kDirectAlignment so
// that the data goes out O_DIRECT in whole blocks (the file cut to its size at the end), then
// fsynced. Errors name the file.
Status WriteHfShard(const std::string& path, const std::vector<const ParamTensor*>& tensors, const float* params, StDtype dtype,
                    const HfIoOptions& io);

}  // namespace tierflow::real
