#include "daemon/cm_router.hpp"

#include "cm/cma_hdr.hpp"

namespace uroce::daemon {

namespace {

using cm::kMadHdrSize;

std::span<const uint8_t> body_of(std::span<const uint8_t> mad) { return mad.subspan(kMadHdrSize); }

// The destination address in an rdma_cm request's private data.
std::optional<transport::IpAddr> cma_dst(std::span<const uint8_t> pdata) {
  const auto h = cm::read_cma_hdr(pdata);
  if (!h) return std::nullopt;
  transport::IpAddr ip;
  ip.bytes = h->dst;
  if (h->ip_version == 4) {
    // IPv4-mapped, as the GIDs and the port space hold it.
    ip.bytes = {};
    ip.bytes[10] = ip.bytes[11] = 0xff;
    for (int i = 12; i < 16; ++i) ip.bytes[i] = h->dst[i];
  }
  return ip;
}

}  // namespace

std::optional<ClientId> CmRouter::listener_for(uint64_t service_id, std::span<const uint8_t> pdata) const {
  if (!cm::is_cma_service_id(service_id) || !hooks_.listener) return std::nullopt;
  const auto dst = cma_dst(pdata);
  if (!dst) return std::nullopt;
  return hooks_.listener(static_cast<int>(cm::cma_port_space(service_id)), cm::cma_port(service_id), *dst);
}

ClientId CmRouter::nobody_for(uint64_t service_id) {
  if (!cm::is_cma_service_id(service_id) || !hooks_.relistening ||
      !hooks_.relistening(static_cast<int>(cm::cma_port_space(service_id)), cm::cma_port(service_id)))
    return kDaemonCm;
  ctr_.inc(CmRouterCtr::in_held_relisten);
  return kNoOne;
}

ClientId CmRouter::route_in(const wire::Ipv6Addr& peer, std::span<const uint8_t> mad, uint64_t now_ns) {
  if (mad.size() < wire::kMadSize || cm::check_cm_mad(mad) != cm::MadCheck::Ok) {
    ctr_.inc(CmRouterCtr::in_not_cm);
    return kDaemonCm;
  }
  const wire::MadHdrC h(mad.data());
  const auto b = body_of(mad);
  ClientId to = kDaemonCm;
  switch (static_cast<wire::CmAttr>(h.attr_id())) {
    case wire::CmAttr::Req: to = route_req(peer, b, h.tid(), now_ns); break;
    case wire::CmAttr::SidrReq: to = route_sidr_req(peer, b, now_ns); break;
    case wire::CmAttr::SidrRep: {
      const uint32_t rid = cm::SidrRepViewC(b.data()).request_id();
      if (auto it = sidr_out_.find(rid); it != sidr_out_.end()) {
        to = it->second.client;
        sidr_out_.erase(it);
      }
      break;
    }
    case wire::CmAttr::Mra: to = route_by_id(cm::MraViewC(b.data()).remote_comm_id(), wire::CmAttr::Mra, b, h.tid(), now_ns); break;
    case wire::CmAttr::Rej: to = route_by_id(cm::RejViewC(b.data()).remote_comm_id(), wire::CmAttr::Rej, b, h.tid(), now_ns); break;
    case wire::CmAttr::Rep: to = route_by_id(cm::RepViewC(b.data()).remote_comm_id(), wire::CmAttr::Rep, b, h.tid(), now_ns); break;
    case wire::CmAttr::Rtu: to = route_by_id(cm::RtuViewC(b.data()).remote_comm_id(), wire::CmAttr::Rtu, b, h.tid(), now_ns); break;
    case wire::CmAttr::Dreq: to = route_by_id(cm::DreqViewC(b.data()).remote_comm_id(), wire::CmAttr::Dreq, b, h.tid(), now_ns); break;
    case wire::CmAttr::Drep: to = route_by_id(cm::DrepViewC(b.data()).remote_comm_id(), wire::CmAttr::Drep, b, h.tid(), now_ns); break;
    case wire::CmAttr::Lap:
    case wire::CmAttr::Apr:
      // Both carry the receiver's communication ID at byte 4 (IBA 12.8.1, 12.8.2).
      to = route_by_id(wire::load_be<uint32_t>(b.data() + 4), static_cast<wire::CmAttr>(h.attr_id()), b, h.tid(), now_ns);
      break;
    case wire::CmAttr::ClassPortInfo:
      break;
  }
  if (to != kNoOne) ctr_.inc(to == kDaemonCm ? CmRouterCtr::in_to_daemon : CmRouterCtr::in_routed);
  return to;
}

ClientId CmRouter::route_req(const wire::Ipv6Addr& peer, std::span<const uint8_t> b, uint64_t tid, uint64_t now_ns) {
  const cm::ReqViewC req(b.data());
  const PeerKey key{peer, req.local_comm_id()};
  // A REQ sent again: where the first one went, while that client has not
  // answered or its connection lives.
  if (auto it = pending_.find(key); it != pending_.end()) return it->second.client;
  const auto l = listener_for(req.service_id(), req.private_data());
  if (!l) return nobody_for(req.service_id());
  if (pending_.size() >= kMaxPending) expire(now_ns);
  if (pending_.size() >= kMaxPending) return kDaemonCm;  // its retry finds room, or the peer gives up
  // The REQ names the active side's QP in Local QPN for XRC too (its REP
  // names the receive QP in Local EECN: annex A14, as ib_cm).
  pending_[key] = Pending{*l, req.local_qpn(), req.local_ca_guid(), tid, now_ns};
  return *l;
}

ClientId CmRouter::route_sidr_req(const wire::Ipv6Addr& peer, std::span<const uint8_t> b, uint64_t now_ns) {
  const cm::SidrReqViewC req(b.data());
  const PeerKey key{peer, req.request_id()};
  if (auto it = sidr_in_.find(key); it != sidr_in_.end()) return it->second.client;
  const auto l = listener_for(req.service_id(), req.private_data());
  if (!l) return nobody_for(req.service_id());
  if (sidr_in_.size() >= kMaxPending) expire(now_ns);
  if (sidr_in_.size() >= kMaxPending) return kDaemonCm;
  sidr_in_[key] = Pending{*l, 0, 0, 0, now_ns};
  return *l;
}

ClientId CmRouter::route_by_id(uint32_t our_id, wire::CmAttr attr, std::span<const uint8_t> b, uint64_t tid,
                               uint64_t now_ns) {
  auto it = conns_.find(our_id);
  if (it == conns_.end()) return kDaemonCm;
  Conn& c = it->second;
  c.touched_ns = now_ns;
  switch (attr) {
    case wire::CmAttr::Rep: {
      const cm::RepViewC rep(b.data());
      c.remote_id = rep.local_comm_id();
      c.remote_ca_guid = rep.local_ca_guid();
      // XRC: the QPN is the EECN field's (annex A14); a QPN is one either way.
      c.remote_qpn = rep.local_qpn() != 0 ? rep.local_qpn() : rep.local_eecn();
      if (c.phase == Phase::ReqSent) c.phase = Phase::RepRcvd;
      break;
    }
    case wire::CmAttr::Rtu:
      // The passive side's connection is up: the REQ it answered is settled.
      if (c.phase == Phase::RepSent) c.phase = Phase::Established;
      pending_.erase({c.peer, c.remote_id});
      break;
    case wire::CmAttr::Dreq:
      if (c.phase != Phase::Ended) {
        c.phase = Phase::DreqRcvd;
        c.dreq_tid = tid;
      }
      break;
    case wire::CmAttr::Drep:
    case wire::CmAttr::Rej:
      c.phase = Phase::Ended;
      pending_.erase({c.peer, c.remote_id});
      break;
    case wire::CmAttr::Mra:
    case wire::CmAttr::Lap:
    case wire::CmAttr::Apr:
    case wire::CmAttr::Req:
    case wire::CmAttr::SidrReq:
    case wire::CmAttr::SidrRep:
    case wire::CmAttr::ClassPortInfo:
      break;
  }
  return c.owner;
}

CmRouter::Conn* CmRouter::own_conn(ClientId client, uint32_t id) noexcept {
  auto it = conns_.find(id);
  return it != conns_.end() && it->second.owner == client ? &it->second : nullptr;
}

CmRouter::Verdict CmRouter::out_new_id(ClientId client, uint32_t id, const Conn& c, uint64_t now_ns) {
  auto it = conns_.find(id);
  if (it != conns_.end()) {
    if (it->second.owner != client) return Verdict::Collision;
    // The same connection again (a retransmission), or the client reused an
    // id of its own that ended: take the new facts.
    const Phase keep = it->second.phase;
    it->second = c;
    if (keep != Phase::Ended && keep > c.phase) it->second.phase = keep;
    it->second.touched_ns = now_ns;
    return Verdict::Pass;
  }
  if (conns_.size() >= kMaxConnections) expire(now_ns);
  if (conns_.size() >= kMaxConnections) return Verdict::Full;
  Conn n = c;
  n.touched_ns = now_ns;
  conns_.emplace(id, n);
  return Verdict::Pass;
}

CmRouter::Verdict CmRouter::check_out(ClientId client, const wire::Ipv6Addr& peer, std::span<const uint8_t> mad,
                                      uint64_t now_ns) {
  auto verdict = [&](Verdict v) {
    switch (v) {
      case Verdict::Pass: ctr_.inc(CmRouterCtr::out_passed); break;
      case Verdict::NotCm: ctr_.inc(CmRouterCtr::out_refused_not_cm); break;
      case Verdict::NotOwnQp: ctr_.inc(CmRouterCtr::out_refused_qpn); break;
      case Verdict::NotOwnId: ctr_.inc(CmRouterCtr::out_refused_id); break;
      case Verdict::Collision: ctr_.inc(CmRouterCtr::out_refused_collision); break;
      case Verdict::Full: ctr_.inc(CmRouterCtr::out_refused_full); break;
    }
    return v;
  };
  if (mad.size() < wire::kMadSize || cm::check_cm_mad(mad) != cm::MadCheck::Ok) return verdict(Verdict::NotCm);
  const wire::MadHdrC h(mad.data());
  const auto b = body_of(mad);
  auto owns = [&](uint32_t qpn) { return hooks_.owns_qpn && hooks_.owns_qpn(client, qpn); };
  switch (static_cast<wire::CmAttr>(h.attr_id())) {
    case wire::CmAttr::Req: {
      const cm::ReqViewC req(b.data());
      const uint32_t qpn = req.local_qpn();  // XRC too (annex A14: the send QP)
      if (!owns(qpn)) return verdict(Verdict::NotOwnQp);
      Conn c;
      c.owner = client;
      c.peer = peer;
      c.local_qpn = qpn;
      c.phase = Phase::ReqSent;
      return verdict(out_new_id(client, req.local_comm_id(), c, now_ns));
    }
    case wire::CmAttr::Rep: {
      const cm::RepViewC rep(b.data());
      auto p = pending_.find({peer, rep.remote_comm_id()});
      Conn* known = own_conn(client, rep.local_comm_id());
      if ((p == pending_.end() || p->second.client != client) && known == nullptr) return verdict(Verdict::NotOwnId);
      const uint32_t qpn = rep.local_qpn() != 0 ? rep.local_qpn() : rep.local_eecn();
      if (!owns(qpn)) return verdict(Verdict::NotOwnQp);
      Conn c;
      c.owner = client;
      c.peer = peer;
      c.remote_id = rep.remote_comm_id();
      c.local_qpn = qpn;
      c.phase = Phase::RepSent;
      if (p != pending_.end() && p->second.client == client) {
        c.remote_qpn = p->second.peer_qpn;
        c.remote_ca_guid = p->second.peer_ca_guid;
      } else if (known != nullptr) {
        c.remote_qpn = known->remote_qpn;
        c.remote_ca_guid = known->remote_ca_guid;
      }
      const Verdict v = out_new_id(client, rep.local_comm_id(), c, now_ns);
      return verdict(v);
    }
    case wire::CmAttr::Rej: {
      const cm::RejViewC rej(b.data());
      if (Conn* c = own_conn(client, rej.local_comm_id())) {
        c->phase = Phase::Ended;
        c->touched_ns = now_ns;
        return verdict(Verdict::Pass);
      }
      // A REJ to a REQ the client was given (its CM may name no id yet).
      auto p = pending_.find({peer, rej.remote_comm_id()});
      if (p == pending_.end() || p->second.client != client) return verdict(Verdict::NotOwnId);
      pending_.erase(p);
      return verdict(Verdict::Pass);
    }
    case wire::CmAttr::Mra: {
      const cm::MraViewC mra(b.data());
      if (own_conn(client, mra.local_comm_id()) != nullptr) return verdict(Verdict::Pass);
      auto p = pending_.find({peer, mra.remote_comm_id()});
      return verdict(p != pending_.end() && p->second.client == client ? Verdict::Pass : Verdict::NotOwnId);
    }
    case wire::CmAttr::Rtu: {
      Conn* c = own_conn(client, cm::RtuViewC(b.data()).local_comm_id());
      if (c == nullptr) return verdict(Verdict::NotOwnId);
      c->phase = Phase::Established;  // the active side's connection is up
      c->touched_ns = now_ns;
      return verdict(Verdict::Pass);
    }
    case wire::CmAttr::Dreq: {
      Conn* c = own_conn(client, cm::DreqViewC(b.data()).local_comm_id());
      if (c == nullptr) return verdict(Verdict::NotOwnId);
      if (c->phase != Phase::DreqRcvd) c->phase = Phase::DreqSent;
      c->touched_ns = now_ns;
      return verdict(Verdict::Pass);
    }
    case wire::CmAttr::Drep: {
      Conn* c = own_conn(client, cm::DrepViewC(b.data()).local_comm_id());
      if (c == nullptr) return verdict(Verdict::NotOwnId);
      c->phase = Phase::Ended;
      c->touched_ns = now_ns;
      return verdict(Verdict::Pass);
    }
    case wire::CmAttr::Lap:
    case wire::CmAttr::Apr:
      // Both carry the sender's communication ID first (IBA 12.8.1, 12.8.2).
      return verdict(own_conn(client, wire::load_be<uint32_t>(b.data())) != nullptr ? Verdict::Pass
                                                                                      : Verdict::NotOwnId);
    case wire::CmAttr::SidrReq: {
      const uint32_t rid = cm::SidrReqViewC(b.data()).request_id();
      auto it = sidr_out_.find(rid);
      if (it != sidr_out_.end() && it->second.client != client) return verdict(Verdict::Collision);
      if (it == sidr_out_.end() && sidr_out_.size() >= kMaxPending) expire(now_ns);
      if (it == sidr_out_.end() && sidr_out_.size() >= kMaxPending) return verdict(Verdict::Full);
      sidr_out_[rid] = Pending{client, 0, 0, h.tid(), now_ns};
      return verdict(Verdict::Pass);
    }
    case wire::CmAttr::SidrRep: {
      auto it = sidr_in_.find({peer, cm::SidrRepViewC(b.data()).request_id()});
      if (it == sidr_in_.end() || it->second.client != client) return verdict(Verdict::NotOwnId);
      sidr_in_.erase(it);
      return verdict(Verdict::Pass);
    }
    case wire::CmAttr::ClassPortInfo:
      break;
  }
  return verdict(Verdict::NotCm);
}

std::vector<CmRouter::Farewell> CmRouter::client_gone(ClientId client, uint64_t now_ns) {
  std::vector<Farewell> out;
  for (auto& [id, c] : conns_) {
    if (c.owner != client) continue;
    c.owner = kDaemonCm;  // whatever arrives for it from now on
    c.touched_ns = now_ns;
    Farewell f;
    f.local_id = id;
    f.remote_id = c.remote_id;
    f.remote_ca_guid = c.remote_ca_guid;
    f.peer = c.peer;
    f.local_qpn = c.local_qpn;
    f.remote_qpn = c.remote_qpn;
    switch (c.phase) {
      case Phase::RepSent:
      case Phase::RepRcvd:
      case Phase::Established:
      case Phase::DreqSent:
        // Up, or as good as up for the peer (it may have sent its RTU):
        // a DREQ ends it (ib_cm takes a DREQ in REP_SENT too).
        f.kind = Farewell::Kind::Disconnect;
        ctr_.inc(CmRouterCtr::farewell_dreqs);
        out.push_back(f);
        break;
      case Phase::DreqRcvd:
        f.kind = Farewell::Kind::Drep;
        f.tid = c.dreq_tid;
        ctr_.inc(CmRouterCtr::farewell_dreps);
        out.push_back(f);
        break;
      case Phase::ReqSent:  // no answer yet: the peer's own timeouts end it
      case Phase::Ended:
        break;
    }
    c.phase = Phase::Ended;
  }
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.client != client) {
      ++it;
      continue;
    }
    Farewell f;
    f.kind = Farewell::Kind::RejectReq;
    f.peer = it->first.first;
    f.remote_id = it->first.second;
    f.remote_ca_guid = it->second.peer_ca_guid;
    f.tid = it->second.tid;
    // A REQ the client answered with a REP is in conns_ (a DREQ above); one
    // it never answered gets the REJ its CM would have sent.
    bool answered = false;
    for (const auto& [id, c] : conns_)
      if (c.remote_id == f.remote_id && c.peer == f.peer && c.remote_id != 0) answered = true;
    if (!answered) {
      ctr_.inc(CmRouterCtr::farewell_rejs);
      out.push_back(f);
    }
    it = pending_.erase(it);
  }
  std::erase_if(sidr_in_, [&](const auto& kv) { return kv.second.client == client; });
  std::erase_if(sidr_out_, [&](const auto& kv) { return kv.second.client == client; });
  return out;
}

void CmRouter::expire(uint64_t now_ns) {
  size_t n = 0;
  n += std::erase_if(conns_, [&](const auto& kv) {
    return kv.second.phase == Phase::Ended && now_ns - kv.second.touched_ns > kLingerNs;
  });
  auto old = [&](const auto& kv) { return now_ns - kv.second.at_ns > kLingerNs; };
  n += std::erase_if(pending_, old);
  n += std::erase_if(sidr_in_, old);
  n += std::erase_if(sidr_out_, old);
  if (n != 0) ctr_.add(CmRouterCtr::expired, n);
}

}  // namespace uroce::daemon
