#include "test_util.h"

#include <cstring>
#include <filesystem>

namespace tierflow::real::testing {

TempDir::TempDir() {
  std::string base = std::filesystem::temp_directory_path().string() + "/tierflow-real-XXXXXX";
  std::vector<char> buf(base.begin(), base.end());
  buf.push_back('\0');
  char* p = ::mkdtemp(buf.data());
  if (p == nullptr) {
    ADD_FAILURE() << "mkdtemp failed";
    return;
  }
  path_ = p;
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

std::string TempDir::Sub(const std::string& name) const {
  std::string p = path_ + "/" + name;
  std::filesystem::create_directories(p);
  return p;
}

std::vector<char> RandomBytes(int64_t n, uint64_t seed) {
  std::vector<char> v(static_cast<size_t>(n));
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= v.size(); i += 8) {
    uint64_t x = rng();
    std::memcpy(v.data() + i, &x, 8);
  }
  for (; i < v.size(); ++i) v[i] = static_cast<char>(rng());
  return v;
}

std::unique_ptr<Storage> MakeStorage(const std::string& name, const StorageOptions& options, std::string* skip_reason) {
  if (name == "uring") {
    auto s = NewUringStorage(options);
    if (!s.ok()) {
      *skip_reason = "io_uring back-end unavailable: " + s.status().ToString();
      return nullptr;
    }
    return std::move(*s);
  }
  if (name == "posix") return NewPosixStorage(options);
  return NewMemoryStorage();
}

}  // namespace tierflow::real::testing
