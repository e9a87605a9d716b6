// Datagram rsockets: see rsocket_dgram.hpp for the protocol.
#include "verbs-shim/rsocket_dgram.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

extern "C" bool uroce_exiting() noexcept;  // libibverbs.so.1 (UROCE_PRIVATE_1)

namespace uroce::shim::dgram {
namespace {

// ---- the wire ----------------------------------------------------------------------------
constexpr uint32_t kUdpTag = 0x55555555;
enum UdpOp : uint8_t { kOpData = 0, kOpCtrl = 7 };
constexpr uint8_t kUdpHdrV4 = 16, kUdpHdrV6 = 28;

// Ahead of a datagram sent over UDP (rendezvous).
struct UdpHeader {
  uint32_t tag;  // big-endian
  uint8_t version;
  uint8_t op;
  uint8_t length;
  uint8_t reserved;
  uint32_t qpn;  // big-endian, 24 bits
  uint8_t addr[16];  // IPv4: the first 4
};
static_assert(sizeof(UdpHeader) == 28);

constexpr uint8_t kDsHdrV4 = 8, kDsHdrV6 = 24;

// Ahead of a datagram sent over UD: the sender's UDP address.
struct DsHeader {
  uint8_t version;
  uint8_t length;
  uint16_t port;  // big-endian
  union {
    uint32_t ipv4;
    struct {
      uint32_t flowinfo;
      uint8_t addr[16];
    } ipv6;
  } addr;
};
static_assert(sizeof(DsHeader) == 24);

constexpr uint32_t kGrh = 40;         // ahead of every UD receive
constexpr uint32_t kSlot = 2048;      // a send or receive buffer slot (librdmacm's RS_SNDLOWAT)
constexpr uint32_t kDefMem = 1 << 17; // SO_SNDBUF / SO_RCVBUF default
constexpr uint32_t kMaxQueue = 384;   // slots per queue at most (librdmacm's default queue size)
constexpr uint64_t kRecvBit = uint64_t{1} << 63;
constexpr int kResolveMs = 2000;
constexpr auto kPollBeforeSleep = std::chrono::microseconds(10);
// What a socket keeps of its peers, whoever sends to it: at most kMaxPeers
// (the least recently used one that no call holds goes first), at most
// kMaxResolving of them having their path resolved at a time, and a peer
// whose resolution failed is not tried again for kRetryResolve.  Each
// datagram from a new UDP address makes a peer, and a sender can spoof
// addresses: without these a flood grew the table without end and made
// every receive resolve (2 s each for an address nobody answers).
constexpr size_t kMaxPeers = 1024;
constexpr uint32_t kMaxResolving = 8;
constexpr auto kRetryResolve = std::chrono::seconds(1);
using Clock = std::chrono::steady_clock;

// A UDP address as a key: family, port, address (IPv4: the first 4 bytes).
struct AddrKey {
  std::array<uint8_t, 20> b{};
  bool operator==(const AddrKey&) const = default;
};
struct AddrKeyHash {
  size_t operator()(const AddrKey& k) const noexcept {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (const uint8_t c : k.b) h = (h ^ c) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

AddrKey key_of(const sockaddr_storage& a) {
  AddrKey k;
  k.b[0] = static_cast<uint8_t>(a.ss_family);
  if (a.ss_family == AF_INET) {
    const auto& x = reinterpret_cast<const sockaddr_in&>(a);
    std::memcpy(&k.b[2], &x.sin_port, 2);
    std::memcpy(&k.b[4], &x.sin_addr, 4);
  } else {
    const auto& x = reinterpret_cast<const sockaddr_in6&>(a);
    std::memcpy(&k.b[2], &x.sin6_port, 2);
    std::memcpy(&k.b[4], &x.sin6_addr, 16);
  }
  return k;
}

bool same_addr(const sockaddr_storage& a, const sockaddr_storage& b) { return key_of(a) == key_of(b); }

bool same_ip(const sockaddr_storage& a, const sockaddr_storage& b) {
  sockaddr_storage x = a, y = b;
  reinterpret_cast<sockaddr_in&>(x).sin_port = 0;  // the port is at the same place in both families
  reinterpret_cast<sockaddr_in&>(y).sin_port = 0;
  return same_addr(x, y);
}

socklen_t len_of(const sockaddr_storage& a) {
  return a.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

uint16_t port_of(const sockaddr_storage& a) { return reinterpret_cast<const sockaddr_in&>(a).sin_port; }

bool any_addr(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) {
    const uint32_t ip = reinterpret_cast<const sockaddr_in&>(a).sin_addr.s_addr;
    return ip == htonl(INADDR_ANY) || ip == htonl(INADDR_LOOPBACK);
  }
  const in6_addr& ip = reinterpret_cast<const sockaddr_in6&>(a).sin6_addr;
  return std::memcmp(&ip, &in6addr_any, 16) == 0 || std::memcmp(&ip, &in6addr_loopback, 16) == 0;
}

DsHeader ds_header(const sockaddr_storage& a) {
  DsHeader h{};
  if (a.ss_family == AF_INET) {
    const auto& s = reinterpret_cast<const sockaddr_in&>(a);
    h.version = 4;
    h.length = kDsHdrV4;
    h.port = s.sin_port;
    h.addr.ipv4 = s.sin_addr.s_addr;
  } else {
    const auto& s = reinterpret_cast<const sockaddr_in6&>(a);
    h.version = 6;
    h.length = kDsHdrV6;
    h.port = s.sin6_port;
    h.addr.ipv6.flowinfo = s.sin6_flowinfo;
    std::memcpy(h.addr.ipv6.addr, &s.sin6_addr, 16);
  }
  return h;
}

sockaddr_storage addr_of(const DsHeader& h) {
  sockaddr_storage a{};
  if (h.version == 4) {
    auto& s = reinterpret_cast<sockaddr_in&>(a);
    s.sin_family = AF_INET;
    s.sin_port = h.port;
    s.sin_addr.s_addr = h.addr.ipv4;
  } else {
    auto& s = reinterpret_cast<sockaddr_in6&>(a);
    s.sin6_family = AF_INET6;
    s.sin6_port = h.port;
    s.sin6_flowinfo = h.addr.ipv6.flowinfo;
    std::memcpy(&s.sin6_addr, h.addr.ipv6.addr, 16);
  }
  return a;
}

// ---- a socket ----------------------------------------------------------------------------

// One local source address's UD QP and its buffers.
struct Qp {
  rdma_cm_id* id = nullptr;
  sockaddr_storage src{};
  DsHeader hdr{};
  ibv_comp_channel* channel = nullptr;
  ibv_cq* cq = nullptr;
  uint8_t* sbuf = nullptr;
  uint8_t* rbuf = nullptr;
  ibv_mr* smr = nullptr;
  ibv_mr* rmr = nullptr;
  std::vector<uint32_t> free_slots;  // send slots not in flight
  uint32_t max_payload = 0;          // header and data in one UD message
};

// A peer, by its UDP address.
struct Dest {
  sockaddr_storage addr{};
  Qp* qp = nullptr;      // ours that talks to it
  ibv_ah* ah = nullptr;  // null: its QP is not known yet (send over UDP)
  uint32_t qpn = 0;
  rdma_cm_id* resolving = nullptr;  // its path on the way (learn_peer); context: this Dest
  uint32_t resolving_qpn = 0;       // its QP, for when the path is there
  Clock::time_point retry_at{};     // a resolution failed: the next not before
  uint64_t used = 0;                // the socket's tick when last used (eviction)
  uint32_t pins = 0;                // calls that hold it across a wait (never evicted)
};

// A datagram received: in a UD receive slot, or taken over UDP.
struct Received {
  Qp* qp = nullptr;        // UD: the slot's QP
  uint32_t slot = 0;
  uint32_t len = 0;        // header and data (UD)
  sockaddr_storage from{};  // UDP
  std::vector<uint8_t> bytes;  // UDP: the data
};

}  // namespace

struct Socket {
  int fd = -1;  // the UDP socket: the rsocket's number
  int epfd = -1;
  int domain = AF_INET;
  int fd_flags = 0;
  uint32_t sbuf_size = kDefMem, rbuf_size = kDefMem;
  std::vector<std::unique_ptr<Qp>> qps;
  std::unordered_map<AddrKey, std::unique_ptr<Dest>, AddrKeyHash> dests;  // at most kMaxPeers
  Dest* conn = nullptr;  // rconnect's peer (never evicted)
  rdma_event_channel* cm = nullptr;  // the peers' resolutions (non-blocking), made at the first
  uint32_t resolving = 0;            // peers with an id in `cm`
  uint64_t tick = 0;                 // Dest::used
  std::deque<Received> rx;
  uint32_t rq = 0, sq = 0;  // slots per QP, fixed with the first QP
  std::mutex mu;
};

namespace {

std::mutex g_mu;
std::map<int, Socket*>& table() {
  static auto* t = new std::map<int, Socket*>;
  return *t;
}

template <class T>
T fail(int err, T ret) {
  errno = err;
  return ret;
}

bool nonblocking(const Socket& s, int flags) { return (s.fd_flags & O_NONBLOCK) != 0 || (flags & MSG_DONTWAIT) != 0; }

uint32_t mtu_bytes(ibv_mtu m) { return 128u << static_cast<unsigned>(m); }

void repost(Qp* q, uint32_t slot) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(q->rbuf) + uint64_t{slot} * (kGrh + kSlot), kGrh + kSlot, q->rmr->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = kRecvBit | slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  (void)ibv_post_recv(q->id->qp, &wr, &bad);
}

void free_qp(Qp* q) {
  if (q->id != nullptr && q->id->qp != nullptr) rdma_destroy_qp(q->id);
  for (ibv_mr* mr : {q->smr, q->rmr})
    if (mr != nullptr) ibv_dereg_mr(mr);
  if (q->cq != nullptr) ibv_destroy_cq(q->cq);
  if (q->channel != nullptr) ibv_destroy_comp_channel(q->channel);
  if (q->id != nullptr) rdma_destroy_id(q->id);
  std::free(q->sbuf);
  std::free(q->rbuf);
}

void* alloc(size_t n) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, n) != 0) return nullptr;
  std::memset(p, 0, n);
  return p;
}

// A UD QP for the source address `src` (its port the UDP socket's).
Qp* make_qp(Socket& s, const sockaddr_storage& src) {
  if (s.qps.empty()) {
    s.rq = std::clamp<uint32_t>(s.rbuf_size / kSlot, 2, kMaxQueue);
    s.sq = std::clamp<uint32_t>(s.sbuf_size / kSlot, 2, kMaxQueue);
  }
  auto q = std::make_unique<Qp>();
  q->src = src;
  q->hdr = ds_header(src);
  auto bail = [&](int e) -> Qp* {
    free_qp(q.get());
    return fail(e, static_cast<Qp*>(nullptr));
  };
  if (rdma_create_id(nullptr, &q->id, nullptr, RDMA_PS_UDP) != 0) return fail(errno, static_cast<Qp*>(nullptr));
  sockaddr_storage bind_to = src;
  if (rdma_bind_addr(q->id, reinterpret_cast<sockaddr*>(&bind_to)) != 0) return bail(errno);
  if (q->id->verbs == nullptr) return bail(EADDRNOTAVAIL);  // no RDMA device has the address
  q->channel = ibv_create_comp_channel(q->id->verbs);
  if (q->channel == nullptr) return bail(errno);
  fcntl(q->channel->fd, F_SETFL, fcntl(q->channel->fd, F_GETFL) | O_NONBLOCK);
  q->cq = ibv_create_cq(q->id->verbs, static_cast<int>(s.sq + s.rq), q.get(), q->channel, 0);
  if (q->cq == nullptr) return bail(errno);
  ibv_qp_init_attr a{};
  a.qp_type = IBV_QPT_UD;
  a.send_cq = a.recv_cq = q->cq;
  a.sq_sig_all = 1;
  a.cap.max_send_wr = s.sq;
  a.cap.max_recv_wr = s.rq;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  if (rdma_create_qp(q->id, nullptr, &a) != 0) return bail(errno);
  ibv_port_attr pa{};
  if (ibv_query_port(q->id->verbs, 1, &pa) != 0) return bail(EIO);
  q->max_payload = std::min(mtu_bytes(pa.active_mtu), kSlot);
  q->sbuf = static_cast<uint8_t*>(alloc(size_t{s.sq} * kSlot));
  q->rbuf = static_cast<uint8_t*>(alloc(size_t{s.rq} * (kGrh + kSlot)));
  if (q->sbuf == nullptr || q->rbuf == nullptr) return bail(ENOMEM);
  q->smr = ibv_reg_mr(q->id->pd, q->sbuf, size_t{s.sq} * kSlot, IBV_ACCESS_LOCAL_WRITE);
  q->rmr = ibv_reg_mr(q->id->pd, q->rbuf, size_t{s.rq} * (kGrh + kSlot), IBV_ACCESS_LOCAL_WRITE);
  if (q->smr == nullptr || q->rmr == nullptr) return bail(errno);
  for (uint32_t i = 0; i < s.sq; ++i) q->free_slots.push_back(s.sq - 1 - i);
  for (uint32_t i = 0; i < s.rq; ++i) repost(q.get(), i);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = q.get();
  if (epoll_ctl(s.epfd, EPOLL_CTL_ADD, q->channel->fd, &ev) != 0) return bail(errno);
  s.qps.push_back(std::move(q));
  return s.qps.back().get();
}

// The UDP socket's own address, bound to an ephemeral port first if it has
// none, so that the port our headers carry is the one it answers on.
int local_addr(Socket& s, sockaddr_storage* out) {
  socklen_t len = sizeof *out;
  if (::getsockname(s.fd, reinterpret_cast<sockaddr*>(out), &len) != 0) return errno;
  if (port_of(*out) != 0) return 0;
  sockaddr_storage any{};
  any.ss_family = static_cast<sa_family_t>(s.domain);
  if (::bind(s.fd, reinterpret_cast<sockaddr*>(&any), len_of(any)) != 0) return errno;
  len = sizeof *out;
  return ::getsockname(s.fd, reinterpret_cast<sockaddr*>(out), &len) != 0 ? errno : 0;
}

// The source address toward `to` (librdmacm's ds_get_src_addr): the UDP
// socket's, or when that is a wildcard, the one the kernel's route picks.
int src_addr_for(Socket& s, const sockaddr_storage& to, sockaddr_storage* src) {
  if (const int rc = local_addr(s, src); rc != 0) return rc;
  if (!any_addr(*src)) return 0;
  const uint16_t port = port_of(*src);
  const int t = ::socket(to.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (t < 0) return errno;
  socklen_t len = sizeof *src;
  int rc = ::connect(t, reinterpret_cast<const sockaddr*>(&to), len_of(to)) == 0 &&
                   ::getsockname(t, reinterpret_cast<sockaddr*>(src), &len) == 0
               ? 0
               : errno;
  ::close(t);
  reinterpret_cast<sockaddr_in&>(*src).sin_port = port;
  return rc;
}

Dest* find_dest(Socket& s, const sockaddr_storage& to) {
  auto it = s.dests.find(key_of(to));
  if (it == s.dests.end()) return nullptr;
  it->second->used = ++s.tick;
  return it->second.get();
}

// Room for one more peer: the least recently used one that nothing holds
// (not the connected peer, not one a call waits with, not one resolving)
// goes, its AH with it (a UD send already posted has its path copied).
// False when every peer is held.
bool evict_one(Socket& s) {
  auto victim = s.dests.end();
  for (auto it = s.dests.begin(); it != s.dests.end(); ++it) {
    const Dest& d = *it->second;
    if (&d == s.conn || d.pins != 0 || d.resolving != nullptr) continue;
    if (victim == s.dests.end() || d.used < victim->second->used) victim = it;
  }
  if (victim == s.dests.end()) return false;
  if (victim->second->ah != nullptr) ibv_destroy_ah(victim->second->ah);
  s.dests.erase(victim);
  return true;
}

// The peer at `to`, made on first use with the QP of the source address
// toward it; null and errno when it cannot be (ENOBUFS: the table is full
// of peers in use).
Dest* get_dest(Socket& s, const sockaddr_storage& to) {
  if (Dest* d = find_dest(s, to)) return d;
  sockaddr_storage src{};
  if (const int rc = src_addr_for(s, to, &src); rc != 0) return fail(rc, static_cast<Dest*>(nullptr));
  Qp* q = nullptr;
  for (auto& x : s.qps)
    if (same_ip(x->src, src)) q = x.get();
  if (q == nullptr && (q = make_qp(s, src)) == nullptr) return nullptr;
  if (s.dests.size() >= kMaxPeers && !evict_one(s)) return fail(ENOBUFS, static_cast<Dest*>(nullptr));
  auto d = std::make_unique<Dest>();
  d->addr = to;
  d->qp = q;
  d->used = ++s.tick;
  Dest* out = d.get();
  s.dests.emplace(key_of(to), std::move(d));
  return out;
}

// Holds a peer across a call that may wait (and so drain the UDP socket,
// which may evict): released at the end of the scope, under the lock.
class Pin {
 public:
  explicit Pin(Dest* d) : d_(d) { ++d_->pins; }
  ~Pin() { --d_->pins; }
  Pin(const Pin&) = delete;
  Pin& operator=(const Pin&) = delete;

 private:
  Dest* d_;
};

// The peer's QP is `qpn`: once its path is known, its UD address.  The path
// is resolved through rdma_cm (the GIDs, hop limit, traffic class) without
// waiting: the events arrive on the socket's channel and drain_cm makes the
// AH.  Until then datagrams to the peer go over UDP.
void learn_peer(Socket& s, Dest& d, uint32_t qpn) {
  if (d.ah != nullptr) {  // the path to its address is known: only its QP changed
    d.qpn = qpn;
    return;
  }
  if (d.resolving != nullptr) {
    d.resolving_qpn = qpn;
    return;
  }
  // A later datagram tries again.
  if (Clock::now() < d.retry_at || s.resolving >= kMaxResolving) return;
  if (s.cm == nullptr) {
    s.cm = rdma_create_event_channel();
    if (s.cm == nullptr) return;
    fcntl(s.cm->fd, F_SETFL, fcntl(s.cm->fd, F_GETFL) | O_NONBLOCK);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = &s;  // read_events: not a CQ channel
    (void)epoll_ctl(s.epfd, EPOLL_CTL_ADD, s.cm->fd, &ev);
  }
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(s.cm, &id, &d, RDMA_PS_UDP) != 0) return;
  sockaddr_storage src = d.qp->src;
  reinterpret_cast<sockaddr_in&>(src).sin_port = 0;
  sockaddr_storage dst = d.addr;
  if (rdma_resolve_addr(id, reinterpret_cast<sockaddr*>(&src), reinterpret_cast<sockaddr*>(&dst), kResolveMs) != 0) {
    rdma_destroy_id(id);
    d.retry_at = Clock::now() + kRetryResolve;
    return;
  }
  d.resolving = id;
  d.resolving_qpn = qpn;
  ++s.resolving;
}

// The AH for a resolved route, from the QP's PD.
ibv_ah* make_ah(const Dest& d, rdma_cm_id* id) {
  if (id->verbs != d.qp->id->verbs) return nullptr;
  const ibv_sa_path_rec& p = id->route.path_rec[0];
  ibv_ah_attr a{};
  a.is_global = 1;  // RoCE: always a GRH
  a.grh.dgid = p.dgid;
  a.grh.flow_label = ntohl(p.flow_label);
  a.grh.hop_limit = p.hop_limit;
  a.grh.traffic_class = p.traffic_class;
  a.port_num = 1;
  ibv_port_attr pa{};
  const int n = ibv_query_port(id->verbs, 1, &pa) == 0 ? pa.gid_tbl_len : 0;
  for (int i = 0; i < n; ++i) {
    ibv_gid g{};
    if (ibv_query_gid(id->verbs, 1, i, &g) == 0 && std::memcmp(g.raw, p.sgid.raw, 16) == 0) {
      a.grh.sgid_index = static_cast<uint8_t>(i);
      break;
    }
  }
  return ibv_create_ah(d.qp->id->pd, &a);
}

// The resolutions that moved: address → route → AH, or a failure (the
// peer tried again after kRetryResolve).
void drain_cm(Socket& s) {
  if (s.cm == nullptr) return;
  rdma_cm_event* ev = nullptr;
  while (rdma_get_cm_event(s.cm, &ev) == 0) {
    rdma_cm_id* id = ev->id;
    const rdma_cm_event_type type = ev->event;
    rdma_ack_cm_event(ev);
    auto* d = static_cast<Dest*>(id->context);
    if (type == RDMA_CM_EVENT_ADDR_RESOLVED && rdma_resolve_route(id, kResolveMs) == 0) continue;
    ibv_ah* ah = type == RDMA_CM_EVENT_ROUTE_RESOLVED ? make_ah(*d, id) : nullptr;
    rdma_destroy_id(id);
    d->resolving = nullptr;
    --s.resolving;
    if (ah == nullptr) {
      d->retry_at = Clock::now() + kRetryResolve;
      continue;
    }
    d->ah = ah;  // none before: learn_peer resolves only a peer without one
    d->qpn = d->resolving_qpn;
  }
}

// A rendezvous header (and data) over UDP from our QP `q` to `to`.
ssize_t send_udp(Socket& s, const Qp& q, const sockaddr_storage& to, uint8_t op, const iovec* iov, int iovcnt,
                 int flags) {
  UdpHeader h{};
  h.tag = htonl(kUdpTag);
  h.version = q.hdr.version;
  h.op = op;
  h.qpn = htonl(q.id->qp->qp_num & 0xFFFFFF);
  if (q.hdr.version == 4) {
    h.length = kUdpHdrV4;
    std::memcpy(h.addr, &q.hdr.addr.ipv4, 4);
  } else {
    h.length = kUdpHdrV6;
    std::memcpy(h.addr, q.hdr.addr.ipv6.addr, 16);
  }
  std::vector<iovec> v;
  v.push_back({&h, h.length});
  for (int i = 0; i < iovcnt; ++i) v.push_back(iov[i]);
  msghdr m{};
  m.msg_name = const_cast<sockaddr_storage*>(&to);
  m.msg_namelen = len_of(to);
  m.msg_iov = v.data();
  m.msg_iovlen = v.size();
  const ssize_t n = ::sendmsg(s.fd, &m, flags & MSG_DONTWAIT);
  return n < 0 ? -1 : n - h.length;
}

// What waits on the UDP socket: answers, data, peers learnt.
void drain_udp(Socket& s) {
  static thread_local uint8_t buf[kSlot + kUdpHdrV6];
  for (;;) {
    sockaddr_storage from{};
    socklen_t flen = sizeof from;
    const ssize_t n = ::recvfrom(s.fd, buf, sizeof buf, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from), &flen);
    if (n < 0) return;
    if (n < kUdpHdrV4) continue;
    UdpHeader h{};
    std::memcpy(&h, buf, std::min<size_t>(static_cast<size_t>(n), sizeof h));
    const bool valid = ntohl(h.tag) == kUdpTag &&
                       ((h.version == 4 && from.ss_family == AF_INET && h.length == kUdpHdrV4) ||
                        (h.version == 6 && from.ss_family == AF_INET6 && h.length == kUdpHdrV6)) &&
                       n >= h.length && (h.op == kOpData || h.op == kOpCtrl);
    if (!valid) continue;  // not ours: as librdmacm, ignored
    const uint32_t qpn = ntohl(h.qpn) & 0xFFFFFF;
    Dest* d = get_dest(s, from);
    if (d == nullptr) continue;
    if (h.op == kOpData) (void)send_udp(s, *d->qp, from, kOpCtrl, nullptr, 0, MSG_DONTWAIT);  // our QPN for theirs
    if (d->ah == nullptr || d->qpn != qpn) learn_peer(s, *d, qpn);
    if (h.op == kOpData && s.rx.size() < s.rq) {
      Received r;
      r.from = from;
      r.bytes.assign(buf + h.length, buf + n);
      s.rx.push_back(std::move(r));
    }
  }
}

// Completions: receives queued (or dropped when not ours), send slots back.
void drain_cqs(Socket& s) {
  for (auto& qp : s.qps) {
    Qp* q = qp.get();
    ibv_wc wc[16];
    int n;
    while ((n = ibv_poll_cq(q->cq, 16, wc)) > 0) {
      for (int i = 0; i < n; ++i) {
        if ((wc[i].wr_id & kRecvBit) == 0) {
          q->free_slots.push_back(static_cast<uint32_t>(wc[i].wr_id));
          continue;
        }
        const auto slot = static_cast<uint32_t>(wc[i].wr_id & ~kRecvBit);
        const uint8_t* p = q->rbuf + uint64_t{slot} * (kGrh + kSlot) + kGrh;
        const bool ok = wc[i].status == IBV_WC_SUCCESS && wc[i].byte_len >= kGrh + kDsHdrV4 &&
                        ((p[0] == 4 && p[1] == kDsHdrV4) || (p[0] == 6 && p[1] == kDsHdrV6)) &&
                        wc[i].byte_len - kGrh >= p[1];
        if (!ok || wc[i].status == IBV_WC_WR_FLUSH_ERR) {
          if (wc[i].status != IBV_WC_WR_FLUSH_ERR) repost(q, slot);
          continue;
        }
        Received r;
        r.qp = q;
        r.slot = slot;
        r.len = wc[i].byte_len - kGrh;
        s.rx.push_back(std::move(r));
      }
    }
  }
}

void progress(Socket& s) {
  drain_udp(s);
  drain_cm(s);
  drain_cqs(s);
}

bool can_send(const Dest* d) {
  return d == nullptr || d->ah == nullptr || !d->qp->free_slots.empty();
}

// Every CQ armed for its next completion (again, if it was: an arm that
// already fired may not have been read yet).
void arm_all(Socket& s) {
  for (auto& q : s.qps) ibv_req_notify_cq(q->cq, 0);
}

void read_events(Socket& s) {
  epoll_event ev[8];
  const int n = epoll_wait(s.epfd, ev, 8, 0);
  for (int i = 0; i < n; ++i) {
    if (ev[i].data.ptr == nullptr || ev[i].data.ptr == &s) continue;  // the UDP socket, the rdma_cm channel
    auto* q = static_cast<Qp*>(ev[i].data.ptr);
    ibv_cq* cq = nullptr;
    void* ctx = nullptr;
    while (ibv_get_cq_event(q->channel, &cq, &ctx) == 0) ibv_ack_cq_events(cq, 1);
  }
}

// Waits (lock released) until `ready` holds or, non-blocking, says EAGAIN.
// A blocking wait first polls for kPollBeforeSleep (as the stream sockets
// and librdmacm's polling_time): an answer often comes within it.
template <class Ready>
int wait_for(Socket& s, std::unique_lock<std::mutex>& lock, bool nonblock, Ready ready) {
  const auto spin_until = std::chrono::steady_clock::now() + kPollBeforeSleep;
  if (ready()) return 0;  // no system call while there is work at hand (a receiver keeps up)
  for (;;) {
    progress(s);
    if (ready()) return 0;
    if (nonblock) return EAGAIN;
    if (std::chrono::steady_clock::now() < spin_until) continue;
    arm_all(s);
    progress(s);  // what came before the arming raised no event
    if (ready()) return 0;
    lock.unlock();
    epoll_event ev;
    const int n = epoll_wait(s.epfd, &ev, 1, -1);
    const int e = errno;
    lock.lock();
    // A signal ends the wait with EINTR, as librdmacm's epoll wait does,
    // unless it was the termination signal the drop-in took over for its
    // exit (the program then dies of it, as it would have without us).
    if (n < 0 && e == EINTR && !uroce_exiting()) return EINTR;
    read_events(s);
  }
}

size_t iov_len(const iovec* iov, int iovcnt) {
  size_t n = 0;
  for (int i = 0; i < iovcnt; ++i) n += iov[i].iov_len;
  return n;
}

void gather(uint8_t* dst, const iovec* iov, int iovcnt) {
  for (int i = 0; i < iovcnt; ++i) {
    std::memcpy(dst, iov[i].iov_base, iov[i].iov_len);
    dst += iov[i].iov_len;
  }
}

size_t scatter(const uint8_t* src, size_t len, const iovec* iov, int iovcnt) {
  size_t done = 0;
  for (int i = 0; i < iovcnt && done < len; ++i) {
    const size_t n = std::min(iov[i].iov_len, len - done);
    std::memcpy(iov[i].iov_base, src + done, n);
    done += n;
  }
  return done;
}

void copy_out(const sockaddr_storage& a, sockaddr* to, socklen_t* len) {
  if (to == nullptr || len == nullptr) return;
  const socklen_t full = len_of(a);
  std::memcpy(to, &a, std::min(*len, full));
  *len = full;
}

}  // namespace

Socket* lookup(int fd) noexcept {
  std::lock_guard lock(g_mu);
  auto it = table().find(fd);
  return it != table().end() ? it->second : nullptr;
}

int create(int domain) noexcept {
  auto* s = new (std::nothrow) Socket;
  if (s == nullptr) return fail(ENOMEM, -1);
  s->domain = domain;
  s->fd = ::socket(domain, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  s->epfd = ::epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;
  if (s->fd < 0 || s->epfd < 0 || epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->fd, &ev) != 0) {
    const int e = errno;
    if (s->fd >= 0) ::close(s->fd);
    if (s->epfd >= 0) ::close(s->epfd);
    delete s;
    return fail(e, -1);
  }
  std::lock_guard lock(g_mu);
  table()[s->fd] = s;
  return s->fd;
}

int bind(Socket* s, const sockaddr* addr, socklen_t len) noexcept {
  std::lock_guard lock(s->mu);
  return ::bind(s->fd, addr, len);
}

int connect(Socket* s, const sockaddr* addr, socklen_t len) noexcept {
  if (addr == nullptr || len < sizeof(sockaddr_in)) return fail(EINVAL, -1);
  std::lock_guard lock(s->mu);
  if (::connect(s->fd, addr, len) != 0) return -1;
  sockaddr_storage to{};
  std::memcpy(&to, addr, std::min<size_t>(len, sizeof to));
  Dest* d = get_dest(*s, to);
  if (d == nullptr) return -1;
  s->conn = d;
  return 0;
}

ssize_t sendmsg(Socket* s, const iovec* iov, int iovcnt, int flags, const sockaddr* to, socklen_t tolen) noexcept {
  std::unique_lock lock(s->mu);
  Dest* d = s->conn;
  if (to != nullptr) {
    sockaddr_storage a{};
    std::memcpy(&a, to, std::min<size_t>(tolen, sizeof a));
    if (d == nullptr || !same_addr(d->addr, a)) d = get_dest(*s, a);
    if (d == nullptr) return -1;
  }
  if (d == nullptr) return fail(EDESTADDRREQ, ssize_t{-1});
  const Pin pin(d);  // drain_udp below may make room for new peers
  const size_t len = iov_len(iov, iovcnt);
  if (len + d->qp->hdr.length > d->qp->max_payload) return fail(EMSGSIZE, ssize_t{-1});
  if (d->ah == nullptr) {  // the peer's answer (its QP) or its path may be waiting: then UD
    drain_udp(*s);
    drain_cm(*s);
  }
  if (d->ah == nullptr) return send_udp(*s, *d->qp, d->addr, kOpData, iov, iovcnt, flags);
  if (const int rc = wait_for(*s, lock, nonblocking(*s, flags), [&] { return can_send(d); }); rc != 0)
    return fail(rc, ssize_t{-1});
  if (d->ah == nullptr) return send_udp(*s, *d->qp, d->addr, kOpData, iov, iovcnt, flags);
  Qp* q = d->qp;
  const uint32_t slot = q->free_slots.back();
  q->free_slots.pop_back();
  uint8_t* p = q->sbuf + uint64_t{slot} * kSlot;
  std::memcpy(p, &q->hdr, q->hdr.length);
  gather(p + q->hdr.length, iov, iovcnt);
  ibv_sge sge{reinterpret_cast<uintptr_t>(p), static_cast<uint32_t>(q->hdr.length + len), q->smr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.wr.ud.ah = d->ah;
  wr.wr.ud.remote_qpn = d->qpn;
  wr.wr.ud.remote_qkey = RDMA_UDP_QKEY;
  ibv_send_wr* bad = nullptr;
  if (const int rc = ibv_post_send(q->id->qp, &wr, &bad); rc != 0) {
    q->free_slots.push_back(slot);
    return fail(rc, ssize_t{-1});
  }
  return static_cast<ssize_t>(len);
}

ssize_t recvmsg(Socket* s, const iovec* iov, int iovcnt, int flags, sockaddr* from, socklen_t* fromlen) noexcept {
  std::unique_lock lock(s->mu);
  if (const int rc = wait_for(*s, lock, nonblocking(*s, flags), [&] { return !s->rx.empty(); }); rc != 0)
    return fail(rc, ssize_t{-1});
  Received& r = s->rx.front();
  size_t n;
  if (r.qp != nullptr) {
    const uint8_t* p = r.qp->rbuf + uint64_t{r.slot} * (kGrh + kSlot) + kGrh;
    DsHeader h{};
    std::memcpy(&h, p, p[1]);
    n = scatter(p + h.length, r.len - h.length, iov, iovcnt);
    copy_out(addr_of(h), from, fromlen);
  } else {
    n = scatter(r.bytes.data(), r.bytes.size(), iov, iovcnt);
    copy_out(r.from, from, fromlen);
  }
  if ((flags & MSG_PEEK) == 0) {
    if (r.qp != nullptr) repost(r.qp, r.slot);
    s->rx.pop_front();
  }
  return static_cast<ssize_t>(n);
}

int close(Socket* s) noexcept {
  {
    std::lock_guard lock(g_mu);
    table().erase(s->fd);
  }
  {
    std::lock_guard lock(s->mu);
    for (auto& [key, d] : s->dests) {
      if (d->resolving != nullptr) rdma_destroy_id(d->resolving);  // its events go with it
      if (d->ah != nullptr) ibv_destroy_ah(d->ah);
    }
    if (s->cm != nullptr) rdma_destroy_event_channel(s->cm);
    for (auto& q : s->qps) free_qp(q.get());
    ::close(s->epfd);
    ::close(s->fd);
  }
  delete s;
  return 0;
}

int getsockname(Socket* s, sockaddr* addr, socklen_t* len) noexcept { return ::getsockname(s->fd, addr, len); }

int getpeername(Socket* s, sockaddr* addr, socklen_t* len) noexcept {
  std::lock_guard lock(s->mu);
  if (s->conn == nullptr) return fail(ENOTCONN, -1);
  if (addr == nullptr || len == nullptr) return fail(EINVAL, -1);
  copy_out(s->conn->addr, addr, len);
  return 0;
}

int setsockopt(Socket* s, int level, int name, const void* val, socklen_t len) noexcept {
  if (val == nullptr || len < static_cast<socklen_t>(sizeof(int))) return fail(EINVAL, -1);
  std::lock_guard lock(s->mu);
  const int v = *static_cast<const int*>(val);
  if (level == SOL_SOCKET && (name == SO_SNDBUF || name == SO_RCVBUF)) {
    // As librdmacm: twice the asked size, fixed once the first QP exists.
    if (s->qps.empty()) (name == SO_SNDBUF ? s->sbuf_size : s->rbuf_size) = static_cast<uint32_t>(std::max(v, 0)) << 1;
    return 0;
  }
  if (level == SOL_SOCKET || level == IPPROTO_IP || level == IPPROTO_IPV6)
    return ::setsockopt(s->fd, level, name, val, len);  // the UDP socket's own (SO_REUSEADDR, IPV6_V6ONLY, ...)
  return fail(ENOTSUP, -1);
}

int getsockopt(Socket* s, int level, int name, void* val, socklen_t* len) noexcept {
  if (val == nullptr || len == nullptr || *len < static_cast<socklen_t>(sizeof(int))) return fail(EINVAL, -1);
  std::lock_guard lock(s->mu);
  if (level == SOL_SOCKET && (name == SO_SNDBUF || name == SO_RCVBUF)) {
    *static_cast<int*>(val) = static_cast<int>(name == SO_SNDBUF ? s->sbuf_size : s->rbuf_size);
    *len = sizeof(int);
    return 0;
  }
  if (level == SOL_SOCKET || level == IPPROTO_IP || level == IPPROTO_IPV6)
    return ::getsockopt(s->fd, level, name, val, len);
  return fail(ENOTSUP, -1);
}

int get_flags(Socket* s) noexcept {
  std::lock_guard lock(s->mu);
  return s->fd_flags;
}

int set_flags(Socket* s, int flags) noexcept {
  std::lock_guard lock(s->mu);
  s->fd_flags = flags;
  return 0;
}

short revents(Socket* s, short events) noexcept {
  std::lock_guard lock(s->mu);
  const bool in_now = (events & POLLIN) != 0 && !s->rx.empty();
  const bool out_now = (events & POLLOUT) != 0 && can_send(s->conn);
  if (!(in_now || out_now)) progress(*s);
  short r = 0;
  if ((events & POLLIN) != 0 && !s->rx.empty()) r |= POLLIN;
  if ((events & POLLOUT) != 0 && can_send(s->conn)) r |= POLLOUT;
  return r;
}

int arm_fd(Socket* s) noexcept {
  std::lock_guard lock(s->mu);
  arm_all(*s);
  return s->epfd;
}

void consume(Socket* s) noexcept {
  std::lock_guard lock(s->mu);
  read_events(*s);
}

}  // namespace uroce::shim::dgram
