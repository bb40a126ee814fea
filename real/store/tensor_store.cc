#include "tierflow/real/tensor_store.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "aligned_buffer.h"
#include "tierflow/real/checksum.h"

namespace tierflow::real {

using internal::AlignedBuffer;
using json = nlohmann::json;

const char* PlacementPolicyName(PlacementPolicy p) {
  switch (p) {
    case PlacementPolicy::kRoundRobin: return "round-robin";
    case PlacementPolicy::kWeighted: return "weighted";
    case PlacementPolicy::kStriped: return "striped";
    case PlacementPolicy::kExplicit: return "explicit";
  }
  return "?";
}

StatusOr<PlacementPolicy> PlacementPolicyFromName(const std::string& name) {
  for (auto p : {PlacementPolicy::kRoundRobin, PlacementPolicy::kWeighted, PlacementPolicy::kStriped, PlacementPolicy::kExplicit}) {
    if (name == PlacementPolicyName(p)) return p;
  }
  return InvalidArgument("unknown placement '" + name + "' (known: round-robin, weighted, striped, explicit)");
}

TensorStore::TensorStore(Storage* storage, std::vector<StoreDevice> devices, StoreOptions options)
    : storage_(storage), devices_(std::move(devices)), options_(std::move(options)) {
  for (auto& d : devices_) {
    allocators_.emplace_back(d.capacity_bytes, kDirectAlignment);
    placed_bytes_.push_back(0);
  }
}

TensorStore::~TensorStore() {
  for (FileId f : files_) {
    if (f >= 0) (void)storage_->Close(f);
  }
}

std::string TensorStore::StorePath(int32_t d) const { return devices_[d].dir + "/" + options_.name + ".tfstore"; }
std::string TensorStore::manifest_path() const { return devices_[0].dir + "/" + options_.name + ".manifest.json"; }
std::string TensorStore::DeviceLabel(int32_t d) const {
  return "device " + std::to_string(d) + " '" + devices_[d].name + "' (" + devices_[d].dir + ")";
}

Status TensorStore::OpenFiles(bool create) {
  for (int32_t d = 0; d < static_cast<int32_t>(devices_.size()); ++d) {
    if (create) TF_RETURN_IF_ERROR(storage_->CreateDir(devices_[d].dir).WithContext(DeviceLabel(d)));
    OpenOptions o;
    o.device = d;
    o.create = create;
    o.direct = true;
    o.direct_fallback = true;
    TF_ASSIGN_OR_RETURN(OpenFile f, storage_->Open(StorePath(d), o));
    files_.push_back(f.id);
    direct_.push_back(f.direct);
    if (create) TF_RETURN_IF_ERROR(storage_->Allocate(f.id, allocators_[d].capacity_bytes()).WithContext(DeviceLabel(d)));
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<TensorStore>> TensorStore::Create(Storage* storage, std::vector<StoreDevice> devices,
                                                           const StoreOptions& options) {
  if (devices.empty()) return InvalidArgument("tensor store '" + options.name + "': no devices");
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i].capacity_bytes < kDirectAlignment) {
      return InvalidArgument("tensor store: device " + std::to_string(i) + " '" + devices[i].dir + "' needs a capacity of at least 4 KiB");
    }
    if (devices[i].name.empty()) devices[i].name = (devices[i].remote ? "remote" : "nvme") + std::to_string(i);
  }
  std::unique_ptr<TensorStore> s(new TensorStore(storage, std::move(devices), options));
  TF_RETURN_IF_ERROR(s->OpenFiles(true));
  TF_RETURN_IF_ERROR(s->SaveManifest());
  return s;
}

StatusOr<std::unique_ptr<TensorStore>> TensorStore::Open(Storage* storage, const std::string& dir, const std::string& name) {
  std::string path = dir + "/" + name + ".manifest.json";
  OpenOptions o;
  o.direct = false;
  o.read_only = true;
  TF_ASSIGN_OR_RETURN(OpenFile f, storage->Open(path, o));
  auto size = storage->FileSize(f.id);
  std::string text;
  Status st = size.status();
  if (st.ok()) {
    text.resize(*size);
    st = ReadAt(*storage, f.id, 0, text.data(), *size);
  }
  (void)storage->Close(f.id);
  TF_RETURN_IF_ERROR(st);
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("format", "") != "tierflow.tensorstore/1") {
    return DataLoss("tensor store manifest '" + path + "': not a tierflow.tensorstore/1 document");
  }
  std::vector<StoreDevice> devices;
  StoreOptions options;
  options.name = name;
  try {
    for (auto& d : j.at("devices")) {
      devices.push_back(StoreDevice{d.at("name"), d.at("dir"), d.at("capacity_bytes"), d.at("bw_bytes_per_s"), d.at("remote")});
    }
    std::unique_ptr<TensorStore> s(new TensorStore(storage, devices, options));
    for (auto& t : j.at("tensors")) {
      TensorEntry e;
      e.name = t.at("name");
      e.dtype = t.at("dtype");
      e.size_bytes = t.at("size_bytes");
      e.stripe_bytes = t.value("stripe_bytes", int64_t{0});
      if (!ParseChecksum(t.at("checksum"), &e.crc32c)) return DataLoss("manifest '" + path + "': tensor '" + e.name + "': bad checksum");
      for (auto& x : t.at("extents")) {
        Extent ex{x.at("device"), x.at("offset_bytes"), x.at("length_bytes")};
        if (ex.device < 0 || ex.device >= static_cast<int32_t>(devices.size()) ||
            !s->allocators_[ex.device].Claim(ex.offset_bytes, ex.length_bytes)) {
          return DataLoss("manifest '" + path + "': tensor '" + e.name + "': extent overlaps another or lies outside its device");
        }
        s->placed_bytes_[ex.device] += ex.length_bytes;
        e.extents.push_back(ex);
      }
      s->tensors_[e.name] = e;
    }
    TF_RETURN_IF_ERROR(s->OpenFiles(false));
    return s;
  } catch (const json::exception& e) {
    return DataLoss("tensor store manifest '" + path + "': " + e.what());
  }
}

Status TensorStore::SaveManifest() {
  json j;
  j["format"] = "tierflow.tensorstore/1";
  j["name"] = options_.name;
  json devs = json::array();
  for (auto& d : devices_) {
    devs.push_back({{"name", d.name}, {"dir", d.dir}, {"file", options_.name + ".tfstore"},
                    {"capacity_bytes", d.capacity_bytes}, {"bw_bytes_per_s", d.bw_bytes_per_s}, {"remote", d.remote}});
  }
  j["devices"] = devs;
  json ts = json::array();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [name, e] : tensors_) {
      json ex = json::array();
      for (auto& x : e.extents) ex.push_back({{"device", x.device}, {"offset_bytes", x.offset_bytes}, {"length_bytes", x.length_bytes}});
      ts.push_back({{"name", e.name}, {"dtype", e.dtype}, {"size_bytes", e.size_bytes},
                    {"checksum", FormatChecksum(e.crc32c)}, {"stripe_bytes", e.stripe_bytes}, {"extents", ex}});
    }
  }
  j["tensors"] = ts;
  std::string text = j.dump(1);
  std::string path = manifest_path(), tmp = path + ".tmp";
  OpenOptions o;
  o.create = o.truncate = true;
  o.direct = false;
  TF_ASSIGN_OR_RETURN(OpenFile f, storage_->Open(tmp, o));
  Status st = WriteAt(*storage_, f.id, 0, text.data(), static_cast<int64_t>(text.size()));
  if (st.ok()) st = storage_->Sync(f.id);
  Status cl = storage_->Close(f.id);
  TF_RETURN_IF_ERROR(st);
  TF_RETURN_IF_ERROR(cl);
  TF_RETURN_IF_ERROR(storage_->Rename(tmp, path));
  return storage_->SyncDir(devices_[0].dir);
}

StatusOr<std::vector<Extent>> TensorStore::Place(const std::string& name, int64_t size_bytes, const Placement& p) {
  const int32_t n = static_cast<int32_t>(devices_.size());
  std::vector<int32_t> local;
  for (int32_t d = 0; d < n; ++d) if (!devices_[d].remote) local.push_back(d);
  if (local.empty()) for (int32_t d = 0; d < n; ++d) local.push_back(d);

  std::vector<Extent> out;
  auto take = [&](int32_t d, int64_t len) -> Status {
    auto off = allocators_[d].Allocate(len);
    if (!off.ok()) return off.status().WithContext("put '" + name + "': " + DeviceLabel(d));
    out.push_back(Extent{d, *off, len});
    placed_bytes_[d] += len;
    return Status::Ok();
  };
  auto undo = [&] {
    FreeExtents(out);
    out.clear();
  };
  // Local devices in preference order, then the remote ones as spill.
  auto candidates = [&](int32_t first) {
    std::vector<int32_t> order;
    order.push_back(first);
    for (int32_t d : local) if (d != first) order.push_back(d);
    for (int32_t d = 0; d < n; ++d) if (std::find(order.begin(), order.end(), d) == order.end()) order.push_back(d);
    return order;
  };
  auto whole = [&](int32_t first) -> Status {
    Status last;
    for (int32_t d : candidates(first)) {
      if (allocators_[d].largest_free_bytes() >= AlignUp(std::max<int64_t>(size_bytes, 1), kDirectAlignment)) return take(d, size_bytes);
    }
    return take(first, size_bytes);  // fails with the first device's accounting
  };

  switch (p.policy) {
    case PlacementPolicy::kExplicit:
      if (p.device < 0 || p.device >= n) {
        return InvalidArgument("put '" + name + "': explicit placement on device " + std::to_string(p.device) +
                               ", but the store has " + std::to_string(n));
      }
      TF_RETURN_IF_ERROR(take(p.device, size_bytes));
      break;
    case PlacementPolicy::kRoundRobin:
      TF_RETURN_IF_ERROR(whole(local[round_robin_++ % local.size()]));
      break;
    case PlacementPolicy::kWeighted: {
      int32_t best = local[0];
      double best_t = 1e300;
      for (int32_t d : local) {
        double t = static_cast<double>(placed_bytes_[d] + size_bytes) / std::max(devices_[d].bw_bytes_per_s, 1.0);
        if (t < best_t) best_t = t, best = d;
      }
      TF_RETURN_IF_ERROR(whole(best));
      break;
    }
    case PlacementPolicy::kStriped: {
      if (size_bytes < p.stripe_threshold_bytes || local.size() == 1) {
        TF_RETURN_IF_ERROR(whole(local[round_robin_++ % local.size()]));
        break;
      }
      int64_t stripe = std::max<int64_t>(kDirectAlignment, AlignUp(p.stripe_bytes, kDirectAlignment));
      // One extent per device holding every stripe it receives (contiguous on that device).
      int64_t stripes = (size_bytes + stripe - 1) / stripe;
      int64_t k = static_cast<int64_t>(local.size());
      for (int64_t i = 0; i < std::min(stripes, k); ++i) {
        int64_t mine = 0;
        for (int64_t s = i; s < stripes; s += k) mine += std::min(stripe, size_bytes - s * stripe);
        Status st = take(local[i], mine);
        if (!st.ok()) {
          undo();
          return st;
        }
      }
      break;
    }
  }
  return out;
}

void TensorStore::FreeExtents(const std::vector<Extent>& extents) {
  for (auto& x : extents) {
    allocators_[x.device].Free(x.offset_bytes, x.length_bytes);
    placed_bytes_[x.device] -= x.length_bytes;
  }
}

namespace {

// The tensor byte ranges that make up each extent: for a striped tensor, stripe s of k devices
// lies on extent s % k at offset (s / k) * stripe within it. Unstriped: one segment per extent.
struct Segment {
  int32_t extent = 0;
  int64_t tensor_offset = 0;
  int64_t extent_offset = 0;
  int64_t length = 0;
};

std::vector<Segment> Segments(const TensorEntry& e) {
  const int64_t stripe_bytes = e.stripe_bytes;
  std::vector<Segment> segs;
  if (e.extents.size() <= 1) {
    segs.push_back(Segment{0, 0, 0, e.size_bytes});
    return segs;
  }
  int64_t k = static_cast<int64_t>(e.extents.size());
  int64_t stripes = (e.size_bytes + stripe_bytes - 1) / stripe_bytes;
  for (int64_t s = 0; s < stripes; ++s) {
    segs.push_back(Segment{static_cast<int32_t>(s % k), s * stripe_bytes, (s / k) * stripe_bytes,
                           std::min(stripe_bytes, e.size_bytes - s * stripe_bytes)});
  }
  return segs;
}
}  // namespace

Status TensorStore::Put(const std::string& name, const std::string& dtype, const void* data, int64_t size_bytes) {
  return Put(name, dtype, data, size_bytes, options_.placement);
}

Status TensorStore::Put(const std::string& name, const std::string& dtype, const void* data, int64_t size_bytes,
                        const Placement& placement) {
  if (size_bytes < 0 || (size_bytes > 0 && data == nullptr)) return InvalidArgument("put '" + name + "': bad buffer");
  TensorEntry e;
  e.name = name;
  e.dtype = dtype;
  e.size_bytes = size_bytes;
  e.crc32c = Crc32c(data, size_bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    TF_ASSIGN_OR_RETURN(e.extents, Place(name, size_bytes, placement));
  }
  if (e.extents.size() > 1) e.stripe_bytes = AlignUp(std::max<int64_t>(placement.stripe_bytes, kDirectAlignment), kDirectAlignment);
  std::vector<IoRequest> reqs;
  std::vector<AlignedBuffer> bounces;
  std::vector<int32_t> req_device;
  const char* src = static_cast<const char*>(data);
  for (const Segment& s : Segments(e)) {
    const Extent& x = e.extents[s.extent];
    int64_t file_off = x.offset_bytes + s.extent_offset;
    const char* p = src + s.tensor_offset;
    int64_t main = IsAlignedPtr(p, kDirectAlignment) ? s.length / kDirectAlignment * kDirectAlignment : 0;
    if (main > 0) {
      reqs.push_back(IoRequest{IoOp::kWrite, files_[x.device], file_off, main, const_cast<char*>(p), reqs.size()});
      req_device.push_back(x.device);
    }
    int64_t rest = s.length - main;
    if (rest > 0) {
      AlignedBuffer b(rest);
      if (!b.ok()) return ResourceExhausted("put '" + name + "': bounce buffer of " + std::to_string(rest) + " bytes");
      std::memcpy(b.data(), p + main, rest);
      reqs.push_back(IoRequest{IoOp::kWrite, files_[x.device], file_off + main, b.size_bytes(), b.data(), reqs.size()});
      req_device.push_back(x.device);
      bounces.push_back(std::move(b));
    }
  }
  CompletionQueue q;
  Status st = storage_->Submit(reqs, &q);
  std::vector<IoCompletion> done;
  if (st.ok()) {
    while (done.size() < reqs.size()) q.Wait(&done, 1);
    for (auto& c : done) {
      if (st.ok() && !c.status.ok()) st = c.status.WithContext("put '" + name + "': " + DeviceLabel(req_device[c.tag]));
      if (st.ok() && c.bytes != reqs[c.tag].length_bytes) {
        st = IoError("put '" + name + "': " + DeviceLabel(req_device[c.tag]) + ": wrote " + std::to_string(c.bytes) +
                     " of " + std::to_string(reqs[c.tag].length_bytes) + " bytes");
      }
    }
  } else {
    st = st.WithContext("put '" + name + "'");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!st.ok()) {
    FreeExtents(e.extents);
    return st;
  }
  auto it = tensors_.find(name);
  if (it != tensors_.end()) FreeExtents(it->second.extents);
  tensors_[name] = std::move(e);
  return Status::Ok();
}

Status TensorStore::Get(const std::string& name, void* data, int64_t capacity_bytes) {
  TensorEntry e;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = tensors_.find(name);
    if (it == tensors_.end()) return NotFound("get '" + name + "': no such tensor in store '" + options_.name + "'");
    e = it->second;
  }
  if (capacity_bytes < e.size_bytes) {
    return InvalidArgument("get '" + name + "': buffer of " + std::to_string(capacity_bytes) + " bytes for a tensor of " +
                           std::to_string(e.size_bytes));
  }
  char* dst = static_cast<char*>(data);
  std::vector<IoRequest> reqs;
  std::vector<int32_t> req_device;
  struct Tail {
    AlignedBuffer buf;
    char* dst;
    int64_t len;
  };
  std::vector<Tail> tails;
  for (const Segment& s : Segments(e)) {
    const Extent& x = e.extents[s.extent];
    int64_t file_off = x.offset_bytes + s.extent_offset;
    char* p = dst + s.tensor_offset;
    int64_t main = IsAlignedPtr(p, kDirectAlignment) ? s.length / kDirectAlignment * kDirectAlignment : 0;
    if (main > 0) {
      reqs.push_back(IoRequest{IoOp::kRead, files_[x.device], file_off, main, p, reqs.size()});
      req_device.push_back(x.device);
    }
    int64_t rest = s.length - main;
    if (rest > 0) {
      AlignedBuffer b(rest);
      if (!b.ok()) return ResourceExhausted("get '" + name + "': bounce buffer of " + std::to_string(rest) + " bytes");
      reqs.push_back(IoRequest{IoOp::kRead, files_[x.device], file_off + main, b.size_bytes(), b.data(), reqs.size()});
      req_device.push_back(x.device);
      tails.push_back(Tail{std::move(b), p + main, rest});
    }
  }
  CompletionQueue q;
  TF_RETURN_IF_ERROR(storage_->Submit(reqs, &q).WithContext("get '" + name + "'"));
  std::vector<IoCompletion> done;
  while (done.size() < reqs.size()) q.Wait(&done, 1);
  for (auto& c : done) {
    if (!c.status.ok()) return c.status.WithContext("get '" + name + "': " + DeviceLabel(req_device[c.tag]));
    if (c.bytes != reqs[c.tag].length_bytes) {
      return IoError("get '" + name + "': " + DeviceLabel(req_device[c.tag]) + ": read " + std::to_string(c.bytes) +
                     " of " + std::to_string(reqs[c.tag].length_bytes) + " bytes");
    }
  }
  for (auto& t : tails) std::memcpy(t.dst, t.buf.data(), t.len);
  if (options_.verify_on_read) {
    uint32_t crc = Crc32c(data, e.size_bytes);
    if (crc != e.crc32c) {
      std::string where;
      for (auto& x : e.extents) where += (where.empty() ? "" : ", ") + DeviceLabel(x.device) + " offset " + std::to_string(x.offset_bytes);
      return DataLoss("get '" + name + "': checksum mismatch (manifest " + FormatChecksum(e.crc32c) + ", read " +
                      FormatChecksum(crc) + ") on " + where);
    }
  }
  return Status::Ok();
}

Status TensorStore::Remove(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return NotFound("remove '" + name + "': no such tensor");
  FreeExtents(it->second.extents);
  tensors_.erase(it);
  return Status::Ok();
}

StatusOr<TensorEntry> TensorStore::Find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return NotFound("tensor '" + name + "' not in store '" + options_.name + "'");
  return it->second;
}

std::vector<TensorEntry> TensorStore::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<TensorEntry> out;
  for (auto& [n, e] : tensors_) out.push_back(e);
  return out;
}

int64_t TensorStore::DeviceUsedBytes(int32_t device) const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocators_[device].used_bytes();
}

}  // namespace tierflow::real
