// uroced's data path for one device (issue 15; DESIGN.md "The shared
// device"): what the daemon does between its port and the clients'
// shared rings (drivers/daemon/shm_ring.hpp).  Each client runs its own
// RNIC; the switch carries its frames and keeps every client to its own.
//
//   from the port (the engine's RoceSink: RoCEv2 to our addresses, parsed)
//     DestQP 1          the CM message's client, or the daemon's own CM
//                       (CmRouter); its ICRC checked first
//     DestQP 0xFFFFFF   a copy to every client with a QP in the group
//     any other         the client that owns the QPN (QpnSpace), else
//                       dropped (drop_unknown_qpn)
//   from a client (the engine's turn hook: each client's TX ring, a budget
//   per turn so that one client cannot starve the others)
//     ARP request / NS  answered for the client (the daemon's neighbour
//                       table resolves it once for every client)
//     RoCEv2            checked, then sent as the engine sends its own
//                       frames (send_to: the wire, or back to the switch
//                       when the destination is one of our addresses):
//                       - the source address is one of the device's;
//                       - UD: the DETH's source QP is the client's, a
//                         controlled Q_Key only for a client with
//                         CAP_NET_RAW; from QP 1 only CM messages the
//                         router lets pass;
//                       - RC, UC, XRC: the destination is one a QP of the
//                         client claimed at RTR (a claim record in its
//                         ring); a remote destination is claimed by one
//                         client at a time; a local one (a QP of this
//                         device) only when that QP's own claim names a QP
//                         of the sender;
//                       - multicast: from one of the client's UD QPs.
//     records           claims, multicast membership (in ring order)
//   Anything else is dropped and counted, per reason.  A ring whose
//   indexes or records cannot be (a hostile or broken client) ends that
//   client (`violation`).
//
// Threads: the device's engine runs rx_burst and the turn; the control
// calls (attach, detach, QPNs, snapshots) come from the daemon's control
// thread and do their table work inside the loop (Engine::run_sync), their
// slow work (the shared region, its mapping) outside it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/cm_router.hpp"
#include "daemon/port_space.hpp"
#include "daemon/qpn_space.hpp"
#include "drivers/daemon/shm_ring.hpp"
#include "drivers/result.hpp"
#include "lib/util/counters.hpp"
#include "transport/device.hpp"

namespace uroce::cm {
class DeviceCm;
}

namespace uroce::daemon {

#define UROCE_SWITCH_COUNTERS(X)                                                                  \
  X(rx_to_client, "frames from the port (or looped back) handed to a client")                    \
  X(rx_mcast_copies, "multicast copies handed to clients")                                       \
  X(rx_gsi_to_daemon, "QP 1 packets for the daemon's own CM")                                    \
  X(drop_unknown_qpn, "dropped: a packet for a QPN no client owns")                              \
  X(drop_icrc, "dropped: a QP 1 packet whose ICRC does not verify")                              \
  X(drop_gsi_malformed, "dropped: a QP 1 packet that is not a UD SEND of a whole MAD")           \
  X(drop_mcast_no_member, "dropped: a multicast packet for a group no client is in")             \
  X(drop_rx_ring_full, "dropped: the client's receive ring was full")                            \
  X(tx_frames, "frames clients sent (to the wire or to another client)")                         \
  X(tx_bytes, "bytes clients sent")                                                              \
  X(tx_refused_not_roce, "refused: a client frame that is neither RoCEv2 nor ARP/ND to resolve") \
  X(tx_refused_src_ip, "refused: RoCEv2 from an address that is not the device's")              \
  X(tx_refused_opcode, "refused: an opcode the switch does not carry")                           \
  X(tx_refused_src_qpn, "refused: UD from a QP the client does not own")                        \
  X(tx_refused_qkey, "refused: a controlled Q_Key from a client without CAP_NET_RAW")           \
  X(tx_refused_path, "refused: RC/UC/XRC to a destination no QP of the client claimed")         \
  X(tx_refused_mad, "refused: a QP 1 packet the CM router did not let pass")                    \
  X(tx_no_mbuf, "dropped: no buffer to carry a client's frame")                                  \
  X(arp_answered, "ARP requests of clients answered")                                            \
  X(nd_answered, "neighbour solicitations of clients answered")                                  \
  X(neigh_waits, "client resolutions that waited for the daemon's own ARP/ND")                  \
  X(claims, "paths claimed by clients' QPs")                                                     \
  X(claims_refused, "claims refused: another client's QP holds that remote QP")                 \
  X(mcast_joins, "multicast groups clients joined")                                              \
  X(ring_violations, "clients ended for rings or records that cannot be")

UROCE_COUNTER_ENUM(SwitchCtr, UROCE_SWITCH_COUNTERS)
using SwitchCounters = CounterSet<SwitchCtr, kSwitchCtrInfo>;

// A path: a GID and a QPN on it.
struct PathKey {
  wire::Ipv6Addr gid{};
  uint32_t qpn = 0;
  friend bool operator==(const PathKey&, const PathKey&) = default;
};
struct PathKeyHash {
  size_t operator()(const PathKey& k) const noexcept;
};

// One client on this device.  Engine-owned once attached.
struct Attachment {
  ClientId client = 0;
  bool privileged = false;  // CAP_NET_RAW: controlled Q_Keys
  // In the daemon's scheduling group (cgroups and autogroup): only then
  // does the engine poll for it while it spins (busy polling's sched_yield
  // hands the CPU over only within a group).
  bool same_group = false;
  void* base = nullptr;     // the shared region, mapped
  size_t bytes = 0;
  drivers::daemon::ShmGeometry geo{};
  drivers::daemon::ShmRings rings;
  drivers::daemon::ShmHeader* hdr = nullptr;
  int wake_fd = -1;  // we write it (the client sleeps on it)
  int kick_fd = -1;  // the client writes it
  uint32_t qpns = 0;                                  // QPNs it owns here
  std::unordered_map<uint32_t, PathKey> claims;       // by its QPN
  std::map<wire::Ipv6Addr, uint32_t> groups;          // multicast groups it is in (join count)
  bool rx_dirty = false;                              // RX slots filled, not yet published
  bool ended = false;                                 // a violation: no more of its frames
  uint32_t seen_polls = 0;                            // its client_polls as last seen
  uint64_t active_until = 0;                          // it spins on a CQ until about then (busy polling)
  // Per-client counters (engine-written, relaxed).
  std::atomic<uint64_t> rx_frames{0}, rx_dropped{0}, tx_frames{0}, tx_refused{0};
};

class Switch final : public transport::RoceSink {
 public:
  struct Config {
    uint64_t qpn_quarantine_ns = 60'000'000'000;  // 60 s: longer than any CM TimeWait of ours or Linux's
    uint32_t per_client_qpns = 32768;
    uint32_t tx_budget = 64;                      // frames per client per turn
    uint64_t seed = 0;                            // QPN draws; 0: random
    // Poll instead of sleeping while a client's application spins on a
    // CQ (drivers/daemon/shm_ring.hpp, busy polling).  False: sleep
    // whenever idle (uroced --no-busy-poll).
    bool busy_poll = true;
  };

  // The switch over `dev`: it becomes the engine's RoceSink and turn
  // hook (installed inside the loop); QP 1 packets for the daemon go to
  // `dev`'s RNIC, where `cm` (the daemon's DeviceCm on it) takes them.
  // `violation` is called from the engine when a client must be ended.
  Switch(transport::Device& dev, PortSpace& ports, cm::DeviceCm& cm, Config cfg,
         std::function<void(ClientId)> violation);
  ~Switch() override;
  Switch(const Switch&) = delete;
  Switch& operator=(const Switch&) = delete;

  transport::Device& device() noexcept { return dev_; }

  // ---- control (not from the engine) ----
  // A client's shared region on this device, attached; the fds for the
  // client (the region, its wake and kick eventfds) are the caller's to
  // send and close.
  struct Attached {
    Attachment* at = nullptr;
    int region_fd = -1;
    int wake_fd = -1;
    int kick_fd = -1;
  };
  drivers::Result<Attached> attach(ClientId client, bool privileged, bool same_group);
  // Ends the client here: farewells for its connections (CmRouter), its
  // QPNs into quarantine, its claims and groups gone, its region unmapped.
  void detach(Attachment* at);
  int alloc_qpn(Attachment* at, uint32_t* qpn);
  int free_qpn(Attachment* at, uint32_t qpn);

  const drivers::daemon::ShmGeometry& geometry() const noexcept { return geo_; }
  const SwitchCounters& counters() const noexcept { return ctr_; }
  const CmRouterCounters& router_counters() const noexcept { return router_.counters(); }
  // Engine-owned sizes, read inside the loop (run_sync).
  struct Sizes {
    size_t clients = 0, qpns = 0, claims = 0, groups = 0, connections = 0, pending = 0;
  };
  Sizes sizes();
  // This client's QPNs and claims here (run_sync), for `uroce qp`.
  struct QpOwned {
    uint32_t qpn = 0;
    bool claimed = false;
    PathKey path{};
  };
  std::vector<QpOwned> owned_by(Attachment* at);

  // ---- [engine] ----
  void rx_burst(transport::Engine& engine, transport::RoceRx* pkts, uint16_t n) override;
  bool mcast_member(const wire::Ipv6Addr& mgid) const noexcept override;

 private:
  unsigned turn();                                     // every client's TX ring
  unsigned drain(Attachment& at);                      // one client's, within the budget
  // [engine] Everything in a client's TX ring now, before a control
  // request of the same client (frames and requests keep their order).
  void drain_all(Attachment& at);
  void from_client(Attachment& at, rte_mbuf* m);       // one frame: check, then send
  // Whether the client may send this RoCEv2 frame to `dst`; `hop`: the
  // claim's cached next hop when the frame follows a claimed path.
  bool check_roce(Attachment& at, const uint8_t* f, const wire::PktInfo& pi, const transport::IpAddr& dst,
                  transport::NextHop*& hop);
  void record(Attachment& at, drivers::daemon::RecordKind kind, const uint8_t* p, uint32_t len);
  void resolve_for(Attachment& at, rte_mbuf* m, const wire::PktInfo& pi);
  void answer_neigh(Attachment& at, const uint8_t* req, const wire::PktInfo& pi, const transport::IpAddr& target,
                    const wire::MacAddr& mac);
  void on_resolved(const transport::IpAddr& ip, bool ok);
  bool deliver(Attachment& at, const uint8_t* frame, uint32_t len);
  void publish_rx();
  void violation(Attachment& at);
  void unclaim(Attachment& at, uint32_t qpn);
  bool own_addr(const wire::Ipv6Addr& gid) const noexcept;
  Attachment* client(ClientId id) noexcept;

  transport::Device& dev_;
  transport::Engine& engine_;
  PortSpace& ports_;
  cm::DeviceCm& cm_;
  Config cfg_;
  std::function<void(ClientId)> on_violation_;
  drivers::daemon::ShmGeometry geo_;
  SwitchCounters ctr_;
  // Engine-owned.
  std::vector<std::unique_ptr<Attachment>> clients_;
  std::unordered_map<ClientId, Attachment*> by_client_;
  QpnSpace<Attachment> qpns_;
  // A remote path some client's QPs hold: the client, how many of its QPs,
  // and where frames to it go (Engine::send_to's cache: no neighbour-table
  // lookup per frame).
  struct Holder {
    Attachment* at = nullptr;
    uint32_t refs = 0;
    transport::NextHop hop;
  };
  std::unordered_map<PathKey, Holder, PathKeyHash> claims_;  // remote path -> its holder
  std::map<wire::Ipv6Addr, std::vector<Attachment*>> groups_;
  CmRouter router_;
  // Client resolutions waiting for the daemon's ARP/ND: the target, the
  // client, the request frame (to answer in kind).
  struct NeighWait {
    ClientId client;
    std::vector<uint8_t> request;
  };
  std::multimap<wire::Ipv6Addr, NeighWait> neigh_waits_;
  std::vector<Attachment*> dirty_;  // RX published at the end of a burst
  std::vector<transport::RoceRx> to_daemon_;
  uint64_t last_expire_ns_ = 0;
  uint64_t last_link_ns_ = 0;
  // Busy polling (engine-owned): a client spun lately.
  bool any_active_ = false;
  uint64_t last_traffic_ns_ = 0;  // frames last went through
};

}  // namespace uroce::daemon
