// The dispatch loop of a run (run.h): Start prepares an instance and hands its work on, Finish
// records what it did; the final state is read back from its homes.
#include "run.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace tierflow::real::exec {

Status Run::Start(const Instance& inst, size_t job_index) {
  const TaskSpec& t = s_.tasks()[static_cast<size_t>(inst.task)];
  ctx_iteration_ = inst.iteration;
  Job& job = jobs_[job_index];
  job = Job{};
  job.instance = inst;
  job.index = job_index;
  job.start_s = MonotonicSeconds() - t0_;
  // Buffers it allocates get memory now (the dispatcher has admitted them to their pools).
  for (int32_t b : t.allocs) {
    Status st = TakeBuffer(Buf(b), s_.buffers()[static_cast<size_t>(b)].name);
    if (!st.ok()) return Status(st.code(), Who(t, inst.iteration) + ": " + st.message());
  }
  if (tier_locks_.Locks(t.resource)) {  // Granted begins it
    tier_locks_.Acquire(t.resource, [this, job_index](int32_t slot, Status st) { events_.Push({job_index, std::move(st), true, slot}); });
    return Status::Ok();
  }
  return Begin(job_index);
}

bool Run::Granted(const Event& e, Status* failure) {
  Job& job = jobs_[e.job];
  const TaskSpec& t = s_.tasks()[static_cast<size_t>(job.instance.task)];
  job.tier_slot = e.slot;
  Status st = e.status.ok() ? Status::Ok() : Status(e.status.code(), Who(t, job.instance.iteration) + ": " + e.status.message());
  job.start_s = MonotonicSeconds() - t0_;  // its record starts once it holds the lock
  if (st.ok() && failure->ok()) st = Begin(e.job);
  if (st.ok() && failure->ok()) return true;
  ReleaseTierLock(job, t);
  if (failure->ok()) *failure = st;
  return false;
}

void Run::ReleaseTierLock(Job& job, const TaskSpec& t) {
  if (job.tier_slot >= 0) tier_locks_.Release(t.resource, job.tier_slot);
  job.tier_slot = -1;
}

Status Run::Begin(size_t job_index) {
  Job& job = jobs_[job_index];
  const Instance& inst = job.instance;
  const TaskSpec& t = s_.tasks()[static_cast<size_t>(inst.task)];
  ctx_iteration_ = inst.iteration;
  if (const OpHandler& h = HandlerOf(t.op); h.prepare != nullptr) TF_RETURN_IF_ERROR(h.prepare(*this, t, inst.task, inst.iteration, job));
  if (job.sink != nullptr) return Status::Ok();  // its requests complete it
  if (engine_ != nullptr && IsCollectiveOp(t.op)) {  // in the order every rank runs them
    // Its record starts when the engine runs it, not while it waits for its turn.
    engine_->Post(inst.task, inst.iteration, job_index, [this, job_index, work = std::move(job.work)] {
      jobs_[job_index].start_s = MonotonicSeconds() - t0_;
      return work ? work() : Status::Ok();
    });
    return Status::Ok();
  }
  if (!job.work || t.resource == kNoIndex) {
    if (job.work) TF_RETURN_IF_ERROR(job.work());
    events_.Push({job_index, Status::Ok()});
    return Status::Ok();
  }
  if (options_.plain_loop) {
    events_.Push({job_index, job.work()});
    return Status::Ok();
  }
  workers_[static_cast<size_t>(t.resource)]->Post([this, job_index] {
    Status s = jobs_[job_index].work();
    events_.Push({job_index, s});
  });
  return Status::Ok();
}

// Every task of `iteration` has completed: report its loss, checkpoint when due.
Status Run::IterationDone(int64_t iteration) {
  Step(iteration).decided = -1;
  if (!global_check_) {  // every step was taken; the per-tensor checks went unused
    updates_ = updates_at_start_ + iteration + 1;
    Step(iteration).norm.by_begin.clear();
  }
  done_above_.insert(iteration);
  while (!done_above_.empty() && *done_above_.begin() == done_below_) {
    done_above_.erase(done_above_.begin());
    ++done_below_;
  }
  // Records are dropped in batches of keep_iterations iterations, so each is moved at most twice.
  // With several ranks every record stays until the run's end, when the ranks' are gathered.
  const int64_t keep = options_.keep_iterations;
  if (keep > 0 && comm_ == nullptr && done_below_ - keep >= records_below_ + keep) TF_RETURN_IF_ERROR(HandOnRecords(done_below_ - keep));
  const double loss = Iter(iteration).loss_sum / micro_steps_;  // the mean over its micro-steps
  result_.loss.push_back(loss);
  loss_sums_.push_back(Iter(iteration).loss_sum);
  if (options_.on_iteration) options_.on_iteration(base_iteration_ + iteration, loss);
  const int64_t done = base_iteration_ + iteration + 1;
  if (options_.checkpoint_every > 0 && !options_.checkpoint_dir.empty() && done % options_.checkpoint_every == 0) {
    TF_RETURN_IF_ERROR(SaveTrainingCheckpoint(iteration));
  }
  const MasterHook& hook = options_.on_master;
  if (hook.every > 0 && hook.fn && done % hook.every == 0) {
    std::vector<float> master;
    TF_RETURN_IF_ERROR(ReadState(kMaster, iteration + 1, &master));
    TF_RETURN_IF_ERROR(hook.fn(done, master));
  }
  return Status::Ok();
}

Status Run::HandOnRecords(int64_t below) {
  std::vector<TraceRecord>& records = result_.records;
  size_t kept = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    if (records[i].iteration < below) {
      if (options_.on_record) TF_RETURN_IF_ERROR(options_.on_record(records[i]));
    } else {
      if (kept != i) records[kept] = std::move(records[i]);
      ++kept;
    }
  }
  records.resize(kept);
  records_below_ = std::max(records_below_, below);
  return Status::Ok();
}

Status Run::FinishRecords() {
  if (options_.keep_iterations > 0) TF_RETURN_IF_ERROR(HandOnRecords(run_iterations_ - options_.keep_iterations));
  if (options_.on_record) {
    for (const TraceRecord& r : result_.records) TF_RETURN_IF_ERROR(options_.on_record(r));
  }
  return Status::Ok();
}

void Run::Finish(Job& job, const TaskSpec& t) {
  ctx_iteration_ = job.instance.iteration;
  if (job.finish) job.finish();
  // As sim records it (docs/trace-format.md): the threads a CPU task ran on, a collective's rank
  // count.
  const int32_t threads = IsCollectiveOp(t.op)                                   ? t.ranks
                          : HandlerOf(t.op).cpu_threads && t.resource != kNoIndex ? ThreadsOf(t.resource).threads()
                                                                                  : 0;
  TraceRecord r = TaskRecord(s_, job.instance.task, job.instance.iteration, job.start_s,
                             IsInstantOp(t.op) ? job.start_s : MonotonicSeconds() - t0_, "real", threads);
  if (!job.device_span.empty()) {
    r.device_start_s = job.device_span.start_s - t0_;
    r.device_end_s = job.device_span.end_s - t0_;
  }
  if (comm_ != nullptr) r.rank = comm_->rank();  // this rank's view of a collective, too
  result_.records.push_back(std::move(r));
  ReleaseTierLock(job, t);  // after its record ends
  for (int32_t b : t.frees) ReturnBuffer(Buf(b), /*for_good=*/false);
  job.sink.reset();
}

StatusOr<RunResult> Run::ExecutePlainLoop() {
  const std::vector<int32_t> order = plain_order_.empty() ? s_.TopologicalOrder() : plain_order_;
  jobs_.resize(1);
  t0_ = result_.clock_origin_s = MonotonicSeconds();
  for (int64_t iteration = 0; iteration < run_iterations_; ++iteration) {
    for (int32_t task : order) {
      const TaskSpec& t = s_.tasks()[static_cast<size_t>(task)];
      TF_RETURN_IF_ERROR(Start({task, iteration}, 0));
      Event e = events_.Pop();
      if (e.grant) {  // its node-wide lock: now it runs
        Status failure;
        if (!Granted(e, &failure)) return failure;
        e = events_.Pop();
      }
      if (!e.status.ok()) return Status(e.status.code(), Who(t, iteration) + ": " + e.status.message());
      Finish(jobs_[0], t);
    }
    TF_RETURN_IF_ERROR(IterationDone(iteration));
  }
  result_.wall_s = MonotonicSeconds() - t0_;
  result_.tasks = run_iterations_ * static_cast<int64_t>(order.size());
  result_.gpu_memory = device_->memory_peak();
  TF_RETURN_IF_ERROR(ReadState(kMaster, run_iterations_, &result_.master));
  if (comm_ != nullptr) {
    result_.pool_peak_bytes.assign(s_.pools().size(), 0);  // pools are not enforced here
    TF_RETURN_IF_ERROR(GatherRanks());  // every rank is past its last lock
    tier_locks_.RemoveFiles();
  }
  TF_RETURN_IF_ERROR(FinishRecords());
  return std::move(result_);
}

StatusOr<RunResult> Run::Execute() {
  TF_RETURN_IF_ERROR(Setup());
  if (options_.plain_loop) return ExecutePlainLoop();
  Dispatcher d(s_, run_iterations_);
  if (comm_ != nullptr) {
    TF_RETURN_IF_ERROR(comm_->Barrier());  // the ranks' clocks start together
    // From now on the engine is the only user of comm_ until it finishes.
    engine_ = std::make_unique<CommEngine>(comm_, [this](size_t job, Status st) { events_.Push({job, std::move(st)}); });
  }
  // Whatever ends the run early, the engine must not wait for collectives this rank will not post.
  struct FailUnlessFinished {
    CommEngine* engine;
    bool finished = false;
    ~FailUnlessFinished() {
      if (engine != nullptr && !finished) engine->Fail();
    }
  } on_failure{engine_.get()};
  t0_ = result_.clock_origin_s = MonotonicSeconds();
  const int64_t made_before = blocks_.made_bytes();
  std::vector<Instance> to_start;
  Status failure;
  int64_t running = 0;
  const int64_t per_iteration = static_cast<int64_t>(s_.tasks().size());
  // Jobs live in a vector that never reallocates while work is in flight: sized to the most
  // instances that can run at once (every task of the window).
  jobs_.resize(static_cast<size_t>(per_iteration * window_ + 1));
  for (size_t i = jobs_.size(); i-- > 0;) free_jobs_.push_back(i);
  double busy = 0, busy_from = MonotonicSeconds();
  for (;;) {
    if (failure.ok()) {
      to_start.clear();
      d.Dispatch(&to_start);
      for (const Instance& inst : to_start) {
        if (free_jobs_.empty()) {
          failure = Internal("executor: more instances in flight than the iteration window allows");
          break;
        }
        const size_t j = free_jobs_.back();
        free_jobs_.pop_back();
        ++running;
        Status st = Start(inst, j);
        if (!st.ok()) {
          failure = st;
          --running;  // its work was never started
          break;
        }
      }
    }
    if (running == 0) {
      if (!failure.ok()) return failure;
      if (!d.done()) return d.DeadlockReport();
      if (commits_in_flight_ == 0) break;  // else the last checkpoint's commit is yet to come back
    }
    busy += MonotonicSeconds() - busy_from;
    Event e = events_.Pop();
    busy_from = MonotonicSeconds();
    if (e.job == kCommitJob) {  // a checkpoint's commit (SaveTrainingCheckpoint)
      --commits_in_flight_;
      if (!e.status.ok() && failure.ok()) failure = e.status;
      continue;
    }
    if (e.grant) {  // a job's node-wide lock: it begins now, or ends here
      if (!Granted(e, &failure)) --running;
      continue;
    }
    --running;
    Job& job = jobs_[e.job];
    const TaskSpec& t = s_.tasks()[static_cast<size_t>(job.instance.task)];
    if (!e.status.ok()) {
      if (failure.ok()) failure = Status(e.status.code(), Who(t, job.instance.iteration) + ": " + e.status.message());
      ReleaseTierLock(job, t);  // another rank may wait for it to reach the collective this one fails
      continue;
    }
    if (!failure.ok()) {
      ReleaseTierLock(job, t);
      continue;
    }
    Finish(job, t);
    const int64_t iteration = job.instance.iteration;
    free_jobs_.push_back(e.job);
    d.Complete(job.instance);
    if (options_.exit_after_tasks > 0 && ++tasks_done_ == options_.exit_after_tasks) std::_Exit(137);
    const size_t slot = static_cast<size_t>(iteration % window_);
    if (++completed_in_[slot] == per_iteration) {
      completed_in_[slot] = 0;
      Status st = IterationDone(iteration);
      if (!st.ok() && failure.ok()) failure = st;
    }
  }
  busy += MonotonicSeconds() - busy_from;
  if (engine_ != nullptr) engine_->Finish();  // every collective has run
  on_failure.finished = true;
  result_.wall_s = MonotonicSeconds() - t0_;
  result_.dispatch_busy_s = busy;
  result_.tasks = d.completed();
  for (size_t p = 0; p < s_.pools().size(); ++p) result_.pool_peak_bytes.push_back(d.pool_peak_bytes(static_cast<int32_t>(p)));
  result_.gpu_memory = device_->memory_peak();
  result_.host_bytes_made_in_run = blocks_.made_bytes() - made_before;
  TF_RETURN_IF_ERROR(ReadState(kMaster, run_iterations_, &result_.master));
  if (comm_ != nullptr) TF_RETURN_IF_ERROR(GatherRanks());  // every rank is past its last lock
  tier_locks_.RemoveFiles();
  TF_RETURN_IF_ERROR(FinishRecords());
  return std::move(result_);
}

Status Run::ReadState(int kind, int64_t version, std::vector<float>* master) {
  master->assign(static_cast<size_t>(space_.local_total()), 0.0f);
  Versions got;
  CompletionQueue done;
  std::vector<std::pair<char*, const TensorSpec*>> reads;
  for (const TensorSpec& ts : s_.tensors()) {
    if (KindOf(ts.kind) != kind) continue;
    const DiskFile& f = disk_of_device_[static_cast<size_t>(ts.device)];
    if (f.buffered < 0) continue;
    const int64_t n = Elements(ts);
    if (home_[static_cast<size_t>(ts.device)][kind].Get(ts.element_offset, ts.element_offset + n) != version) continue;
    if (got.Get(ts.element_offset, ts.element_offset + n) == 1) continue;  // a copy already read
    got.Set(ts.element_offset, ts.element_offset + n, 1);
    char* block = static_cast<char*>(blocks_.Take(ts.size_bytes));
    if (block == nullptr) return ResourceExhausted(std::string("reading ") + KindName(kind) + ": cannot allocate a staging buffer");
    IoRequest r{IoOp::kRead, f.fd(), ts.offset_bytes, ts.size_bytes, block, reads.size()};
    TF_RETURN_IF_ERROR(io_->Submit({&r, 1}, &done));
    reads.push_back({block, &ts});
  }
  std::vector<IoCompletion> completions;
  while (completions.size() < reads.size()) done.Wait(&completions, 1);
  for (const IoCompletion& c : completions) {
    if (!c.status.ok()) return Status(c.status.code(), std::string("reading ") + KindName(kind) + ": " + c.status.message());
  }
  for (const auto& [block, ts] : reads) {
    std::memcpy(master->data() + ts->element_offset, block, static_cast<size_t>(ts->size_bytes));
    blocks_.Give(block);
  }
  for (size_t ti = 0; ti < s_.tensors().size(); ++ti) {  // and what memory keeps (host, GPU)
    const TensorSpec& ts = s_.tensors()[ti];
    const int32_t buffer = memory_home_[ti].first;
    if (buffer == kNoIndex || KindOf(ts.kind) != kind) continue;
    const int64_t n = Elements(ts);
    const Span span = FindSpan(buffer, kind, ts.element_offset, n);
    if (span.data == nullptr || span.version != version) continue;
    if (OnGpu(buffer)) {
      TF_RETURN_IF_ERROR(device_->D2H(master->data() + ts.element_offset, span.data, ts.size_bytes).WithContext(std::string("reading ") + KindName(kind)));
    } else {
      std::memcpy(master->data() + ts.element_offset, span.data, static_cast<size_t>(ts.size_bytes));
    }
    got.Set(ts.element_offset, ts.element_offset + n, 1);
  }
  if (got.Get(0, space_.local_total()) != 1) {
    return FailedPrecondition(std::string("some of ") + KindName(kind) + " is not at version " + std::to_string(version) +
                              " in memory or on any disk (" + std::to_string(base_iteration_ + version) + " iterations)");
  }
  return Status::Ok();
}

}  // namespace tierflow::real::exec
