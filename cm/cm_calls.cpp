// The CM's receive path (a MAD to its connection, or to a listener),
// its consumer calls and the QP attributes it hands out (cm.hpp); the
// state machine itself is cm.cpp's.  Rule references as in cm.cpp.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cm/cm.hpp"
#include "cm/cm_internal.hpp"
#include "lib/util/log.hpp"

namespace uroce::cm {

using detail::body_of;
using detail::copy_in;
using detail::tid_of;

// ---- the receive path ------------------------------------------------------------

void Cm::on_mad(const MadAddr& from, std::span<const uint8_t> mad) {
  ctr_.inc(CmCtr::rx_mads);
  switch (check_cm_mad(mad)) {
    case MadCheck::Ok: break;
    case MadCheck::Short: ctr_.inc(CmCtr::rx_short); return;
    case MadCheck::BadBaseVersion: ctr_.inc(CmCtr::rx_bad_base_version); return;
    case MadCheck::NotCm: ctr_.inc(CmCtr::rx_not_cm); return;
    case MadCheck::BadClassVersion: ctr_.inc(CmCtr::rx_bad_class_version); return;
    case MadCheck::BadMethod: ctr_.inc(CmCtr::rx_bad_method); return;
  }
  const uint8_t* m = mad.data();
  const uint8_t* b = body_of(m);
  const uint16_t attr = wire::MadHdrC(m).attr_id();
  if (wire::cm_attr_name(attr) == nullptr) {  // an attribute ID from the wire may be anything
    ctr_.inc(CmCtr::rx_unsupported_attr);
    return;
  }
  switch (static_cast<wire::CmAttr>(attr)) {
    case wire::CmAttr::Req: rx_req(from, m); break;
    case wire::CmAttr::SidrReq: rx_sidr_req(from, m); break;
    case wire::CmAttr::Rej: rx_rej_lookup(from, m); break;
    case wire::CmAttr::Mra: rx_to_id(from, m, CmInput::RecvMra, MraViewC(b).remote_comm_id()); break;
    case wire::CmAttr::Rep: rx_to_id(from, m, CmInput::RecvRep, RepViewC(b).remote_comm_id()); break;
    case wire::CmAttr::Rtu: rx_to_id(from, m, CmInput::RecvRtu, RtuViewC(b).remote_comm_id()); break;
    case wire::CmAttr::Dreq:
      if (find(DreqViewC(b).remote_comm_id()) == nullptr) {
        rx_dreq_unknown(from, m);
      } else {
        rx_to_id(from, m, CmInput::RecvDreq, DreqViewC(b).remote_comm_id());
      }
      break;
    case wire::CmAttr::Drep: rx_to_id(from, m, CmInput::RecvDrep, DrepViewC(b).remote_comm_id()); break;
    case wire::CmAttr::SidrRep: rx_to_id(from, m, CmInput::RecvSidrRep, SidrRepViewC(b).request_id()); break;
    // Alternate paths do not exist on RoCE: Linux's ib_cm drops a LAP or an
    // APR on a RoCE port (cm_lap_handler / cm_apr_handler) without an
    // answer, whatever the connection's state; so do we, counted.
    case wire::CmAttr::Lap: ctr_.inc(CmCtr::rx_lap_dropped); break;
    case wire::CmAttr::Apr: ctr_.inc(CmCtr::rx_apr_dropped); break;
    case wire::CmAttr::ClassPortInfo:
      ctr_.inc(CmCtr::rx_unsupported_attr);
      break;
  }
  deliver();
}

void Cm::rx_to_id(const MadAddr& from, const uint8_t* mad, CmInput kind, uint32_t local_id) {
  CmId* id = find(local_id);
  if (id == nullptr) {
    ctr_.inc(CmCtr::rx_unknown_id);
    return;
  }
  // The sender's own ID must be the one we know (12.6: Local Communication
  // ID identifies the instance), except on the first REP.
  const uint32_t sender = kind == CmInput::RecvSidrRep ? 0 : wire::load_be<uint32_t>(body_of(mad));
  if (kind != CmInput::RecvSidrRep && id->remote_id != 0 && sender != id->remote_id) {
    ctr_.inc(CmCtr::rx_unknown_id);
    return;
  }
  if (!from_peer(*id, from)) return;
  Input in{kind};
  in.from = &from;
  in.mad = mad;
  step(*id, in);
}

void Cm::rx_req(const MadAddr& from, const uint8_t* mad) {
  const ReqViewC req(body_of(mad));
  const uint64_t tid = tid_of(mad);
  Input in{CmInput::RecvReq};
  in.from = &from;
  in.mad = mad;
  // A REQ we know already (12.9.6: retransmitted because our answer was
  // lost or late).
  if (CmId* dup = by_remote(req.local_ca_guid(), req.local_comm_id())) {
    if (from_peer(*dup, from)) step(*dup, in);
    return;
  }
  // 12.9 (stale connections): a new REQ from a QP that we believe is still connected
  // means that connection is stale: reject the REQ and release the old one.
  // Only the connection's own peer can say so: a REQ naming its CA GUID and
  // QPN from elsewhere is dropped, not allowed to end it.
  if (CmId* old = by_remote_qpn(req.local_ca_guid(), Qpn(req.local_qpn()))) {
    if (!from_peer(*old, from)) return;
    ctr_.inc(CmCtr::rej_stale);
    send_rej_stateless(from, tid, req.local_comm_id(), RejReason::StaleConn, CmMsgRef::Req);
    Input st{CmInput::Stale};
    step(*old, st);
    return;
  }
  CmId* l = listener_for(req.service_id());
  if (l == nullptr && in_listen_grace()) {
    ctr_.inc(CmCtr::req_before_listen);  // forgotten unanswered: the peer's retry may find the listener
    return;
  }
  if (l == nullptr) {
    ctr_.inc(CmCtr::rej_no_listener);
    send_rej_stateless(from, tid, req.local_comm_id(), RejReason::InvalidServiceId, CmMsgRef::Req);
    return;
  }
  const auto ts = static_cast<CmTransport>(req.transport_service_type());
  const bool xrc = ts == CmTransport::Xrc && req.extended_transport_type() == kExtTransportXrc;
  if (ts != CmTransport::RC && ts != CmTransport::UC && !xrc) {
    ctr_.inc(CmCtr::rej_transport);
    send_rej_stateless(from, tid, req.local_comm_id(), RejReason::InvalidTransportType, CmMsgRef::Req);
    return;
  }
  if (pending_full()) return;  // forgotten unanswered: a real peer retries
  CmId* id = create_id(nullptr);
  in.listener = l;
  step(*id, in);
}

void Cm::rx_sidr_req(const MadAddr& from, const uint8_t* mad) {
  const SidrReqViewC s(body_of(mad));
  Input in{CmInput::RecvSidrReq};
  in.from = &from;
  in.mad = mad;
  const auto key = std::make_pair(from.gid, s.request_id());
  if (auto it = sidr_in_.find(key); it != sidr_in_.end()) {
    step(*it->second, in);
    return;
  }
  CmId* l = listener_for(s.service_id());
  if (l == nullptr && in_listen_grace()) {
    ctr_.inc(CmCtr::req_before_listen);
    return;
  }
  if (l == nullptr) {  // 12.11.2 (SIDR_REP status 1), service ID not supported
    ctr_.inc(CmCtr::sidr_no_listener);
    SidrRepMsg r;
    r.request_id = s.request_id();
    r.status = static_cast<uint8_t>(SidrStatus::Unsupported);
    r.service_id = s.service_id();
    send_mad(from, build_mad(r, tid_of(mad)));
    return;
  }
  if (pending_full()) return;
  CmId* id = create_id(nullptr);
  sidr_in_[key] = id;
  in.listener = l;
  step(*id, in);
}

void Cm::rx_rej_lookup(const MadAddr& from, const uint8_t* mad) {
  const RejViewC j(body_of(mad));
  CmId* id = j.remote_comm_id() != 0 ? find(j.remote_comm_id()) : nullptr;
  if (id == nullptr && j.reason() == static_cast<uint16_t>(RejReason::Timeout) && j.reject_info_length() >= 8) {
    // A timeout REJ from an active side that never saw our REP names us by
    // its own ID and its CA GUID (the ARI).
    id = by_remote(wire::load_be<uint64_t>(j.ari().data()), j.local_comm_id());
  }
  if (id == nullptr || (id->remote_id != 0 && j.local_comm_id() != 0 && j.local_comm_id() != id->remote_id)) {
    ctr_.inc(CmCtr::rx_unknown_id);
    return;
  }
  if (!from_peer(*id, from)) return;
  Input in{CmInput::RecvRej};
  in.from = &from;
  in.mad = mad;
  step(*id, in);
}

void Cm::rx_dreq_unknown(const MadAddr& from, const uint8_t* mad) {
  // A DREQ for a connection we no longer have: our DREP was lost and
  // TimeWait is over.  Linux's ib_cm answers every such DREQ with a DREP
  // to its sender (cm_issue_drep), which makes it a reflector: anyone can
  // have it send DREPs to an address they name.  We answer only a DREQ
  // that names a connection of ours that ended lately, with its IDs, from
  // the address of its peer; anything else is dropped and counted.  A
  // real peer whose DREP was lost longer ago than we remember sees its
  // DREQ time out, which ends its side just the same (12.9.6: DREQ
  // timeout enters TimeWait).
  const DreqViewC d(body_of(mad));
  const auto it = ended_.find(d.remote_comm_id());
  if (it == ended_.end() || it->second.remote_id != d.local_comm_id() || it->second.gid != from.gid) {
    ctr_.inc(CmCtr::rx_dreq_unknown);
    return;
  }
  ctr_.inc(CmCtr::drep_unknown);
  DrepMsg r;
  r.local_comm_id = d.remote_comm_id();
  r.remote_comm_id = d.local_comm_id();
  send_mad(from, build_mad(r, tid_of(mad)));
}

// ---- consumer calls -------------------------------------------------------------

namespace {
bool live(const CmId* id) { return id != nullptr && !id->destroyed; }
}  // namespace

// A consumer call on a live id: one input through the state machine, then
// the events it raised; the input's return code (-EINVAL for a dead id).
int Cm::consumer_call(CmId* id, Input& in) {
  if (!live(id)) return -EINVAL;
  step(*id, in);
  deliver();
  return in.rc;
}

void Cm::drop_request(CmId* id) {
  if (!live(id)) return;
  Input in{id->state == CmState::ReqRcvd ? CmInput::Drop : CmInput::Destroy};
  step(*id, in);
  id->destroyed = true;
  id->context = nullptr;
  deliver();
}

void Cm::destroy_id(CmId* id) {
  if (!live(id)) return;
  Input in{CmInput::Destroy};
  step(*id, in);
  id->destroyed = true;
  id->context = nullptr;
  deliver();
}

int Cm::listen(CmId* id, uint64_t service_id, uint64_t service_mask) {
  if (!live(id)) return -EINVAL;
  for (const CmId* l : listeners_) {
    if (!l->destroyed && l->service_id == service_id && l->service_mask == service_mask) return -EADDRINUSE;
  }
  Input in{CmInput::Listen};
  in.service_id = service_id;
  in.service_mask = service_mask;
  return consumer_call(id, in);
}

int Cm::connect(CmId* id, const ConnectParams& p) {
  Input in{CmInput::Connect};
  in.params = &p;
  return consumer_call(id, in);
}

int Cm::accept(CmId* id, const AcceptParams& p) {
  Input in{CmInput::Accept};
  in.params = &p;
  return consumer_call(id, in);
}

int Cm::reject(CmId* id, RejReason reason, std::span<const uint8_t> private_data, std::span<const uint8_t> ari) {
  Input in{CmInput::Reject};
  in.reason = reason;
  in.pdata = private_data;
  in.ari = ari;
  return consumer_call(id, in);
}

int Cm::send_mra(CmId* id, uint8_t service_timeout, std::span<const uint8_t> private_data) {
  Input in{CmInput::SendMra};
  in.service_timeout = service_timeout;
  in.pdata = private_data;
  return consumer_call(id, in);
}

int Cm::send_rtu(CmId* id, std::span<const uint8_t> private_data) {
  Input in{CmInput::SendRtu};
  in.pdata = private_data;
  return consumer_call(id, in);
}

int Cm::established(CmId* id) {
  Input in{CmInput::CommEst};
  return consumer_call(id, in);
}

int Cm::disconnect(CmId* id, std::span<const uint8_t> private_data) {
  Input in{CmInput::Disconnect};
  in.pdata = private_data;
  return consumer_call(id, in);
}

int Cm::sidr_resolve(CmId* id, const SidrParams& p) {
  Input in{CmInput::SidrResolve};
  in.params = &p;
  return consumer_call(id, in);
}

int Cm::sidr_reply(CmId* id, const SidrReplyParams& p) {
  Input in{CmInput::SidrReply};
  in.params = &p;
  return consumer_call(id, in);
}

// ---- QP attributes -----------------------------------------------------------------

int Cm::init_qp_attr(const CmId* id, ibv_qp_state state, ibv_qp_attr& attr, int& mask) const {
  if (!live(id)) return -EINVAL;
  const bool have_rep = id->active ? (id->state == CmState::RepRcvd || id->state == CmState::MraRepSent ||
                                      id->state == CmState::Established)
                                   : (id->state == CmState::ReqRcvd || id->state == CmState::MraReqSent ||
                                      id->state == CmState::RepSent || id->state == CmState::MraRepRcvd ||
                                      id->state == CmState::Established);
  // The reliable service's attributes, each for the half that has it (as
  // ib_cm's cm_init_qp_rtr_attr / _rts_attr): RC both; XRC's receive QP
  // (the passive side) the responder's and a timeout, its send QP the
  // requester's.
  const bool xrc = id->transport == CmTransport::Xrc;
  const bool rc = id->transport == CmTransport::RC;
  const bool responds = rc || (xrc && !id->active);
  const bool requests = rc || (xrc && id->active);
  attr = ibv_qp_attr{};
  attr.qp_state = state;
  switch (state) {
    case IBV_QPS_INIT:
      attr.pkey_index = 0;
      attr.port_num = 1;
      attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
      if (responds && id->responder_resources > 0)
        attr.qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
      mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
      return 0;
    case IBV_QPS_RTR: {
      if (!have_rep) return -EINVAL;
      const ReqMsg& r = id->req;
      attr.path_mtu = static_cast<ibv_mtu>(r.path_mtu);
      attr.dest_qp_num = id->remote_qpn.value();
      // A REQ's or REP's Starting PSN is its sender's receive PSN: the first
      // PSN the other side sends.  So the active side expects its own REQ's,
      // the passive side its own REP's.  That is Linux's CM (ib_send_cm_req
      // sets the active rq_psn from its REQ, cm_req_handler the passive
      // sq_psn) and every RoCE peer with it: in
      // tests/data/vectors/rxe-vm/rxe-ucmatose.pcap the passive side's first
      // SEND carries the REQ's Starting PSN.
      attr.rq_psn = id->active ? r.starting_psn : id->rep.starting_psn;
      attr.ah_attr.is_global = 1;
      attr.ah_attr.port_num = 1;
      attr.ah_attr.dlid = id->active ? r.primary_remote_lid : r.primary_local_lid;
      attr.ah_attr.sl = r.primary_sl;
      attr.ah_attr.static_rate = 0;
      const auto& dgid = id->active ? r.primary_remote_gid : r.primary_local_gid;
      std::memcpy(attr.ah_attr.grh.dgid.raw, dgid.data(), 16);
      attr.ah_attr.grh.flow_label = r.primary_flow_label;
      attr.ah_attr.grh.hop_limit = r.primary_hop_limit;
      attr.ah_attr.grh.traffic_class = r.primary_traffic_class;
      mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
      if (responds) {
        attr.max_dest_rd_atomic = id->responder_resources;
        attr.min_rnr_timer = 0;
        mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
      }
      return 0;
    }
    case IBV_QPS_RTS: {
      if (!have_rep) return -EINVAL;
      const ReqMsg& r = id->req;
      attr.sq_psn = id->active ? id->rep.starting_psn : r.starting_psn;  // the peer's receive PSN
      mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
      if (responds && !requests) {
        attr.timeout = r.primary_local_ack_timeout;
        mask |= IBV_QP_TIMEOUT;
      }
      if (requests) {
        attr.timeout = r.primary_local_ack_timeout;
        attr.retry_cnt = r.retry_count;
        // The RNR retry count a side uses is the one its peer asked for
        // (tables 106 and 110).
        attr.rnr_retry = id->active ? id->rep.rnr_retry_count : r.rnr_retry_count;
        attr.max_rd_atomic = id->initiator_depth;
        mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
      }
      return 0;
    }
    case IBV_QPS_RESET: case IBV_QPS_SQD: case IBV_QPS_SQE: case IBV_QPS_ERR: case IBV_QPS_UNKNOWN:
      break;
  }
  return -EINVAL;
}

}  // namespace uroce::cm
