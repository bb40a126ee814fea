// A run's state at its start and its checkpoints (run.h): the initial state written to its homes,
// the training state saved atomically every K iterations, and loaded when resuming.
#include "run.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <nlohmann/json.hpp>

#include "tierflow/core/json_checked.h"
#include "tierflow/real/checkpoint.h"

namespace tierflow::real::exec {

// Writes the initial state to every disk home the schedule names (version 0), into the memory
// homes (host and GPU), and sets the GPU's bf16 parameters.
Status Run::InitialiseStores() {
  const std::vector<float> model = initial_[0].empty() ? trainer_.InitialMaster() : initial_[0];
  std::vector<uint16_t> model16(model.size());
  for (size_t i = 0; i < model.size(); ++i) model16[i] = Fp32ToBf16(model[i]);
  for (const ResidentRun& r : resident_) {  // the model's elements: whole units on every rank
    TF_RETURN_IF_ERROR(device_->H2D(r.data, model16.data() + r.begin, r.n * 2, nullptr));
    resident_versions_.Set(r.begin, r.begin + r.n, 0);
  }
  // This rank's partition, in its own element space (the model's with one rank).
  std::vector<float> master(static_cast<size_t>(space_.local_total()));
  for (const RankSpace::Segment& seg : space_.Segments(0, space_.local_total())) {
    std::copy_n(model.data() + seg.global, seg.n, master.data() + seg.local);
  }
  std::vector<uint16_t> p16(master.size());
  for (size_t i = 0; i < master.size(); ++i) p16[i] = Fp32ToBf16(master[i]);
  const std::vector<float> zeros(master.size(), 0.0f);
  auto initial = [&](int kind, int64_t begin) -> const void* {
    const std::vector<float>& moment = kind == kAdamM ? initial_[1] : initial_[2];
    return kind == kParam16 ? static_cast<const void*>(p16.data() + begin)
           : kind == kMaster ? static_cast<const void*>(master.data() + begin)
           : !moment.empty() ? static_cast<const void*>(moment.data() + begin)
                             : static_cast<const void*>(zeros.data() + begin);
  };
  for (size_t ti = 0; ti < s_.tensors().size(); ++ti) {
    const auto [buffer, offset] = memory_home_[ti];
    if (buffer == kNoIndex) continue;
    const TensorSpec& ts = s_.tensors()[ti];
    const int kind = KindOf(ts.kind);
    if (OnGpu(buffer)) {  // optimizer states updated on the GPU
      TF_RETURN_IF_ERROR(device_->H2D(Buf(buffer).data + offset, initial(kind, ts.element_offset), ts.size_bytes, nullptr));
    } else {
      std::memcpy(Buf(buffer).data + offset, initial(kind, ts.element_offset), static_cast<size_t>(ts.size_bytes));
    }
    Place(buffer, {kind, ts.element_offset, Elements(ts), offset, 0});
  }
  CompletionQueue done;
  std::vector<char*> staged;
  size_t submitted = 0;
  for (const TensorSpec& t : s_.tensors()) {
    const int kind = KindOf(t.kind);
    const DiskFile& f = disk_of_device_[static_cast<size_t>(t.device)];
    if (f.direct < 0 || kind == kGrad || kind == kGrad16) continue;
    const int64_t n = Elements(t);
    // Tensors overlap (a unit's range, a sub-group's): write each range once.
    if (home_[static_cast<size_t>(t.device)][kind].Get(t.element_offset, t.element_offset + n) == 0) continue;
    const void* src = initial(kind, t.element_offset);
    char* block = static_cast<char*>(blocks_.Take(t.size_bytes));
    if (block == nullptr) return ResourceExhausted("initial state: cannot allocate a staging buffer");
    std::memcpy(block, src, static_cast<size_t>(t.size_bytes));
    staged.push_back(block);
    IoRequest r{IoOp::kWrite, f.fd(), t.offset_bytes, t.size_bytes, block, submitted};
    TF_RETURN_IF_ERROR(io_->Submit({&r, 1}, &done));
    ++submitted;
    home_[static_cast<size_t>(t.device)][kind].Set(t.element_offset, t.element_offset + n, 0);
  }
  std::vector<IoCompletion> completions;
  while (completions.size() < submitted) done.Wait(&completions, 1);
  Status first;
  for (const IoCompletion& c : completions) {
    if (!c.status.ok() && first.ok()) first = c.status;
  }
  for (char* b : staged) blocks_.Release(b);
  if (!first.ok()) return Status(first.code(), "writing the initial state: " + first.message());
  return Status::Ok();
}

namespace {
constexpr const char* kCheckpointName = "tierflow-run";
}  // namespace

CheckpointOptions Run::TrainingCheckpoint() const {
  CheckpointOptions o;
  o.dirs = {options_.checkpoint_dir};
  o.name = kCheckpointName;
  return o;
}

// With several ranks the checkpoint is one directory, which every rank writes its shard into and
// rank 0 commits: every rank must see rank 0's (a directory on each node's own disk would not be,
// nor --storage memory's, each process's own). Rank 0 leaves a mark there that each rank looks for.
Status Run::CheckSharedCheckpointDir() {
  if (comm_ == nullptr || options_.checkpoint_dir.empty()) return Status::Ok();
  const std::string who = "checkpoint '" + options_.checkpoint_dir + "'";
  std::string mark;  // its name; each rank looks in its own --checkpoint directory
  Status made;
  if (comm_->rank() == 0) {
    mark = ".tierflow-shared." + std::to_string(::getpid());
    OpenOptions o;
    o.create = o.truncate = true;
    o.direct = false;
    auto f = io_->Open(options_.checkpoint_dir + "/" + mark, o);
    made = f.ok() ? io_->Close(f->id) : f.status().WithContext(who);
  }
  TF_RETURN_IF_ERROR(AgreeAcrossRanks(made));
  TF_ASSIGN_OR_RETURN(const std::vector<std::string> marks, GatherText(mark));
  auto seen = io_->Exists(options_.checkpoint_dir + "/" + marks[0]);
  TF_ASSIGN_OR_RETURN(const std::vector<std::string> seen_by, GatherText(seen.ok() && *seen ? "1" : "0"));
  if (comm_->rank() == 0) (void)io_->Remove(options_.checkpoint_dir + "/" + mark);
  std::string blind;
  for (size_t q = 0; q < seen_by.size(); ++q) blind += seen_by[q] == "1" ? "" : (blind.empty() ? "" : ", ") + std::to_string(q);
  if (blind.empty()) return Status::Ok();
  return FailedPrecondition(who + ": rank " + blind + " does not see rank 0's directory; the ranks write one checkpoint, so --checkpoint must " +
                            "be one directory every rank shares (across nodes, on a file system they share)");
}

// With several ranks, the generation of each checkpoint the run saves is
// checkpoint_generation_base_ plus the iterations done: past the committed one at the first, read
// by every rank before any rank can commit (a commit waits for every rank's shard), so that the
// ranks agree on it.
Status Run::FindCheckpointGenerations() {
  if (comm_ == nullptr || options_.checkpoint_every <= 0 || options_.checkpoint_dir.empty()) return Status::Ok();
  auto next = NextCheckpointGeneration(*io_, TrainingCheckpoint());
  if (!next.ok()) return next.status().WithContext("checkpoint '" + options_.checkpoint_dir + "'");
  checkpoint_generation_base_ = *next - base_iteration_ - 1;
  return Status::Ok();
}

// The committed checkpoint in options_.checkpoint_dir, when resuming and there is one: the state
// to start from, the step, the loss scaler and the iterations already done. With several ranks
// each reads its own shard (and its copy of the meta record), and the ranks' master weights are
// gathered into the model's (the resident units' parameters are made from every rank's part).
Status Run::LoadCheckpointIfAny() {
  if (!options_.resume) return Status::Ok();
  if (options_.checkpoint_dir.empty()) return InvalidArgument("resume needs a checkpoint directory");
  // Through the run's storage, as every byte the run moves: --storage memory and injected faults
  // reach its checkpoints too.
  TF_ASSIGN_OR_RETURN(const bool exists, io_->Exists(options_.checkpoint_dir + "/" + kCheckpointName + ".manifest.json"));
  if (!exists) return Status::Ok();
  std::vector<float> state[3];
  Status read = ReadCheckpoint(state);
  if (comm_ != nullptr) read = AgreeAcrossRanks(read);  // the ranks resume, or stop, together
  TF_RETURN_IF_ERROR(read);
  // The master weights in the model's order (InitialiseStores makes every home from them); the
  // moments stay the rank's own.
  if (comm_ != nullptr) {
    TF_ASSIGN_OR_RETURN(initial_[0], GatherModel(state[0]));
  } else {
    initial_[0] = std::move(state[0]);
  }
  initial_[1] = std::move(state[1]);
  initial_[2] = std::move(state[2]);
  return Status::Ok();
}

// This rank's shard of the committed checkpoint into `state` (master, adam_m, adam_v), its meta
// record checked field by field and applied: the iterations done, the updates, the loss scaler.
Status Run::ReadCheckpoint(std::vector<float> state[3]) {
  CheckpointOptions o = TrainingCheckpoint();
  o.rank = space_.rank();
  const std::string who = "checkpoint '" + options_.checkpoint_dir + "'";
  const size_t local = static_cast<size_t>(space_.local_total());
  for (int k = 0; k < 3; ++k) state[k].resize(local);
  std::string meta;
  Status sizes;
  int found = 0;
  auto sink = [&](const CheckpointEntry& e) -> void* {
    for (int k = 0; k < 3; ++k) {
      if (e.name != KindName(kMaster + k)) continue;
      if (e.size_bytes != static_cast<int64_t>(local * 4)) {
        sizes = InvalidArgument(who + ": " + e.name + " of rank " + std::to_string(e.rank) + " has " + std::to_string(e.size_bytes) +
                                " bytes, this model needs " + std::to_string(local * 4) + (space_.ranks() > 1 ? " a rank" : ""));
        return nullptr;
      }
      ++found;
      return state[k].data();
    }
    if (e.name == "meta") {
      meta.resize(static_cast<size_t>(e.size_bytes));
      return meta.data();
    }
    return nullptr;
  };
  auto stats = LoadCheckpoint(*io_, o, sink);
  if (!stats.ok()) return stats.status().WithContext(who);
  // A checkpoint holds each rank's partition: it resumes on as many ranks (before checkpoints of
  // several ranks, every one was of one).
  auto other_count = [&](int64_t ranks) {
    return FailedPrecondition(who + " holds the state of " + std::to_string(ranks) + " rank" + (ranks == 1 ? "" : "s") + ", this run has " +
                              std::to_string(space_.ranks()) + " (training.data_parallel): resume it on " + std::to_string(ranks) +
                              (ranks == 1 ? " process" : " ranks, mpirun -np " + std::to_string(ranks)));
  };
  if (meta.empty()) {  // nothing of this rank's: a checkpoint of fewer ranks?
    TF_ASSIGN_OR_RETURN(const std::vector<CheckpointEntry> entries, ReadCheckpointManifest(*io_, o));
    int64_t ranks = 0;
    for (const CheckpointEntry& e : entries) ranks = std::max<int64_t>(ranks, e.rank + 1);
    if (ranks != space_.ranks()) return other_count(ranks);
  }
  const auto j = nlohmann::json::parse(meta, nullptr, false);
  const std::string record = who + ": its meta record";
  if (j.is_discarded() || !j.is_object()) return DataLoss(record + (meta.empty() ? " is missing for rank " + std::to_string(space_.rank()) : " is unreadable"));
  // Field by field: a value of the wrong type or out of range is damage, named, not a crash.
  auto integer = [&](const char* key, int64_t lo, int64_t hi, int64_t* out) -> Status {
    const auto value = j.contains(key) && j[key].is_number_integer() ? JsonInteger<int64_t>(j[key], key) : InvalidArgument(key);
    if (!value.ok() || *value < lo || *value > hi) {
      return DataLoss(record + ": '" + key + "' is " + (j.contains(key) ? j[key].dump().substr(0, 40) : "missing") + ", not an integer in [" +
                      std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    *out = *value;
    return Status::Ok();
  };
  int64_t ranks = 1;
  if (j.contains("ranks")) TF_RETURN_IF_ERROR(integer("ranks", 1, int64_t{1} << 20, &ranks));
  if (ranks != space_.ranks()) return other_count(ranks);
  TF_RETURN_IF_ERROR(sizes);
  if (found != 3) return DataLoss(who + ": rank " + std::to_string(space_.rank()) + "'s master, adam_m and adam_v are not all there (" + std::to_string(found) + " of 3)");
  int64_t done = 0, updates = 0, good_steps = 0;
  TF_RETURN_IF_ERROR(integer("iterations_done", 0, int64_t{1} << 40, &done));
  TF_RETURN_IF_ERROR(integer("updates", 0, done, &updates));
  TF_RETURN_IF_ERROR(integer("good_steps", 0, done, &good_steps));
  if (!j.contains("loss_scale") || !j["loss_scale"].is_number() || !(static_cast<float>(j["loss_scale"].get<double>()) > 0) ||
      !std::isfinite(static_cast<float>(j["loss_scale"].get<double>()))) {
    return DataLoss(record + ": 'loss_scale' is " + (j.contains("loss_scale") ? j["loss_scale"].dump().substr(0, 40) : "missing") + ", not a finite number > 0");
  }
  // The batches line up only with the micro-steps they were trained with (before micro-steps were
  // recorded, every run had one).
  int64_t micro_steps = 1;
  if (j.contains("micro_steps")) TF_RETURN_IF_ERROR(integer("micro_steps", 1, int64_t{1} << 20, &micro_steps));
  if (micro_steps != micro_steps_) {
    return FailedPrecondition(who + " was trained with " + std::to_string(micro_steps) +
                              " micro-steps per iteration, this run has " + std::to_string(micro_steps_) + " (training.gradient_accumulation_steps): its batches would not line up");
  }
  base_iteration_ = done;
  updates_ = updates;
  scaler_.Restore(j["loss_scale"].get<float>(), good_steps);
  return Status::Ok();
}

// After `iteration` (of this run) completes: its updated states are at version iteration + 1 in
// their homes; they, the step and the loss scaler are saved atomically (real/checkpoint.h). With
// several ranks each writes its part as its shard of one checkpoint, committed by the CommEngine
// in its one order (every rank's shard listed by rank 0 in one manifest) while this thread goes on
// with the run.
Status Run::SaveTrainingCheckpoint(int64_t iteration) {
  const double t0 = MonotonicSeconds();
  const int64_t done = base_iteration_ + iteration + 1;
  std::vector<float> state[3];
  for (int k = 0; k < 3; ++k) TF_RETURN_IF_ERROR(ReadState(kMaster + k, iteration + 1, &state[k]).WithContext("checkpoint"));
  // Nothing replaces good state with bad: a diverged run stops here, and the last committed
  // checkpoint stays the one to resume from.
  for (int k = 0; k < 3; ++k) {
    const auto bad = std::find_if(state[k].begin(), state[k].end(), [](float x) { return !std::isfinite(x); });
    if (bad != state[k].end()) {
      return DataLoss("checkpoint '" + options_.checkpoint_dir + "' not written after iteration " + std::to_string(done - 1) +
                      ": " + KindName(kMaster + k) + " element " + std::to_string(bad - state[k].begin()) +
                      (space_.ranks() > 1 ? " of rank " + std::to_string(space_.rank()) + "'s partition" : std::string()) + " is " +
                      std::to_string(*bad) + " (training diverged); the previous checkpoint is kept");
    }
  }
  nlohmann::json j;
  j["iterations_done"] = done;
  j["updates"] = updates_;
  j["loss_scale"] = scaler_.scale();
  j["good_steps"] = scaler_.good_steps();
  j["micro_steps"] = micro_steps_;
  j["ranks"] = space_.ranks();
  const std::string meta = j.dump();
  const double gathered = MonotonicSeconds();
  std::vector<CheckpointTensor> tensors;
  for (int k = 0; k < 3; ++k) {
    tensors.push_back({KindName(kMaster + k), "fp32", space_.rank(), state[k].data(), static_cast<int64_t>(state[k].size() * 4)});
  }
  tensors.push_back({"meta", "u8", space_.rank(), meta.data(), static_cast<int64_t>(meta.size())});  // each rank its copy
  const CheckpointOptions o = TrainingCheckpoint();
  const std::string who = "checkpoint '" + options_.checkpoint_dir + "'";
  if (comm_ == nullptr) {  // one process: the whole save at once, an interrupted one's files removed first
    auto stats = SaveCheckpoint(*io_, tensors, o);
    if (!stats.ok()) return stats.status().WithContext(who);
    result_.checkpoints.push_back({done, gathered - t0, MonotonicSeconds() - gathered, stats->bytes});
    return Status::Ok();
  }
  auto shard = SaveCheckpointShard(*io_, tensors, o, checkpoint_generation_base_ + done);
  if (!shard.ok()) return shard.status().WithContext(who);
  result_.checkpoints.push_back({done, gathered - t0, MonotonicSeconds() - gathered, shard->stats.bytes});
  if (options_.exit_in_checkpoint > 0 && static_cast<int64_t>(result_.checkpoints.size()) == options_.exit_in_checkpoint) {
    std::_Exit(137);  // its shard written, not committed: as a kill -9 would leave it
  }
  if (engine_ == nullptr) return CommitTrainingCheckpoint(*shard);  // a plain loop
  ++commits_in_flight_;
  engine_->Post(CommEngine::kCheckpointCommit, iteration, kCommitJob, [this, mine = std::move(*shard)] { return CommitTrainingCheckpoint(mine); });
  return Status::Ok();
}

// Every rank's shard committed in one manifest by rank 0, once each rank has handed it its shard;
// every rank returns rank 0's outcome.
Status Run::CommitTrainingCheckpoint(const CheckpointShard& mine) {
  const CheckpointOptions o = TrainingCheckpoint();
  const std::string who = "checkpoint '" + options_.checkpoint_dir + "'";
  TF_ASSIGN_OR_RETURN(const std::vector<std::string> texts, GatherText(CheckpointShardToJson(mine)));
  Status committed;
  if (comm_->rank() == 0) {
    std::vector<CheckpointShard> shards;
    for (size_t q = 0; q < texts.size() && committed.ok(); ++q) {
      auto shard = CheckpointShardFromJson(texts[q], static_cast<int32_t>(o.dirs.size()));
      if (shard.ok()) shards.push_back(std::move(*shard));
      else committed = shard.status().WithContext("rank " + std::to_string(q));
    }
    if (committed.ok()) committed = CommitCheckpoint(*io_, o, shards);
  }
  return AgreeAcrossRanks(committed);  // rank 0's outcome, on every rank
}

}  // namespace tierflow::real::exec
