// SpinGuard: holds a spinlock (a std::atomic_flag) for its scope, or
// nothing when given none.  For the short sections the data paths of a
// device's several engine lcores share (transport/lcores.hpp): a CQ's
// push, an SRQ's take, a memory window's bind or check; with one lcore
// the caller passes null and no atomic is touched.
#pragma once

#include <atomic>

namespace uroce {

class SpinGuard {
 public:
  explicit SpinGuard(std::atomic_flag* lock) noexcept : lock_(lock) {
    if (lock_ != nullptr)
      while (lock_->test_and_set(std::memory_order_acquire)) {
      }
  }
  ~SpinGuard() {
    if (lock_ != nullptr) lock_->clear(std::memory_order_release);
  }
  SpinGuard(const SpinGuard&) = delete;
  SpinGuard& operator=(const SpinGuard&) = delete;

 private:
  std::atomic_flag* lock_;
};

}  // namespace uroce
