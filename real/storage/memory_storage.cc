// Files in memory, keyed by path. Requests run synchronously inside Submit(); directories exist
// implicitly (CreateDir records them so List and Exists behave). O_DIRECT alignment is checked
// exactly as on a real device so that callers' bounce handling is exercised.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "io_common.h"

namespace tierflow::real {
namespace internal {
namespace {

class MemoryStorage final : public Storage {
 public:
  std::string name() const override { return "memory"; }

  StatusOr<OpenFile> Open(const std::string& path, const OpenOptions& options) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(path);
    if (it == data_.end()) {
      if (!options.create) return NotFound("open '" + path + "': No such file or directory");
      it = data_.emplace(path, std::make_shared<std::vector<char>>()).first;
    }
    if (options.truncate) it->second->clear();
    Handle h{path, options.device, options.direct, it->second};
    FileId id = static_cast<FileId>(handles_.size());
    handles_.push_back(h);
    return OpenFile{id, options.direct};
  }
  Status Close(FileId file) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!Valid(file)) return InvalidArgument("close: file id " + std::to_string(file) + " is not open");
    handles_[file].data.reset();
    return Status::Ok();
  }
  std::string PathOf(FileId file) const override {
    std::lock_guard<std::mutex> lock(mu_);
    return Valid(file) ? handles_[file].path : "";
  }
  int32_t DeviceOf(FileId file) const override {
    std::lock_guard<std::mutex> lock(mu_);
    return Valid(file) ? handles_[file].device : 0;
  }

  Status Submit(std::span<const IoRequest> requests, CompletionSink* queue) override {
    // Completions are delivered after the lock is released: a sink may submit again.
    CompletionQueue done;
    for (const IoRequest& r : requests) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!Valid(r.file)) {
        CompleteNow(r, &done, InvalidArgument(std::string(IoOpName(r.op)) + ": file id " + std::to_string(r.file) + " is not open"), 0);
        continue;
      }
      Handle& h = handles_[r.file];
      Status v = ValidateRequest(r, h.path, h.direct, kDirectAlignment);
      if (!v.ok()) {
        CompleteNow(r, &done, v, 0);
        continue;
      }
      auto& d = *h.data;
      if (r.op == IoOp::kWrite) {
        if (static_cast<int64_t>(d.size()) < r.offset_bytes + r.length_bytes) d.resize(r.offset_bytes + r.length_bytes, 0);
        if (r.length_bytes > 0) std::memcpy(d.data() + r.offset_bytes, r.buffer, r.length_bytes);
        CompleteNow(r, &done, Status::Ok(), r.length_bytes);
      } else {
        int64_t avail = std::max<int64_t>(0, std::min<int64_t>(r.length_bytes, static_cast<int64_t>(d.size()) - r.offset_bytes));
        if (avail > 0) std::memcpy(r.buffer, d.data() + r.offset_bytes, avail);
        if (avail < r.length_bytes) {
          CompleteNow(r, &done, DataLoss("read '" + h.path + "' (device " + std::to_string(h.device) + ") at offset " +
                                         std::to_string(r.offset_bytes) + ", " + std::to_string(r.length_bytes) +
                                         " bytes: end of file after " + std::to_string(avail) + " bytes"), avail);
        } else {
          CompleteNow(r, &done, Status::Ok(), avail);
        }
      }
    }
    std::vector<IoCompletion> out;
    done.Wait(&out, 0);
    for (auto& c : out) queue->Push(std::move(c));
    return Status::Ok();
  }

  Status Allocate(FileId file, int64_t size_bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!Valid(file)) return InvalidArgument("allocate: file not open");
    auto& d = *handles_[file].data;
    if (static_cast<int64_t>(d.size()) < size_bytes) d.resize(size_bytes, 0);
    return Status::Ok();
  }
  Status Truncate(FileId file, int64_t size_bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!Valid(file)) return InvalidArgument("truncate: file not open");
    handles_[file].data->resize(size_bytes, 0);
    return Status::Ok();
  }
  StatusOr<int64_t> FileSize(FileId file) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!Valid(file)) return InvalidArgument("size: file not open");
    return static_cast<int64_t>(handles_[file].data->size());
  }
  Status Sync(FileId file) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!Valid(file)) return InvalidArgument("fsync: file not open");
    return Status::Ok();
  }
  Status CreateDir(const std::string& path) override {
    std::lock_guard<std::mutex> lock(mu_);
    dirs_.insert(Trim(path));
    return Status::Ok();
  }
  Status SyncDir(const std::string&) override { return Status::Ok(); }
  Status Rename(const std::string& from, const std::string& to) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(from);
    if (it != data_.end()) {
      data_[to] = it->second;
      data_.erase(it);
      return Status::Ok();
    }
    if (dirs_.count(Trim(from))) {
      // Move every file below the directory.
      std::string pf = Trim(from) + "/", pt = Trim(to) + "/";
      std::map<std::string, std::shared_ptr<std::vector<char>>> moved;
      for (auto i = data_.begin(); i != data_.end();) {
        if (i->first.rfind(pf, 0) == 0) {
          moved[pt + i->first.substr(pf.size())] = i->second;
          i = data_.erase(i);
        } else {
          ++i;
        }
      }
      for (auto& [k, v] : moved) data_[k] = v;
      dirs_.erase(Trim(from));
      dirs_.insert(Trim(to));
      return Status::Ok();
    }
    return NotFound("rename '" + from + "' to '" + to + "': No such file or directory");
  }
  Status Remove(const std::string& path) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (data_.erase(path) || dirs_.erase(Trim(path))) return Status::Ok();
    return NotFound("remove '" + path + "': No such file or directory");
  }
  StatusOr<bool> Exists(const std::string& path) override {
    std::lock_guard<std::mutex> lock(mu_);
    return data_.count(path) > 0 || dirs_.count(Trim(path)) > 0;
  }
  StatusOr<std::vector<std::string>> List(const std::string& dir) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::string prefix = Trim(dir) + "/";
    std::set<std::string> names;
    for (auto& [k, v] : data_) {
      if (k.rfind(prefix, 0) == 0) names.insert(k.substr(prefix.size(), k.find('/', prefix.size()) - prefix.size()));
    }
    for (auto& k : dirs_) {
      if (k.rfind(prefix, 0) == 0) names.insert(k.substr(prefix.size(), k.find('/', prefix.size()) - prefix.size()));
    }
    return std::vector<std::string>(names.begin(), names.end());
  }

 private:
  struct Handle {
    std::string path;
    int32_t device = 0;
    bool direct = false;
    std::shared_ptr<std::vector<char>> data;  // null once closed
  };
  static std::string Trim(std::string p) {
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    return p;
  }
  bool Valid(FileId f) const { return f >= 0 && static_cast<size_t>(f) < handles_.size() && handles_[f].data; }

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<std::vector<char>>> data_;
  std::set<std::string> dirs_;
  std::vector<Handle> handles_;
};

}  // namespace
}  // namespace internal

std::unique_ptr<Storage> NewMemoryStorage() { return std::make_unique<internal::MemoryStorage>(); }

}  // namespace tierflow::real
