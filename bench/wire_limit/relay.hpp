// --relay: a second thread owns the port, and the program's thread reaches
// the wire only through it, as a uroce client reaches the wire only
// through uroced's engine thread (DESIGN.md "The shared device").  The
// cheapest such hop there can be: two single-producer/single-consumer
// rings of mbuf pointers (no copy, no system call, no check of what
// passes), each thread polling and yielding its CPU after every poll that
// found nothing (the program's side as a uroce client spinning on a CQ
// through uroced, DaemonPort::app_polled; the relay's as uroced's engine
// polling for it, Engine::busy_poll).  A ping-pong through a relay at
// both ends measures what any design that moves each frame through
// another thread costs on this machine, whatever that thread then does.
//
// Threads: the relay's own (start to stop) calls rx_burst and tx_burst on
// the port and nothing else does meanwhile; rx()/tx() are the program's
// thread's, one thread only.  stats() after stop.
#pragma once

#include <rte_mbuf.h>
#include <rte_ring.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "drivers/port.hpp"
#include "drivers/result.hpp"

namespace uroce::bench::wire_limit {

struct RelayStats {
  uint64_t to_wire = 0;     // frames the relay gave the port
  uint64_t from_wire = 0;   // frames the relay passed to the program
  uint64_t dropped = 0;     // from the wire, with the program's ring full, or refused by the port at stop
  uint64_t idle_yields = 0; // relay turns that found nothing either way
};

class Relay {
 public:
  // Starts the relay thread on `port`, moving at most `burst`
  // frames per turn each way, on CPU `core` or, for -1, any online CPU
  // (the program's thread stays where the EAL pinned it).
  static drivers::Result<std::unique_ptr<Relay>> start(drivers::Port& port, uint16_t burst, int core);
  ~Relay();  // stops it
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  // [program] Frames the relay took from the wire; at most n.  A call that
  // finds none yields the CPU.
  uint16_t rx(rte_mbuf** bufs, uint16_t n) noexcept;
  // [program] Hands frames to the relay; returns how many it took (the
  // rest stay the caller's; a call that could not give them all yields).
  uint16_t tx(rte_mbuf** bufs, uint16_t n) noexcept;

  // Stops and joins the thread; frees what is still in the rings.
  void stop() noexcept;
  RelayStats stats() const noexcept { return stats_; }

 private:
  Relay(drivers::Port& port, uint16_t burst, int core, rte_ring* to_wire, rte_ring* from_wire);
  void loop() noexcept;

  drivers::Port& port_;
  uint16_t burst_;
  int core_;
  rte_ring* to_wire_;
  rte_ring* from_wire_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  RelayStats stats_;  // the relay thread's until it is joined
};

}  // namespace uroce::bench::wire_limit
