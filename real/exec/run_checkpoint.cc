// A run's state at its start and its checkpoints (run.h): the initial state written to its homes,
// the training state saved atomically every K iterations, and loaded when resuming.
#include "run.h"

#include <algorithm>
#include <cmath>
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

// The committed checkpoint in options_.checkpoint_dir, when resuming and there is one: the state
// to start from, the step, the loss scaler and the iterations already done.
Status Run::LoadCheckpointIfAny() {
  if (!options_.resume) return Status::Ok();
  if (options_.checkpoint_dir.empty()) return InvalidArgument("resume needs a checkpoint directory");
  // Through the run's storage, as every byte the run moves: --storage memory and injected faults
  // reach its checkpoints too.
  TF_ASSIGN_OR_RETURN(const bool exists, io_->Exists(options_.checkpoint_dir + "/" + kCheckpointName + ".manifest.json"));
  if (!exists) return Status::Ok();
  CheckpointOptions o;
  o.dirs = {options_.checkpoint_dir};
  o.name = kCheckpointName;
  const size_t total = static_cast<size_t>(trainer_.layout().total);
  initial_[0].resize(total), initial_[1].resize(total), initial_[2].resize(total);
  std::string meta;
  Status sizes;
  auto sink = [&](const CheckpointEntry& e) -> void* {
    for (int k = 0; k < 3; ++k) {
      if (e.name != KindName(kMaster + k)) continue;
      if (e.size_bytes != static_cast<int64_t>(total * 4)) {
        sizes = InvalidArgument("checkpoint '" + options_.checkpoint_dir + "': " + e.name + " has " + std::to_string(e.size_bytes) +
                                " bytes, this model needs " + std::to_string(total * 4));
        return nullptr;
      }
      return initial_[k].data();
    }
    if (e.name == "meta") {
      meta.resize(static_cast<size_t>(e.size_bytes));
      return meta.data();
    }
    return nullptr;
  };
  auto stats = LoadCheckpoint(*io_, o, sink);
  if (!stats.ok()) return stats.status().WithContext("checkpoint '" + options_.checkpoint_dir + "'");
  TF_RETURN_IF_ERROR(sizes);
  const auto j = nlohmann::json::parse(meta, nullptr, false);
  const std::string who = "checkpoint '" + options_.checkpoint_dir + "': its meta record";
  if (j.is_discarded() || !j.is_object()) return DataLoss(who + " is unreadable");
  // Field by field: a value of the wrong type or out of range is damage, named, not a crash.
  auto integer = [&](const char* key, int64_t lo, int64_t hi, int64_t* out) -> Status {
    const auto value = j.contains(key) && j[key].is_number_integer() ? JsonInteger<int64_t>(j[key], key) : InvalidArgument(key);
    if (!value.ok() || *value < lo || *value > hi) {
      return DataLoss(who + ": '" + key + "' is " + (j.contains(key) ? j[key].dump().substr(0, 40) : "missing") + ", not an integer in [" +
                      std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    *out = *value;
    return Status::Ok();
  };
  int64_t done = 0, updates = 0, good_steps = 0;
  TF_RETURN_IF_ERROR(integer("iterations_done", 0, int64_t{1} << 40, &done));
  TF_RETURN_IF_ERROR(integer("updates", 0, done, &updates));
  TF_RETURN_IF_ERROR(integer("good_steps", 0, done, &good_steps));
  if (!j.contains("loss_scale") || !j["loss_scale"].is_number() || !(static_cast<float>(j["loss_scale"].get<double>()) > 0) ||
      !std::isfinite(static_cast<float>(j["loss_scale"].get<double>()))) {
    return DataLoss(who + ": 'loss_scale' is " + (j.contains("loss_scale") ? j["loss_scale"].dump().substr(0, 40) : "missing") + ", not a finite number > 0");
  }
  // The batches line up only with the micro-steps they were trained with (before micro-steps were
  // recorded, every run had one).
  int64_t micro_steps = 1;
  if (j.contains("micro_steps")) TF_RETURN_IF_ERROR(integer("micro_steps", 1, int64_t{1} << 20, &micro_steps));
  if (micro_steps != micro_steps_) {
    return FailedPrecondition("checkpoint '" + options_.checkpoint_dir + "' was trained with " + std::to_string(micro_steps) +
                              " micro-steps per iteration, this run has " + std::to_string(micro_steps_) + " (training.gradient_accumulation_steps): its batches would not line up");
  }
  base_iteration_ = done;
  updates_ = updates;
  scaler_.Restore(j["loss_scale"].get<float>(), good_steps);
  return Status::Ok();
}

// After `iteration` (of this run) completes: its updated states are at version iteration + 1 in
// their homes; they, the step and the loss scaler are saved atomically.
Status Run::SaveTrainingCheckpoint(int64_t iteration) {
  const double t0 = MonotonicSeconds();
  std::vector<float> state[3];
  for (int k = 0; k < 3; ++k) TF_RETURN_IF_ERROR(ReadState(kMaster + k, iteration + 1, &state[k]).WithContext("checkpoint"));
  // Nothing replaces good state with bad: a diverged run stops here, and the last committed
  // checkpoint stays the one to resume from.
  for (int k = 0; k < 3; ++k) {
    const auto bad = std::find_if(state[k].begin(), state[k].end(), [](float x) { return !std::isfinite(x); });
    if (bad != state[k].end()) {
      return DataLoss("checkpoint '" + options_.checkpoint_dir + "' not written after iteration " + std::to_string(base_iteration_ + iteration) +
                      ": " + KindName(kMaster + k) + " element " + std::to_string(bad - state[k].begin()) + " is " + std::to_string(*bad) +
                      " (training diverged); the previous checkpoint is kept");
    }
  }
  nlohmann::json j;
  j["iterations_done"] = base_iteration_ + iteration + 1;
  j["updates"] = updates_;
  j["loss_scale"] = scaler_.scale();
  j["good_steps"] = scaler_.good_steps();
  j["micro_steps"] = micro_steps_;
  const std::string meta = j.dump();
  const double gathered = MonotonicSeconds();
  std::vector<CheckpointTensor> tensors;
  for (int k = 0; k < 3; ++k) tensors.push_back({KindName(kMaster + k), "fp32", 0, state[k].data(), static_cast<int64_t>(state[k].size() * 4)});
  tensors.push_back({"meta", "u8", 0, meta.data(), static_cast<int64_t>(meta.size())});
  CheckpointOptions o;
  o.dirs = {options_.checkpoint_dir};
  o.name = kCheckpointName;
  auto stats = SaveCheckpoint(*io_, tensors, o);
  if (!stats.ok()) return stats.status().WithContext("checkpoint '" + options_.checkpoint_dir + "'");
  result_.checkpoints.push_back({base_iteration_ + iteration + 1, gathered - t0, MonotonicSeconds() - gathered, stats->bytes});
  return Status::Ok();
}

}  // namespace tierflow::real::exec
