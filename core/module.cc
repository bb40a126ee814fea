#include "tierflow/core/module.h"

#include <dlfcn.h>

#include <map>
#include <mutex>

namespace tierflow {
namespace {

StatusOr<void*> Open(const std::string& file, const std::string& entry, const std::string& needs) {
  void* handle = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    return Unavailable("module " + file + " could not be loaded (" + (why ? why : "no reason given") + "): " + needs);
  }
  void* address = ::dlsym(handle, entry.c_str());
  if (address == nullptr) return Internal("module " + file + " has no " + entry + ": it is not this tierflow's");
  return address;
}

}  // namespace

StatusOr<void*> OpenModuleEntry(const std::string& file, const std::string& entry, const std::string& needs) {
  static std::mutex mutex;
  static std::map<std::string, StatusOr<void*>> opened;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = opened.find(file + '\0' + entry);
  if (it == opened.end()) it = opened.emplace(file + '\0' + entry, Open(file, entry, needs)).first;
  return it->second;
}

}  // namespace tierflow
