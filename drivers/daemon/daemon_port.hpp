// A client's port on a device uroced serves (issue 15): the Port the
// client's engine drives, over the device's shared region (shm_ring.hpp).
// The client's RNIC is its own, as in-process; the daemon, on the other
// side of the rings, owns the wire, answers ARP/ND for the client, carries
// frames between clients of the same device (loopback), and checks what
// each client sends (daemon/switch.hpp).
//
//   tx_burst  copies each frame into a TX slot (the mbuf is freed)
//   rx_burst  copies RX slots into mbufs from the port's pool
//   records   a connected QP's destination and the client's multicast
//             groups go into the TX ring as records, in order with the
//             frames, so the daemon knows what a QP may send before its
//             first frame (claim(), unclaim(), mcast()); a record that
//             finds the ring full waits in a small queue and goes first on
//             the next burst, never lost
//
// The link is up while the daemon's port is up and the daemon is alive
// (mark_gone() when its socket hung up).
//
// Threads: the engine's (Port's rule): bursts and records from its loop.
// stats() and link_up() from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "drivers/daemon/link.hpp"
#include "drivers/daemon/shm_ring.hpp"
#include "drivers/port.hpp"

namespace uroce::drivers::daemon {

class DaemonPort final : public Port {
 public:
  // `pool`: mbufs of at least the region's slot payload (not owned).
  DaemonPort(Region region, const DeviceDesc& desc, rte_mempool* pool);
  ~DaemonPort() override;
  DaemonPort(const DaemonPort&) = delete;
  DaemonPort& operator=(const DaemonPort&) = delete;

  uint16_t rx_burst(rte_mbuf** pkts, uint16_t n) override;
  uint16_t tx_burst(rte_mbuf** pkts, uint16_t n) override;
  wire::MacAddr mac() const override { return mac_; }
  uint16_t mtu() const override { return mtu_; }
  bool link_up() const override;
  PortStats stats() const override;
  rte_mempool* pool() const override { return pool_; }
  std::string name() const override { return name_; }

  // Records (see above), by the thread that drives the port (the engine's).
  void claim(uint32_t qpn, const uint8_t (&remote_gid)[16], uint32_t remote_qpn);
  void unclaim(uint32_t qpn);
  void mcast(const uint8_t (&mgid)[16], bool join);

  // The daemon hung up: the link is down for good.
  void mark_gone() noexcept { gone_.store(true, std::memory_order_release); }
  bool gone() const noexcept { return gone_.load(std::memory_order_acquire); }

  // [any application thread] The application polled a CQ; `empty`: it
  // found nothing.  An application that spins tells the daemon so, and
  // yields its CPU between polls (shm_ring.hpp, busy polling).
  void app_polled(bool empty) noexcept;

  // Sleeping: the wake fd the daemon writes when it fills RX while
  // client_waiting is set (shm_ring.hpp).
  int wait_fd() const override { return region_.wake_fd(); }
  bool prepare_wait() override;
  void end_wait() override;

 private:
  struct Pending {
    RecordKind kind;
    std::vector<uint8_t> bytes;
  };
  bool put_record(RecordKind kind, const void* p, uint32_t len);
  void flush_records();
  void kick_daemon() noexcept;

  Region region_;
  ShmRings rings_;
  ShmHeader* hdr_;
  rte_mempool* pool_;
  wire::MacAddr mac_{};
  uint16_t mtu_;
  std::string name_;
  std::deque<Pending> pending_;  // records that found the ring full
  std::atomic<bool> gone_{false};
  // Counters: one writer (the engine), read relaxed.
  std::atomic<uint64_t> rx_frames_{0}, rx_bytes_{0}, tx_frames_{0}, tx_bytes_{0}, rx_dropped_{0}, tx_dropped_{0};
  // app_polled's view (application threads, relaxed: approximate is enough).
  std::atomic<uint32_t> empty_polls_{0};     // application CQ polls in a row that found nothing
  std::atomic<uint64_t> published_ns_{0};    // when client_polls was last bumped
};

}  // namespace uroce::drivers::daemon
