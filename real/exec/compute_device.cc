#include "compute_device.h"

#include "emulated_copy.h"

namespace tierflow::real::exec {

#ifdef TIERFLOW_EXEC_CUDA
// cuda_device.cc.
StatusOr<std::unique_ptr<ComputeDevice>> MakeCudaDevice(const TrainConfig& config);
#endif

namespace {

class CpuDevice final : public ComputeDevice {
 public:
  explicit CpuDevice(Trainer& trainer) : t_(trainer) { t_.EmulateGpu(); }
  std::string name() const override { return "cpu"; }
  Status LoadParams(const std::vector<uint16_t>& p16) override {
    t_.dev_p16 = p16;
    return Status::Ok();
  }
  Status H2D(int64_t element_offset, const void* src, int64_t n, DeviceSpan*) override {
    EmulatedH2D(t_.dev_p16.data() + element_offset, src, n);
    return Status::Ok();
  }
  StatusOr<cpu::GradCheck> D2HGrad(void* dst, int64_t element_offset, int64_t n, bool to_bf16, float grad_scale,
                                   CpuThreads& threads, DeviceSpan*) override {
    return EmulatedD2HGrad(dst, t_.dev_grad.data() + element_offset, n, to_bf16, grad_scale, threads);
  }
  Status Forward(int64_t layer, IterationState* it, CpuThreads& threads, DeviceSpan*) override {
    t_.Forward(layer, it, threads);
    return Status::Ok();
  }
  Status Backward(int64_t layer, IterationState* it, CpuThreads& threads, DeviceSpan*) override {
    t_.Backward(layer, it, threads);
    return Status::Ok();
  }

 private:
  Trainer& t_;
};

}  // namespace

std::unique_ptr<ComputeDevice> MakeCpuDevice(Trainer& trainer) { return std::make_unique<CpuDevice>(trainer); }

StatusOr<std::unique_ptr<ComputeDevice>> MakeComputeDevice(const std::string& name, const TrainConfig& config,
                                                           Trainer& trainer) {
  if (name == "cpu") return MakeCpuDevice(trainer);
  if (name == "cuda") {
#ifdef TIERFLOW_EXEC_CUDA
    auto device = MakeCudaDevice(config);
    if (!device.ok()) return Status(device.status().code(), "compute device 'cuda': " + device.status().message());
    return device;
#else
    (void)config;
    return Unavailable("compute device 'cuda': this build has no CUDA back-end (build with the CUDA toolkit)");
#endif
  }
  return InvalidArgument("compute device '" + name + "' (known: cpu, cuda)");
}

}  // namespace tierflow::real::exec
