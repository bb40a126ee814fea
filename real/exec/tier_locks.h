// Node-wide locks of the resources that several ranks of a run share (run.h): MLP-Offload's one
// reader and one writer per tier, IOC's one queue per device, held among every process of the
// node as the schedule holds them among its ranks. A resource of concurrency c has c lock files in
// the directory of its device's store, `.tierflow-lock.<resource>.<k>`, which every rank of the
// node opens; a task on it runs holding an flock(2) on one of them. The kernel drops a lock when
// its holder exits, however it exits, so a rank killed holding one blocks no other.
//
// A lock is waited for off the dispatch thread: a waiter thread per resource tries its files
// (LOCK_NB, polling from 10 µs up to 0.5 ms apart) and hands the slot it took to `granted`.
// Locks of one file conflict between processes and between separate opens in one process alike
// (flock locks an open file description), so ranks that are threads of one process (a local
// group) exclude each other too.
//
// Thread safety: Add and RemoveFiles before and after the run; Acquire, Release and Locks from the
// dispatch thread while it runs (`granted` is called on the waiter's thread).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tierflow/core/status.h"
#include "tierflow/real/workers.h"

namespace tierflow::real::exec {

class TierLocks {
 public:
  TierLocks() = default;
  TierLocks(const TierLocks&) = delete;
  TierLocks& operator=(const TierLocks&) = delete;
  // Stops the waiters (one still waiting calls its `granted` with an error) and closes the files,
  // which lets go of every lock held. Close does it before the destructor would.
  ~TierLocks() { Close(); }
  void Close();

  // Opens (making them when missing) the `slots` lock files of resource `resource`, named `name`,
  // in `dir`. The errno's status, naming the file, when one cannot be opened.
  Status Add(int32_t resource, const std::string& name, const std::string& dir, int32_t slots);
  bool Locks(int32_t resource) const { return locks_.count(resource) > 0; }
  // Takes a slot of `resource` (Locks) that no rank of the node holds, then calls
  // `granted(slot, Ok)`; on an error, or when the run ends first, `granted(-1, error)`.
  void Acquire(int32_t resource, std::function<void(int32_t slot, Status status)> granted);
  void Release(int32_t resource, int32_t slot);
  // Removes every lock file: once no rank of the node takes them any more (the run's end; the
  // ranks open them only at set-up).
  void RemoveFiles();

 private:
  struct Lock {
    std::vector<std::string> paths;
    std::vector<int> fds;
    std::vector<bool> held;  // by this process (flock would grant a description its own lock again)
    std::mutex mu;           // guards held
    std::unique_ptr<Worker> waiter;
  };
  std::map<int32_t, std::unique_ptr<Lock>> locks_;
  std::atomic<bool> stop_{false};
};

}  // namespace tierflow::real::exec
