#include "daemon/switch.hpp"

#include <fcntl.h>
#include <rte_mbuf.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "cm/device_cm.hpp"
#include "lib/wire/arp.hpp"
#include "lib/wire/bytes.hpp"
#include "lib/wire/eth.hpp"
#include "lib/wire/ext.hpp"
#include "lib/wire/icmp.hpp"
#include "lib/wire/ipv4.hpp"
#include "lib/wire/ipv6.hpp"
#include "transport/hoststack.hpp"
#include "transport/rnic/mcast.hpp"
#include "transport/rnic/rnic.hpp"

namespace uroce::daemon {

namespace shm = drivers::daemon;
using transport::IpAddr;

namespace {

constexpr uint64_t kLinkCheckNs = 50'000'000;     // the clients' view of the link, refreshed
constexpr uint64_t kExpireEveryNs = 1'000'000'000;
// Busy polling goes on this long after the last frame through the switch.
constexpr uint64_t kTrafficHoldNs = 200'000;
constexpr size_t kMaxNeighWaits = 4096;
constexpr size_t kNdTargetOffset = 8;             // in a neighbour solicitation (RFC 4861 4.3)
// The largest frame a client may hand over: the port's IP MTU, Ethernet,
// two VLAN tags.
constexpr uint32_t kL2Overhead = 14 + 8;

IpAddr src_ip(const uint8_t* f, const wire::PktInfo& pi) noexcept { return IpAddr{wire::src_gid(f, pi)}; }
IpAddr dst_ip(const uint8_t* f, const wire::PktInfo& pi) noexcept { return IpAddr{wire::dst_gid(f, pi)}; }

}  // namespace

size_t PathKeyHash::operator()(const PathKey& k) const noexcept {
  uint64_t h = k.qpn * 0x9E3779B97F4A7C15ull;
  for (uint8_t b : k.gid) h = (h ^ b) * 0x100000001B3ull;
  return static_cast<size_t>(h);
}

Switch::Switch(transport::Device& dev, PortSpace& ports, cm::DeviceCm& cm, Config cfg,
               std::function<void(ClientId)> violation)
    : dev_(dev),
      engine_(dev.engine()),
      ports_(ports),
      cm_(cm),
      cfg_(cfg),
      on_violation_(std::move(violation)),
      geo_(shm::geometry_for(dev.port().mtu() + kL2Overhead)),
      qpns_(dev.engine().config().max_qpn, cfg.qpn_quarantine_ns, cfg.per_client_qpns,
            cfg.seed != 0 ? cfg.seed : std::random_device{}()),
      router_(CmRouter::Hooks{
          [this](int ps, uint16_t port, const IpAddr& dst) -> std::optional<ClientId> {
            const auto b = ports_.listener(ps, port, dst);
            if (!b) return std::nullopt;
            return b->client;
          },
          [this](ClientId c, uint32_t qpn) {
            Attachment* at = client(c);
            return at != nullptr && qpns_.owner(qpn) == at;
          },
          [this](int ps, uint16_t port) { return ports_.relistening(ps, port); },
      }) {
  to_daemon_.reserve(256);
  engine_.run_sync([this] {
    engine_.set_roce_sink(this);
    engine_.set_turn_hook([this] { return turn(); });
    engine_.set_resolve_hook([this](const IpAddr& ip, bool ok) { on_resolved(ip, ok); });
    // An idle engine sleeps (EngineConfig::idle_wait) until a client kicks
    // it: each client is told to, then its TX ring looked at once more.
    engine_.progress().set_idle_hooks(transport::Progress::IdleHooks{
        [this] {
          for (auto& at : clients_) {
            if (at->ended) continue;
            at->hdr->daemon_waiting.v.store(1, std::memory_order_seq_cst);
            if (at->rings.tx.ready() != 0) return false;
          }
          return true;
        },
        [this] {
          for (auto& at : clients_) {
            at->hdr->daemon_waiting.v.store(0, std::memory_order_relaxed);
            uint64_t v;
            while (::read(at->kick_fd, &v, sizeof v) > 0) {
            }
          }
        },
        [this] { return any_active_; },
    });
  });
}

Switch::~Switch() {
  engine_.run_sync([this] {
    engine_.set_turn_hook({});
    engine_.set_resolve_hook({});
    engine_.progress().set_idle_hooks({});
    for (auto& at : clients_) engine_.progress().unwatch_fd(at->kick_fd);
    engine_.set_roce_sink(&dev_.rnic());
  });
  for (auto& at : clients_) {
    if (at->base != nullptr) ::munmap(at->base, at->bytes);
    for (int fd : {at->wake_fd, at->kick_fd})
      if (fd >= 0) ::close(fd);
  }
}

Attachment* Switch::client(ClientId id) noexcept {
  auto it = by_client_.find(id);
  return it == by_client_.end() ? nullptr : it->second;
}

bool Switch::own_addr(const wire::Ipv6Addr& gid) const noexcept { return engine_.config().local.owns(IpAddr{gid}); }

// ---- control ------------------------------------------------------------------------

drivers::Result<Switch::Attached> Switch::attach(ClientId client_id, bool privileged, bool same_group) {
  auto fail = [](int code, const char* what) {
    return drivers::Error{code, std::string(what) + ": " + std::strerror(code)};
  };
  const size_t bytes = geo_.bytes();
  const int memfd = ::memfd_create("uroced-client", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (memfd < 0) return fail(errno, "memfd_create");
  if (::ftruncate(memfd, static_cast<off_t>(bytes)) != 0 ||
      ::fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const int e = errno;
    ::close(memfd);
    return fail(e, "the client's shared region");
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (base == MAP_FAILED) {
    const int e = errno;
    ::close(memfd);
    return fail(e, "mmap of the client's shared region");
  }
  shm::shm_init(base, geo_);
  auto at = std::make_unique<Attachment>();
  at->client = client_id;
  at->privileged = privileged;
  at->same_group = same_group;
  at->base = base;
  at->bytes = bytes;
  at->geo = geo_;
  at->hdr = shm::shm_header(base);
  at->rings = shm::shm_rings(base, geo_);
  at->rings.tx.consumer_sync();
  at->rings.rx.producer_sync();
  at->hdr->link_up.v.store(dev_.port().link_up() ? 1 : 0, std::memory_order_release);
  at->wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  at->kick_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  Attached out;
  out.region_fd = memfd;
  out.wake_fd = at->wake_fd >= 0 ? ::dup(at->wake_fd) : -1;
  out.kick_fd = at->kick_fd >= 0 ? ::dup(at->kick_fd) : -1;
  if (at->wake_fd < 0 || at->kick_fd < 0 || out.wake_fd < 0 || out.kick_fd < 0) {
    const int e = errno;
    for (int fd : {at->wake_fd, at->kick_fd, out.wake_fd, out.kick_fd, memfd})
      if (fd >= 0) ::close(fd);
    ::munmap(base, bytes);
    return fail(e, "eventfd");
  }
  out.at = at.get();
  bool dup = false;
  engine_.run_sync([&] {
    if (by_client_.count(client_id) != 0) {
      dup = true;
      return;
    }
    by_client_[client_id] = at.get();
    engine_.progress().watch_fd(at->kick_fd);
    clients_.push_back(std::move(at));
  });
  if (dup) {
    for (int fd : {out.at->wake_fd, out.at->kick_fd, out.wake_fd, out.kick_fd, memfd}) ::close(fd);
    ::munmap(base, bytes);
    return drivers::Error{EBUSY, "the client is attached to this device already"};
  }
  return out;
}

void Switch::detach(Attachment* at) {
  std::unique_ptr<Attachment> gone;
  engine_.run_sync([&] {
    auto it = std::find_if(clients_.begin(), clients_.end(), [&](const auto& p) { return p.get() == at; });
    if (it == clients_.end()) return;
    drain_all(*at);  // what it sent before it went still goes (a last ACK, its own DREQ)
    publish_rx();
    const uint64_t now = engine_.now();
    // What its CM would have sent (cm_router.hpp): the daemon's CM does it.
    cm::Cm& cm = cm_.cm();
    for (const CmRouter::Farewell& f : router_.client_gone(at->client, now)) {
      cm::MadAddr peer;
      std::copy(f.peer.begin(), f.peer.end(), peer.gid.begin());
      switch (f.kind) {
        case CmRouter::Farewell::Kind::Disconnect: {
          cm::Cm::Adopted a;
          a.local_id = f.local_id;
          a.remote_id = f.remote_id;
          a.remote_ca_guid = f.remote_ca_guid;
          a.peer = peer;
          a.local_qpn = Qpn(f.local_qpn);
          a.remote_qpn = Qpn(f.remote_qpn);
          if (cm::CmId* id = cm.adopt_established(a)) cm.destroy_id(id);  // DREQ, retries, DREP, TimeWait
          break;
        }
        case CmRouter::Farewell::Kind::Drep: {
          cm::DrepMsg d;
          d.local_comm_id = f.local_id;
          d.remote_comm_id = f.remote_id;
          const auto mad = cm::build_mad(d, f.tid);
          cm_.gsi().send(peer, mad);
          break;
        }
        case CmRouter::Farewell::Kind::RejectReq: {
          cm::RejMsg r;
          r.local_comm_id = 0;  // as ib_cm rejects a REQ it made no id for (cm_issue_rej)
          r.remote_comm_id = f.remote_id;
          r.message_rejected = static_cast<uint8_t>(cm::CmMsgRef::Req);
          r.reason = static_cast<uint16_t>(cm::RejReason::ConsumerReject);
          const auto mad = cm::build_mad(r, f.tid);
          cm_.gsi().send(peer, mad);
          break;
        }
      }
    }
    qpns_.free_all(at, now);
    std::vector<uint32_t> claimed;
    for (const auto& [qpn, key] : at->claims) claimed.push_back(qpn);
    for (uint32_t q : claimed) unclaim(*at, q);
    for (const auto& [mgid, n] : at->groups) {
      auto g = groups_.find(mgid);
      if (g == groups_.end()) continue;
      std::erase(g->second, at);
      if (g->second.empty()) groups_.erase(g);
    }
    std::erase(dirty_, at);
    for (auto w = neigh_waits_.begin(); w != neigh_waits_.end();)
      w = w->second.client == at->client ? neigh_waits_.erase(w) : std::next(w);
    by_client_.erase(at->client);
    engine_.progress().unwatch_fd(at->kick_fd);
    gone = std::move(*it);
    clients_.erase(it);
  });
  if (!gone) return;
  ::munmap(gone->base, gone->bytes);
  ::close(gone->wake_fd);
  ::close(gone->kick_fd);
}

int Switch::alloc_qpn(Attachment* at, uint32_t* qpn) {
  int rc = 0;
  engine_.run_sync([&] {
    const uint32_t q = qpns_.alloc(at, at->qpns, engine_.now());
    if (q == 0) {
      rc = ENOMEM;
      return;
    }
    ++at->qpns;
    *qpn = q;
  });
  return rc;
}

int Switch::free_qpn(Attachment* at, uint32_t qpn) {
  int rc = 0;
  engine_.run_sync([&] {
    drain_all(*at);  // what the client sent before it asked (the QP's last ACK) goes first
    if (!qpns_.free(at, qpn, engine_.now())) {
      rc = EINVAL;
      return;
    }
    --at->qpns;
    unclaim(*at, qpn);
  });
  return rc;
}

Switch::Sizes Switch::sizes() {
  Sizes s;
  engine_.run_sync([&] {
    s.clients = clients_.size();
    for (const auto& at : clients_) s.qpns += at->qpns;
    s.claims = claims_.size();
    s.groups = groups_.size();
    s.connections = router_.connections();
    s.pending = router_.pending();
  });
  return s;
}

std::vector<Switch::QpOwned> Switch::owned_by(Attachment* at) {
  std::vector<QpOwned> out;
  engine_.run_sync([&] {
    for (uint32_t q = 2; q < qpns_.limit(); ++q) {
      if (qpns_.owner(q) != at) continue;
      QpOwned o;
      o.qpn = q;
      if (auto it = at->claims.find(q); it != at->claims.end()) {
        o.claimed = true;
        o.path = it->second;
      }
      out.push_back(o);
    }
  });
  return out;
}

// ---- [engine] from the port ---------------------------------------------------------

bool Switch::deliver(Attachment& at, const uint8_t* frame, uint32_t len) {
  UROCE_ASSERT_ENGINE(engine_);
  if (at.ended) return false;
  if (!at.rings.rx.put(shm::RecordKind::kFrame, frame, len)) {
    at.rx_dropped.store(at.rx_dropped.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    ctr_.inc(SwitchCtr::drop_rx_ring_full);
    return false;
  }
  at.rx_frames.store(at.rx_frames.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (!at.rx_dirty) {
    at.rx_dirty = true;
    dirty_.push_back(&at);
  }
  return true;
}

void Switch::publish_rx() {
  UROCE_ASSERT_ENGINE(engine_);
  for (Attachment* at : dirty_) {
    at->rings.rx.publish();
    at->rx_dirty = false;
    // The client sleeps on its wake fd only after it set client_waiting
    // and looked at its ring once more (drivers/daemon/daemon_port.cpp):
    // our publish then this load, against its store then its load.
    if (at->hdr->client_waiting.v.load(std::memory_order_seq_cst) != 0) {
      const uint64_t one = 1;
      [[maybe_unused]] const ssize_t w = ::write(at->wake_fd, &one, sizeof one);
    }
  }
  dirty_.clear();
}

void Switch::rx_burst(transport::Engine& engine, transport::RoceRx* pkts, uint16_t n) {
  UROCE_ASSERT_ENGINE(engine);
  if (n != 0) last_traffic_ns_ = engine.now();
  for (uint16_t i = 0; i < n; ++i) {
    transport::RoceRx& p = pkts[i];
    rte_mbuf* m = p.m;
    const uint8_t* f = rte_pktmbuf_mtod(m, const uint8_t*);
    const uint32_t len = m->data_len;
    const uint32_t qpn = p.info.dest_qp.value();
    if (qpn == rnic::kMulticastQpn) {
      auto g = groups_.find(dst_ip(f, p.info).bytes);
      if (g == groups_.end()) {
        ctr_.inc(SwitchCtr::drop_mcast_no_member);
      } else {
        for (Attachment* at : g->second)
          if (deliver(*at, f, len)) ctr_.inc(SwitchCtr::rx_mcast_copies);
      }
      rte_pktmbuf_free(m);
      continue;
    }
    if (qpn == kQp1.value()) {
      // A MAD: routed by what it says, so its bytes must be what was sent.
      if (p.info.opcode != wire::op::UD_SEND_ONLY || p.info.payload_len < wire::kMadSize) {
        ctr_.inc(SwitchCtr::drop_gsi_malformed);
        rte_pktmbuf_free(m);
        continue;
      }
      if (!wire::verify_icrc(f, p.info)) {
        ctr_.inc(SwitchCtr::drop_icrc);
        rte_pktmbuf_free(m);
        continue;
      }
      const ClientId to = router_.route_in(src_ip(f, p.info).bytes,
                                           {f + p.info.payload_off, wire::kMadSize}, engine.now());
      if (to == kNoOne) {  // left for the peer's retry (CmRouter::Hooks::relistening)
        rte_pktmbuf_free(m);
        continue;
      }
      Attachment* at = to == kDaemonCm ? nullptr : client(to);
      if (at == nullptr) {
        ctr_.inc(SwitchCtr::rx_gsi_to_daemon);
        to_daemon_.push_back(p);  // the daemon's RNIC takes (and frees) it
        continue;
      }
      if (deliver(*at, f, len)) ctr_.inc(SwitchCtr::rx_to_client);
      rte_pktmbuf_free(m);
      continue;
    }
    Attachment* at = qpns_.owner(qpn);
    if (at == nullptr) {
      ctr_.inc(SwitchCtr::drop_unknown_qpn);
    } else if (deliver(*at, f, len)) {
      ctr_.inc(SwitchCtr::rx_to_client);
    }
    rte_pktmbuf_free(m);
  }
  publish_rx();
  if (!to_daemon_.empty()) {
    dev_.rnic().rx_burst(engine, to_daemon_.data(), static_cast<uint16_t>(to_daemon_.size()));
    to_daemon_.clear();
  }
}

bool Switch::mcast_member(const wire::Ipv6Addr& mgid) const noexcept {
  UROCE_ASSERT_ENGINE(engine_);
  return groups_.count(mgid) != 0;
}

// ---- [engine] from the clients ------------------------------------------------------

unsigned Switch::turn() {
  UROCE_ASSERT_ENGINE(engine_);
  unsigned work = 0;
  const uint64_t now = engine_.now();
  // Busy polling: who spins on a CQ now (client_polls moved lately).
  bool active = false;
  bool pollable = false;  // a client we may poll for (Attachment::same_group)
  for (auto& at : clients_) {
    if (at->ended) continue;
    work += drain(*at);
    if (!cfg_.busy_poll || at->ended || !at->same_group) continue;
    pollable = true;
    const uint32_t polls = at->hdr->client_polls.v.load(std::memory_order_relaxed);
    if (polls != at->seen_polls) {
      at->seen_polls = polls;
      at->active_until = now + shm::kClientActiveNs;
    }
    active |= now < at->active_until;
  }
  // ... and while frames flow: a stream's next frame comes within
  // microseconds, a wake-up takes far longer on some machines.
  if (work != 0) last_traffic_ns_ = now;
  any_active_ = pollable && (active || now - last_traffic_ns_ < kTrafficHoldNs);
  if (now - last_expire_ns_ > kExpireEveryNs) {
    last_expire_ns_ = now;
    router_.expire(now);
  }
  if (now - last_link_ns_ > kLinkCheckNs) {
    last_link_ns_ = now;
    const uint32_t up = dev_.port().link_up() ? 1 : 0;
    for (auto& at : clients_) at->hdr->link_up.v.store(up, std::memory_order_release);
  }
  publish_rx();  // neighbour answers
  return work;
}

void Switch::drain_all(Attachment& at) {
  UROCE_ASSERT_ENGINE(engine_);
  // Bounded: a client that keeps filling its ring cannot hold the caller.
  for (uint32_t i = 0; i < at.geo.tx_slots / cfg_.tx_budget + 2 && !at.ended; ++i)
    if (drain(at) == 0) break;
  engine_.flush_tx();
}

unsigned Switch::drain(Attachment& at) {
  UROCE_ASSERT_ENGINE(engine_);
  const uint32_t ready = at.rings.tx.ready();
  if (ready == 0) return 0;
  if (ready == UINT32_MAX) {
    violation(at);
    return 0;
  }
  const uint32_t n = std::min(ready, cfg_.tx_budget);
  uint32_t i = 0;
  for (; i < n; ++i) {
    const shm::SlotHeader h = at.rings.tx.header(i);
    if (h.len > at.rings.tx.payload_max()) {
      violation(at);
      return i;
    }
    const auto kind = static_cast<shm::RecordKind>(h.kind);
    if (kind != shm::RecordKind::kFrame) {
      record(at, kind, at.rings.tx.payload(i), h.len);
      if (at.ended) return i;
      continue;
    }
    rte_mbuf* m = engine_.alloc();
    if (m == nullptr) {
      ctr_.inc(SwitchCtr::tx_no_mbuf);
      break;  // the rest waits for the next turn
    }
    if (h.len > rte_pktmbuf_tailroom(m) || h.len < wire::Eth::kSize) {
      rte_pktmbuf_free(m);
      ctr_.inc(SwitchCtr::tx_refused_not_roce);
      continue;
    }
    std::memcpy(rte_pktmbuf_mtod(m, uint8_t*), at.rings.tx.payload(i), h.len);
    transport::Engine::set_frame_len(m, h.len);
    from_client(at, m);
  }
  at.rings.tx.consume(i);
  return i;
}

void Switch::from_client(Attachment& at, rte_mbuf* m) {
  UROCE_ASSERT_ENGINE(engine_);
  uint8_t* f = rte_pktmbuf_mtod(m, uint8_t*);
  const wire::PktInfo pi = wire::parse({f, m->data_len});
  auto refuse = [&](SwitchCtr why) {
    ctr_.inc(why);
    at.tx_refused.store(at.tx_refused.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    rte_pktmbuf_free(m);
  };
  switch (pi.cls) {
    case wire::FrameClass::RoceV2:
      break;
    case wire::FrameClass::ARP:
    case wire::FrameClass::ICMPv6:
      resolve_for(at, m, pi);
      return;
    case wire::FrameClass::ICMPv4:
    case wire::FrameClass::OtherIPv4:
    case wire::FrameClass::OtherIPv6:
    case wire::FrameClass::OtherEther:
    case wire::FrameClass::Malformed:
      refuse(SwitchCtr::tx_refused_not_roce);
      return;
  }
  if (!engine_.config().local.owns(src_ip(f, pi))) return refuse(SwitchCtr::tx_refused_src_ip);
  const IpAddr dst = dst_ip(f, pi);
  transport::NextHop* hop = nullptr;
  if (!check_roce(at, f, pi, dst, hop)) {
    at.tx_refused.store(at.tx_refused.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    rte_pktmbuf_free(m);
    return;
  }
  // Our port's MAC, whatever the client wrote.
  wire::Eth(f).set_src(engine_.config().local.mac);
  ctr_.inc(SwitchCtr::tx_frames);
  ctr_.add(SwitchCtr::tx_bytes, m->data_len);
  at.tx_frames.store(at.tx_frames.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (rnic::is_multicast_gid(dst.bytes)) {
    engine_.send_multicast(dst.bytes, m);  // the wire, and a copy back to us for the group's clients
  } else if (hop != nullptr) {
    engine_.send_to(dst, m, *hop);  // a claimed path: its next hop as last resolved
  } else {
    engine_.send_to(dst, m);  // the wire, or back to us (a QP of this device)
  }
}

bool Switch::check_roce(Attachment& at, const uint8_t* f, const wire::PktInfo& pi, const IpAddr& dst,
                        transport::NextHop*& hop) {
  UROCE_ASSERT_ENGINE(engine_);
  if (!pi.opcode_known) {
    ctr_.inc(SwitchCtr::tx_refused_opcode);
    return false;
  }
  const wire::OpcodeInfo& op = pi.op();
  const uint32_t dq = pi.dest_qp.value();
  switch (op.transport) {
    case wire::Transport::UD: {
      const wire::DethC deth(f + pi.ext_off(wire::kHdrDeth));
      const uint32_t src = deth.src_qp().value();
      const uint32_t qkey = deth.qkey().value();
      if (src == kQp1.value() || dq == kQp1.value()) {
        // QP 1 speaks to QP 1, and only CM messages the router lets pass.
        if (src != kQp1.value() || dq != kQp1.value() || qkey != kGsiQkey.value() ||
            pi.opcode != wire::op::UD_SEND_ONLY || pi.payload_len < wire::kMadSize ||
            router_.check_out(at.client, dst.bytes, {f + pi.payload_off, wire::kMadSize}, engine_.now()) !=
                CmRouter::Verdict::Pass) {
          ctr_.inc(SwitchCtr::tx_refused_mad);
          return false;
        }
        return true;
      }
      if (dq == 0 || qpns_.owner(src) != &at) {
        ctr_.inc(SwitchCtr::tx_refused_src_qpn);
        return false;
      }
      if ((qkey & 0x80000000u) != 0 && !at.privileged) {  // IBA 10.2.4: controlled Q_Keys
        ctr_.inc(SwitchCtr::tx_refused_qkey);
        return false;
      }
      if (dq == rnic::kMulticastQpn && !rnic::is_multicast_gid(dst.bytes)) {
        ctr_.inc(SwitchCtr::tx_refused_path);
        return false;
      }
      return true;
    }
    case wire::Transport::RC:
    case wire::Transport::UC:
    case wire::Transport::XRC:
    case wire::Transport::CNP: {
      if (own_addr(dst.bytes)) {
        // A QP of this device: its own claim must name a QP of the sender.
        Attachment* peer = qpns_.owner(dq);
        const PathKey* back = nullptr;
        if (peer != nullptr) {
          if (auto it = peer->claims.find(dq); it != peer->claims.end()) back = &it->second;
        }
        if (back == nullptr || !own_addr(back->gid) || qpns_.owner(back->qpn) != &at) {
          ctr_.inc(SwitchCtr::tx_refused_path);
          return false;
        }
        return true;
      }
      const auto c = claims_.find(PathKey{dst.bytes, dq});
      if (c == claims_.end() || c->second.at != &at) {
        ctr_.inc(SwitchCtr::tx_refused_path);
        return false;
      }
      hop = &c->second.hop;
      return true;
    }
    case wire::Transport::RD:
    case wire::Transport::None:
      break;
  }
  ctr_.inc(SwitchCtr::tx_refused_opcode);
  return false;
}

void Switch::unclaim(Attachment& at, uint32_t qpn) {
  auto it = at.claims.find(qpn);
  if (it == at.claims.end()) return;
  if (auto c = claims_.find(it->second); c != claims_.end() && c->second.at == &at) {
    if (--c->second.refs == 0) claims_.erase(c);
  }
  at.claims.erase(it);
}

void Switch::record(Attachment& at, shm::RecordKind kind, const uint8_t* p, uint32_t len) {
  UROCE_ASSERT_ENGINE(engine_);
  switch (kind) {
    case shm::RecordKind::kClaim: {
      shm::ClaimRecord r;
      if (len != sizeof r) return violation(at);
      std::memcpy(&r, p, sizeof r);
      if (qpns_.owner(r.qpn) != &at) {
        ctr_.inc(SwitchCtr::claims_refused);
        return;
      }
      unclaim(at, r.qpn);
      PathKey key;
      std::copy(r.remote_gid, r.remote_gid + 16, key.gid.begin());
      key.qpn = r.remote_qpn & 0xFFFFFF;
      if (!own_addr(key.gid)) {
        auto [c, fresh] = claims_.try_emplace(key, Holder{&at, 0, {}});
        if (c->second.at != &at) {  // another client's QP is connected there
          ctr_.inc(SwitchCtr::claims_refused);
          return;
        }
        ++c->second.refs;
      }
      at.claims[r.qpn] = key;
      ctr_.inc(SwitchCtr::claims);
      return;
    }
    case shm::RecordKind::kUnclaim: {
      shm::QpnRecord r;
      if (len != sizeof r) return violation(at);
      std::memcpy(&r, p, sizeof r);
      unclaim(at, r.qpn);
      return;
    }
    case shm::RecordKind::kMcastJoin:
    case shm::RecordKind::kMcastLeave: {
      shm::McastRecord r;
      if (len != sizeof r) return violation(at);
      std::memcpy(&r, p, sizeof r);
      wire::Ipv6Addr mgid;
      std::copy(r.mgid, r.mgid + 16, mgid.begin());
      if (!rnic::is_multicast_gid(mgid)) return;
      if (kind == shm::RecordKind::kMcastJoin) {
        if (at.groups[mgid]++ == 0) {
          groups_[mgid].push_back(&at);
          ctr_.inc(SwitchCtr::mcast_joins);
        }
        return;
      }
      auto g = at.groups.find(mgid);
      if (g == at.groups.end()) return;
      if (--g->second == 0) {
        at.groups.erase(g);
        auto gg = groups_.find(mgid);
        if (gg != groups_.end()) {
          std::erase(gg->second, &at);
          if (gg->second.empty()) groups_.erase(gg);
        }
      }
      return;
    }
    case shm::RecordKind::kFrame:
      return;
  }
  violation(at);  // a kind that does not exist
}

void Switch::resolve_for(Attachment& at, rte_mbuf* m, const wire::PktInfo& pi) {
  UROCE_ASSERT_ENGINE(engine_);
  const uint8_t* f = rte_pktmbuf_mtod(m, const uint8_t*);
  std::optional<IpAddr> target;
  if (pi.cls == wire::FrameClass::ARP) {
    const wire::ArpC arp(f + pi.l3_off);
    if (pi.l3_off + wire::Arp::kSize <= m->data_len && arp.is_ipv4_over_ethernet() &&
        arp.op() == wire::kArpOpRequest)
      target = IpAddr::v4(arp.tpa());
  } else if (pi.l4_off + kNdTargetOffset + 16 <= m->data_len &&
             f[pi.l4_off] == wire::kIcmp6NeighborSolicit) {
    wire::Ipv6Addr t;
    std::memcpy(t.data(), f + pi.l4_off + kNdTargetOffset, 16);
    target = IpAddr::v6(t);
  }
  if (!target) {
    ctr_.inc(SwitchCtr::tx_refused_not_roce);
    rte_pktmbuf_free(m);
    return;
  }
  const auto& local = engine_.config().local;
  if (local.owns(*target)) {
    answer_neigh(at, f, pi, *target, local.mac);
  } else if (const wire::MacAddr* mac = engine_.neighbours().lookup(*target, engine_.now())) {
    answer_neigh(at, f, pi, *target, *mac);
  } else if (neigh_waits_.size() < kMaxNeighWaits) {
    // The daemon's own request; the client's is answered when it resolves
    // (and left unanswered when it does not: the client's own timer ends it).
    neigh_waits_.emplace(target->bytes, NeighWait{at.client, std::vector<uint8_t>(f, f + m->data_len)});
    ctr_.inc(SwitchCtr::neigh_waits);
    engine_.neighbours().resolve(*target, engine_.now());
  }
  rte_pktmbuf_free(m);
}

void Switch::answer_neigh(Attachment& at, const uint8_t* req, const wire::PktInfo& pi, const IpAddr& target,
                          const wire::MacAddr& mac) {
  UROCE_ASSERT_ENGINE(engine_);
  // The answer the neighbour itself would give: handle_host_frame as that
  // neighbour (its MAC, its address), to the client's request.
  transport::LocalAddrs as_peer;
  as_peer.mac = mac;
  as_peer.ips.push_back(target);
  std::array<uint8_t, 256> out{};
  const transport::HostAction act = transport::handle_host_frame({req, pi.frame_len}, pi, as_peer, true,
                                                                 out.data(), out.size());
  if (act.reply_len == 0) return;
  if (deliver(at, out.data(), static_cast<uint32_t>(act.reply_len)))
    ctr_.inc(pi.cls == wire::FrameClass::ARP ? SwitchCtr::arp_answered : SwitchCtr::nd_answered);
}

void Switch::on_resolved(const IpAddr& ip, bool ok) {
  UROCE_ASSERT_ENGINE(engine_);
  auto [lo, hi] = neigh_waits_.equal_range(ip.bytes);
  std::vector<NeighWait> done;
  for (auto it = lo; it != hi; ++it) done.push_back(std::move(it->second));
  neigh_waits_.erase(lo, hi);
  if (!ok) return;
  const wire::MacAddr* mac = engine_.neighbours().lookup(ip, engine_.now());
  if (mac == nullptr) return;
  for (NeighWait& w : done) {
    Attachment* at = client(w.client);
    if (at == nullptr) continue;
    const wire::PktInfo pi = wire::parse({w.request.data(), w.request.size()});
    answer_neigh(*at, w.request.data(), pi, ip, *mac);
  }
  publish_rx();
}

void Switch::violation(Attachment& at) {
  UROCE_ASSERT_ENGINE(engine_);
  if (at.ended) return;
  at.ended = true;
  ctr_.inc(SwitchCtr::ring_violations);
  if (on_violation_) on_violation_(at.client);
}

}  // namespace uroce::daemon
