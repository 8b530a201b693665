#pragma once

// Result<T>: a value or an Error, shaped like std::expected (C++23), for expected failures.

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace bmas {

enum class ErrorCode {
  kInvalidArgument,  // the caller's input is wrong (HTTP 400)
  kNotFound,         // a named thing does not exist (404)
  kTooLarge,         // input over a configured size (413)
  kUnavailable,      // a dependency is down or overloaded (503)
  kAlreadyExists,    // (409)
  kPermissionDenied, // (403)
  kInternal,         // a bug or an unexpected system failure (500)
};

struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
  std::string param;  // the offending field, where there is one
};

inline Error InvalidArgument(std::string message, std::string param = {}) {
  return Error{ErrorCode::kInvalidArgument, std::move(message), std::move(param)};
}
inline Error NotFound(std::string message, std::string param = {}) {
  return Error{ErrorCode::kNotFound, std::move(message), std::move(param)};
}
inline Error Internal(std::string message) {
  return Error{ErrorCode::kInternal, std::move(message), {}};
}

// Wraps an Error so that `return Unexpected(err);` reads like std::unexpected.
struct Unexpected {
  explicit Unexpected(Error e) : error(std::move(e)) {}
  Error error;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}                 // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}             // NOLINT(google-explicit-constructor)
  Result(Unexpected u) : v_(std::move(u.error)) {}          // NOLINT(google-explicit-constructor)

  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }

  T& value() & { assert(has_value()); return std::get<0>(v_); }
  const T& value() const& { assert(has_value()); return std::get<0>(v_); }
  T&& value() && { assert(has_value()); return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { assert(!has_value()); return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}     // NOLINT
  Result(Unexpected u) : error_(std::move(u.error)), ok_(false) {}  // NOLINT

  bool has_value() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { assert(!ok_); return error_; }

 private:
  Error error_;
  bool ok_ = true;
};

}  // namespace bmas
