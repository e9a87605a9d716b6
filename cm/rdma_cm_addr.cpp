// The rdma_cm model's addresses (rdma_cm.hpp): which device an address
// or a destination means, binding (ports, conflicts), address and route
// resolution, loopback addresses as Linux's rdma_cm treats them.
#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cm/rdma_cm.hpp"
#include "cm/rdma_cm_internal.hpp"
#include "lib/util/log.hpp"

namespace uroce::cm {

using namespace detail;

// ---- addresses -------------------------------------------------------------------------

RdmaDev* RdmaCm::dev_for_addr(const IpAddr& ip) {
  if (is_loopback(ip)) {  // the first device with an address (Linux: the first active port)
    for (auto& d : devs_)
      if (!d->cfg.addresses.empty()) return d.get();
    return nullptr;
  }
  for (auto& d : devs_)
    for (const RdmaCmAddr& a : d->cfg.addresses)
      if (a.ip == ip) return d.get();
  return nullptr;
}

// The device that reaches `dst`: one with an address in its subnet
// (preferring one that does not own dst itself, so two devices of one
// process talk over their wire), else the first with an address of its
// family.
RdmaDev* RdmaCm::dev_for_dst(const IpAddr& dst, const RdmaDev* prefer_not_owner) {
  RdmaDev* owner = nullptr;
  for (auto& d : devs_) {
    for (const RdmaCmAddr& a : d->cfg.addresses) {
      if (!in_subnet(dst, a)) continue;
      if (d.get() == prefer_not_owner || std::any_of(d->cfg.addresses.begin(), d->cfg.addresses.end(),
                                                      [&](const RdmaCmAddr& x) { return x.ip == dst; })) {
        if (owner == nullptr) owner = d.get();
        continue;
      }
      return d.get();
    }
  }
  if (owner != nullptr) return owner;
  for (auto& d : devs_)
    for (const RdmaCmAddr& a : d->cfg.addresses)
      if (a.ip.is_v4() == dst.is_v4()) return d.get();
  return nullptr;
}

// The address whose GID stands for `ip` on `d`: `ip` itself, or for a
// loopback address the device's first address of that family (else its
// first address).
IpAddr RdmaCm::gid_ip(const RdmaDev& d, const IpAddr& ip) {
  if (!is_loopback(ip) || d.cfg.addresses.empty()) return ip;
  for (const RdmaCmAddr& a : d.cfg.addresses)
    if (a.ip.is_v4() == ip.is_v4()) return a.ip;
  return d.cfg.addresses.front().ip;
}

int RdmaCm::bind_locked(RdmaId* id, const sockaddr* addr) {
  const auto ip = ip_of(addr);
  if (!ip) return addr == nullptr ? EINVAL : EAFNOSUPPORT;
  const bool wild = binds_any(*ip);
  RdmaDev* d = nullptr;
  if (!wild && (d = dev_for_addr(*ip)) == nullptr) return EADDRNOTAVAIL;
  uint16_t port = port_of(addr);
  const int ps = id->ps;
  auto covers = [](const RdmaId* a, const IpAddr& aip, const IpAddr& bip) {
    // a's binding overlaps b's address through a wildcard: a binds any
    // address of b's family (an IPv6 one covers IPv4 unless AFONLY).
    if (!binds_any(aip)) return false;
    if (aip.is_v4() == bip.is_v4()) return true;
    return !aip.is_v4() && !a->afonly;
  };
  // Linux's cma_check_port: the same address twice is EADDRINUSE; an
  // overlap through a wildcard (or loopback) binding is EADDRNOTAVAIL.
  auto conflict = [&](uint16_t p) -> int {
    auto it = ports_.find({ps, p});
    if (it == ports_.end()) return 0;
    for (const RdmaId* o : it->second) {
      const auto oip = ip_of(sa(o->src));
      if (!oip) continue;
      const bool same = *oip == *ip;
      if (!same && !covers(o, *oip, *ip) && !covers(id, *ip, *oip)) continue;
      // SO_REUSEADDR-like: two non-listening ids may share a port.
      if (id->reuseaddr && o->reuseaddr && o->state != RdmaIdState::Listen) continue;
      return same ? EADDRINUSE : EADDRNOTAVAIL;
    }
    return 0;
  };
  const auto token = reinterpret_cast<uint64_t>(id);
  if (port == 0 && arbiter_.bind) {
    // A port no process of the host holds (the daemon's port space).
    if (const int rc = arbiter_.bind(token, ps, *ip, 0, id->reuseaddr, id->afonly, &port); rc != 0) return rc;
  } else if (port == 0) {
    const uint32_t span = kEphemeralHigh - kEphemeralLow + 1;
    uint32_t tries = 0;
    do {
      port = static_cast<uint16_t>(kEphemeralLow + (next_port_++ % span));
    } while (ports_.count({ps, port}) != 0 && ++tries < span);
    if (tries >= span) return EADDRINUSE;
  } else if (const int rc = conflict(port); rc != 0) {
    return rc;
  } else if (arbiter_.bind) {
    // Our own ids agree; the other processes' too?
    uint16_t granted = 0;
    if (const int rc2 = arbiter_.bind(token, ps, *ip, port, id->reuseaddr, id->afonly, &granted); rc2 != 0) return rc2;
  }
  ports_[{ps, port}].push_back(id);
  set_sockaddr(id->src, *ip, port);
  id->bound = true;
  id->dev = d;
  id->verbs = d != nullptr ? d->cfg.verbs : nullptr;
  step(*id, RdmaIdInput::Bind);
  if (trace_on(TraceCat::Conn)) trace_addr(id, "bound to", *ip, port, d == nullptr ? " (every device)" : "");
  return 0;
}

void RdmaCm::unbind_locked(RdmaId* id) {
  if (!id->bound) return;
  if (arbiter_.unbind) arbiter_.unbind(reinterpret_cast<uint64_t>(id));
  const uint16_t port = port_of(sa(id->src));
  auto it = ports_.find({id->ps, port});
  if (it != ports_.end()) {
    std::erase(it->second, id);
    if (it->second.empty()) ports_.erase(it);
  }
  id->bound = false;
}

void RdmaCm::set_port_arbiter(PortArbiter a) {
  std::lock_guard lock(mu_);
  arbiter_ = std::move(a);
}

int RdmaCm::bind_addr(RdmaId* id, const sockaddr* addr) {
  std::lock_guard lock(mu_);
  if (id == nullptr || ids_.count(id) == 0) return EINVAL;
  if (!rdma_id_allows(id->state, RdmaIdInput::Bind)) return EINVAL;
  return bind_locked(id, addr);
}

int RdmaCm::resolve_addr(RdmaId* id, const sockaddr* src, const sockaddr* dst, int timeout_ms) {
  const auto dip = ip_of(dst);
  if (!dip) return dst == nullptr ? EINVAL : EAFNOSUPPORT;
  if (trace_on(TraceCat::Conn)) trace_addr(id, "resolving", *dip, port_of(dst), "");
  RdmaDev* d = nullptr;
  {
    std::lock_guard lock(mu_);
    if (id == nullptr || ids_.count(id) == 0) return EINVAL;
    if (id->state == RdmaIdState::Idle) {
      sockaddr_storage any{};
      if (src == nullptr || src->sa_family == AF_UNSPEC) {
        set_sockaddr(any, dip->is_v4() ? IpAddr::v4(0) : IpAddr{}, 0);
        src = sa(any);
      }
      if (const int rc = bind_locked(id, src); rc != 0) return rc;
    } else if (!rdma_id_allows(id->state, RdmaIdInput::ResolveAddr)) {
      return EINVAL;
    }
    d = id->dev != nullptr ? id->dev : is_loopback(*dip) ? dev_for_addr(*dip) : dev_for_dst(*dip, nullptr);
    const uint16_t sport = port_of(sa(id->src));
    id->dst = {};
    std::memcpy(&id->dst, dst, sockaddr_len(dst));
    id->route_valid = false;
    if (d == nullptr) {  // no device reaches that family
      RdmaEvent ev;
      ev.type = RDMA_CM_EVENT_ADDR_ERROR;
      ev.status = -ENETUNREACH;
      step(*id, RdmaIdInput::ResolveAddr);
      step(*id, RdmaIdInput::AddrError);
      queue_event(id, ev);
      return 0;
    }
    // Our source address: the bound one, else the device's address in the
    // destination's subnet, else its first of that family.
    auto sip = ip_of(sa(id->src));
    if (!sip || binds_any(*sip) || sip->is_v4() != dip->is_v4()) {
      std::optional<IpAddr> pick;
      if (is_loopback(*dip)) pick = *dip;  // Linux: a loopback destination is its own source
      for (const RdmaCmAddr& a : d->cfg.addresses)
        if (in_subnet(*dip, a)) {
          pick = a.ip;
          break;
        }
      if (!pick)
        for (const RdmaCmAddr& a : d->cfg.addresses)
          if (a.ip.is_v4() == dip->is_v4()) {
            pick = a.ip;
            break;
          }
      if (!pick) return EADDRNOTAVAIL;
      set_sockaddr(id->src, *pick, sport);
    }
    id->dev = d;
    id->verbs = d->cfg.verbs;
    step(*id, RdmaIdInput::ResolveAddr);
  }
  const uint64_t timeout_ns = uint64_t(timeout_ms > 0 ? timeout_ms : 2000) * 1'000'000;
  on_engine(*d, [&] {
    if (id->destroyed || id->state != RdmaIdState::AddrQuery) return;
    transport::Engine& e = d->engine();
    if (is_loopback(*dip) || rnic::next_hop_known(e, dip->bytes)) {
      addr_done(*id, true, 0);
      return;
    }
    d->resolving.emplace(dip->bytes, id);
    e.timers().arm(id->addr_timer, e.now() + timeout_ns);
    e.neighbours().resolve(*dip, e.now());
  });
  return 0;
}

void RdmaCm::addr_done(RdmaId& id, bool ok, int status) {
  if (id.dev != nullptr) id.dev->engine().timers().cancel(id.addr_timer);
  RdmaEvent ev;
  ev.type = ok ? RDMA_CM_EVENT_ADDR_RESOLVED : RDMA_CM_EVENT_ADDR_ERROR;
  ev.status = status;
  if (!step(id, ok ? RdmaIdInput::AddrResolved : RdmaIdInput::AddrError)) return;
  queue_event(&id, ev);
}

void RdmaCm::on_resolved(RdmaDev& d, const IpAddr& ip, bool ok) {
  UROCE_ASSERT_ENGINE(d.engine());
  auto [lo, hi] = d.resolving.equal_range(ip.bytes);
  std::vector<RdmaId*> done;
  for (auto it = lo; it != hi; ++it) done.push_back(it->second);
  d.resolving.erase(lo, hi);
  for (RdmaId* id : done) addr_done(*id, ok, ok ? 0 : -EHOSTUNREACH);
}

void RdmaCm::on_addr_timer(Timer& t, uint64_t /*now_ns*/) {
  RdmaId& id = t.owner_as<RdmaId>();
  RdmaDev& d = *id.dev;
  RdmaCm& m = *d.model;
  m.from_engine(d, [&] {
    for (auto it = d.resolving.begin(); it != d.resolving.end();) {
      it = it->second == &id ? d.resolving.erase(it) : std::next(it);
    }
    m.addr_done(id, false, -ETIMEDOUT);
  });
}

int RdmaCm::resolve_route(RdmaId* id, int /*timeout_ms*/) {
  std::lock_guard lock(mu_);
  if (id == nullptr || ids_.count(id) == 0) return EINVAL;
  if (!rdma_id_allows(id->state, RdmaIdInput::ResolveRoute)) return EINVAL;
  auto sip = ip_of(sa(id->src));
  auto dip = ip_of(sa(id->dst));
  if (sip) sip = gid_ip(*id->dev, *sip);
  if (dip) dip = gid_ip(*id->dev, *dip);
  rnic::Rnic& r = *id->dev->cfg.rnic;
  RdmaEvent ev;
  id->sgid_index = sip ? r.find_gid(sip->bytes) : -1;
  if (!sip || !dip || id->sgid_index < 0) {
    ev.type = RDMA_CM_EVENT_ROUTE_ERROR;
    ev.status = -EADDRNOTAVAIL;
    step(*id, RdmaIdInput::RouteError);
    queue_event(id, ev);
    return 0;
  }
  // RoCE has no SA: the path is the two GIDs, the port's MTU, the TOS
  // as traffic class (Linux: cma_resolve_iboe_route).
  CmPath p;
  p.local_gid = sip->bytes;
  p.remote_gid = dip->bytes;
  p.mtu = rnic::ib_mtu_for(r.active_mtu_bytes());
  p.traffic_class = id->tos;
  p.hop_limit = 64;
  if (id->ack_timeout) p.local_ack_timeout = *id->ack_timeout;
  id->path = p;
  id->route_valid = true;
  step(*id, RdmaIdInput::ResolveRoute);
  ev.type = RDMA_CM_EVENT_ROUTE_RESOLVED;
  queue_event(id, ev);
  return 0;
}

}  // namespace uroce::cm
