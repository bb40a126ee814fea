// A forwarding wrapper that fails, shortens or delays chosen operations (leveldb's fault-
// injection Env). Every operation it sees is counted once, in the order it arrives; a rule fires
// on matching operations after `skip` of them went through. A short write really writes the
// first `short_bytes` (through the inner storage) and then completes with an error, as a device
// that filled up mid-request would.
#include <chrono>
#include <thread>

#include "io_common.h"

namespace tierflow::real {
namespace internal {
namespace {

class FaultStorage final : public FaultInjectingStorage {
 public:
  explicit FaultStorage(Storage* inner) : inner_(inner) {}
  std::string name() const override { return "fault(" + inner_->name() + ")"; }

  void AddRule(const FaultRule& rule) override {
    std::lock_guard<std::mutex> lock(mu_);
    rules_.push_back({rule, 0, 0});
  }
  void ClearRules() override {
    std::lock_guard<std::mutex> lock(mu_);
    rules_.clear();
    crashed_ = false;
  }
  int64_t operations_seen() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }
  int64_t faults_injected() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return injected_;
  }

  StatusOr<OpenFile> Open(const std::string& path, const OpenOptions& options) override {
    TF_RETURN_IF_ERROR(Check(FaultOpMask::kMetadata, path, "open '" + path + "'"));
    return inner_->Open(path, options);
  }
  Status Close(FileId file) override { return inner_->Close(file); }
  std::string PathOf(FileId file) const override { return inner_->PathOf(file); }
  int32_t DeviceOf(FileId file) const override { return inner_->DeviceOf(file); }

  Status Submit(std::span<const IoRequest> requests, CompletionSink* queue) override {
    std::vector<IoRequest> pass;
    for (const IoRequest& r : requests) {
      std::string path = inner_->PathOf(r.file);
      FaultOpMask mask = r.op == IoOp::kRead ? FaultOpMask::kRead : FaultOpMask::kWrite;
      std::string what = std::string(IoOpName(r.op)) + " '" + path + "' (device " +
                         std::to_string(inner_->DeviceOf(r.file)) + ") at offset " +
                         std::to_string(r.offset_bytes) + ", " + std::to_string(r.length_bytes) + " bytes";
      FaultRule rule;
      if (!Match(mask, path, &rule)) {
        pass.push_back(r);
        continue;
      }
      switch (rule.kind) {
        case FaultKind::kDelay:
          std::this_thread::sleep_for(std::chrono::duration<double>(rule.delay_s));
          pass.push_back(r);
          break;
        case FaultKind::kError:
        case FaultKind::kCrash:
          CompleteNow(r, queue, FromErrno(rule.error, what + " (injected)"), 0);
          break;
        case FaultKind::kShort: {
          int64_t n = std::min(rule.short_bytes, r.length_bytes);
          int64_t done = 0;
          if (n > 0) {
            IoRequest part = r;
            part.length_bytes = n;
            CompletionQueue q;
            TF_RETURN_IF_ERROR(inner_->Submit({&part, 1}, &q));
            std::vector<IoCompletion> c;
            q.Wait(&c, 1);
            done = c[0].status.ok() ? c[0].bytes : 0;
          }
          CompleteNow(r, queue, IoError(what + ": short " + IoOpName(r.op) + ", " + std::to_string(done) +
                                        " of " + std::to_string(r.length_bytes) + " bytes (injected)"), done);
          break;
        }
      }
    }
    if (pass.empty()) return Status::Ok();
    return inner_->Submit(pass, queue);
  }

  Status RegisterMemory(void* data, int64_t size_bytes) override { return inner_->RegisterMemory(data, size_bytes); }
  void UnregisterMemory(void* data) override { inner_->UnregisterMemory(data); }

  Status Allocate(FileId file, int64_t size_bytes) override {
    TF_RETURN_IF_ERROR(Check(FaultOpMask::kMetadata, inner_->PathOf(file), "allocate '" + inner_->PathOf(file) + "'"));
    return inner_->Allocate(file, size_bytes);
  }
  Status Truncate(FileId file, int64_t size_bytes) override {
    TF_RETURN_IF_ERROR(Check(FaultOpMask::kMetadata, inner_->PathOf(file), "truncate '" + inner_->PathOf(file) + "'"));
    return inner_->Truncate(file, size_bytes);
  }
  StatusOr<int64_t> FileSize(FileId file) override { return inner_->FileSize(file); }
  Status Sync(FileId file) override {
    TF_RETURN_IF_ERROR(Check(FaultOpMask::kSync, inner_->PathOf(file), "fsync '" + inner_->PathOf(file) + "'"));
    return inner_->Sync(file);
  }
  Status DropCache(FileId file) override { return inner_->DropCache(file); }
  Status CreateDir(const std::string& path) override {
    TF_RETURN_IF_ERROR(Check(FaultOpMask::kMetadata, path, "mkdir '" + path + "'"));
    return inner_->CreateDir(path);
  }
  Status SyncDir(const std::string& path) override {
    TF_RETURN_IF_ERROR(Check(FaultOpMask::kSync, path, "fsync directory '" + path + "'"));
    return inner_->SyncDir(path);
  }
  Status Rename(const std::string& from, const std::string& to) override {
    TF_RETURN_IF_ERROR(Check(FaultOpMask::kMetadata, from, "rename '" + from + "' to '" + to + "'"));
    return inner_->Rename(from, to);
  }
  Status Remove(const std::string& path) override {
    TF_RETURN_IF_ERROR(Check(FaultOpMask::kMetadata, path, "remove '" + path + "'"));
    return inner_->Remove(path);
  }
  StatusOr<bool> Exists(const std::string& path) override { return inner_->Exists(path); }
  StatusOr<std::vector<std::string>> List(const std::string& dir) override { return inner_->List(dir); }

 private:
  struct Armed {
    FaultRule rule;
    int64_t matched = 0;
    int64_t fired = 0;
  };

  // Counts the operation; returns true (and the rule) when a fault applies.
  bool Match(FaultOpMask op, const std::string& path, FaultRule* out) {
    std::lock_guard<std::mutex> lock(mu_);
    ++seen_;
    if (crashed_) {
      *out = crash_rule_;
      ++injected_;
      return true;
    }
    for (Armed& a : rules_) {
      if (!(a.rule.ops & static_cast<uint32_t>(op))) continue;
      if (!a.rule.path_contains.empty() && path.find(a.rule.path_contains) == std::string::npos) continue;
      int64_t index = a.matched++;
      if (index < a.rule.skip) continue;
      if (a.rule.count >= 0 && a.fired >= a.rule.count) continue;
      ++a.fired;
      ++injected_;
      *out = a.rule;
      if (a.rule.kind == FaultKind::kCrash) {
        crashed_ = true;
        crash_rule_ = a.rule;
      }
      return true;
    }
    return false;
  }

  Status Check(FaultOpMask op, const std::string& path, const std::string& what) {
    FaultRule rule;
    if (!Match(op, path, &rule)) return Status::Ok();
    if (rule.kind == FaultKind::kDelay) {
      std::this_thread::sleep_for(std::chrono::duration<double>(rule.delay_s));
      return Status::Ok();
    }
    return FromErrno(rule.error, what + " (injected)");
  }

  Storage* inner_;
  mutable std::mutex mu_;
  std::vector<Armed> rules_;
  int64_t seen_ = 0;
  int64_t injected_ = 0;
  bool crashed_ = false;
  FaultRule crash_rule_;
};

}  // namespace
}  // namespace internal

std::unique_ptr<FaultInjectingStorage> NewFaultInjectingStorage(Storage* inner) {
  return std::make_unique<internal::FaultStorage>(inner);
}

}  // namespace tierflow::real
