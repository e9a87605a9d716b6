// WireClock: the time that delay, jitter, the bandwidth cap and link
// timing are measured in, for the sim wire and FaultPort.
//
// kReal reads std::chrono::steady_clock.  kManual is a virtual clock that
// starts at 0 and moves only when a test calls advance() or set(): frames
// due later than "now" stay on the wire until then, so a test can step
// through delays exactly and two runs see the same times.
//
// Threads: now_ns() may run on any thread.  The manual time is an atomic
// written with release and read with acquire, so a thread that sees the
// new time also sees whatever the advancing thread did before advancing.
// Callers read the clock once per burst, not once per packet.
#pragma once

#include <atomic>
#include <cassert>
#include <cstdint>

#include "lib/util/steady_ns.hpp"

namespace uroce::drivers {

class WireClock {
 public:
  enum class Mode : uint8_t { kReal, kManual };

  explicit WireClock(Mode mode = Mode::kReal) noexcept : mode_(mode) {}

  Mode mode() const noexcept { return mode_; }

  uint64_t now_ns() const noexcept {
    if (mode_ == Mode::kManual) return manual_ns_.load(std::memory_order_acquire);
    return steady_ns();
  }

  // Manual clock only.  Time never goes backwards.
  void advance(uint64_t ns) noexcept {
    assert(mode_ == Mode::kManual);
    manual_ns_.fetch_add(ns, std::memory_order_acq_rel);
  }
  void set(uint64_t ns) noexcept {
    assert(mode_ == Mode::kManual && ns >= manual_ns_.load(std::memory_order_relaxed));
    manual_ns_.store(ns, std::memory_order_release);
  }

 private:
  Mode mode_;
  std::atomic<uint64_t> manual_ns_{0};
};

}  // namespace uroce::drivers
