// read and write tasks (op_handler.h): state between its disk home and a host buffer. A read packs its
// tensors in list order into the buffer it allocates (or uses) and records their versions from the
// home; a write finds each tensor in its buffer and leaves the home at that version. The requests
// are cut into block_bytes pieces, queue_depth of them in flight (IoWindow).
#include <algorithm>
#include <cstring>

#include "../run_state.h"
#include "op_handler.h"

namespace tierflow::real::exec {

// A task that moves tensors names a buffer, and every tensor lives on a storage device.
Status CheckIo(const Schedule& s, const TaskSpec& t, const std::string& who) {
  if (t.tensors.empty()) return Status::Ok();
  if (t.allocs.empty() && t.uses.empty()) return InvalidArgument(who + ": moves tensors but names no buffer");
  for (int32_t i : t.tensors) {
    const TensorSpec& ts = s.tensors()[static_cast<size_t>(i)];
    const DeviceSpec& d = s.devices()[static_cast<size_t>(ts.device)];
    if (d.kind != DeviceKind::kNvme && d.kind != DeviceKind::kRemote) {
      return InvalidArgument(who + ": '" + ts.name + "' (" + std::string(StateKindName(ts.kind)) + ") lives on '" + d.name +
                             "', not a storage device; a " + std::string(OpName(t.op)) + " moves state between a disk and host memory");
    }
  }
  return Status::Ok();
}

Status PrepareIo(RunState& run, const TaskSpec& t, int32_t /*task*/, int64_t iteration, Job& job) {
  const bool read = t.op == Op::kRead;
  const int32_t buffer = read ? (t.allocs.empty() ? (t.uses.empty() ? kNoIndex : t.uses[0]) : t.allocs[0])
                              : (t.uses.empty() ? kNoIndex : t.uses[0]);
  if (t.tensors.empty()) return Status::Ok();  // bytes with no state (none in our policies)
  TF_CHECK(buffer != kNoIndex);  // CheckIo: a task that moves tensors names a buffer
  BufferState& buf = run.Buf(buffer);
  struct Move {
    int32_t tensor;
    int64_t offset;
    int64_t version;
    char* bounce;  // an aligned stand-in for a buffer place O_DIRECT cannot take, or null
  };
  std::vector<Move> moves;
  std::vector<IoRequest> requests;
  int64_t packed = 0;
  for (int32_t ti : t.tensors) {
    const TensorSpec& ts = run.T(ti);
    const int kind = KindOf(ts.kind);
    const DiskFile& f = run.Disk(ts.device);
    TF_CHECK(f.direct >= 0);  // CheckIo: homed on a storage device, and Run::Setup opened each
    const int64_t n = run.Elements(ts);
    int64_t offset = packed, version = 0;
    if (read) {
      version = run.Home(ts.device, kind).Get(ts.element_offset, ts.element_offset + n);
      if (version < 0) {
        return FailedPrecondition(run.Who(t, iteration) + " reads " + run.Range(ts) + " from '" + run.schedule().devices()[static_cast<size_t>(ts.device)].name +
                                  "', which holds " + VersionText(version) + " of it: no task wrote it there");
      }
      if (packed + ts.size_bytes > buf.size) return InvalidArgument(run.Who(t, iteration) + ": its tensors do not fit buffer '" + run.BufferName(buffer) + "'");
      packed += ts.size_bytes;
    } else {
      const Span span = run.FindSpan(buffer, kind, ts.element_offset, n);
      if (span.data == nullptr) {
        return FailedPrecondition(run.Who(t, iteration) + " writes " + run.Range(ts) + " from buffer '" + run.BufferName(buffer) +
                                  "', which does not hold it");
      }
      if (span.version < 0) return FailedPrecondition(run.Who(t, iteration) + " writes " + run.Range(ts) + ", whose parts in its buffer are of different versions");
      offset = span.data - buf.data;
      version = span.version;
    }
    run.CountIo(f.direct_all, ts.size_bytes);
    char* place = buf.data + offset;
    char* bounce = nullptr;
    if (f.direct_all && !IsAlignedPtr(place, f.alignment)) {
      // The file is direct-only: a request from a buffer place it cannot take goes through an
      // aligned block (copied in now for a write, out in finish for a read).
      bounce = static_cast<char*>(run.blocks().Take(ts.size_bytes));
      if (bounce == nullptr) return ResourceExhausted(run.Who(t, iteration) + ": cannot allocate an aligned staging block");
      if (!read) std::memcpy(bounce, place, static_cast<size_t>(ts.size_bytes));
    }
    requests.push_back({read ? IoOp::kRead : IoOp::kWrite, f.fd(), ts.offset_bytes, ts.size_bytes, bounce != nullptr ? bounce : place, 0});
    moves.push_back({ti, offset, version, bounce});
  }
  job.finish = [&run, moves, read, buffer] {
    for (const Move& m : moves) {
      const TensorSpec& ts = run.T(m.tensor);
      const int kind = KindOf(ts.kind);
      const int64_t n = run.Elements(ts);
      if (m.bounce != nullptr) {
        if (read) std::memcpy(run.Buf(buffer).data + m.offset, m.bounce, static_cast<size_t>(ts.size_bytes));
        run.blocks().Give(m.bounce);
      }
      if (read) run.Buf(buffer).pieces.push_back({kind, ts.element_offset, n, m.offset, m.version});
      else run.Home(ts.device, kind).Set(ts.element_offset, ts.element_offset + n, m.version);
    }
  };
  // The schedule's request shape: pieces of block_bytes, queue_depth of them in flight.
  std::vector<IoRequest> pieces = CutRequests(requests, IoBlockBytes(t));
  const auto window = static_cast<size_t>(IoQueueDepth(t));
  job.sink = std::make_unique<IoWindow>(&run.io(), std::move(pieces), window,
                                        [&run, index = job.index](Status st) { run.JobDone(index, std::move(st)); });
  job.sink->Start();
  return Status::Ok();
}

}  // namespace tierflow::real::exec
