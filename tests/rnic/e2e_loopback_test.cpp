// Loopback (issue 13): two QPs on one device reach each other through the
// device's own GIDs — RC, UC and UD, IPv4 and IPv6, every opcode — without a
// frame on the wire and without ARP/ND for the device's own address.  Node
// B of the harness only watches: it must see nothing.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/rnic/harness.hpp"

namespace uroce::rnic::testing {
namespace {

constexpr int kLocalWrite = IBV_ACCESS_LOCAL_WRITE;
constexpr int kRemote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                        IBV_ACCESS_REMOTE_ATOMIC;
constexpr size_t kLen = 200000;  // ~200 packets at MTU 1024: more than a receive burst per turn

using transport::EngineCtr;

class Loopback : public ::testing::TestWithParam<bool> {  // param: IPv6 GIDs
 protected:
  // No neighbour resolution first: a device never ARPs for itself.
  Harness h_{HarnessOptions{.resolve_neighbours = false}};
  uint64_t arp0_ = 0, nd0_ = 0;
  Node& a() { return h_.a(); }
  uint64_t a_ctr(EngineCtr c) { return a().engine->total(c); }
  uint64_t b_ctr(EngineCtr c) { return h_.b().engine->total(c); }

  // Two QPs of `type` on A, connected to each other over A's own GID.
  Pair pair(ibv_qp_type type) {
    Pair p;
    p.scq_a = h_.cq(a());
    p.rcq_a = h_.cq(a());
    p.scq_b = h_.cq(a());
    p.rcq_b = h_.cq(a());
    p.qa = h_.qp(a(), type, p.scq_a, p.rcq_a);
    p.qb = h_.qp(a(), type, p.scq_b, p.rcq_b);
    EXPECT_NE(p.qa, nullptr);
    EXPECT_NE(p.qb, nullptr);
    if (p.qa == nullptr || p.qb == nullptr) return p;
    ConnOpts o;
    o.ipv6 = GetParam();
    o.mtu = IBV_MTU_1024;
    EXPECT_EQ(h_.to_rts(p.qa, a(), a(), p.qb->qpn(), o.psn_a, o.psn_b, o), 0);
    EXPECT_EQ(h_.to_rts(p.qb, a(), a(), p.qa->qpn(), o.psn_b, o.psn_a, o), 0);
    return p;
  }

  void SetUp() override {
    arp0_ = a_ctr(EngineCtr::tx_arp_request);  // the announcement at start
    nd0_ = a_ctr(EngineCtr::tx_nd_solicit);
  }

  // Nothing of it went to the wire: B received nothing, A sent no frame
  // and asked for no neighbour.
  void expect_off_the_wire(uint64_t a_tx_before) {
    EXPECT_EQ(a_ctr(EngineCtr::tx_frames), a_tx_before);
    EXPECT_EQ(b_ctr(EngineCtr::rx_roce), 0u);
    EXPECT_EQ(a_ctr(EngineCtr::tx_arp_request), arp0_);
    EXPECT_EQ(a_ctr(EngineCtr::tx_nd_solicit), nd0_);
    EXPECT_GT(a_ctr(EngineCtr::loopback), 0u);
    EXPECT_EQ(a_ctr(EngineCtr::drop_loopback_full), 0u);
  }
};

TEST_P(Loopback, RcEveryOpcode) {
  const uint64_t tx0 = a_ctr(EngineCtr::tx_frames);
  Pair p = pair(IBV_QPT_RC);
  ASSERT_NE(p.qb, nullptr);
  Buffer src = h_.buffer(a(), kLen, kRemote);
  Buffer dst = h_.buffer(a(), kLen, kRemote);
  fill_pattern(src.bytes(0, kLen), 11);

  // SEND (with immediate) into a posted receive.
  ibv_sge r = dst.sge(0, kLen);
  ASSERT_EQ(post_recv(p.qb, 1, {&r, 1}), 0);
  ibv_sge s = src.sge(0, kLen);
  ibv_send_wr wr = send_wr(IBV_WR_SEND_WITH_IMM, 2, {&s, 1});
  wr.imm_data = htobe32(0xC0FFEE);
  ASSERT_EQ(post_send(p.qa, wr), 0);
  ibv_wc wc = h_.wait_wc(p.scq_a);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  wc = h_.wait_wc(p.rcq_b);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  EXPECT_EQ(wc.byte_len, kLen);
  EXPECT_EQ(be32toh(wc.imm_data), 0xC0FFEEu);
  EXPECT_EQ(first_diff(dst.bytes(0, kLen), src.bytes(0, kLen)), -1);

  // RDMA WRITE then READ back into a third buffer.
  std::memset(dst.data(), 0, kLen);
  wr = rdma_wr(IBV_WR_RDMA_WRITE, 3, {&s, 1}, dst.addr(), dst.rkey());
  ASSERT_EQ(post_send(p.qa, wr), 0);
  wc = h_.wait_wc(p.scq_a);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  EXPECT_EQ(first_diff(dst.bytes(0, kLen), src.bytes(0, kLen)), -1);
  Buffer back = h_.buffer(a(), kLen, kLocalWrite);
  ibv_sge b = back.sge(0, kLen);
  wr = rdma_wr(IBV_WR_RDMA_READ, 4, {&b, 1}, dst.addr(), dst.rkey());
  ASSERT_EQ(post_send(p.qa, wr), 0);
  wc = h_.wait_wc(p.scq_a);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  EXPECT_EQ(first_diff(back.bytes(0, kLen), src.bytes(0, kLen)), -1);

  // Atomics on an 8-byte word of dst.
  uint64_t word = 40;
  std::memcpy(dst.data(), &word, 8);
  ibv_sge a8 = back.sge(0, 8);
  wr = atomic_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, 5, &a8, dst.addr(), dst.rkey(), 2, 0);
  ASSERT_EQ(post_send(p.qa, wr), 0);
  wc = h_.wait_wc(p.scq_a);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  wr = atomic_wr(IBV_WR_ATOMIC_CMP_AND_SWP, 6, &a8, dst.addr(), dst.rkey(), 42, 7);
  ASSERT_EQ(post_send(p.qa, wr), 0);
  wc = h_.wait_wc(p.scq_a);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  std::memcpy(&word, back.data(), 8);
  EXPECT_EQ(word, 42u);  // the value before the swap
  std::memcpy(&word, dst.data(), 8);
  EXPECT_EQ(word, 7u);

  // A bad rkey: the remote access error comes back through the loop too.
  wr = rdma_wr(IBV_WR_RDMA_WRITE, 7, {&s, 1}, dst.addr(), dst.rkey() ^ 0x100);
  ASSERT_EQ(post_send(p.qa, wr), 0);
  wc = h_.wait_wc(p.scq_a);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << wc_status_name(wc.status);

  expect_off_the_wire(tx0);
}

TEST_P(Loopback, UcWriteAndSend) {
  const uint64_t tx0 = a_ctr(EngineCtr::tx_frames);
  Pair p = pair(IBV_QPT_UC);
  ASSERT_NE(p.qb, nullptr);
  Buffer src = h_.buffer(a(), kLen, kRemote);
  Buffer dst = h_.buffer(a(), kLen, kRemote);
  fill_pattern(src.bytes(0, kLen), 12);
  ibv_sge s = src.sge(0, kLen);
  ibv_send_wr wr = rdma_wr(IBV_WR_RDMA_WRITE, 1, {&s, 1}, dst.addr(), dst.rkey());
  ASSERT_EQ(post_send(p.qa, wr), 0);
  ibv_wc wc = h_.wait_wc(p.scq_a);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  // UC completes at the sender when sent: the loop's next turn places it.
  // Waited for by the packets taken, then a query (the control path: the
  // QP's lcore has finished its turn) before the bytes are read.
  ASSERT_TRUE(h_.run_until([&] {
    return a().rnic->counters().get(RnicCtr::rx_req_pkts) >= a().rnic->counters().get(RnicCtr::req_pkts);
  }));
  (void)qp_state(p.qb);
  EXPECT_EQ(first_diff(dst.bytes(0, kLen), src.bytes(0, kLen)), -1);
  Buffer rb = h_.buffer(a(), kLen, kLocalWrite);
  ibv_sge r = rb.sge(0, kLen);
  ASSERT_EQ(post_recv(p.qb, 2, {&r, 1}), 0);
  wr = send_wr(IBV_WR_SEND, 3, {&s, 1});
  ASSERT_EQ(post_send(p.qa, wr), 0);
  wc = h_.wait_wc(p.rcq_b);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  EXPECT_EQ(first_diff(rb.bytes(0, kLen), src.bytes(0, kLen)), -1);
  expect_off_the_wire(tx0);
}

TEST_P(Loopback, UdToItself) {
  const uint64_t tx0 = a_ctr(EngineCtr::tx_frames);
  Cq* cq = h_.cq(a());
  Qp* q = h_.qp(a(), IBV_QPT_UD, cq, cq);
  ASSERT_NE(q, nullptr);
  ASSERT_EQ(h_.ud_ready(q), 0);
  constexpr uint32_t kMsg = 300;
  Buffer src = h_.buffer(a(), kMsg, kLocalWrite);
  Buffer rb = h_.buffer(a(), kGrhBytes + kMsg, kLocalWrite);
  fill_pattern(src.bytes(0, kMsg), 13);
  ibv_sge r = rb.sge(0, kGrhBytes + kMsg);
  ASSERT_EQ(post_recv(q, 1, {&r, 1}), 0);
  int err = 0;
  Ah* ah = a().rnic->create_ah(a().pd, h_.ah_attr(a(), a(), GetParam()), &err);
  ASSERT_NE(ah, nullptr) << err;
  ibv_sge s = src.sge(0, kMsg);
  ibv_send_wr wr = send_wr(IBV_WR_SEND, 2, {&s, 1});
  wr.wr.ud.ah = &ah->ibv;
  wr.wr.ud.remote_qpn = q->qpn().value();
  wr.wr.ud.remote_qkey = kUdQkey;
  ASSERT_EQ(post_send(q, wr), 0);
  const std::vector<ibv_wc> wcs = h_.wait_wcs(cq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  for (const ibv_wc& wc : wcs) {
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
    if (wc.opcode != IBV_WC_RECV) continue;
    EXPECT_EQ(wc.byte_len, kGrhBytes + kMsg);
    EXPECT_EQ(wc.src_qp, q->qpn().value());
    EXPECT_TRUE(wc.wc_flags & IBV_WC_GRH);
  }
  EXPECT_EQ(first_diff(rb.bytes(kGrhBytes, kMsg), src.bytes(0, kMsg)), -1);
  EXPECT_EQ(a().rnic->destroy_ah(ah), 0);
  expect_off_the_wire(tx0);
}

INSTANTIATE_TEST_SUITE_P(Gid, Loopback, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "IPv6" : "IPv4"; });

}  // namespace
}  // namespace uroce::rnic::testing
