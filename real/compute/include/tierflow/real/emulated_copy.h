// The emulated GPU's copies (gpu0 lives in host memory on a CPU-only machine). The executor's h2d
// and d2h tasks and the copy probe (host_probes.h) both call these, so that a probe measures
// exactly the work a run's copy tasks do.
//
// Thread safety: as the buffers passed in; `threads` runs one ParallelFor at a time.
#pragma once

#include <cstdint>
#include <cstring>

#include "tierflow/real/adamw.h"
#include "tierflow/real/cpu_threads.h"

namespace tierflow::real {

// h2d of bf16 parameters: a plain copy (no DMA engine to hand it to).
inline void EmulatedH2D(uint16_t* dst, const void* src, int64_t elements) {
  std::memcpy(dst, src, static_cast<size_t>(elements) * 2);
}

// d2h of fp32 gradients: the overflow check and squared norm on the way out (as DeepSpeed does on
// the GPU), then the copy into the host buffer, kept fp32 or cast to bf16.
inline cpu::GradCheck EmulatedD2HGrad(void* dst, const float* src, int64_t elements, bool to_bf16, float grad_scale,
                                      CpuThreads& threads) {
  const cpu::GradCheck check = cpu::OverflowCheckAndNorm(src, elements, grad_scale, threads);
  if (to_bf16) {
    cpu::Fp32ToBf16(static_cast<uint16_t*>(dst), src, elements, threads);
  } else {
    std::memcpy(dst, src, static_cast<size_t>(elements) * 4);
  }
  return check;
}

}  // namespace tierflow::real
