// The CM state machine.  Rule references are to IBA volume 1, chapter 12
// (release 1.4): 12.6 messages, 12.7 field semantics, 12.9 the
// connection state machine, 12.11 SIDR.  Sub-section numbers below were
// taken from secondary sources (no copy of the spec was at hand) and point
// at the section that states the rule; the message tables are exact.  Linux's ib_cm (drivers/
// infiniband/core/cm.c) is the behaviour matched where the spec leaves a
// choice (what a duplicate or stale message gets).
#include "cm/cm.hpp"
#include "cm/cm_internal.hpp"
#include "lib/util/log.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace uroce::cm {

namespace {

constexpr std::string_view kStateNames[] = {
#define X(n) #n,
    UROCE_CM_STATES(X)
#undef X
};
constexpr std::string_view kInputNames[] = {
#define X(n) #n,
    UROCE_CM_INPUTS(X)
#undef X
};
constexpr std::string_view kEventNames[] = {
#define X(n) #n,
    UROCE_CM_EVENTS(X)
#undef X
};


}  // namespace

using detail::body_of;
using detail::copy_in;
using detail::set_event_pdata;
using detail::tid_of;

std::string_view cm_state_name(CmState s) noexcept { return kStateNames[static_cast<size_t>(s)]; }
std::string_view cm_input_name(CmInput i) noexcept { return kInputNames[static_cast<size_t>(i)]; }
std::string_view cm_event_name(CmEventType e) noexcept { return kEventNames[static_cast<size_t>(e)]; }


Cm::Cm(MadPort& port, TimerWheel& wheel, Clock clock, CmConfig config, CmEventHandler handler)
    : port_(port),
      wheel_(wheel),
      clock_(std::move(clock)),
      cfg_(config),
      handler_(std::move(handler)),
      rng_(config.seed != 0 ? config.seed : (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}()) {
  tid_low_ = static_cast<uint32_t>(rng_());
  started_ns_ = clock_();
}

Cm::~Cm() {
  for (auto& [lid, id] : ids_) wheel_.cancel(id->timer);
}

// ---- ids and indexes --------------------------------------------------------

uint32_t Cm::new_comm_id() {
  // Random and unique among live ids (12.6.5: Local Communication ID; 0 is
  // what a REJ carries when there is none, so never use it).
  for (;;) {
    const auto v = static_cast<uint32_t>(rng_());
    if (v != 0 && ids_.find(v) == ids_.end() && ended_.find(v) == ended_.end()) return v;
  }
}

uint64_t Cm::new_tid() {
  // High half identifies this CM instance, low half counts transactions.
  return (uint64_t{static_cast<uint32_t>(cfg_.ca_guid ^ (cfg_.ca_guid >> 32))} << 32) | tid_low_++;
}

CmId* Cm::create_id(void* context) {
  auto id = std::make_unique<CmId>();
  id->context = context;
  id->local_id = new_comm_id();
  id->cm_ = this;
  id->timer.cb = &Cm::on_timer;
  id->timer.owner = id.get();
  CmId* raw = id.get();
  ids_.emplace(raw->local_id, std::move(id));
  return raw;
}

CmId* Cm::adopt_established(const Adopted& a) {
  if (a.local_id == 0 || ids_.count(a.local_id) != 0) return nullptr;
  auto id = std::make_unique<CmId>();
  id->local_id = a.local_id;
  id->remote_id = a.remote_id;
  id->remote_ca_guid = a.remote_ca_guid;
  id->peer = a.peer;
  id->local_qpn = a.local_qpn;
  id->remote_qpn = a.remote_qpn;
  id->state = CmState::Established;
  id->active = true;
  id->max_retries = kDefaultMaxCmRetries;
  id->timeout_ns = cm_timeout_ns(kDefaultCmResponseTimeout) + 2 * cfg_.packet_life_ns;
  id->cm_ = this;
  id->timer.cb = &Cm::on_timer;
  id->timer.owner = id.get();
  CmId* raw = id.get();
  ids_.emplace(raw->local_id, std::move(id));
  if (raw->remote_id != 0) index_remote(*raw);
  return raw;
}

CmId* Cm::find(uint32_t local_id) const noexcept {
  auto it = ids_.find(local_id);
  return it == ids_.end() ? nullptr : it->second.get();
}

size_t Cm::count_in(CmState s) const noexcept {
  size_t n = 0;
  for (const auto& [lid, id] : ids_) n += id->state == s ? 1 : 0;
  return n;
}

CmId* Cm::listener_for(uint64_t service_id) const noexcept {
  for (CmId* l : listeners_) {
    if (!l->destroyed && (service_id & l->service_mask) == (l->service_id & l->service_mask)) return l;
  }
  return nullptr;
}

void Cm::index_remote(CmId& id) {
  unindex_remote(id);
  by_remote_id_[{id.remote_ca_guid, id.remote_id}] = &id;
  by_remote_qpn_[{id.remote_ca_guid, id.remote_qpn.value()}] = &id;
  id.indexed_remote_ = true;
}

void Cm::unindex_remote(CmId& id) {
  if (!id.indexed_remote_) return;
  auto a = by_remote_id_.find({id.remote_ca_guid, id.remote_id});
  if (a != by_remote_id_.end() && a->second == &id) by_remote_id_.erase(a);
  auto b = by_remote_qpn_.find({id.remote_ca_guid, id.remote_qpn.value()});
  if (b != by_remote_qpn_.end() && b->second == &id) by_remote_qpn_.erase(b);
  id.indexed_remote_ = false;
}

CmId* Cm::by_remote(uint64_t guid, uint32_t remote_id) const noexcept {
  auto it = by_remote_id_.find({guid, remote_id});
  return it == by_remote_id_.end() ? nullptr : it->second;
}

CmId* Cm::by_remote_qpn(uint64_t guid, Qpn qpn) const noexcept {
  auto it = by_remote_qpn_.find({guid, qpn.value()});
  return it == by_remote_qpn_.end() ? nullptr : it->second;
}

// ---- sending and timers -------------------------------------------------------

void Cm::send_mad(const MadAddr& to, const MadBuf& mad) {
  ctr_.inc(CmCtr::tx_mads);
  if (!port_.send(to, mad)) ctr_.inc(CmCtr::tx_errors);
}

void Cm::send_stored(CmId& id) {
  if (id.has_last_sent) send_mad(id.peer, id.last_sent);
}

template <class M>
void Cm::send_new(CmId& id, const M& m, uint64_t tid, bool keep) {
  const MadBuf mad = build_mad(m, tid);
  if (keep) {
    id.last_sent = mad;
    id.has_last_sent = true;
  }
  send_mad(id.peer, mad);
}

void Cm::send_rej_stateless(const MadAddr& to, uint64_t tid, uint32_t remote_id, RejReason r,
                            CmMsgRef what) {
  RejMsg j;
  j.local_comm_id = 0;  // no connection of ours (as Linux's cm_issue_rej)
  j.remote_comm_id = remote_id;
  j.message_rejected = static_cast<uint8_t>(what);
  j.reason = static_cast<uint16_t>(r);
  send_mad(to, build_mad(j, tid));
}

void Cm::arm(CmId& id, uint64_t after_ns) { wheel_.arm(id.timer, clock_() + after_ns); }
void Cm::disarm(CmId& id) { wheel_.cancel(id.timer); }

void Cm::on_timer(Timer& t, uint64_t /*now_ns*/) {
  CmId& id = t.owner_as<CmId>();
  Cm& cm = *id.cm_;
  Input in{CmInput::Timeout};
  cm.step(id, in);
  cm.deliver();
}

// ---- events -----------------------------------------------------------------

CmEvent& Cm::post(CmId& id, CmEventType t) {
  static thread_local CmEvent sink;  // events of destroyed ids go nowhere
  if (id.destroyed) {
    sink = CmEvent{};
    return sink;
  }
  CmEvent& ev = events_.emplace_back();
  ev.type = t;
  ev.id = &id;
  return ev;
}

void Cm::deliver() {
  if (delivering_ || held_ != 0) return;  // a callback called us (the outer loop drains), or the consumer holds them
  delivering_ = true;
  while (!events_.empty()) {
    CmEvent ev = events_.front();
    events_.pop_front();
    if (ev.id != nullptr && ev.id->destroyed) continue;
    if (handler_) handler_(ev);
  }
  delivering_ = false;
  reap();
}

void Cm::reap() {
  for (auto it = ids_.begin(); it != ids_.end();) {
    CmId& id = *it->second;
    if (id.destroyed && id.state == CmState::Idle && !id.timer.armed()) {
      unindex_remote(id);
      std::erase(listeners_, &id);
      for (auto s = sidr_in_.begin(); s != sidr_in_.end();) {
        s = s->second == &id ? sidr_in_.erase(s) : std::next(s);
      }
      it = ids_.erase(it);
    } else {
      ++it;
    }
  }
}

// ---- the driver -------------------------------------------------------------

void Cm::step(CmId& id, Input& in) {
  const CmState prev = id.state;
  const Handler h = kTransitions[static_cast<size_t>(prev)][static_cast<size_t>(in.kind)];
  const CmState next = (this->*h)(id, in);
  if (next == CmState::Idle && prev != CmState::Idle) {
    disarm(id);
    unindex_remote(id);
  }
  id.state = next;
  if (next != prev) {
    UROCE_TRACE(TraceCat::Conn, "conn 0x%08x: %s --%s--> %s", id.local_id, cm_state_name(prev).data(),
                cm_input_name(in.kind).data(), cm_state_name(next).data());
    note_state(id, prev);
  }
}

// ---- the bounds of CmConfig -------------------------------------------------------

namespace {
bool is_pending(CmState s) noexcept {
  return s == CmState::ReqRcvd || s == CmState::MraReqSent || s == CmState::SidrReqRcvd;
}
}  // namespace

// Keeps the counts the bounds look at, after `id` went from `prev` to its
// state: requests waiting for an answer, the TimeWait queue (its oldest
// leaves early when it is full), ended connections.
void Cm::note_state(CmId& id, CmState prev) {
  if (is_pending(prev) != is_pending(id.state)) {
    const size_t n = pending_.load(std::memory_order_relaxed);
    pending_.store(is_pending(id.state) ? n + 1 : (n > 0 ? n - 1 : 0), std::memory_order_relaxed);
  }
  if (prev == CmState::TimeWait) {
    if (!timewait_.empty() && timewait_.front() == &id) {
      timewait_.pop_front();
    } else {
      std::erase(timewait_, &id);
    }
  }
  if (id.state == CmState::Idle && id.remote_id != 0 && prev != CmState::Listen) remember_ended(id);
  timewait_gauge_.store(timewait_.size() + (id.state == CmState::TimeWait ? 1 : 0), std::memory_order_relaxed);
  if (id.state != CmState::TimeWait) return;
  timewait_.push_back(&id);
  if (timewait_.size() > cfg_.max_timewait) {
    // Full: the oldest connection leaves TimeWait now (as its timer would).
    ctr_.inc(CmCtr::timewait_evicted);
    CmId* oldest = timewait_.front();
    Input t{CmInput::Timeout};
    step(*oldest, t);
  }
}

void Cm::remember_ended(const CmId& id) {
  if (cfg_.ended_memory == 0) return;
  if (ended_.emplace(id.local_id, Ended{id.remote_id, id.peer.gid}).second) ended_order_.push_back(id.local_id);
  while (ended_order_.size() > cfg_.ended_memory) {
    ended_.erase(ended_order_.front());
    ended_order_.pop_front();
  }
}

bool Cm::pending_full() {
  if (pending_.load(std::memory_order_relaxed) < cfg_.max_pending_requests) return false;
  ctr_.inc(CmCtr::req_flood_dropped);
  return true;
}

bool Cm::from_peer(const CmId& id, const MadAddr& from) {
  // Every message after the REQ comes from the connection's peer (as the
  // transport's check_addr does for data): anyone else who learnt the
  // comm IDs off the wire cannot end, reject or redirect it.
  if (id.state == CmState::Idle || id.peer.gid == from.gid) return true;
  ctr_.inc(CmCtr::rx_wrong_source);
  return false;
}

// Inputs a state does not expect.  A consumer call is refused (EINVAL); a
// message is dropped and counted (12.9.6: messages not valid in a state are
// discarded).
CmState Cm::ignore(CmId& id, Input& in) {
  if (input_class(in.kind) == CmInputClass::Message) ctr_.inc(CmCtr::rx_unexpected);
  return id.state;
}

CmState Cm::bad_call(CmId& id, Input& in) {
  in.rc = -EINVAL;
  return id.state;
}

// ---- shared handler pieces -----------------------------------------------------

CmState Cm::do_connect(CmId& id, Input& in) {
  const auto& p = *std::get<const ConnectParams*>(in.params);
  if (p.private_data.size() > sizeof(ReqMsg{}.private_data) ||
      (p.transport != CmTransport::RC && p.transport != CmTransport::UC && p.transport != CmTransport::Xrc) ||
      p.max_cm_retries > 15 ||
      p.remote_cm_response_timeout > 31 || p.local_cm_response_timeout > 31) {
    in.rc = -EINVAL;
    return id.state;
  }
  id.active = true;
  id.peer = p.dest;
  id.service_id = p.service_id;
  id.transport = p.transport;
  id.local_qpn = p.qpn;
  id.responder_resources = p.responder_resources;
  id.initiator_depth = p.initiator_depth;

  ReqMsg& r = id.req;
  r = ReqMsg{};
  r.local_comm_id = id.local_id;
  r.service_id = p.service_id;
  r.local_ca_guid = cfg_.ca_guid;
  r.local_qkey = p.qkey;
  r.local_qpn = p.qpn.value();
  r.initiator_depth = p.initiator_depth;
  r.remote_cm_response_timeout = p.remote_cm_response_timeout;
  r.transport_service_type = static_cast<uint8_t>(p.transport);
  r.end_to_end_flow_control = p.flow_control ? 1 : 0;
  r.starting_psn = p.starting_psn.value();
  r.local_cm_response_timeout = p.local_cm_response_timeout;
  r.partition_key = p.path.pkey;
  r.path_mtu = p.path.mtu & 0xF;
  r.max_cm_retries = p.max_cm_retries;
  if (p.transport == CmTransport::Xrc) {
    // Annex A14: an XRC send QP has no responder, retries nothing the REQ
    // would announce, and has no SRQ of its own (ib_cm leaves them 0).
    r.extended_transport_type = kExtTransportXrc;
  } else {
    r.responder_resources = p.responder_resources;
    r.retry_count = p.retry_count & 7;
    r.rnr_retry_count = p.rnr_retry_count & 7;
    r.srq = p.srq ? 1 : 0;
  }
  r.primary_local_lid = p.path.local_lid;
  r.primary_remote_lid = p.path.remote_lid;
  r.primary_local_gid = p.path.local_gid;
  r.primary_remote_gid = p.path.remote_gid;
  r.primary_flow_label = p.path.flow_label & 0xFFFFF;
  r.primary_packet_rate = p.path.packet_rate & 0x3F;
  r.primary_traffic_class = p.path.traffic_class;
  r.primary_hop_limit = p.path.hop_limit;
  r.primary_sl = p.path.sl & 0xF;
  r.primary_local_ack_timeout = p.path.local_ack_timeout & 0x1F;
  copy_in(r.private_data, p.private_data);

  id.tid = new_tid();
  send_new(id, r, id.tid, true);
  id.retries = 0;
  id.max_retries = p.max_cm_retries;
  // 12.6.5 (Remote CM Response Timeout): the peer answers within Remote CM Response Timeout; the
  // message crosses the fabric twice.
  id.timeout_ns = cm_timeout_ns(p.remote_cm_response_timeout) + 2 * cfg_.packet_life_ns;
  arm(id, id.timeout_ns);
  return CmState::ReqSent;
}

CmState Cm::rx_req_new(CmId& id, Input& in) {
  const ReqMsg req = decode(ReqViewC(body_of(in.mad)));
  id.req = req;
  id.active = false;
  id.remote_id = req.local_comm_id;
  id.remote_ca_guid = req.local_ca_guid;
  id.remote_qpn = Qpn(req.local_qpn);
  id.service_id = req.service_id;
  id.transport = static_cast<CmTransport>(req.transport_service_type);  // rx_req let only RC, UC and XRC in
  id.peer = *in.from;
  id.tid = tid_of(in.mad);
  id.max_retries = req.max_cm_retries;
  // 12.6.5 (Local CM Response Timeout): the active side answers our REP within its Local CM Response
  // Timeout.
  id.timeout_ns = cm_timeout_ns(req.local_cm_response_timeout) + 2 * cfg_.packet_life_ns;
  index_remote(id);

  CmEvent& ev = post(id, CmEventType::ReqReceived);
  ev.listen_id = in.listener;
  ev.req = &id.req;
  ev.service_id = req.service_id;
  set_event_pdata(ev, req.private_data);
  return CmState::ReqRcvd;
}

CmState Cm::do_accept(CmId& id, Input& in) {
  const auto& p = *std::get<const AcceptParams*>(in.params);
  if (p.private_data.size() > sizeof(RepMsg{}.private_data)) return bad_call(id, in);
  id.local_qpn = p.qpn;
  id.responder_resources = p.responder_resources;
  id.initiator_depth = p.initiator_depth;

  RepMsg& r = id.rep;
  r = RepMsg{};
  r.local_comm_id = id.local_id;
  r.remote_comm_id = id.remote_id;
  r.local_qkey = p.qkey;
  r.starting_psn = p.starting_psn.value();
  r.responder_resources = p.responder_resources;
  r.target_ack_delay = p.target_ack_delay & 0x1F;
  r.rnr_retry_count = p.rnr_retry_count & 7;
  if (id.transport == CmTransport::Xrc) {
    // Annex A14 (and ib_cm): an XRC receive QP is named by the Local EECN,
    // always takes its receives from SRQs, and initiates nothing.
    r.local_eecn = p.qpn.value();
    r.srq = 1;
  } else {
    r.local_qpn = p.qpn.value();
    r.initiator_depth = p.initiator_depth;
    r.end_to_end_flow_control = p.flow_control ? 1 : 0;
    r.srq = p.srq ? 1 : 0;
  }
  r.local_ca_guid = cfg_.ca_guid;
  copy_in(r.private_data, p.private_data);

  send_new(id, r, id.tid, true);  // the REP answers the REQ's transaction
  id.retries = 0;
  arm(id, id.timeout_ns);
  return CmState::RepSent;
}

CmState Cm::do_reject(CmId& id, Input& in, CmMsgRef what) {
  if (in.pdata.size() > sizeof(RejMsg{}.private_data) || in.ari.size() > sizeof(RejMsg{}.ari)) {
    return bad_call(id, in);
  }
  RejMsg j;
  j.local_comm_id = id.local_id;
  j.remote_comm_id = id.remote_id;
  j.message_rejected = static_cast<uint8_t>(what);
  j.reject_info_length = static_cast<uint8_t>(in.ari.size());
  j.reason = static_cast<uint16_t>(in.reason);
  copy_in(j.ari, in.ari);
  copy_in(j.private_data, in.pdata);
  send_new(id, j, id.tid, false);
  return CmState::Idle;
}

CmState Cm::do_send_mra(CmId& id, Input& in, CmMsgRef what, CmState next) {
  if (in.pdata.size() > sizeof(MraMsg{}.private_data) || in.service_timeout > 31) return bad_call(id, in);
  MraMsg m;
  m.local_comm_id = id.local_id;
  m.remote_comm_id = id.remote_id;
  m.message_mraed = static_cast<uint8_t>(what);
  m.service_timeout = in.service_timeout;
  copy_in(m.private_data, in.pdata);
  id.mra_sent = build_mad(m, id.tid);
  id.has_mra_sent = true;
  send_mad(id.peer, id.mra_sent);
  return next;
}

CmState Cm::do_send_dreq(CmId& id, Input& in) {
  if (in.pdata.size() > sizeof(DreqMsg{}.private_data)) return bad_call(id, in);
  DreqMsg d;
  d.local_comm_id = id.local_id;
  d.remote_comm_id = id.remote_id;
  d.remote_qpn_eecn = id.remote_qpn.value();
  copy_in(d.private_data, in.pdata);
  id.tid = new_tid();
  send_new(id, d, id.tid, true);
  id.retries = 0;
  arm(id, id.timeout_ns);
  return CmState::DreqSent;
}

CmState Cm::do_send_drep(CmId& id, Input& in) {
  if (in.pdata.size() > sizeof(DrepMsg{}.private_data)) return bad_call(id, in);
  DrepMsg d;
  d.local_comm_id = id.local_id;
  d.remote_comm_id = id.remote_id;
  copy_in(d.private_data, in.pdata);
  send_new(id, d, id.tid, true);  // kept: a repeated DREQ gets it again
  return enter_timewait(id);
}

CmState Cm::rx_rep(CmId& id, Input& in) {
  const RepMsg rep = decode(RepViewC(body_of(in.mad)));
  // 12.9.8.3 (stale connections): a REP whose sender's communication ID or
  // QPN another connection of ours still holds means that connection is
  // stale.  The REP is rejected with "stale connection" (as ib_cm's
  // cm_rep_handler), the old connection is released (DREQ, as ib_cm), and
  // this attempt ends: its consumer sees the rejection (reason 10) now
  // rather than after the REQ's retries.
  CmId* by_id = by_remote(rep.local_ca_guid, rep.local_comm_id);
  const Qpn rep_qpn(id.transport == CmTransport::Xrc ? rep.local_eecn : rep.local_qpn);  // annex A14
  CmId* by_qpn = by_remote_qpn(rep.local_ca_guid, rep_qpn);
  if ((by_id != nullptr && by_id != &id) || (by_qpn != nullptr && by_qpn != &id)) {
    ctr_.inc(CmCtr::rej_stale_rep);
    RejMsg j;
    j.local_comm_id = id.local_id;
    j.remote_comm_id = rep.local_comm_id;
    j.message_rejected = static_cast<uint8_t>(CmMsgRef::Rep);
    j.reason = static_cast<uint16_t>(RejReason::StaleConn);
    send_mad(*in.from, build_mad(j, tid_of(in.mad)));
    for (CmId* old : {by_id, by_qpn}) {
      if (old == nullptr || old == &id) continue;
      Input st{CmInput::Stale};
      step(*old, st);
      if (by_qpn == by_id) break;
    }
    disarm(id);
    CmEvent& ev = post(id, CmEventType::RejReceived);
    ev.reason = j.reason;
    ev.message_rejected = j.message_rejected;
    return CmState::Idle;
  }
  id.rep = rep;
  id.remote_id = rep.local_comm_id;
  id.remote_ca_guid = rep.local_ca_guid;
  id.remote_qpn = rep_qpn;
  // 12.6.5/12.6.8 (Responder Resources, Initiator Depth): what we may have in flight is bounded by the peer's
  // responder resources, and the other way round.
  id.initiator_depth = std::min(id.req.initiator_depth, rep.responder_resources);
  id.responder_resources = std::min(id.req.responder_resources, rep.initiator_depth);
  index_remote(id);
  disarm(id);
  CmEvent& ev = post(id, CmEventType::RepReceived);
  ev.rep = &id.rep;
  ev.service_id = id.service_id;
  set_event_pdata(ev, rep.private_data);
  return CmState::RepRcvd;
}

CmState Cm::rx_rej(CmId& id, Input& in) {
  const RejMsg j = decode(RejViewC(body_of(in.mad)));
  disarm(id);
  CmEvent& ev = post(id, CmEventType::RejReceived);
  ev.reason = j.reason;
  ev.message_rejected = j.message_rejected;
  ev.ari = j.ari;
  ev.ari_len = std::min<uint8_t>(j.reject_info_length, static_cast<uint8_t>(j.ari.size()));
  set_event_pdata(ev, j.private_data);
  return CmState::Idle;
}

CmState Cm::rx_mra(CmId& id, Input& in, CmMsgRef expect, CmState next) {
  const MraMsg m = decode(MraViewC(body_of(in.mad)));
  if (m.message_mraed != static_cast<uint8_t>(expect)) return ignore(id, in);
  // 12.6.6: the sender needs up to Service Timeout more; our retries wait.
  arm(id, cm_timeout_ns(m.service_timeout) + 2 * cfg_.packet_life_ns);
  CmEvent& ev = post(id, CmEventType::MraReceived);
  ev.service_timeout = m.service_timeout;
  set_event_pdata(ev, m.private_data);
  return next;
}

CmState Cm::rx_dreq(CmId& id, Input& in) {
  const DreqMsg d = decode(DreqViewC(body_of(in.mad)));
  // 12.6.10: the DREQ names the QP it disconnects; another QPN is not ours.
  if (d.remote_qpn_eecn != id.local_qpn.value()) {
    ctr_.inc(CmCtr::rx_bad_qpn);
    return id.state;
  }
  disarm(id);
  id.tid = tid_of(in.mad);  // the DREP answers this transaction
  CmEvent& ev = post(id, CmEventType::DreqReceived);
  set_event_pdata(ev, d.private_data);
  return CmState::DreqRcvd;
}

CmState Cm::enter_established(CmId& id) {
  disarm(id);
  post(id, CmEventType::Established);
  return CmState::Established;
}

CmState Cm::enter_timewait(CmId& id) {
  // 12.9 (TimeWait): stay out of the way until the old connection's packets
  // are gone: its local ACK timeout and two packet lifetimes.
  uint64_t tw = cfg_.timewait_ns;
  if (tw == 0) tw = cm_timeout_ns(id.req.primary_local_ack_timeout) + 2 * cfg_.packet_life_ns;
  arm(id, tw);
  return CmState::TimeWait;
}

// Resend the transaction's message after a response timeout (12.9:
// up to Max CM Retries times); false when the retries are spent.
CmState Cm::retransmit_or(CmId& id, CmState resend_state, CmEventType give_up) {
  if (id.retries < id.max_retries) {
    ++id.retries;
    ctr_.inc(CmCtr::retransmits);
    send_stored(id);
    arm(id, id.timeout_ns);
    return resend_state;
  }
  ctr_.inc(CmCtr::timeouts);
  post(id, give_up);
  switch (give_up) {
    case CmEventType::ReqTimeout:
    case CmEventType::RepTimeout: {
      // 12.6.7 (REJ reason 4, timeout): the ARI of a timeout REJ is the
      // sender's CA GUID.
      RejMsg j;
      j.local_comm_id = id.local_id;
      j.remote_comm_id = id.remote_id;
      j.message_rejected = static_cast<uint8_t>(give_up == CmEventType::ReqTimeout ? CmMsgRef::Other
                                                                                   : CmMsgRef::Rep);
      j.reason = static_cast<uint16_t>(RejReason::Timeout);
      j.reject_info_length = 8;
      wire::store_be(j.ari.data(), cfg_.ca_guid);
      send_new(id, j, id.tid, false);
      return CmState::Idle;
    }
    case CmEventType::DreqTimeout:
      return enter_timewait(id);
    case CmEventType::SidrTimeout:
      return CmState::Idle;
    case CmEventType::ReqReceived: case CmEventType::MraReceived: case CmEventType::RepReceived:
    case CmEventType::Established: case CmEventType::RejReceived: case CmEventType::DreqReceived:
    case CmEventType::DrepReceived: case CmEventType::TimewaitExit: case CmEventType::SidrReqReceived:
    case CmEventType::SidrRepReceived:
      break;
  }
  return CmState::Idle;
}

// Destroying a connection that is being set up rejects it (as ib_cm).
CmState Cm::destroy_connected(CmId& id, Input& in) {
  in.reason = RejReason::ConsumerReject;
  in.pdata = {};
  in.ari = {};
  const CmMsgRef what = (id.state == CmState::RepRcvd || id.state == CmState::MraRepSent) ? CmMsgRef::Rep
                        : (id.state == CmState::ReqRcvd || id.state == CmState::MraReqSent) ? CmMsgRef::Req
                                                                                              : CmMsgRef::Other;
  return do_reject(id, in, what);
}

// ---- the transitions ------------------------------------------------------------
// One handler per (state, input) that does something; every other cell of
// the table (make_transitions, below) refuses a consumer call (bad_call:
// EINVAL) or drops a message, a timeout or a stale notice (ignore), as
// IBA 12.9.6 discards messages not valid in a state.

CmState Cm::stay(CmId& id, Input&) { return id.state; }
CmState Cm::to_idle(CmId&, Input&) { return CmState::Idle; }
CmState Cm::established_h(CmId& id, Input&) { return enter_established(id); }

CmState Cm::idle_listen(CmId& id, Input& in) {
  id.service_id = in.service_id;
  id.service_mask = in.service_mask;
  listeners_.push_back(&id);
  return CmState::Listen;
}

CmState Cm::idle_sidr_resolve(CmId& id, Input& in) {
  const auto& p = *std::get<const SidrParams*>(in.params);
  if (p.private_data.size() > sizeof(SidrReqMsg{}.private_data) || p.timeout > 31) return bad_call(id, in);
  id.active = true;
  id.peer = p.dest;
  id.service_id = p.service_id;
  SidrReqMsg s;
  s.request_id = id.local_id;
  s.partition_key = p.pkey;
  s.service_id = p.service_id;
  copy_in(s.private_data, p.private_data);
  id.tid = new_tid();
  send_new(id, s, id.tid, true);
  id.retries = 0;
  id.max_retries = p.max_retries;
  id.timeout_ns = cm_timeout_ns(p.timeout) + 2 * cfg_.packet_life_ns;
  arm(id, id.timeout_ns);
  return CmState::SidrReqSent;
}

CmState Cm::idle_sidr_req(CmId& id, Input& in) {
  if (id.has_last_sent) {  // answered already: the reply was lost
    send_stored(id);
    return CmState::Idle;
  }
  const SidrReqMsg s = decode(SidrReqViewC(body_of(in.mad)));
  id.remote_id = s.request_id;
  id.peer = *in.from;
  id.tid = tid_of(in.mad);
  id.service_id = s.service_id;
  CmEvent& ev = post(id, CmEventType::SidrReqReceived);
  ev.listen_id = in.listener;
  ev.service_id = s.service_id;
  set_event_pdata(ev, s.private_data);
  return CmState::SidrReqRcvd;
}

CmState Cm::idle_dreq(CmId&, Input& in) {  // a DREQ repeated after our TimeWait ended
  rx_dreq_unknown(*in.from, in.mad);
  return CmState::Idle;
}

CmState Cm::listen_destroy(CmId& id, Input&) {
  std::erase(listeners_, &id);
  return CmState::Idle;
}

CmState Cm::req_sent_mra(CmId& id, Input& in) { return rx_mra(id, in, CmMsgRef::Req, CmState::MraReqRcvd); }
CmState Cm::req_timeout(CmId& id, Input&) { return retransmit_or(id, CmState::ReqSent, CmEventType::ReqTimeout); }

CmState Cm::req_sent_destroy(CmId& id, Input&) {
  // ib_cm: giving up on a REQ rejects it with reason timeout.
  RejMsg j;
  j.local_comm_id = id.local_id;
  j.message_rejected = static_cast<uint8_t>(CmMsgRef::Other);
  j.reason = static_cast<uint16_t>(RejReason::Timeout);
  j.reject_info_length = 8;
  wire::store_be(j.ari.data(), cfg_.ca_guid);
  send_new(id, j, id.tid, false);
  return CmState::Idle;
}

CmState Cm::reject_req(CmId& id, Input& in) { return do_reject(id, in, CmMsgRef::Req); }
CmState Cm::reject_rep(CmId& id, Input& in) { return do_reject(id, in, CmMsgRef::Rep); }
CmState Cm::mra_req(CmId& id, Input& in) { return do_send_mra(id, in, CmMsgRef::Req, CmState::MraReqSent); }
CmState Cm::mra_rep(CmId& id, Input& in) { return do_send_mra(id, in, CmMsgRef::Rep, CmState::MraRepSent); }

CmState Cm::dup_req_count(CmId& id, Input&) {  // the consumer has not answered yet: nothing to repeat
  ctr_.inc(CmCtr::rx_dup_req);
  return id.state;
}

CmState Cm::dup_req_mra(CmId& id, Input&) {  // 12.9.6: a repeated REQ gets the MRA again
  ctr_.inc(CmCtr::rx_dup_req);
  if (id.has_mra_sent) send_mad(id.peer, id.mra_sent);
  return id.state;
}

CmState Cm::dup_req_resend(CmId& id, Input&) {  // our REP was lost: repeat it
  ctr_.inc(CmCtr::rx_dup_req);
  send_stored(id);
  return id.state;
}

CmState Cm::drop_req(CmId&, Input&) {  // nothing sent: the peer's REQ retry comes back as new
  ctr_.inc(CmCtr::req_dropped);
  return CmState::Idle;
}

CmState Cm::rep_sent_mra(CmId& id, Input& in) { return rx_mra(id, in, CmMsgRef::Rep, CmState::MraRepRcvd); }
CmState Cm::rep_timeout(CmId& id, Input&) { return retransmit_or(id, CmState::RepSent, CmEventType::RepTimeout); }

CmState Cm::send_rtu_h(CmId& id, Input& in) {
  if (in.pdata.size() > sizeof(RtuMsg{}.private_data)) return bad_call(id, in);
  RtuMsg r;
  r.local_comm_id = id.local_id;
  r.remote_comm_id = id.remote_id;
  copy_in(r.private_data, in.pdata);
  send_new(id, r, id.tid, true);  // kept: a repeated REP gets it again
  return enter_established(id);
}

CmState Cm::dup_rep_count(CmId& id, Input&) {  // the consumer has not answered yet
  ctr_.inc(CmCtr::rx_dup_rep);
  return id.state;
}

CmState Cm::dup_rep_mra(CmId& id, Input&) {
  ctr_.inc(CmCtr::rx_dup_rep);
  if (id.has_mra_sent) send_mad(id.peer, id.mra_sent);
  return id.state;
}

CmState Cm::established_dup_rep(CmId& id, Input&) {  // our RTU was lost: repeat it
  ctr_.inc(CmCtr::rx_dup_rep);
  if (id.active) send_stored(id);
  return id.state;
}

CmState Cm::established_rej(CmId& id, Input& in) {
  // A peer that finds our connection stale rejects it (12.9, stale connections).
  const RejMsg j = decode(RejViewC(body_of(in.mad)));
  if (j.reason != static_cast<uint16_t>(RejReason::StaleConn)) return ignore(id, in);
  rx_rej(id, in);
  return enter_timewait(id);
}

CmState Cm::dreq_sent_drep(CmId& id, Input&) {
  post(id, CmEventType::DrepReceived);
  return enter_timewait(id);
}

CmState Cm::dreq_sent_dreq(CmId& id, Input& in) {
  // Both sides sent a DREQ (12.9.6): answer theirs and wait out time.
  const DreqMsg d = decode(DreqViewC(body_of(in.mad)));
  if (d.remote_qpn_eecn != id.local_qpn.value()) {
    ctr_.inc(CmCtr::rx_bad_qpn);
    return id.state;
  }
  id.tid = tid_of(in.mad);
  CmEvent& ev = post(id, CmEventType::DreqReceived);
  set_event_pdata(ev, d.private_data);
  Input reply{CmInput::Disconnect};
  return do_send_drep(id, reply);
}

CmState Cm::dreq_timeout(CmId& id, Input&) {
  return retransmit_or(id, CmState::DreqSent, CmEventType::DreqTimeout);
}

CmState Cm::dreq_rcvd_destroy(CmId& id, Input&) {
  Input reply{CmInput::Disconnect};
  return do_send_drep(id, reply);
}

CmState Cm::dup_dreq_count(CmId& id, Input&) {
  ctr_.inc(CmCtr::rx_dup_dreq);
  return id.state;
}

CmState Cm::timewait_exit(CmId& id, Input&) {
  post(id, CmEventType::TimewaitExit);
  return CmState::Idle;
}

CmState Cm::timewait_dreq(CmId& id, Input& in) {  // our DREP was lost: repeat it
  ctr_.inc(CmCtr::rx_dup_dreq);
  if (id.has_last_sent &&
      wire::MadHdrC(id.last_sent.data()).attr_id() == static_cast<uint16_t>(wire::CmAttr::Drep)) {
    send_stored(id);
  } else {  // we were the one asking: a fresh DREP for their DREQ
    DrepMsg d;
    d.local_comm_id = id.local_id;
    d.remote_comm_id = id.remote_id;
    send_mad(id.peer, build_mad(d, tid_of(in.mad)));
  }
  return id.state;
}

CmState Cm::timewait_req(CmId& id, Input& in) {  // ib_cm: a REQ for a connection in TimeWait is stale
  ctr_.inc(CmCtr::rej_stale);
  const ReqMsg r = decode(ReqViewC(body_of(in.mad)));
  send_rej_stateless(*in.from, tid_of(in.mad), r.local_comm_id, RejReason::StaleConn, CmMsgRef::Req);
  return id.state;
}

CmState Cm::sidr_rep(CmId& id, Input& in) {
  const SidrRepMsg r = decode(SidrRepViewC(body_of(in.mad)));
  CmEvent& ev = post(id, CmEventType::SidrRepReceived);
  ev.sidr_status = static_cast<SidrStatus>(r.status);
  ev.sidr_qpn = Qpn(r.qpn);
  ev.sidr_qkey = r.qkey;
  ev.service_id = r.service_id;
  ev.ari = r.additional_info;
  ev.ari_len = std::min<uint8_t>(r.additional_info_length, static_cast<uint8_t>(r.additional_info.size()));
  set_event_pdata(ev, r.private_data);
  id.remote_qpn = Qpn(r.qpn);
  return CmState::Idle;
}

CmState Cm::sidr_timeout(CmId& id, Input&) {
  return retransmit_or(id, CmState::SidrReqSent, CmEventType::SidrTimeout);
}

CmState Cm::sidr_reply_h(CmId& id, Input& in) {
  SidrReplyParams reject_params;
  reject_params.status = SidrStatus::Reject;  // ib_cm: destroyed unanswered
  const auto& p = in.kind == CmInput::SidrReply ? *std::get<const SidrReplyParams*>(in.params) : reject_params;
  if (p.private_data.size() > sizeof(SidrRepMsg{}.private_data) ||
      p.additional_info.size() > sizeof(SidrRepMsg{}.additional_info)) {
    return bad_call(id, in);
  }
  SidrRepMsg r;
  r.request_id = id.remote_id;
  r.status = static_cast<uint8_t>(p.status);
  r.additional_info_length = static_cast<uint8_t>(p.additional_info.size());
  r.qpn = p.qpn.value();
  r.service_id = id.service_id;
  r.qkey = p.qkey;
  copy_in(r.additional_info, p.additional_info);
  copy_in(r.private_data, p.private_data);
  send_new(id, r, id.tid, true);  // kept: a repeated SIDR_REQ gets it again
  return CmState::Idle;
}

// The table: [state][input] -> handler (IBA 12.9.6, figures 140 and 141;
// the handlers above say what each cell does and why).
constexpr Cm::Transitions Cm::make_transitions() {
  using S = CmState;
  using I = CmInput;
  Transitions t{};
  // The defaults: a consumer call a state does not take is refused, any
  // other input is dropped.
  for (auto& row : t) {
    for (size_t i = 0; i < row.size(); ++i) {
      row[i] = input_class(static_cast<I>(i)) == CmInputClass::Call ? &Cm::bad_call : &Cm::ignore;
    }
  }
  auto set = [&t](S s, I i, Handler h) { t[static_cast<size_t>(s)][static_cast<size_t>(i)] = h; };

  set(S::Idle, I::Connect, &Cm::do_connect);
  set(S::Idle, I::Listen, &Cm::idle_listen);
  set(S::Idle, I::SidrResolve, &Cm::idle_sidr_resolve);
  set(S::Idle, I::RecvReq, &Cm::rx_req_new);
  set(S::Idle, I::RecvSidrReq, &Cm::idle_sidr_req);
  set(S::Idle, I::RecvDreq, &Cm::idle_dreq);
  set(S::Idle, I::Destroy, &Cm::to_idle);

  set(S::Listen, I::Destroy, &Cm::listen_destroy);

  for (S s : {S::ReqSent, S::MraReqRcvd}) {
    set(s, I::RecvRep, &Cm::rx_rep);
    set(s, I::RecvRej, &Cm::rx_rej);
    set(s, I::Timeout, &Cm::req_timeout);
    set(s, I::Destroy, &Cm::req_sent_destroy);
  }
  set(S::ReqSent, I::RecvMra, &Cm::req_sent_mra);

  for (S s : {S::ReqRcvd, S::MraReqSent}) {
    set(s, I::Accept, &Cm::do_accept);
    set(s, I::Reject, &Cm::reject_req);
    set(s, I::RecvRej, &Cm::rx_rej);  // the active side gave up
    set(s, I::Destroy, &Cm::destroy_connected);
  }
  set(S::ReqRcvd, I::SendMra, &Cm::mra_req);
  set(S::ReqRcvd, I::RecvReq, &Cm::dup_req_count);
  set(S::ReqRcvd, I::Drop, &Cm::drop_req);
  set(S::MraReqSent, I::RecvReq, &Cm::dup_req_mra);

  for (S s : {S::RepSent, S::MraRepRcvd}) {
    set(s, I::RecvRtu, &Cm::established_h);
    set(s, I::CommEst, &Cm::established_h);  // 12.9.6: the first data packet stands for a lost RTU
    set(s, I::RecvReq, &Cm::dup_req_resend);
    set(s, I::RecvRej, &Cm::rx_rej);
    set(s, I::RecvDreq, &Cm::rx_dreq);
    set(s, I::Timeout, &Cm::rep_timeout);
    set(s, I::Destroy, &Cm::destroy_connected);
  }
  set(S::RepSent, I::RecvMra, &Cm::rep_sent_mra);

  for (S s : {S::RepRcvd, S::MraRepSent}) {
    set(s, I::SendRtu, &Cm::send_rtu_h);
    set(s, I::Reject, &Cm::reject_rep);
    set(s, I::RecvRej, &Cm::rx_rej);
    set(s, I::Destroy, &Cm::destroy_connected);
  }
  set(S::RepRcvd, I::SendMra, &Cm::mra_rep);
  set(S::RepRcvd, I::RecvRep, &Cm::dup_rep_count);
  set(S::MraRepSent, I::RecvRep, &Cm::dup_rep_mra);

  set(S::Established, I::RecvRep, &Cm::established_dup_rep);
  set(S::Established, I::RecvReq, &Cm::dup_req_count);
  set(S::Established, I::RecvDreq, &Cm::rx_dreq);
  set(S::Established, I::Disconnect, &Cm::do_send_dreq);
  set(S::Established, I::Destroy, &Cm::do_send_dreq);
  set(S::Established, I::Stale, &Cm::do_send_dreq);  // 12.9: a new REQ reuses our peer's QP: release ours
  set(S::Established, I::RecvRej, &Cm::established_rej);
  set(S::Established, I::CommEst, &Cm::stay);
  set(S::Established, I::RecvRtu, &Cm::stay);

  set(S::DreqSent, I::RecvDrep, &Cm::dreq_sent_drep);
  set(S::DreqSent, I::RecvDreq, &Cm::dreq_sent_dreq);
  set(S::DreqSent, I::Timeout, &Cm::dreq_timeout);
  for (I i : {I::Disconnect, I::Destroy, I::CommEst}) set(S::DreqSent, i, &Cm::stay);  // already disconnecting

  set(S::DreqRcvd, I::Disconnect, &Cm::do_send_drep);
  set(S::DreqRcvd, I::Destroy, &Cm::dreq_rcvd_destroy);
  set(S::DreqRcvd, I::RecvDreq, &Cm::dup_dreq_count);
  set(S::DreqRcvd, I::CommEst, &Cm::stay);

  set(S::TimeWait, I::Timeout, &Cm::timewait_exit);
  set(S::TimeWait, I::RecvDreq, &Cm::timewait_dreq);
  set(S::TimeWait, I::RecvReq, &Cm::timewait_req);
  for (I i : {I::Disconnect, I::Destroy, I::CommEst}) set(S::TimeWait, i, &Cm::stay);

  set(S::SidrReqSent, I::RecvSidrRep, &Cm::sidr_rep);
  set(S::SidrReqSent, I::Timeout, &Cm::sidr_timeout);
  set(S::SidrReqSent, I::Destroy, &Cm::to_idle);

  set(S::SidrReqRcvd, I::SidrReply, &Cm::sidr_reply_h);
  set(S::SidrReqRcvd, I::Destroy, &Cm::sidr_reply_h);
  set(S::SidrReqRcvd, I::RecvSidrReq, &Cm::stay);  // the consumer is still deciding
  return t;
}

const Cm::Transitions Cm::kTransitions = Cm::make_transitions();

}  // namespace uroce::cm
