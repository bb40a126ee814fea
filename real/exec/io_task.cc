// read and write tasks (run.h): state between its disk home and a host buffer. A read packs its
// tensors in list order into the buffer it allocates (or uses) and records their versions from the
// home; a write finds each tensor in its buffer and leaves the home at that version. The requests
// are cut into block_bytes pieces, queue_depth of them in flight (IoWindow).
#include "run.h"

#include <algorithm>
#include <cstring>

namespace tierflow::real::exec {

Status Run::PrepareIo(const TaskSpec& t, Job& job, int64_t iteration) {
  const bool read = t.op == Op::kRead;
  const int32_t buffer = read ? (t.allocs.empty() ? (t.uses.empty() ? kNoIndex : t.uses[0]) : t.allocs[0])
                              : (t.uses.empty() ? kNoIndex : t.uses[0]);
  if (t.tensors.empty()) return Status::Ok();  // bytes with no state (none in our policies)
  TF_CHECK(buffer != kNoIndex);  // CheckTaskContracts: a task that moves tensors names a buffer
  BufferState& buf = Buf(buffer);
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
    const TensorSpec& ts = T(ti);
    const int kind = KindOf(ts.kind);
    const DiskFile& f = disk_of_device_[static_cast<size_t>(ts.device)];
    TF_CHECK(f.direct >= 0);  // CheckTaskContracts: homed on a storage device, and Setup opened each
    const int64_t n = Elements(ts);
    int64_t offset = packed, version = 0;
    if (read) {
      version = home_[static_cast<size_t>(ts.device)][kind].Get(ts.element_offset, ts.element_offset + n);
      if (version < 0) {
        return FailedPrecondition(Who(t, iteration) + " reads " + Range(ts) + " from '" + s_.devices()[static_cast<size_t>(ts.device)].name +
                                  "', which holds " + VersionText(version) + " of it: no task wrote it there");
      }
      if (packed + ts.size_bytes > buf.size) return InvalidArgument(Who(t, iteration) + ": its tensors do not fit buffer '" + s_.buffers()[static_cast<size_t>(buffer)].name + "'");
      packed += ts.size_bytes;
    } else {
      const Span span = FindSpan(buffer, kind, ts.element_offset, n);
      if (span.data == nullptr) {
        return FailedPrecondition(Who(t, iteration) + " writes " + Range(ts) + " from buffer '" + s_.buffers()[static_cast<size_t>(buffer)].name +
                                  "', which does not hold it");
      }
      if (span.version < 0) return FailedPrecondition(Who(t, iteration) + " writes " + Range(ts) + ", whose parts in its buffer are of different versions");
      offset = span.data - buf.data;
      version = span.version;
    }
    (f.direct_all ? result_.direct_io_bytes : result_.buffered_io_bytes) += ts.size_bytes;
    char* place = buf.data + offset;
    char* bounce = nullptr;
    if (f.direct_all && !IsAlignedPtr(place, f.alignment)) {
      // The file is direct-only: a request from a buffer place it cannot take goes through an
      // aligned block (copied in now for a write, out in finish for a read).
      bounce = static_cast<char*>(blocks_.Take(ts.size_bytes));
      if (bounce == nullptr) return ResourceExhausted(Who(t, iteration) + ": cannot allocate an aligned staging block");
      if (!read) std::memcpy(bounce, place, static_cast<size_t>(ts.size_bytes));
    }
    requests.push_back({read ? IoOp::kRead : IoOp::kWrite, f.fd(), ts.offset_bytes, ts.size_bytes, bounce != nullptr ? bounce : place, 0});
    moves.push_back({ti, offset, version, bounce});
  }
  job.finish = [this, moves, read, buffer] {
    for (const Move& m : moves) {
      const TensorSpec& ts = T(m.tensor);
      const int kind = KindOf(ts.kind);
      const int64_t n = Elements(ts);
      if (m.bounce != nullptr) {
        if (read) std::memcpy(Buf(buffer).data + m.offset, m.bounce, static_cast<size_t>(ts.size_bytes));
        blocks_.Give(m.bounce);
      }
      if (read) Buf(buffer).pieces.push_back({kind, ts.element_offset, n, m.offset, m.version});
      else home_[static_cast<size_t>(ts.device)][kind].Set(ts.element_offset, ts.element_offset + n, m.version);
    }
  };
  // The schedule's request shape: pieces of block_bytes, queue_depth of them in flight.
  std::vector<IoRequest> pieces = CutRequests(requests, IoBlockBytes(t));
  const auto window = static_cast<size_t>(IoQueueDepth(t));
  const size_t index = static_cast<size_t>(&job - jobs_.data());
  job.sink = std::make_unique<IoWindow>(io_, std::move(pieces), window,
                                        [this, index](Status st) { events_.Push({index, std::move(st)}); });
  job.sink->Start();
  return Status::Ok();
}

}  // namespace tierflow::real::exec
