// A QP's pacer: the earliest time its next frame may leave, at the rate
// its congestion control allows (DESIGN.md "Congestion control").
//
// At the port's rate it is off: `wait()` is one compare of a zero, and
// `spend()` returns at once, so an uncongested QP pays nothing for it.
// Below it, each frame pushes the departure time on by its length at the
// rate; a QP idle for a while may send `burst_bytes` back to back (the
// engine's timer has a 1 µs tick and its loop runs late by more, so a
// pacer with no burst would fall below its own rate).
#pragma once

#include <algorithm>
#include <cstdint>

namespace uroce::cc {

class Pacer {
 public:
  // Pace at `bps`; at or above `max_bps` (or 0), not at all.
  void set_rate(uint64_t bps, uint64_t max_bps, uint32_t burst_bytes) noexcept {
    if (bps == 0 || bps >= max_bps) {
      ps_per_byte_ = 0;
      return;
    }
    ps_per_byte_ = kPsPerByteAtOneBps / bps;
    if (ps_per_byte_ == 0) ps_per_byte_ = 1;
    burst_ns_ = uint64_t{burst_bytes} * ps_per_byte_ / kPsPerNs;
  }
  bool pacing() const noexcept { return ps_per_byte_ != 0; }
  // Nanoseconds until the next frame may leave; 0: now.
  uint64_t wait(uint64_t now) const noexcept {
    if (ps_per_byte_ == 0 || next_ <= now) return 0;
    return next_ - now;
  }
  // Whether the frame after one of `bytes` sent at `now` would have to wait
  // (the requester asks for an ACK on the last packet before a pause).
  bool pauses_after(uint64_t now, uint32_t bytes) const noexcept {
    return ps_per_byte_ != 0 && next_after(now, bytes) > now;
  }
  // A frame of `bytes` left at `now`.
  void spend(uint64_t now, uint32_t bytes) noexcept {
    if (ps_per_byte_ != 0) next_ = next_after(now, bytes);
  }
  void reset() noexcept { *this = Pacer{}; }

 private:
  // The next frame's earliest departure once one of `bytes` leaves at
  // `now`: credit for idle time is capped at one burst.
  uint64_t next_after(uint64_t now, uint32_t bytes) const noexcept {
    const uint64_t earliest = now > burst_ns_ ? now - burst_ns_ : 0;
    return std::max(next_, earliest) + uint64_t{bytes} * ps_per_byte_ / kPsPerNs;
  }

  static constexpr uint64_t kPsPerNs = 1000;
  static constexpr uint64_t kPsPerByteAtOneBps = 8'000'000'000'000ull;  // 8 bits at 1 bit/s, in ps
  uint64_t ps_per_byte_ = 0;  // 0: not pacing
  uint64_t burst_ns_ = 0;
  uint64_t next_ = 0;         // earliest departure of the next frame (ns)
};

}  // namespace uroce::cc
