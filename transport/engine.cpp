#include "transport/engine.hpp"

#include <sched.h>

#include <rte_mbuf.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cstring>
#include <ctime>

#include "lib/util/stamps.hpp"
#include "lib/util/steady_ns.hpp"
#include "lib/wire/eth.hpp"
#include "lib/wire/ipv4.hpp"
#include "lib/wire/ipv6.hpp"
#include "transport/params.hpp"

namespace uroce::transport {
namespace {

bool is_group(const wire::MacAddr& m) noexcept { return (m[0] & 0x01) != 0; }

}  // namespace

Engine::Engine(drivers::Port& port, EngineConfig cfg)
    : shared_tx_(cfg.lcores > 1 ? std::make_unique<SharedTxPort>(port) : nullptr),
      port_(shared_tx_ ? *shared_tx_ : port),
      cfg_(std::move(cfg)),
      now_ns_(steady_ns()),
      wheel_(now_ns_),
      neigh_(wheel_, cfg_.neigh,
             NeighTable::Hooks{
                 [this](const IpAddr& ip) { send_neigh_request(ip); },
                 [this](rte_mbuf* m, const wire::MacAddr& mac) { send_to_mac(m, mac); },
                 [this](rte_mbuf* m) {
                   ctr_.inc(EngineCtr::drop_neigh);
                   rte_pktmbuf_free(m);
                 },
                 [this](const IpAddr& ip, bool ok) {
                   ctr_.inc(ok ? EngineCtr::neigh_resolved : EngineCtr::neigh_failed);
                   if (resolve_hook_) resolve_hook_(ip, ok);
                 },
                 cfg_.next_hop,
             }),
      doorbells_(cfg_.doorbell_capacity) {
  tx_.reserve(2 * size_t{cfg_.tx_batch});  // tx_batch kept from a refused flush, then a batch
  tx_kind_.reserve(tx_.capacity());
  loop_.reserve(params::kLoopbackFrames);
  loop_rx_.reserve(params::kLoopbackFrames);
  roce_.resize(cfg_.rx_burst);
}

Engine::~Engine() {
  lcores_.reset();  // the workers' threads first: they send through port_
  progress_.stop();
  progress_.as_loop([this] {  // the loop has stopped: it is ours now
    flush_tx();
    for (rte_mbuf* m : tx_) rte_pktmbuf_free(m);  // the port took no more
    tx_.clear();
    tx_kind_.clear();
    for (rte_mbuf* m : loop_) rte_pktmbuf_free(m);
    loop_.clear();
  });
  capture_.close();
}

drivers::Status Engine::init() {
  if (auto st = progress_.init(); !st) return st;
  if (cfg_.lcores > 1 && !lcores_) {
    // The workers always run on threads of their own (Lcores::start);
    // lcore 0 may be driven inline by its owner (tests).  The
    // configuration refuses inline progress with several lcores.
    if (cfg_.lcores > kMaxEngineLcores)
      return drivers::Error{EINVAL, "engine_lcores: " + std::to_string(kMaxEngineLcores) + " at most"};
    lcores_ = std::make_unique<Lcores>(*this, port_, cfg_.lcores);
    group_ = lcores_.get();
    if (auto st = lcores_->init(); !st) return st;
  }
  if (!cfg_.pcap_path.empty()) {
    if (auto st = capture_.open(cfg_.pcap_path); !st) return st;
  }
  if (cfg_.announce) {
    progress_.as_loop([this] {
      announce();
      flush_tx();
    });
  }
  return {};
}

uint64_t Engine::realtime_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(ts.tv_nsec);
}

// ---- the loop ------------------------------------------------------------------

unsigned Engine::poll_once() {
  if (worker()) group_->checkpoint(lcore_);  // parks while the control path runs
  now_ns_ = steady_ns();
  progress_.turn_begins(now_ns_);
  // Application requests first (posts, run_sync calls such as rdma_listen),
  // then the wire and the timers: a request made before this iteration is
  // in effect before anything this iteration receives is handled.
  unsigned work = drain_doorbells();
  if (turn_hook_) work += turn_hook_();
  std::array<rte_mbuf*, 256> pkts;
  const uint16_t burst = cfg_.rx_burst < pkts.size() ? cfg_.rx_burst : static_cast<uint16_t>(pkts.size());
  const uint16_t n = port_.rx_burst(pkts.data(), burst);
  if (n) {
    UROCE_STAMP(Received);
    handle_rx(pkts.data(), n, worker(), worker());  // a worker's port is its hand-off ring (lcores.hpp)
    work += n;
  }
  if (lcores_) {
    if (const uint16_t h = lcores_->take_handed(pkts.data(), burst); h != 0) {
      handle_rx(pkts.data(), h, true, true);
      work += h;
    }
  }
  work += drain_loopback();
  if (lcores_) work += lcores_->drain_control_tx();
  work += wheel_.advance(now_ns_);
  if (!kernel_learned_.empty()) {  // rare: isolated ports (EngineConfig::kernel_neigh)
    for (const auto& [ip, mac] : kernel_learned_) neigh_.learn(ip, mac, true, now_ns_);
    work += static_cast<unsigned>(kernel_learned_.size());
    kernel_learned_.clear();
  }
  end_turn_tx();
  // Frames wait for room in the port, or held ACKs for their hold's end
  // (kAckHoldNs): not idle, no nap (an engine thread on a shared core naps
  // as soon as it is idle, and a nap would hold the ACKs to its end).
  if (tx_stalled_ || !tx_.empty()) ++work;
  if (capture_.is_open()) capture_.maybe_flush(realtime_ns());
  progress_.turn_ended();
  return work;
}

void Engine::end_turn_tx() noexcept {
  if (tx_.empty()) return;
  if (cfg_.ack_hold_ns != 0 && tx_only_acks()) {
    if (ack_hold_since_ == 0) ack_hold_since_ = now_ns_;
    if (now_ns_ - ack_hold_since_ < cfg_.ack_hold_ns) return;
  }
  flush_tx();
}

// Held ACKs (end_turn_tx) that requests have joined leave behind them.
// An ACK acknowledges the peer's request stream, a request belongs to ours:
// two PSN spaces with no order between them (IBA 9.7.1), and the peer's
// requester ignores where its ACKs fall among our requests.  Where the
// peer's application waits for its own completion before it reads memory
// our request wrote (ib_write_lat, RDMA-write protocols), the request then
// arrives while that application still polls its CQ: the poll that
// completes its WQE has already placed our data, so no engine thread of
// the peer has to run for it.  Responses (READ responses, atomic ACKs)
// never move: they share the peer's request stream with the ACKs.
// Nor does anything move past them when a request would complete a receive
// at the peer (a SEND, a WRITE with immediate): the peer's send completion
// must come before the receive completion of what we posted after it, as
// on every RNIC, which acknowledges a request before its application can
// answer.  Programs count on that order: perftest 4.5 waits on one
// completion channel for its send CQ's event, then its receive CQ's (one
// event each) and polled the send CQ empty when the receive's came first
// (ib_send_lat -e: an error status read from an unwritten wc, or a hang).
bool Engine::requests_before_held_acks() noexcept {
  if (tx_acks_ == 0 || tx_acks_ >= tx_.size() || tx_captured_ != 0) return false;
  for (size_t i = tx_acks_; i < tx_.size(); ++i)
    if (tx_kind_[i] != TxKind::Request) return false;
  const auto at = static_cast<std::ptrdiff_t>(tx_acks_);
  std::rotate(tx_.begin(), tx_.begin() + at, tx_.end());
  std::rotate(tx_kind_.begin(), tx_kind_.begin() + at, tx_kind_.end());
  ctr_.add(EngineCtr::tx_acks_behind, tx_acks_);
  return true;
}

bool Engine::tx_only_acks() noexcept {
  for (; tx_acks_ < tx_.size(); ++tx_acks_)
    if (tx_kind_[tx_acks_] != TxKind::Ack) return false;
  return true;
}

bool Engine::ring(Doorbell d) noexcept {
  if (!doorbells_.bounded_push(d)) return false;
  progress_.rung();
  // A worker lcore naps on its lane's eventfd: a post to one of its QPs
  // ends the nap, as a frame does (no application thread runs a worker's
  // turns, so nothing else would before the nap's end).
  if (lane_ != nullptr) lane_->wake_if_waiting();
  return true;
}

unsigned Engine::drain_doorbells() {
  unsigned n = 0;
  Doorbell d;
  // Bounded: callbacks that ring again run on the next iteration.
  for (uint32_t i = 0; i < cfg_.doorbell_capacity && doorbells_.pop(d); ++i) {
    ++n;
    d.fn(*this, d.ctx);
  }
  if (n) ctr_.add(EngineCtr::doorbells, n);
  return n;
}

// ---- receive ------------------------------------------------------------------

bool Engine::accept_mac(const uint8_t* frame) const noexcept {
  const wire::MacAddr dst = wire::EthC(frame).dst();
  return dst == cfg_.local.mac || is_group(dst);
}

bool Engine::accept_roce_dst(const uint8_t* frame, const wire::PktInfo& pi) const noexcept {
  const IpAddr dst{wire::dst_gid(frame, pi)};
  return wire::is_multicast_gid(dst.bytes) || cfg_.local.owns(dst);  // multicast: UD groups
}

void Engine::count_drop(const wire::PktInfo& pi) {
  switch (pi.cls) {
    case wire::FrameClass::Malformed:
      ctr_.inc(EngineCtr::drop_malformed);
      parse_err_[static_cast<size_t>(pi.error)].fetch_add(1, std::memory_order_relaxed);
      return;
    case wire::FrameClass::OtherIPv4:
      ctr_.inc(EngineCtr::drop_other_ipv4);
      return;
    case wire::FrameClass::OtherIPv6:
      ctr_.inc(EngineCtr::drop_other_ipv6);
      return;
    case wire::FrameClass::OtherEther:
      ctr_.inc(EngineCtr::drop_other_ethertype);
      return;
    case wire::FrameClass::RoceV2:
    case wire::FrameClass::ARP:
    case wire::FrameClass::ICMPv4:
    case wire::FrameClass::ICMPv6:
      return;  // counted where they are handled
  }
}

void Engine::handle_rx(rte_mbuf** pkts, uint16_t n, bool looped, bool handed) {
  const bool capture = capture_.is_open() && !looped;
  const uint64_t rt = capture ? realtime_ns() : 0;
  uint16_t nroce = 0;
  uint64_t bytes = 0;
  for (uint16_t i = 0; i < n; ++i) {
    rte_mbuf* m = pkts[i];
    bytes += m->pkt_len;
    if (capture) capture_.write(m, rt);
    const uint8_t* f = rte_pktmbuf_mtod(m, const uint8_t*);
    // Frames are single-segment on every port we build (mbufs sized for
    // the largest frame); parse the first segment.
    const wire::PktInfo pi = wire::parse({f, m->data_len});
    if (pi.cls != wire::FrameClass::Malformed && !accept_mac(f)) {
      ctr_.inc(EngineCtr::drop_not_our_mac);
      rte_pktmbuf_free(m);
      continue;
    }
    switch (pi.cls) {
      case wire::FrameClass::RoceV2:
        break;
      case wire::FrameClass::ARP:
      case wire::FrameClass::ICMPv4:
      case wire::FrameClass::ICMPv6:
        handle_host(m, pi);
        continue;
      case wire::FrameClass::OtherIPv4:
      case wire::FrameClass::OtherIPv6:
      case wire::FrameClass::OtherEther:
      case wire::FrameClass::Malformed:
        count_drop(pi);
        rte_pktmbuf_free(m);
        continue;
    }
    // RoCEv2 (STYLE 7's order): the address here; the QP, its state and
    // keys in the sink; then the opcode and the ICRC (accept_roce).
    if (!accept_roce_dst(f, pi)) {
      ctr_.inc(EngineCtr::drop_not_our_ip);
      rte_pktmbuf_free(m);
      continue;
    }
    if (sink_ == nullptr) {
      ctr_.inc(EngineCtr::drop_unknown_qpn);  // nothing on this engine has QPs
      rte_pktmbuf_free(m);
      continue;
    }
    roce_[nroce++] = RoceRx{m, pi, handed};
  }
  if (!looped) {
    ctr_.add(EngineCtr::rx_frames, n);
    ctr_.add(EngineCtr::rx_bytes, bytes);
  }
  if (nroce) sink_->rx_burst(*this, roce_.data(), nroce);
}

bool Engine::accept_roce(const RoceRx& pkt) noexcept {
  UROCE_ASSERT_ENGINE(*this);
  if (!pkt.info.opcode_known) {
    drop(pkt.m, EngineCtr::drop_unknown_opcode);
    return false;
  }
  if (!wire::verify_icrc(rte_pktmbuf_mtod(pkt.m, const uint8_t*), pkt.info)) {
    drop(pkt.m, EngineCtr::drop_icrc);
    return false;
  }
  ctr_.inc(EngineCtr::rx_roce);
  return true;
}

void Engine::drop(rte_mbuf* m, EngineCtr why) noexcept {
  UROCE_ASSERT_ENGINE(*this);
  ctr_.inc(why);
  rte_pktmbuf_free(m);
}

void Engine::handle_host(rte_mbuf* m, const wire::PktInfo& pi) {
  switch (pi.cls) {
    case wire::FrameClass::ARP: ctr_.inc(EngineCtr::rx_arp); break;
    case wire::FrameClass::ICMPv4: ctr_.inc(EngineCtr::rx_icmp); break;
    case wire::FrameClass::ICMPv6: ctr_.inc(EngineCtr::rx_icmp6); break;
    case wire::FrameClass::RoceV2:
    case wire::FrameClass::OtherIPv4:
    case wire::FrameClass::OtherIPv6:
    case wire::FrameClass::OtherEther:
    case wire::FrameClass::Malformed:
      break;
  }
  const uint8_t* f = rte_pktmbuf_mtod(m, const uint8_t*);
  rte_mbuf* reply = cfg_.answer_host ? alloc() : nullptr;
  uint8_t* out = reply ? rte_pktmbuf_mtod(reply, uint8_t*) : nullptr;
  const size_t cap = reply ? rte_pktmbuf_tailroom(reply) : 0;
  const HostAction act = handle_host_frame({f, m->data_len}, pi, cfg_.local, reply != nullptr, out, cap);
  if (act.learned) neigh_.learn(act.learned->ip, act.learned->mac, act.learned->solicited, now_ns_);
  using Kind = HostAction::Kind;
  if (act.reply_len && reply) {
    set_frame_len(reply, act.reply_len);
    switch (act.kind) {
      case Kind::ArpRequest: ctr_.inc(EngineCtr::tx_arp_reply); break;
      case Kind::IcmpEcho: ctr_.inc(EngineCtr::tx_icmp_reply); break;
      case Kind::NdSolicit: ctr_.inc(EngineCtr::tx_nd_advert); break;
      case Kind::Icmp6Echo: ctr_.inc(EngineCtr::tx_icmp6_reply); break;
      case Kind::None: case Kind::ArpReply: case Kind::NdAdvert: case Kind::NotForUs: case Kind::Ignored:
        break;
    }
    send(reply);
  } else {
    if (reply) rte_pktmbuf_free(reply);
    if (act.kind == Kind::NotForUs || act.kind == Kind::Ignored) ctr_.inc(EngineCtr::drop_host_ignored);
  }
  rte_pktmbuf_free(m);
}

// ---- transmit -------------------------------------------------------------------

rte_mbuf* Engine::alloc() noexcept {
  rte_mbuf* m = rte_pktmbuf_alloc(port_.pool());
  if (!m) ctr_.inc(EngineCtr::drop_no_mbuf);
  return m;
}

void Engine::send(rte_mbuf* m, TxKind kind) noexcept {
  UROCE_ASSERT_ENGINE(*this);
  tx_.push_back(m);  // capacity reserved: 2 * tx_batch
  tx_kind_.push_back(kind);
  if (tx_.size() >= cfg_.tx_batch) flush_tx_keeping(true);
}

bool Engine::send_to(const IpAddr& dst, rte_mbuf* m, TxKind kind) noexcept {
  UROCE_ASSERT_ENGINE(*this);
  if (worker()) return send_to_worker(dst, m, nullptr, kind);
  if (cfg_.local.owns(dst)) {
    if (!cfg_.port_loopback) return loop_back(m);
    send_to_mac(m, cfg_.local.mac, kind);
    return true;
  }
  if (const wire::MacAddr* mac = neigh_.lookup(dst, now_ns_)) {  // resolved: no queue, its kind kept
    send_to_mac(m, *mac, kind);
    return true;
  }
  return neigh_.send(dst, m, now_ns_);  // queued until it resolves (or refused)
}

bool Engine::send_to(const IpAddr& dst, rte_mbuf* m, NextHop& hop, TxKind kind) noexcept {
  UROCE_ASSERT_ENGINE(*this);
  if (worker()) return send_to_worker(dst, m, &hop, kind);
  if (hop.generation != neigh_.generation() || hop.ip != dst.bytes) {
    if (cfg_.local.owns(dst)) {  // our own addresses do not change while the engine runs
      hop = NextHop{neigh_.generation(), dst.bytes, {}, true};
    } else if (const wire::MacAddr* mac = neigh_.lookup(dst, now_ns_)) {
      hop = NextHop{neigh_.generation(), dst.bytes, *mac, false};
    } else {
      return neigh_.send(dst, m, now_ns_);  // unresolved: queued (or refused) there
    }
  }
  if (hop.loopback) {
    if (!cfg_.port_loopback) return loop_back(m);
    send_to_mac(m, cfg_.local.mac, kind);
    return true;
  }
  send_to_mac(m, hop.mac, kind);
  return true;
}

// A worker lcore's send_to: the neighbour table is lcore 0's.  A path's
// NextHop stays good while lcore 0's table keeps its generation; a
// destination the table has a MAC for (NeighTable::peek) fills it; any
// other frame goes to lcore 0, which resolves, queues or drops it as its
// own send_to does.
bool Engine::send_to_worker(const IpAddr& dst, rte_mbuf* m, NextHop* hop, TxKind kind) noexcept {
  if (cfg_.local.owns(dst)) {
    if (!cfg_.port_loopback) return loop_back(m);
    send_to_mac(m, cfg_.local.mac, kind);
    return true;
  }
  NeighTable& table = group_->engine(0).neigh_;
  const uint64_t gen = table.generation();
  if (hop != nullptr && hop->generation == gen && hop->ip == dst.bytes && !hop->loopback) {
    send_to_mac(m, hop->mac, kind);
    return true;
  }
  bool failed = false;
  if (const std::optional<wire::MacAddr> mac = table.peek(dst, &failed)) {
    if (hop != nullptr) *hop = NextHop{gen, dst.bytes, *mac, false};
    send_to_mac(m, *mac, kind);
    return true;
  }
  // Known unreachable: refused at once, as lcore 0's table refuses it.
  if (!failed && group_->send_via_control(dst, m, kind)) return true;
  ctr_.inc(EngineCtr::drop_neigh);
  rte_pktmbuf_free(m);
  return false;
}

void Engine::send_to_mac(rte_mbuf* m, const wire::MacAddr& mac, TxKind kind) noexcept {
  wire::Eth(rte_pktmbuf_mtod(m, uint8_t*)).set_dst(mac);
  send(m, kind);
}

// Loopback (rxe's rxe_loopback, hardware's internal loopback): a frame to
// our own address goes to our own receive path, addressed to our MAC, on
// the loop's next turn (never inside the send: the sender may be the
// responder or the completer in the middle of a packet).
bool Engine::loop_back(rte_mbuf* m) noexcept {
  UROCE_ASSERT_ENGINE(*this);
  if (loop_.size() == loop_.capacity()) {
    ctr_.inc(EngineCtr::drop_loopback_full);
    rte_pktmbuf_free(m);
    return false;
  }
  wire::Eth(rte_pktmbuf_mtod(m, uint8_t*)).set_dst(cfg_.local.mac);
  loop_.push_back(m);
  ctr_.inc(EngineCtr::loopback);
  return true;
}

void Engine::send_multicast(const wire::Ipv6Addr& mgid, rte_mbuf* m) noexcept {
  UROCE_ASSERT_ENGINE(*this);
  if (!cfg_.port_loopback && sink_ != nullptr && sink_->mcast_member(mgid)) {
    if (rte_mbuf* copy = rte_pktmbuf_copy(m, port_.pool(), 0, UINT32_MAX); copy != nullptr) {
      loop_back(copy);
    } else {
      ctr_.inc(EngineCtr::drop_no_mbuf);
    }
  }
  send(m);
}

// [engine] Receives the frames looped back since the last turn; what they
// cause (ACKs, responses) is looped on the following turn.
unsigned Engine::drain_loopback() {
  UROCE_ASSERT_ENGINE(*this);
  if (loop_.empty()) return 0;
  loop_rx_.swap(loop_);
  // In bursts of rx_burst, as from the port (roce_ holds one burst).
  const size_t n = loop_rx_.size();
  for (size_t at = 0; at < n;) {
    const auto k = static_cast<uint16_t>(std::min<size_t>(n - at, std::max<uint16_t>(cfg_.rx_burst, 1)));
    handle_rx(loop_rx_.data() + at, k, true);
    at += k;
  }
  loop_rx_.clear();
  return static_cast<unsigned>(n);
}

void Engine::flush_tx() noexcept { flush_tx_keeping(false); }

// `keep_acks` (a flush in the middle of a turn, send() at tx_batch): held
// ACKs that requests joined stay queued behind those requests, for the
// turn's last flush.  A long message spans several flushes; its peer, which
// returns from its CQ poll on our ACK, then has every packet of the message
// before it, not all but the last (ib_write_lat 64 KiB waited for the
// peer's engine thread for the rest: ~2 ms, a scheduler slice).
void Engine::flush_tx_keeping(bool keep_acks) noexcept {
  UROCE_ASSERT_ENGINE(*this);
  if (tx_.empty()) return;
  const size_t tail = requests_before_held_acks() && keep_acks ? tx_acks_ : 0;  // the ACKs now at the end
  const size_t out = tx_.size() - tail;
  if (capture_.is_open()) {
    const uint64_t rt = realtime_ns();
    for (size_t i = tx_captured_; i < out; ++i) capture_.write(tx_[i], rt);
  }
  uint64_t bytes = 0;
  for (size_t i = 0; i < out; ++i) bytes += tx_[i]->pkt_len;
  const uint16_t n = static_cast<uint16_t>(out);
  ++tx_gen_;  // no frame queued so far may be rewritten: the port has it, or it is kept and captured
  const uint16_t sent = port_.tx_burst(tx_.data(), n);
  if (sent != 0) UROCE_STAMP(Sent);
  // What the port refused waits for the next flush, the oldest first;
  // beyond tx_batch frames it is dropped.
  const uint16_t keep = static_cast<uint16_t>(std::min<uint32_t>(n - sent, cfg_.tx_batch));
  for (uint16_t i = sent; i < n; ++i) bytes -= tx_[i]->pkt_len;
  for (uint16_t i = static_cast<uint16_t>(sent + keep); i < n; ++i) rte_pktmbuf_free(tx_[i]);
  tx_acks_ = keep == 0 ? tail : 0;  // the held ACKs lead the queue again, unless refused frames do
  if (tail == 0) ack_hold_since_ = 0;  // else the held ACKs' hold goes on
  if (n - sent > keep) ctr_.add(EngineCtr::drop_tx_full, n - sent - keep);
  if (keep != 0) ctr_.add(EngineCtr::tx_deferred, keep);
  ctr_.add(EngineCtr::tx_frames, sent);
  ctr_.add(EngineCtr::tx_bytes, bytes);
  if (sent != 0) ctr_.inc(EngineCtr::tx_bursts);
  // Kept frames first (captured), then the held ACKs (not yet).
  std::copy(tx_.begin() + sent, tx_.begin() + sent + keep, tx_.begin());
  std::copy(tx_.begin() + static_cast<std::ptrdiff_t>(out), tx_.end(), tx_.begin() + keep);
  tx_.resize(keep + tail);
  std::copy(tx_kind_.begin() + sent, tx_kind_.begin() + sent + keep, tx_kind_.begin());
  std::copy(tx_kind_.begin() + static_cast<std::ptrdiff_t>(out), tx_kind_.end(), tx_kind_.begin() + keep);
  tx_kind_.resize(keep + tail);
  tx_stalled_ = keep != 0;
  tx_captured_ = keep;
}

bool Engine::drain_tx(uint64_t max_ns) noexcept {
  UROCE_ASSERT_ENGINE(*this);
  flush_tx();
  if (!tx_stalled_) return true;
  const uint64_t until = steady_ns() + max_ns;
  while (tx_stalled_ && static_cast<int64_t>(until - steady_ns()) > 0) {
    sched_yield();
    flush_tx();
  }
  return !tx_stalled_;
}

void Engine::set_frame_len(rte_mbuf* m, size_t len) noexcept {
  m->data_len = static_cast<uint16_t>(len);
  m->pkt_len = static_cast<uint32_t>(len);
}

bool Engine::send_built(EngineCtr ctr, const std::function<size_t(uint8_t*)>& build) {
  rte_mbuf* m = alloc();
  if (!m) return false;
  set_frame_len(m, build(rte_pktmbuf_mtod(m, uint8_t*)));
  ctr_.inc(ctr);
  send(m);
  return true;
}

void Engine::send_neigh_request(const IpAddr& ip) {
  const auto src = cfg_.local.source_for(ip);
  if (!src) return;  // no address of that family: the request times out
  if (cfg_.kernel_neigh) {
    // Learned on the next iteration, not from inside the table's probe.
    if (const auto mac = cfg_.kernel_neigh(ip)) kernel_learned_.emplace_back(ip, *mac);
  }
  if (ip.is_v4()) {
    send_built(EngineCtr::tx_arp_request, [&](uint8_t* out) { return build_arp_request(out, cfg_.local, *src, ip); });
  } else {
    send_built(EngineCtr::tx_nd_solicit,
               [&](uint8_t* out) { return build_neighbor_solicit(out, cfg_.local, *src, ip); });
  }
}

void Engine::announce() {
  for (const IpAddr& ip : cfg_.local.ips) {
    const bool sent =
        ip.is_v4()
            ? send_built(EngineCtr::tx_arp_request,
                         [&](uint8_t* out) { return build_gratuitous_arp(out, cfg_.local, ip); })
            : send_built(EngineCtr::tx_nd_advert,
                         [&](uint8_t* out) { return build_unsolicited_na(out, cfg_.local, ip); });
    if (!sent) return;
  }
}

void Engine::for_each_counter(const std::function<void(std::string_view, std::string_view, uint64_t)>& f) const {
  // The device's figures: with several lcores, every lcore's (total).
  for (size_t i = 0; i < EngineCounters::size(); ++i)
    f(EngineCounters::info(i).name, EngineCounters::info(i).help, total(static_cast<EngineCtr>(i)));
  progress_.counters().for_each(f);
  for (size_t i = 1; i < wire::kNumParseErrors; ++i) {
    const auto e = static_cast<wire::ParseError>(i);
    f(wire::parse_error_name(e), wire::parse_error_text(e), parse_errors(e));
  }
}

}  // namespace uroce::transport
