// A protocol test fixture: ONE engine with its Rnic on a sim port, and a
// raw peer port on the same sim wire that the test drives by hand (eRPC's
// "drive one side with hand-made packets").  The test
//
//   - makes verbs objects on the RNIC (buffer, cq, qp, to_rts, ud_ready),
//   - posts work requests and runs the engine inline (poll, run_for,
//     run_until; the engine's timers run on the real clock, so "advancing
//     time" is polling for that long),
//   - collects what the RNIC emits towards the peer (frames(), wait_frames():
//     RoCEv2 packets parsed by lib/wire, ICRC checked, with accessors),
//   - injects frames built by lib/wire/build.hpp (to_rnic() gives a PktDesc
//     already addressed from the peer to the RNIC; ack(), read_resp(),
//     atomic_ack() build the usual responses; request() the usual requests).
//
// Used by the requester/completer tests and the responder tests.  It
// reuses the end-to-end harness's helpers (Buffer, ConnOpts, post_send,
// send_wr ...) from harness.hpp and its EAL main (main_rnic.cpp).
#pragma once

#include <gtest/gtest.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "drivers/sim/sim_wire.hpp"
#include "lib/wire/build.hpp"
#include "lib/wire/ext.hpp"
#include "lib/wire/pkt.hpp"
#include "lib/wire/udp.hpp"
#include "tests/rnic/harness.hpp"
#include "transport/device.hpp"
#include "transport/engine.hpp"
#include "transport/rnic/rnic.hpp"

namespace uroce::rnic::testing {

// One RoCEv2 frame the RNIC sent to the peer.
struct Frame {
  std::vector<uint8_t> bytes;
  wire::PktInfo info;

  uint8_t opcode() const noexcept { return info.opcode; }
  Psn psn() const noexcept { return info.psn; }
  const wire::OpcodeInfo& op() const noexcept { return info.op(); }
  // The whole description (every header field); its spans point into `bytes`.
  wire::PktDesc desc() const noexcept { return wire::describe(bytes.data(), info); }
  bool ack_req() const noexcept { return desc().ack_req; }
  std::span<const uint8_t> payload() const noexcept { return {bytes.data() + info.payload_off, info.payload_len}; }
  wire::UdpC udp() const noexcept { return wire::UdpC(bytes.data() + info.l4_off); }
  bool icrc_ok() const noexcept { return wire::verify_icrc(bytes.data(), info); }
  std::string name() const { return std::string(op().name); }
};

class RawPeer {
 public:
  static constexpr uint32_t kPeerQpn = 0x00ABCD;

  // `extra_ips`: addresses of the RNIC's besides kIpA (GIDs of its own).
  explicit RawPeer(uint16_t sim_mtu = drivers::sim::kDefaultSimMtu, std::vector<uint32_t> extra_ips = {}) {
    drivers::sim::SimPortConfig pc;
    pc.mtu = sim_mtu;
    auto a = wire_.add_port(pc);
    auto b = wire_.add_port(pc);
    EXPECT_TRUE(a && b);
    if (!a || !b) return;
    port_ = *a;
    peer_ = *b;
    transport::EngineConfig c;
    c.local.mac = port_->mac();
    c.local.ips = {transport::IpAddr::v4(kIpA)};
    for (uint32_t ip : extra_ips) c.local.ips.push_back(transport::IpAddr::v4(ip));
    c.answer_host = true;
    c.announce = false;  // nothing but what the test causes reaches the peer
    c.progress = transport::ProgressKind::Inline;
    c.rx_burst = 128;
    auto dev = transport::Device::assemble(*port_, "uroce0", std::move(c));
    EXPECT_TRUE(dev) << dev.error().message;
    if (!dev) return;
    dev_ = std::move(*dev);
    engine_ = &dev_->engine();
    rnic_ = &dev_->rnic();
    // The IBA's own timers: a test here drives each response by hand, and
    // adaptive retransmission (its own tests turn it on) would resend
    // before a slow machine gets there.
    rnic_->set_adaptive_retransmission(false);
    engine_->neighbours().add_static(transport::IpAddr::v4(kIpB), peer_->mac());
    int err = 0;
    pd_ = rnic_->alloc_pd(&err);
    EXPECT_NE(pd_, nullptr) << "alloc_pd: " << std::strerror(err);
    gid_ = rnic_->find_gid(wire::PktDesc::ipv4_mapped(kIpA));
    EXPECT_GE(gid_, 0) << "no IPv4-mapped GID";
  }
  ~RawPeer() {
    dev_.reset();
    drain();
  }
  RawPeer(const RawPeer&) = delete;
  RawPeer& operator=(const RawPeer&) = delete;

  transport::Engine& engine() noexcept { return *engine_; }
  Rnic& rnic() noexcept { return *rnic_; }
  Pd* pd() noexcept { return pd_; }
  drivers::sim::SimPort& port() noexcept { return *port_; }
  drivers::sim::SimPort& peer() noexcept { return *peer_; }
  drivers::sim::SimWire& wire() noexcept { return wire_; }
  uint64_t ctr(RnicCtr c) const noexcept { return rnic_->counters().get(c); }
  // The RNIC without congestion control: its QPs start with the whole send
  // window (params kInitialUnackedPsns), as tests of the window need.
  // Before any QP exists.
  void cc_off() {
    config::CcConfig none;
    none.mode = config::CcMode::kNone;
    rnic_->set_cc(none);
  }

  // ---- progress ----
  // Engine iterations; frames reaching the peer are collected into frames().
  void poll(unsigned n = 4) {
    for (unsigned i = 0; i < n; ++i) {
      engine_->poll();
      collect();
    }
  }
  void run_for(Duration d) {
    const auto end = Clock::now() + d;
    while (Clock::now() < end) poll(1);
  }
  bool run_until(const std::function<bool()>& done, Duration limit = std::chrono::seconds(5)) {
    const auto end = Clock::now() + limit;
    for (;;) {
      poll(1);
      if (done()) return true;
      if (Clock::now() >= end) return false;
    }
  }

  // ---- what the RNIC sent ----
  // Every RoCEv2 frame collected so far (taken: the list is emptied).
  std::vector<Frame> take() {
    poll();
    std::vector<Frame> out;
    out.swap(frames_);
    return out;
  }
  // Until `n` frames were collected (or the limit); takes them all.
  std::vector<Frame> wait_frames(size_t n, Duration limit = std::chrono::seconds(2)) {
    run_until([&] { return frames_.size() >= n; }, limit);
    return take();
  }
  size_t pending_frames() const noexcept { return frames_.size(); }
  uint64_t non_roce_frames() const noexcept { return non_roce_; }

  // ---- injecting ----
  // A description addressed from the peer (kIpB) to the RNIC (kIpA).
  wire::PktDesc to_rnic(uint8_t opcode, Qpn dest, Psn psn) const {
    wire::PktDesc d;
    d.eth_dst = port_->mac();
    d.eth_src = peer_->mac();
    d.src = wire::PktDesc::ipv4_mapped(kIpB);
    d.dst = wire::PktDesc::ipv4_mapped(kIpA);
    d.sport = 0xC123;
    d.opcode = opcode;
    d.dest_qp = dest;
    d.psn = psn;
    return d;
  }
  void inject(const wire::PktDesc& d, bool then_poll = true) {
    std::vector<uint8_t> buf(16384);
    const size_t n = wire::build(buf, d);
    ASSERT_GT(n, 0u) << "frame does not build";
    inject_bytes({buf.data(), n}, then_poll);
  }
  void inject_bytes(std::span<const uint8_t> f, bool then_poll = true) {
    rte_mbuf* m = rte_pktmbuf_alloc(peer_->pool());
    ASSERT_NE(m, nullptr);
    std::memcpy(rte_pktmbuf_mtod(m, uint8_t*), f.data(), f.size());
    m->data_len = static_cast<uint16_t>(f.size());
    m->pkt_len = static_cast<uint32_t>(f.size());
    ASSERT_EQ(peer_->tx_burst(&m, 1), 1);
    if (then_poll) poll();
  }

  // The usual responses (RC): an ACK/NAK with this syndrome, a READ
  // response packet, an atomic ACK.
  wire::PktDesc ack(Qpn dest, Psn psn, uint8_t syndrome = wire::make_syndrome(wire::AckType::Ack, wire::kAethCreditInvalid),
                    Msn msn = Msn(0)) const {
    wire::PktDesc d = to_rnic(wire::op::RC_ACK, dest, psn);
    d.aeth_syndrome = syndrome;
    d.aeth_msn = msn;
    return d;
  }
  wire::PktDesc nak(Qpn dest, Psn psn, wire::NakCode code) const {
    return ack(dest, psn, wire::make_syndrome(wire::AckType::Nak, static_cast<uint8_t>(code)));
  }
  wire::PktDesc rnr_nak(Qpn dest, Psn psn, uint8_t timer_code) const {
    return ack(dest, psn, wire::make_syndrome(wire::AckType::RnrNak, timer_code));
  }
  wire::PktDesc read_resp(uint8_t opcode, Qpn dest, Psn psn, std::span<const uint8_t> data) const {
    wire::PktDesc d = to_rnic(opcode, dest, psn);
    d.aeth_syndrome = wire::make_syndrome(wire::AckType::Ack, wire::kAethCreditInvalid);
    d.payload = data;
    return d;
  }
  wire::PktDesc atomic_ack(Qpn dest, Psn psn, uint64_t orig) const {
    wire::PktDesc d = to_rnic(wire::op::RC_ATOMIC_ACK, dest, psn);
    d.aeth_syndrome = wire::make_syndrome(wire::AckType::Ack, wire::kAethCreditInvalid);
    d.atomic_ack_orig = orig;
    return d;
  }
  // A request from the peer (for responder tests): payload and AckReq set.
  wire::PktDesc request(uint8_t opcode, Qpn dest, Psn psn, std::span<const uint8_t> data = {},
                        bool ack_req = true) const {
    wire::PktDesc d = to_rnic(opcode, dest, psn);
    d.payload = data;
    d.ack_req = ack_req;
    d.deth_src_qp = Qpn(kPeerQpn);
    return d;
  }

  // ---- verbs objects on the RNIC ----
  Buffer buffer(size_t len, int access = IBV_ACCESS_LOCAL_WRITE, uint8_t fill = 0) {
    Buffer b;
    const size_t words = (len + 7) / 8 + 1;
    b.mem = std::make_unique<uint64_t[]>(words);
    b.len = len;
    std::memset(b.mem.get(), fill, words * 8);
    int err = 0;
    b.mr = rnic_->reg_mr(pd_, b.data(), len, b.addr(), access, &err);
    EXPECT_NE(b.mr, nullptr) << "reg_mr(" << len << "): " << std::strerror(err);
    return b;
  }
  Cq* cq(int cqe = 1024) {
    int err = 0;
    Cq* c = rnic_->create_cq(cqe, nullptr, nullptr, 0, &err);
    EXPECT_NE(c, nullptr) << "create_cq: " << std::strerror(err);
    return c;
  }
  Qp* qp(ibv_qp_type type, Cq* scq, Cq* rcq, const QpCaps& caps = {}, bool sig_all = false) {
    ibv_qp_init_attr init{};
    init.send_cq = reinterpret_cast<ibv_cq*>(scq);
    init.recv_cq = reinterpret_cast<ibv_cq*>(rcq);
    init.qp_type = type;
    init.cap.max_send_wr = caps.max_send_wr;
    init.cap.max_recv_wr = caps.max_recv_wr;
    init.cap.max_send_sge = caps.max_send_sge;
    init.cap.max_recv_sge = caps.max_recv_sge;
    init.cap.max_inline_data = caps.max_inline_data;
    init.sq_sig_all = sig_all ? 1 : 0;
    int err = 0;
    Qp* q = rnic_->create_qp(pd_, init, &err);
    EXPECT_NE(q, nullptr) << "create_qp: " << std::strerror(err);
    return q;
  }
  // The path from the RNIC to the peer.
  ibv_ah_attr ah_attr() const {
    ibv_ah_attr ah{};
    ah.is_global = 1;
    ah.port_num = kPortNum;
    ah.grh.hop_limit = 64;
    ah.grh.sgid_index = static_cast<uint8_t>(gid_);
    const wire::Ipv6Addr d = wire::PktDesc::ipv4_mapped(kIpB);
    std::memcpy(ah.grh.dgid.raw, d.data(), d.size());
    return ah;
  }
  Ah* ah() {
    int err = 0;
    Ah* h = rnic_->create_ah(pd_, ah_attr(), &err);
    EXPECT_NE(h, nullptr) << "create_ah: " << std::strerror(err);
    return h;
  }
  // RESET -> INIT -> RTR -> RTS of an RC/UC QP connected to the peer's kPeerQpn.
  int to_rts(Qp* q, uint32_t sq_psn, uint32_t rq_psn, const ConnOpts& o = {}) {
    return qp_to_rts(q, ah_attr(), kPeerQpn, sq_psn, rq_psn, o);
  }
  int ud_ready(Qp* q, uint32_t qkey = kUdQkey, uint32_t sq_psn = 0) { return qp_ud_ready(q, qkey, sq_psn); }

  // ---- completions ----
  std::vector<ibv_wc> poll_cq(Cq* c) {
    poll();
    std::vector<ibv_wc> out;
    ibv_wc wc[32];
    for (;;) {
      const int n = c->poll(32, wc);
      if (n <= 0) break;
      out.insert(out.end(), wc, wc + n);
    }
    return out;
  }
  std::vector<ibv_wc> wait_wcs(Cq* c, size_t n, Duration limit = std::chrono::seconds(2)) {
    std::vector<ibv_wc> out;
    const auto end = Clock::now() + limit;
    ibv_wc wc[32];
    while (out.size() < n) {
      poll(1);
      const int got = c->poll(static_cast<int>(std::min<size_t>(32, n - out.size())), wc);
      if (got > 0) out.insert(out.end(), wc, wc + got);
      if (got <= 0 && Clock::now() >= end) break;
    }
    return out;
  }

 private:
  void collect() {
    rte_mbuf* m[64];
    uint16_t n;
    while ((n = peer_->rx_burst(m, 64)) > 0) {
      for (uint16_t i = 0; i < n; ++i) {
        const uint8_t* p = rte_pktmbuf_mtod(m[i], const uint8_t*);
        Frame f;
        f.bytes.assign(p, p + m[i]->data_len);
        f.info = wire::parse(f.bytes);
        if (f.info.is_roce()) {
          frames_.push_back(std::move(f));
        } else {
          ++non_roce_;
        }
        rte_pktmbuf_free(m[i]);
      }
    }
  }
  void drain() {
    if (peer_ == nullptr) return;
    rte_mbuf* m[64];
    uint16_t n;
    while ((n = peer_->rx_burst(m, 64)) > 0) rte_pktmbuf_free_bulk(m, n);
  }

  drivers::sim::SimWire wire_;
  drivers::sim::SimPort* port_ = nullptr;
  drivers::sim::SimPort* peer_ = nullptr;
  std::unique_ptr<transport::Device> dev_;  // engine and RNIC over port_
  transport::Engine* engine_ = nullptr;
  Rnic* rnic_ = nullptr;
  Pd* pd_ = nullptr;
  int gid_ = -1;
  std::vector<Frame> frames_;
  uint64_t non_roce_ = 0;
};

}  // namespace uroce::rnic::testing
