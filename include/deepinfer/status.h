// Status and Result<T>: how every expected failure travels in deepinfer.
//
// A function that can fail on bad input or a missing resource returns Status (no value) or
// Result<T> (a value or an error). Broken invariants are not reported this way: they abort
// through DI_ICHECK (src/core/check.h). Both types are cheap to move and safe to pass between
// threads by value.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace deepinfer {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // the caller's input is wrong (bad flag, malformed request)
  kNotFound,          // a file, tensor, key or model that was asked for does not exist
  kDataLoss,          // a file is truncated or corrupted
  kUnimplemented,     // valid input that this build does not support (a tensor type, say)
  kOutOfRange,        // an index or length beyond its limit (prompt longer than the context)
  kResourceExhausted, // out of memory or capacity
  kFailedPrecondition,
  kInternal,
  kUnavailable,       // an external tool or service could not be reached
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return {}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "NOT_FOUND: model file 'x.gguf' does not exist"
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status data_loss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status out_of_range(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status failed_precondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) { assert(!status_.ok()); }  // NOLINT

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  T& value() & { assert(ok()); return *value_; }
  const T& value() const& { assert(ok()); return *value_; }
  T&& value() && { assert(ok()); return std::move(*value_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace deepinfer

#define DI_CONCAT_INNER(a, b) a##b
#define DI_CONCAT(a, b) DI_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` (a Status) is not ok.
#define DI_RETURN_IF_ERROR(expr)                        \
  do {                                                  \
    ::deepinfer::Status di_status_ = (expr);            \
    if (!di_status_.ok()) return di_status_;            \
  } while (0)

// DI_ASSIGN_OR_RETURN(auto x, make_x()); declares x from a Result or returns its error.
#define DI_ASSIGN_OR_RETURN(lhs, expr) \
  DI_ASSIGN_OR_RETURN_IMPL(DI_CONCAT(di_result_, __LINE__), lhs, expr)
#define DI_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
