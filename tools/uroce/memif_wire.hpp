// Relay: the data path of `uroce memif-wire`, a two-port switch that
// forwards every frame it receives on one port out of the other, both ways.
//
// Each direction is a lane.  A lane reads a burst from its source only
// once the previous one has gone out: frames the destination refuses (its
// ring is full) wait in the lane, and the source's own ring then fills, so
// back-pressure reaches the sender instead of a drop.  A frame for a
// destination whose link is down (no peer connected) is freed and counted;
// so are frames still waiting when the destination's peer goes away.
//
// Threads: one thread drives poll(); the counters are read by that thread
// (or after it stops).  No allocation on the data path.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "drivers/port.hpp"

struct rte_mbuf;

namespace uroce::tools {

inline constexpr uint16_t kRelayBurst = 32;

// Why a lane freed a frame instead of sending it; one counter each.
enum class RelayDrop : uint8_t {
  kNoPeer,  // the destination's link is down: no peer connected there
  kCount,
};

inline constexpr std::array<std::string_view, static_cast<size_t>(RelayDrop::kCount)> kRelayDropNames{
    "dropped_no_peer",
};

struct LaneCounters {
  uint64_t forwarded = 0;
  std::array<uint64_t, static_cast<size_t>(RelayDrop::kCount)> dropped{};
};

class Relay {
 public:
  // Both ports outlive the relay.
  Relay(drivers::Port& a, drivers::Port& b) noexcept : lanes_{Lane{&a, &b}, Lane{&b, &a}} {}
  ~Relay() { release(); }
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  // One pass both ways; returns the frames moved or freed (0: idle).
  unsigned poll() noexcept;
  // Frees every frame the lanes hold (before the ports close).
  void release() noexcept;

  const LaneCounters& a_to_b() const noexcept { return lanes_[0].counters; }
  const LaneCounters& b_to_a() const noexcept { return lanes_[1].counters; }

 private:
  struct Lane {
    drivers::Port* from;
    drivers::Port* to;
    std::array<rte_mbuf*, kRelayBurst> held{};
    uint16_t head = 0;   // the first frame not yet sent
    uint16_t count = 0;  // frames from head on
    LaneCounters counters;
  };
  static unsigned move(Lane& lane) noexcept;
  static unsigned drop(Lane& lane, RelayDrop why) noexcept;

  std::array<Lane, 2> lanes_;
};

}  // namespace uroce::tools
