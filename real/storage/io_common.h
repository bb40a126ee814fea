// Private to real/storage: bookkeeping shared by the asynchronous back-ends — a submitted request
// (Parent) cut into pieces of at most request_bytes, each completing independently; the parent
// delivers its one completion when its last piece is done.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "tierflow/real/storage.h"

namespace tierflow::real::internal {

struct Parent {
  IoRequest request;
  CompletionSink* queue = nullptr;
  std::string path;  // for messages
  int32_t device = 0;
  double submit_s = 0;
  std::atomic<int32_t> pieces_left{0};
  std::atomic<int64_t> bytes{0};
  std::mutex mu;
  Status first_error;
};

struct Piece {
  Parent* parent = nullptr;
  int fd = -1;
  int32_t fixed_file = -1;   // registered file index, or -1
  int64_t offset_bytes = 0;  // of this piece in the file
  int64_t length_bytes = 0;
  char* buffer = nullptr;
  int64_t done_bytes = 0;    // transferred so far (short I/O resumes from here)
  int32_t retries = 0;
};

// Splits a request into pieces (appended to `out`); sets parent->pieces_left.
inline void SplitRequest(Parent* parent, int fd, int64_t request_bytes, std::vector<Piece*>* out) {
  const IoRequest& r = parent->request;
  int64_t n = r.length_bytes <= 0 ? 1 : (r.length_bytes + request_bytes - 1) / request_bytes;
  parent->pieces_left.store(static_cast<int32_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    auto* p = new Piece;
    p->parent = parent;
    p->fd = fd;
    p->offset_bytes = r.offset_bytes + i * request_bytes;
    p->length_bytes = std::min(request_bytes, r.length_bytes - i * request_bytes);
    if (p->length_bytes < 0) p->length_bytes = 0;
    p->buffer = static_cast<char*>(r.buffer) + i * request_bytes;
    out->push_back(p);
  }
}

// One Submit's pieces for one device, reads apart from writes: the back-ends queue a batch
// under one lock, so that a read in it goes ahead of every write in it.
struct PieceBatch {
  std::vector<Piece*> reads, writes;
  void Add(Parent* parent, int fd, int64_t request_bytes) {
    SplitRequest(parent, fd, request_bytes, parent->request.op == IoOp::kRead ? &reads : &writes);
  }
};

inline std::string DescribePiece(const Piece& p) {
  return std::string(IoOpName(p.parent->request.op)) + " '" + p.parent->path + "' (device " +
         std::to_string(p.parent->device) + ") at offset " + std::to_string(p.offset_bytes) +
         ", " + std::to_string(p.length_bytes) + " bytes";
}

// Records a piece's outcome; when it was the last, delivers the parent's completion and frees it.
// Frees the piece.
inline void FinishPiece(Piece* piece, const Status& status) {
  Parent* parent = piece->parent;
  parent->bytes.fetch_add(piece->done_bytes);
  if (!status.ok()) {
    std::lock_guard<std::mutex> lock(parent->mu);
    if (parent->first_error.ok()) parent->first_error = status;
  }
  delete piece;
  if (parent->pieces_left.fetch_sub(1) == 1) {
    IoCompletion c;
    c.tag = parent->request.tag;
    c.bytes = parent->bytes.load();
    c.submit_s = parent->submit_s;
    c.complete_s = MonotonicSeconds();
    c.status = parent->first_error;
    if (c.status.ok() && c.bytes != parent->request.length_bytes) {
      c.status = IoError(std::string(IoOpName(parent->request.op)) + " '" + parent->path +
                         "': transferred " + std::to_string(c.bytes) + " of " +
                         std::to_string(parent->request.length_bytes) + " bytes");
    }
    parent->queue->Push(std::move(c));
    delete parent;
  }
}

// Checks a request against its file's mode; returns the error to complete it with.
inline Status ValidateRequest(const IoRequest& r, const std::string& path, bool direct, int64_t alignment) {
  if (r.length_bytes < 0 || r.offset_bytes < 0 || (r.length_bytes > 0 && r.buffer == nullptr)) {
    return InvalidArgument(std::string(IoOpName(r.op)) + " '" + path + "': negative offset or length, or null buffer");
  }
  if (direct && (!IsAligned(r.offset_bytes, alignment) || !IsAligned(r.length_bytes, alignment) ||
                 !IsAlignedPtr(r.buffer, alignment))) {
    return InvalidArgument(std::string(IoOpName(r.op)) + " '" + path + "' at offset " +
                           std::to_string(r.offset_bytes) + ", " + std::to_string(r.length_bytes) +
                           " bytes: O_DIRECT on this file needs buffer, offset and length aligned to " +
                           std::to_string(alignment) + " bytes");
  }
  return Status::Ok();
}

inline void CompleteNow(const IoRequest& r, CompletionSink* q, Status status, int64_t bytes) {
  IoCompletion c;
  c.tag = r.tag;
  c.status = std::move(status);
  c.bytes = bytes;
  c.submit_s = c.complete_s = MonotonicSeconds();
  q->Push(std::move(c));
}

}  // namespace tierflow::real::internal
