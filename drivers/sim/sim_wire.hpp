// The sim wire: an in-memory Ethernet switch joining any number of
// endpoints (SimPort) in one process, with seeded faults on every link.
//
// Forwarding, like a switch: a unicast frame goes to the endpoint with
// that destination MAC; a frame with the group bit set (broadcast,
// multicast), or to a MAC no other endpoint has, goes to every other
// endpoint (flooding, as a learning switch does before it learns).  The
// original mbuf goes to one receiver and the others get copies from their
// own pools (rte_pktmbuf_copy); delivery hands the mbuf pointer over.
//
// Links: every ordered pair of endpoints (from → to) is a link with its
// own FaultInjector (drop, dup, reorder, corrupt, delay, jitter, rate cap;
// see drivers/fault.hpp), its own DelayQueue, its own counters.  A frame
// is delivered by the receiver's rx_burst once the wire clock reaches its
// due time.  Link state is per endpoint (a cable pulled at one port):
// while a port is down, what it sends is dropped (tx_dropped), frames for
// it are dropped on arrival, and frames on their way to it when it went
// down are lost (down_dropped).
//
// Determinism: each link's fates depend only on (seed, from, to, the
// frames sent on that link) — see fault.hpp.  With a manual clock and one
// thread, whole delivery traces repeat exactly.  rx_burst visits the
// incoming links round robin, one more per call.
//
// Threads: each SimPort is driven by one thread at a time (Port's rule);
// different ports may run on different threads.  A link is written by its
// sender's thread (tx_burst) and read by its receiver's thread (rx_burst);
// one mutex per link serialises the two, and its release/acquire makes the
// frame's bytes, written before tx_burst, visible to the receiver.  Port
// counters have one writer each (relaxed atomics); link counters are read
// under the link's mutex.  The control calls (set_*_faults, set_link_up,
// counters) may run on any thread; add_port only before the first burst.
//
// Data path: no allocation (queues are sized when a port is added; copies
// come from mempools), no exceptions.
//
// Lifetime: the wire owns its ports and the pools it made for them.
// Free every mbuf you received, and destroy anything wrapping a SimPort
// (a FaultPort), before the wire.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "drivers/clock.hpp"
#include "drivers/delay_queue.hpp"
#include "drivers/dpdk/eal.hpp"
#include "drivers/fault.hpp"
#include "drivers/port.hpp"
#include "drivers/result.hpp"

namespace uroce::drivers::sim {

inline constexpr uint32_t kDefaultMaxPorts = 8;
inline constexpr uint32_t kDefaultLinkQueueFrames = 1024;  // per link: the switch's buffer for one port pair
inline constexpr uint16_t kDefaultSimMtu = 9000;           // jumbo, so a RoCE path MTU of 4096 fits
inline constexpr uint16_t kEthHeaderBytes = 14;
inline constexpr uint16_t kEthOverheadBytes = 18;          // header + one 802.1Q tag beyond the IP MTU

struct SimWireConfig {
  WireClock::Mode clock = WireClock::Mode::kReal;
  uint32_t max_ports = kDefaultMaxPorts;
  uint32_t link_queue_frames = kDefaultLinkQueueFrames;
};

struct SimPortConfig {
  std::string name;                  // default "sim<index>"
  std::optional<wire::MacAddr> mac;  // default 02:00:00:00:00:<index + 1> (locally administered)
  uint16_t mtu = kDefaultSimMtu;
  rte_mempool* pool = nullptr;       // not owned; null: the wire creates one
  uint32_t pool_mbufs = dpdk::kDefaultPoolMbufs;
  uint16_t data_room = dpdk::kDefaultDataRoom;
};

// Frames a SimPort refused to put on the wire, one counter per reason.
enum class SimDrop : uint8_t {
  kTxLinkDown,    // the sending port was down
  kTxRunt,        // shorter than an Ethernet header (in the first segment)
  kTxOversize,    // longer than MTU + kEthOverheadBytes
  kTxNoReceiver,  // flooded on a wire with no other endpoint
  kCount,
};
inline constexpr std::array<std::string_view, static_cast<size_t>(SimDrop::kCount)> kSimDropNames = {
    "tx_link_down", "tx_runt", "tx_oversize", "tx_no_receiver",
};

class SimWire;

class SimPort final : public Port {
 public:
  ~SimPort() override;

  uint16_t rx_burst(rte_mbuf** pkts, uint16_t n) override;
  uint16_t tx_burst(rte_mbuf** pkts, uint16_t n) override;

  wire::MacAddr mac() const override { return mac_; }
  uint16_t mtu() const override { return mtu_; }
  bool link_up() const override { return up_.load(std::memory_order_acquire); }
  // rx_dropped: frames for this port lost at its end of a link (link down,
  // queue full, no mbuf for a flooded copy).  Frames a fault dropped on
  // the way are wire losses: see SimWire::link_counters.
  PortStats stats() const override;
  rte_mempool* pool() const override { return pool_; }
  std::string name() const override { return name_; }

  size_t index() const noexcept { return index_; }
  uint64_t drops(SimDrop reason) const noexcept;

 private:
  friend class SimWire;
  SimPort(SimWire& wire, size_t index, const SimPortConfig& config, std::string name, wire::MacAddr mac,
          rte_mempool* pool, bool owns_pool);
  bool send_one(rte_mbuf* m, uint64_t now_ns) noexcept;
  void count_drop(SimDrop reason) noexcept;

  SimWire& wire_;
  const size_t index_;
  const std::string name_;
  const wire::MacAddr mac_;
  const uint16_t mtu_;
  rte_mempool* const pool_;
  const bool owns_pool_;
  std::atomic<bool> up_{true};
  size_t rx_cursor_ = 0;  // receiver thread only
  // One writer each: the receiving thread for rx_*, the sending thread for tx_*.
  std::atomic<uint64_t> rx_frames_{0}, rx_bytes_{0}, tx_frames_{0}, tx_bytes_{0};
  std::array<std::atomic<uint64_t>, static_cast<size_t>(SimDrop::kCount)> drops_{};
};

class SimWire {
 public:
  explicit SimWire(const SimWireConfig& config = {});
  ~SimWire();  // frees frames still on the wire, then the pools it created
  SimWire(const SimWire&) = delete;
  SimWire& operator=(const SimWire&) = delete;

  // Control path, before the first burst on any port.  Needs a running
  // EAL when the wire creates the port's pool.
  Result<SimPort*> add_port(const SimPortConfig& config = {});
  size_t port_count() const noexcept { return ports_.size(); }
  SimPort& port(size_t i) noexcept { return *ports_[i]; }

  WireClock& clock() noexcept { return clock_; }

  // Faults.  Each call replaces the spec of the links it names; frames a
  // link was holding back are sent on first.  spec.dir matters only to
  // set_port_faults: tx = links leaving the port, rx = links entering it.
  // set_all_faults also applies to ports added later.
  Status set_link_faults(const SimPort& from, const SimPort& to, const FaultSpec& spec);
  Status set_port_faults(const SimPort& port, const FaultSpec& spec);
  Status set_all_faults(const FaultSpec& spec);

  void set_link_up(SimPort& port, bool up);

  // What the faults did on one link (injector counters plus the link's
  // own down_dropped/no_mbuf), and on the whole wire (every link, plus
  // frames dropped at a sender whose link was down, in down_dropped).
  FaultCounters link_counters(const SimPort& from, const SimPort& to) const;
  FaultCounters counters() const;
  // Frames queued or held back anywhere on the wire.
  uint32_t in_flight() const;

 private:
  friend class SimPort;
  struct Link {
    mutable std::mutex mu;
    FaultInjector faults;
    DelayQueue queue;
    FaultCounters counters;  // link-level events: down_dropped, no_mbuf (flood copies)
  };

  Link& link(size_t from, size_t to) const noexcept { return *links_[from * config_.max_ports + to]; }
  uint64_t stream(size_t from, size_t to) const noexcept;
  Status configure_link(size_t from, size_t to, const FaultSpec& spec);
  Status create_links(size_t index);

  // Data path (called by SimPort).
  void note_started() noexcept {  // read first: no store, no cache-line traffic, once set
    if (!started_.load(std::memory_order_relaxed)) started_.store(true, std::memory_order_relaxed);
  }
  bool deliver(size_t from, rte_mbuf* m, uint64_t now_ns) noexcept;
  void enqueue(size_t from, size_t to, rte_mbuf* m, uint64_t now_ns) noexcept;
  uint16_t receive(size_t from, size_t to, rte_mbuf** out, uint16_t n, uint64_t now_ns) noexcept;
  void flood(size_t from, rte_mbuf* m, uint64_t now_ns) noexcept;
  uint64_t rx_dropped(size_t to) const;

  const SimWireConfig config_;
  WireClock clock_;
  std::vector<std::unique_ptr<SimPort>> ports_;
  std::vector<std::unique_ptr<Link>> links_;  // max_ports × max_ports, [from][to]
  std::optional<FaultSpec> all_faults_;
  std::atomic<bool> started_{false};
};

}  // namespace uroce::drivers::sim
