// The collective engine of a rank (docs/executor.md "Many ranks"): one thread that issues every
// collective of its rank, in one order agreed by all ranks, over a Collective back-end.
//
// Thread safety: Post, Fail and Finish may be called from any thread; `done` is called on the
// engine's thread, never under its lock.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "tierflow/core/status.h"
#include "tierflow/real/collective.h"

namespace tierflow::real {

// Runs every collective of a rank on one thread, in one order on every rank: rank 0 runs them in
// the order they are posted to it (ready there) and first broadcasts which one it is; every
// other rank waits for that announcement, then for that instance to be posted there, and runs it.
// So ranks whose dispatchers make collectives ready in different orders never issue mismatched
// operations. A work's status goes to `done` with its job.
class CommEngine {
 public:
  // `done(job, status)` is called on the engine's thread when a work has run (or failed).
  CommEngine(Collective* comm, std::function<void(size_t job, Status status)> done);
  // Rank 0 announces the end (every collective has run); every rank's thread stops.
  ~CommEngine();
  // `task` is a task of the schedule, or kCheckpointCommit: the commit of the checkpoint saved
  // after `iteration`, which every rank posts too.
  void Post(int32_t task, int64_t iteration, size_t job, std::function<Status()> work);
  static constexpr int32_t kCheckpointCommit = -2;
  // Rank 0: after its last collective. Joins the thread (other ranks: after the announcement).
  void Finish();
  // This rank's run failed: its thread stops at the next collective announced that this rank has
  // not posted, instead of waiting for it forever, so that the run can return its error (and the
  // process abort the job, docs/executor.md "Many ranks").
  void Fail();

 private:
  struct Item {
    size_t job = 0;
    std::function<Status()> work;
  };
  void Loop();
  Collective* comm_;
  std::function<void(size_t, Status)> done_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::pair<int32_t, int64_t>, Item>> queue_;  // rank 0: posted order
  std::map<std::pair<int32_t, int64_t>, Item> posted_;               // other ranks
  bool finishing_ = false;
  bool failed_ = false;
  std::thread thread_;
};

}  // namespace tierflow::real
