// The monotonic clock in nanoseconds (std::chrono::steady_clock, which is
// CLOCK_MONOTONIC on Linux): the engine's iteration clock, the daemon's
// grace periods, a client's busy-polling marks.  Any thread.
#pragma once

#include <chrono>
#include <cstdint>

namespace uroce {

inline uint64_t steady_ns() noexcept {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

}  // namespace uroce
