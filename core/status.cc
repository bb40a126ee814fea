#include "tierflow/core/status.h"

#include <cerrno>
#include <cstring>

namespace tierflow {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kAlreadyExists: return "already exists";
    case StatusCode::kFailedPrecondition: return "failed precondition";
    case StatusCode::kResourceExhausted: return "resource exhausted";
    case StatusCode::kDeadlock: return "deadlock";
    case StatusCode::kIoError: return "I/O error";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kDataLoss: return "data loss";
    case StatusCode::kInternal: return "internal";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

Status InvalidArgument(std::string m) { return Status(StatusCode::kInvalidArgument, std::move(m)); }
Status NotFound(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
Status FailedPrecondition(std::string m) { return Status(StatusCode::kFailedPrecondition, std::move(m)); }
Status ResourceExhausted(std::string m) { return Status(StatusCode::kResourceExhausted, std::move(m)); }
Status IoError(std::string m) { return Status(StatusCode::kIoError, std::move(m)); }
Status Unavailable(std::string m) { return Status(StatusCode::kUnavailable, std::move(m)); }
Status DataLoss(std::string m) { return Status(StatusCode::kDataLoss, std::move(m)); }
Status Internal(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }

Status FromErrno(int err, const std::string& what) {
  if (err < 0) err = -err;
  std::string message = what + ": " + std::strerror(err);
  switch (err) {
    case ENOENT: return NotFound(std::move(message));
    case ENOSPC:
    case EDQUOT:
    case ENOMEM: return ResourceExhausted(std::move(message));
    case EACCES:
    case EPERM:
    case EROFS: return FailedPrecondition(std::move(message));
    case EINVAL: return InvalidArgument(std::move(message));
    case EEXIST: return Status(StatusCode::kAlreadyExists, std::move(message));
    case ENOSYS:
    case EOPNOTSUPP: return Unavailable(std::move(message));
    default: return IoError(std::move(message));
  }
}

}  // namespace tierflow
