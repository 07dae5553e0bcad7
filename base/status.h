// Errors without exceptions: every fallible call across a module boundary
// returns Status or Result<T>, whose message tells the reader what to do next.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace edgecost {

// Codes follow the Twirp/gRPC vocabulary so the daemon can map them 1:1.
enum class ErrorCode {
  kOk = 0,
  kInvalidArgument,  // the caller's input is wrong (bad file, bad flag value)
  kNotFound,         // a named thing does not exist
  kAlreadyExists,
  kFailedPrecondition,  // the system is not in a state to do this (newer schema, ...)
  kPermissionDenied,    // the OS refused (read-only file, perf_event_paranoid, ...)
  kUnavailable,         // transient: database locked, device busy
  kResourceExhausted,   // a budget or limit was exceeded
  kDeadlineExceeded,
  kCancelled,
  kUnimplemented,
  kInternal,  // a bug or an unexpected third-party failure
  kDataLoss,  // stored data is damaged (a corrupt database file)
};

const char* ErrorCodeName(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prepends context, e.g. "reading graph.json: " + message.
  Status WithContext(const std::string& context) const {
    return ok() ? *this : Status(code_, context + ": " + message_);
  }

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {ErrorCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {ErrorCode::kNotFound, std::move(m)}; }
inline Status AlreadyExists(std::string m) { return {ErrorCode::kAlreadyExists, std::move(m)}; }
inline Status FailedPrecondition(std::string m) { return {ErrorCode::kFailedPrecondition, std::move(m)}; }
inline Status PermissionDenied(std::string m) { return {ErrorCode::kPermissionDenied, std::move(m)}; }
inline Status Unavailable(std::string m) { return {ErrorCode::kUnavailable, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {ErrorCode::kResourceExhausted, std::move(m)}; }
inline Status Internal(std::string m) { return {ErrorCode::kInternal, std::move(m)}; }
inline Status DataLoss(std::string m) { return {ErrorCode::kDataLoss, std::move(m)}; }

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : value_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(value_).ok() && "Result needs a value or an error");
  }

  bool ok() const { return std::holds_alternative<T>(value_); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(value_); }
  const T& value() const& { return std::get<T>(value_); }
  T& value() & { return std::get<T>(value_); }
  T&& value() && { return std::get<T>(std::move(value_)); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  std::variant<T, Status> value_;
};

}  // namespace edgecost

// Early-return helpers, in the spirit of absl/perfetto status macros.
#define EC_CONCAT_INNER(a, b) a##b
#define EC_CONCAT(a, b) EC_CONCAT_INNER(a, b)

#define EC_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::edgecost::Status ec_status_ = (expr);  \
    if (!ec_status_.ok()) return ec_status_; \
  } while (0)

#define EC_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

#define EC_ASSIGN_OR_RETURN(lhs, expr) EC_ASSIGN_OR_RETURN_IMPL(EC_CONCAT(ec_result_, __LINE__), lhs, expr)
