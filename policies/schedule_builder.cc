// The schedule builder (schedule_builder.h).
#include "schedule_builder.h"

#include "tierflow/core/text.h"
#include "tierflow/models/llm.h"

namespace tierflow::policies {

ScheduleBuilder::ScheduleBuilder(const Scenario& s, std::string policy) : scenario_(s), policy_(std::move(policy)) {
  schedule_.name = s.name;
  schedule_.DeferNameIndexes();  // no pass looks a task, buffer or tensor up by name: Finish indexes them
  schedule_.meta.emplace_back("policy", policy_);
  schedule_.meta.emplace_back("model", s.model.name);
  if (!s.model_dir.empty()) schedule_.meta.emplace_back("model.hf_dir", s.model_dir);
  schedule_.meta.emplace_back("hardware", s.hardware.node.name);
  // What `sim`, `run` and `validate` of the schedule file read (ScheduleToJson writes them as
  // JSON objects), written from the structs directly.
  schedule_.sections.model = models::LlmToJson(s.model);
  schedule_.sections.hardware = models::HardwareToJson(s.hardware);
  schedule_.sections.training = models::TrainingToJson(s.training);
  Host(0);
}

StatusOr<Schedule> ScheduleBuilder::Finish() {
  schedule_.IndexNames();
  const Status st = schedule_.Validate();
  if (st.code() == StatusCode::kResourceExhausted) {
    return st.WithContext(policy_ + ": the scenario's memory budget is too small for this schedule");
  }
  TF_RETURN_IF_ERROR(st.WithContext(policy_ + " generated an invalid schedule (a bug)"));
  return std::move(schedule_);
}

int32_t ScheduleBuilder::Device(const std::string& name, DeviceKind kind) {
  int32_t d = schedule_.FindDevice(name);
  return d != kNoIndex ? d : schedule_.AddDevice({name, kind});
}

int32_t ScheduleBuilder::Resource(const std::string& name, const std::string& device, int32_t concurrency) {
  int32_t r = schedule_.FindResource(name);
  if (r != kNoIndex) return r;
  int32_t d = schedule_.FindDevice(device);
  TF_CHECK(d != kNoIndex);
  return schedule_.AddResource({name, d, concurrency});
}

int32_t ScheduleBuilder::Pool(const std::string& name, const std::string& device, int64_t capacity_bytes) {
  int32_t p = schedule_.FindPool(name);
  if (p != kNoIndex) return p;
  int32_t d = schedule_.FindDevice(device);
  TF_CHECK(d != kNoIndex);
  return schedule_.AddPool({name, d, capacity_bytes});
}

int32_t ScheduleBuilder::Buffer(std::string name, int32_t pool, int64_t size_bytes, bool persistent) {
  return schedule_.AddBuffer({std::move(name), pool, size_bytes, persistent});
}

int32_t ScheduleBuilder::NodeOf(int32_t rank) const { return rank / std::max(1, scenario_.hardware.node.gpu_count); }
std::string ScheduleBuilder::OnNode(int32_t rank, const std::string& local) const {
  return models::NodeDeviceName(scenario_.hardware, NodeOf(rank), local);
}
ScheduleBuilder::RankDevices& ScheduleBuilder::Of(int32_t rank) {
  TF_CHECK(rank >= 0);
  if (static_cast<size_t>(rank) >= ranks_.size()) ranks_.resize(static_cast<size_t>(rank) + 1);
  return ranks_[static_cast<size_t>(rank)];
}
std::string ScheduleBuilder::Gpu(int32_t rank) {
  RankDevices& d = Of(rank);
  if (d.gpu.empty()) {
    const int32_t local = scenario_.hardware.nodes > 1 ? rank % std::max(1, scenario_.hardware.node.gpu_count) : rank;
    d.gpu = OnNode(rank, "gpu" + std::to_string(local));
    Device(d.gpu, DeviceKind::kGpu);
  }
  return d.gpu;
}
std::string ScheduleBuilder::Host(int32_t rank) {
  std::string name = OnNode(rank, "host");
  Device(name, DeviceKind::kHost);
  return name;
}
std::string ScheduleBuilder::Nvme(int32_t rank, int32_t disk) {
  std::string name = OnNode(rank, "nvme" + std::to_string(disk));
  Device(name, DeviceKind::kNvme);
  return name;
}
std::string ScheduleBuilder::Remote(int32_t rank, int32_t tier) {
  std::string name = OnNode(rank, "remote" + std::to_string(tier));
  Device(name, DeviceKind::kRemote);
  return name;
}

int32_t ScheduleBuilder::GpuCompute(int32_t r) {
  if (Of(r).compute == kNoIndex) {
    const std::string g = Gpu(r);
    Of(r).compute = Resource(g + ".compute", g);
  }
  return Of(r).compute;
}
int32_t ScheduleBuilder::GpuH2D(int32_t r) {
  if (Of(r).h2d == kNoIndex) {
    const std::string g = Gpu(r);
    Of(r).h2d = Resource(g + ".h2d", g);
  }
  return Of(r).h2d;
}
int32_t ScheduleBuilder::GpuD2H(int32_t r) {
  if (Of(r).d2h == kNoIndex) {
    const std::string g = Gpu(r);
    Of(r).d2h = Resource(g + ".d2h", g);
  }
  return Of(r).d2h;
}
int32_t ScheduleBuilder::Cpu(int32_t r) {
  if (Of(r).cpu == kNoIndex) Of(r).cpu = Resource(OnNode(r, "cpu.r" + std::to_string(r)), Host(r));
  return Of(r).cpu;
}
int32_t ScheduleBuilder::Comm() {
  Device("net", DeviceKind::kNetwork);
  return Resource("dp.comm", "net");
}
int32_t ScheduleBuilder::GpuPool(int32_t r) {
  if (Of(r).pool == kNoIndex) {
    const std::string g = Gpu(r);
    Of(r).pool = Pool(g + ".hbm", g, scenario_.hardware.node.gpu.hbm_bytes);
  }
  return Of(r).pool;
}

void ScheduleBuilder::StateLayout(const ModelPlan& plan) {
  const int64_t mib = int64_t{1} << 20;
  // Each rank's stretch starts on an aligned boundary (kIoAlignElements).
  state_rank_elements_ = (plan.rank_elements + kIoAlignElements - 1) / kIoAlignElements * kIoAlignElements;
  state_region_bytes_ = (plan.ranks * state_rank_elements_ * 4 + mib - 1) / mib * mib;
  // Room for what a plan of this size makes (the quickstart's: 9.5 tasks, 4.5 buffers and 3.7
  // state tensors a unit and rank), so that neither the specs nor State()'s map grow by copying
  // and rehashing while the passes add them: a rehash of the map alone was 1.5 % of a sweep
  // worker's time. Only before the first State(): StateLayout runs again for each rank's
  // optimizer sweep.
  if (!states_.empty()) return;
  const size_t per_unit_rank = plan.units.size() * static_cast<size_t>(plan.ranks);
  schedule_.Reserve(per_unit_rank * 10, per_unit_rank * 5, per_unit_rank * 4);
  states_.reserve(per_unit_rank * 4);
  state_index_.Reserve(per_unit_rank * 4);
}

int32_t& ScheduleBuilder::StateEntry(const StateKey& key) {
  const uint64_t h = NameIndex::Mix(
      static_cast<uint64_t>(key.begin) * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(key.elements) * 0xC2B2AE3D27D4EB4Full ^
      (static_cast<uint64_t>(static_cast<uint32_t>(key.rank)) << 32 | static_cast<uint32_t>(key.device)) * 0x165667B19E3779F9ull ^
      static_cast<uint64_t>(key.kind));
  const int32_t e = state_index_.FindHashed(key, h, states_, [](const auto& entry) -> const StateKey& { return entry.first; });
  if (e != NameIndex::kAbsent) return states_[static_cast<size_t>(e)].second;
  state_index_.AddHashed(h);
  return states_.emplace_back(key, kNoIndex).second;
}

int32_t ScheduleBuilder::State(StateKind kind, int32_t rank, int64_t begin, int64_t elements, int32_t device) {
  TF_CHECK(state_region_bytes_ > 0);  // StateLayout first, or every kind would share one region
  int32_t& known = StateEntry(StateKey{begin, elements, rank, device, kind});
  if (known != kNoIndex) return known;
  const int64_t element_bytes = StateKindBytes(kind);
  // The key names the tensor (its name spells the key out, and only State() makes tensors), so
  // a new key is a new name: AddTensor's index still checks it.
  TensorSpec t;
  t.name = StrCat({StateKindName(kind), ".r", rank, "[", begin, "+", elements, "]@", schedule_.devices()[device].name});
  t.kind = kind;
  t.dtype = StateKindDtype(kind);
  t.shape = {elements};
  t.rank = rank;
  t.device = device;
  t.element_offset = begin;
  t.size_bytes = elements * element_bytes;
  // The order of the kinds (StateKind) fixes each kind's region in a device's store.
  t.offset_bytes = static_cast<int64_t>(kind) * state_region_bytes_ + (rank * state_rank_elements_ + begin) * element_bytes;
  return known = schedule_.AddTensor(std::move(t));
}

int32_t PinnedPool(ScheduleBuilder& b, int32_t rank, const std::string& name, int64_t capacity_bytes, bool rounding) {
  int64_t rounded = capacity_bytes;
  if (rounding && capacity_bytes > 0) {
    rounded = 1;
    while (rounded < capacity_bytes) rounded <<= 1;
  }
  const int32_t pool = b.Pool(name, b.Host(rank), rounded);
  if (rounded > capacity_bytes) b.Buffer(name + ".pad", pool, rounded - capacity_bytes, /*persistent=*/true);
  return pool;
}

}  // namespace tierflow::policies
