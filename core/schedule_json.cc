// The schedule file: JSON with a fixed key order and defaults omitted, so that writing is
// deterministic and read-then-write reproduces a file byte for byte.
#include <charconv>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <string_view>

#include "tierflow/core/json_checked.h"
#include "tierflow/core/text.h"
#include "tierflow/core/files.h"
#include "tierflow/core/schedule.h"

namespace tierflow {
namespace {

using Json = nlohmann::ordered_json;

// Reads the fields of one JSON object, rejecting unknown keys and wrong types with an error that
// names the object ("task 'fwd.L3'") and the key.
class Fields {
 public:
  Fields(const Json& j, std::string what) : j_(j), what_(std::move(what)) {}

  Status CheckObject() const {
    if (!j_.is_object()) return InvalidArgument(what_ + ": expected a JSON object");
    return Status::Ok();
  }
  Status CheckKnownKeys(std::initializer_list<const char*> keys) const {
    std::set<std::string> known(keys.begin(), keys.end());
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (!known.count(it.key())) return InvalidArgument(what_ + ": unknown key " + Quoted(it.key()));
    }
    return Status::Ok();
  }
  bool Has(const char* key) const { return j_.contains(key); }

  Status String(const char* key, std::string* out, bool required) const {
    if (!j_.contains(key)) return required ? Missing(key) : Status::Ok();
    const Json& v = j_.at(key);
    if (!v.is_string()) return WrongType(key, "a string");
    *out = v.get<std::string>();
    return Status::Ok();
  }
  template <typename Int>
  Status Integer(const char* key, Int* out, bool required) const {
    if (!j_.contains(key)) return required ? Missing(key) : Status::Ok();
    const Json& v = j_.at(key);
    if (!v.is_number_integer()) return WrongType(key, "an integer");
    auto value = JsonInteger<Int>(v, what_ + ": key '" + key + "'");
    if (!value.ok()) return value.status();
    *out = *value;
    return Status::Ok();
  }
  Status Number(const char* key, double* out) const {
    if (!j_.contains(key)) return Status::Ok();
    const Json& v = j_.at(key);
    if (!v.is_number()) return WrongType(key, "a number");
    *out = v.get<double>();
    return Status::Ok();
  }
  Status Bool(const char* key, bool* out) const {
    if (!j_.contains(key)) return Status::Ok();
    const Json& v = j_.at(key);
    if (!v.is_boolean()) return WrongType(key, "true or false");
    *out = v.get<bool>();
    return Status::Ok();
  }
  Status StringList(const char* key, std::vector<std::string>* out) const {
    if (!j_.contains(key)) return Status::Ok();
    const Json& v = j_.at(key);
    if (!v.is_array()) return WrongType(key, "a list of names");
    for (const Json& e : v) {
      if (!e.is_string()) return WrongType(key, "a list of names");
      out->push_back(e.get<std::string>());
    }
    return Status::Ok();
  }
  const Json& Get(const char* key) const { return j_.at(key); }
  const std::string& what() const { return what_; }

 private:
  Status Missing(const char* key) const { return InvalidArgument(what_ + ": missing key '" + std::string(key) + "'"); }
  Status WrongType(const char* key, const char* expected) const {
    return InvalidArgument(what_ + ": key '" + std::string(key) + "' must be " + expected);
  }
  const Json& j_;
  std::string what_;
};

std::string Q(const std::string& s) { return "'" + s + "'"; }

// Resolves a name to an index, or says which object referred to what that does not exist.
template <typename FindFn>
StatusOr<int32_t> Resolve(FindFn find, const std::string& name, const std::string& owner, const char* kind) {
  int32_t i = find(name);
  if (i == kNoIndex) return InvalidArgument(owner + ": " + kind + " " + Q(name) + " does not exist");
  return i;
}

Status ReadSection(const Json& root, const char* key, std::vector<const Json*>* out) {
  if (!root.contains(key)) return Status::Ok();
  const Json& v = root.at(key);
  if (!v.is_array()) return InvalidArgument(std::string("schedule: key '") + key + "' must be a list");
  for (const Json& e : v) out->push_back(&e);
  return Status::Ok();
}

StatusOr<Schedule> Parse(const Json& root) {
  Fields top(root, "schedule");
  TF_RETURN_IF_ERROR(top.CheckObject());
  TF_RETURN_IF_ERROR(top.CheckKnownKeys({"format", "name", "iteration_window", "meta", "model", "hardware", "training",
                                         "devices", "resources", "pools", "buffers", "tensors", "tasks"}));
  std::string format;
  TF_RETURN_IF_ERROR(top.String("format", &format, true));
  if (format != kScheduleFormat) {
    return InvalidArgument("schedule: format is " + Q(format) + ", expected " + Q(kScheduleFormat));
  }
  Schedule s;
  TF_RETURN_IF_ERROR(top.String("name", &s.name, false));
  TF_RETURN_IF_ERROR(top.Integer("iteration_window", &s.iteration_window, false));
  if (root.contains("meta")) {
    const Json& meta = root.at("meta");
    if (!meta.is_object()) return InvalidArgument("schedule: key 'meta' must be an object of strings");
    for (auto it = meta.begin(); it != meta.end(); ++it) {
      if (!it.value().is_string()) return InvalidArgument("schedule: meta key " + Q(it.key()) + " must be a string");
      s.meta.emplace_back(it.key(), it.value().get<std::string>());
    }
  }

  for (const auto& [key, text] : {std::pair<const char*, std::string*>{"model", &s.sections.model},
                                  {"hardware", &s.sections.hardware},
                                  {"training", &s.sections.training}}) {
    if (!root.contains(key)) continue;
    if (!root.at(key).is_object()) return InvalidArgument(std::string("schedule: key '") + key + "' must be an object (docs/schedule-format.md)");
    *text = root.at(key).dump();
  }

  std::vector<const Json*> section;
  auto check_unique = [](int32_t existing, const std::string& kind, const std::string& name) -> Status {
    if (existing != kNoIndex) return InvalidArgument(kind + " " + Q(name) + " is defined twice");
    return Status::Ok();
  };

  TF_RETURN_IF_ERROR(ReadSection(root, "devices", &section));
  for (size_t i = 0; i < section.size(); ++i) {
    Fields f(*section[i], "device #" + std::to_string(i));
    TF_RETURN_IF_ERROR(f.CheckObject());
    TF_RETURN_IF_ERROR(f.CheckKnownKeys({"name", "kind"}));
    DeviceSpec d;
    std::string kind;
    TF_RETURN_IF_ERROR(f.String("name", &d.name, true));
    TF_RETURN_IF_ERROR(f.String("kind", &kind, true));
    auto k = DeviceKindFromName(kind);
    if (!k) return InvalidArgument("device " + Q(d.name) + ": unknown kind " + Q(kind) + " (gpu, host, nvme, remote, network)");
    d.kind = *k;
    TF_RETURN_IF_ERROR(check_unique(s.FindDevice(d.name), "device", d.name));
    s.AddDevice(std::move(d));
  }

  section.clear();
  TF_RETURN_IF_ERROR(ReadSection(root, "resources", &section));
  for (size_t i = 0; i < section.size(); ++i) {
    Fields f(*section[i], "resource #" + std::to_string(i));
    TF_RETURN_IF_ERROR(f.CheckObject());
    TF_RETURN_IF_ERROR(f.CheckKnownKeys({"name", "device", "concurrency"}));
    ResourceSpec r;
    std::string device;
    TF_RETURN_IF_ERROR(f.String("name", &r.name, true));
    const std::string owner = "resource " + Q(r.name);
    TF_RETURN_IF_ERROR(f.String("device", &device, true));
    TF_RETURN_IF_ERROR(f.Integer("concurrency", &r.concurrency, false));
    TF_ASSIGN_OR_RETURN(r.device, Resolve([&](const std::string& n) { return s.FindDevice(n); }, device, owner, "device"));
    TF_RETURN_IF_ERROR(check_unique(s.FindResource(r.name), "resource", r.name));
    s.AddResource(std::move(r));
  }

  section.clear();
  TF_RETURN_IF_ERROR(ReadSection(root, "pools", &section));
  for (size_t i = 0; i < section.size(); ++i) {
    Fields f(*section[i], "pool #" + std::to_string(i));
    TF_RETURN_IF_ERROR(f.CheckObject());
    TF_RETURN_IF_ERROR(f.CheckKnownKeys({"name", "device", "capacity_bytes"}));
    PoolSpec p;
    std::string device;
    TF_RETURN_IF_ERROR(f.String("name", &p.name, true));
    TF_RETURN_IF_ERROR(f.String("device", &device, true));
    TF_RETURN_IF_ERROR(f.Integer("capacity_bytes", &p.capacity_bytes, true));
    TF_ASSIGN_OR_RETURN(p.device, Resolve([&](const std::string& n) { return s.FindDevice(n); }, device, "pool " + Q(p.name), "device"));
    TF_RETURN_IF_ERROR(check_unique(s.FindPool(p.name), "pool", p.name));
    s.AddPool(std::move(p));
  }

  section.clear();
  TF_RETURN_IF_ERROR(ReadSection(root, "buffers", &section));
  for (size_t i = 0; i < section.size(); ++i) {
    Fields f(*section[i], "buffer #" + std::to_string(i));
    TF_RETURN_IF_ERROR(f.CheckObject());
    TF_RETURN_IF_ERROR(f.CheckKnownKeys({"name", "pool", "size_bytes", "persistent"}));
    BufferSpec b;
    std::string pool;
    TF_RETURN_IF_ERROR(f.String("name", &b.name, true));
    TF_RETURN_IF_ERROR(f.String("pool", &pool, true));
    TF_RETURN_IF_ERROR(f.Integer("size_bytes", &b.size_bytes, true));
    TF_RETURN_IF_ERROR(f.Bool("persistent", &b.persistent));
    TF_ASSIGN_OR_RETURN(b.pool, Resolve([&](const std::string& n) { return s.FindPool(n); }, pool, "buffer " + Q(b.name), "pool"));
    TF_RETURN_IF_ERROR(check_unique(s.FindBuffer(b.name), "buffer", b.name));
    s.AddBuffer(std::move(b));
  }

  section.clear();
  TF_RETURN_IF_ERROR(ReadSection(root, "tensors", &section));
  for (size_t i = 0; i < section.size(); ++i) {
    Fields f(*section[i], "tensor #" + std::to_string(i));
    TF_RETURN_IF_ERROR(f.CheckObject());
    TF_RETURN_IF_ERROR(f.CheckKnownKeys({"name", "kind", "dtype", "shape", "rank", "device", "offset_bytes", "size_bytes", "element_offset"}));
    TensorSpec t;
    std::string device;
    TF_RETURN_IF_ERROR(f.String("name", &t.name, true));
    const std::string owner = "tensor " + Q(t.name);
    std::string kind;
    TF_RETURN_IF_ERROR(f.String("kind", &kind, true));
    const auto k = StateKindFromName(kind);
    if (!k) return InvalidArgument(owner + ": unknown kind " + Q(kind) + " (param16, grad16, grad, master, adam_m, adam_v)");
    t.kind = *k;
    TF_RETURN_IF_ERROR(f.String("dtype", &t.dtype, false));
    if (!t.dtype.empty() && t.dtype != StateKindDtype(t.kind)) {
      return InvalidArgument(owner + ": dtype " + Q(t.dtype) + ", but " + std::string(StateKindName(t.kind)) + " is " +
                             std::string(StateKindDtype(t.kind)));
    }
    if (f.Has("shape")) {
      const Json& shape = f.Get("shape");
      if (!shape.is_array()) return InvalidArgument(owner + ": key 'shape' must be a list of integers");
      for (const Json& d : shape) {
        if (!d.is_number_integer()) return InvalidArgument(owner + ": key 'shape' must be a list of integers");
        TF_ASSIGN_OR_RETURN(const int64_t dim, JsonInteger<int64_t>(d, owner + ": a 'shape' entry"));
        t.shape.push_back(dim);
      }
    }
    TF_RETURN_IF_ERROR(f.Integer("rank", &t.rank, false));
    TF_RETURN_IF_ERROR(f.String("device", &device, true));
    TF_RETURN_IF_ERROR(f.Integer("offset_bytes", &t.offset_bytes, false));
    TF_RETURN_IF_ERROR(f.Integer("size_bytes", &t.size_bytes, true));
    TF_RETURN_IF_ERROR(f.Integer("element_offset", &t.element_offset, false));
    TF_ASSIGN_OR_RETURN(t.device, Resolve([&](const std::string& n) { return s.FindDevice(n); }, device, owner, "device"));
    TF_RETURN_IF_ERROR(check_unique(s.FindTensor(t.name), "tensor", t.name));
    s.AddTensor(std::move(t));
  }

  // Tasks refer to each other by id, forwards as well as backwards: register all ids first.
  section.clear();
  TF_RETURN_IF_ERROR(ReadSection(root, "tasks", &section));
  std::vector<std::string> ids;
  ids.reserve(section.size());
  NameIndex task_index;
  const auto same = [](const std::string& id) -> const std::string& { return id; };
  for (size_t i = 0; i < section.size(); ++i) {
    Fields f(*section[i], "task #" + std::to_string(i));
    TF_RETURN_IF_ERROR(f.CheckObject());
    std::string id;
    TF_RETURN_IF_ERROR(f.String("id", &id, true));
    if (!task_index.Add(id, ids, same)) return InvalidArgument("task " + Q(id) + " is defined twice");
    ids.push_back(std::move(id));
  }
  auto find_task = [&](const std::string& n) { return task_index.Find(n, ids, same); };
  for (size_t i = 0; i < section.size(); ++i) {
    const std::string owner = "task " + Q(ids[i]);
    Fields f(*section[i], owner);
    TF_RETURN_IF_ERROR(f.CheckKnownKeys({"id", "op", "resource", "kernel", "bytes", "flops", "block_bytes", "queue_depth",
                                         "ranks", "rank", "tensors", "allocs", "uses", "frees", "deps", "carried", "priority",
                                         "phase", "layer", "micro_step"}));
    TaskSpec t;
    t.id = ids[i];
    std::string op, resource, phase;
    TF_RETURN_IF_ERROR(f.String("op", &op, true));
    auto o = OpFromName(op);
    if (!o) return InvalidArgument(owner + ": unknown op " + Q(op));
    t.op = *o;
    TF_RETURN_IF_ERROR(f.String("resource", &resource, false));
    if (!resource.empty()) {
      TF_ASSIGN_OR_RETURN(t.resource, Resolve([&](const std::string& n) { return s.FindResource(n); }, resource, owner, "resource"));
    }
    std::string kernel;
    TF_RETURN_IF_ERROR(f.String("kernel", &kernel, false));
    const auto kn = KernelFromName(kernel);
    if (!kn) return InvalidArgument(owner + ": unknown kernel " + Q(kernel) + " (fwd, bwd, adam, overflow_check_and_norm, fp32_to_bf16, bf16_to_fp32)");
    t.kernel = *kn;
    TF_RETURN_IF_ERROR(f.Integer("bytes", &t.bytes, false));
    TF_RETURN_IF_ERROR(f.Number("flops", &t.flops));
    TF_RETURN_IF_ERROR(f.Integer("block_bytes", &t.block_bytes, false));
    TF_RETURN_IF_ERROR(f.Integer("queue_depth", &t.queue_depth, false));
    TF_RETURN_IF_ERROR(f.Integer("ranks", &t.ranks, false));
    TF_RETURN_IF_ERROR(f.Integer("rank", &t.rank, false));
    std::vector<std::string> names;
    TF_RETURN_IF_ERROR(f.StringList("tensors", &names));
    for (const auto& n : names) {
      TF_ASSIGN_OR_RETURN(int32_t x, Resolve([&](const std::string& m) { return s.FindTensor(m); }, n, owner, "tensor"));
      t.tensors.push_back(x);
    }
    struct BufferList {
      const char* key;
      IndexList* out;
    };
    for (BufferList list : {BufferList{"allocs", &t.allocs}, BufferList{"uses", &t.uses}, BufferList{"frees", &t.frees}}) {
      names.clear();
      TF_RETURN_IF_ERROR(f.StringList(list.key, &names));
      for (const auto& n : names) {
        TF_ASSIGN_OR_RETURN(int32_t b, Resolve([&](const std::string& m) { return s.FindBuffer(m); }, n, owner, "buffer"));
        list.out->push_back(b);
      }
    }
    names.clear();
    TF_RETURN_IF_ERROR(f.StringList("deps", &names));
    for (const auto& n : names) {
      TF_ASSIGN_OR_RETURN(int32_t d, Resolve(find_task, n, owner, "dep"));
      t.deps.push_back(d);
    }
    if (f.Has("carried")) {
      const Json& carried = f.Get("carried");
      if (!carried.is_array()) return InvalidArgument(owner + ": key 'carried' must be a list of {task, distance}");
      for (size_t c = 0; c < carried.size(); ++c) {
        Fields cf(carried[c], owner + " carried dep #" + std::to_string(c));
        TF_RETURN_IF_ERROR(cf.CheckObject());
        TF_RETURN_IF_ERROR(cf.CheckKnownKeys({"task", "distance"}));
        std::string task;
        CarriedDep cd;
        TF_RETURN_IF_ERROR(cf.String("task", &task, true));
        TF_RETURN_IF_ERROR(cf.Integer("distance", &cd.distance, false));
        TF_ASSIGN_OR_RETURN(cd.task, Resolve(find_task, task, owner, "carried dep"));
        t.carried.push_back(cd);
      }
    }
    TF_RETURN_IF_ERROR(f.Integer("priority", &t.priority, false));
    TF_RETURN_IF_ERROR(f.String("phase", &phase, false));
    if (!phase.empty()) {
      auto p = PhaseFromName(phase);
      if (!p) return InvalidArgument(owner + ": unknown phase " + Q(phase) + " (forward, backward, step, other)");
      t.phase = *p;
    }
    TF_RETURN_IF_ERROR(f.Integer("layer", &t.layer, false));
    TF_RETURN_IF_ERROR(f.Integer("micro_step", &t.micro_step, false));
    s.AddTask(std::move(t));
  }
  TF_RETURN_IF_ERROR(s.Validate());
  return s;
}

// Appends JSON text to a string exactly as nlohmann's compact dump() would write the same
// values, without building a DOM: writing the quickstart's schedule through nlohmann objects was
// four fifths of `tierflow plan` (issue 59's profile). Strings of printable ASCII without quotes
// or backslashes (every name a policy writes) are copied; any other string, and every double,
// goes through nlohmann itself, so the bytes never differ from its dump.
class JsonWriter {
 public:
  explicit JsonWriter(std::string* out) : out_(*out) {}

  void Raw(std::string_view text) { out_.append(text); }
  void String(std::string_view v) {
    if (MayNeedEscape(v)) {
      out_.append(Json(std::string(v)).dump());
    } else {
      Quote(v);
    }
  }
  void Integer(int64_t v) {
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    out_.append(buf, r.ptr);
  }
  void Real(double v) { out_.append(Json(v).dump()); }

  // Members of one object: `{"key":value,...}`; Key() writes the separator and the key.
  void Open() { out_.push_back('{'), first_ = true; }
  void Close() { out_.push_back('}'), first_ = false; }
  // A key of the format (a literal: nothing to escape).
  void Key(std::string_view key) {
    if (!first_) out_.push_back(',');
    first_ = false;
    Quote(key);
    out_.push_back(':');
  }
  // A key that is data (a meta entry's), escaped as a string value is.
  void DataKey(std::string_view key) {
    if (!first_) out_.push_back(',');
    first_ = false;
    String(key);
    out_.push_back(':');
  }
  // `"key":["name",...]`: the names of `indices` in `specs` (a task's id, anything else's name).
  void Names(const char* key, std::span<const int32_t> indices, const auto& specs) {
    Key(key);
    out_.push_back('[');
    for (size_t i = 0; i < indices.size(); ++i) {
      if (i) out_.push_back(',');
      if constexpr (requires { specs[0].id; }) {
        String(specs[static_cast<size_t>(indices[i])].id);
      } else {
        String(specs[static_cast<size_t>(indices[i])].name);
      }
    }
    out_.push_back(']');
  }

 private:
  // `"v"`, for a string known to need no escape.
  void Quote(std::string_view v) {
    out_.push_back('"');
    out_.append(v);
    out_.push_back('"');
  }

  // Whether `v` has a byte that JSON escapes (a control character, '"' or '\\') or one outside
  // ASCII (nlohmann's dump checks its UTF-8): never false when it has one. Eight bytes at a time:
  // a schedule file is some 18 MB of names, and a byte-at-a-time test was most of its writing.
  static bool MayNeedEscape(std::string_view v) {
    constexpr uint64_t kOnes = 0x0101010101010101ull, kHighs = 0x8080808080808080ull;
    // Bytes below `n` (each below 0x80; a byte with its high bit set is flagged apart).
    const auto below = [](uint64_t x, uint64_t n) { return (x - n * kOnes) & ~x & kHighs; };
    size_t i = 0;
    for (; i + 8 <= v.size(); i += 8) {
      uint64_t x;
      std::memcpy(&x, v.data() + i, 8);
      const uint64_t high = (x | (x + kOnes)) & kHighs;  // 0x7f or above (a carry only from 0xff, itself flagged)
      if (below(x, 0x20) | high | below(x ^ (0x22 * kOnes), 1) | below(x ^ (0x5c * kOnes), 1)) return true;
    }
    for (; i < v.size(); ++i) {
      const auto u = static_cast<unsigned char>(v[i]);
      if (u < 0x20 || u >= 0x7f || u == '"' || u == '\\') return true;
    }
    return false;
  }

  std::string& out_;
  bool first_ = true;
};

}  // namespace

std::string ScheduleToJson(const Schedule& s) {
  // Written by hand, one object per line, so that the files diff well and stay small.
  std::string out;
  out.reserve(256 * (s.tasks().size() + s.tensors().size() + s.buffers().size()) + 4096);
  JsonWriter w(&out);
  w.Raw("{\n  \"format\": ");
  w.String(kScheduleFormat);
  w.Raw(",\n  \"name\": ");
  w.String(s.name);
  w.Raw(",\n  \"iteration_window\": ");
  w.Integer(s.iteration_window);
  w.Raw(",\n  \"meta\": ");
  w.Open();
  for (const auto& [k, v] : s.meta) {
    w.DataKey(k);
    w.String(v);
  }
  w.Close();
  w.Raw(",\n");
  for (const auto& [key, text] : {std::pair<const char*, const std::string*>{"model", &s.sections.model},
                                  {"hardware", &s.sections.hardware},
                                  {"training", &s.sections.training}}) {
    if (text->empty()) continue;
    const Json parsed = Json::parse(*text, nullptr, /*allow_exceptions=*/false);
    TF_CHECK(parsed.is_object());  // Schedule::Sections holds JSON objects
    out += "  \"" + std::string(key) + "\": " + parsed.dump() + ",\n";
  }

  auto section = [&](const char* key, size_t count, auto&& row, bool last) {
    out += "  \"" + std::string(key) + "\": [";
    for (size_t i = 0; i < count; ++i) {
      w.Raw(i ? ",\n    " : "\n    ");
      w.Open();
      row(i);
      w.Close();
    }
    w.Raw(count ? "\n  ]" : "]");
    w.Raw(last ? "\n" : ",\n");
  };
  section("devices", s.devices().size(), [&](size_t i) {
    const auto& d = s.devices()[i];
    w.Key("name"), w.String(d.name);
    w.Key("kind"), w.String(DeviceKindName(d.kind));
  }, false);
  section("resources", s.resources().size(), [&](size_t i) {
    const auto& r = s.resources()[i];
    w.Key("name"), w.String(r.name);
    w.Key("device"), w.String(s.devices()[r.device].name);
    w.Key("concurrency"), w.Integer(r.concurrency);
  }, false);
  section("pools", s.pools().size(), [&](size_t i) {
    const auto& p = s.pools()[i];
    w.Key("name"), w.String(p.name);
    w.Key("device"), w.String(s.devices()[p.device].name);
    w.Key("capacity_bytes"), w.Integer(p.capacity_bytes);
  }, false);
  section("buffers", s.buffers().size(), [&](size_t i) {
    const auto& b = s.buffers()[i];
    w.Key("name"), w.String(b.name);
    w.Key("pool"), w.String(s.pools()[b.pool].name);
    w.Key("size_bytes"), w.Integer(b.size_bytes);
    if (b.persistent) w.Key("persistent"), w.Raw("true");
  }, false);
  section("tensors", s.tensors().size(), [&](size_t i) {
    const auto& t = s.tensors()[i];
    w.Key("name"), w.String(t.name);
    w.Key("kind"), w.String(StateKindName(t.kind));
    if (!t.dtype.empty()) w.Key("dtype"), w.String(t.dtype);
    if (!t.shape.empty()) {
      w.Key("shape");
      w.Raw("[");
      for (size_t k = 0; k < t.shape.size(); ++k) {
        if (k) w.Raw(",");
        w.Integer(t.shape[k]);
      }
      w.Raw("]");
    }
    if (t.rank != 0) w.Key("rank"), w.Integer(t.rank);
    w.Key("device"), w.String(s.devices()[t.device].name);
    if (t.offset_bytes != 0) w.Key("offset_bytes"), w.Integer(t.offset_bytes);
    w.Key("size_bytes"), w.Integer(t.size_bytes);
    if (t.element_offset != 0) w.Key("element_offset"), w.Integer(t.element_offset);
  }, false);
  section("tasks", s.tasks().size(), [&](size_t i) {
    const auto& t = s.tasks()[i];
    w.Key("id"), w.String(t.id);
    w.Key("op"), w.String(OpName(t.op));
    if (t.resource != kNoIndex) w.Key("resource"), w.String(s.resources()[t.resource].name);
    if (t.kernel != Kernel::kNone) w.Key("kernel"), w.String(KernelName(t.kernel));
    if (t.bytes) w.Key("bytes"), w.Integer(t.bytes);
    if (t.flops) w.Key("flops"), w.Real(t.flops);
    if (t.block_bytes) w.Key("block_bytes"), w.Integer(t.block_bytes);
    if (t.queue_depth) w.Key("queue_depth"), w.Integer(t.queue_depth);
    if (t.ranks) w.Key("ranks"), w.Integer(t.ranks);
    if (t.rank != kEveryRank) w.Key("rank"), w.Integer(t.rank);
    if (!t.tensors.empty()) w.Names("tensors", t.tensors, s.tensors());
    if (!t.allocs.empty()) w.Names("allocs", t.allocs, s.buffers());
    if (!t.uses.empty()) w.Names("uses", t.uses, s.buffers());
    if (!t.frees.empty()) w.Names("frees", t.frees, s.buffers());
    if (!t.deps.empty()) w.Names("deps", t.deps, s.tasks());
    if (!t.carried.empty()) {
      w.Key("carried");
      w.Raw("[");
      for (size_t k = 0; k < t.carried.size(); ++k) {
        if (k) w.Raw(",");
        JsonWriter e(&out);
        e.Open();
        e.Key("task"), e.String(s.tasks()[t.carried[k].task].id);
        e.Key("distance"), e.Integer(t.carried[k].distance);
        e.Close();
      }
      w.Raw("]");
    }
    if (t.priority) w.Key("priority"), w.Integer(t.priority);
    if (t.phase != Phase::kOther) w.Key("phase"), w.String(PhaseName(t.phase));
    if (t.layer != -1) w.Key("layer"), w.Integer(t.layer);
    if (t.micro_step != 0) w.Key("micro_step"), w.Integer(t.micro_step);
  }, true);
  out += "}\n";
  return out;
}

StatusOr<Schedule> ScheduleFromJson(const std::string& text) {
  TF_ASSIGN_OR_RETURN(const Json root, ParseJsonChecked(text, "schedule"));
  return Parse(root);
}

StatusOr<Schedule> ReadScheduleFile(const std::string& path) {
  auto text = ReadFileToString(path, "schedule file");
  if (!text.ok()) return text.status();
  auto s = ScheduleFromJson(*text);
  if (!s.ok()) return s.status().WithContext(path);
  return s;
}

Status WriteScheduleFile(const std::string& path, const Schedule& schedule) {
  return WriteFileAtomically(path, ScheduleToJson(schedule), "schedule file");
}

}  // namespace tierflow
