// One end of the wire: the EAL, one port on the --vdev opened as uroce's
// engine opens its own (drivers::dpdk::DpdkPort: on af_packet its own
// sendmmsg transmit path and TPACKET receive ring, not the PMD's), and a
// pool of pre-written frames; plus the handshake both ends speak around a
// run.  So the raw stream is what uroce's own port layer can carry on this
// wire, the ceiling of every uroce figure beside it (issue 43: through the
// stock PMD path the baseline was slower than uroce itself).
//
// The handshake, so neither start order nor a lost frame hangs a run:
//   initiator (ping, tx)                 responder (pong, rx)
//   kHello every timeout       ----->    answers kHelloAck
//   ... the run ...
//   kDone(count) every timeout ----->    answers kDoneAck, stops polling,
//   (at most kDoneTries times)           waits kPeerGrace, closes
//   closes once acked or given up
// The initiator closes first while the responder sleeps, so neither side
// of a memif link is in rx/tx_burst when its peer disconnects (research/
// dpdk.md §3.4: a memif client once crashed in eth_memif_tx that way).
//
// Everything here runs on the one (main) lcore of the process; with --relay
// the port's bursts run on the relay's thread instead (relay.hpp).
#pragma once

#include <rte_mbuf.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include "bench/wire_limit/frame.hpp"
#include "bench/wire_limit/options.hpp"
#include "bench/wire_limit/relay.hpp"
#include "drivers/dpdk/dpdk_port.hpp"
#include "drivers/netdev.hpp"
#include "drivers/result.hpp"

namespace uroce::bench::wire_limit {

// ---- tunables -------------------------------------------------------------
inline constexpr uint16_t kRxDescriptors = 1024;
inline constexpr uint16_t kTxDescriptors = 1024;
inline constexpr uint32_t kPoolMbufs = 4095;  // per pool; 2^n - 1 suits the ring
inline constexpr int kDoneTries = 5;
// How long a responder stays off the wire after acking kDone.
inline constexpr std::chrono::milliseconds kPeerGrace{50};
// A memif client waits this long for its server to listen.
inline constexpr std::chrono::milliseconds kConnectWait{5000};

using PortStats = drivers::PortStats;

struct Endpoint {
  std::unique_ptr<drivers::dpdk::DpdkPort> port;  // receives into its own pool
  rte_mempool* tx_pool = nullptr;  // every mbuf pre-written with the frame
  wire::MacAddr mac{};
  Addressing to;  // an initiator's destination (Options::to)
  drivers::Udp4791Claim claim;  // held with --claim-udp
  uint16_t frame_bytes = 0;
  uint16_t burst = 0;
  uint64_t tsc_hz = 0;
  uint64_t timeout_tsc = 0;  // Options::timeout in TSC ticks
  // --relay: the thread that owns the port from open to close; every frame
  // of this end goes through it (port_rx, port_tx).
  std::unique_ptr<Relay> relay;
};

// Starts the EAL pinned to o.core with o.vdev, makes the pools and starts
// the port, and with o.relay the relay thread.  Control path.
drivers::Result<Endpoint> open_endpoint(const Options& o);

// Read them before close: memif's counters read 0 once the peer is gone.
PortStats port_stats(const Endpoint& ep);

// With --relay: stops the relay thread (nothing moves after) and returns
// its figures; nothing without one.  Before the report.
std::optional<RelayStats> stop_relay(const Endpoint& ep) noexcept;

// Stops and closes the port, frees the pools, shuts the EAL down.
drivers::Status close_endpoint(Endpoint& ep);

// ---- signals ----------------------------------------------------------------
// Set by SIGINT and SIGTERM; every loop checks it.
void install_signal_handlers();
bool stop_requested() noexcept;

// ---- data path ----------------------------------------------------------------
// The port, or with --relay the relay's rings.
inline uint16_t port_rx(const Endpoint& ep, rte_mbuf** bufs, uint16_t n) noexcept {
  return ep.relay ? ep.relay->rx(bufs, n) : ep.port->rx_burst(bufs, n);
}
inline uint16_t port_tx(const Endpoint& ep, rte_mbuf** bufs, uint16_t n) noexcept {
  return ep.relay ? ep.relay->tx(bufs, n) : ep.port->tx_burst(bufs, n);
}

// A frame from tx_pool with the per-frame fields stamped; nullptr if the
// pool is empty.
rte_mbuf* make_frame(const Endpoint& ep, FrameKind kind, uint32_t seq, uint32_t tsc) noexcept;

inline std::optional<FrameInfo> classify(const rte_mbuf* m) noexcept {
  return classify(rte_pktmbuf_mtod(m, const uint8_t*), rte_pktmbuf_data_len(m));
}

// tx_burst until the wire took all `n` frames, or until TSC `deadline` or
// a stop request; frees what it did not take.  Returns the frames sent.
uint16_t send_all(const Endpoint& ep, rte_mbuf** bufs, uint16_t n, uint64_t deadline) noexcept;

// ---- handshake ----------------------------------------------------------------
// Initiator: kHello until kHelloAck, or false at TSC `deadline`.
bool greet(const Endpoint& ep, uint64_t deadline);
// Initiator: kDone carrying `count` until kDoneAck, at most kDoneTries.
bool say_done(const Endpoint& ep, uint64_t count);

}  // namespace uroce::bench::wire_limit
