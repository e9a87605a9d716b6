// PacketRx: af_packet's receive path of our own, a TPACKET_V2 ring on a
// packet socket that belongs to no fanout group (DESIGN.md
// "Configuration").
//
// DPDK 22.11's af_packet PMD always joins its socket to a fanout group
// (hash, rollover, defrag), so the kernel computes a flow hash and checks
// the ring's room for every frame before it copies it: ~0.27 us a frame
// on this machine's veth (2.39-2.43 us against 2.65-2.71 us a frame sent
// and received, one socket each way), paid by the sender's `sendto` on a
// veth.  This ring is the PMD's without the group: same geometry, one
// frame copied into one mbuf per ring slot, a VLAN tag the kernel took
// out put back in (the engine parses tags itself, as the PMD does with
// VLAN strip off).  What the host's own stack sends on the netdev (its ARP
// and ICMP answers, its TCP) reaches the ring as it reached the PMD's, so
// the engine's capture shows whole conversations; what the port sends
// itself bypasses the qdisc and with it the netdev's taps.
//
// retire_packet_socket() then takes the PMD's own socket off the netdev:
// otherwise the kernel would hand every frame to both.
//
// Threads: open and the destructor are control path; rx_burst is the
// port's one RX thread; take_drops(), frames() and bytes() any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "drivers/dpdk/devargs.hpp"
#include "drivers/result.hpp"

struct rte_mbuf;
struct rte_mempool;

namespace uroce::drivers::dpdk {

class PacketRx {
 public:
  // A ring of `g` on a new socket bound to `iface` (every protocol): blocksz
  // a multiple of the page size and of framesz, framecnt a multiple of
  // blocksz / framesz.
  static Result<std::unique_ptr<PacketRx>> open(const std::string& iface, const AfPacketRing& g);
  ~PacketRx();
  PacketRx(const PacketRx&) = delete;
  PacketRx& operator=(const PacketRx&) = delete;

  // Up to `n` frames, each copied into an mbuf of `pool` (`port` set as
  // its input port); the ring slots go back to the kernel.  Stops early
  // when the pool is empty (the frames wait in the ring).
  uint16_t rx_burst(rte_mempool* pool, uint16_t port, rte_mbuf** pkts, uint16_t n) noexcept;
  // Readable (poll) when the ring holds a frame.
  int fd() const noexcept { return fd_; }
  // Frames the kernel dropped for want of a free slot since the last call
  // (PACKET_STATISTICS resets on read), and frames received and their bytes.
  uint64_t take_drops() const noexcept;
  uint64_t frames() const noexcept { return frames_.load(std::memory_order_relaxed); }
  uint64_t bytes() const noexcept { return bytes_.load(std::memory_order_relaxed); }

 private:
  PacketRx() = default;
  uint8_t* slot(uint32_t i) const noexcept;

  int fd_ = -1;
  uint8_t* map_ = nullptr;
  size_t map_len_ = 0;
  AfPacketRing g_{};
  uint32_t per_block_ = 0;
  uint32_t next_ = 0;      // the next slot to read (rx_burst's thread)
  std::atomic<uint64_t> frames_{0};  // written by rx_burst's thread only
  std::atomic<uint64_t> bytes_{0};
};

// Takes packet socket `fd` (the af_packet PMD's) off its netdev for good,
// leaving the PMD a harmless stand-in: its RX/TX ring mapping is replaced
// in place by anonymous zeroed memory (an empty ring to any reader; the
// PMD's close unmaps it as before) and the fd number by a plain UDP
// socket (the PMD's ioctls on it still answer; its close closes that).
// With neither fd nor mapping left, the kernel releases the socket, which
// leaves its fanout group; the release runs on a thread of its own and
// ends within a few RCU grace periods of the return (tens of ms), the
// socket receiving unread meanwhile.  Call only once no burst of the PMD runs, and
// never run one after.  Fails, changing nothing, when the mapping is not
// found.
Status retire_packet_socket(int fd);

}  // namespace uroce::drivers::dpdk
