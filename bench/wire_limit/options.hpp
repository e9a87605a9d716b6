// Command line of uroce-wire-limit.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "bench/wire_limit/frame.hpp"
#include "drivers/result.hpp"

namespace uroce::bench::wire_limit {

enum class Mode : uint8_t {
  kPing,  // initiator: one frame in flight, RTT distribution
  kPong,  // responder: turns requests around
  kTx,    // initiator: sends frames as fast as the wire takes them
  kRx,    // responder: counts them
};

std::string_view mode_name(Mode m) noexcept;

// ---- tunables -------------------------------------------------------------
inline constexpr uint64_t kDefaultRoundTrips = 100'000;
inline constexpr uint64_t kDefaultWarmup = 1'000;
inline constexpr double kDefaultTxSeconds = 5.0;
// Initiators give up and responders stop waiting after this long.
inline constexpr double kDefaultMaxSeconds = 60.0;
// A request or control frame with no answer after this long is lost, and
// the initiator moves on (research/dpdk.md §3.1: CI timeouts >= 100 ms).
inline constexpr std::chrono::milliseconds kDefaultTimeout{100};
inline constexpr uint16_t kDefaultBurst = 32;
inline constexpr uint16_t kMaxBurst = 64;
// ping/pong --companions: at most this many frames ahead of each request
// and reply.
inline constexpr uint16_t kMaxCompanions = 3;

struct Options {
  Mode mode = Mode::kPing;
  std::string vdev;              // EAL --vdev: "net_af_packet0,iface=x"
  uint16_t frame_bytes = 64;     // frame length without FCS
  uint64_t count = 0;            // ping: measured round trips; tx: frames (0: no limit)
  uint64_t warmup = kDefaultWarmup;  // ping: unrecorded round trips first
  double seconds = 0;            // tx: how long to send; others: give up after
  unsigned core = 0;             // the EAL lcore; the process is pinned to it
  uint16_t burst = kDefaultBurst;
  // ping/pong: frames that go ahead of each request and each reply in its
  // burst, and that the far end drops: RC's shape, where the ACK of the
  // SEND a reply answers leaves with it (each a frame's kernel path on a
  // veth).
  uint16_t companions = 0;
  std::chrono::milliseconds timeout = kDefaultTimeout;
  std::string log_level = "*:error";
  bool json = false;             // one JSON object on stdout instead of text
  Addressing to;                 // initiator: where its frames go (frame.hpp)
  bool claim_udp = false;        // hold UDP 4791 in this namespace, as uroce does
  bool relay = false;            // every frame through a second thread (relay.hpp)
  // tx and rx: both ends stream at once, each counting the other's frames
  // (perftest -b's shape: each end's one thread sends and receives).
  bool duplex = false;
  int relay_core = -1;           // --relay: that thread's CPU (-1: any online CPU)
};

// Parses argv; on --help or a usage error the Error's code is 0 or EINVAL
// and its message is what to print.
drivers::Result<Options> parse_options(int argc, char** argv);

}  // namespace uroce::bench::wire_limit
