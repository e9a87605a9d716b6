// The drop-in librdmacm.so.1: the C ABI of rdma-core 44's librdmacm
// (rdma/rdma_cma.h, rdma/rdma_verbs.h, rdma/rsocket.h) over the rdma_cm
// model (cm/rdma_cm.hpp), which runs inside our libibverbs.so.1 next to
// the engines.  This library calls the model only through its vtable
// (uroce_rdmacm() hands it out), and the verbs only through libibverbs'
// exported functions, so it carries no engine code of its own.
//
// What lives here is what librdmacm itself does in user space: the
// structures applications read (rdma_cm_id, rdma_cm_event,
// rdma_event_channel, rdma_addrinfo, laid out as the 44 headers say:
// static_asserts below), synchronous ids (a NULL channel: each call waits
// for its own event and leaves it in id->event), rdma_create_ep /
// rdma_get_request, rdma_create_qp's CQs and default PD, rdma_getaddrinfo.
// rsockets are rsocket.cpp's, on the same calls.
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <set>

#include "cm/rdma_cm.hpp"
#include "verbs-shim/shim.hpp"

using uroce::cm::RdmaCm;
using uroce::cm::RdmaEvent;

// The model, from libibverbs.so.1 (UROCE_PRIVATE_1).
extern "C" RdmaCm* uroce_rdmacm() noexcept;

// ---- layouts applications compile in (rdma-core 44, x86-64) ------------------------
static_assert(sizeof(rdma_cm_id) == 416);
static_assert(offsetof(rdma_cm_id, verbs) == 0 && offsetof(rdma_cm_id, channel) == 8);
static_assert(offsetof(rdma_cm_id, context) == 16 && offsetof(rdma_cm_id, qp) == 24);
static_assert(offsetof(rdma_cm_id, route) == 32 && sizeof(rdma_route) == 312);
static_assert(offsetof(rdma_cm_id, ps) == 344 && offsetof(rdma_cm_id, port_num) == 348);
static_assert(offsetof(rdma_cm_id, event) == 352 && offsetof(rdma_cm_id, send_cq_channel) == 360);
static_assert(offsetof(rdma_cm_id, send_cq) == 368 && offsetof(rdma_cm_id, recv_cq_channel) == 376);
static_assert(offsetof(rdma_cm_id, recv_cq) == 384 && offsetof(rdma_cm_id, srq) == 392);
static_assert(offsetof(rdma_cm_id, pd) == 400 && offsetof(rdma_cm_id, qp_type) == 408);
static_assert(sizeof(rdma_cm_event) == 80 && offsetof(rdma_cm_event, param) == 24);
static_assert(offsetof(rdma_cm_event, event) == 16 && offsetof(rdma_cm_event, status) == 20);
static_assert(sizeof(rdma_event_channel) == sizeof(int));
static_assert(sizeof(rdma_addrinfo) == 96);

namespace {

#define RDMACM_EXPORT extern "C" __attribute__((visibility("default")))

struct Channel {
  rdma_event_channel ch;  // first: what the application holds
  uroce::cm::RdmaChannel* impl = nullptr;
};

struct Id {
  rdma_cm_id id;          // first
  uroce::cm::RdmaId* impl = nullptr;
  Channel* own = nullptr; // a synchronous id's private channel
  ibv_sa_path_rec path{};
  bool own_cqs = false;   // rdma_create_qp made the CQs and channels
  // rdma_create_ep(RAI_PASSIVE) with QP attributes: rdma_get_request
  // creates each new id's QP with them.
  bool ep_qp = false;
  ibv_qp_init_attr ep_attr{};
  ibv_pd* ep_pd = nullptr;
};

struct Event {
  rdma_cm_event ev;       // first
  RdmaEvent impl;
};

Id* to_id(rdma_cm_id* id) { return reinterpret_cast<Id*>(id); }
Channel* to_ch(rdma_event_channel* c) { return reinterpret_cast<Channel*>(c); }
Event* to_ev(rdma_cm_event* e) { return reinterpret_cast<Event*>(e); }

template <class T>
T fail(int err, T ret) {
  errno = err;
  return ret;
}
int result(int rc) { return rc == 0 ? 0 : fail(rc, -1); }

// Not cached here: a child of fork() gets a model of its own (adopt_fork).
RdmaCm* model() { return uroce_rdmacm(); }

// A per-device object made once, on first use: made without the table's
// lock held (making it waits for the device's engine, and no lock is held
// while waiting for a loop); of two threads that made one at once, the
// first to come back keeps its own and the other's is given back.
template <class T, class Make, class Free>
T* once_per_device(std::mutex& mu, std::map<ibv_context*, T*>& table, ibv_context* verbs, Make make, Free free) {
  {
    std::lock_guard lock(mu);
    if (T* have = table[verbs]; have != nullptr) return have;
  }
  T* made = make();
  if (made == nullptr) return nullptr;
  std::lock_guard lock(mu);
  T*& slot = table[verbs];
  if (slot == nullptr) return slot = made;
  free(made);
  return slot;
}

// One PD per device for QPs created without one (librdmacm: cma_dev->pd).
ibv_pd* default_pd(ibv_context* verbs) {
  static std::mutex mu;
  static std::map<ibv_context*, ibv_pd*> pds;
  return once_per_device(mu, pds, verbs, [verbs] { return ibv_alloc_pd(verbs); }, [](ibv_pd* p) { ibv_dealloc_pd(p); });
}

// One anonymous XRC domain per device for XRC receive QPs and SRQs made
// without one (librdmacm: ucma_get_xrcd); closed with the device.
ibv_xrcd* default_xrcd(ibv_context* verbs) {
  static std::mutex mu;
  static std::map<ibv_context*, ibv_xrcd*> xrcds;
  const auto open = [verbs] {
    ibv_xrcd_init_attr a{};
    a.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    a.fd = -1;
    a.oflags = O_CREAT;
    return ibv_open_xrcd(verbs, &a);
  };
  return once_per_device(mu, xrcds, verbs, open, [](ibv_xrcd* x) { ibv_close_xrcd(x); });
}

socklen_t addr_len(const sockaddr* s) {
  if (s == nullptr) return 0;
  return s->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : s->sa_family == AF_INET ? sizeof(sockaddr_in) : 0;
}

// The fields applications read, from the model's id.  Two threads may
// write them at once (one returns from rdma_resolve_addr while another
// takes that id's ADDR_RESOLVED event): one lock for all ids, control path.
void sync_fields(Id* x) {
  // An id bound to a device has that device's PD from then on, as
  // librdmacm's ucma_get_device gives it (pyverbs' PD(cmid) reads it before
  // any QP exists); a QP made with another PD replaces it.
  // Its PD is had before the lock (making it waits for the engine); id.pd
  // is written under it, by whichever thread syncs.
  uroce::cm::RdmaId* m = x->impl;
  ibv_context* const verbs = m->verbs;
  ibv_pd* const pd = verbs != nullptr ? default_pd(verbs) : nullptr;
  static std::mutex mu;
  std::lock_guard lock(mu);
  rdma_cm_id& id = x->id;
  id.verbs = verbs;
  if (id.pd == nullptr && id.verbs != nullptr) id.pd = pd;
  id.port_num = m->verbs != nullptr ? 1 : 0;
  id.ps = m->ps;
  id.qp_type = m->qp_type;
  std::memcpy(&id.route.addr.src_storage, &m->src, sizeof m->src);
  std::memcpy(&id.route.addr.dst_storage, &m->dst, sizeof m->dst);
  if (m->route_valid) {
    ibv_sa_path_rec& p = x->path;
    p = ibv_sa_path_rec{};
    std::memcpy(p.sgid.raw, m->path.local_gid.data(), 16);
    std::memcpy(p.dgid.raw, m->path.remote_gid.data(), 16);
    p.slid = htons(m->path.local_lid);
    p.dlid = htons(m->path.remote_lid);
    p.flow_label = htonl(m->path.flow_label);
    p.hop_limit = m->path.hop_limit;
    p.traffic_class = m->path.traffic_class;
    p.reversible = 1;
    p.numb_path = 1;
    p.pkey = htons(m->path.pkey);
    p.sl = m->path.sl;
    p.mtu_selector = 2;  // exactly
    p.mtu = m->path.mtu;
    p.rate_selector = 2;
    p.rate = 3;          // IBV_RATE_10_GBPS: RoCE reports no rate
    p.packet_life_time_selector = 2;
    p.packet_life_time = 16;
    id.route.path_rec = &p;
    id.route.num_paths = 1;
    std::memcpy(id.route.addr.addr.ibaddr.sgid.raw, p.sgid.raw, 16);
    std::memcpy(id.route.addr.addr.ibaddr.dgid.raw, p.dgid.raw, 16);
    id.route.addr.addr.ibaddr.pkey = p.pkey;
  }
}

// The channels not yet destroyed.  A program may destroy a channel while
// another of its threads still waits on it, or is about to (rping's CM
// thread, at the end of main): rdma_get_cm_event must then not read the
// freed Channel.  Never destroyed, for threads still running during exit.
std::mutex g_channels_mu;
std::set<const Channel*>& live_channels() {
  static auto* live = new std::set<const Channel*>;
  return *live;
}

// The model's channel behind `c`, or null once the program destroyed it.
uroce::cm::RdmaChannel* live_impl(const Channel* c) {
  std::lock_guard lock(g_channels_mu);
  return live_channels().count(c) != 0 ? c->impl : nullptr;
}

// A thread waiting on a channel the program destroys stays blocked, as in
// librdmacm, whose read() on the closed fd never returns (the model does
// the same to a thread already inside its wait).  One that calls in just
// after the destroy is treated alike: otherwise rping's CM thread would
// fail, and exit the process with an error status, or not, depending on
// which thread the scheduler ran first.
[[noreturn]] void wait_forever() {
  for (;;) ::pause();
}

Channel* new_channel() {
  RdmaCm* m = model();
  if (m == nullptr) return fail(ENODEV, static_cast<Channel*>(nullptr));
  auto* c = new (std::nothrow) Channel;
  if (c == nullptr) return fail(ENOMEM, static_cast<Channel*>(nullptr));
  c->impl = m->create_channel();
  if (c->impl == nullptr) {
    delete c;
    return fail(ENOMEM, static_cast<Channel*>(nullptr));
  }
  c->ch.fd = c->impl->q.fd();
  std::lock_guard lock(g_channels_mu);
  live_channels().insert(c);
  return c;
}

void free_channel(Channel* c) {
  if (c == nullptr) return;
  {
    std::lock_guard lock(g_channels_mu);
    live_channels().erase(c);
  }
  model()->destroy_channel(c->impl);
  delete c;
}

Id* new_id(Channel* ch, void* context, rdma_port_space ps, ibv_qp_type qpt) {
  RdmaCm* m = model();
  if (m == nullptr) return fail(ENODEV, static_cast<Id*>(nullptr));
  auto* x = new (std::nothrow) Id{};
  if (x == nullptr) return fail(ENOMEM, static_cast<Id*>(nullptr));
  if (ch == nullptr) {  // synchronous: a private channel
    x->own = new_channel();
    if (x->own == nullptr) {
      delete x;
      return nullptr;
    }
    ch = x->own;
  }
  const int rc = m->create_id(ch->impl, x, ps, qpt, &x->impl);
  if (rc != 0) {
    free_channel(x->own);
    delete x;
    return fail(rc, static_cast<Id*>(nullptr));
  }
  x->id.channel = &ch->ch;
  x->id.context = context;
  x->id.ps = ps;
  x->id.qp_type = qpt;
  return x;
}

// Turns a model event into the application's rdma_cm_event.
rdma_cm_event* wrap_event(Channel* ch, const RdmaEvent& re) {
  auto* e = new (std::nothrow) Event{};
  if (e == nullptr) return nullptr;
  e->impl = re;
  auto* x = static_cast<Id*>(re.id->user);
  Id* lx = re.listen_id != nullptr ? static_cast<Id*>(re.listen_id->user) : nullptr;
  if (x == nullptr) {  // a passive id the application has not seen yet
    x = new (std::nothrow) Id{};
    if (x == nullptr) {
      delete e;
      return nullptr;
    }
    x->impl = re.id;
    re.id->user = x;
    x->id.channel = &ch->ch;
    if (lx != nullptr) {
      x->id.context = lx->id.context;  // librdmacm: the listener's context
      if (lx->own != nullptr) {        // a synchronous listener makes synchronous ids
        x->own = new_channel();
        if (x->own != nullptr) {
          model()->migrate_id(x->impl, x->own->impl);
          x->id.channel = &x->own->ch;
        }
      }
    }
  }
  sync_fields(x);
  if (lx != nullptr) sync_fields(lx);
  rdma_cm_event& ev = e->ev;
  ev.id = &x->id;
  ev.listen_id = lx != nullptr ? &lx->id : nullptr;
  ev.event = re.type;
  ev.status = re.status;
  const void* pd = e->impl.pdata_len > 0 ? e->impl.pdata.data() : nullptr;
  if (re.ud) {
    ev.param.ud = re.ud_param;
    ev.param.ud.private_data = pd;
    if (re.type == RDMA_CM_EVENT_MULTICAST_JOIN || re.type == RDMA_CM_EVENT_MULTICAST_ERROR)
      ev.param.ud.private_data = re.ud_param.private_data;  // the join's context (librdmacm)
    ev.param.ud.private_data_len = e->impl.pdata_len;
  } else {
    ev.param.conn = re.conn;
    ev.param.conn.private_data = pd;
    ev.param.conn.private_data_len = e->impl.pdata_len;
  }
  return &ev;
}

// A synchronous id: wait for the event the call produced and keep it in
// id->event (librdmacm's ucma_complete); its status becomes errno.
int complete(Id* x) {
  if (x->own == nullptr) return 0;
  if (x->id.event != nullptr) {
    rdma_ack_cm_event(x->id.event);
    x->id.event = nullptr;
  }
  rdma_cm_event* ev = nullptr;
  if (rdma_get_cm_event(&x->own->ch, &ev) != 0) return -1;
  x->id.event = ev;
  if (ev->status != 0) {
    if (ev->event == RDMA_CM_EVENT_REJECTED) return fail(ECONNREFUSED, -1);
    return fail(ev->status < 0 ? -ev->status : ev->status, -1);
  }
  switch (ev->event) {
    case RDMA_CM_EVENT_ADDR_ERROR: case RDMA_CM_EVENT_ROUTE_ERROR: case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE: case RDMA_CM_EVENT_DEVICE_REMOVAL:
      return fail(EIO, -1);
    case RDMA_CM_EVENT_REJECTED:
      return fail(ECONNREFUSED, -1);
    case RDMA_CM_EVENT_ADDR_RESOLVED: case RDMA_CM_EVENT_ROUTE_RESOLVED: case RDMA_CM_EVENT_CONNECT_REQUEST:
    case RDMA_CM_EVENT_CONNECT_RESPONSE: case RDMA_CM_EVENT_ESTABLISHED: case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_MULTICAST_JOIN: case RDMA_CM_EVENT_MULTICAST_ERROR: case RDMA_CM_EVENT_ADDR_CHANGE:
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
      break;
  }
  return 0;
}

void destroy_cqs(Id* x) {
  rdma_cm_id& id = x->id;
  // An XRC receive id's CQ is its SRQ's (rdma_create_srq made it): it goes
  // with the SRQ (librdmacm's ucma_destroy_cqs).
  if (!x->own_cqs || (id.qp_type == IBV_QPT_XRC_RECV && id.srq != nullptr)) return;
  if (id.send_cq != nullptr && id.send_cq != id.recv_cq) ibv_destroy_cq(id.send_cq);
  if (id.recv_cq != nullptr) ibv_destroy_cq(id.recv_cq);
  if (id.send_cq_channel != nullptr && id.send_cq_channel != id.recv_cq_channel)
    ibv_destroy_comp_channel(id.send_cq_channel);
  if (id.recv_cq_channel != nullptr) ibv_destroy_comp_channel(id.recv_cq_channel);
  id.send_cq = id.recv_cq = nullptr;
  id.send_cq_channel = id.recv_cq_channel = nullptr;
  x->own_cqs = false;
}

// librdmacm's ucma_create_cqs: a channel and a CQ for each side the
// attributes leave open, sized by the work requests.
int create_cqs(Id* x, uint32_t send_size, uint32_t recv_size) {
  rdma_cm_id& id = x->id;
  if (recv_size != 0) {
    id.recv_cq_channel = ibv_create_comp_channel(id.verbs);
    if (id.recv_cq_channel == nullptr) return -1;
    id.recv_cq = ibv_create_cq(id.verbs, static_cast<int>(recv_size), &id, id.recv_cq_channel, 0);
    x->own_cqs = true;
    if (id.recv_cq == nullptr) return destroy_cqs(x), -1;
  }
  if (send_size != 0) {
    id.send_cq_channel = ibv_create_comp_channel(id.verbs);
    x->own_cqs = true;
    if (id.send_cq_channel == nullptr) return destroy_cqs(x), -1;
    id.send_cq = ibv_create_cq(id.verbs, static_cast<int>(send_size), &id, id.send_cq_channel, 0);
    if (id.send_cq == nullptr) return destroy_cqs(x), -1;
  }
  return 0;
}

int attach(Id* x, ibv_qp* qp, ibv_pd* pd) {
  const int rc = model()->attach_qp(x->impl, uroce::shim::to_qp(qp)->impl);
  if (rc != 0) {
    ibv_destroy_qp(qp);
    destroy_cqs(x);
    return fail(rc, -1);
  }
  x->id.qp = qp;
  x->id.pd = pd;
  return 0;
}

}  // namespace

// ---- channels and events --------------------------------------------------------------

RDMACM_EXPORT rdma_event_channel* rdma_create_event_channel() noexcept {
  Channel* c = new_channel();
  return c != nullptr ? &c->ch : nullptr;
}

RDMACM_EXPORT void rdma_destroy_event_channel(rdma_event_channel* channel) noexcept {
  if (channel == nullptr) return;
  free_channel(to_ch(channel));
}

RDMACM_EXPORT int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) noexcept {
  if (channel == nullptr || event == nullptr) return fail(EINVAL, -1);
  Channel* c = to_ch(channel);
  uroce::cm::RdmaChannel* impl = live_impl(c);
  if (impl == nullptr) wait_forever();
  RdmaEvent re;
  const int rc = model()->get_event(impl, &re);
  if (rc != 0) {
    if (live_impl(c) == nullptr) wait_forever();  // destroyed while this thread waited
    return fail(rc, -1);
  }
  *event = wrap_event(c, re);
  if (*event == nullptr) {
    model()->ack_event(re);
    return fail(ENOMEM, -1);
  }
  return 0;
}

RDMACM_EXPORT int rdma_ack_cm_event(rdma_cm_event* event) noexcept {
  if (event == nullptr) return fail(EINVAL, -1);
  Event* e = to_ev(event);
  model()->ack_event(e->impl);
  delete e;
  return 0;
}

RDMACM_EXPORT const char* rdma_event_str(rdma_cm_event_type event) noexcept {
  return uroce::cm::rdma_event_name(event);
}

// ---- ids --------------------------------------------------------------------------------

RDMACM_EXPORT int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context,
                                 rdma_port_space ps) noexcept {
  if (id == nullptr) return fail(EINVAL, -1);
  // librdmacm: TCP and IB are connected (RC), UDP and IPoIB datagram (UD).
  const ibv_qp_type qpt = (ps == RDMA_PS_TCP || ps == RDMA_PS_IB) ? IBV_QPT_RC : IBV_QPT_UD;
  Id* x = new_id(channel != nullptr ? to_ch(channel) : nullptr, context, ps, qpt);
  if (x == nullptr) return -1;
  *id = &x->id;
  return 0;
}

RDMACM_EXPORT int rdma_destroy_id(rdma_cm_id* id) noexcept {
  if (id == nullptr) return fail(EINVAL, -1);
  Id* x = to_id(id);
  if (id->event != nullptr) {
    rdma_ack_cm_event(id->event);
    id->event = nullptr;
  }
  const int rc = model()->destroy_id(x->impl);
  if (rc != 0) return fail(rc, -1);
  destroy_cqs(x);
  free_channel(x->own);
  delete x;
  return 0;
}

RDMACM_EXPORT int rdma_migrate_id(rdma_cm_id* id, rdma_event_channel* channel) noexcept {
  if (id == nullptr) return fail(EINVAL, -1);
  Id* x = to_id(id);
  Channel* old_own = x->own;
  Channel* to = nullptr;
  if (channel == nullptr) {  // becomes synchronous
    if (x->own != nullptr) return 0;
    to = new_channel();
    if (to == nullptr) return -1;
  } else {
    to = to_ch(channel);
  }
  const int rc = model()->migrate_id(x->impl, to->impl);
  if (rc != 0) {
    if (channel == nullptr) free_channel(to);
    return fail(rc, -1);
  }
  x->own = channel == nullptr ? to : nullptr;
  id->channel = &to->ch;
  if (old_own != nullptr && old_own != x->own) free_channel(old_own);
  return 0;
}

RDMACM_EXPORT int rdma_bind_addr(rdma_cm_id* id, sockaddr* addr) noexcept {
  if (id == nullptr || addr == nullptr) return fail(EINVAL, -1);
  const int rc = model()->bind_addr(to_id(id)->impl, addr);
  sync_fields(to_id(id));
  return result(rc);
}

RDMACM_EXPORT int rdma_resolve_addr(rdma_cm_id* id, sockaddr* src_addr, sockaddr* dst_addr,
                                    int timeout_ms) noexcept {
  if (id == nullptr || dst_addr == nullptr) return fail(EINVAL, -1);
  Id* x = to_id(id);
  const int rc = model()->resolve_addr(x->impl, src_addr, dst_addr, timeout_ms);
  sync_fields(x);
  if (rc != 0) return fail(rc, -1);
  const int c = complete(x);
  sync_fields(x);
  return c;
}

RDMACM_EXPORT int rdma_resolve_route(rdma_cm_id* id, int timeout_ms) noexcept {
  if (id == nullptr) return fail(EINVAL, -1);
  Id* x = to_id(id);
  const int rc = model()->resolve_route(x->impl, timeout_ms);
  if (rc != 0) return fail(rc, -1);
  const int c = complete(x);
  sync_fields(x);
  return c;
}

RDMACM_EXPORT int rdma_listen(rdma_cm_id* id, int backlog) noexcept {
  if (id == nullptr) return fail(EINVAL, -1);
  const int rc = model()->listen(to_id(id)->impl, backlog);
  sync_fields(to_id(id));
  return result(rc);
}

RDMACM_EXPORT int rdma_connect(rdma_cm_id* id, rdma_conn_param* conn_param) noexcept {
  if (id == nullptr) return fail(EINVAL, -1);
  Id* x = to_id(id);
  const int rc = model()->connect(x->impl, conn_param);
  if (rc != 0) return fail(rc, -1);
  return complete(x);
}

RDMACM_EXPORT int rdma_accept(rdma_cm_id* id, rdma_conn_param* conn_param) noexcept {
  if (id == nullptr) return fail(EINVAL, -1);
  Id* x = to_id(id);
  const int rc = model()->accept(x->impl, conn_param);
  if (rc != 0) return fail(rc, -1);
  if (id->qp_type == IBV_QPT_UD) {  // SIDR: nothing more will come
    if (x->own != nullptr && id->event != nullptr) {
      rdma_ack_cm_event(id->event);
      id->event = nullptr;
    }
    return 0;
  }
  return complete(x);
}

RDMACM_EXPORT int rdma_reject(rdma_cm_id* id, const void* private_data, uint8_t private_data_len) noexcept {
  if (id == nullptr) return fail(EINVAL, -1);
  return result(model()->reject(to_id(id)->impl, private_data, private_data_len));
}

RDMACM_EXPORT int rdma_reject_ece(rdma_cm_id* id, const void* private_data, uint8_t private_data_len) noexcept {
  return rdma_reject(id, private_data, private_data_len);
}

RDMACM_EXPORT int rdma_disconnect(rdma_cm_id* id) noexcept {
  if (id == nullptr) return fail(EINVAL, -1);
  Id* x = to_id(id);
  const int rc = model()->disconnect(x->impl);
  if (rc != 0) return fail(rc, -1);
  return complete(x);
}

RDMACM_EXPORT int rdma_establish(rdma_cm_id* id) noexcept {
  if (id == nullptr) return fail(EINVAL, -1);
  return result(model()->establish(to_id(id)->impl));
}

RDMACM_EXPORT int rdma_notify(rdma_cm_id* id, ibv_event_type event) noexcept {
  if (id == nullptr) return fail(EINVAL, -1);
  return result(model()->notify(to_id(id)->impl, event));
}

RDMACM_EXPORT int rdma_set_option(rdma_cm_id* id, int level, int optname, void* optval, size_t optlen) noexcept {
  if (id == nullptr) return fail(EINVAL, -1);
  return result(model()->set_option(to_id(id)->impl, level, optname, optval, optlen));
}

RDMACM_EXPORT int rdma_init_qp_attr(rdma_cm_id* id, ibv_qp_attr* qp_attr, int* qp_attr_mask) noexcept {
  if (id == nullptr) return fail(EINVAL, -1);
  return result(model()->init_qp_attr(to_id(id)->impl, qp_attr, qp_attr_mask));
}

RDMACM_EXPORT uint16_t rdma_get_src_port(rdma_cm_id* id) noexcept {
  if (id == nullptr) return 0;
  const sockaddr* s = &id->route.addr.src_addr;
  return s->sa_family == AF_INET6 ? id->route.addr.src_sin6.sin6_port
         : s->sa_family == AF_INET ? id->route.addr.src_sin.sin_port
                                   : 0;
}

RDMACM_EXPORT uint16_t rdma_get_dst_port(rdma_cm_id* id) noexcept {
  if (id == nullptr) return 0;
  const sockaddr* s = &id->route.addr.dst_addr;
  return s->sa_family == AF_INET6 ? id->route.addr.dst_sin6.sin6_port
         : s->sa_family == AF_INET ? id->route.addr.dst_sin.sin_port
                                   : 0;
}

RDMACM_EXPORT ibv_context** rdma_get_devices(int* num_devices) noexcept {
  RdmaCm* m = model();
  if (m == nullptr) return fail(ENODEV, static_cast<ibv_context**>(nullptr));
  const std::vector<ibv_context*> v = m->contexts();
  auto** out = static_cast<ibv_context**>(std::calloc(v.size() + 1, sizeof(ibv_context*)));
  if (out == nullptr) return fail(ENOMEM, static_cast<ibv_context**>(nullptr));
  for (size_t i = 0; i < v.size(); ++i) out[i] = v[i];
  if (num_devices != nullptr) *num_devices = static_cast<int>(v.size());
  return out;
}

RDMACM_EXPORT void rdma_free_devices(ibv_context** list) noexcept { std::free(list); }

// ---- QPs and SRQs -------------------------------------------------------------------------

RDMACM_EXPORT int rdma_create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) noexcept {
  if (id == nullptr || qp_init_attr == nullptr || id->verbs == nullptr || id->qp != nullptr) return fail(EINVAL, -1);
  if (id->qp_type == IBV_QPT_XRC_RECV) {  // needs its domain: the extended call (as librdmacm)
    ibv_qp_init_attr_ex ex{};
    std::memcpy(&ex, qp_init_attr, sizeof *qp_init_attr);
    ex.qp_type = IBV_QPT_XRC_RECV;
    ex.comp_mask = pd != nullptr ? IBV_QP_INIT_ATTR_PD : 0;
    ex.pd = pd;
    const int rc = rdma_create_qp_ex(id, &ex);
    std::memcpy(qp_init_attr, &ex, sizeof *qp_init_attr);
    return rc;
  }
  Id* x = to_id(id);
  if (pd == nullptr) pd = id->pd != nullptr ? id->pd : default_pd(id->verbs);
  if (pd == nullptr || pd->context != id->verbs) return fail(EINVAL, -1);
  ibv_qp_init_attr a = *qp_init_attr;
  if (create_cqs(x, a.send_cq != nullptr ? 0 : a.cap.max_send_wr, a.recv_cq != nullptr ? 0 : a.cap.max_recv_wr) != 0)
    return -1;
  if (a.send_cq == nullptr) a.send_cq = id->send_cq;
  if (a.recv_cq == nullptr) a.recv_cq = id->recv_cq;
  if (a.srq == nullptr && id->srq != nullptr) a.srq = id->srq;
  ibv_qp* qp = ibv_create_qp(pd, &a);
  if (qp == nullptr) {
    const int e = errno;
    destroy_cqs(x);
    return fail(e != 0 ? e : ENOMEM, -1);
  }
  if (attach(x, qp, pd) != 0) return -1;
  *qp_init_attr = a;  // as librdmacm: the CQs it made and the caps granted
  return 0;
}

RDMACM_EXPORT int rdma_create_qp_ex(rdma_cm_id* id, ibv_qp_init_attr_ex* attr) noexcept {
  if (id == nullptr || attr == nullptr || id->verbs == nullptr || id->qp != nullptr) return fail(EINVAL, -1);
  Id* x = to_id(id);
  if (id->qp_type == IBV_QPT_XRC_RECV) {
    // An XRC receive QP: the id's domain, no PD, no CQs (its SRQs have
    // them); the device's own domain when none is given.
    attr->qp_type = IBV_QPT_XRC_RECV;
    if ((attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) == 0 || attr->xrcd == nullptr) {
      attr->xrcd = default_xrcd(id->verbs);
      if (attr->xrcd == nullptr) return -1;
      attr->comp_mask |= IBV_QP_INIT_ATTR_XRCD;
    }
    attr->comp_mask &= ~uint32_t{IBV_QP_INIT_ATTR_PD};
    ibv_qp* qp = ibv_create_qp_ex(id->verbs, attr);
    if (qp == nullptr) return -1;
    return attach(x, qp, id->pd);
  }
  ibv_pd* pd = (attr->comp_mask & IBV_QP_INIT_ATTR_PD) != 0 ? attr->pd : nullptr;
  if (pd == nullptr) pd = id->pd != nullptr ? id->pd : default_pd(id->verbs);
  if (pd == nullptr || pd->context != id->verbs) return fail(EINVAL, -1);
  attr->pd = pd;
  attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
  if (create_cqs(x, attr->send_cq != nullptr ? 0 : attr->cap.max_send_wr,
                 attr->recv_cq != nullptr ? 0 : attr->cap.max_recv_wr) != 0)
    return -1;
  if (attr->send_cq == nullptr) attr->send_cq = id->send_cq;
  if (attr->recv_cq == nullptr) attr->recv_cq = id->recv_cq;
  if (attr->srq == nullptr && id->srq != nullptr) attr->srq = id->srq;
  ibv_qp* qp = ibv_create_qp_ex(id->verbs, attr);
  if (qp == nullptr) {
    const int e = errno;
    destroy_cqs(x);
    return fail(e != 0 ? e : ENOMEM, -1);
  }
  return attach(x, qp, pd);
}

RDMACM_EXPORT void rdma_destroy_qp(rdma_cm_id* id) noexcept {
  if (id == nullptr || id->qp == nullptr) return;
  Id* x = to_id(id);
  model()->detach_qp(x->impl);
  ibv_destroy_qp(id->qp);
  id->qp = nullptr;
  destroy_cqs(x);
}

RDMACM_EXPORT int rdma_create_srq(rdma_cm_id* id, ibv_pd* pd, ibv_srq_init_attr* attr) noexcept {
  if (id == nullptr || attr == nullptr || id->verbs == nullptr) return fail(EINVAL, -1);
  if (id->qp_type == IBV_QPT_XRC_RECV) {  // an XRC receive id's SRQ is an XRC SRQ (librdmacm)
    ibv_srq_init_attr_ex ex{};
    ex.srq_context = attr->srq_context;
    ex.attr = attr->attr;
    ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | (pd != nullptr ? IBV_SRQ_INIT_ATTR_PD : 0);
    ex.srq_type = IBV_SRQT_XRC;
    ex.pd = pd;
    const int rc = rdma_create_srq_ex(id, &ex);
    attr->attr = ex.attr;
    return rc;
  }
  if (pd == nullptr) pd = id->pd != nullptr ? id->pd : default_pd(id->verbs);
  if (pd == nullptr) return fail(EINVAL, -1);
  ibv_srq* srq = ibv_create_srq(pd, attr);
  if (srq == nullptr) return -1;
  id->srq = srq;
  id->pd = pd;
  return 0;
}

RDMACM_EXPORT int rdma_create_srq_ex(rdma_cm_id* id, ibv_srq_init_attr_ex* attr) noexcept {
  if (id == nullptr || attr == nullptr || id->verbs == nullptr) return fail(EINVAL, -1);
  // librdmacm's rdma_create_srq_ex: the type must be given.
  if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) == 0) return fail(EINVAL, -1);
  if (attr->srq_type == IBV_SRQT_XRC) {
    // The id's PD, the device's domain and a receive CQ of the id's own
    // (rdma_get_recv_comp polls it) unless given.
    Id* x = to_id(id);
    if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) == 0 || attr->pd == nullptr) {
      attr->pd = id->pd != nullptr ? id->pd : default_pd(id->verbs);
      attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
    }
    if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) == 0 || attr->xrcd == nullptr) {
      attr->xrcd = default_xrcd(id->verbs);
      if (attr->xrcd == nullptr) return -1;
    }
    bool made_cq = false;
    if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) == 0 || attr->cq == nullptr) {
      if (id->recv_cq != nullptr || create_cqs(x, 0, attr->attr.max_wr) != 0) return fail(EINVAL, -1);
      attr->cq = id->recv_cq;
      made_cq = true;
    }
    attr->comp_mask |= IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
    ibv_srq* srq = ibv_create_srq_ex(id->verbs, attr);
    if (srq == nullptr) {
      const int e = errno;
      if (made_cq) destroy_cqs(x);
      return fail(e, -1);
    }
    id->srq = srq;
    if (id->pd == nullptr) id->pd = attr->pd;
    return 0;
  }
  if (attr->srq_type != IBV_SRQT_BASIC) return fail(EOPNOTSUPP, -1);
  ibv_srq_init_attr a{};
  a.srq_context = attr->srq_context;
  a.attr = attr->attr;
  return rdma_create_srq(id, (attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) != 0 ? attr->pd : nullptr, &a);
}

RDMACM_EXPORT void rdma_destroy_srq(rdma_cm_id* id) noexcept {
  if (id == nullptr || id->srq == nullptr) return;
  ibv_destroy_srq(id->srq);
  id->srq = nullptr;
  destroy_cqs(to_id(id));  // an XRC SRQ's CQ, when rdma_create_srq made it
}

// ---- endpoints (synchronous ids) ----------------------------------------------------------

RDMACM_EXPORT int rdma_create_ep(rdma_cm_id** id, rdma_addrinfo* res, ibv_pd* pd,
                                 ibv_qp_init_attr* qp_init_attr) noexcept {
  if (id == nullptr || res == nullptr) return fail(EINVAL, -1);
  const auto qpt = static_cast<ibv_qp_type>(res->ai_qp_type != 0 ? res->ai_qp_type
                                            : qp_init_attr != nullptr ? qp_init_attr->qp_type
                                                                      : IBV_QPT_RC);
  auto ps = static_cast<rdma_port_space>(res->ai_port_space);
  if (ps == 0) ps = qpt == IBV_QPT_UD ? RDMA_PS_UDP : RDMA_PS_TCP;
  Id* x = new_id(nullptr, nullptr, ps, qpt);
  if (x == nullptr) return -1;
  if (qp_init_attr != nullptr) qp_init_attr->qp_type = qpt;  // as librdmacm: the addrinfo's QP type
  rdma_cm_id* cid = &x->id;
  int rc = 0;
  if ((res->ai_flags & RAI_PASSIVE) != 0) {
    rc = rdma_bind_addr(cid, res->ai_src_addr);
    if (rc == 0 && qp_init_attr != nullptr) {
      x->ep_qp = true;
      x->ep_attr = *qp_init_attr;
      x->ep_pd = pd;
    }
  } else {
    rc = rdma_resolve_addr(cid, res->ai_src_addr, res->ai_dst_addr, 2000);
    if (rc == 0) rc = rdma_resolve_route(cid, 2000);
    if (rc == 0 && qp_init_attr != nullptr) rc = rdma_create_qp(cid, pd, qp_init_attr);
  }
  if (rc != 0) {
    const int e = errno;
    rdma_destroy_id(cid);
    return fail(e, -1);
  }
  *id = cid;
  return 0;
}

RDMACM_EXPORT void rdma_destroy_ep(rdma_cm_id* id) noexcept {
  if (id == nullptr) return;
  if (id->qp != nullptr) rdma_destroy_qp(id);
  if (id->srq != nullptr) rdma_destroy_srq(id);
  rdma_destroy_id(id);
}

RDMACM_EXPORT int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** id) noexcept {
  if (listen == nullptr || id == nullptr) return fail(EINVAL, -1);
  Id* l = to_id(listen);
  if (l->own == nullptr) return fail(EINVAL, -1);  // only synchronous listeners
  if (listen->event != nullptr) {
    rdma_ack_cm_event(listen->event);
    listen->event = nullptr;
  }
  rdma_cm_event* ev = nullptr;
  if (rdma_get_cm_event(listen->channel, &ev) != 0) return -1;
  if (ev->status != 0) {
    const int e = ev->status < 0 ? -ev->status : ev->status;
    rdma_ack_cm_event(ev);
    return fail(e, -1);
  }
  if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
    rdma_ack_cm_event(ev);
    return fail(EINVAL, -1);
  }
  rdma_cm_id* nid = ev->id;
  if (l->ep_qp) {
    ibv_qp_init_attr a = l->ep_attr;
    if (rdma_create_qp(nid, l->ep_pd, &a) != 0) {
      const int e = errno;
      rdma_reject(nid, nullptr, 0);
      rdma_ack_cm_event(ev);
      rdma_destroy_id(nid);
      return fail(e, -1);
    }
  }
  nid->event = ev;
  *id = nid;
  return 0;
}

// ---- multicast (the model attaches the id's QP and reports the join) -------------------------

RDMACM_EXPORT int rdma_join_multicast_ex(rdma_cm_id* id, rdma_cm_join_mc_attr_ex* attr, void* context) noexcept {
  if (id == nullptr || attr == nullptr) return fail(EINVAL, -1);
  // librdmacm: the address and the flags are required; unknown bits ENOTSUP.
  if ((attr->comp_mask & ~(RDMA_CM_JOIN_MC_ATTR_RESERVED - 1)) != 0) return fail(ENOTSUP, -1);
  if ((attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) == 0 || attr->addr == nullptr ||
      (attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) == 0 || attr->join_flags >= RDMA_MC_JOIN_FLAG_RESERVED)
    return fail(EINVAL, -1);
  Id* x = to_id(id);
  if (const int rc = model()->join_multicast(x->impl, attr->addr, static_cast<int>(attr->join_flags), context);
      rc != 0)
    return fail(rc, -1);
  return complete(x);
}
RDMACM_EXPORT int rdma_join_multicast(rdma_cm_id* id, sockaddr* addr, void* context) noexcept {
  rdma_cm_join_mc_attr_ex attr{};
  attr.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
  attr.join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER;
  attr.addr = addr;
  return rdma_join_multicast_ex(id, &attr, context);
}
RDMACM_EXPORT int rdma_leave_multicast(rdma_cm_id* id, sockaddr* addr) noexcept {
  if (id == nullptr || addr == nullptr) return fail(EINVAL, -1);
  return result(model()->leave_multicast(to_id(id)->impl, addr));
}

// ---- ECE: not supported ----------------------------------------------------------------------

RDMACM_EXPORT int rdma_set_local_ece(rdma_cm_id*, ibv_ece*) noexcept { return fail(EOPNOTSUPP, -1); }
RDMACM_EXPORT int rdma_get_remote_ece(rdma_cm_id*, ibv_ece*) noexcept { return fail(EOPNOTSUPP, -1); }

// Releases after rdma-core 44 (RDMACM_1.4): asynchronous name resolution
// into an id, and application-written events.  Not offered.
RDMACM_EXPORT int rdma_resolve_addrinfo(rdma_cm_id*, const char*, const char*, const rdma_addrinfo*) noexcept {
  return fail(EOPNOTSUPP, -1);
}
RDMACM_EXPORT int rdma_query_addrinfo(rdma_cm_id*, rdma_addrinfo**) noexcept { return fail(EOPNOTSUPP, -1); }
RDMACM_EXPORT int rdma_write_cm_event(rdma_cm_id*, rdma_cm_event_type, int, uint64_t) noexcept {
  return fail(EOPNOTSUPP, -1);
}

// ---- rdma_getaddrinfo --------------------------------------------------------------------------

RDMACM_EXPORT void rdma_freeaddrinfo(rdma_addrinfo* res) noexcept {
  while (res != nullptr) {
    rdma_addrinfo* next = res->ai_next;
    std::free(res->ai_src_addr);
    std::free(res->ai_dst_addr);
    std::free(res->ai_src_canonname);
    std::free(res->ai_dst_canonname);
    std::free(res->ai_route);
    std::free(res->ai_connect);
    std::free(res);
    res = next;
  }
}

namespace {
// A copy of `len` bytes of `src` in a sockaddr_storage of its own (freed by
// rdma_freeaddrinfo); null when out of memory.
sockaddr* dup_addr(const sockaddr* src, socklen_t len) {
  auto* a = static_cast<sockaddr*>(std::calloc(1, sizeof(sockaddr_storage)));
  if (a != nullptr) std::memcpy(a, src, std::min<size_t>(len, sizeof(sockaddr_storage)));
  return a;
}
}  // namespace

// Numeric or named hosts and service ports through getaddrinfo(3); one
// result, as librdmacm gives for IP addresses.  With neither node nor
// service, the hints' own addresses and fields make the result (librdmacm
// does the same; fi_pingpong and rdma_cm programs pass only hints); an
// address the hints carry fills the side the lookup left empty.  Returns 0
// or an EAI_* code (what librdmacm returns from getaddrinfo).
RDMACM_EXPORT int rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints,
                                   rdma_addrinfo** res) noexcept {
  if (res == nullptr || (node == nullptr && service == nullptr && hints == nullptr)) return fail(EINVAL, -1);
  const int flags = hints != nullptr ? hints->ai_flags : 0;
  const int family = hints != nullptr ? hints->ai_family : AF_UNSPEC;
  if (family != AF_UNSPEC && family != AF_INET && family != AF_INET6) return EAI_FAMILY;
  auto* r = static_cast<rdma_addrinfo*>(std::calloc(1, sizeof(rdma_addrinfo)));
  if (r == nullptr) return EAI_MEMORY;
  r->ai_flags = flags;
  r->ai_family = family;
  r->ai_qp_type = hints != nullptr && hints->ai_qp_type != 0 ? hints->ai_qp_type : IBV_QPT_RC;
  r->ai_port_space = hints != nullptr && hints->ai_port_space != 0 ? hints->ai_port_space
                     : r->ai_qp_type == IBV_QPT_UD                   ? RDMA_PS_UDP
                                                                      : RDMA_PS_TCP;
  if (node != nullptr || service != nullptr) {
    addrinfo h{};
    h.ai_flags = ((flags & RAI_PASSIVE) != 0 ? AI_PASSIVE : 0) | ((flags & RAI_NUMERICHOST) != 0 ? AI_NUMERICHOST : 0);
    h.ai_family = family;
    h.ai_socktype = SOCK_STREAM;
    addrinfo* ai = nullptr;
    if (const int rc = getaddrinfo(node, service, &h, &ai); rc != 0) {
      std::free(r);
      return rc;
    }
    sockaddr* addr = dup_addr(ai->ai_addr, ai->ai_addrlen);
    const auto len = static_cast<socklen_t>(ai->ai_addrlen);
    r->ai_family = ai->ai_family;
    freeaddrinfo(ai);
    if (addr == nullptr) {
      std::free(r);
      return EAI_MEMORY;
    }
    if ((flags & RAI_PASSIVE) != 0) {
      r->ai_src_addr = addr;
      r->ai_src_len = len;
    } else {
      r->ai_dst_addr = addr;
      r->ai_dst_len = len;
    }
  }
  bool oom = false;
  if (hints != nullptr && r->ai_src_addr == nullptr && hints->ai_src_addr != nullptr &&
      addr_len(hints->ai_src_addr) != 0) {
    r->ai_src_len = addr_len(hints->ai_src_addr);
    r->ai_src_addr = dup_addr(hints->ai_src_addr, r->ai_src_len);
    oom = oom || r->ai_src_addr == nullptr;
  }
  if (hints != nullptr && r->ai_dst_addr == nullptr && hints->ai_dst_addr != nullptr &&
      addr_len(hints->ai_dst_addr) != 0) {
    r->ai_dst_len = addr_len(hints->ai_dst_addr);
    r->ai_dst_addr = dup_addr(hints->ai_dst_addr, r->ai_dst_len);
    oom = oom || r->ai_dst_addr == nullptr;
  }
  if (oom) {
    rdma_freeaddrinfo(r);
    return EAI_MEMORY;
  }
  if (r->ai_family == AF_UNSPEC) {
    const sockaddr* any = r->ai_src_addr != nullptr ? r->ai_src_addr : r->ai_dst_addr;
    if (any != nullptr) r->ai_family = any->sa_family;
  }
  *res = r;
  return 0;
}

// ---- repoll (rdma-core 58, RDMACM_1.5) -----------------------------------------------------------
// epoll over ordinary fds; an rsocket's fd (rsocket.cpp) is its rdma_cm
// channel's, which epoll sees only for connection events: use rpoll for
// rsockets.
RDMACM_EXPORT int repoll_create(int flags) noexcept { return epoll_create1(flags); }
RDMACM_EXPORT int repoll_ctl(int epfd, int op, int fd, epoll_event* event) noexcept {
  return epoll_ctl(epfd, op, fd, event);
}
RDMACM_EXPORT int repoll_wait(int epfd, epoll_event* events, int maxevents, int timeout) noexcept {
  return epoll_wait(epfd, events, maxevents, timeout);
}
