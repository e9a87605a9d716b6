// The rdma_cm model (rdma_cm.hpp).  What Linux's rdma_cm (cma.c) and
// librdmacm (cma.c) do is the behaviour matched: which CM event becomes
// which rdma_cm event with which status and private data, how the QP is
// moved, how conn params are negotiated.  IBA rule numbers are chapter 12's.
#include "cm/rdma_cm.hpp"
#include "cm/rdma_cm_internal.hpp"
#include "lib/util/log.hpp"

#include "transport/telemetry.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <cerrno>
#include <cstring>
#include <random>

namespace uroce::cm {

using namespace detail;

namespace {

constexpr int kDefaultBacklog = 1024;

uint32_t random_psn() {
  static thread_local std::mt19937 rng{std::random_device{}()};
  return rng() & 0xFFFFFF;
}

template <size_t N>
void set_pdata(RdmaEvent& ev, const std::array<uint8_t, N>& src, size_t offset) {
  const size_t n = N > offset ? N - offset : 0;
  static_assert(N <= sizeof(RdmaEvent{}.pdata));
  std::memcpy(ev.pdata.data(), src.data() + offset, n);
  ev.pdata_len = static_cast<uint8_t>(n);
}

void set_pdata(RdmaEvent& ev, std::span<const uint8_t> src, size_t offset) {
  const size_t n = src.size() > offset ? std::min(src.size() - offset, ev.pdata.size()) : 0;
  if (n) std::memcpy(ev.pdata.data(), src.data() + offset, n);
  ev.pdata_len = static_cast<uint8_t>(n);
}

// The connection parameters a REQ or a REP carries to the consumer
// (rdma_conn_param): the same fields in both messages.
template <class Msg>
void set_conn(RdmaEvent& out, const Msg& m) {
  out.conn.responder_resources = m.responder_resources;
  out.conn.initiator_depth = m.initiator_depth;
  out.conn.flow_control = m.end_to_end_flow_control;
  out.conn.rnr_retry_count = m.rnr_retry_count;
  out.conn.srq = m.srq;
  out.conn.qp_num = m.local_qpn;
}

// Capped by what the device does (librdmacm: 0xFF means "the maximum").
uint8_t rd_atomic(uint8_t asked, const rnic::Rnic& r) {
  const auto max = static_cast<uint8_t>(std::min(r.device_attr().max_qp_rd_atom, 255));
  return asked == RDMA_MAX_RESP_RES ? max : std::min(asked, max);
}

}  // namespace

std::optional<IpAddr> ip_of(const sockaddr* s) {
  if (s == nullptr) return std::nullopt;
  if (s->sa_family == AF_INET) {
    uint32_t a;
    std::memcpy(&a, &reinterpret_cast<const sockaddr_in*>(s)->sin_addr, 4);
    return IpAddr::v4(ntohl(a));
  }
  if (s->sa_family == AF_INET6) {
    IpAddr ip;
    std::memcpy(ip.bytes.data(), &reinterpret_cast<const sockaddr_in6*>(s)->sin6_addr, 16);
    return ip;
  }
  return std::nullopt;
}

uint16_t port_of(const sockaddr* s) {
  if (s == nullptr) return 0;
  if (s->sa_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(s)->sin_port);
  if (s->sa_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(s)->sin6_port);
  return 0;
}

socklen_t sockaddr_len(const sockaddr* s) {
  if (s == nullptr) return 0;
  return s->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : s->sa_family == AF_INET ? sizeof(sockaddr_in) : 0;
}

// ---- construction --------------------------------------------------------------

RdmaCm::RdmaCm(std::vector<RdmaCmDevice> devices, RdmaCmOptions options) : opt_(options) {
  for (size_t i = 0; i < devices.size(); ++i) {
    auto d = std::make_unique<RdmaDev>();
    d->model = this;
    d->index = i;
    d->cfg = std::move(devices[i]);
    devs_.push_back(std::move(d));
  }
  next_port_ = kEphemeralLow + std::random_device{}() % (kEphemeralHigh - kEphemeralLow);
}

// The devices' CMs stay: what this model made on them goes (its connections
// are destroyed as rdma_destroy_id does, a DREQ or REJ where the CM's
// state says), and the CMs have no consumer until the next one starts.
RdmaCm::~RdmaCm() {
  for (auto& dp : devs_) {
    RdmaDev& d = *dp;
    if (d.cm == nullptr) continue;
    d.engine().run_sync([&] {
      (void)d.cfg.cm->set_consumer(nullptr);
      d.engine().set_resolve_hook(nullptr);
      d.cfg.rnic->set_comm_est_hook(nullptr);
      from_engine(d, [&] {
        for (RdmaId* id : ids_) {
          d.engine().timers().cancel(id->addr_timer);
          if (id->dev == &d && id->cm_id != nullptr) d.cm->destroy_id(std::exchange(id->cm_id, nullptr));
        }
        for (auto& [sid, l] : d.cm_listens) d.cm->destroy_id(l);
        d.cm_listens.clear();
      });
    });
  }
  for (RdmaId* id : ids_) delete id;
  for (RdmaChannel* ch : channels_) delete ch;
}

int RdmaCm::start() {
  for (auto& dp : devs_) {
    RdmaDev& d = *dp;
    if (d.cm != nullptr) continue;
    if (d.cfg.cm == nullptr || d.cfg.rnic == nullptr || &d.cfg.cm->rnic() != d.cfg.rnic) return EINVAL;
    transport::Engine* e = &d.engine();
    RdmaDev* dev = &d;
    int rc = 0;
    d.engine().run_sync([&] {
      // A CM event comes inside an entry (the CM held it while the entry
      // ran, and delivers it as the entry ends: from_engine), or from the
      // CM's own work (a MAD, a timer), which enters the model for it.
      rc = d.cfg.cm->set_consumer([this, dev](const CmEvent& ev) {
        if (dev->in_entry) {
          on_cm_event(*dev, ev);
        } else {
          from_engine(*dev, [&] { on_cm_event(*dev, ev); });
        }
      });
      if (rc != 0) return;
      d.cm = &d.cfg.cm->cm();
      e->set_resolve_hook([this, dev](const IpAddr& ip, bool ok) { raise(*dev, Resolved{ip, ok}); });
      d.cfg.rnic->set_comm_est_hook([this, dev](rnic::Qp& qp) { raise(*dev, CommEst{&qp}); });
    });
    if (rc != 0) return rc;
  }
  return 0;
}

const CmCounters* RdmaCm::cm_counters(size_t dev) const {
  return dev < devs_.size() && devs_[dev]->cm ? &devs_[dev]->cm->counters() : nullptr;
}
const GsiCounters* RdmaCm::gsi_counters(size_t dev) const {
  return dev < devs_.size() && devs_[dev]->cm ? &devs_[dev]->cfg.cm->gsi().counters() : nullptr;
}

RdmaCm::Usage RdmaCm::usage() {
  Usage u;
  for (auto& dp : devs_) {
    RdmaDev& d = *dp;
    if (!d.cm) continue;
    on_engine(d, [&] {  // the CM's tables are the engine's
      u.cm_ids += d.cm->id_count();
      u.cm_peers += d.cm->remote_index_size();
      u.cm_listens += d.cm_listens.size();
      u.accepting += d.accepting.size();
      u.resolving += d.resolving.size();
    });
  }
  std::lock_guard lock(mu_);
  u.ids = ids_.size();
  u.channels = channels_.size();
  u.bound_ports = ports_.size();
  return u;
}

void RdmaCm::progress() {
  for (auto& d : devs_)
    if (d->cfg.inline_progress) d->engine().progress().try_progress();
}

int RdmaCm::wait_count(RdmaChannel* ch, bool drive) {
  if (!drive) return ch->q.take_count();
  // Nobody else runs inline engines: run them once (the event may be one
  // iteration away), then let their backstops run them while this thread
  // sleeps in read(2), where a signal interrupts it.
  progress();
  std::deque<transport::Progress::Sleeper> sleepers;
  for (auto& d : devs_)
    if (d->cfg.inline_progress) sleepers.emplace_back(d->engine().progress());
  return ch->q.take_count();
}

rnic::Rnic* RdmaCm::rnic_of(ibv_context* verbs) {
  for (auto& d : devs_)
    if (d->cfg.verbs == verbs) return d->cfg.rnic;
  return nullptr;
}

std::vector<ibv_context*> RdmaCm::contexts() {
  std::vector<ibv_context*> v;
  for (auto& d : devs_) v.push_back(d->cfg.verbs);
  return v;
}

// ---- channels and events -------------------------------------------------------------

RdmaChannel* RdmaCm::create_channel() {
  auto* ch = new RdmaChannel;
  if (!ch->q.valid()) {
    delete ch;
    return nullptr;
  }
  std::lock_guard lock(mu_);
  channels_.insert(ch);
  return ch;
}

int RdmaCm::destroy_channel(RdmaChannel* ch) {
  std::lock_guard lock(mu_);
  if (channels_.count(ch) == 0) return EINVAL;
  for (RdmaId* id : ids_)
    if (id->channel == ch && !id->destroyed) return EBUSY;
  channels_.erase(ch);
  delete ch;
  return 0;
}

void RdmaCm::queue_event(RdmaId* id, RdmaEvent ev) {
  if (id == nullptr || id->destroyed || id->channel == nullptr) return;
  ev.id = id;
  UROCE_TRACE(TraceCat::Conn, "rdma_cm id %p: %s (status %d)", static_cast<void*>(id), rdma_event_name(ev.type), ev.status);
  id->channel->q.push(ev);
}

int RdmaCm::get_event(RdmaChannel* ch, RdmaEvent* out) {
  if (ch == nullptr || out == nullptr) return EINVAL;
  {
    std::lock_guard lock(mu_);
    if (channels_.count(ch) == 0) return EINVAL;
  }
  const bool nonblock = ch->q.nonblocking();
  const bool drive = std::any_of(devs_.begin(), devs_.end(), [](auto& d) { return d->cfg.inline_progress; });
  for (;;) {
    if (const int rc = wait_count(ch, drive && !nonblock)) return rc;
    std::unique_lock lock(mu_);
    // The application destroyed the channel while a thread of its own
    // was waiting on it (rping does, at exit).  A read blocked on a closed
    // fd stays blocked; so does this thread, holding nothing.
    if (channels_.count(ch) == 0) {
      lock.unlock();
      for (;;) ::pause();
    }
    if (!ch->q.pop(out)) {  // its id was destroyed or migrated meanwhile
      if (nonblock) return EAGAIN;
      continue;
    }
    RdmaId* owner = out->type == RDMA_CM_EVENT_CONNECT_REQUEST && out->listen_id ? out->listen_id : out->id;
    ++owner->events_reported;
    if (out->type == RDMA_CM_EVENT_CONNECT_REQUEST && out->listen_id != nullptr) --out->listen_id->pending_requests;
    return 0;
  }
}

void RdmaCm::ack_event(const RdmaEvent& ev) {
  std::lock_guard lock(mu_);
  RdmaId* owner = ev.type == RDMA_CM_EVENT_CONNECT_REQUEST && ev.listen_id ? ev.listen_id : ev.id;
  if (owner != nullptr && ids_.count(owner)) ++owner->events_acked;
  acked_.notify_all();
}

// ---- ids -----------------------------------------------------------------------------

int RdmaCm::create_id(RdmaChannel* ch, void* user, rdma_port_space ps, ibv_qp_type qp_type, RdmaId** out) {
  if (out == nullptr) return EINVAL;
  if (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP && ps != RDMA_PS_IB && ps != RDMA_PS_IPOIB) return EINVAL;
  // RC, UC, UD, and XRC's two halves (rdma_xclient / rdma_xserver -c x):
  // what the kernel's rdma_cm takes in RDMA_PS_IB.
  if (qp_type != IBV_QPT_RC && qp_type != IBV_QPT_UC && qp_type != IBV_QPT_UD && qp_type != IBV_QPT_XRC_SEND &&
      qp_type != IBV_QPT_XRC_RECV)
    return EINVAL;
  auto* id = new RdmaId;
  id->user = user;
  id->channel = ch;
  id->ps = ps;
  id->qp_type = qp_type;
  id->addr_timer.cb = &RdmaCm::on_addr_timer;
  id->addr_timer.owner = id;
  std::lock_guard lock(mu_);
  ids_.insert(id);
  *out = id;
  return 0;
}

int RdmaCm::migrate_id(RdmaId* id, RdmaChannel* ch) {
  if (id == nullptr || ch == nullptr) return EINVAL;
  std::lock_guard lock(mu_);
  RdmaChannel* old = id->channel;
  if (old == ch) return 0;
  std::vector<RdmaEvent> moved;
  if (old != nullptr) {
    old->q.remove_if([&](const RdmaEvent& ev) {
      if (ev.id != id) return false;
      moved.push_back(ev);
      return true;
    });
  }
  id->channel = ch;
  for (RdmaEvent& ev : moved) queue_event(id, ev);
  return 0;
}

int RdmaCm::destroy_id(RdmaId* id) {
  std::vector<RdmaDev*> devs;
  std::vector<RdmaId*> orphans;  // requests a listener had queued, never retrieved
  std::vector<wire::Ipv6Addr> mc_leaves;
  rnic::Rnic* mc_rnic = nullptr;
  rnic::Qp* mc_qp = nullptr;
  {
    std::lock_guard lock(mu_);
    if (id == nullptr || ids_.count(id) == 0 || id->destroyed) return EINVAL;
    id->destroyed = true;
    for (const RdmaMcast& mc : id->mcasts)  // rdma_destroy_id leaves the id's groups
      if (mc.attached && id->qp != nullptr) mc_leaves.push_back(mc.mgid);
    id->mcasts.clear();
    if (id->dev != nullptr) mc_rnic = id->dev->cfg.rnic;
    mc_qp = id->qp;
    if (id->dev != nullptr) {
      devs.push_back(id->dev);
    } else if (id->state == RdmaIdState::Listen) {
      for (auto& d : devs_) devs.push_back(d.get());
    }
    // Events not yet retrieved go with the id (and the requests a listener
    // had queued: their ids are rejected below).
    if (id->channel != nullptr) {
      id->channel->q.remove_if([&](const RdmaEvent& ev) {
        if (ev.listen_id == id && ev.id != id) orphans.push_back(ev.id);
        const bool gone = ev.id == id || ev.listen_id == id;
        if (gone && ev.type == RDMA_CM_EVENT_CONNECT_REQUEST && ev.listen_id != nullptr && ev.listen_id != id)
          --ev.listen_id->pending_requests;  // a request its listener will never retrieve
        return gone;
      });
    }
    for (RdmaId* o : orphans) o->listen_parent = nullptr;
  }
  for (RdmaId* o : orphans) destroy_id(o);  // their REQs get a REJ
  if (mc_rnic != nullptr)
    for (const wire::Ipv6Addr& g : mc_leaves) mc_rnic->detach_mcast(mc_qp, g);
  const bool was_listening = id->state == RdmaIdState::Listen;
  const auto port = static_cast<uint16_t>(port_of(sa(id->src)));
  for (RdmaDev* d : devs) {
    on_engine(*d, [&] {
      d->engine().timers().cancel(id->addr_timer);
      for (auto it = d->resolving.begin(); it != d->resolving.end();) {
        it = it->second == id ? d->resolving.erase(it) : std::next(it);
      }
      std::erase(d->accepting, id);
      if (id->cm_id != nullptr) {
        id->cm_id->context = nullptr;
        d->cm->destroy_id(id->cm_id);  // rejects, or sends a DREQ, as the CM's state says
        id->cm_id = nullptr;
      }
    });
  }
  {
    std::unique_lock lock(mu_);
    unbind_locked(id);
  }
  if (was_listening) {
    for (RdmaDev* d : devs) on_engine(*d, [&] { update_cm_listens(*d, id->ps, port); });
  }
  std::unique_lock lock(mu_);
  // rdma_destroy_id(3): blocks until every event reported on the id is acked.
  acked_.wait(lock, [id] { return id->events_acked >= id->events_reported; });
  for (RdmaId* other : ids_)
    if (other->listen_parent == id) other->listen_parent = nullptr;
  ids_.erase(id);
  delete id;
  return 0;
}

void RdmaCm::device_removed(const rnic::Rnic* rnic) {
  std::lock_guard lock(mu_);
  for (RdmaId* id : ids_) {
    if (id->dev == nullptr || id->dev->cfg.rnic != rnic || id->removal_reported || id->destroyed) continue;
    id->removal_reported = true;
    RdmaEvent ev;
    ev.type = RDMA_CM_EVENT_DEVICE_REMOVAL;
    queue_event(id, ev);
  }
}

// ---- listening -----------------------------------------------------------------------------

int RdmaCm::listen(RdmaId* id, int backlog) {
  std::vector<RdmaDev*> devs;
  {
    std::lock_guard lock(mu_);
    if (id == nullptr || ids_.count(id) == 0) return EINVAL;
    if (id->state == RdmaIdState::Idle) {  // rdma_listen(3) on an unbound id: any address, any port
      sockaddr_in any{};
      any.sin_family = AF_INET;
      if (const int rc = bind_locked(id, reinterpret_cast<const sockaddr*>(&any)); rc != 0) return rc;
    }
    if (!rdma_id_allows(id->state, RdmaIdInput::Listen)) return EINVAL;
    if (id->state == RdmaIdState::Listen) {  // again: the new backlog
      id->backlog = backlog > 0 ? backlog : kDefaultBacklog;
      return 0;
    }
    // Another listener on an overlapping address and this port?
    auto it = ports_.find({id->ps, port_of(sa(id->src))});
    if (it != ports_.end()) {
      const auto ip = ip_of(sa(id->src));
      for (const RdmaId* o : it->second) {
        if (o == id || o->state != RdmaIdState::Listen) continue;
        const auto oip = ip_of(sa(o->src));
        if (oip && (*oip == *ip || binds_any(*oip) || binds_any(*ip)) && oip->is_v4() == ip->is_v4())
          return EADDRINUSE;
      }
    }
    // Another process's listener (the daemon's port space)?  Then REQs
    // for this one come here.
    if (arbiter_.listen) {
      if (const int rc = arbiter_.listen(reinterpret_cast<uint64_t>(id), true); rc != 0) return rc;
    }
    step(*id, RdmaIdInput::Listen);
    id->backlog = backlog > 0 ? backlog : kDefaultBacklog;
    if (id->dev != nullptr) {
      devs.push_back(id->dev);
    } else {
      for (auto& d : devs_) devs.push_back(d.get());
    }
  }
  const uint16_t port = port_of(sa(id->src));
  for (RdmaDev* d : devs) on_engine(*d, [&] { update_cm_listens(*d, id->ps, port); });
  // REQs for this port are taken from here on: the line a script waits for
  // before it starts a client (UROCE_TRACE=conn).
  UROCE_TRACE(TraceCat::Conn, "rdma_cm id %p: listening on port %u, %zu device(s)", static_cast<void*>(id),
              static_cast<unsigned>(port), devs.size());
  return 0;
}

// One CM listen per (device, service ID) while some id listens there.
void RdmaCm::update_cm_listens(RdmaDev& d, rdma_port_space ps, uint16_t port) {
  UROCE_ASSERT_ENGINE(d.engine());
  const uint64_t sid = cma_service_id(static_cast<PortSpace>(ps), port);
  bool wanted = false;
  if (auto it = ports_.find({ps, port}); it != ports_.end()) {
    for (const RdmaId* o : it->second)
      if (o->state == RdmaIdState::Listen && !o->destroyed && (o->dev == nullptr || o->dev == &d)) wanted = true;
  }
  auto have = d.cm_listens.find(sid);
  if (wanted && have == d.cm_listens.end()) {
    CmId* l = d.cm->create_id(nullptr);
    if (d.cm->listen(l, sid) == 0) {
      d.cm_listens.emplace(sid, l);
    } else {
      d.cm->destroy_id(l);
    }
  } else if (!wanted && have != d.cm_listens.end()) {
    d.cm->destroy_id(have->second);
    d.cm_listens.erase(have);
  }
}

// The listening id for a request on `d`: bound to the header's destination
// address (or a wildcard of its family) on the service's port.
RdmaId* RdmaCm::listener_for(RdmaDev& d, uint64_t service_id, const std::optional<CmaHdr>& hdr) {
  if (!is_cma_service_id(service_id)) return nullptr;
  const auto ps = static_cast<int>(cma_port_space(service_id));
  auto it = ports_.find({ps, cma_port(service_id)});
  if (it == ports_.end()) return nullptr;
  std::optional<IpAddr> dst;
  if (hdr) {
    IpAddr a;
    a.bytes = hdr->dst;
    if (hdr->ip_version == 4) a = IpAddr::v4(hdr->dst_ipv4());
    dst = a;
  }
  RdmaId* wild = nullptr;
  for (RdmaId* o : it->second) {
    if (o->state != RdmaIdState::Listen || o->destroyed || (o->dev != nullptr && o->dev != &d)) continue;
    const auto oip = ip_of(sa(o->src));
    if (!oip) continue;
    if (dst && *oip == *dst) return o;
    if (binds_any(*oip) && (!dst || oip->is_v4() == dst->is_v4() || (!oip->is_v4() && !o->afonly))) wild = o;
  }
  return wild;
}

// ---- the CM's events ---------------------------------------------------------------------------

void RdmaCm::on_cm_event(RdmaDev& d, const CmEvent& ev) {
  UROCE_ASSERT_ENGINE(d.engine());
  if (ev.type == CmEventType::ReqReceived || ev.type == CmEventType::SidrReqReceived) {
    on_req(d, ev, ev.type == CmEventType::SidrReqReceived);
    return;
  }
  auto* id = ev.id != nullptr ? static_cast<RdmaId*>(ev.id->context) : nullptr;
  if (id == nullptr || id->destroyed) return;
  RdmaEvent out;
  switch (ev.type) {
    case CmEventType::ReqReceived:
    case CmEventType::SidrReqReceived:
    case CmEventType::MraReceived:
      return;
    case CmEventType::RepReceived:
      on_rep(*id, ev);
      return;
    case CmEventType::Established:
      std::erase(d.accepting, id);
      if (ev.id->active) return;  // the active side reported at the REP
      if (!step(*id, RdmaIdInput::Established)) return;
      out.type = RDMA_CM_EVENT_ESTABLISHED;
      out.conn.responder_resources = id->responder_resources;
      out.conn.initiator_depth = id->initiator_depth;
      queue_event(id, out);
      return;
    case CmEventType::RejReceived:
      // cma_ib_handler: the QP to ERR, REJECTED with the REJ's reason as
      // status and its whole private-data field.
      if (!step(*id, RdmaIdInput::Rejected)) return;
      qp_to_error(*id);
      std::erase(d.accepting, id);
      out.type = RDMA_CM_EVENT_REJECTED;
      out.status = ev.reason;
      set_pdata(out, ev.private_data(), 0);
      out.pdata_len = static_cast<uint8_t>(std::min<size_t>(out.pdata_len, sizeof(RejMsg{}.private_data)));
      queue_event(id, out);
      return;
    case CmEventType::DreqReceived:
    case CmEventType::DrepReceived:
    case CmEventType::DreqTimeout:
      qp_to_error(*id);  // outstanding work requests flush
      if (id->disconnect_reported || !step(*id, RdmaIdInput::Disconnected)) return;
      id->disconnect_reported = true;
      out.type = RDMA_CM_EVENT_DISCONNECTED;
      queue_event(id, out);
      return;
    case CmEventType::TimewaitExit:
      out.type = RDMA_CM_EVENT_TIMEWAIT_EXIT;
      queue_event(id, out);
      return;
    case CmEventType::ReqTimeout:
    case CmEventType::RepTimeout:
    case CmEventType::SidrTimeout:
      if (!step(*id, RdmaIdInput::Unreachable)) return;
      qp_to_error(*id);
      std::erase(d.accepting, id);
      out.type = RDMA_CM_EVENT_UNREACHABLE;
      out.status = -ETIMEDOUT;
      out.ud = ev.type == CmEventType::SidrTimeout;
      queue_event(id, out);
      return;
    case CmEventType::SidrRepReceived: {
      out.ud = true;
      if (!step(*id, ev.sidr_status == SidrStatus::Success ? RdmaIdInput::Established : RdmaIdInput::Unreachable))
        return;
      if (ev.sidr_status != SidrStatus::Success) {
        out.type = RDMA_CM_EVENT_UNREACHABLE;
        out.status = static_cast<int>(ev.sidr_status);
      } else {
        out.type = RDMA_CM_EVENT_ESTABLISHED;
        ibv_ah_attr& ah = out.ud_param.ah_attr;
        ah.is_global = 1;
        ah.port_num = 1;
        ah.dlid = 0xFFFF;
        ah.grh.sgid_index = static_cast<uint8_t>(std::max(id->sgid_index, 0));
        ah.grh.hop_limit = id->path.hop_limit;
        ah.grh.traffic_class = id->tos;
        std::memcpy(ah.grh.dgid.raw, id->path.remote_gid.data(), 16);
        out.ud_param.qp_num = ev.sidr_qpn.value();
        out.ud_param.qkey = ev.sidr_qkey;
      }
      set_pdata(out, ev.private_data(), 0);
      out.pdata_len = static_cast<uint8_t>(std::min<size_t>(out.pdata_len, sizeof(SidrRepMsg{}.private_data)));
      queue_event(id, out);
      return;
    }
  }
}

void RdmaCm::on_req(RdmaDev& d, const CmEvent& ev, bool sidr) {
  UROCE_ASSERT_ENGINE(d.engine());
  // rdma_cm's own header at the head of the private data (cma_hdr.hpp):
  // the model's to read, not the IB CM's.
  const std::optional<CmaHdr> cma =
      is_cma_service_id(ev.service_id) ? read_cma_hdr(ev.private_data()) : std::nullopt;
  RdmaId* l = listener_for(d, ev.service_id, cma);
  if (l == nullptr || !cma) {
    // No listener for that address (the CM listened for the service ID):
    // as Linux, a REJ "invalid service ID" / SIDR_REP "unsupported".
    if (sidr) {
      SidrReplyParams p;
      p.status = SidrStatus::Unsupported;
      d.cm->sidr_reply(ev.id, p);
    } else {
      d.cm->reject(ev.id, RejReason::InvalidServiceId);
    }
    d.cm->destroy_id(ev.id);
    return;
  }
  // The listen backlog counts CONNECT_REQUESTs queued and not yet
  // retrieved (as Linux's ucma).  When it is full, Linux's ib_cm forgets a
  // REQ without answering it, so the active side's retransmission gets
  // another chance; a SIDR_REQ is rejected.
  if (l->pending_requests >= l->backlog) {
    if (sidr) {
      SidrReplyParams p;
      p.status = SidrStatus::Reject;
      d.cm->sidr_reply(ev.id, p);
      d.cm->destroy_id(ev.id);
    } else {
      d.cm->drop_request(ev.id);
    }
    return;
  }
  auto* id = new RdmaId;
  id->channel = l->channel;
  id->ps = l->ps;
  // The request's service makes the new id's QP type (an XRC REQ comes
  // from a send QP, so the id gets a receive QP, as the kernel's rdma_cm).
  const auto service = static_cast<CmTransport>(sidr ? 0 : ev.req->transport_service_type);
  id->qp_type = sidr                           ? IBV_QPT_UD
                : service == CmTransport::UC  ? IBV_QPT_UC
                : service == CmTransport::Xrc ? IBV_QPT_XRC_RECV
                                              : IBV_QPT_RC;
  id->addr_timer.cb = &RdmaCm::on_addr_timer;
  id->addr_timer.owner = id;
  id->dev = &d;
  id->verbs = d.cfg.verbs;
  id->cm_id = ev.id;
  id->listen_parent = l;
  id->tos = l->tos;
  id->ack_timeout = l->ack_timeout;
  id->qkey = l->qkey;
  ev.id->context = id;
  const CmaHdr& h = *cma;
  const uint16_t lport = port_of(sa(l->src));
  IpAddr our, peer;
  if (h.ip_version == 4) {
    our = IpAddr::v4(h.dst_ipv4());
    peer = IpAddr::v4(h.src_ipv4());
  } else {
    our.bytes = h.dst;
    peer.bytes = h.src;
  }
  set_sockaddr(id->src, our, lport);
  set_sockaddr(id->dst, peer, h.port);
  const IpAddr our_gid = gid_ip(d, our);
  id->sgid_index = d.cfg.rnic->find_gid(our_gid.bytes);
  CmPath& p = id->path;
  p.local_gid = our_gid.bytes;
  p.remote_gid = ev.id->peer.gid;
  if (!sidr) {
    const ReqMsg& r = *ev.req;
    p.mtu = r.path_mtu;
    p.flow_label = r.primary_flow_label;
    p.traffic_class = r.primary_traffic_class;
    p.hop_limit = r.primary_hop_limit;
    p.sl = r.primary_sl;
    p.local_ack_timeout = r.primary_local_ack_timeout;
    p.pkey = r.partition_key;
    // librdmacm keeps the request's values for an accept that asks for
    // "the maximum" (RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH).
    id->responder_resources = r.initiator_depth;
    id->initiator_depth = r.responder_resources;
  } else {
    p.mtu = rnic::ib_mtu_for(d.cfg.rnic->active_mtu_bytes());
  }
  id->route_valid = true;
  // The PSN our REP will carry, known now: an application that brings its
  // own QP up (rdma_init_qp_attr) before rdma_accept gets it as rq_psn.
  id->rep_psn = random_psn();
  step(*id, RdmaIdInput::ConnectRequest);
  ids_.insert(id);
  ++l->pending_requests;

  RdmaEvent out;
  out.type = RDMA_CM_EVENT_CONNECT_REQUEST;
  out.listen_id = l;
  // cma_set_req_event_data: the user's bytes after the rdma_cm header; the
  // REQ's values as they came.
  if (sidr) {
    out.ud = true;
    set_pdata(out, ev.private_data(), kCmaHdrSize);
    out.pdata_len = static_cast<uint8_t>(std::min<size_t>(out.pdata_len, kSidrReqUserDataMax));
  } else {
    const ReqMsg& r = *ev.req;
    set_pdata(out, r.private_data, kCmaHdrSize);
    set_conn(out, r);
    out.conn.retry_count = r.retry_count;  // a REQ's only
  }
  queue_event(id, out);
}

void RdmaCm::on_rep(RdmaId& id, const CmEvent& ev) {
  UROCE_ASSERT_ENGINE(id.dev->engine());
  RdmaDev& d = *id.dev;
  if (!rdma_id_allows(id.state, RdmaIdInput::ConnectResponse)) return;  // Connect: what a REP answers
  const RepMsg& rep = *ev.rep;
  RdmaEvent out;
  set_conn(out, rep);
  set_pdata(out, rep.private_data, 0);
  id.responder_resources = id.cm_id->responder_resources;
  id.initiator_depth = id.cm_id->initiator_depth;
  if (id.qp == nullptr) {  // the application moves its own QP, then rdma_establish
    out.type = RDMA_CM_EVENT_CONNECT_RESPONSE;
    step(id, RdmaIdInput::ConnectResponse);
    queue_event(&id, out);
    return;
  }
  if (const int rc = modify_connected_qp(id); rc != 0) {
    d.cm->reject(id.cm_id, RejReason::ConsumerReject);
    qp_to_error(id);
    step(id, RdmaIdInput::ConnectError);
    RdmaEvent err;
    err.type = RDMA_CM_EVENT_CONNECT_ERROR;
    err.status = -rc;
    queue_event(&id, err);
    return;
  }
  d.cm->send_rtu(id.cm_id);
  step(id, RdmaIdInput::Established);
  out.type = RDMA_CM_EVENT_ESTABLISHED;
  queue_event(&id, out);
}

// ---- QPs ---------------------------------------------------------------------------------------

int RdmaCm::fill_attr(RdmaId& id, ibv_qp_state st, ibv_qp_attr& attr, int& mask) {
  if (id.cm_id == nullptr || id.qp_type == IBV_QPT_UD) {
    // No connection yet (or UD): librdmacm's defaults (cma_ib_init_qp_attr).
    attr = ibv_qp_attr{};
    attr.qp_state = st;
    switch (st) {
      case IBV_QPS_INIT:
        attr.pkey_index = 0;
        attr.port_num = 1;
        mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
        if (id.qp_type == IBV_QPT_UD) {
          attr.qkey = id.qkey;
          mask |= IBV_QP_QKEY;
        } else {
          attr.qp_access_flags = 0;
          mask |= IBV_QP_ACCESS_FLAGS;
        }
        return 0;
      case IBV_QPS_RTR:
        if (id.qp_type != IBV_QPT_UD) return EINVAL;
        mask = IBV_QP_STATE;
        return 0;
      case IBV_QPS_RTS:
        if (id.qp_type != IBV_QPT_UD) return EINVAL;
        attr.sq_psn = 0;
        mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
        return 0;
      case IBV_QPS_RESET: case IBV_QPS_SQD: case IBV_QPS_SQE: case IBV_QPS_ERR: case IBV_QPS_UNKNOWN:
        return EINVAL;
    }
    return EINVAL;
  }
  const int rc = id.dev->cm->init_qp_attr(id.cm_id, st, attr, mask);
  if (rc != 0) return -rc;
  if (st == IBV_QPS_RTR && !id.cm_id->active) attr.rq_psn = id.rep_psn;  // before the REP is built too
  if (st == IBV_QPS_RTR) {
    attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(std::max(id.sgid_index, 0));
    if (id.tos != 0) attr.ah_attr.grh.traffic_class = id.tos;
  }
  if (st == IBV_QPS_RTS && id.ack_timeout && (mask & IBV_QP_TIMEOUT)) attr.timeout = *id.ack_timeout;
  return 0;
}

// INIT -> INIT (the CM's access flags: READ/atomic only with responder
// resources), RTR, RTS: librdmacm's ucma_modify_qp_rtr / _rts.
int RdmaCm::modify_connected_qp(RdmaId& id) {
  UROCE_ASSERT_ENGINE(id.dev->engine());
  for (ibv_qp_state st : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
    ibv_qp_attr a{};
    int mask = 0;
    if (const int rc = fill_attr(id, st, a, mask); rc != 0) return rc;
    if (st == IBV_QPS_RTR) a.max_dest_rd_atomic = id.responder_resources;
    if (st == IBV_QPS_RTS) a.max_rd_atomic = id.initiator_depth;
    if (const int rc = id.qp->modify(a, mask); rc != 0) return rc;
  }
  return 0;
}

void RdmaCm::qp_to_error(RdmaId& id) {
  // [engine] An application may destroy the QP with ibv_destroy_qp rather
  // than rdma_destroy_qp (perftest does) and keep the id: id.qp then
  // dangles, and a DREQ or REJ arriving later must not modify freed memory.
  // Touch it only while the RNIC still maps its QPN to it.
  if (id.qp == nullptr || id.dev == nullptr || id.dev->cfg.rnic->qp_by_num(Qpn(id.qpn)) != id.qp) return;
  const ibv_qp_state s = id.qp->state();
  if (s == IBV_QPS_ERR || s == IBV_QPS_RESET) return;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  id.qp->modify(a, IBV_QP_STATE);
}

int RdmaCm::attach_qp(RdmaId* id, rnic::Qp* qp) {
  {
    std::lock_guard lock(mu_);
    if (id == nullptr || ids_.count(id) == 0 || qp == nullptr) return EINVAL;
    if (id->qp != nullptr) return EINVAL;
    if (id->dev == nullptr || &qp->rnic() != id->dev->cfg.rnic) return EINVAL;
    id->qp = qp;
    id->qpn = qp->qpn().value();
    id->qp_type = qp->type();
  }
  int rc = 0;
  for (ibv_qp_state st : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
    if (st != IBV_QPS_INIT && qp->type() != IBV_QPT_UD) break;  // RC/UC wait for the connection
    ibv_qp_attr a{};
    int mask = 0;
    RdmaId tmp;  // the defaults, whatever the id's connection state
    tmp.qp_type = qp->type();
    tmp.qkey = id->qkey;
    if ((rc = fill_attr(tmp, st, a, mask)) != 0) break;
    if ((rc = qp->modify(a, mask)) != 0) break;
  }
  if (rc != 0) {
    std::lock_guard lock(mu_);
    id->qp = nullptr;
  }
  return rc;
}

void RdmaCm::detach_qp(RdmaId* id) {
  std::vector<RdmaDev*> devs;
  {
    std::lock_guard lock(mu_);
    if (id == nullptr || ids_.count(id) == 0) return;
    if (id->dev != nullptr) devs.push_back(id->dev);
  }
  for (RdmaDev* d : devs) on_engine(*d, [&] {
      std::erase(d->accepting, id);
      id->qp = nullptr;
    });
  std::lock_guard lock(mu_);
  id->qp = nullptr;
  for (RdmaMcast& mc : id->mcasts) mc.attached = false;  // the QP goes: destroy_qp detaches it
}

int RdmaCm::init_qp_attr(RdmaId* id, ibv_qp_attr* attr, int* mask) {
  if (attr == nullptr || mask == nullptr) return EINVAL;
  RdmaDev* d = nullptr;
  {
    std::lock_guard lock(mu_);
    if (id == nullptr || ids_.count(id) == 0) return EINVAL;
    d = id->dev;
  }
  if (d == nullptr) return EINVAL;
  int rc = 0;
  const ibv_qp_state st = attr->qp_state;
  on_engine(*d, [&] {
    rc = fill_attr(*id, st, *attr, *mask);
    if (rc == 0 && st == IBV_QPS_RTR && id->cm_id != nullptr && id->qp_type != IBV_QPT_UD)
      attr->max_dest_rd_atomic = id->responder_resources;
    if (rc == 0 && st == IBV_QPS_RTS && id->cm_id != nullptr && id->qp_type != IBV_QPT_UD)
      attr->max_rd_atomic = id->initiator_depth;
  });
  return rc;
}

void RdmaCm::raise(RdmaDev& d, const EngineInput& in) {
  UROCE_ASSERT_ENGINE(d.engine());
  if (d.in_entry) {
    d.later.push_back(in);  // handled as the entry ends (from_engine)
    return;
  }
  from_engine(d, [&] { handle(d, in); });
}

void RdmaCm::handle(RdmaDev& d, const EngineInput& in) {
  UROCE_ASSERT_ENGINE(d.engine());
  if (const auto* r = std::get_if<Resolved>(&in)) {
    on_resolved(d, r->ip, r->ok);
  } else if (const auto* c = std::get_if<CommEst>(&in)) {
    on_comm_est(d, c->qp);
  }
}

void RdmaCm::on_comm_est(RdmaDev& d, const rnic::Qp* qp) {
  UROCE_ASSERT_ENGINE(d.engine());
  // IBA 12.9.6 (communication established): data on the passive side's QP
  // before the RTU stands for it (the RTU may be lost or late).
  for (RdmaId* id : d.accepting) {
    if (id->qp == qp && id->cm_id != nullptr) {
      d.cm->established(id->cm_id);
      return;
    }
  }
}

// ---- connections -------------------------------------------------------------------------------

int RdmaCm::connect(RdmaId* id, const rdma_conn_param* param) {
  const auto input = [](const RdmaId& i) {
    return i.qp_type == IBV_QPT_UD || i.ps == RDMA_PS_UDP ? RdmaIdInput::ConnectUd : RdmaIdInput::Connect;
  };
  return with_id(id, input, [&](RdmaDev& dev, RdmaIdInput in) {
    RdmaDev* d = &dev;
    const bool ud = in == RdmaIdInput::ConnectUd;
    if (param == nullptr && id->qp == nullptr && !ud) return EINVAL;
    if (param != nullptr && param->private_data_len > (ud ? kSidrReqUserDataMax : kReqUserDataMax)) return EINVAL;
    if (param != nullptr && param->private_data_len > 0 && param->private_data == nullptr) return EINVAL;
    int rc = 0;
    const auto sip = ip_of(sa(id->src));
    const auto dip = ip_of(sa(id->dst));
    const uint16_t sport = port_of(sa(id->src));
    const uint16_t dport = port_of(sa(id->dst));
    if (id->sgid_index < 0) id->sgid_index = d->cfg.rnic->find_gid(gid_ip(*d, *sip).bytes);
    if (!id->route_valid) {  // UD without rdma_resolve_route
      id->path.local_gid = gid_ip(*d, *sip).bytes;
      id->path.remote_gid = gid_ip(*d, *dip).bytes;
    }
    const CmaHdr h = sip->is_v4() ? CmaHdr::ipv4(sip->as_v4(), dip->as_v4(), sport)
                                  : CmaHdr::ipv6(sip->bytes, dip->bytes, sport);
    std::array<uint8_t, sizeof(SidrReqMsg{}.private_data)> pd{};
    const std::span<const uint8_t> user =
        param != nullptr && param->private_data_len > 0
            ? std::span<const uint8_t>(static_cast<const uint8_t*>(param->private_data), param->private_data_len)
            : std::span<const uint8_t>{};
    const size_t pd_len = kCmaHdrSize + (ud ? kSidrReqUserDataMax : kReqUserDataMax);
    format_cma_private_data(h, user, std::span<uint8_t>(pd.data(), pd_len));
    MadAddr dest;
    dest.gid = gid_ip(*d, *dip).bytes;
    const uint64_t sid = cma_service_id(static_cast<PortSpace>(id->ps), dport);
    if (id->cm_id != nullptr) d->cm->destroy_id(id->cm_id);
    id->cm_id = d->cm->create_id(id);
    if (ud) {
      SidrParams p;
      p.dest = dest;
      p.service_id = sid;
      p.timeout = opt_.cm_response_timeout;
      p.max_retries = opt_.max_cm_retries;
      p.private_data = std::span<const uint8_t>(pd.data(), pd_len);
      rc = -d->cm->sidr_resolve(id->cm_id, p);
    } else {
      rnic::Rnic& r = *d->cfg.rnic;
      ConnectParams p;
      p.dest = dest;
      p.service_id = sid;
      p.path = id->path;
      p.transport = id->qp_type == IBV_QPT_UC         ? CmTransport::UC
                    : id->qp_type == IBV_QPT_XRC_SEND ? CmTransport::Xrc
                                                      : CmTransport::RC;
      p.qpn = Qpn(id->qp != nullptr ? id->qp->qpn().value() : param->qp_num);
      p.starting_psn = Psn(random_psn());
      const rdma_conn_param none{};
      const rdma_conn_param& c = param != nullptr ? *param : none;
      p.responder_resources = rd_atomic(c.responder_resources, r);
      p.initiator_depth = rd_atomic(c.initiator_depth, r);
      p.retry_count = c.retry_count & 7;
      p.rnr_retry_count = c.rnr_retry_count & 7;
      p.remote_cm_response_timeout = opt_.cm_response_timeout;
      p.local_cm_response_timeout = opt_.cm_response_timeout;
      p.max_cm_retries = opt_.max_cm_retries;
      p.srq = id->qp != nullptr ? id->qp->srq() != nullptr : c.srq != 0;
      p.flow_control = c.flow_control != 0;
      p.private_data = std::span<const uint8_t>(pd.data(), pd_len);
      id->responder_resources = p.responder_resources;
      id->initiator_depth = p.initiator_depth;
      rc = -d->cm->connect(id->cm_id, p);
    }
    if (rc == 0) step(*id, in);
    return rc;
  });
}

int RdmaCm::accept(RdmaId* id, const rdma_conn_param* param) {
  return with_id(id, [](const RdmaId&) { return RdmaIdInput::Accept; }, [&](RdmaDev& dev, RdmaIdInput) {
    RdmaDev* d = &dev;
    const bool ud = id->qp_type == IBV_QPT_UD;
    if (id->cm_id == nullptr || (param == nullptr && id->qp == nullptr)) return EINVAL;
    if (param != nullptr && param->private_data_len > (ud ? kSidrRepUserDataMax : kRepUserDataMax)) return EINVAL;
    int rc = 0;
    const rdma_conn_param none{};
    const rdma_conn_param& c = param != nullptr ? *param : none;
    const std::span<const uint8_t> user =
        c.private_data_len > 0 && c.private_data != nullptr
            ? std::span<const uint8_t>(static_cast<const uint8_t*>(c.private_data), c.private_data_len)
            : std::span<const uint8_t>{};
    if (id->qp_type == IBV_QPT_UD) {
      SidrReplyParams p;
      p.status = SidrStatus::Success;
      p.qpn = Qpn(id->qp != nullptr ? id->qp->qpn().value() : c.qp_num);
      p.qkey = id->qkey;
      p.private_data = user;
      rc = -d->cm->sidr_reply(id->cm_id, p);
      if (rc == 0) step(*id, RdmaIdInput::AcceptUd);
    } else {
      rnic::Rnic& r = *d->cfg.rnic;
      // librdmacm's rdma_accept: the asked values, or the request's when
      // the application asks for "the maximum".
      id->responder_resources = param == nullptr || c.responder_resources == RDMA_MAX_RESP_RES
                                    ? rd_atomic(id->responder_resources, r)
                                    : rd_atomic(c.responder_resources, r);
      id->initiator_depth = param == nullptr || c.initiator_depth == RDMA_MAX_INIT_DEPTH
                                ? rd_atomic(id->initiator_depth, r)
                                : rd_atomic(c.initiator_depth, r);
      id->cm_id->responder_resources = id->responder_resources;
      id->cm_id->initiator_depth = id->initiator_depth;
      const uint32_t psn = id->rep_psn;
      if (id->qp != nullptr) {
        // The passive QP goes RTR and RTS before the REP leaves (cma_accept_ib).
        for (ibv_qp_state st : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
          ibv_qp_attr a{};
          int mask = 0;
          if ((rc = fill_attr(*id, st, a, mask)) != 0) break;
          if (st == IBV_QPS_RTR) {
            // The REP's Starting PSN is our receive PSN (Cm::init_qp_attr);
            // the REP is not built yet, so set it here.
            a.rq_psn = psn;
            a.max_dest_rd_atomic = id->responder_resources;
          }
          if (st == IBV_QPS_RTS) a.max_rd_atomic = id->initiator_depth;
          if ((rc = id->qp->modify(a, mask)) != 0) break;
        }
        if (rc != 0) {
          d->cm->reject(id->cm_id, RejReason::ConsumerReject);
          qp_to_error(*id);
          step(*id, RdmaIdInput::ConnectError);
          return rc;
        }
      }
      AcceptParams p;
      p.qpn = Qpn(id->qp != nullptr ? id->qp->qpn().value() : c.qp_num);
      p.starting_psn = Psn(psn);
      p.responder_resources = id->responder_resources;
      p.initiator_depth = id->initiator_depth;
      p.target_ack_delay = 15;
      p.rnr_retry_count = c.rnr_retry_count & 7;
      p.srq = id->qp != nullptr ? id->qp->srq() != nullptr : c.srq != 0;
      p.flow_control = c.flow_control != 0;
      p.private_data = user;
      rc = -d->cm->accept(id->cm_id, p);
      if (rc == 0) {
        step(*id, RdmaIdInput::Accept);
        if (id->qp != nullptr) d->accepting.push_back(id);
      }
    }
    return rc;
  });
}

int RdmaCm::reject(RdmaId* id, const void* pdata, uint8_t len) {
  return with_id(id, [](const RdmaId&) { return RdmaIdInput::Reject; }, [&](RdmaDev& dev, RdmaIdInput) {
    RdmaDev* d = &dev;
    if (len > (id->qp_type == IBV_QPT_UD ? kSidrRepUserDataMax : kRejUserDataMax)) return EINVAL;
    int rc = 0;
    const std::span<const uint8_t> user =
        len > 0 && pdata != nullptr ? std::span<const uint8_t>(static_cast<const uint8_t*>(pdata), len)
                                    : std::span<const uint8_t>{};
    if (id->qp_type == IBV_QPT_UD) {
      SidrReplyParams p;
      p.status = SidrStatus::Reject;
      p.private_data = user;
      rc = -d->cm->sidr_reply(id->cm_id, p);
    } else {
      rc = -d->cm->reject(id->cm_id, RejReason::ConsumerReject, user);  // reason 28 (IBA table 109)
    }
    if (rc == 0) step(*id, RdmaIdInput::Reject);
    return rc;
  });
}

void RdmaCm::disconnect_all() {
  std::vector<RdmaId*> up;
  {
    // Best effort: a thread of the exiting program may have stopped for
    // good inside a call that holds the lock; then nothing is sent.
    std::unique_lock lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) return;
    for (RdmaId* id : ids_)
      if (!id->destroyed && id->qp_type != IBV_QPT_UD) up.push_back(id);
  }
  for (RdmaId* id : up) (void)disconnect(id);  // EINVAL for an id in no state to disconnect
}

size_t RdmaCm::disconnects_pending() {
  size_t n = 0;
  for (auto& dp : devs_) {
    RdmaDev& d = *dp;
    if (!d.cm) continue;
    // The CM's tables are the engine's (no model lock needed: nothing of
    // the model's is read).
    d.engine().run_sync([&] { n += d.cm->count_in(CmState::DreqSent); });
  }
  return n;
}

int RdmaCm::disconnect(RdmaId* id) {
  RdmaDev* d = nullptr;
  {
    std::lock_guard lock(mu_);
    if (id == nullptr || ids_.count(id) == 0 || id->dev == nullptr || id->cm_id == nullptr) return EINVAL;
    if (!rdma_id_allows(id->state, RdmaIdInput::Disconnect)) return EINVAL;
    d = id->dev;
  }
  int rc = 0;
  on_engine(*d, [&] {
    if (id->cm_id == nullptr) return;
    // rdma_disconnect: the QP to ERR (its work requests flush), then a
    // DREQ, or the DREP when the peer's DREQ came first.
    qp_to_error(*id);
    std::erase(d->accepting, id);
    if (id->qp_type == IBV_QPT_UD) return;
    const CmState s = id->cm_id->state;
    if (s == CmState::Established || s == CmState::DreqRcvd) {
      rc = -d->cm->disconnect(id->cm_id);
    } else if (s == CmState::RepSent || s == CmState::MraRepRcvd) {
      d->cm->established(id->cm_id);  // 12.9.6: what the RTU would have done
      rc = -d->cm->disconnect(id->cm_id);
    } else if (s == CmState::ReqSent || s == CmState::MraReqRcvd || s == CmState::RepRcvd) {
      rc = -d->cm->reject(id->cm_id, RejReason::ConsumerReject);
    }
  });
  return rc;
}

int RdmaCm::establish(RdmaId* id) {
  return with_id(id, [](const RdmaId&) { return RdmaIdInput::Establish; }, [&](RdmaDev& d, RdmaIdInput in) {
    if (id->cm_id == nullptr) return EINVAL;
    const int rc = -d.cm->send_rtu(id->cm_id);
    if (rc == 0) step(*id, in);
    return rc;
  });
}

int RdmaCm::notify(RdmaId* id, ibv_event_type ev) {
  RdmaDev* d = nullptr;
  {
    std::lock_guard lock(mu_);
    if (id == nullptr || ids_.count(id) == 0 || id->cm_id == nullptr) return EINVAL;
    d = id->dev;
  }
  if (ev == IBV_EVENT_LID_CHANGE || ev == IBV_EVENT_PATH_MIG) return 0;
  if (ev != IBV_EVENT_COMM_EST) return EINVAL;
  int rc = 0;
  on_engine(*d, [&] { rc = -d->cm->established(id->cm_id); });
  return rc;
}

int RdmaCm::set_option(RdmaId* id, int level, int name, const void* val, size_t len) {
  std::lock_guard lock(mu_);
  if (id == nullptr || ids_.count(id) == 0 || val == nullptr) return EINVAL;
  if (level == RDMA_OPTION_ID) {
    switch (name) {
      case RDMA_OPTION_ID_TOS:
        if (len != sizeof(uint8_t)) return EINVAL;
        id->tos = *static_cast<const uint8_t*>(val);
        if (id->route_valid) id->path.traffic_class = id->tos;
        return 0;
      case RDMA_OPTION_ID_REUSEADDR:
        if (len != sizeof(int)) return EINVAL;
        if (!rdma_id_allows(id->state, RdmaIdInput::SetAddrOption)) return EINVAL;
        id->reuseaddr = *static_cast<const int*>(val) != 0;
        return 0;
      case RDMA_OPTION_ID_AFONLY:
        if (len != sizeof(int)) return EINVAL;
        if (!rdma_id_allows(id->state, RdmaIdInput::SetAddrOption)) return EINVAL;
        id->afonly = *static_cast<const int*>(val) != 0;
        return 0;
      case RDMA_OPTION_ID_ACK_TIMEOUT:
        if (len != sizeof(uint8_t)) return EINVAL;
        id->ack_timeout = static_cast<uint8_t>(*static_cast<const uint8_t*>(val) & 0x1F);
        if (id->route_valid) id->path.local_ack_timeout = *id->ack_timeout;
        return 0;
      default:
        return ENOSYS;
    }
  }
  if (level == RDMA_OPTION_IB && name == RDMA_OPTION_IB_PATH) return 0;  // RoCE: the path is the GIDs
  return ENOSYS;
}

}  // namespace uroce::cm
