// The files of a checkpoint (tierflow/real/checkpoint.h), shared by its save (checkpoint.cc) and
// its load (checkpoint_load.cc): their names, the manifest that commits them, the generations, and
// the staging buffers both stream through.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tierflow/core/status.h"
#include "tierflow/real/checkpoint.h"
#include "tierflow/real/pinned_arena.h"
#include "tierflow/real/storage.h"

namespace tierflow::real::ckpt {

std::string ManifestPath(const CheckpointOptions& o);

struct Manifest {
  int64_t generation = 0;
  std::string strategy;
  std::vector<std::pair<int32_t, std::string>> paths;  // (device, name): files or directories
  std::vector<CheckpointEntry> entries;
};

// A name that becomes part of file names in the checkpoint's directories (the checkpoint's, and
// the files a manifest lists): letters, digits, '.', '-', '_', not starting with '.', so that it
// can never reach outside them.
Status CheckFileName(const std::string& name, const std::string& what);
// A manifest's generation, files and tensors (its body; a shard's whole text), and read back into
// `m` with every field checked against `devices` directories, `where` naming the document in the
// error (a value of the wrong JSON type throws json's type_error, which the caller catches).
nlohmann::json ManifestBody(const Manifest& m);
Status ParseManifestBody(const nlohmann::json& j, int32_t devices, const std::string& where, Manifest* m);

// NotFound when no checkpoint was ever committed.
StatusOr<Manifest> ReadManifest(Storage& storage, const CheckpointOptions& o);
// Written to a temporary name, synced, renamed over the manifest (the commit point).
Status WriteManifest(Storage& storage, const CheckpointOptions& o, const Manifest& m);
// Removes every generation file of `o.name` (`<name>-g<digits>.…`) up to generation `up_to` in the
// directories that the manifest `keep` does not list (leftovers of interrupted saves, or the
// previous generation), recursively for directories. A later generation is a save of other
// processes still under way (SaveCheckpointShard), left alone.
Status RemoveStale(Storage& storage, const CheckpointOptions& o, const Manifest* keep, int64_t up_to = INT64_MAX);

// The staging slots: the caller's pool when given (then the returned arena is null), else a
// fresh arena.
StatusOr<std::unique_ptr<PinnedArena>> MakeStaging(const CheckpointOptions& o, SlotPool** pool);

}  // namespace tierflow::real::ckpt
