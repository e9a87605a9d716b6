#include "tools/uroce/node_session.hpp"

#include <rte_mbuf.h>

#include <chrono>

#include "lib/wire/icmp.hpp"
#include "lib/wire/ipv4.hpp"
#include "lib/wire/ext.hpp"
#include "lib/wire/ipv6.hpp"
#include "lib/wire/opcode.hpp"
#include "lib/wire/pkt.hpp"

namespace uroce::tools {
namespace {

using transport::IpAddr;

constexpr uint32_t kIcmpIdShift = 16;
constexpr uint32_t kIcmpSeqMask = 0xFFFF;

// The node's one QP (kNodeQpn) takes the packet, and the engine's frame
// checks pass; otherwise the packet is dropped and counted by the engine.
bool accept(transport::Engine& engine, const transport::RoceRx& rx) {
  if (rx.info.dest_qp != kNodeQpn) {
    engine.drop(rx.m, transport::EngineCtr::drop_unknown_qpn);
    return false;
  }
  return engine.accept_roce(rx);
}

// The node message of a test frame: a UD SEND_ONLY with our Q_Key.
std::optional<NodeMsg> node_msg_of(const transport::RoceRx& rx) {
  const uint8_t* f = rte_pktmbuf_mtod(rx.m, const uint8_t*);
  if (rx.info.opcode != wire::op::UD_SEND_ONLY ||
      wire::DethC(f + rx.info.ext_off(wire::kHdrDeth)).qkey() != kNodeQkey) {
    return std::nullopt;
  }
  return read_node_msg({f + rx.info.payload_off, rx.info.payload_len});
}

std::span<const uint8_t> payload_of(const transport::RoceRx& rx) {
  const uint8_t* f = rte_pktmbuf_mtod(rx.m, const uint8_t*);
  return {f + rx.info.payload_off, rx.info.payload_len};
}

// The identifier and sequence of an ICMP or ICMPv6 echo reply.
std::optional<uint32_t> echo_reply_rest(const uint8_t* f, const wire::PktInfo& pi) {
  if (pi.l3_end < pi.l4_off + wire::Icmp::kSize) return std::nullopt;
  const uint8_t type = wire::IcmpC(f + pi.l4_off).type();
  const bool reply = (pi.cls == wire::FrameClass::ICMPv4 && type == wire::kIcmpEchoReply) ||
                     (pi.cls == wire::FrameClass::ICMPv6 && type == wire::kIcmp6EchoReply);
  if (!reply) return std::nullopt;
  return wire::IcmpC(f + pi.l4_off).rest();
}

IpAddr ip_src(const uint8_t* f, const wire::PktInfo& pi) { return IpAddr{wire::src_gid(f, pi)}; }
IpAddr ip_dst(const uint8_t* f, const wire::PktInfo& pi) { return IpAddr{wire::dst_gid(f, pi)}; }

void set_len(rte_mbuf* m, size_t len) {
  m->data_len = static_cast<uint16_t>(len);
  m->pkt_len = static_cast<uint32_t>(len);
}

}  // namespace

uint64_t steady_ns() noexcept {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

// ---- PingSession ---------------------------------------------------------------------

PingSession::PingSession(transport::Engine& engine, PingConfig cfg)
    : engine_(engine), cfg_(cfg), payload_(std::max(cfg.payload, kNodeMsgSize)) {
  timeout_.cb = &PingSession::on_timeout;
  timeout_.owner = this;
  interval_.cb = &PingSession::on_interval;
  interval_.owner = this;
  res_.rtt_ns.reserve(cfg.count != 0 && cfg.count < kMaxRttSamples ? cfg.count : kMaxRttSamples);
}

void PingSession::start() {
  start_ns_ = steady_ns();
  const auto src = engine_.config().local.source_for(cfg_.target);
  if (!src) {
    finish("no address of the target's family on this device");
    return;
  }
  src_ = *src;
  engine_.set_resolve_hook([this](const IpAddr& ip, bool ok) { on_resolved(ip, ok); });
  if (engine_.neighbours().lookup(cfg_.target, engine_.now()) != nullptr) {
    on_resolved(cfg_.target, true);
    return;
  }
  resolve_tries_ = 1;
  engine_.neighbours().resolve(cfg_.target, engine_.now());
}

void PingSession::on_resolved(const IpAddr& ip, bool ok) {
  if (!(ip == cfg_.target) || res_.resolved || finished_) return;
  if (!ok) {
    if (resolve_tries_ < cfg_.resolve_tries) {
      // The peer may come later (a tap not yet on its bridge): start over.
      ++resolve_tries_;
      engine_.neighbours().resolve(cfg_.target, engine_.now());
      return;
    }
    finish(std::string(cfg_.target.is_v4() ? "ARP" : "neighbour discovery") + ": no answer from the target");
    return;
  }
  res_.resolved = true;
  res_.resolve_ns = steady_ns() - start_ns_;
  if (const wire::MacAddr* mac = engine_.neighbours().lookup(cfg_.target, engine_.now())) res_.peer_mac = *mac;
  send_ping();
}

rte_mbuf* PingSession::build_ping(uint32_t seq, uint64_t tx_ns) {
  rte_mbuf* m = engine_.alloc();
  if (m == nullptr) return nullptr;
  write_node_msg(payload_, NodeMsg{NodeKind::kPing, seq, tx_ns});
  const std::span<uint8_t> out(rte_pktmbuf_mtod(m, uint8_t*), rte_pktmbuf_tailroom(m));
  const transport::LocalAddrs& local = engine_.config().local;
  size_t len;
  if (cfg_.icmp) {
    len = transport::build_echo_request(out.data(), local, wire::MacAddr{}, src_, cfg_.target, cfg_.icmp_id,
                                        static_cast<uint16_t>(seq), payload_);
  } else {
    len = build_node_frame(out, NodeFrameAddrs{&local, wire::MacAddr{}, src_, cfg_.target}, seq, payload_);
  }
  if (len == 0) {
    rte_pktmbuf_free(m);
    return nullptr;
  }
  set_len(m, len);
  return m;
}

void PingSession::send_ping() {
  seq_ = static_cast<uint32_t>(res_.sent);
  tx_ns_ = steady_ns();
  rte_mbuf* m = build_ping(seq_, tx_ns_);
  if (m == nullptr) {
    finish("no buffer for a ping, or the payload does not fit one");
    return;
  }
  ++res_.sent;
  waiting_ = true;
  engine_.timers().arm(timeout_, tx_ns_ + cfg_.timeout_ns);
  if (!engine_.send_to(cfg_.target, m)) finish("the target became unreachable");
}

void PingSession::complete(uint64_t now_ns) {
  waiting_ = false;
  engine_.timers().cancel(timeout_);
  ++res_.received;
  if (res_.rtt_ns.size() < kMaxRttSamples) res_.rtt_ns.push_back(now_ns - tx_ns_);
  next();
}

void PingSession::next() {
  if (cfg_.count != 0 && res_.sent >= cfg_.count) {
    finish();
  } else if (cfg_.interval_ns != 0) {
    engine_.timers().arm(interval_, steady_ns() + cfg_.interval_ns);
  } else {
    send_ping();
  }
}

void PingSession::finish(std::string failure) {
  if (finished_) return;
  finished_ = true;
  engine_.timers().cancel(timeout_);
  engine_.timers().cancel(interval_);
  res_.failure = std::move(failure);
  done_.store(true, std::memory_order_release);  // publishes res_
}

void PingSession::on_timeout(Timer& t, uint64_t) {
  auto& s = t.owner_as<PingSession>();
  if (!s.waiting_ || s.finished_) return;
  s.waiting_ = false;
  ++s.res_.lost;
  s.next();
}

void PingSession::on_interval(Timer& t, uint64_t) {
  auto& s = t.owner_as<PingSession>();
  if (!s.finished_) s.send_ping();
}

void PingSession::rx_burst(transport::Engine& engine, transport::RoceRx* pkts, uint16_t n) {
  const uint64_t now = steady_ns();
  for (uint16_t i = 0; i < n; ++i) {
    if (!accept(engine, pkts[i])) continue;
    const auto msg = node_msg_of(pkts[i]);
    const bool ours = !cfg_.icmp && waiting_ && !finished_ && msg && msg->kind == NodeKind::kPong &&
                      msg->seq == seq_ && msg->tx_ns == tx_ns_;
    rte_pktmbuf_free(pkts[i].m);
    if (ours) {
      complete(now);
    } else {
      ++res_.unexpected;
    }
  }
}

void PingSession::on_echo_reply(uint16_t id, uint16_t seq, uint64_t now_ns) noexcept {
  if (!cfg_.icmp || id != cfg_.icmp_id) return;
  if (waiting_ && !finished_ && seq == static_cast<uint16_t>(seq_)) {
    complete(now_ns);
  } else {
    ++res_.unexpected;
  }
}

// ---- EchoSession -----------------------------------------------------------------------

EchoSession::EchoSession(transport::Engine& engine, uint64_t limit)
    : engine_(engine), limit_(limit), payload_(max_node_payload(engine.port().mtu())) {}

void EchoSession::answer(const transport::RoceRx& rx, const NodeMsg& msg) {
  const std::span<const uint8_t> in = payload_of(rx);
  if (in.size() > payload_.size()) {
    ignored_.store(ignored() + 1, std::memory_order_relaxed);
    return;
  }
  rte_mbuf* m = engine_.alloc();
  if (m == nullptr) return;  // counted by the engine (drop_no_mbuf)
  const uint8_t* f = rte_pktmbuf_mtod(rx.m, const uint8_t*);
  const std::span<uint8_t> pong(payload_.data(), in.size());
  write_node_msg(pong, NodeMsg{NodeKind::kPong, msg.seq, msg.tx_ns});
  const NodeFrameAddrs addrs{&engine_.config().local, wire::EthC(f).src(), ip_dst(f, rx.info), ip_src(f, rx.info)};
  const std::span<uint8_t> out(rte_pktmbuf_mtod(m, uint8_t*), rte_pktmbuf_tailroom(m));
  const size_t len = build_node_frame(out, addrs, msg.seq, pong);
  if (len == 0) {
    rte_pktmbuf_free(m);
    ignored_.store(ignored() + 1, std::memory_order_relaxed);
    return;
  }
  set_len(m, len);
  engine_.send(m);
  echoed_.store(echoed() + 1, std::memory_order_relaxed);
}

void EchoSession::rx_burst(transport::Engine& engine, transport::RoceRx* pkts, uint16_t n) {
  for (uint16_t i = 0; i < n; ++i) {
    if (!accept(engine, pkts[i])) continue;
    const auto msg = node_msg_of(pkts[i]);
    if (msg && msg->kind == NodeKind::kPing && !done()) {
      answer(pkts[i], *msg);
    } else {
      ignored_.store(ignored() + 1, std::memory_order_relaxed);
    }
    rte_pktmbuf_free(pkts[i].m);
  }
}

// ---- IcmpReplyTap -------------------------------------------------------------------------

uint16_t IcmpReplyTap::rx_burst(rte_mbuf** pkts, uint16_t n) {
  const uint16_t got = inner_.rx_burst(pkts, n);
  if (session_ == nullptr || got == 0) return got;
  const uint64_t now = steady_ns();
  for (uint16_t i = 0; i < got; ++i) {
    const uint8_t* f = rte_pktmbuf_mtod(pkts[i], const uint8_t*);
    const auto rest = echo_reply_rest(f, wire::parse({f, pkts[i]->data_len}));
    if (!rest) continue;
    session_->on_echo_reply(static_cast<uint16_t>(*rest >> kIcmpIdShift), static_cast<uint16_t>(*rest & kIcmpSeqMask),
                            now);
  }
  return got;
}

}  // namespace uroce::tools
