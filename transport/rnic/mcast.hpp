// RoCEv2 multicast (IBA chapter 10 multicast on UD, A17.4 for the RoCEv2
// encapsulation): the group table of one RNIC — MGID -> the UD QPs attached
// to it (ibv_attach_mcast) — and the address rules a group's packets follow.
//
//   MGID       the group's IP address as a GID: IPv4 224.0.0.0/4 as
//              ::ffff:a.b.c.d (what Linux's rdma_cm gives RoCEv2), IPv6
//              ff00::/8 as itself
//   MAC        no neighbour resolution: 01:00:5e + the low 23 bits of an IPv4
//              group (RFC 1112 6.4), 33:33 + the low 32 bits of an IPv6 one
//              (RFC 2464 7)
//   receive    a UD packet with DestQP 0xFFFFFF (the multicast QPN) to a
//              group address goes to every QP attached to the group: each
//              checks its own Q_Key and consumes its own receive WQE
//              (Rnic::mcast_rx)
//
// Threads: attach/detach run inside Engine::run_sync (Rnic holds its ctl
// mutex); find() is [engine].  A group's QP list has its full capacity
// reserved when the group is made, so nothing on the receive path allocates.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "lib/wire/eth.hpp"
#include "lib/wire/ipv6.hpp"

namespace uroce::rnic {

class Qp;

// The DestQP of every multicast packet (IBA: the multicast QPN 0xFFFFFF).
inline constexpr uint32_t kMulticastQpn = 0xFFFFFF;

// IPv4 224.0.0.0/4 mapped (::ffff:224.x.y.z) or IPv6 ff00::/8 (Linux's
// rdma_is_multicast_addr).
using wire::is_multicast_gid;
// The Ethernet group address of a multicast GID; nullopt for a unicast one.
std::optional<wire::MacAddr> multicast_mac(const wire::Ipv6Addr& gid) noexcept;

struct McastGroup {
  std::vector<Qp*> qps;  // capacity kMaxMcastQpAttach, reserved at creation
};

class McastTable {
 public:
  // ibv_attach_mcast(3) / rxe: 0 (also when already attached), EINVAL for
  // a GID that is not multicast, ENOMEM past max_mcast_grp,
  // max_mcast_qp_attach or max_total_mcast_qp_attach.
  int attach(const wire::Ipv6Addr& mgid, Qp* qp);
  // 0, or EINVAL when the QP is not attached to that group.  The last QP
  // to leave removes the group.
  int detach(const wire::Ipv6Addr& mgid, Qp* qp);
  // Every group the QP is in (the QP is being destroyed).
  void detach_all(const Qp* qp);
  // The groups the QP is in.
  std::vector<wire::Ipv6Addr> groups_of(const Qp* qp) const;

  // [engine] The group, or null.
  const McastGroup* find(const wire::Ipv6Addr& mgid) const noexcept;

  size_t groups() const noexcept { return groups_.size(); }
  size_t attachments() const noexcept { return total_; }

 private:
  std::map<wire::Ipv6Addr, McastGroup> groups_;
  size_t total_ = 0;
};

}  // namespace uroce::rnic
