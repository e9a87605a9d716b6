// A fixed-size array of a trivially copyable type, all zero at start, whose
// memory is touched only where it is written: a table sized for the
// maximum (the RNIC's key and QP tables, 2.5 MB per device) costs nothing
// until used.  A std::vector writes its zeros, faulting in every page at
// construction (about 640 page faults per device, ~10 ms of a program's
// start-up here); calloc takes blocks this large straight from mmap, whose
// pages are zero already, and writes nothing.
//
// Threads: as a plain array.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>
#include <type_traits>

namespace uroce {

template <class T>
class ZeroedArray {
  static_assert(std::is_trivially_copyable_v<T>, "zero bytes must be a valid T");

 public:
  explicit ZeroedArray(size_t n) : p_(static_cast<T*>(std::calloc(n, sizeof(T)))), n_(n) {
    if (p_ == nullptr) throw std::bad_alloc();  // control path: as std::vector would
  }
  ~ZeroedArray() { std::free(p_); }
  ZeroedArray(const ZeroedArray&) = delete;
  ZeroedArray& operator=(const ZeroedArray&) = delete;

  size_t size() const noexcept { return n_; }
  T& operator[](size_t i) noexcept { return p_[i]; }
  const T& operator[](size_t i) const noexcept { return p_[i]; }

 private:
  T* p_;
  size_t n_;
};

}  // namespace uroce
