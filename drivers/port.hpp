// Port: the one interface between the engine and a wire (DESIGN.md,
// drivers/).  Packet buffers are DPDK mbufs on every wire, the simulated
// one included, so the data path is the same code everywhere.
//
// Calls are per burst, never per packet.  A port is driven by one thread
// at a time (the engine thread, or the caller's thread in inline mode).
#pragma once

#include <cstdint>
#include <string>

#include "lib/wire/eth.hpp"

struct rte_mbuf;
struct rte_mempool;

namespace uroce::drivers {

struct PortStats {
  uint64_t rx_frames = 0;
  uint64_t rx_bytes = 0;
  uint64_t tx_frames = 0;
  uint64_t tx_bytes = 0;
  uint64_t rx_dropped = 0;   // lost before the engine saw them (ring full, imissed)
  uint64_t tx_dropped = 0;   // handed to tx_burst but not sent (oerrors, link down)
  uint64_t burst_faults = 0; // bursts cut short by a fault inside the PMD (a memif peer
                             // unmapping the shared regions as it leaves)
};

class Port {
 public:
  virtual ~Port() = default;

  // Receive up to `n` frames into `pkts`; returns how many.  The caller
  // owns the returned mbufs.
  virtual uint16_t rx_burst(rte_mbuf** pkts, uint16_t n) = 0;
  // Send up to `n` frames; returns how many the port took (it owns those
  // now).  The caller still owns pkts[ret..n) and must free or retry them.
  virtual uint16_t tx_burst(rte_mbuf** pkts, uint16_t n) = 0;

  virtual wire::MacAddr mac() const = 0;
  virtual uint16_t mtu() const = 0;           // IP MTU of the wire
  virtual bool link_up() const = 0;
  virtual PortStats stats() const = 0;
  virtual rte_mempool* pool() const = 0;      // where this port's buffers come from
  virtual std::string name() const = 0;       // "sim0", "net_af_packet0,iface=veth0"
  // The kernel network device behind the port, if any ("veth0" for
  // af_packet and tap); empty for memif, ring and sim.
  virtual std::string netdev() const { return {}; }

  // Sleeping instead of polling (EngineConfig::idle_wait): an fd that is
  // readable (poll/epoll) when rx_burst would find a frame, or -1 when the
  // port has none (the engine then naps).  prepare_wait() is called before
  // the engine sleeps on it: false when a frame is there already (do not
  // sleep); end_wait() after it woke, or did not sleep.  Between them a
  // frame's arrival makes the fd readable.  The engine's thread.
  virtual int wait_fd() const { return -1; }
  virtual bool prepare_wait() { return true; }
  virtual void end_wait() {}
  // Whether a nap on wait_fd (Progress's Nap, not only its Sleep) must be
  // bracketed by prepare_wait/end_wait for a frame to end it: a port fed
  // by other threads that write the fd only while its reader waits
  // (transport/lcores.hpp, LanePort).
  virtual bool nap_prepares() const { return false; }
};

}  // namespace uroce::drivers
