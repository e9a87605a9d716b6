// The responder tests' fixture (responder_test.cpp, reorder_test.cpp):
// the responder driven by hand-made request packets (suite 'protocol').
//
// The harness's two nodes share a sim wire; node B is the device under
// test (its engine is polled, its Rnic answers), node A is only a raw
// port: the test writes request frames onto it and reads B's responses
// back from it.  A's engine is never polled after the harness resolved
// the neighbours, so nothing on A answers.
#pragma once

#include <endian.h>
#include <gtest/gtest.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>
#include <thread>
#include <chrono>

#include "tests/common/test_util.hpp"
#include "lib/wire/bth.hpp"
#include "lib/wire/build.hpp"
#include "lib/wire/ext.hpp"
#include "lib/wire/ipv4.hpp"
#include "lib/wire/ipv6.hpp"
#include "lib/wire/udp.hpp"
#include "drivers/sim/sim_wire.hpp"
#include "tests/rnic/harness.hpp"
#include "transport/device.hpp"
#include "transport/engine.hpp"
#include "transport/rnic/rnic.hpp"

// A named namespace, not an anonymous one: both files' TEST_Fs must see one
// Responder type (gtest checks that a test suite's fixture is one class).
namespace uroce::rnic::testing::responder_fixture {

namespace op = wire::op;
using wire::AckType;
using wire::NakCode;

constexpr uint32_t kPeerQpn = 0x4242;
constexpr uint32_t kRqPsn = 0x100;
constexpr uint8_t kAckUnlimited = 0x1F;

constexpr uint8_t nak(NakCode c) { return wire::make_syndrome(AckType::Nak, static_cast<uint8_t>(c)); }

// One response frame B sent, parsed.
struct Resp {
  std::vector<uint8_t> bytes;
  wire::PktInfo pi;

  uint8_t opcode() const { return pi.opcode; }
  uint32_t psn() const { return pi.psn.value(); }
  bool has_aeth() const { return pi.op().has(wire::kHdrAeth); }
  uint8_t syndrome() const { return wire::AethC(bytes.data() + pi.ext_off(wire::kHdrAeth)).syndrome(); }
  uint32_t msn() const { return wire::AethC(bytes.data() + pi.ext_off(wire::kHdrAeth)).msn().value(); }
  uint64_t orig() const { return wire::AtomicAckEthC(bytes.data() + pi.ext_off(wire::kHdrAtomicAckEth)).orig(); }
  std::vector<uint8_t> payload() const {
    return {bytes.begin() + pi.payload_off, bytes.begin() + pi.payload_off + pi.payload_len};
  }
};

inline std::vector<uint8_t> pattern(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  fill_pattern(v, seed);
  return v;
}

// The device under test: one engine + Rnic on a sim port with an IPv4 and
// an IPv6 address; the peer is a bare sim port (raw_peer.hpp's idea, with
// IPv6 as well, for the UD GRH).
class Responder : public ::testing::Test {
 protected:
  static constexpr uint32_t kDutIp4 = kIpA, kPeerIp4 = kIpB;
  static constexpr wire::Ipv6Addr kDutIp6{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  static constexpr wire::Ipv6Addr kPeerIp6{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};

  void SetUp() override {
    wire_ = std::make_unique<drivers::sim::SimWire>();
    auto a = wire_->add_port();
    auto b = wire_->add_port();
    ASSERT_TRUE(a && b);
    dut_port_ = *a;
    peer_port_ = *b;
    transport::EngineConfig c;
    c.local.mac = dut_port_->mac();
    c.local.ips = {transport::IpAddr::v4(kDutIp4), transport::IpAddr::v6(kDutIp6)};
    c.announce = false;
    c.progress = transport::ProgressKind::Inline;
    auto dev = transport::Device::assemble(*dut_port_, "uroce0", std::move(c));
    ASSERT_TRUE(dev) << dev.error().message;
    dev_ = std::move(*dev);
    engine_ = &dev_->engine();
    rnic_ = &dev_->rnic();
    engine_->neighbours().add_static(transport::IpAddr::v4(kPeerIp4), peer_port_->mac());
    engine_->neighbours().add_static(transport::IpAddr::v6(kPeerIp6), peer_port_->mac());
    int err = 0;
    pd_ = rnic_->alloc_pd(&err);
    ASSERT_NE(pd_, nullptr);
    gid4_ = rnic_->find_gid(wire::PktDesc::ipv4_mapped(kDutIp4));
    gid6_ = rnic_->find_gid(kDutIp6);
    ASSERT_GE(gid4_, 0);
    ASSERT_GE(gid6_, 0);
  }
  void TearDown() override {
    dev_.reset();
    drain();
    wire_.reset();
  }

  Rnic& rnic() { return *rnic_; }
  uint64_t ctr(RnicCtr c) { return rnic().counters().get(c); }

  Buffer buffer(size_t len, int access, uint8_t fill = 0) {
    Buffer b;
    b.mem = std::make_unique<uint64_t[]>((len + 7) / 8 + 1);
    b.len = len;
    std::memset(b.mem.get(), fill, ((len + 7) / 8 + 1) * 8);
    int err = 0;
    b.mr = rnic_->reg_mr(pd_, b.data(), len, b.addr(), access, &err);
    EXPECT_NE(b.mr, nullptr) << std::strerror(err);
    return b;
  }
  Cq* cq() {
    int err = 0;
    Cq* c = rnic_->create_cq(256, nullptr, nullptr, 0, &err);
    EXPECT_NE(c, nullptr);
    return c;
  }

  // A QP connected to the peer's (imaginary) QP kPeerQpn; rq_psn as given.
  Qp* make_qp(ibv_qp_type type, ConnOpts o = {}, uint32_t rq_psn = kRqPsn, Srq* srq = nullptr, bool gsi = false) {
    Cq* scq = cq();
    rcq_ = cq();
    ibv_qp_init_attr init{};
    init.send_cq = reinterpret_cast<ibv_cq*>(scq);
    init.recv_cq = reinterpret_cast<ibv_cq*>(rcq_);
    init.srq = reinterpret_cast<ibv_srq*>(srq);
    init.qp_type = type;
    init.cap.max_send_wr = 16;
    init.cap.max_recv_wr = srq ? 0 : 16;
    init.cap.max_send_sge = 4;
    init.cap.max_recv_sge = srq ? 0 : 4;
    int err = 0;
    Qp* q = gsi ? rnic_->create_gsi_qp(pd_, init, &err) : rnic_->create_qp(pd_, init, &err);
    EXPECT_NE(q, nullptr) << std::strerror(err);
    if (q == nullptr) return nullptr;
    ipv6_ = o.ipv6;
    ibv_qp_attr at{};
    at.qp_state = IBV_QPS_INIT;
    at.port_num = kPortNum;
    at.qp_access_flags = o.access;
    at.qkey = kUdQkey;
    int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | (gsi ? 0 : IBV_QP_PORT);  // QP1 has no port attribute (IBA 11.2.5.4)
    mask |= type == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS;
    EXPECT_EQ(q->modify(at, mask), 0);
    at = {};
    at.qp_state = IBV_QPS_RTR;
    mask = IBV_QP_STATE;
    if (type != IBV_QPT_UD) {
      at.path_mtu = o.mtu;
      at.dest_qp_num = kPeerQpn;
      at.rq_psn = rq_psn;
      at.ah_attr.is_global = 1;
      at.ah_attr.port_num = kPortNum;
      at.ah_attr.grh.hop_limit = 64;
      at.ah_attr.grh.sgid_index = static_cast<uint8_t>(o.ipv6 ? gid6_ : gid4_);
      const wire::Ipv6Addr d = o.ipv6 ? kPeerIp6 : wire::PktDesc::ipv4_mapped(kPeerIp4);
      std::memcpy(at.ah_attr.grh.dgid.raw, d.data(), d.size());
      mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
      if (type == IBV_QPT_RC) {
        at.max_dest_rd_atomic = o.max_dest_rd_atomic;
        at.min_rnr_timer = o.min_rnr_timer;
        mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
      }
    }
    EXPECT_EQ(q->modify(at, mask), 0);
    at = {};
    at.qp_state = IBV_QPS_RTS;
    at.sq_psn = 0x777;
    mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if (type == IBV_QPT_RC) {
      at.timeout = 14;
      at.retry_cnt = 7;
      at.rnr_retry = 7;
      at.max_rd_atomic = 1;
      mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    }
    EXPECT_EQ(q->modify(at, mask), 0);
    return q;
  }

  // A request from A to `q`.
  wire::PktDesc req(Qp* q, uint8_t opcode, uint32_t psn, bool ack_req = false) {
    wire::PktDesc d;
    d.eth_src = peer_port_->mac();
    d.eth_dst = dut_port_->mac();
    d.l3 = ipv6_ ? wire::L3::IPv6 : wire::L3::IPv4;
    d.src = ipv6_ ? kPeerIp6 : wire::PktDesc::ipv4_mapped(kPeerIp4);
    d.dst = ipv6_ ? kDutIp6 : wire::PktDesc::ipv4_mapped(kDutIp4);
    d.sport = 0xC123;
    d.opcode = opcode;
    d.dest_qp = q->qpn();
    d.psn = Psn(psn);
    d.ack_req = ack_req;
    return d;
  }
  // A CNP from A's path to `q` as ConnectX sends one (A17.9.3: BECN set,
  // 16 zero bytes).
  wire::PktDesc cnp(Qp* q) {
    wire::PktDesc d = req(q, wire::kCnpOpcode, 0);
    d.resv8a = 0x40;
    d.payload = payloads_.emplace_back(16, 0);
    return d;
  }
  // The descriptor's payload is a copy the fixture keeps for the whole
  // test: a descriptor may be built from a temporary and injected later.
  wire::PktDesc send(Qp* q, uint8_t opcode, uint32_t psn, const std::vector<uint8_t>& data, bool ack_req = false) {
    wire::PktDesc d = req(q, opcode, psn, ack_req);
    d.payload = payloads_.emplace_back(data);
    return d;
  }
  wire::PktDesc write(Qp* q, uint8_t opcode, uint32_t psn, uint64_t va, uint32_t rkey, uint32_t len,
                      const std::vector<uint8_t>& data, bool ack_req = false) {
    wire::PktDesc d = send(q, opcode, psn, data, ack_req);
    d.reth_va = va;
    d.reth_rkey = Rkey(rkey);
    d.reth_len = len;
    return d;
  }
  wire::PktDesc read(Qp* q, uint32_t psn, uint64_t va, uint32_t rkey, uint32_t len) {
    return write(q, op::RC_READ_REQUEST, psn, va, rkey, len, {}, true);
  }
  wire::PktDesc atomic(Qp* q, uint8_t opcode, uint32_t psn, uint64_t va, uint32_t rkey, uint64_t swap_add,
                       uint64_t compare = 0) {
    wire::PktDesc d = req(q, opcode, psn, true);
    d.atomic_va = va;
    d.atomic_rkey = Rkey(rkey);
    d.atomic_swap_add = swap_add;
    d.atomic_compare = compare;
    return d;
  }

  // Put the frame on the wire and let B handle it; returns the frame.
  std::vector<uint8_t> inject(const wire::PktDesc& d) {
    rte_mbuf* m = rte_pktmbuf_alloc(peer_port_->pool());
    EXPECT_NE(m, nullptr);
    if (m == nullptr) return {};
    const size_t n = wire::build({rte_pktmbuf_mtod(m, uint8_t*), rte_pktmbuf_tailroom(m)}, d);
    EXPECT_GT(n, 0u);
    m->data_len = static_cast<uint16_t>(n);
    m->pkt_len = static_cast<uint32_t>(n);
    std::vector<uint8_t> copy(rte_pktmbuf_mtod(m, uint8_t*), rte_pktmbuf_mtod(m, uint8_t*) + n);
    EXPECT_EQ(peer_port_->tx_burst(&m, 1), 1);
    for (int i = 0; i < 4; ++i) engine_->poll();
    return copy;
  }

  // Every RoCE frame B sent to A since the last call.
  // (A long READ response streams over several engine iterations: poll
  // until the wire stays quiet.)
  std::vector<Resp> responses() {
    std::vector<Resp> out;
    rte_mbuf* ms[64];
    uint16_t n;
    for (int quiet = 0; quiet < 3;) {
      engine_->poll();
      ++quiet;
      while ((n = peer_port_->rx_burst(ms, 64)) > 0) {
        quiet = 0;
      for (uint16_t i = 0; i < n; ++i) {
        const uint8_t* p = rte_pktmbuf_mtod(ms[i], const uint8_t*);
        Resp r;
        r.bytes.assign(p, p + ms[i]->data_len);
        r.pi = wire::parse(r.bytes);
        if (r.pi.is_roce()) {
          EXPECT_TRUE(wire::verify_icrc(r.bytes.data(), r.pi));
          EXPECT_EQ(r.pi.dest_qp, Qpn(kPeerQpn));
          out.push_back(std::move(r));
        }
          rte_pktmbuf_free(ms[i]);
        }
      }
    }
    return out;
  }
  void drain() {
    if (peer_port_ == nullptr) return;
    rte_mbuf* ms[64];
    uint16_t n;
    while ((n = peer_port_->rx_burst(ms, 64)) > 0) rte_pktmbuf_free_bulk(ms, n);
  }

  // Exactly one ACK-type response with this syndrome and PSN.
  void expect_ack(uint8_t syndrome, uint32_t psn, int msn = -1) {
    auto rs = responses();
    ASSERT_EQ(rs.size(), 1u);
    EXPECT_EQ(rs[0].opcode(), op::RC_ACK);
    EXPECT_EQ(rs[0].syndrome(), syndrome);
    EXPECT_EQ(rs[0].psn(), psn & Psn::kMask);
    if (msn >= 0) {
      EXPECT_EQ(rs[0].msn(), static_cast<uint32_t>(msn));
    }
  }

  std::vector<ibv_wc> cqes(Cq* cq = nullptr) {
    engine_->poll();
    std::vector<ibv_wc> out;
    ibv_wc wc[16];
    int n;
    while ((n = (cq ? cq : rcq_)->poll(16, wc)) > 0) out.insert(out.end(), wc, wc + n);
    return out;
  }

  std::unique_ptr<drivers::sim::SimWire> wire_;
  drivers::sim::SimPort* dut_port_ = nullptr;
  drivers::sim::SimPort* peer_port_ = nullptr;
  std::unique_ptr<transport::Device> dev_;  // engine and RNIC over dut_port_
  transport::Engine* engine_ = nullptr;
  Rnic* rnic_ = nullptr;
  Pd* pd_ = nullptr;
  int gid4_ = -1, gid6_ = -1;
  Cq* rcq_ = nullptr;
  bool ipv6_ = false;
  std::deque<std::vector<uint8_t>> payloads_;  // what send()/write() descriptors point at (a deque: never moves)
};

constexpr int kRemoteAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_ATOMIC;

}  // namespace uroce::rnic::testing::responder_fixture
