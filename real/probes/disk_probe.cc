#include "tierflow/real/disk_probe.h"

#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <random>

#include "../store/aligned_buffer.h"
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
  char* buf = nullptr;
  IoOp op = IoOp::kRead;
  int64_t offset = 0;
};

}  // namespace

StatusOr<std::vector<DiskProbeResult>> RunDiskProbe(const DiskProbeOptions& o, std::vector<TraceRecord>* trace,
                                                    const std::function<void(const DiskProbeResult&)>& progress) {
  if (o.dirs.empty()) return InvalidArgument("probe disk: no --dir given");
  if (o.file_bytes < (int64_t{16} << 20)) return InvalidArgument("probe disk: the file must be at least 16 MiB");
  for (int64_t b : o.block_bytes) {
    if (b < kDirectAlignment || b % kDirectAlignment != 0) {
      return InvalidArgument("probe disk: block size " + std::to_string(b) + " is not a positive multiple of 4 KiB");
    }
  }
  for (auto& op : o.ops) {
    if (op != "read" && op != "write" && op != "mix") return InvalidArgument("probe disk: unknown op '" + op + "' (read, write, mix)");
  }
  std::vector<int32_t> counts = o.device_counts;
  if (counts.empty()) {
    counts.push_back(1);
    if (o.dirs.size() > 1) counts.push_back(static_cast<int32_t>(o.dirs.size()));
  }
  for (int32_t c : counts) {
    if (c < 1 || c > static_cast<int32_t>(o.dirs.size())) return InvalidArgument("probe disk: device count " + std::to_string(c) + " out of range");
  }
  const int64_t file_bytes = o.file_bytes / (16 << 20) * (16 << 20);
  std::vector<std::string> paths;
  for (auto& d : o.dirs) paths.push_back(d + "/tierflow-probe-" + std::to_string(::getpid()) + ".dat");

  std::vector<DiskProbeResult> results;
  // Everything below runs with the files present; they are removed on every exit path.
  auto body = [&]() -> Status {
    // Create and fill the files with the pattern (also preconditions them).
    {
      auto storage = NewStorage(o.backend, StorageOptions{});
      if (!storage.ok()) return storage.status();
      AlignedBuffer fill(16 << 20);
      for (size_t d = 0; d < paths.size(); ++d) {
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
    for (int32_t ndev : counts) {
      for (const std::string& opname : o.ops) {
        for (int64_t block : o.block_bytes) {
          for (int32_t qd : o.queue_depths) {
            if (block * qd > file_bytes) continue;  // documented: buffers would exceed the file
            StorageOptions so;
            so.queue_depth = qd;
            so.request_bytes = block;
            so.threads = qd;
            auto storage_or = NewStorage(o.backend, so);
            if (!storage_or.ok()) return storage_or.status();
            Storage& storage = **storage_or;
            std::vector<FileId> files;
            for (int32_t d = 0; d < ndev; ++d) {
              OpenOptions oo;
              oo.device = d;
              TF_ASSIGN_OR_RETURN(OpenFile f, storage.Open(paths[d], oo));
              files.push_back(f.id);
            }
            AlignedBuffer buffers(block * qd * ndev);
            if (!buffers.ok()) return ResourceExhausted("probe disk: buffers of " + std::to_string(block * qd * ndev) + " bytes");
            (void)storage.RegisterMemory(buffers.data(), buffers.size_bytes());
            std::vector<Slot> slots(static_cast<size_t>(qd) * ndev);
            std::mt19937_64 rng(42);
            const int64_t blocks_in_file = file_bytes / block;
            std::vector<int64_t> next_block(ndev, 0);
            CompletionQueue q;
            auto issue = [&](size_t i) -> Status {
              Slot& s = slots[i];
              s.op = opname == "read" ? IoOp::kRead : opname == "write" ? IoOp::kWrite
                     : (rng() % 10 < 7 ? IoOp::kRead : IoOp::kWrite);
              int64_t blk = o.random ? static_cast<int64_t>(rng() % blocks_in_file) : next_block[s.device]++ % blocks_in_file;
              s.offset = blk * block;
              if (s.op == IoOp::kWrite) Stamp(s.buf, s.offset, block);
              IoRequest r{s.op, files[s.device], s.offset, block, s.buf, i};
              return storage.Submit({&r, 1}, &q);
            };
            for (size_t i = 0; i < slots.size(); ++i) {
              slots[i].device = static_cast<int32_t>(i % ndev);
              slots[i].buf = buffers.data() + static_cast<int64_t>(i) * block;
            }
            DiskProbeResult res;
            res.op = opname;
            res.block_bytes = block;
            res.queue_depth = qd;
            res.devices = ndev;
            res.backend = storage.name();
            std::vector<double> bws, iops, lat;
            for (size_t i = 0; i < slots.size(); ++i) TF_RETURN_IF_ERROR(issue(i));
            for (int32_t rep = -1; rep < o.repetitions; ++rep) {  // rep -1 is the warm-up
              const bool measured = rep >= 0;
              const double start = MonotonicSeconds();
              const double stop = start + (measured ? o.duration_s : o.warmup_s);
              int64_t bytes = 0, ios = 0;
              std::vector<int64_t> dev_read(ndev, 0), dev_write(ndev, 0);
              double now = start;
              while (now < stop) {
                std::vector<IoCompletion> done;
                q.Wait(&done, 1);
                now = MonotonicSeconds();
                for (auto& c : done) {
                  Slot& s = slots[c.tag];
                  if (measured) {
                    if (!c.status.ok() || c.bytes != block) {
                      ++res.wrong;
                    } else if (s.op == IoOp::kRead) {
                      res.wrong += CountWrong(s.buf, s.offset, block) > 0 ? 1 : 0;
                    }
                    // Count requests that complete inside the window.
                    if (c.complete_s <= stop) {
                      bytes += c.bytes;
                      ++ios;
                      (s.op == IoOp::kRead ? dev_read : dev_write)[s.device] += c.bytes;
                      lat.push_back(c.complete_s - c.submit_s);
                    }
                  }
                  TF_RETURN_IF_ERROR(issue(c.tag));
                }
              }
              if (!measured) continue;
              double window = stop - start;
              bws.push_back(static_cast<double>(bytes) / window);
              iops.push_back(static_cast<double>(ios) / window);
              res.bytes += bytes;
              if (trace != nullptr) {
                for (int32_t d = 0; d < ndev; ++d) {
                  for (IoOp op : {IoOp::kRead, IoOp::kWrite}) {
                    int64_t b = (op == IoOp::kRead ? dev_read : dev_write)[d];
                    if (b == 0) continue;
                    TraceRecord r;
                    r.iteration = rep;
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
                    trace->push_back(r);
                  }
                }
              }
            }
            // Drain what is still in flight before the buffers go away.
            size_t outstanding = slots.size();
            std::vector<IoCompletion> rest;
            while (rest.size() < outstanding) q.Wait(&rest, 1);
            storage.UnregisterMemory(buffers.data());
            for (FileId f : files) (void)storage.Close(f);
            std::sort(bws.begin(), bws.end());
            std::sort(iops.begin(), iops.end());
            res.bytes_per_s = bws[bws.size() / 2];
            res.bytes_per_s_min = bws.front();
            res.bytes_per_s_max = bws.back();
            res.iops = iops[iops.size() / 2];
            res.p50_latency_s = Percentile(lat, 0.50);
            res.p99_latency_s = Percentile(lat, 0.99);
            results.push_back(res);
            if (progress) progress(res);
          }
        }
      }
    }
    return Status::Ok();
  };
  Status st = body();
  for (auto& p : paths) ::unlink(p.c_str());
  TF_RETURN_IF_ERROR(st);
  return results;
}

std::string FormatDiskProbeTable(const std::vector<DiskProbeResult>& results, bool header) {
  std::string out;
  char line[256];
  if (header) {
    std::snprintf(line, sizeof line, "#%11s %5s %5s %4s %9s %9s %9s %10s %10s %10s %7s\n", "size(B)", "qd", "op", "dev",
                  "GB/s", "min", "max", "IOPS", "p50(us)", "p99(us)", "#wrong");
    out += line;
  }
  for (auto& r : results) {
    std::snprintf(line, sizeof line, " %11" PRId64 " %5d %5s %4d %9.3f %9.3f %9.3f %10.0f %10.1f %10.1f %7" PRId64 "\n",
                  r.block_bytes, r.queue_depth, r.op.c_str(), r.devices, r.bytes_per_s / 1e9, r.bytes_per_s_min / 1e9,
                  r.bytes_per_s_max / 1e9, r.iops, r.p50_latency_s * 1e6, r.p99_latency_s * 1e6, r.wrong);
    out += line;
  }
  return out;
}

}  // namespace tierflow::real
