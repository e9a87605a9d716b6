// The splitmix64 finaliser (Steele, Lea, Flood 2014): a 64-bit integer to
// a well-spread one, counter-based, no state.  The fault injector's random
// streams and the repath source-port choice use it.
#pragma once

#include <cstdint>

namespace uroce {

inline constexpr uint64_t kGolden64 = 0x9E3779B97F4A7C15ULL;  // 2^64 / phi

constexpr uint64_t mix64(uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// The next value of the splitmix64 stream whose state is `state`.
constexpr uint64_t splitmix64(uint64_t& state) noexcept {
  state += kGolden64;
  return mix64(state);
}

}  // namespace uroce
