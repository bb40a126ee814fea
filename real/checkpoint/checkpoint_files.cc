// The files of a checkpoint (checkpoint_files.h).
#include "checkpoint_files.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "../storage/aligned_buffer.h"
#include "tierflow/core/json_checked.h"
#include "tierflow/real/checksum.h"

namespace tierflow::real::ckpt {

using json = nlohmann::json;

std::string ManifestPath(const CheckpointOptions& o) { return o.dirs[0] + "/" + o.name + ".manifest.json"; }


namespace {

StatusOr<std::string> ReadWholeFile(Storage& storage, const std::string& path) {
  OpenOptions o;
  o.direct = false;
  o.read_only = true;
  TF_ASSIGN_OR_RETURN(OpenFile f, storage.Open(path, o));
  auto size = storage.FileSize(f.id);
  std::string text;
  Status st = size.status();
  if (st.ok()) {
    text.resize(*size);
    st = ReadAt(storage, f.id, 0, text.data(), *size);
  }
  (void)storage.Close(f.id);
  TF_RETURN_IF_ERROR(st);
  return text;
}

}  // namespace

Status CheckFileName(const std::string& name, const std::string& what) {
  bool ok = !name.empty() && name.size() <= 255 && name[0] != '.';
  for (const char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_');
  if (ok) return Status::Ok();
  std::string shown;
  for (const char c : name.substr(0, 60)) shown += std::isprint(static_cast<unsigned char>(c)) ? std::string(1, c) : "?";
  return InvalidArgument(what + " '" + shown + (name.size() > 60 ? "...'" : "'") +
                         ": use letters, digits, '.', '-' and '_' (not first '.'), at most 255 characters");
}

namespace {

// A file a manifest lists: names as CheckFileName, joined by '/' (file-per-tensor's generation
// directory), so that it stays inside the checkpoint's directory.
Status CheckManifestFile(const std::string& file) {
  size_t from = 0;
  for (size_t slash = file.find('/'); ; slash = file.find('/', from)) {
    const Status part = CheckFileName(file.substr(from, slash == std::string::npos ? std::string::npos : slash - from), "file '" + file + "': part");
    if (!part.ok()) return part;
    if (slash == std::string::npos) return Status::Ok();
    from = slash + 1;
  }
}

// One tensor of a manifest, every field checked: `where` names the document in the error. A wrong
// type throws json's type_error, which the caller catches.
Status ParseEntry(const json& t, int32_t devices, const std::string& where, CheckpointEntry* e) {
  auto integer = [&](const json& v, const std::string& what, auto* out) -> Status {
    auto value = JsonInteger<std::remove_pointer_t<decltype(out)>>(v, what);
    if (!value.ok()) return DataLoss(where + ": " + value.status().message());
    *out = *value;
    return Status::Ok();
  };
  e->name = t.at("name");
  e->dtype = t.at("dtype");
  const std::string who = "tensor '" + e->name.substr(0, 100) + "': ";
  TF_RETURN_IF_ERROR(integer(t.at("rank"), who + "rank", &e->rank));
  TF_RETURN_IF_ERROR(integer(t.at("size_bytes"), who + "size_bytes", &e->size_bytes));
  if (!ParseChecksum(t.at("checksum"), &e->crc32c)) return DataLoss(where + ": tensor '" + e->name + "': bad checksum");
  TF_RETURN_IF_ERROR(integer(t.at("device"), who + "device", &e->device));
  e->file = t.at("file");
  TF_RETURN_IF_ERROR(integer(t.at("offset_bytes"), who + "offset_bytes", &e->offset_bytes));
  if (e->device < 0 || e->device >= devices) return DataLoss(where + ": tensor '" + e->name + "': bad device");
  if (e->size_bytes < 0 || e->offset_bytes < 0 || e->rank < 0) return DataLoss(where + ": " + who + "size_bytes, offset_bytes and rank must be >= 0");
  const Status named = CheckManifestFile(e->file);
  if (!named.ok()) return DataLoss(where + ": tensor '" + e->name + "': " + named.message());
  return Status::Ok();
}

json EntryJson(const CheckpointEntry& e) {
  return {{"name", e.name}, {"dtype", e.dtype}, {"rank", e.rank}, {"size_bytes", e.size_bytes},
          {"checksum", FormatChecksum(e.crc32c)}, {"device", e.device}, {"file", e.file}, {"offset_bytes", e.offset_bytes}};
}

}  // namespace

json ManifestBody(const Manifest& m) {
  json j;
  j["generation"] = m.generation;
  json files = json::array();
  for (auto& [d, n] : m.paths) files.push_back({{"device", d}, {"name", n}});
  j["files"] = files;
  json ts = json::array();
  for (auto& e : m.entries) ts.push_back(EntryJson(e));
  j["tensors"] = ts;
  return j;
}

Status ParseManifestBody(const json& j, int32_t devices, const std::string& where, Manifest* m) {
  auto generation = JsonInteger<int64_t>(j.at("generation"), "generation");
  if (!generation.ok()) return DataLoss(where + ": " + generation.status().message());
  m->generation = *generation;
  for (auto& f : j.at("files")) {
    auto device = JsonInteger<int32_t>(f.at("device"), "a file's device");
    if (!device.ok()) return DataLoss(where + ": " + device.status().message());
    if (*device < 0 || *device >= devices) return DataLoss(where + ": a file's device is " + std::to_string(*device));
    m->paths.push_back({*device, f.at("name")});
    const Status named = CheckManifestFile(m->paths.back().second);
    if (!named.ok()) return DataLoss(where + ": " + named.message());
  }
  for (auto& t : j.at("tensors")) {
    CheckpointEntry e;
    TF_RETURN_IF_ERROR(ParseEntry(t, devices, where, &e));
    m->entries.push_back(e);
  }
  return Status::Ok();
}

StatusOr<Manifest> ReadManifest(Storage& storage, const CheckpointOptions& o) {
  TF_RETURN_IF_ERROR(CheckFileName(o.name, "checkpoint name"));
  std::string path = ManifestPath(o);
  TF_ASSIGN_OR_RETURN(bool exists, storage.Exists(path));
  if (!exists) return NotFound("checkpoint '" + o.name + "': no manifest '" + path + "'");
  TF_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(storage, path));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("format") || j["format"] != "tierflow.checkpoint/1") {
    return DataLoss("checkpoint manifest '" + path + "': not a tierflow.checkpoint/1 document");
  }
  Manifest m;
  // Integers through the one checked reader (a float or a number past the field's width is
  // damage, named); a wrong type throws json's type_error, caught below.
  auto integer = [&](const json& v, const std::string& what, auto* out) -> Status {
    auto value = JsonInteger<std::remove_pointer_t<decltype(out)>>(v, what);
    if (!value.ok()) return DataLoss("checkpoint manifest '" + path + "': " + value.status().message());
    *out = *value;
    return Status::Ok();
  };
  try {
    m.strategy = j.at("strategy");
    int64_t devices = 0;
    TF_RETURN_IF_ERROR(integer(j.at("devices"), "devices", &devices));
    if (devices != static_cast<int64_t>(o.dirs.size())) {
      return InvalidArgument("checkpoint '" + path + "' spans " + std::to_string(devices) + " directories; " +
                             std::to_string(o.dirs.size()) + " given");
    }
    TF_RETURN_IF_ERROR(ParseManifestBody(j, static_cast<int32_t>(o.dirs.size()), "checkpoint manifest '" + path + "'", &m));
  } catch (const json::exception& e) {
    return DataLoss("checkpoint manifest '" + path + "': " + e.what());
  }
  return m;
}

Status WriteManifest(Storage& storage, const CheckpointOptions& o, const Manifest& m) {
  json j = ManifestBody(m);
  j["format"] = "tierflow.checkpoint/1";
  j["name"] = o.name;
  j["strategy"] = m.strategy;
  j["devices"] = o.dirs.size();
  j["align_bytes"] = o.align_bytes;
  std::string text = j.dump(0);
  std::string path = ManifestPath(o), tmp = path + ".tmp";
  OpenOptions oo;
  oo.create = oo.truncate = true;
  oo.direct = false;
  TF_ASSIGN_OR_RETURN(OpenFile f, storage.Open(tmp, oo));
  Status st = WriteAt(storage, f.id, 0, text.data(), static_cast<int64_t>(text.size()));
  if (st.ok()) st = storage.Sync(f.id);
  Status cl = storage.Close(f.id);
  TF_RETURN_IF_ERROR(st);
  TF_RETURN_IF_ERROR(cl);
  TF_RETURN_IF_ERROR(storage.Rename(tmp, path));  // the commit point
  return storage.SyncDir(o.dirs[0]);
}

// The generation of a file of checkpoint `name` (`<name>-g<digits>.…`), or -1 when it is none of
// them (say, checkpoint `<name>-gold`'s). Past int64's range it reads as the largest.
namespace {
int64_t GenerationOf(const std::string& file, const std::string& name) {
  const std::string prefix = name + "-g";
  if (file.rfind(prefix, 0) != 0) return -1;
  size_t at = prefix.size();
  int64_t g = 0;
  for (; at < file.size() && std::isdigit(static_cast<unsigned char>(file[at])); ++at) {
    g = g > (INT64_MAX - 9) / 10 ? INT64_MAX : g * 10 + (file[at] - '0');
  }
  return at > prefix.size() && at < file.size() && file[at] == '.' ? g : -1;
}
}  // namespace

Status RemoveStale(Storage& storage, const CheckpointOptions& o, const Manifest* keep, int64_t up_to) {
  std::set<std::pair<int32_t, std::string>> kept;
  if (keep != nullptr) kept.insert(keep->paths.begin(), keep->paths.end());
  for (int32_t d = 0; d < static_cast<int32_t>(o.dirs.size()); ++d) {
    TF_ASSIGN_OR_RETURN(auto names, storage.List(o.dirs[d]));
    bool removed = false;
    for (auto& n : names) {
      const int64_t generation = GenerationOf(n, o.name);
      if (generation < 0 || generation > up_to || kept.count({d, n})) continue;
      std::string p = o.dirs[d] + "/" + n;
      if (n.find(".dir") != std::string::npos) {
        auto inner = storage.List(p);
        if (inner.ok()) {
          for (auto& f : *inner) TF_RETURN_IF_ERROR(storage.Remove(p + "/" + f));
        }
      }
      TF_RETURN_IF_ERROR(storage.Remove(p));
      removed = true;
    }
    if (removed) TF_RETURN_IF_ERROR(storage.SyncDir(o.dirs[d]));
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<PinnedArena>> MakeStaging(const CheckpointOptions& o, SlotPool** pool) {
  if (o.staging != nullptr) {
    *pool = o.staging;
    return std::unique_ptr<PinnedArena>();
  }
  ArenaOptions ao;
  ao.allow_unlocked = true;
  int64_t slot = AlignUp(std::max<int64_t>(o.staging_bytes, 1 << 20), kDirectAlignment);
  int32_t n = std::max(2, o.staging_buffers);
  TF_ASSIGN_OR_RETURN(auto arena, PinnedArena::Create(slot * n, ao));
  TF_ASSIGN_OR_RETURN(*pool, arena->CreateSlotPool("checkpoint.staging", slot, n));
  return arena;
}

}  // namespace tierflow::real::ckpt
