// Fuzz target: checkpoint manifests (tierflow.checkpoint/1), read from an in-memory store with two
// device directories, as `checkpoint load` and `run --resume` read them.
#include <string>

#include "fuzz_target.h"
#include "tierflow/real/checkpoint.h"
#include "tierflow/real/storage.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tierflow::real;
  std::unique_ptr<Storage> storage = NewMemoryStorage();
  CheckpointOptions options;
  options.dirs = {"d0", "d1"};
  options.name = "ckpt";
  for (const std::string& dir : options.dirs) {
    if (!storage->CreateDir(dir).ok()) tierflow::fuzz::Violation("memory storage: mkdir");
  }
  OpenOptions open;
  open.create = true;
  open.direct = false;
  auto file = storage->Open("d0/ckpt.manifest.json", open);
  if (!file.ok()) tierflow::fuzz::Violation("memory storage: open");
  if (size > 0 && !WriteAt(*storage, file->id, 0, data, static_cast<int64_t>(size)).ok()) tierflow::fuzz::Violation("memory storage: write");
  (void)storage->Close(file->id);
  (void)ReadCheckpointManifest(*storage, options);
  return 0;
}
