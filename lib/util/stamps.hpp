// Stage stamps: where one message's time goes on its way through the stack
// (issue 16's per-stage breakdown).  Each point below is stamped by the
// code that reaches it, with the CPU's time-stamp counter; while armed,
// the first time each point is reached after arm() is kept and later ones
// are not, so that with one message in flight (a ping-pong benchmark,
// bench/stages.cpp) the snapshot is that message's path:
//
//   PostBegin  -> Posted      post     the verb queues the WQE, tells the engine
//   Posted     -> Picked      doorbell the engine starts on it (requester)
//   Picked     -> Built       build    headers written, payload copied in
//   Built      -> Sealed      ICRC     the ICRC computed and stored
//   Sealed     -> Sent        TX       queued and handed to the PMD (tx_burst)
//   Sent       -> Received    wire     the peer's rx_burst returns it
//   Received   -> Classified  RX       Ethernet/IP/UDP checked, handed to the RNIC
//   Classified -> Checked     parse    QP, PSN, opcode sequence, keys, ICRC checked
//   Checked    -> Placed      place    payload scattered into the receive buffer
//   Placed     -> Completed   CQE      the CQE written
//   Completed  -> Polled      poll     the program's poll_cq returns it
//
// A SEND or a WRITE with immediate reaches them all in this order, the
// last three at the receiver.  A READ's request leg reaches Checked at
// the responder; its response leg then reaches Placed (the requester's
// completer placed the response), Completed (its send CQE) and Polled,
// so for a READ the Checked -> Placed stage is the whole way back: the
// responder's read and build, its ICRC and TX, the wire, RX and parse.
//
// Off (not armed): a stamp costs one relaxed load.  The timestamps are
// rte_rdtsc(); tsc_hz() converts.  Threads: any (first wins by CAS).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace uroce::stamps {

enum class Point : uint8_t {
  PostBegin,
  Posted,
  Picked,
  Built,
  Sealed,
  Sent,
  Received,
  Classified,
  Checked,
  Placed,
  Completed,
  Polled,
};
inline constexpr size_t kPoints = static_cast<size_t>(Point::Polled) + 1;

// The stage that ends at each point (index i: from point i-1 to point i;
// index 0 has none).
std::string_view stage_name(size_t point) noexcept;
std::string_view point_name(Point p) noexcept;

namespace detail {
extern std::atomic<bool> g_armed;
}

inline bool armed() noexcept { return detail::g_armed.load(std::memory_order_relaxed); }
void record(Point p) noexcept;  // keeps the first since arm()
void arm() noexcept;            // clears every point and starts recording
void disarm() noexcept;
using Snapshot = std::array<uint64_t, kPoints>;  // TSC per point; 0: not reached
Snapshot snapshot() noexcept;
uint64_t tsc_hz() noexcept;  // needs the EAL (rte_get_tsc_hz)

}  // namespace uroce::stamps

#define UROCE_STAMP(point)                                                                 \
  do {                                                                                     \
    if (::uroce::stamps::armed()) ::uroce::stamps::record(::uroce::stamps::Point::point); \
  } while (0)
