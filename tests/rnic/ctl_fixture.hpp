// The control-path tests' fixture: one device (transport::Device::assemble:
// an engine and its Rnic) on a sim port
// (a second, raw port on the same wire lets a test inject frames), driven
// inline by the test (Engine::poll).  No peer RNIC: these tests are about
// the verbs' control path, not the protocol (the e2e tests do that).
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstring>
#include <memory>
#include <vector>

#include "drivers/sim/sim_wire.hpp"
#include "transport/device.hpp"
#include "transport/engine.hpp"
#include "transport/rnic/rnic.hpp"

namespace uroce::rnic::ctltest {

inline constexpr uint32_t kIp4 = 0x0A000001;  // 10.0.0.1
inline constexpr uint32_t kPeerIp4 = 0x0A000002;
inline const wire::Ipv6Addr kLinkLocal{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
inline const wire::Ipv6Addr kUla{0xfd, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
inline const wire::Ipv6Addr kPeerUla{0xfd, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
inline constexpr wire::MacAddr kPeerMac{0x02, 0x00, 0x00, 0x00, 0x00, 0x02};

inline wire::Ipv6Addr v4_mapped(uint32_t a) {
  return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, static_cast<uint8_t>(a >> 24), static_cast<uint8_t>(a >> 16),
          static_cast<uint8_t>(a >> 8), static_cast<uint8_t>(a)};
}

struct Node {
  std::unique_ptr<drivers::sim::SimWire> wire;
  drivers::sim::SimPort* port = nullptr;
  drivers::sim::SimPort* raw = nullptr;
  std::unique_ptr<transport::Device> dev;  // engine and RNIC over `port`
  transport::Engine* engine = nullptr;
  Rnic* rnic = nullptr;

  explicit Node(uint16_t mtu = drivers::sim::kDefaultSimMtu) {
    wire = std::make_unique<drivers::sim::SimWire>();
    drivers::sim::SimPortConfig pc;
    pc.mtu = mtu;
    auto p = wire->add_port(pc);
    auto r = wire->add_port();
    EXPECT_TRUE(p && r);
    port = *p;
    raw = *r;
    transport::EngineConfig c;
    c.local.mac = port->mac();
    // Link-local after the others: the GID table must still put it first.
    c.local.ips = {transport::IpAddr::v4(kIp4), transport::IpAddr::v6(kUla), transport::IpAddr::v6(kLinkLocal)};
    c.progress = transport::ProgressKind::Inline;
    c.announce = false;
    auto d = transport::Device::assemble(*port, "uroce0", std::move(c));
    EXPECT_TRUE(d) << d.error().message;
    if (!d) return;
    dev = std::move(*d);
    engine = &dev->engine();
    rnic = &dev->rnic();
    // The peer the paths name is known, as on a host whose neighbour table
    // has it: modify_qp resolves a connected QP's next hop before it returns
    // (Rnic::await_neighbour), and nobody here would answer its ARP.
    engine->run_sync([&] {
      engine->neighbours().add_static(transport::IpAddr::v4(kPeerIp4), kPeerMac);
      engine->neighbours().add_static(transport::IpAddr::v6(kPeerUla), kPeerMac);
    });
  }
  ~Node() {
    dev.reset();
    drain_raw();
    wire.reset();
  }
  void drain_raw() {
    rte_mbuf* m[32];
    uint16_t n;
    while ((n = raw->rx_burst(m, 32)) > 0) rte_pktmbuf_free_bulk(m, n);
  }
};

struct Ctl : ::testing::Test {
  std::unique_ptr<Node> node;
  Rnic* rnic = nullptr;
  Pd* pd = nullptr;

  void SetUp() override {
    node = std::make_unique<Node>();
    rnic = node->rnic;
    int err = 0;
    pd = rnic->alloc_pd(&err);
    ASSERT_NE(pd, nullptr);
  }
  void TearDown() override { node.reset(); }

  void poll(int n = 4) {
    for (int i = 0; i < n; ++i) node->engine->poll();
    node->drain_raw();
  }

  Cq* cq(int cqe = 64, CompChannel* ch = nullptr) {
    int err = 0;
    Cq* c = rnic->create_cq(cqe, nullptr, ch, 0, &err);
    EXPECT_NE(c, nullptr) << std::strerror(err);
    return c;
  }

  static ibv_qp_init_attr init_attr(ibv_qp_type type, Cq* scq, Cq* rcq, Srq* srq = nullptr) {
    ibv_qp_init_attr init{};
    init.send_cq = reinterpret_cast<ibv_cq*>(scq);
    init.recv_cq = reinterpret_cast<ibv_cq*>(rcq);
    init.srq = reinterpret_cast<ibv_srq*>(srq);
    init.qp_type = type;
    init.cap.max_send_wr = 8;
    init.cap.max_recv_wr = srq ? 0 : 8;
    init.cap.max_send_sge = 2;
    init.cap.max_recv_sge = srq ? 0 : 2;
    init.cap.max_inline_data = 64;
    return init;
  }

  Qp* qp(ibv_qp_type type, Cq* scq = nullptr, Cq* rcq = nullptr, Srq* srq = nullptr) {
    if (scq == nullptr) scq = cq();
    if (rcq == nullptr) rcq = scq;
    int err = 0;
    Qp* q = rnic->create_qp(pd, init_attr(type, scq, rcq, srq), &err);
    EXPECT_NE(q, nullptr) << std::strerror(err);
    return q;
  }

  ibv_ah_attr ah_attr(bool ipv6 = false) const {
    ibv_ah_attr ah{};
    ah.is_global = 1;
    ah.port_num = 1;
    ah.grh.hop_limit = 64;
    ah.grh.sgid_index = static_cast<uint8_t>(rnic->find_gid(ipv6 ? kUla : v4_mapped(kIp4)));
    const wire::Ipv6Addr d = ipv6 ? kPeerUla : v4_mapped(kPeerIp4);
    std::memcpy(ah.grh.dgid.raw, d.data(), 16);
    return ah;
  }

  // The attributes and masks of each step, as a verbs program sends them.
  static int type_is_ud(const Qp* q) { return q->type() == IBV_QPT_UD || q->is_gsi(); }

  int to_init(Qp* q) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    a.qkey = 0x11111111;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX;
    if (q->is_gsi()) mask |= IBV_QP_QKEY;
    else if (q->type() == IBV_QPT_UD) mask |= IBV_QP_PORT | IBV_QP_QKEY;
    else mask |= IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    return q->modify(a, mask);
  }
  int to_rtr(Qp* q, uint32_t rq_psn = 0x100, uint8_t max_dest_rd = 4) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    int mask = IBV_QP_STATE;
    if (!type_is_ud(q)) {
      a.path_mtu = IBV_MTU_1024;
      a.dest_qp_num = 0x42;
      a.rq_psn = rq_psn;
      a.ah_attr = ah_attr();
      mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
      if (q->type() == IBV_QPT_RC) {
        a.max_dest_rd_atomic = max_dest_rd;
        a.min_rnr_timer = 12;
        mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
      }
    }
    return q->modify(a, mask);
  }
  int to_rts(Qp* q, uint32_t sq_psn = 0x200) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = sq_psn;
    int mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if (q->type() == IBV_QPT_RC && !q->is_gsi()) {
      a.timeout = 14;
      a.retry_cnt = 7;
      a.rnr_retry = 7;
      a.max_rd_atomic = 4;
      mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    }
    return q->modify(a, mask);
  }
  void ready(Qp* q) {
    ASSERT_EQ(to_init(q), 0);
    ASSERT_EQ(to_rtr(q), 0);
    ASSERT_EQ(to_rts(q), 0);
  }
  int modify_state(Qp* q, ibv_qp_state s) {
    ibv_qp_attr a{};
    a.qp_state = s;
    return q->modify(a, IBV_QP_STATE);
  }

  std::vector<ibv_wc> drain(Cq* c) {
    std::vector<ibv_wc> out;
    ibv_wc wc[16];
    int n;
    while ((n = c->poll(16, wc)) > 0) out.insert(out.end(), wc, wc + n);
    return out;
  }

  // The next async event, without blocking (false when none).
  bool next_event(AsyncEvent* ev) {
    const int fl = fcntl(rnic->async_fd(), F_GETFL);
    fcntl(rnic->async_fd(), F_SETFL, fl | O_NONBLOCK);
    return rnic->get_async_event(ev) == 0;
  }
};

}  // namespace uroce::rnic::ctltest
