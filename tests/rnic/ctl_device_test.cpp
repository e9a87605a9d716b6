// Device and port attributes, the GID table, the P_Key table, the GSI QP,
// QPN allocation, and the RoCE sink's dispatch by QP state.
#include <endian.h>

#include "tests/common/test_util.hpp"
#include "lib/wire/build.hpp"
#include "tests/rnic/ctl_fixture.hpp"
#include "transport/rnic/tx.hpp"

namespace uroce::rnic::ctltest {
namespace {

TEST_F(Ctl, DeviceAttributesAreTheLimits) {
  const ibv_device_attr& a = rnic->device_attr();
  EXPECT_EQ(static_cast<uint32_t>(a.max_qp_wr), kMaxQpWr);
  EXPECT_EQ(static_cast<uint32_t>(a.max_sge), kMaxSge);
  EXPECT_EQ(static_cast<uint32_t>(a.max_cqe), kMaxCqe);
  EXPECT_EQ(static_cast<uint32_t>(a.max_qp_rd_atom), kMaxQpRdAtom);
  EXPECT_EQ(static_cast<uint32_t>(a.max_srq_wr), kMaxSrqWr);
  EXPECT_EQ(a.atomic_cap, IBV_ATOMIC_HCA);
  EXPECT_EQ(a.phys_port_cnt, 1);
  EXPECT_EQ(a.max_pkeys, 1);
  EXPECT_EQ(a.vendor_id, kVendorId);
  EXPECT_NE(a.device_cap_flags & IBV_DEVICE_RC_RNR_NAK_GEN, 0u);
  EXPECT_NE(a.device_cap_flags & IBV_DEVICE_SRQ_RESIZE, 0u);
  EXPECT_STRNE(a.fw_ver, "");
  // EUI-64 of 02:00:00:00:00:01: the U/L bit flipped, ff:fe in the middle.
  EXPECT_EQ(rnic->node_guid(), 0x000000fffe000001ull);
  EXPECT_EQ(a.node_guid, htobe64(0x000000fffe000001ull));

  // What is reported is what is enforced.
  Cq* c = cq();
  int err = 0;
  ibv_qp_init_attr init = init_attr(IBV_QPT_RC, c, c);
  init.cap.max_send_wr = static_cast<uint32_t>(a.max_qp_wr);
  init.cap.max_send_sge = static_cast<uint32_t>(a.max_sge);
  init.cap.max_inline_data = kMaxInlineData;
  Qp* q = rnic->create_qp(pd, init, &err);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->cap().max_send_wr, kMaxQpWr);
  for (auto bump : {&ibv_qp_cap::max_send_wr, &ibv_qp_cap::max_recv_wr, &ibv_qp_cap::max_send_sge,
                    &ibv_qp_cap::max_recv_sge, &ibv_qp_cap::max_inline_data}) {
    ibv_qp_init_attr over = init_attr(IBV_QPT_RC, c, c);
    over.cap.*bump = (bump == &ibv_qp_cap::max_inline_data ? kMaxInlineData
                      : (bump == &ibv_qp_cap::max_send_wr || bump == &ibv_qp_cap::max_recv_wr) ? kMaxQpWr
                                                                                                 : kMaxSge) +
                     1;
    err = 0;
    EXPECT_EQ(rnic->create_qp(pd, over, &err), nullptr);
    EXPECT_EQ(err, EINVAL);
  }
  err = 0;
  EXPECT_EQ(rnic->create_cq(static_cast<int>(kMaxCqe) + 1, nullptr, nullptr, 0, &err), nullptr);
  EXPECT_EQ(err, EINVAL);
  EXPECT_EQ(rnic->create_cq(0, nullptr, nullptr, 0, &err), nullptr);
  EXPECT_EQ(err, EINVAL);
  EXPECT_EQ(rnic->create_cq(4, nullptr, nullptr, 1, &err), nullptr);  // one completion vector
  EXPECT_EQ(err, EINVAL);
  Cq* big = rnic->create_cq(static_cast<int>(kMaxCqe), nullptr, nullptr, 0, &err);
  EXPECT_NE(big, nullptr);
}

TEST_F(Ctl, PortAttributes) {
  ibv_port_attr p{};
  ASSERT_EQ(rnic->query_port(1, &p), 0);
  EXPECT_EQ(p.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(p.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(p.phys_state, 5);
  EXPECT_EQ(p.max_mtu, IBV_MTU_4096);
  EXPECT_EQ(p.active_mtu, IBV_MTU_4096);  // a 9000-byte sim port
  EXPECT_EQ(p.gid_tbl_len, static_cast<int>(kMaxGid));
  EXPECT_EQ(p.pkey_tbl_len, 1);
  EXPECT_EQ(p.lid, 0);
  EXPECT_EQ(p.max_msg_sz, kMaxMsgSize);
  EXPECT_NE(p.active_width, 0);
  EXPECT_NE(p.active_speed, 0);
  EXPECT_EQ(rnic->query_port(2, &p), EINVAL);

  node->wire->set_link_up(*node->port, false);
  ASSERT_EQ(rnic->query_port(1, &p), 0);
  EXPECT_EQ(p.state, IBV_PORT_DOWN);
  EXPECT_NE(p.phys_state, 5);
}

TEST(CtlMtu, ActiveMtuFromTheEthernetMtu) {
  // rxe: the Ethernet MTU less the RoCEv2 headers, then the largest IB MTU that fits.
  const std::pair<uint16_t, ibv_mtu> cases[] = {
      {1500, IBV_MTU_1024}, {9000, IBV_MTU_4096}, {2200, IBV_MTU_2048}, {1104, IBV_MTU_1024}, {1103, IBV_MTU_512}, {300, IBV_MTU_256}};
  for (const auto& [eth, want] : cases) {
    Node n(eth);
    ibv_port_attr p{};
    ASSERT_EQ(n.rnic->query_port(1, &p), 0);
    EXPECT_EQ(p.active_mtu, want) << "Ethernet MTU " << eth;
  }
}

TEST_F(Ctl, GidTable) {
  // The IPv6 link-local address first, then the addresses in order.
  ASSERT_EQ(rnic->gid_count(), 3u);
  ibv_gid g{};
  ASSERT_EQ(rnic->query_gid(1, 0, &g), 0);
  EXPECT_EQ(std::memcmp(g.raw, kLinkLocal.data(), 16), 0);
  ASSERT_EQ(rnic->query_gid(1, 1, &g), 0);
  EXPECT_EQ(std::memcmp(g.raw, v4_mapped(kIp4).data(), 16), 0);
  ASSERT_EQ(rnic->query_gid(1, 2, &g), 0);
  EXPECT_EQ(std::memcmp(g.raw, kUla.data(), 16), 0);
  ASSERT_EQ(rnic->query_gid(1, 5, &g), 0);  // an empty entry reads as zeros
  EXPECT_EQ(g.global.subnet_prefix | g.global.interface_id, 0u);
  EXPECT_EQ(rnic->query_gid(1, static_cast<int>(kMaxGid), &g), EINVAL);
  EXPECT_EQ(rnic->query_gid(1, -1, &g), EINVAL);
  EXPECT_EQ(rnic->query_gid(0, 0, &g), EINVAL);
  int type = -1;
  ASSERT_EQ(rnic->query_gid_type(1, 1, &type), 0);
  EXPECT_EQ(type, IBV_GID_TYPE_ROCE_V2);
  EXPECT_EQ(rnic->query_gid_type(1, 3, &type), EINVAL);
  EXPECT_EQ(rnic->find_gid(kUla), 2);
  EXPECT_EQ(rnic->find_gid(kPeerUla), -1);

  uint16_t pkey = 0;
  ASSERT_EQ(rnic->query_pkey(1, 0, &pkey), 0);
  EXPECT_EQ(pkey, 0xFFFF);
  EXPECT_EQ(rnic->query_pkey(1, 1, &pkey), EINVAL);
}

TEST_F(Ctl, ResolvePath) {
  AhAttr p;
  ibv_ah_attr a = ah_attr();
  a.grh.traffic_class = 0x68;
  a.grh.flow_label = 0x12345;
  a.grh.hop_limit = 0;
  ASSERT_EQ(rnic->resolve_path(a, &p), 0);
  EXPECT_TRUE(p.ipv4);
  EXPECT_EQ(p.sgid, v4_mapped(kIp4));
  EXPECT_EQ(p.dgid, v4_mapped(kPeerIp4));
  EXPECT_EQ(p.traffic_class, 0x68);
  EXPECT_EQ(p.flow_label, 0x12345u);
  EXPECT_EQ(p.hop_limit, 64);  // 0: the default
  a.grh.hop_limit = 1;         // ibv_rc_pingpong's: the route's wins, as on Linux
  ASSERT_EQ(rnic->resolve_path(a, &p), 0);
  EXPECT_EQ(p.hop_limit, 64);
  ASSERT_EQ(rnic->resolve_path(ah_attr(true), &p), 0);
  EXPECT_FALSE(p.ipv4);
  EXPECT_EQ(p.sgid, kUla);

  ibv_ah_attr bad = ah_attr();
  bad.is_global = 0;  // RoCE needs the GRH
  EXPECT_EQ(rnic->resolve_path(bad, &p), EINVAL);
  bad = ah_attr();
  bad.grh.sgid_index = 3;  // past the table
  EXPECT_EQ(rnic->resolve_path(bad, &p), EINVAL);
  bad = ah_attr();
  std::memcpy(bad.grh.dgid.raw, kPeerUla.data(), 16);  // IPv4 source, IPv6 destination
  EXPECT_EQ(rnic->resolve_path(bad, &p), EINVAL);
  bad = ah_attr();
  bad.port_num = 2;
  EXPECT_EQ(rnic->resolve_path(bad, &p), EINVAL);

  // tx_fill_path puts the path on the wire.
  ibv_ah_attr a6 = ah_attr(true);
  a6.grh.traffic_class = 0x10;
  a6.grh.flow_label = 0xABCDE;
  ASSERT_EQ(rnic->resolve_path(a6, &p), 0);
  wire::PktDesc d;
  tx_fill_path(*node->engine, p, 0xC123, d);
  EXPECT_EQ(d.l3, wire::L3::IPv6);
  EXPECT_EQ(d.src, kUla);
  EXPECT_EQ(d.dst, kPeerUla);
  EXPECT_EQ(d.tos, 0x10);
  EXPECT_EQ(d.flow_label, 0xABCDEu);
  EXPECT_EQ(d.ttl, 64);
  EXPECT_EQ(d.sport, 0xC123);
  EXPECT_EQ(d.pkey, kDefaultPkey);
  EXPECT_EQ(d.eth_src, node->port->mac());
  ASSERT_EQ(rnic->resolve_path(ah_attr(), &p), 0);
  tx_fill_path(*node->engine, p, 0xC000, d);
  EXPECT_EQ(d.l3, wire::L3::IPv4);
}

TEST_F(Ctl, AddressHandles) {
  int err = 0;
  Ah* ah = rnic->create_ah(pd, ah_attr(), &err);
  ASSERT_NE(ah, nullptr);
  EXPECT_EQ(ah->pd, pd);
  EXPECT_EQ(Ah::from_ibv(&ah->ibv), ah);
  ibv_ah_attr bad = ah_attr();
  bad.is_global = 0;
  EXPECT_EQ(rnic->create_ah(pd, bad, &err), nullptr);
  EXPECT_EQ(err, EINVAL);
  EXPECT_EQ(rnic->create_ah(nullptr, ah_attr(), &err), nullptr);
  EXPECT_EQ(err, EINVAL);
  EXPECT_EQ(rnic->dealloc_pd(pd), EBUSY);
  EXPECT_EQ(rnic->destroy_ah(ah), 0);
  EXPECT_EQ(rnic->dealloc_pd(pd), 0);
}

TEST_F(Ctl, QpnsAndGsi) {
  Cq* c = cq();
  std::vector<Qp*> qps;
  for (int i = 0; i < 4; ++i) qps.push_back(qp(IBV_QPT_RC, c, c));
  for (size_t i = 0; i < qps.size(); ++i) {
    EXPECT_GE(qps[i]->qpn().value(), 2u);
    EXPECT_LT(qps[i]->qpn().value(), kMaxQp);
    EXPECT_EQ(test::in_loop(rnic->engine(), [&] { return rnic->qp_by_num(qps[i]->qpn()); }), qps[i]);
    EXPECT_GE(qps[i]->attrs().sport, 0xC000);
    for (size_t j = 0; j < i; ++j) EXPECT_NE(qps[i]->qpn(), qps[j]->qpn());
  }
  const Qpn gone = qps[1]->qpn();
  ASSERT_EQ(rnic->destroy_qp(qps[1]), 0);
  EXPECT_EQ(test::in_loop(rnic->engine(), [&] { return rnic->qp_by_num(gone); }), nullptr);
  Qp* again = qp(IBV_QPT_UC, c, c);
  EXPECT_NE(again->qpn(), gone);  // round robin: not handed out again at once

  int err = 0;
  Qp* gsi = rnic->create_gsi_qp(pd, init_attr(IBV_QPT_UD, c, c), &err);
  ASSERT_NE(gsi, nullptr);
  EXPECT_EQ(gsi->qpn(), kQp1);
  EXPECT_TRUE(gsi->is_gsi());
  EXPECT_EQ(gsi->attrs().qkey, kGsiQkey);
  EXPECT_EQ(rnic->create_gsi_qp(pd, init_attr(IBV_QPT_UD, c, c), &err), nullptr);
  EXPECT_EQ(err, EBUSY);
  // GSI RESET->INIT: P_Key index and Q_Key, no port (the kernel's table).
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qkey = kGsiQkey;
  EXPECT_EQ(gsi->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_QKEY | IBV_QP_PORT), EINVAL);
  EXPECT_EQ(gsi->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_QKEY), 0);
  EXPECT_EQ(gsi->state(), IBV_QPS_INIT);

  // A QP type verbs knows and this device does not do: EOPNOTSUPP (as
  // rxe; rdma-core's tests skip on it); an unknown one: EINVAL.
  for (const ibv_qp_type t : {IBV_QPT_RAW_PACKET, IBV_QPT_DRIVER}) {
    ibv_qp_init_attr other = init_attr(IBV_QPT_RC, c, c);
    other.qp_type = t;
    EXPECT_EQ(rnic->create_qp(pd, other, &err), nullptr);
    EXPECT_EQ(err, EOPNOTSUPP) << t;
  }
  // XRC: a send QP needs a PD and a send CQ, its receive side is not read;
  // a receive QP needs its domain.
  ibv_qp_init_attr xrc_send = init_attr(IBV_QPT_XRC_SEND, c, nullptr);
  Qp* xs = rnic->create_qp(pd, xrc_send, &err);
  ASSERT_NE(xs, nullptr);
  EXPECT_EQ(xs->recv_cq(), nullptr);
  EXPECT_EQ(rnic->destroy_qp(xs), 0);
  EXPECT_EQ(rnic->create_qp(nullptr, xrc_send, &err), nullptr);
  EXPECT_EQ(err, EINVAL);
  ibv_qp_init_attr xrc_recv = init_attr(IBV_QPT_XRC_RECV, nullptr, nullptr);
  EXPECT_EQ(rnic->create_qp(nullptr, xrc_recv, &err), nullptr);
  EXPECT_EQ(err, EINVAL) << "no domain";
  ibv_qp_init_attr unknown = init_attr(IBV_QPT_RC, c, c);
  unknown.qp_type = static_cast<ibv_qp_type>(0x77);
  EXPECT_EQ(rnic->create_qp(pd, unknown, &err), nullptr);
  EXPECT_EQ(err, EINVAL);
  ibv_qp_init_attr nocq = init_attr(IBV_QPT_RC, c, nullptr);
  EXPECT_EQ(rnic->create_qp(pd, nocq, &err), nullptr);
  EXPECT_EQ(err, EINVAL);
}

// Frames from the raw port to our QP: the sink counts and dispatches them
// by opcode, and drops them in states that take none.
TEST_F(Ctl, DispatchByStateAndOpcode) {
  Cq* c = cq();
  Qp* q = qp(IBV_QPT_RC, c, c);
  ASSERT_EQ(to_init(q), 0);
  auto inject = [&](uint8_t opcode) {
    wire::PktDesc d;
    d.eth_dst = node->port->mac();
    d.eth_src = node->raw->mac();
    d.src = v4_mapped(kPeerIp4);
    d.dst = v4_mapped(kIp4);
    d.opcode = opcode;
    d.dest_qp = q->qpn();
    d.psn = Psn(0x100);
    std::vector<uint8_t> f(256);
    f.resize(wire::build(f, d));
    rte_mbuf* m = rte_pktmbuf_alloc(node->raw->pool());
    ASSERT_NE(m, nullptr);
    std::memcpy(rte_pktmbuf_mtod(m, uint8_t*), f.data(), f.size());
    m->data_len = static_cast<uint16_t>(f.size());
    m->pkt_len = static_cast<uint32_t>(f.size());
    ASSERT_EQ(node->raw->tx_burst(&m, 1), 1);
    poll(8);
  };
  const auto& ctr = rnic->counters();
  inject(wire::op::RC_SEND_ONLY);  // INIT takes no request
  EXPECT_EQ(ctr.get(RnicCtr::drop_qp_state), 1u);
  EXPECT_EQ(ctr.get(RnicCtr::rx_req_pkts), 0u);
  ASSERT_EQ(to_rtr(q), 0);
  inject(wire::op::RC_ACK);  // RTR takes no response
  EXPECT_EQ(ctr.get(RnicCtr::drop_qp_state), 2u);
  inject(wire::op::RC_SEND_ONLY);  // a request in RTR: to the responder
  EXPECT_EQ(ctr.get(RnicCtr::rx_req_pkts), 1u);
  ASSERT_EQ(to_rts(q), 0);
  inject(wire::op::RC_ACK);  // a response in RTS: to the completer
  EXPECT_EQ(ctr.get(RnicCtr::rx_resp_pkts), 1u);
  EXPECT_EQ(ctr.get(RnicCtr::drop_qp_state), 2u);
}

}  // namespace
}  // namespace uroce::rnic::ctltest
