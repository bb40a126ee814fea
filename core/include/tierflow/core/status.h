// Status and StatusOr: how tierflow reports what the world did (bad input, files, devices, I/O).
//
// A Status is either OK or carries a code and one human-readable message that names the thing
// involved and the rule it broke ("schedule task 'fwd.L3': dep 'x' names no task"). Vendor error
// codes (errno, CUDA, NCCL) are converted once, at the boundary, with FromErrno() and friends.
// Our own bugs are not Statuses: they are TF_CHECK failures, which abort with file and line.
//
// Thread safety: Status and StatusOr are values; distinct objects may be used from any thread.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace tierflow {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // malformed input: a scenario, a schedule, a flag
  kNotFound,           // a named thing (file, preset, task, tensor) does not exist
  kAlreadyExists,
  kFailedPrecondition, // the world is not in a state that allows this (disk read-only, pool full)
  kResourceExhausted,  // a budget, a disk or a pool is too small
  kDeadlock,           // the schedule cannot make progress
  kIoError,            // the OS or a device failed an operation
  kUnavailable,        // an optional back-end or device is not present
  kDataLoss,           // a checksum mismatch, a truncated file
  kInternal,
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid argument: <message>", or "OK".
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>" (no-op when OK).
  Status WithContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

Status InvalidArgument(std::string message);
Status NotFound(std::string message);
Status FailedPrecondition(std::string message);
Status ResourceExhausted(std::string message);
Status IoError(std::string message);
Status Unavailable(std::string message);
Status DataLoss(std::string message);
Status Internal(std::string message);
// Converts an errno value (positive or negative) into a Status naming what failed:
// FromErrno(ENOSPC, "write 'nvme0/store.bin' at offset 4096") -> resource exhausted: ...: No space left on device.
Status FromErrno(int err, const std::string& what);

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    // (void): nvcc's front end reads the discarded Status& of the assignment as a nodiscard value.
    if (status_.ok()) (void)(status_ = Internal("StatusOr constructed from an OK Status without a value"));
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  // Requires ok().
  T& value() & { CheckOk(); return *value_; }
  const T& value() const& { CheckOk(); return *value_; }
  T&& value() && { CheckOk(); return std::move(*value_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void CheckOk() const {
    if (!status_.ok()) {
      std::fprintf(stderr, "StatusOr::value() on an error: %s\n", status_.ToString().c_str());
      std::abort();
    }
  }
  Status status_;
  std::optional<T> value_;
};

}  // namespace tierflow

// An always-on check for tierflow's own invariants. Never use it for input validation.
#define TF_CHECK(cond)                                                                 \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);    \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)

#define TF_CONCAT_INNER(a, b) a##b
#define TF_CONCAT(a, b) TF_CONCAT_INNER(a, b)

#define TF_RETURN_IF_ERROR(expr)                   \
  do {                                             \
    ::tierflow::Status tf_status_ = (expr);        \
    if (!tf_status_.ok()) return tf_status_;       \
  } while (0)

#define TF_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

// Expands to several statements: inside an if or a loop, use braces.
#define TF_ASSIGN_OR_RETURN(lhs, expr) \
  TF_ASSIGN_OR_RETURN_IMPL(TF_CONCAT(tf_statusor_, __LINE__), lhs, expr)
