#include "tierflow/real/compute_device.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "tierflow/core/text.h"
#include "tierflow/real/block_cache.h"
#include "tierflow/real/emulated_copy.h"
#include "cuda_device.h"

namespace tierflow::real {

namespace {

// gpu0's memory is host memory here, in blocks aligned as a GPU's; no page-locking (nothing
// copies it by DMA).
class CpuDevice final : public ComputeDevice {
 public:
  explicit CpuDevice(Trainer& trainer)
      : t_(trainer),
        blocks_([](int64_t bytes) -> void* {
                  void* p = nullptr;
                  return posix_memalign(&p, 256, static_cast<size_t>(bytes)) == 0 ? p : nullptr;
                },
                [](void* p, int64_t) { std::free(p); }) {
    t_.EmulateGpu();
  }
  std::string name() const override { return "cpu"; }
  StatusOr<void*> Allocate(int64_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    void* p = blocks_.Take(bytes);
    if (p == nullptr) return ResourceExhausted("cpu device: cannot allocate " + std::to_string(bytes) + " bytes of emulated GPU memory");
    return p;
  }
  void Free(void* block) override {
    std::lock_guard<std::mutex> lock(mu_);
    blocks_.Give(block);
  }
  MemoryPeak memory_peak() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return {blocks_.peak_bytes(), blocks_.peak_reserved_bytes()};
  }
  void LimitReserved(int64_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    blocks_.set_limit(bytes);
  }
  Status H2D(void* dst, const void* src, int64_t bytes, DeviceSpan*) override {
    EmulatedH2D(static_cast<uint16_t*>(dst), src, bytes / 2);
    return Status::Ok();
  }
  Status D2H(void* dst, const void* src, int64_t bytes) override {
    std::memcpy(dst, src, static_cast<size_t>(bytes));
    return Status::Ok();
  }
  Status D2D(void* dst, const void* src, int64_t bytes) override {
    std::memcpy(dst, src, static_cast<size_t>(bytes));
    return Status::Ok();
  }
  Status RoundToBf16(float* x, int64_t n, CpuThreads& threads) override {
    cpu::RoundToBf16(x, n, threads);
    return Status::Ok();
  }
  StatusOr<cpu::GradCheck> D2HGrad(void* dst, const float* src, int64_t n, bool to_bf16, float grad_scale,
                                   CpuThreads& threads, DeviceSpan*) override {
    return EmulatedD2HGrad(dst, src, n, to_bf16, grad_scale, threads);
  }
  StatusOr<cpu::GradCheck> D2HGradAccumulate(uint16_t* dst, const float* src, int64_t n, float grad_scale,
                                             CpuThreads& threads, DeviceSpan*) override {
    return cpu::AccumulateBf16(dst, src, n, grad_scale, threads);
  }
  Status Forward(int64_t layer, const std::vector<ParamRange>& params, IterationState* it, CpuThreads& threads,
                 DeviceSpan*) override {
    TF_RETURN_IF_ERROR(t_.CheckStepParams(layer, params));
    t_.Forward(layer, params, it, threads);
    return Status::Ok();
  }
  Status Backward(int64_t layer, const std::vector<ParamRange>& params, float* grads, IterationState* it,
                  CpuThreads& threads, DeviceSpan*) override {
    TF_RETURN_IF_ERROR(t_.CheckStepParams(layer, params));
    t_.Backward(layer, params, grads, it, threads);
    return Status::Ok();
  }
  Status AdamW(float* param, float* m, float* v, GradIn grad, uint16_t* bf16_param, int64_t n, int64_t step, float grad_scale,
               const AdamWConfig& config, CpuThreads& threads, DeviceSpan*) override {
    if (grad.fp32 != nullptr) {
      cpu::AdamW(param, m, v, grad.fp32, bf16_param, n, step, grad_scale, config, threads);
      return Status::Ok();
    }
    // bf16: widened (exactly) a block at a time, then the same AdamW, element by element the
    // same operations: the bits of cpu::AdamW over the widened gradient.
    constexpr int64_t kBlock = int64_t{1} << 20;
    std::vector<float> widened(static_cast<size_t>(std::min(n, kBlock)));
    for (int64_t at = 0; at < n; at += kBlock) {
      const int64_t k = std::min(kBlock, n - at);
      cpu::Bf16ToFp32(widened.data(), grad.bf16 + at, k, threads);
      cpu::AdamW(param + at, m + at, v + at, widened.data(), bf16_param == nullptr ? nullptr : bf16_param + at, k, step, grad_scale, config,
                 threads);
    }
    return Status::Ok();
  }
  Status Fp32ToBf16(uint16_t* dst, const float* src, int64_t n, CpuThreads& threads) override {
    cpu::Fp32ToBf16(dst, src, n, threads);
    return Status::Ok();
  }

 private:
  Trainer& t_;
  mutable std::mutex mu_;
  BlockCache blocks_;
};

}  // namespace

StatusOr<std::unique_ptr<WholeModel>> WholeModel::Create(ComputeDevice& device, const Trainer& trainer) {
  std::unique_ptr<WholeModel> m(new WholeModel(device, trainer));
  const ParamLayout& layout = trainer.layout();
  const int64_t head = trainer.layer_count() - 1;
  TF_ASSIGN_OR_RETURN(m->params_, device.Allocate(layout.total * 2));
  TF_ASSIGN_OR_RETURN(void* grads, device.Allocate((layout.total + trainer.StepGradElements(head) - trainer.LayerElements(head)) * 4));
  m->grads_ = static_cast<float*>(grads);
  return m;
}

WholeModel::~WholeModel() {
  device_.Free(params_);
  device_.Free(grads_);
}

Status WholeModel::Load(const std::vector<uint16_t>& p16) {
  if (static_cast<int64_t>(p16.size()) != layout_.total) {
    return InvalidArgument("whole model: " + std::to_string(p16.size()) + " parameters for a model of " + std::to_string(layout_.total));
  }
  return device_.H2D(params_, p16.data(), layout_.total * 2, nullptr);
}

std::vector<ParamRange> WholeModel::Layer(int64_t layer) const {
  const auto* p = static_cast<const uint16_t*>(params_);
  std::vector<ParamRange> ranges = {{trainer_.LayerBegin(layer), trainer_.LayerElements(layer), p + trainer_.LayerBegin(layer)}};
  if (trainer_.TiedHead(layer)) ranges.push_back({trainer_.LayerBegin(0), trainer_.LayerElements(0), p + trainer_.LayerBegin(0)});
  return ranges;
}

// The head is the last layer: its step's gradients run on past the model's into the table's part.
const float* WholeModel::tied_grads() const {
  return trainer_.TiedHead(trainer_.layer_count() - 1) ? grads_ + layout_.total : nullptr;
}

float* WholeModel::LayerGrads(int64_t layer) const { return grads_ + layout_.layer_offset[static_cast<size_t>(layer)]; }

std::unique_ptr<ComputeDevice> MakeCpuDevice(Trainer& trainer) { return std::make_unique<CpuDevice>(trainer); }

StatusOr<std::unique_ptr<ComputeDevice>> MakeComputeDevice(const std::string& name, const TrainConfig& config,
                                                           Trainer& trainer, int local_rank) {
  if (name == "cpu") return MakeCpuDevice(trainer);
  if (name == "cuda") {
    auto device = MakeCudaDevice(config, local_rank);
    if (!device.ok()) return Status(device.status().code(), "compute device 'cuda': " + device.status().message());
    return device;
  }
  return InvalidArgument("compute device " + Quoted(name) + " (known: cpu, cuda)");
}

}  // namespace tierflow::real
