// QP 1 of a device uroced serves, shared by every client (issue 15;
// DESIGN.md "The shared device").  Each client runs its own IB CM (the
// in-process one, cm/cm.hpp) on its own QP 1; the daemon owns the wire's
// QP 1 and carries each CM message to the CM it belongs to:
//
//   in (from the wire or another client)
//     REQ, SIDR_REQ   the listener's client: rdma_cm's service ID gives the
//                     port space and port, the rdma_cm header in the
//                     private data the destination address (PortSpace)
//     REP RTU MRA REJ DREQ DREP LAP APR
//                     the client whose Local Communication ID the message
//                     names as its Remote Communication ID
//     SIDR_REP        the client that sent the SIDR_REQ (Request ID)
//     anything else   the daemon's own CM: it rejects a REQ for a service
//                     nobody listens on ("invalid service ID", as ib_cm;
//                     unless a program ended its listener there moments
//                     ago: then nobody, for the peer's retry),
//                     answers DREQs for connections that ended, and ends the
//                     connections of clients that went away
//   out (from a client's QP 1)
//     only CM messages, and only for what is the client's: a REQ or REP
//     names one of its QPs; every later message names one of its
//     communication IDs, or answers a request the daemon gave it
//
// The router keeps, per connection, what it saw pass (the ids, the peer,
// both QPNs, how far it got), so that when a client goes away — exits, is
// killed — the daemon sends what its CM would have: a DREQ for a connection
// that was up (the daemon's CM takes it over: retries, DREP, TimeWait), a
// DREP for a DREQ it had not answered, a REJ for a REQ it had not
// answered.  The peers' programs end at once instead of after their
// retries.
//
// What a sender can make the router keep is bounded (kMaxConnections,
// kMaxPending); records of ended connections and unanswered requests
// expire.
//
// Threads: the device's engine.  Pure over the MAD bytes (tests drive it
// with hand-made MADs).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "cm/msg.hpp"
#include "lib/util/counters.hpp"
#include "lib/wire/ipv6.hpp"
#include "transport/neigh.hpp"

namespace uroce::daemon {

using ClientId = uint64_t;
inline constexpr ClientId kDaemonCm = 0;         // the daemon's own CM
inline constexpr ClientId kNoOne = ~ClientId{0};  // nobody: dropped unanswered (counted)

#define UROCE_CM_ROUTER_COUNTERS(X)                                                          \
  X(in_routed, "CM messages carried to a client's CM")                                       \
  X(in_to_daemon, "CM messages for the daemon's own CM (no listener, unknown ids, taken-over connections)") \
  X(in_not_cm, "MADs of another management class (to the daemon's GSI)")                    \
  X(in_held_relisten, "requests for a port whose listener ended moments ago, left for the peer's retry") \
  X(out_passed, "CM messages a client sent")                                                 \
  X(out_refused_not_cm, "refused: a client sent a MAD that is not a CM message")            \
  X(out_refused_qpn, "refused: a REQ/REP naming a QP the client does not own")               \
  X(out_refused_id, "refused: a message naming a communication ID that is not the client's") \
  X(out_refused_collision, "refused: a new communication ID another client holds")           \
  X(out_refused_full, "refused: the connection table is full")                               \
  X(farewell_dreqs, "connections of departed clients ended with a DREQ")                   \
  X(farewell_dreps, "DREQs of departed clients answered with a DREP")                      \
  X(farewell_rejs, "REQs to departed clients answered with a REJ")                         \
  X(expired, "records of ended connections and unanswered requests dropped")

UROCE_COUNTER_ENUM(CmRouterCtr, UROCE_CM_ROUTER_COUNTERS)
using CmRouterCounters = CounterSet<CmRouterCtr, kCmRouterCtrInfo>;

class CmRouter {
 public:
  static constexpr size_t kMaxConnections = 65536;
  static constexpr size_t kMaxPending = 16384;
  // An ended connection (DREP, REJ seen) is forgotten this long after; an
  // unanswered request likewise (the peer's retries are over by then).
  static constexpr uint64_t kLingerNs = 60'000'000'000;

  struct Hooks {
    // The client listening for rdma_cm requests to (port space, port) at
    // `dst`; nullopt: nobody.
    std::function<std::optional<ClientId>(int ps, uint16_t port, const transport::IpAddr& dst)> listener;
    // Whether `client` owns QP `qpn` on this device.
    std::function<bool(ClientId client, uint32_t qpn)> owns_qpn;
    // Whether a program ended its listener on (port space, port) moments
    // ago (PortSpace::relistening): a REQ or SIDR_REQ that finds nobody
    // there is dropped for the peer's retry, not rejected.  Empty: never.
    std::function<bool(int ps, uint16_t port)> relistening;
  };

  explicit CmRouter(Hooks hooks) : hooks_(std::move(hooks)) {}

  // A MAD (256 bytes) from `peer` for QP 1: the client it goes to,
  // kDaemonCm, or kNoOne (drop it).
  ClientId route_in(const wire::Ipv6Addr& peer, std::span<const uint8_t> mad, uint64_t now_ns);

  enum class Verdict : uint8_t { Pass, NotCm, NotOwnQp, NotOwnId, Collision, Full };
  // A MAD `client` sends from its QP 1 to `peer`: whether it may go.
  Verdict check_out(ClientId client, const wire::Ipv6Addr& peer, std::span<const uint8_t> mad, uint64_t now_ns);

  // What to send for a client that went away.
  struct Farewell {
    enum class Kind : uint8_t { Disconnect, Drep, RejectReq } kind{};
    uint32_t local_id = 0;       // the client's communication ID (0: none, a REJ to a REQ)
    uint32_t remote_id = 0;
    uint64_t remote_ca_guid = 0;
    wire::Ipv6Addr peer{};
    uint32_t local_qpn = 0;
    uint32_t remote_qpn = 0;
    uint64_t tid = 0;            // Drep: the DREQ's; RejectReq: the REQ's
  };
  // Every connection and request of `client`, as farewells; its records
  // pass to the daemon's CM (what arrives for them later goes there).
  std::vector<Farewell> client_gone(ClientId client, uint64_t now_ns);

  // Records of ended connections and unanswered requests past kLingerNs.
  void expire(uint64_t now_ns);

  size_t connections() const noexcept { return conns_.size(); }
  size_t pending() const noexcept { return pending_.size() + sidr_in_.size() + sidr_out_.size(); }
  const CmRouterCounters& counters() const noexcept { return ctr_; }

 private:
  enum class Phase : uint8_t { ReqSent, RepSent, RepRcvd, Established, DreqSent, DreqRcvd, Ended };
  struct Conn {
    ClientId owner = kDaemonCm;
    uint32_t remote_id = 0;
    uint64_t remote_ca_guid = 0;
    wire::Ipv6Addr peer{};
    uint32_t local_qpn = 0;
    uint32_t remote_qpn = 0;
    Phase phase = Phase::ReqSent;
    uint64_t dreq_tid = 0;  // the peer's DREQ (DreqRcvd)
    uint64_t touched_ns = 0;
  };
  // A request the router gave a client, not yet answered: by the peer and
  // its id (communication ID / SIDR request ID).
  struct Pending {
    ClientId client = kDaemonCm;
    uint32_t peer_qpn = 0;
    uint64_t peer_ca_guid = 0;
    uint64_t tid = 0;
    uint64_t at_ns = 0;
  };
  using PeerKey = std::pair<wire::Ipv6Addr, uint32_t>;

  ClientId route_req(const wire::Ipv6Addr& peer, std::span<const uint8_t> body, uint64_t tid, uint64_t now_ns);
  ClientId route_sidr_req(const wire::Ipv6Addr& peer, std::span<const uint8_t> body, uint64_t now_ns);
  ClientId route_by_id(uint32_t our_id, wire::CmAttr attr, std::span<const uint8_t> body, uint64_t tid,
                       uint64_t now_ns);
  // A REQ or SIDR_REQ's listener (rdma_cm service IDs only).
  std::optional<ClientId> listener_for(uint64_t service_id, std::span<const uint8_t> pdata) const;
  // Nobody listens for `service_id`: kNoOne while its port is relistening, else kDaemonCm.
  ClientId nobody_for(uint64_t service_id);
  Verdict out_new_id(ClientId client, uint32_t id, const Conn& c, uint64_t now_ns);
  Conn* own_conn(ClientId client, uint32_t id) noexcept;

  Hooks hooks_;
  std::unordered_map<uint32_t, Conn> conns_;  // by the client's local communication ID
  std::map<PeerKey, Pending> pending_;        // REQs given to clients, unanswered
  std::map<PeerKey, Pending> sidr_in_;        // SIDR_REQs given to clients, unanswered
  std::unordered_map<uint32_t, Pending> sidr_out_;  // SIDR_REQs clients sent, by request ID
  CmRouterCounters ctr_;
};

}  // namespace uroce::daemon
