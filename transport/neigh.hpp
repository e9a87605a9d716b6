// The neighbour table: IPv4 ARP and IPv6 neighbour discovery results,
// with retries, timeouts and a bounded queue of frames waiting for an
// address.  Pure logic: the engine sends the requests and the frames
// (through the hooks) and feeds it the replies it receives.
//
// States (RFC 4861 7.3.2, simplified the way the kernel's ARP does it):
//   Incomplete --reply--> Reachable --reachable_time--> Stale
//   Incomplete --retries exhausted--> Failed --failed_time--> (removed)
//   Stale --used--> Incomplete-style re-probe, still usable while probing
//
// Thread: the engine thread only.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "lib/util/timer_wheel.hpp"
#include "lib/wire/eth.hpp"
#include "lib/wire/ipv6.hpp"

struct rte_mbuf;

namespace uroce::transport {

// An IP address of either family; IPv4 is kept IPv4-mapped (::ffff:a.b.c.d),
// as in a RoCE GID.
struct IpAddr {
  wire::Ipv6Addr bytes{};

  static IpAddr v4(uint32_t a) noexcept;
  static IpAddr v6(const wire::Ipv6Addr& a) noexcept { return IpAddr{a}; }
  bool is_v4() const noexcept;
  uint32_t as_v4() const noexcept;
  friend bool operator==(const IpAddr&, const IpAddr&) = default;
};

struct IpAddrHash {
  size_t operator()(const IpAddr& a) const noexcept;
};

// Engine::send_to's memory of one path's destination, kept by the path's
// owner (rnic::AhAttr) and touched by the engine thread only.  Copying it
// with its path is harmless: it is checked against the destination.
struct NextHop {
  uint64_t generation = 0;  // NeighTable::generation() when filled; 0: empty
  wire::Ipv6Addr ip{};      // the destination it was filled for
  wire::MacAddr mac{};
  bool loopback = false;    // one of the device's own addresses
};

enum class NeighState : uint8_t { Incomplete, Reachable, Stale, Failed };

const char* neigh_state_name(NeighState s) noexcept;

struct NeighConfig {
  uint64_t retry_interval_ns = 1'000'000'000;    // between requests
  unsigned max_requests = 3;                     // then Failed
  uint64_t reachable_ns = 30'000'000'000;        // then Stale
  uint64_t failed_hold_ns = 3'000'000'000;       // a Failed entry answers "unreachable" this long
  unsigned max_pending = 16;                     // frames queued per unresolved neighbour
  size_t max_entries = 4096;
};

// One writer (the engine); read relaxed from any thread (telemetry).
struct NeighStats {
  std::atomic<uint64_t> requests_sent{0};
  std::atomic<uint64_t> resolved{0};
  std::atomic<uint64_t> failed{0};
  std::atomic<uint64_t> pending_dropped{0};   // queue full or resolution failed
  std::atomic<uint64_t> table_full{0};
};

class NeighTable {
 public:
  struct Hooks {
    // Send an ARP request / neighbour solicitation for `ip`.
    std::function<void(const IpAddr& ip)> send_request;
    // A queued frame can go: fill its destination MAC and transmit.
    std::function<void(rte_mbuf* m, const wire::MacAddr& mac)> release;
    // A queued frame cannot go (resolution failed): free it.
    std::function<void(rte_mbuf* m)> drop;
    // Resolution of `ip` finished (ok, or failed) — for rdma_resolve_addr.
    std::function<void(const IpAddr& ip, bool ok)> resolved;
    // Where frames to `ip` go first: the gateway of an off-link
    // destination (the kernel's route through the port's interface), or
    // nullopt for an address on the link.  Asked once, when an entry is
    // made.  Empty: every address is on the link.
    std::function<std::optional<IpAddr>(const IpAddr& ip)> next_hop;
  };

  NeighTable(TimerWheel& wheel, NeighConfig cfg, Hooks hooks);
  ~NeighTable();
  NeighTable(const NeighTable&) = delete;
  NeighTable& operator=(const NeighTable&) = delete;

  // The MAC to use for `ip` now, or nullptr.  A Stale entry is returned
  // and re-probed.
  const wire::MacAddr* lookup(const IpAddr& ip, uint64_t now_ns);

  // Send `m` to `ip`: released at once when known, else queued and a
  // request sent.  Returns false (and drops `m`) when the neighbour is
  // known to be unreachable or the table is full.
  bool send(const IpAddr& ip, rte_mbuf* m, uint64_t now_ns);

  // Start resolving without a frame (rdma_resolve_addr).
  void resolve(const IpAddr& ip, uint64_t now_ns);

  // An ARP reply or request, or an NS/NA, told us `ip` is at `mac`.
  // `solicited` is false for what we merely overheard (gratuitous ARP,
  // requests): it updates an existing entry but does not create one.
  // Every off-link entry routed through `ip` learns the same MAC.
  void learn(const IpAddr& ip, const wire::MacAddr& mac, bool solicited, uint64_t now_ns);

  // Add a permanent entry (static configuration, tests).
  void add_static(const IpAddr& ip, const wire::MacAddr& mac);

  std::optional<NeighState> state(const IpAddr& ip) const;
  // Changes whenever any entry's MAC or state changes or an entry goes
  // (never 0): a MAC copied from lookup() while the generation is unchanged
  // is still what lookup() would answer, and using it needs no re-probe
  // (a Stale entry's probe started when it was copied).  Engine::send_to's
  // per-path cache (NextHop) rests on it.
  uint64_t generation() const noexcept { return generation_.load(std::memory_order_acquire); }
  // Any thread (a worker lcore, transport/lcores.hpp): the MAC of a
  // Reachable entry, else nullopt (a Stale one is re-probed by the owner's
  // lookup, which the worker leaves to lcore 0); `failed` (optional): the
  // entry is Failed (send refuses the frame at once).  Every other member
  // is the owning engine's; the owner changes entries and their MAC or
  // state under peek_mu_, so that this read sees each entry whole.
  std::optional<wire::MacAddr> peek(const IpAddr& ip, bool* failed = nullptr) const;
  size_t size() const noexcept { return size_.load(std::memory_order_relaxed); }  // any thread
  const NeighStats& stats() const noexcept { return stats_; }

 private:
  struct Entry;
  Entry* find(const IpAddr& ip) const;
  Entry* create(const IpAddr& ip, uint64_t now_ns);
  void probe(Entry& e, uint64_t now_ns);
  void on_timer(Entry& e, uint64_t now_ns);
  void fail(Entry& e, uint64_t now_ns);
  void flush_pending(Entry& e);
  void set_reachable(Entry& e, const wire::MacAddr& mac, uint64_t now_ns);

  TimerWheel& wheel_;
  NeighConfig cfg_;
  Hooks hooks_;
  std::unordered_map<IpAddr, std::unique_ptr<Entry>, IpAddrHash> entries_;
  NeighStats stats_;
  std::atomic<size_t> size_{0};  // entries_.size(), for other threads
  size_t routed_ = 0;             // entries whose next hop is a gateway
  void bump() noexcept { generation_.store(generation_.load(std::memory_order_relaxed) + 1, std::memory_order_release); }
  std::atomic<uint64_t> generation_{1};
  mutable std::mutex peek_mu_;
};

}  // namespace uroce::transport
