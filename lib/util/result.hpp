// Result<T, E>: a value or the reason there is none.  The control path's
// return type (STYLE.md, "errors by layer") until C++23's std::expected;
// the project's only one (drivers::Result<T> is this with drivers::Error,
// the configuration's ConfigResult<T> this with ConfigError).
// Result<void, E> is success with nothing, or the error.
//
//   Result<int, std::string> parse(...);
//   if (auto r = parse(...); !r) return Err{r.error()};
//
// A Result converts implicitly from a T, and from an E when E is not T;
// `Err{e}` always means the error, so Result<std::string, std::string>
// works too.
#pragma once

#include <cassert>
#include <type_traits>
#include <utility>
#include <variant>

namespace uroce {

// The value of a Result<Ok, E>: success that carries nothing.
struct Ok {
  friend constexpr bool operator==(Ok, Ok) noexcept = default;
};

template <class E>
struct Err {
  E error;
};
template <class E>
Err(E) -> Err<E>;

template <class T, class E>
class [[nodiscard]] Result {
 public:
  using value_type = T;
  using error_type = E;

  Result(T value) : v_(std::in_place_index<kValue>, std::move(value)) {}  // NOLINT: implicit by design
  Result(E error) requires(!std::is_same_v<T, E>)                        // NOLINT: implicit by design
      : v_(std::in_place_index<kError>, std::move(error)) {}
  template <class G>
    requires std::is_constructible_v<E, G&&>
  Result(Err<G> err) : v_(std::in_place_index<kError>, E(std::move(err.error))) {}  // NOLINT

  bool ok() const noexcept { return v_.index() == kValue; }
  explicit operator bool() const noexcept { return ok(); }

  T& value() & { assert(ok()); return std::get<kValue>(v_); }
  const T& value() const& { assert(ok()); return std::get<kValue>(v_); }
  T&& value() && { assert(ok()); return std::get<kValue>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const E& error() const& { assert(!ok()); return std::get<kError>(v_); }
  E&& error() && { assert(!ok()); return std::get<kError>(std::move(v_)); }

 private:
  static constexpr size_t kValue = 0;
  static constexpr size_t kError = 1;
  std::variant<T, E> v_;
};

// Success carrying nothing, or the error.
template <class E>
class [[nodiscard]] Result<void, E> {
 public:
  using value_type = void;
  using error_type = E;

  Result() = default;
  Result(E error) : error_(std::move(error)), ok_(false) {}  // NOLINT: implicit by design
  template <class G>
    requires std::is_constructible_v<E, G&&>
  Result(Err<G> err) : error_(E(std::move(err.error))), ok_(false) {}  // NOLINT

  bool ok() const noexcept { return ok_; }
  explicit operator bool() const noexcept { return ok_; }
  const E& error() const& { assert(!ok_); return error_; }
  E&& error() && { assert(!ok_); return std::move(error_); }

 private:
  E error_{};
  bool ok_ = true;
};

}  // namespace uroce
