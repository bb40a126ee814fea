#include "tierflow/real/disk_probe.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <exception>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

#include "../storage/aligned_buffer.h"
#include "tierflow/real/storage.h"

namespace tierflow::real {

using internal::AlignedBuffer;

namespace {

constexpr uint64_t kMagic = 0x7469657266'6c6f77ull;  // "tierflow"

void Stamp(char* buf, int64_t offset, int64_t len) {
  for (int64_t b = 0; b < len; b += kDirectAlignment) {
    uint64_t v = static_cast<uint64_t>((offset + b) / kDirectAlignment) ^ kMagic;
    std::memcpy(buf + b, &v, 8);
  }
}

int64_t CountWrong(const char* buf, int64_t offset, int64_t len) {
  int64_t wrong = 0;
  for (int64_t b = 0; b < len; b += kDirectAlignment) {
    uint64_t v;
    std::memcpy(&v, buf + b, 8);
    if (v != (static_cast<uint64_t>((offset + b) / kDirectAlignment) ^ kMagic)) ++wrong;
  }
  return wrong;
}

double Percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(k), v.end());
  return v[k];
}

struct Slot {
  int32_t device = 0;
  char* buf = nullptr;    // the place of the request in flight
  char* first = nullptr;  // the slot's places: first + k * stride, k < places (taken in turn)
  int64_t stride = 0, places = 1, turn = 0;
  IoOp op = IoOp::kRead;
  int64_t offset = 0;
  int32_t stream = -1;  // op "rw": the slot's stream (its op fixed), whose stretch of the file it walks
};

// Keeps `slots.size()` requests in flight without a thread hand-off: each completion is
// accounted and its slot's next request submitted from the sink, on the back-end's thread — the
// fill/submit/reap cycle of fio and liburing's examples.
class ClosedLoop final : public CompletionSink {
 public:
  struct Window {
    int64_t bytes = 0, ios = 0, wrong = 0;
    std::vector<int64_t> dev_read, dev_write;
    std::vector<double> latencies;
  };

  // `streams` > 0 (op "rw"): every slot has its stream and op set; stream k walks blocks
  // [k, k + 1) * blocks_in_file / streams of each device's file.
  ClosedLoop(Storage& storage, std::vector<Slot>& slots, const std::vector<FileId>& files, const std::string& op,
             int64_t block, int64_t blocks_in_file, bool random, int32_t devices, int32_t streams = 0)
      : storage_(storage), slots_(slots), files_(files), op_(op), block_(block), blocks_(blocks_in_file),
        random_(random), next_block_(static_cast<size_t>(devices) * std::max(streams, 1), 0), devices_(devices),
        streams_(streams), rng_(42) {}

  Status Start() {
    std::vector<IoRequest> batch;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < slots_.size(); ++i) batch.push_back(Prepare(i));
      inflight_ = static_cast<int64_t>(slots_.size());
    }
    Status st = storage_.Submit(batch, this);
    if (!st.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      inflight_ = 0;
    }
    return st;
  }
  void OpenWindow(double start_s, double stop_s) {
    std::lock_guard<std::mutex> lock(mu_);
    w_ = Window{};
    w_.dev_read.assign(devices_, 0);
    w_.dev_write.assign(devices_, 0);
    start_s_ = start_s;
    stop_s_ = stop_s;
    open_ = true;
  }
  Window CloseWindow() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
    return std::move(w_);
  }
  Status Stop() {
    std::unique_lock<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.wait(lock, [&] { return inflight_ == 0; });
    return error_;
  }

  void Push(IoCompletion c) override {
    IoRequest next;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Slot& s = slots_[c.tag];
      if (open_ && c.complete_s >= start_s_ && c.complete_s <= stop_s_) {
        if (!c.status.ok() || c.bytes != block_) {
          ++w_.wrong;
        } else {
          if (s.op == IoOp::kRead && CountWrong(s.buf, s.offset, block_) > 0) ++w_.wrong;
          w_.bytes += c.bytes;
          ++w_.ios;
          (s.op == IoOp::kRead ? w_.dev_read : w_.dev_write)[s.device] += c.bytes;
          w_.latencies.push_back(c.complete_s - c.submit_s);
        }
      }
      if (!c.status.ok() && error_.ok()) error_ = c.status;
      if (stopping_ || !error_.ok()) {
        if (--inflight_ == 0) cv_.notify_all();
        return;
      }
      next = Prepare(c.tag);
    }
    Status st = storage_.Submit({&next, 1}, this);
    if (!st.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (error_.ok()) error_ = st;
      if (--inflight_ == 0) cv_.notify_all();
    }
  }

 private:
  IoRequest Prepare(size_t i) {
    Slot& s = slots_[i];
    int64_t blk;
    if (streams_ > 0) {
      const int64_t per = std::max<int64_t>(1, blocks_ / streams_), first = s.stream * per;
      int64_t& next = next_block_[static_cast<size_t>(s.stream) * devices_ + s.device];
      blk = first + (random_ ? static_cast<int64_t>(rng_() % per) : next++ % per);
    } else {
      s.op = op_ == "read" ? IoOp::kRead : op_ == "write" ? IoOp::kWrite : (rng_() % 10 < 7 ? IoOp::kRead : IoOp::kWrite);
      blk = random_ ? static_cast<int64_t>(rng_() % blocks_) : next_block_[s.device]++ % blocks_;
    }
    s.offset = blk * block_;
    s.buf = s.first + (s.turn++ % s.places) * s.stride;
    if (s.op == IoOp::kWrite) Stamp(s.buf, s.offset, block_);
    return IoRequest{s.op, files_[s.device], s.offset, block_, s.buf, i};
  }

  Storage& storage_;
  std::vector<Slot>& slots_;
  const std::vector<FileId>& files_;
  std::string op_;
  int64_t block_, blocks_;
  bool random_;
  std::vector<int64_t> next_block_;
  int32_t devices_;
  int32_t streams_;
  std::mt19937_64 rng_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t inflight_ = 0;
  bool stopping_ = false;
  bool open_ = false;
  double start_s_ = 0, stop_s_ = 0;
  Window w_;
  Status error_;
};

// How many of the directories each window uses: the options', else one and (with several) all.
std::vector<int32_t> DeviceCounts(const DiskProbeOptions& o) {
  std::vector<int32_t> counts = o.device_counts;
  if (counts.empty()) {
    counts.push_back(1);
    if (o.dirs.size() > 1) counts.push_back(static_cast<int32_t>(o.dirs.size()));
  }
  return counts;
}

}  // namespace

// Beyond these a point measures the kernel's limits, not the device (a queue depth of 100000
// failed with "Resource temporarily unavailable" and, by an exception, left its file behind).
constexpr int64_t kMaxProbeBlock = int64_t{64} << 20;
constexpr int32_t kMaxProbeQueueDepth = 1024;

Status CheckDiskProbeOptions(const DiskProbeOptions& o) {
  if (o.dirs.empty()) return InvalidArgument("probe disk: no --dir given");
  if (o.backend == "memory") return InvalidArgument("probe disk: measures a device; use uring, posix or auto");
  if (o.file_bytes < (int64_t{16} << 20)) return InvalidArgument("probe disk: the file must be at least 16 MiB");
  for (int64_t b : o.block_bytes) {
    if (b < kDirectAlignment || b % kDirectAlignment != 0) {
      return InvalidArgument("probe disk: block size " + std::to_string(b) + " is not a positive multiple of 4 KiB");
    }
    if (b > kMaxProbeBlock || b > o.file_bytes) {
      return InvalidArgument("probe disk: block size " + std::to_string(b) + " is larger than " +
                             (b > kMaxProbeBlock ? "the largest request probed (64 MiB)" : "the probe file (--file-size)"));
    }
  }
  for (auto& op : o.ops) {
    if (op != "read" && op != "write" && op != "mix" && op != "rw") {
      return InvalidArgument("probe disk: unknown op '" + op + "' (read, write, mix, rw)");
    }
    if (op != "rw") continue;
    if (o.streams.empty()) return InvalidArgument("probe disk: op rw needs at least one readers:writers pair (--streams)");
    for (const auto& [readers, writers] : o.streams) {
      const std::string pair = std::to_string(readers) + ":" + std::to_string(writers);
      if (readers < 0 || writers < 0 || readers + writers < 1 || readers + writers > kMaxProbeStreams) {
        return InvalidArgument("probe disk: streams " + pair + ": readers and writers must be >= 0, together 1.." +
                               std::to_string(kMaxProbeStreams));
      }
    }
  }
  for (int32_t c : DeviceCounts(o)) {
    if (c < 1 || c > static_cast<int32_t>(o.dirs.size())) return InvalidArgument("probe disk: device count " + std::to_string(c) + " out of range");
  }
  for (int32_t qd : o.queue_depths) {
    if (qd < 1 || qd > kMaxProbeQueueDepth) {
      return InvalidArgument("probe disk: queue depth " + std::to_string(qd) + " must be between 1 and " + std::to_string(kMaxProbeQueueDepth));
    }
  }
  // A point is the median of its repetitions: none is nothing to take the median of.
  if (o.repetitions < 1) return InvalidArgument("probe disk: --reps " + std::to_string(o.repetitions) + " must be at least 1");
  if (o.passes < 1) return InvalidArgument("probe disk: --passes " + std::to_string(o.passes) + " must be at least 1");
  if (!(o.duration_s > 0) || !(o.warmup_s >= 0)) {
    return InvalidArgument("probe disk: the measured window must be > 0 s and the warm-up >= 0 s");
  }
  return Status::Ok();
}

namespace {

// What one point of the sweep has measured so far, over its passes: its windows' rates and
// latencies, and the result's fixed fields, bytes and wrong blocks.
struct PointWindows {
  DiskProbeResult res;
  std::vector<double> bws, iops, lat, read_bws, write_bws;
};

// The bytes of buffers a probe's requests cycle through: 256 MiB, or twice the last-level cache
// where that is larger (mapped once per probe, RunDiskProbe). From a few reused blocks a copy
// stays in the cache; on a virtual disk, whose "device" copies from the host's memory, 1 MiB x 8
// reads moved 6.2 GB/s into 8 MiB of buffers and 4.9 GB/s into 64 or 256 MiB (docs/calibration.md
// "On a shared machine").
int64_t BufferSpan() {
  int64_t span = int64_t{256} << 20;
#ifdef _SC_LEVEL3_CACHE_SIZE
  const long llc = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (llc > 0) span = std::max<int64_t>(span, 2 * static_cast<int64_t>(llc));
#endif
  return span;
}

// One pass over one point of the sweep: `inflight` requests of `block` bytes per device on the
// first `ndev` probe files (slots of `streams` streams, readers first, when op is "rw"), a
// warm-up and o.repetitions windows, appended to `acc`; their trace records (iteration
// `first_iteration` + repetition) appended to `trace` when non-null. `buffers` holds at least
// one block per request in flight.
Status MeasurePoint(const DiskProbeOptions& o, const std::vector<std::string>& paths, int64_t file_bytes,
                    const AlignedBuffer& buffers, const std::string& opname, int32_t readers, int32_t writers,
                    int32_t ndev, int64_t block, int32_t qd, int32_t first_iteration, std::vector<TraceRecord>* trace,
                    PointWindows* acc) {
  const int32_t streams = readers + writers;  // 0 unless "rw"
  const int64_t inflight = static_cast<int64_t>(qd) * std::max(streams, 1);
  StorageOptions so;
  so.queue_depth = static_cast<int32_t>(inflight);
  so.request_bytes = block;
  so.threads = static_cast<int32_t>(inflight);
  auto storage_or = NewStorage(o.backend, so);
  if (!storage_or.ok()) return storage_or.status();
  std::unique_ptr<FaultInjectingStorage> faulty;  // over the back-end, when faults are asked for
  if (!o.faults.empty()) {
    faulty = NewFaultInjectingStorage(storage_or->get());
    for (const FaultRule& rule : o.faults) faulty->AddRule(rule);
  }
  Storage& storage = faulty ? *faulty : **storage_or;
  std::vector<FileId> files;
  for (int32_t d = 0; d < ndev; ++d) {
    OpenOptions oo;
    oo.device = d;
    TF_ASSIGN_OR_RETURN(OpenFile f, storage.Open(paths[d], oo));
    files.push_back(f.id);
  }
  // The requests land across all of `buffers` (BufferSpan()), slot i at places i, i + slots,
  // i + 2 slots, ... in turn (never two in flight at one place): a run reads into and writes from
  // buffers far larger than a last-level cache, and a few blocks reused would stay in it.
  // Split streams (DiskProbeOptions::split_streams): each stream's slots on one device only.
  const bool split = streams > 0 && o.split_streams;
  const int64_t nslots = split ? inflight : inflight * ndev;
  const int64_t places = buffers.size_bytes() / (block * nslots);
  TF_CHECK(places >= 1);  // RunDiskProbe maps room for every point's requests in flight
  (void)storage.RegisterMemory(buffers.data(), block * nslots * places);
  std::vector<Slot> slots(static_cast<size_t>(nslots));
  for (size_t i = 0; i < slots.size(); ++i) {
    slots[i].device = static_cast<int32_t>(split ? i / static_cast<size_t>(qd) % static_cast<size_t>(ndev) : i % static_cast<size_t>(ndev));
    slots[i].first = buffers.data() + static_cast<int64_t>(i) * block;
    slots[i].buf = slots[i].first;
    slots[i].stride = block * nslots;
    slots[i].places = places;
    if (streams > 0) {  // qd * ndev slots per stream (split: qd), readers first
      slots[i].stream = static_cast<int32_t>(i / (static_cast<size_t>(qd) * (split ? 1 : ndev)));
      slots[i].op = slots[i].stream < readers ? IoOp::kRead : IoOp::kWrite;
    }
  }
  ClosedLoop loop(storage, slots, files, opname, block, file_bytes / block, o.random, ndev, streams);
  DiskProbeResult& res = acc->res;
  res.op = opname;
  res.readers = readers;
  res.writers = writers;
  res.block_bytes = block;
  res.queue_depth = qd;
  res.devices = ndev;
  res.backend = storage.name();
  std::vector<double>& bws = acc->bws;
  std::vector<double>& iops = acc->iops;
  std::vector<double>& lat = acc->lat;
  std::vector<double>& read_bws = acc->read_bws;
  std::vector<double>& write_bws = acc->write_bws;
  TF_RETURN_IF_ERROR(loop.Start());
  for (int32_t rep = -1; rep < o.repetitions; ++rep) {  // rep -1 is the warm-up
    const double start = MonotonicSeconds();
    const double stop = start + (rep >= 0 ? o.duration_s : o.warmup_s);
    loop.OpenWindow(start, stop);
    std::this_thread::sleep_for(std::chrono::duration<double>(stop - MonotonicSeconds()));
    // Completions stamped inside the window may still be on their way to the sink.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ClosedLoop::Window w = loop.CloseWindow();
    if (rep < 0) continue;
    double window = stop - start;
    bws.push_back(static_cast<double>(w.bytes) / window);
    double read_bytes = 0, write_bytes = 0;
    for (int32_t d = 0; d < ndev; ++d) {
      read_bytes += static_cast<double>(w.dev_read[static_cast<size_t>(d)]);
      write_bytes += static_cast<double>(w.dev_write[static_cast<size_t>(d)]);
    }
    read_bws.push_back(read_bytes / window);
    write_bws.push_back(write_bytes / window);
    iops.push_back(static_cast<double>(w.ios) / window);
    res.bytes += w.bytes;
    res.wrong += w.wrong;
    lat.insert(lat.end(), w.latencies.begin(), w.latencies.end());
    if (trace != nullptr) {
      for (int32_t d = 0; d < ndev; ++d) {
        for (IoOp op : {IoOp::kRead, IoOp::kWrite}) {
          int64_t b = (op == IoOp::kRead ? w.dev_read : w.dev_write)[d];
          // A window of several devices names each, even one that got nothing (a
          // device shared unfairly): the aggregate is what tells one device from two.
          const bool window_op = (opname == "read" && op == IoOp::kRead) || (opname == "write" && op == IoOp::kWrite);
          if (b == 0 && !(ndev > 1 && window_op)) continue;
          TraceRecord r;
          r.iteration = first_iteration + rep;
          r.task = "probe.disk." + opname;
          r.op = op == IoOp::kRead ? Op::kRead : Op::kWrite;
          r.resource = "nvme" + std::to_string(d) + "." + IoOpName(op);
          r.phase = Phase::kOther;
          r.bytes = b;
          r.start_s = start;
          r.end_s = stop;
          r.source = "probe";
          r.block_bytes = block;
          r.queue_depth = qd;
          r.threads = ndev;
          if (streams > 0) r.tasks = op == IoOp::kRead ? readers : writers;  // concurrent streams of the op
          trace->push_back(r);
        }
      }
    }
  }
  Status stopped = loop.Stop();  // waits for everything in flight
  storage.UnregisterMemory(buffers.data());
  // A point that wrote hands its bytes to the device before the next point starts, outside every
  // window: on a virtual disk the host takes O_DIRECT writes into its own cache and throttles
  // writers once that holds too much, so without the sync a point's rate would depend on how
  // much the points before it wrote (a 16 s sweep fell from 6 to 2.1 GB/s for seconds), where a
  // run writes in bursts, a sub-group at a time with reads and compute between, which that cache
  // mostly absorbs (docs/calibration.md "On a shared machine").
  if (opname != "read" && (opname != "rw" || writers > 0)) {
    const double sync_start = MonotonicSeconds();
    for (FileId f : files) {
      if (stopped.ok()) stopped = storage.Sync(f);
    }
    res.sync_s += MonotonicSeconds() - sync_start;
  }
  for (FileId f : files) (void)storage.Close(f);
  return stopped;
}

// A point's result over every window of its passes: medians of the rates, percentiles of the
// latencies.
DiskProbeResult Summarize(PointWindows acc) {
  DiskProbeResult res = std::move(acc.res);
  std::vector<double>& bws = acc.bws;
  std::vector<double>& iops = acc.iops;
  std::vector<double>& read_bws = acc.read_bws;
  std::vector<double>& write_bws = acc.write_bws;
  std::sort(bws.begin(), bws.end());
  std::sort(iops.begin(), iops.end());
  res.bytes_per_s = bws[bws.size() / 2];
  res.bytes_per_s_min = bws.front();
  res.bytes_per_s_max = bws.back();
  res.iops = iops[iops.size() / 2];
  if (res.readers + res.writers > 0) {
    std::sort(read_bws.begin(), read_bws.end());
    std::sort(write_bws.begin(), write_bws.end());
    res.read_bytes_per_s = read_bws[read_bws.size() / 2];
    res.write_bytes_per_s = write_bws[write_bws.size() / 2];
  }
  res.p50_latency_s = Percentile(acc.lat, 0.50);
  res.p99_latency_s = Percentile(acc.lat, 0.99);
  return res;
}

// The probe file's size in each directory: the option rounded down to 16 MiB.
int64_t FileBytes(const DiskProbeOptions& o) { return o.file_bytes / (16 << 20) * (16 << 20); }

// One point of the sweep: what a pass measures once.
struct Point {
  int32_t ndev;
  std::string op;
  int32_t readers, writers;
  int64_t block;
  int32_t qd;
};

// The sweep's points in order: device counts, ops (rw: each stream pair), blocks, depths; a
// point whose buffers would exceed the file is left out.
std::vector<Point> SweepPoints(const DiskProbeOptions& o) {
  const int64_t file_bytes = FileBytes(o);
  std::vector<Point> points;
  for (int32_t ndev : DeviceCounts(o)) {
    for (const std::string& opname : o.ops) {
      const std::vector<std::pair<int32_t, int32_t>> pairs =
          opname == "rw" ? o.streams : std::vector<std::pair<int32_t, int32_t>>{{0, 0}};
      for (const auto& [readers, writers] : pairs) {
        for (int64_t block : o.block_bytes) {
          for (int32_t qd : o.queue_depths) {
            const int64_t inflight = static_cast<int64_t>(qd) * std::max(readers + writers, 1);
            if (block * inflight > file_bytes) continue;  // documented: buffers would exceed the file
            points.push_back({ndev, opname, readers, writers, block, qd});
          }
        }
      }
    }
  }
  return points;
}

}  // namespace

int64_t DiskProbePoints(const DiskProbeOptions& o) { return static_cast<int64_t>(SweepPoints(o).size()); }

StatusOr<std::vector<DiskProbeResult>> RunDiskProbe(const DiskProbeOptions& o, std::vector<TraceRecord>* trace,
                                                    const DiskProbeProgress& progress) {
  TF_RETURN_IF_ERROR(CheckDiskProbeOptions(o));
  const int64_t file_bytes = FileBytes(o);
  std::vector<std::string> paths;
  for (auto& d : o.dirs) paths.push_back(ProbeFilePath(d));

  std::vector<DiskProbeResult> results;
  // Everything below runs with the files present; they are removed on every exit path.
  auto body = [&]() -> Status {
    // Create and fill the files with the pattern (also preconditions them).
    {
      auto storage = NewStorage(o.backend, StorageOptions{});
      if (!storage.ok()) return storage.status();
      AlignedBuffer fill(16 << 20);
      for (size_t d = 0; d < paths.size(); ++d) {
        struct stat st_buf;
        if (o.keep_files && ::stat(paths[d].c_str(), &st_buf) == 0 && st_buf.st_size == file_bytes) continue;
        OpenOptions oo;
        oo.device = static_cast<int32_t>(d);
        oo.create = oo.truncate = true;
        TF_ASSIGN_OR_RETURN(OpenFile f, (*storage)->Open(paths[d], oo));
        Status st = (*storage)->Allocate(f.id, file_bytes);
        for (int64_t off = 0; st.ok() && off < file_bytes; off += fill.size_bytes()) {
          Stamp(fill.data(), off, fill.size_bytes());
          st = WriteAt(**storage, f.id, off, fill.data(), fill.size_bytes());
        }
        if (st.ok()) st = (*storage)->Sync(f.id);
        (void)(*storage)->Close(f.id);
        TF_RETURN_IF_ERROR(st);
      }
    }
    const std::vector<Point> points = SweepPoints(o);
    // One mapping of buffers for every point (faulted in once, not per point).
    int64_t span = BufferSpan();
    for (const Point& p : points) span = std::max(span, p.block * p.qd * std::max(p.readers + p.writers, 1) * p.ndev);
    AlignedBuffer buffers(span);
    if (!buffers.ok()) return ResourceExhausted("probe disk: buffers of " + std::to_string(span) + " bytes");
    // Pass after pass over the points, every other one backwards: a point's windows come from
    // moments a pass apart, and no point is always measured right after the same neighbour.
    std::vector<PointWindows> acc(points.size());
    for (int32_t pass = 0; pass < o.passes; ++pass) {
      for (size_t k = 0; k < points.size(); ++k) {
        const size_t i = pass % 2 == 0 ? k : points.size() - 1 - k;
        const Point& p = points[i];
        TF_RETURN_IF_ERROR(MeasurePoint(o, paths, file_bytes, buffers, p.op, p.readers, p.writers, p.ndev, p.block,
                                        p.qd, pass * o.repetitions, trace, &acc[i]));
        if (pass + 1 < o.passes) {
          if (progress) progress(DiskProbeResult{}, false);
          continue;
        }
        results.push_back(Summarize(std::move(acc[i])));
        if (progress) progress(results.back(), true);
      }
    }
    // In sweep order, whichever way the last pass went.
    if (o.passes % 2 == 0) std::reverse(results.begin(), results.end());
    return Status::Ok();
  };
  Status st;
  try {
    st = body();
  } catch (const std::exception& e) {  // the files go whatever stopped the probe
    st = Internal(std::string("probe disk: unexpected ") + e.what());
  }
  if (!o.keep_files || !st.ok()) {
    for (auto& p : paths) ::unlink(p.c_str());
  }
  TF_RETURN_IF_ERROR(st);
  return results;
}

std::string ProbeFilePath(const std::string& dir) {
  return dir + "/tierflow-probe-" + std::to_string(::getpid()) + ".dat";
}

std::string ActiveIoScheduler(const std::string& text) {
  const size_t open = text.find('[');
  if (open != std::string::npos) {
    const size_t close = text.find(']', open);
    return close == std::string::npos ? "" : text.substr(open + 1, close - open - 1);
  }
  const size_t begin = text.find_first_not_of(" \t\n");
  if (begin == std::string::npos) return "";
  const size_t end = std::min(text.find_first_of(" \t\n", begin), text.size());
  if (text.find_first_not_of(" \t\n", end) != std::string::npos) return "";  // several names, none chosen
  return text.substr(begin, end - begin);
}

std::string IoSchedulerOf(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return "";
  const std::string dev = "/sys/dev/block/" + std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  // A whole disk has queue/ itself; a partition's is its parent's.
  for (const char* queue : {"/queue/scheduler", "/../queue/scheduler"}) {
    std::FILE* f = std::fopen((dev + queue).c_str(), "r");
    if (f == nullptr) continue;
    char line[256] = {};
    const bool got = std::fgets(line, sizeof line, f) != nullptr;
    std::fclose(f);
    if (got) return ActiveIoScheduler(line);
  }
  return "";
}

std::string IoSchedulerNote(const std::string& device, const std::string& dir) {
  const std::string scheduler = IoSchedulerOf(dir);
  if (scheduler.empty() || scheduler == "none") return "";
  return "note: " + device + " ('" + dir + "') is behind the block I/O scheduler '" + scheduler + "'" +
         (scheduler == "mq-deadline" ? ", which serves a deep sequential stream ahead of a shallow one on the same device"
                                     : "") +
         "; sim shares a device fairly between streams (docs/calibration.md \"On a shared machine\")";
}

std::string FormatDiskProbeTable(const std::vector<DiskProbeResult>& results, bool header) {
  std::string out;
  char line[256];
  if (header) {
    std::snprintf(line, sizeof line, "#%11s %5s %7s %4s %9s %9s %9s %10s %10s %10s %7s\n", "size(B)", "qd", "op", "dev",
                  "GB/s", "min", "max", "IOPS", "p50(us)", "p99(us)", "#wrong");
    out += line;
  }
  for (auto& r : results) {
    // An "rw" point is named by its streams, e.g. 2r2w (queue depth per stream).
    const std::string op = r.op == "rw" ? std::to_string(r.readers) + "r" + std::to_string(r.writers) + "w" : r.op;
    std::snprintf(line, sizeof line, " %11" PRId64 " %5d %7s %4d %9.3f %9.3f %9.3f %10.0f %10.1f %10.1f %7" PRId64 "\n",
                  r.block_bytes, r.queue_depth, op.c_str(), r.devices, r.bytes_per_s / 1e9, r.bytes_per_s_min / 1e9,
                  r.bytes_per_s_max / 1e9, r.iops, r.p50_latency_s * 1e6, r.p99_latency_s * 1e6, r.wrong);
    out += line;
  }
  return out;
}

}  // namespace tierflow::real
