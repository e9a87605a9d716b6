// The rdma_cm model's multicast (rdma_join_multicast / rdma_leave_multicast),
// split from rdma_cm.cpp by role.
#include <cstring>

#include "cm/rdma_cm.hpp"
#include "cm/rdma_cm_internal.hpp"

namespace uroce::cm {
using detail::sa;

// ---- multicast ------------------------------------------------------------------------------
// Linux's rdma_cm for RoCEv2 (cma_iboe_join_multicast): no SA and no
// IGMP here; the group is the IP address itself, the join completes at
// once, and librdmacm's part (attach the id's QP unless send-only, then
// report) is done here too.

int RdmaCm::join_multicast(RdmaId* id, const sockaddr* addr, int join_flags, void* context) {
  const auto ip = ip_of(addr);
  if (!ip) return EINVAL;
  if (join_flags != RDMA_MC_JOIN_FLAG_FULLMEMBER && join_flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
    return EINVAL;
  RdmaMcast mc;
  mc.group = *ip;
  mc.mgid = ip->bytes;  // IPv4: ::ffff:a.b.c.d (RoCEv2), IPv6: the group
  mc.context = context;
  mc.send_only = join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
  rnic::Rnic* r = nullptr;
  rnic::Qp* qp = nullptr;
  RdmaEvent ev;
  {
    std::lock_guard lock(mu_);
    if (id == nullptr || ids_.count(id) == 0 || id->destroyed) return EINVAL;
    // Linux: a UD id bound to a device, address bound or resolved.
    if (id->dev == nullptr || !rdma_id_allows(id->state, RdmaIdInput::JoinMulticast) ||
        id->qp_type != IBV_QPT_UD || (id->ps != RDMA_PS_UDP && id->ps != RDMA_PS_IPOIB))
      return EINVAL;
    const auto sip = ip_of(sa(id->src));
    if (!rnic::is_multicast_gid(mc.mgid) || !sip || sip->is_v4() != ip->is_v4()) return EINVAL;
    r = id->dev->cfg.rnic;
    const int sgid = r->find_gid(sip->bytes);
    if (sgid < 0) return EINVAL;
    if (!mc.send_only) qp = id->qp;
    // param.ud as Linux reports a RoCE join (cma_make_mc_event): a global
    // AH to the MGID from the id's GID, hop limit 64 (RoCEv2), the
    // multicast QPN and the id's Q_Key (RDMA_UDP_QKEY for RDMA_PS_UDP).
    ev.type = RDMA_CM_EVENT_MULTICAST_JOIN;
    ev.ud = true;
    rdma_ud_param& u = ev.ud_param;
    u.ah_attr.is_global = 1;
    u.ah_attr.port_num = 1;
    std::memcpy(u.ah_attr.grh.dgid.raw, mc.mgid.data(), 16);
    u.ah_attr.grh.sgid_index = static_cast<uint8_t>(sgid);
    u.ah_attr.grh.hop_limit = 64;
    u.ah_attr.grh.traffic_class = id->tos;
    u.qp_num = rnic::kMulticastQpn;
    u.qkey = id->qkey;
    u.private_data = context;
    id->mcasts.push_back(mc);
  }
  // The attach runs in the engine (never under mu_).
  const int rc = qp != nullptr ? r->attach_mcast(qp, mc.mgid) : 0;
  std::lock_guard lock(mu_);
  if (ids_.count(id) == 0 || id->destroyed) return 0;
  if (rc == 0 && qp != nullptr) {
    for (RdmaMcast& m : id->mcasts)
      if (m.mgid == mc.mgid && m.context == context && !m.attached && !m.send_only) {
        m.attached = true;
        break;
      }
  }
  if (rc != 0) {  // librdmacm: a failed attach turns the join into MULTICAST_ERROR
    ev.type = RDMA_CM_EVENT_MULTICAST_ERROR;
    ev.status = -rc;
  }
  queue_event(id, ev);
  return 0;
}

int RdmaCm::leave_multicast(RdmaId* id, const sockaddr* addr) {
  const auto ip = ip_of(addr);
  if (!ip) return EINVAL;
  rnic::Rnic* r = nullptr;
  rnic::Qp* qp = nullptr;
  wire::Ipv6Addr mgid{};
  {
    std::lock_guard lock(mu_);
    if (id == nullptr || ids_.count(id) == 0 || id->destroyed) return EINVAL;
    auto it = std::find_if(id->mcasts.begin(), id->mcasts.end(), [&](const RdmaMcast& m) { return m.group == *ip; });
    if (it == id->mcasts.end()) return EADDRNOTAVAIL;  // rdma_leave_multicast(3)
    const bool attached = it->attached;
    mgid = it->mgid;
    id->mcasts.erase(it);
    // Detach unless another join of the same group still holds the QP.
    const bool still = std::any_of(id->mcasts.begin(), id->mcasts.end(),
                                   [&](const RdmaMcast& m) { return m.attached && m.mgid == mgid; });
    if (attached && !still && id->qp != nullptr && id->dev != nullptr) {
      r = id->dev->cfg.rnic;
      qp = id->qp;
    }
  }
  if (r != nullptr) r->detach_mcast(qp, mgid);
  return 0;
}

}  // namespace uroce::cm
