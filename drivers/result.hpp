// Result<T>: the value of a control-path call, or an Error that says what
// failed (DESIGN.md "errors by layer": the control path returns values).
// A C++20 stand-in for the subset of std::expected that drivers/ needs;
// replace it with std::expected once the project moves to C++23.
//
// Nothing here throws: asking a failed Result for its value, or a good one
// for its error, is a bug and asserts.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <optional>

namespace uroce::drivers {

struct Error {
  int code = 0;         // an errno value (EINVAL, ENOMEM, …) when one applies
  std::string message;  // names what failed and why: "drop: must be within [0, 1]"
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}   // NOLINT: implicit by design
  Result(Error error) : error_(std::move(error)) {}  // NOLINT

  bool ok() const noexcept { return value_.has_value(); }
  explicit operator bool() const noexcept { return ok(); }

  T& value() & noexcept { assert(ok()); return *value_; }
  const T& value() const& noexcept { assert(ok()); return *value_; }
  T&& value() && noexcept { assert(ok()); return std::move(*value_); }
  T& operator*() & noexcept { return value(); }
  const T& operator*() const& noexcept { return value(); }
  T* operator->() noexcept { return &value(); }
  const T* operator->() const noexcept { return &value(); }

  const Error& error() const noexcept { assert(!ok()); return error_; }

 private:
  std::optional<T> value_;  // empty: failed, and error_ says why
  Error error_;
};

// A Result with no value: ok, or an Error.
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT

  bool ok() const noexcept { return ok_; }
  explicit operator bool() const noexcept { return ok_; }
  const Error& error() const noexcept { assert(!ok_); return error_; }

 private:
  Error error_;
  bool ok_ = true;
};

using Status = Result<void>;

}  // namespace uroce::drivers
