#include "tierflow/models/hardware.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>
#include <string>

#include "tierflow/core/text.h"
#include "hardware_presets.inc"
#include "tierflow/models/yaml_tree.h"
#include "doc.h"
#include "yaml_fields.h"

namespace tierflow::models {

using internal::Doc;
namespace {

using internal::FieldReader;


// A map of BLOCKxDEPTH (request bytes x requests in flight) to a number, e.g. {16384x1: 2.5e8},
// into `table` as points (block_bytes, queue_depth, `value`), sorted by block then depth.
template <typename Point>
Status ReadRequestMap(FieldReader& r, const char* field, const char* unit, const char* example, double Point::*value,
                      std::vector<Point>* table) {
  if (!r.Has(field)) return Status::Ok();
  const std::string key = r.KeyPath(field);
  const YAML::Node points = r.Child(field);
  if (!points.IsMap()) return InvalidArgument(key + ": expected a map of BLOCKxDEPTH to " + unit + ", e.g. {16384x1: " + example + "}");
  table->clear();
  for (const auto& kv : points) {
    const std::string k = kv.first.Scalar(), v = kv.second.IsScalar() ? kv.second.Scalar() : internal::Describe(kv.second);
    Point m;
    const char* end = k.data() + k.size();
    const auto [x, ec1] = std::from_chars(k.data(), end, m.block_bytes);
    const auto [rest, ec2] = ec1 == std::errc() && x != end && *x == 'x' ? std::from_chars(x + 1, end, m.queue_depth)
                                                                        : std::from_chars_result{x, std::errc::invalid_argument};
    if (ec2 != std::errc() || rest != end || m.block_bytes < 1 || m.queue_depth < 1) {
      return InvalidArgument(key + ": '" + k + "' is not BLOCKxDEPTH (request bytes x requests in flight, both >= 1)");
    }
    if (!kv.second.IsScalar() || !internal::IsBareNumber(v)) return InvalidArgument(key + "." + k + ": '" + v + "' is not a number of " + unit);
    m.*value = std::stod(v);
    table->push_back(m);
  }
  std::sort(table->begin(), table->end(), [](const Point& a, const Point& b) {
    return std::pair{a.block_bytes, a.queue_depth} < std::pair{b.block_bytes, b.queue_depth};
  });
  return Status::Ok();
}

// A map read by ReadRequestMap, as `key`: each class once, and each value as `rule` wants it
// (`rule(value)`: empty, or what is wrong after the value, e.g. " cores, outside 0..2").
template <typename Point, typename Rule>
Status CheckRequestMap(const std::string& key, const std::vector<Point>& table, double Point::*value, Rule rule) {
  for (size_t k = 0; k < table.size(); ++k) {
    const Point& m = table[k];
    const std::string at = std::to_string(m.block_bytes) + "x" + std::to_string(m.queue_depth);
    const std::string wrong = rule(m.*value);
    if (!wrong.empty()) return InvalidArgument(key + "." + at + ": " + std::to_string(m.*value) + wrong);
    if (k > 0 && table[k - 1].block_bytes == m.block_bytes && table[k - 1].queue_depth == m.queue_depth) {
      return InvalidArgument(key + ": " + at + " given twice");
    }
  }
  return Status::Ok();
}

// Each Apply* reads the keys present in `node` onto `out`, leaving absent fields as they are, so
// one code path serves full descriptions (applied onto defaults) and overrides (onto a preset).

Status ApplyGpu(const YAML::Node& node, const std::string& path, GpuSpec* g) {
  FieldReader r(node, path);
  TF_RETURN_IF_ERROR(r.String("name", &g->name));
  TF_RETURN_IF_ERROR(r.Bytes("hbm", &g->hbm_bytes));
  TF_RETURN_IF_ERROR(r.FlopRate("peak_flops", &g->peak_flops));
  TF_RETURN_IF_ERROR(r.Bandwidth("hbm_bw", &g->hbm_bw_bytes_per_s));
  TF_RETURN_IF_ERROR(r.Fraction("compute_efficiency", &g->compute_efficiency));
  TF_RETURN_IF_ERROR(r.Fraction("forward_efficiency", &g->forward_efficiency));
  TF_RETURN_IF_ERROR(r.Fraction("backward_efficiency", &g->backward_efficiency));
  TF_RETURN_IF_ERROR(r.Duration("kernel_overhead", &g->kernel_overhead_s));
  TF_RETURN_IF_ERROR(r.Bandwidth("adam_bw", &g->adam_bw_bytes_per_s));
  TF_RETURN_IF_ERROR(r.Bool("shares_host_cores", &g->shares_host_cores));
  return r.Finish();
}

Status ApplyPcie(const YAML::Node& node, const std::string& path, PcieSpec* p) {
  FieldReader r(node, path);
  TF_RETURN_IF_ERROR(r.Bandwidth("h2d_bw", &p->h2d_bw_bytes_per_s));
  TF_RETURN_IF_ERROR(r.Bandwidth("d2h_bw", &p->d2h_bw_bytes_per_s));
  TF_RETURN_IF_ERROR(r.Bandwidth("d2h_bf16_bw", &p->d2h_bf16_bw_bytes_per_s));
  TF_RETURN_IF_ERROR(r.Fraction("pageable_factor", &p->pageable_factor));
  TF_RETURN_IF_ERROR(r.Duration("latency", &p->latency_s));
  TF_RETURN_IF_ERROR(r.Bandwidth("root_complex_bw", &p->root_complex_bw_bytes_per_s));
  return r.Finish();
}

Status ApplyCpu(const YAML::Node& node, const std::string& path, CpuSpec* c) {
  FieldReader r(node, path);
  TF_RETURN_IF_ERROR(r.Int32("cores", &c->cores));
  TF_RETURN_IF_ERROR(r.Bytes("host_memory", &c->host_memory_bytes));
  TF_RETURN_IF_ERROR(r.Bytes("host_reserve", &c->host_reserve_bytes));
  TF_RETURN_IF_ERROR(r.Bandwidth("memory_bw", &c->memory_bw_bytes_per_s));
  TF_RETURN_IF_ERROR(r.ElementRate("adam_rate_per_core", &c->adam_elements_per_s_per_core));
  TF_RETURN_IF_ERROR(r.Bandwidth("convert_bw_per_core", &c->convert_bytes_per_s_per_core));
  TF_RETURN_IF_ERROR(r.Duration("task_overhead", &c->task_overhead_s));
  TF_RETURN_IF_ERROR(r.Duration("task_overhead_cpu", &c->task_overhead_cpu_s));
  TF_RETURN_IF_ERROR(ReadRequestMap(r, "io_read_cores", "cores", "0.8", &IoCpuPoint::cores, &c->io_read_cores));
  TF_RETURN_IF_ERROR(ReadRequestMap(r, "io_write_cores", "cores", "0.8", &IoCpuPoint::cores, &c->io_write_cores));
  TF_RETURN_IF_ERROR(ReadRequestMap(r, "io_read_beside_compute", "the rate kept", "0.6", &IoRateKept::kept, &c->io_read_beside_compute));
  TF_RETURN_IF_ERROR(ReadRequestMap(r, "io_write_beside_compute", "the rate kept", "0.6", &IoRateKept::kept, &c->io_write_beside_compute));
  return r.Finish();
}

Status ApplyInterconnect(const YAML::Node& node, const std::string& path, InterconnectSpec* ic) {
  FieldReader r(node, path);
  TF_RETURN_IF_ERROR(r.String("kind", &ic->kind));
  TF_RETURN_IF_ERROR(r.Bandwidth("bus_bw", &ic->bus_bw_bytes_per_s));
  TF_RETURN_IF_ERROR(r.Duration("latency", &ic->latency_s));
  TF_RETURN_IF_ERROR(r.Bandwidth("local_bw", &ic->local_bw_bytes_per_s));
  return r.Finish();
}

Status ApplyNvme(const YAML::Node& node, const std::string& path, NvmeSpec* d) {
  FieldReader r(node, path);
  TF_RETURN_IF_ERROR(r.String("name", &d->name));
  TF_RETURN_IF_ERROR(r.Bytes("capacity", &d->capacity_bytes));
  TF_RETURN_IF_ERROR(r.Bandwidth("read_bw", &d->read_bw_bytes_per_s));
  TF_RETURN_IF_ERROR(r.Bandwidth("write_bw", &d->write_bw_bytes_per_s));
  TF_RETURN_IF_ERROR(r.Duration("read_latency", &d->read_latency_s));
  TF_RETURN_IF_ERROR(r.Duration("write_latency", &d->write_latency_s));
  TF_RETURN_IF_ERROR(r.Fraction("read_iops", &d->read_iops));
  TF_RETURN_IF_ERROR(r.Fraction("write_iops", &d->write_iops));
  TF_RETURN_IF_ERROR(r.Fraction("mixed_efficiency", &d->mixed_efficiency));
  if (r.Has("mixed_efficiency_by_streams")) {
    const std::string key = r.KeyPath("mixed_efficiency_by_streams");
    const YAML::Node points = r.Child("mixed_efficiency_by_streams");
    if (!points.IsMap()) return InvalidArgument(key + ": expected a map of stream count to efficiency, e.g. {2: 0.9, 8: 0.8}");
    d->mixed_efficiency_by_streams.clear();
    for (const auto& kv : points) {
      const std::string n_text = kv.first.Scalar(), e_text = kv.second.IsScalar() ? kv.second.Scalar() : internal::Describe(kv.second);
      int32_t n = 0;
      const auto [end, ec] = std::from_chars(n_text.data(), n_text.data() + n_text.size(), n);
      if (ec != std::errc() || end != n_text.data() + n_text.size() || n < 2) {
        return InvalidArgument(key + ": '" + n_text + "' is not a stream count of 2 or more");
      }
      if (!kv.second.IsScalar() || !internal::IsBareNumber(e_text)) return InvalidArgument(key + "." + n_text + ": '" + e_text + "' is not a number");
      d->mixed_efficiency_by_streams.emplace_back(n, std::stod(e_text));
    }
    std::sort(d->mixed_efficiency_by_streams.begin(), d->mixed_efficiency_by_streams.end());
  }
  TF_RETURN_IF_ERROR(ReadRequestMap(r, "read_bw_by_request", "bytes/s", "2.5e8", &MeasuredBandwidth::bytes_per_s, &d->read_bw_by_request));
  TF_RETURN_IF_ERROR(ReadRequestMap(r, "write_bw_by_request", "bytes/s", "2.5e8", &MeasuredBandwidth::bytes_per_s, &d->write_bw_by_request));
  if (r.Has("same_device_as")) {
    std::string other;
    TF_RETURN_IF_ERROR(r.String("same_device_as", &other));
    int32_t index = -1;
    if (other != "none") {
      const auto [end, ec] = other.size() > 4 && other.rfind("nvme", 0) == 0
                                 ? std::from_chars(other.data() + 4, other.data() + other.size(), index)
                                 : std::from_chars_result{other.data(), std::errc::invalid_argument};
      if (ec != std::errc() || end != other.data() + other.size() || index < 0) {
        return InvalidArgument(path + ".same_device_as: '" + other + "' is not nvme<N> (or none)");
      }
    }
    d->same_device_as = index;
  }
  return r.Finish();
}

Status ApplyRemote(const YAML::Node& node, const std::string& path, RemoteTierSpec* t) {
  FieldReader r(node, path);
  TF_RETURN_IF_ERROR(r.String("name", &t->name));
  TF_RETURN_IF_ERROR(r.Bandwidth("read_bw", &t->read_bw_bytes_per_s));
  TF_RETURN_IF_ERROR(r.Bandwidth("write_bw", &t->write_bw_bytes_per_s));
  TF_RETURN_IF_ERROR(r.Duration("latency", &t->latency_s));
  return r.Finish();
}

// A list replaces the current one; entry i starts from the current entry i (or the current last
// entry when the new list is longer), so `nvme: [{}, {}, {}, {}]` turns one disk into four equal
// ones and `nvme: [{read_bw: 6 GB/s}]` changes one number of a one-disk preset.
template <typename T>
Status ApplyList(const YAML::Node& node, const std::string& path,
                 Status (*apply)(const YAML::Node&, const std::string&, T*), std::vector<T>* list) {
  if (!node.IsDefined() || node.IsNull()) return Status::Ok();
  if (!node.IsSequence()) {
    return InvalidArgument(path + ": expected a list, got " + internal::Describe(node));
  }
  std::vector<T> out;
  for (size_t i = 0; i < node.size(); ++i) {
    T entry = i < list->size() ? (*list)[i] : (list->empty() ? T{} : list->back());
    TF_RETURN_IF_ERROR(apply(node[i], path + "[" + std::to_string(i) + "]", &entry));
    out.push_back(std::move(entry));
  }
  *list = std::move(out);
  return Status::Ok();
}

Status ApplyNode(const YAML::Node& node, const std::string& path, NodeSpec* n) {
  FieldReader r(node, path);
  TF_RETURN_IF_ERROR(r.status());
  TF_RETURN_IF_ERROR(r.String("name", &n->name));
  TF_RETURN_IF_ERROR(r.String("source", &n->source));
  TF_RETURN_IF_ERROR(r.Int32("gpu_count", &n->gpu_count));
  TF_RETURN_IF_ERROR(ApplyGpu(r.Child("gpu"), r.KeyPath("gpu"), &n->gpu));
  TF_RETURN_IF_ERROR(ApplyPcie(r.Child("pcie"), r.KeyPath("pcie"), &n->pcie));
  TF_RETURN_IF_ERROR(ApplyCpu(r.Child("cpu"), r.KeyPath("cpu"), &n->cpu));
  TF_RETURN_IF_ERROR(
      ApplyInterconnect(r.Child("interconnect"), r.KeyPath("interconnect"), &n->interconnect));
  TF_RETURN_IF_ERROR(ApplyList<NvmeSpec>(r.Child("nvme"), r.KeyPath("nvme"), ApplyNvme, &n->nvme));
  TF_RETURN_IF_ERROR(
      ApplyList<RemoteTierSpec>(r.Child("remote"), r.KeyPath("remote"), ApplyRemote, &n->remote));
  TF_RETURN_IF_ERROR(r.Bandwidth("nic_bw", &n->nic_bw_bytes_per_s));
  TF_RETURN_IF_ERROR(r.Duration("nic_latency", &n->nic_latency_s));
  return r.Finish();
}

// Applies a description (without `preset`) onto `hw`.
Status ApplyHardware(const YAML::Node& node, const std::string& path, bool allow_preset,
                     HardwareSpec* hw) {
  FieldReader r(node, path);
  TF_RETURN_IF_ERROR(r.status());
  if (allow_preset) {
    std::string preset;
    TF_RETURN_IF_ERROR(r.String("preset", &preset));
    if (!preset.empty()) {
      auto p = HardwarePreset(preset);
      if (!p.ok()) return InvalidArgument(r.KeyPath("preset") + ": " + p.status().message());
      *hw = p.value();
    }
  }
  TF_RETURN_IF_ERROR(r.Int32("nodes", &hw->nodes));
  TF_RETURN_IF_ERROR(ApplyNode(r.Child("node"), r.KeyPath("node"), &hw->node));
  return r.Finish();
}

// By name, or by the name in another case (A100x4-1NVMe).
const PresetText* FindPreset(std::string_view name) {
  for (const auto& p : kHardwarePresets) {
    if (name == p.name) return &p;
  }
  auto lower = [](std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  for (const auto& p : kHardwarePresets) {
    if (lower(name) == lower(p.name)) return &p;
  }
  return nullptr;
}

// A size or rate: positive, and within what hardware can be (1 to 1e18 bytes, bytes/s, FLOP/s or
// elements/s), so that no duration derived from it is absurd ('1e-300 GB/s' printed a 63-digit
// time).
Status Positive(double v, const std::string& path) {
  if (v == 0)
    return InvalidArgument(path + " must be positive, got 0 (missing from the description?)");
  if (!(v > 0)) return InvalidArgument(path + " must be positive, got " + fmt::format("{:g}", v));
  if (!(v >= 1 && v <= 1e18)) return InvalidArgument(path + " is " + fmt::format("{:g}", v) + " in base units, outside what hardware can be [1, 1e18]");
  return Status::Ok();
}

Status InUnitInterval(double v, const std::string& path) {
  if (!(v > 0 && v <= 1)) {
    return InvalidArgument(path + " must be in (0, 1], got " + fmt::format("{:g}", v));
  }
  return Status::Ok();
}

StatusOr<HardwareSpec> ParsePresetText(const PresetText& p) {
  YAML::Node node;
  try {
    node = YAML::Load(p.yaml);
  } catch (const YAML::Exception& e) {
    return Internal(std::string("hardware preset '") + p.name + "' does not parse: " + e.what());
  }
  HardwareSpec hw;
  Status s = ApplyHardware(node, "hardware", /*allow_preset=*/false, &hw);
  if (s.ok()) s = ValidateHardware(hw);
  if (!s.ok()) return Internal(std::string("hardware preset '") + p.name + "': " + s.message());
  return hw;
}

}  // namespace

std::vector<std::string> HardwarePresetNames() {
  std::vector<std::string> names;
  for (const auto& p : kHardwarePresets) names.push_back(p.name);
  return names;
}

StatusOr<std::string> HardwarePresetYaml(std::string_view name) {
  const PresetText* p = FindPreset(name);
  if (p == nullptr) {
    return NotFound("unknown hardware preset " + Quoted(name) + " (known: " + JoinNames(HardwarePresetNames()) + ")");
  }
  return std::string(p->yaml);
}

StatusOr<HardwareSpec> HardwarePreset(std::string_view name) {
  const PresetText* p = FindPreset(name);
  if (p == nullptr) {
    return NotFound("unknown hardware preset " + Quoted(name) + " (known: " + JoinNames(HardwarePresetNames()) + ")");
  }
  return ParsePresetText(*p);
}

StatusOr<HardwareSpec> HardwareFromYaml(const YAML::Node& node) {
  HardwareSpec hw;
  try {
    TF_RETURN_IF_ERROR(ApplyHardware(node, "hardware", /*allow_preset=*/true, &hw));
  } catch (const YAML::Exception& e) {
    return InvalidArgument(std::string("hardware: ") + e.what());
  }
  TF_RETURN_IF_ERROR(ValidateHardware(hw));
  return hw;
}

StatusOr<HardwareSpec> HardwareFromYamlText(std::string_view yaml_text) {
  TF_ASSIGN_OR_RETURN(const YAML::Node node, LoadYamlText(yaml_text, "hardware"));
  return HardwareFromYaml(node);
}

Status ValidateHardware(const HardwareSpec& hw) {
  const std::string n = "hardware.node";
  if (hw.nodes < 1) {
    return InvalidArgument("hardware.nodes must be at least 1, got " + std::to_string(hw.nodes));
  }
  const NodeSpec& node = hw.node;
  if (node.gpu_count < 1) {
    return InvalidArgument(n + ".gpu_count must be at least 1, got " +
                           std::to_string(node.gpu_count));
  }
  TF_RETURN_IF_ERROR(Positive(static_cast<double>(node.gpu.hbm_bytes), n + ".gpu.hbm"));
  TF_RETURN_IF_ERROR(Positive(node.gpu.peak_flops, n + ".gpu.peak_flops"));
  TF_RETURN_IF_ERROR(Positive(node.gpu.hbm_bw_bytes_per_s, n + ".gpu.hbm_bw"));
  TF_RETURN_IF_ERROR(InUnitInterval(node.gpu.compute_efficiency, n + ".gpu.compute_efficiency"));
  if (node.gpu.forward_efficiency != 0) {
    TF_RETURN_IF_ERROR(InUnitInterval(node.gpu.forward_efficiency, n + ".gpu.forward_efficiency"));
  }
  if (node.gpu.backward_efficiency != 0) {
    TF_RETURN_IF_ERROR(InUnitInterval(node.gpu.backward_efficiency, n + ".gpu.backward_efficiency"));
  }
  if (node.gpu.kernel_overhead_s < 0) {
    return InvalidArgument(n + ".gpu.kernel_overhead must not be negative");
  }
  if (node.gpu.adam_bw_bytes_per_s < 0) return InvalidArgument(n + ".gpu.adam_bw must not be negative");
  TF_RETURN_IF_ERROR(Positive(node.pcie.h2d_bw_bytes_per_s, n + ".pcie.h2d_bw"));
  TF_RETURN_IF_ERROR(Positive(node.pcie.d2h_bw_bytes_per_s, n + ".pcie.d2h_bw"));
  if (node.pcie.d2h_bf16_bw_bytes_per_s < 0) return InvalidArgument(n + ".pcie.d2h_bf16_bw must not be negative");
  TF_RETURN_IF_ERROR(InUnitInterval(node.pcie.pageable_factor, n + ".pcie.pageable_factor"));
  TF_RETURN_IF_ERROR(Positive(node.pcie.root_complex_bw_bytes_per_s, n + ".pcie.root_complex_bw"));
  if (node.pcie.latency_s < 0) return InvalidArgument(n + ".pcie.latency must not be negative");
  if (node.cpu.task_overhead_s < 0) return InvalidArgument(n + ".cpu.task_overhead must not be negative");
  if (node.cpu.task_overhead_cpu_s < 0) return InvalidArgument(n + ".cpu.task_overhead_cpu must not be negative");
  for (const auto& [field, table] : {std::pair{".cpu.io_read_cores", &node.cpu.io_read_cores},
                                      std::pair{".cpu.io_write_cores", &node.cpu.io_write_cores}}) {
    TF_RETURN_IF_ERROR(CheckRequestMap(n + field, *table, &IoCpuPoint::cores, [&](double cores) {
      return cores >= 0 && cores <= node.cpu.cores ? std::string() : " cores, outside 0.." + std::to_string(node.cpu.cores);
    }));
  }
  for (const auto& [field, table] : {std::pair{".cpu.io_read_beside_compute", &node.cpu.io_read_beside_compute},
                                      std::pair{".cpu.io_write_beside_compute", &node.cpu.io_write_beside_compute}}) {
    TF_RETURN_IF_ERROR(CheckRequestMap(n + field, *table, &IoRateKept::kept, [](double kept) {
      return kept > 0 && kept <= 1 ? std::string()
                                   : std::string(" of the rate alone, outside (0, 1]: a stream beside compute keeps a share of its rate");
    }));
  }
  if (node.cpu.cores < 1) {
    return InvalidArgument(n + ".cpu.cores must be at least 1, got " +
                           std::to_string(node.cpu.cores));
  }
  TF_RETURN_IF_ERROR(
      Positive(static_cast<double>(node.cpu.host_memory_bytes), n + ".cpu.host_memory"));
  if (node.cpu.host_reserve_bytes >= node.cpu.host_memory_bytes) {
    return InvalidArgument(n + ".cpu.host_reserve " + std::to_string(node.cpu.host_reserve_bytes) + " B leaves nothing of host_memory " +
                           std::to_string(node.cpu.host_memory_bytes) + " B to pin");
  }
  TF_RETURN_IF_ERROR(Positive(node.cpu.memory_bw_bytes_per_s, n + ".cpu.memory_bw"));
  TF_RETURN_IF_ERROR(
      Positive(node.cpu.adam_elements_per_s_per_core, n + ".cpu.adam_rate_per_core"));
  TF_RETURN_IF_ERROR(
      Positive(node.cpu.convert_bytes_per_s_per_core, n + ".cpu.convert_bw_per_core"));
  if (node.interconnect.kind != "pcie" && node.interconnect.kind != "nvlink") {
    return InvalidArgument(n + ".interconnect.kind must be 'pcie' or 'nvlink', got '" +
                           node.interconnect.kind + "'");
  }
  if (node.gpu_count > 1 || hw.nodes > 1) {
    TF_RETURN_IF_ERROR(Positive(node.interconnect.bus_bw_bytes_per_s, n + ".interconnect.bus_bw"));
  }
  if (node.interconnect.latency_s < 0) {
    return InvalidArgument(n + ".interconnect.latency must not be negative");
  }
  for (size_t i = 0; i < node.nvme.size(); ++i) {
    const NvmeSpec& d = node.nvme[i];
    const std::string p = n + ".nvme[" + std::to_string(i) + "]";
    TF_RETURN_IF_ERROR(Positive(static_cast<double>(d.capacity_bytes), p + ".capacity"));
    TF_RETURN_IF_ERROR(Positive(d.read_bw_bytes_per_s, p + ".read_bw"));
    TF_RETURN_IF_ERROR(Positive(d.write_bw_bytes_per_s, p + ".write_bw"));
    TF_RETURN_IF_ERROR(InUnitInterval(d.mixed_efficiency, p + ".mixed_efficiency"));
    for (size_t k = 0; k < d.mixed_efficiency_by_streams.size(); ++k) {
      const auto& [streams, efficiency] = d.mixed_efficiency_by_streams[k];
      TF_RETURN_IF_ERROR(InUnitInterval(efficiency, p + ".mixed_efficiency_by_streams." + std::to_string(streams)));
      if (k > 0 && d.mixed_efficiency_by_streams[k - 1].first == streams) {
        return InvalidArgument(p + ".mixed_efficiency_by_streams: stream count " + std::to_string(streams) + " given twice");
      }
    }
    for (const auto& [field, table] : {std::pair{".read_bw_by_request", &d.read_bw_by_request},
                                        std::pair{".write_bw_by_request", &d.write_bw_by_request}}) {
      for (size_t k = 0; k < table->size(); ++k) {
        const MeasuredBandwidth& m = (*table)[k];
        const std::string at = std::to_string(m.block_bytes) + "x" + std::to_string(m.queue_depth);
        TF_RETURN_IF_ERROR(Positive(m.bytes_per_s, p + field + "." + at));
        if (k > 0 && (*table)[k - 1].block_bytes == m.block_bytes && (*table)[k - 1].queue_depth == m.queue_depth) {
          return InvalidArgument(p + field + ": " + at + " given twice");
        }
      }
    }
    if (d.read_latency_s < 0 || d.write_latency_s < 0) {
      return InvalidArgument(p + ": latencies must not be negative");
    }
    if (d.read_iops < 0 || d.write_iops < 0) {
      return InvalidArgument(p + ": read_iops and write_iops must not be negative (0: no limit)");
    }
    if (d.same_device_as >= 0) {
      const auto k = static_cast<size_t>(d.same_device_as);
      if (k >= i) {
        return InvalidArgument(p + ".same_device_as: nvme" + std::to_string(k) + " must be an earlier entry than nvme" +
                               std::to_string(i));
      }
      if (node.nvme[k].same_device_as >= 0) {
        return InvalidArgument(p + ".same_device_as: nvme" + std::to_string(k) + " itself shares nvme" +
                               std::to_string(node.nvme[k].same_device_as) + "'s device; name nvme" +
                               std::to_string(node.nvme[k].same_device_as));
      }
    }
  }
  for (size_t i = 0; i < node.remote.size(); ++i) {
    const RemoteTierSpec& t = node.remote[i];
    const std::string p = n + ".remote[" + std::to_string(i) + "]";
    TF_RETURN_IF_ERROR(Positive(t.read_bw_bytes_per_s, p + ".read_bw"));
    TF_RETURN_IF_ERROR(Positive(t.write_bw_bytes_per_s, p + ".write_bw"));
    if (t.latency_s < 0) return InvalidArgument(p + ".latency must not be negative");
  }
  if (hw.nodes > 1) TF_RETURN_IF_ERROR(Positive(node.nic_bw_bytes_per_s, n + ".nic_bw"));
  if (node.nic_bw_bytes_per_s < 0) return InvalidArgument(n + ".nic_bw must not be negative");
  if (node.nic_latency_s < 0) return InvalidArgument(n + ".nic_latency must not be negative");
  return Status::Ok();
}

namespace {

// Round-trip exact text for numbers: 17 significant digits.
std::string Num(double v) { return fmt::format("{:.17g}", v); }

// A value with its unit, as HardwareFromYaml reads it ("2.5e+10 B/s").
Doc Unit(const std::string& number, const char* unit) { return Doc::Plain(number + " " + unit); }

// Points as ReadRequestMap reads them: `{16384x1: 2.5e8, ...}`.
template <typename Point>
Doc RequestMap(const std::vector<Point>& table, double Point::*value) {
  Doc points = Doc::Map(/*flow=*/true);
  for (const Point& m : table) points.Add(fmt::format("{}x{}", m.block_bytes, m.queue_depth), Doc::Plain(Num(m.*value)));
  return points;
}

Doc GpuDoc(const GpuSpec& g) {
  Doc d = Doc::Map();
  d.Add("name", Doc::Quoted(g.name));
  d.Add("hbm", Unit(std::to_string(g.hbm_bytes), "B"));
  d.Add("peak_flops", Unit(Num(g.peak_flops), "FLOP/s"));
  d.Add("hbm_bw", Unit(Num(g.hbm_bw_bytes_per_s), "B/s"));
  d.Add("compute_efficiency", Doc::Plain(Num(g.compute_efficiency)));
  if (g.forward_efficiency != 0) d.Add("forward_efficiency", Doc::Plain(Num(g.forward_efficiency)));
  if (g.backward_efficiency != 0) d.Add("backward_efficiency", Doc::Plain(Num(g.backward_efficiency)));
  d.Add("kernel_overhead", Unit(Num(g.kernel_overhead_s), "s"));
  if (g.adam_bw_bytes_per_s > 0) d.Add("adam_bw", Unit(Num(g.adam_bw_bytes_per_s), "B/s"));
  if (g.shares_host_cores) d.Add("shares_host_cores", Doc::Plain("true"));
  return d;
}

Doc PcieDoc(const PcieSpec& p) {
  Doc d = Doc::Map();
  d.Add("h2d_bw", Unit(Num(p.h2d_bw_bytes_per_s), "B/s"));
  d.Add("d2h_bw", Unit(Num(p.d2h_bw_bytes_per_s), "B/s"));
  if (p.d2h_bf16_bw_bytes_per_s > 0) d.Add("d2h_bf16_bw", Unit(Num(p.d2h_bf16_bw_bytes_per_s), "B/s"));
  d.Add("pageable_factor", Doc::Plain(Num(p.pageable_factor)));
  d.Add("latency", Unit(Num(p.latency_s), "s"));
  d.Add("root_complex_bw", Unit(Num(p.root_complex_bw_bytes_per_s), "B/s"));
  return d;
}

Doc CpuDoc(const CpuSpec& c) {
  Doc d = Doc::Map();
  d.Add("cores", Doc::Plain(std::to_string(c.cores)));
  d.Add("host_memory", Unit(std::to_string(c.host_memory_bytes), "B"));
  if (c.host_reserve_bytes >= 0) d.Add("host_reserve", Unit(std::to_string(c.host_reserve_bytes), "B"));
  d.Add("memory_bw", Unit(Num(c.memory_bw_bytes_per_s), "B/s"));
  d.Add("adam_rate_per_core", Unit(Num(c.adam_elements_per_s_per_core), "elements/s"));
  d.Add("convert_bw_per_core", Unit(Num(c.convert_bytes_per_s_per_core), "B/s"));
  if (c.task_overhead_s > 0) d.Add("task_overhead", Unit(Num(c.task_overhead_s), "s"));
  if (c.task_overhead_cpu_s > 0) d.Add("task_overhead_cpu", Unit(Num(c.task_overhead_cpu_s), "s"));
  if (!c.io_read_cores.empty()) d.Add("io_read_cores", RequestMap(c.io_read_cores, &IoCpuPoint::cores));
  if (!c.io_write_cores.empty()) d.Add("io_write_cores", RequestMap(c.io_write_cores, &IoCpuPoint::cores));
  if (!c.io_read_beside_compute.empty()) d.Add("io_read_beside_compute", RequestMap(c.io_read_beside_compute, &IoRateKept::kept));
  if (!c.io_write_beside_compute.empty()) d.Add("io_write_beside_compute", RequestMap(c.io_write_beside_compute, &IoRateKept::kept));
  return d;
}

Doc InterconnectDoc(const InterconnectSpec& i) {
  Doc d = Doc::Map();
  d.Add("kind", Doc::Quoted(i.kind));
  // bus_bw may be 0 on a one-GPU node; a zero bandwidth does not parse, so it is left out.
  if (i.bus_bw_bytes_per_s > 0) d.Add("bus_bw", Unit(Num(i.bus_bw_bytes_per_s), "B/s"));
  d.Add("latency", Unit(Num(i.latency_s), "s"));
  if (i.local_bw_bytes_per_s > 0) d.Add("local_bw", Unit(Num(i.local_bw_bytes_per_s), "B/s"));
  return d;
}

Doc NvmeDoc(const NvmeSpec& n) {
  Doc d = Doc::Map();
  d.Add("name", Doc::Quoted(n.name));
  d.Add("capacity", Unit(std::to_string(n.capacity_bytes), "B"));
  d.Add("read_bw", Unit(Num(n.read_bw_bytes_per_s), "B/s"));
  d.Add("write_bw", Unit(Num(n.write_bw_bytes_per_s), "B/s"));
  d.Add("read_latency", Unit(Num(n.read_latency_s), "s"));
  d.Add("write_latency", Unit(Num(n.write_latency_s), "s"));
  if (n.read_iops > 0) d.Add("read_iops", Doc::Plain(Num(n.read_iops)));
  if (n.write_iops > 0) d.Add("write_iops", Doc::Plain(Num(n.write_iops)));
  d.Add("mixed_efficiency", Doc::Plain(Num(n.mixed_efficiency)));
  if (!n.mixed_efficiency_by_streams.empty()) {
    Doc points = Doc::Map(/*flow=*/true);
    for (const auto& [streams, efficiency] : n.mixed_efficiency_by_streams) points.Add(std::to_string(streams), Doc::Plain(Num(efficiency)));
    d.Add("mixed_efficiency_by_streams", std::move(points));
  }
  if (!n.read_bw_by_request.empty()) d.Add("read_bw_by_request", RequestMap(n.read_bw_by_request, &MeasuredBandwidth::bytes_per_s));
  if (!n.write_bw_by_request.empty()) d.Add("write_bw_by_request", RequestMap(n.write_bw_by_request, &MeasuredBandwidth::bytes_per_s));
  if (n.same_device_as >= 0) d.Add("same_device_as", Doc::Plain("nvme" + std::to_string(n.same_device_as)));
  return d;
}

Doc RemoteDoc(const RemoteTierSpec& t) {
  Doc d = Doc::Map();
  d.Add("name", Doc::Quoted(t.name));
  d.Add("read_bw", Unit(Num(t.read_bw_bytes_per_s), "B/s"));
  d.Add("write_bw", Unit(Num(t.write_bw_bytes_per_s), "B/s"));
  d.Add("latency", Unit(Num(t.latency_s), "s"));
  return d;
}

// Every field HardwareFromYaml reads, in its order.
Doc HardwareDoc(const HardwareSpec& hw) {
  const NodeSpec& n = hw.node;
  Doc node = Doc::Map();
  node.Add("name", Doc::Quoted(n.name));
  node.Add("source", Doc::Quoted(n.source));
  node.Add("gpu_count", Doc::Plain(std::to_string(n.gpu_count)));
  node.Add("gpu", GpuDoc(n.gpu));
  node.Add("pcie", PcieDoc(n.pcie));
  node.Add("cpu", CpuDoc(n.cpu));
  node.Add("interconnect", InterconnectDoc(n.interconnect));
  Doc nvme = Doc::List();
  for (const NvmeSpec& d : n.nvme) nvme.Push(NvmeDoc(d));
  node.Add("nvme", std::move(nvme));
  Doc remote = Doc::List();
  for (const RemoteTierSpec& t : n.remote) remote.Push(RemoteDoc(t));
  node.Add("remote", std::move(remote));
  if (n.nic_bw_bytes_per_s > 0) node.Add("nic_bw", Unit(Num(n.nic_bw_bytes_per_s), "B/s"));
  if (n.nic_latency_s > 0) node.Add("nic_latency", Unit(Num(n.nic_latency_s), "s"));
  Doc d = Doc::Map();
  d.Add("nodes", Doc::Plain(std::to_string(hw.nodes)));
  d.Add("node", std::move(node));
  return d;
}

}  // namespace

std::string HardwareToYaml(const HardwareSpec& hw) { return HardwareDoc(hw).Yaml(); }
std::string HardwareToJson(const HardwareSpec& hw) { return HardwareDoc(hw).Json(); }


std::string NodeDeviceName(const HardwareSpec& hw, int32_t node, std::string_view local) {
  if (hw.nodes <= 1) return std::string(local);
  return "node" + std::to_string(node) + "." + std::string(local);
}

namespace {
// "12" -> 12; nullopt for anything else, a leading zero ("01") or a sign included.
std::optional<int32_t> ParseIndex(std::string_view digits) {
  if (digits.empty() || (digits[0] == '0' && digits.size() > 1)) return std::nullopt;
  int32_t value = -1;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || ptr != digits.data() + digits.size() || value < 0) return std::nullopt;
  return value;
}
}  // namespace

StatusOr<HardwareDevice> ParseHardwareDevice(std::string_view name, const HardwareSpec& hw) {
  const NodeSpec& node = hw.node;
  const std::string quoted = "schedule device '" + std::string(name) + "'";
  if (name == "net") return HardwareDevice{HardwareDeviceKind::kNet, 0, 0};
  HardwareDevice out;
  std::string_view local = name;
  if (local.substr(0, 4) == "node") {
    const size_t dot = local.find('.');
    const std::optional<int32_t> n = dot == std::string_view::npos ? std::nullopt : ParseIndex(local.substr(4, dot - 4));
    if (!n) {
      return InvalidArgument(quoted + " names no hardware device (expected node{N}.{device} on a cluster)");
    }
    if (*n >= hw.nodes) {
      return InvalidArgument(quoted + " is on node " + std::to_string(*n) + ", but the hardware has " + std::to_string(hw.nodes) +
                             " node(s)");
    }
    out.node = *n;
    local = local.substr(dot + 1);
  }
  if (local == "host") {
    out.kind = HardwareDeviceKind::kHost;
    return out;
  }
  struct Family {
    std::string_view prefix;
    HardwareDeviceKind kind;
    int64_t count;
  };
  const Family families[] = {{"gpu", HardwareDeviceKind::kGpu, node.gpu_count},
                             {"nvme", HardwareDeviceKind::kNvme, static_cast<int64_t>(node.nvme.size())},
                             {"remote", HardwareDeviceKind::kRemote, static_cast<int64_t>(node.remote.size())}};
  for (const Family& f : families) {
    if (local.size() <= f.prefix.size() || local.substr(0, f.prefix.size()) != f.prefix) continue;
    const std::optional<int32_t> i = ParseIndex(local.substr(f.prefix.size()));
    if (!i) continue;
    if (*i >= f.count) {
      return InvalidArgument(quoted + " does not exist on hardware '" + node.name + "', which has " + std::to_string(f.count) + " " +
                             std::string(f.prefix) + " device(s)" + (hw.nodes > 1 ? " per node" : ""));
    }
    out.kind = f.kind;
    out.index = *i;
    return out;
  }
  return InvalidArgument(quoted + " names no hardware device (expected gpuN, host, nvmeN, remoteN or net" +
                         (hw.nodes > 1 ? std::string(", each but net as node{N}.{device} on a cluster)") : std::string(")")));
}

}  // namespace tierflow::models
