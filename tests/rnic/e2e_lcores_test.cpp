// An engine on several lcores (transport/lcores.hpp) end to end over the
// sim wire: both devices with engine_lcores 2 (lcore 0 driven by the
// test's loop, lcore 1 on a thread of its own).  QPs land on both lcores
// by QPN; every opcode of RC, UC and UD arrives exactly; QPs of both lcores
// complete to one CQ and take receives from one SRQ, each WQE exactly
// once; a multicast group with members on both lcores gives each a copy;
// control verbs (modify to ERR, destroy) on one lcore's QPs while the
// other lcore's carry traffic.  The other e2e suites run again with two
// lcores (meson suite "lcores", UROCE_TEST_ENGINE_LCORES=2).
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <set>
#include <vector>

#include "tests/rnic/harness.hpp"
#include "transport/lcores.hpp"

namespace uroce::rnic::testing {
namespace {

constexpr int kRemoteAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_ATOMIC;
constexpr unsigned kLcores = 2;

HarnessOptions two_lcores() {
  HarnessOptions o;
  o.engine_lcores = kLcores;
  return o;
}

uint64_t engine_ctr(transport::Engine& e, transport::EngineCtr c) { return e.counters().get(c); }

// Pairs until each node has QPs on every lcore (QPNs are random).
std::vector<Pair> pairs_on_every_lcore(Harness& h, ibv_qp_type type, size_t at_least) {
  std::vector<Pair> ps;
  std::set<unsigned> a_lcores, b_lcores;
  for (int i = 0; i < 64 && (ps.size() < at_least || a_lcores.size() < kLcores || b_lcores.size() < kLcores); ++i) {
    Pair p = h.pair(type);
    if (p.qa == nullptr || p.qb == nullptr) break;
    a_lcores.insert(p.qa->engine().lcore());
    b_lcores.insert(p.qb->engine().lcore());
    ps.push_back(p);
  }
  EXPECT_EQ(a_lcores.size(), kLcores) << "node A's QPs all on one lcore";
  EXPECT_EQ(b_lcores.size(), kLcores) << "node B's QPs all on one lcore";
  return ps;
}

TEST(Lcores, QpsSpreadByQpnAndTheCmsStayOnLcoreZero) {
  Harness h(two_lcores());
  ASSERT_NE(h.a().engine->lcores(), nullptr);
  EXPECT_EQ(h.a().engine->lcores()->size(), kLcores);
  for (uint32_t qpn : {0u, 1u}) EXPECT_EQ(h.a().rnic->engine_for(Qpn(qpn)).lcore(), 0u);
  for (uint32_t qpn : {2u, 3u, 0x1234u, 0x1235u}) EXPECT_EQ(h.a().rnic->engine_for(Qpn(qpn)).lcore(), qpn % kLcores);
  std::vector<Pair> ps = pairs_on_every_lcore(h, IBV_QPT_RC, 4);
  for (const Pair& p : ps) EXPECT_EQ(p.qa->engine().lcore(), p.qa->qpn().value() % kLcores);
}

// Every RC opcode on QPs of both lcores at once: the bytes arrive, each
// completion once; the worker lcores sent frames and lcore 0 handed them
// their packets.
TEST(Lcores, RcOpcodesOnEveryLcore) {
  Harness h(two_lcores());
  std::vector<Pair> ps = pairs_on_every_lcore(h, IBV_QPT_RC, 8);
  ASSERT_FALSE(ps.empty());
  constexpr size_t kLen = 20000;  // 20 packets at MTU 1024
  const size_t n = ps.size();
  Buffer src = h.buffer(h.a(), n * kLen, kRemoteAll);
  Buffer dst = h.buffer(h.b(), n * kLen, kRemoteAll, 0xEE);
  Buffer back = h.buffer(h.a(), n * kLen, kRemoteAll, 0xDD);
  Buffer recv = h.buffer(h.b(), n * kLen, kRemoteAll, 0xCC);
  Buffer atom = h.buffer(h.b(), n * 8, kRemoteAll);
  Buffer old = h.buffer(h.a(), n * 8, kRemoteAll);
  fill_pattern(src.bytes(0, n * kLen), 42);
  for (size_t i = 0; i < n; ++i) {
    ibv_sge r = recv.sge(i * kLen, kLen);
    ASSERT_EQ(post_recv(ps[i].qb, 1000 + i, {&r, 1}), 0);
  }
  for (size_t i = 0; i < n; ++i) {
    ibv_sge w = src.sge(i * kLen, kLen);
    ibv_send_wr write = rdma_wr(IBV_WR_RDMA_WRITE, 1, {&w, 1}, dst.addr(i * kLen), dst.rkey());
    ASSERT_EQ(post_send(ps[i].qa, write), 0);
    ibv_sge s = src.sge(i * kLen, kLen);
    ibv_send_wr send = send_wr(IBV_WR_SEND, 2, {&s, 1});
    ASSERT_EQ(post_send(ps[i].qa, send), 0);
    ibv_sge rd = back.sge(i * kLen, kLen);
    ibv_send_wr read = rdma_wr(IBV_WR_RDMA_READ, 3, {&rd, 1}, dst.addr(i * kLen), dst.rkey());
    read.send_flags |= IBV_SEND_FENCE;  // after the WRITE
    ASSERT_EQ(post_send(ps[i].qa, read), 0);
    ibv_sge o = old.sge(i * 8, 8);
    ibv_send_wr fa = atomic_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, 4, &o, atom.addr(i * 8), atom.rkey(), i + 1, 0);
    ASSERT_EQ(post_send(ps[i].qa, fa), 0);
  }
  for (size_t i = 0; i < n; ++i) {
    SCOPED_TRACE("pair " + std::to_string(i) + ", A's QP on lcore " + std::to_string(ps[i].qa->engine().lcore()));
    const std::vector<ibv_wc> wcs = h.wait_wcs(ps[i].scq_a, 4);
    ASSERT_EQ(wcs.size(), 4u);
    for (size_t k = 0; k < 4; ++k) {
      EXPECT_EQ(wcs[k].status, IBV_WC_SUCCESS) << wc_status_name(wcs[k].status);
      EXPECT_EQ(wcs[k].wr_id, k + 1);
    }
    const ibv_wc rw = h.wait_wc(ps[i].rcq_b);
    EXPECT_EQ(rw.status, IBV_WC_SUCCESS);
    EXPECT_EQ(rw.wr_id, 1000 + i);
    EXPECT_EQ(rw.byte_len, kLen);
    EXPECT_EQ(first_diff(dst.bytes(i * kLen, kLen), src.bytes(i * kLen, kLen)), -1);
    EXPECT_EQ(first_diff(recv.bytes(i * kLen, kLen), src.bytes(i * kLen, kLen)), -1);
    EXPECT_EQ(first_diff(back.bytes(i * kLen, kLen), src.bytes(i * kLen, kLen)), -1);
    uint64_t v = 0;
    std::memcpy(&v, atom.data() + i * 8, 8);
    EXPECT_EQ(v, i + 1);
  }
  for (Node* node : {&h.a(), &h.b()}) {
    transport::Lcores& l = *node->engine->lcores();
    EXPECT_GT(engine_ctr(l.engine(1), transport::EngineCtr::tx_frames), 0u) << "lcore 1 sent nothing";
    EXPECT_GT(engine_ctr(l.engine(0), transport::EngineCtr::lane_handoffs), 0u) << "lcore 0 handed nothing on";
    EXPECT_EQ(engine_ctr(l.engine(0), transport::EngineCtr::drop_lane_full), 0u);
  }
  if (::testing::Test::HasFailure()) std::printf("%s", h.counters().c_str());
}

// UC WRITE and UD SEND from QPs of both lcores.
TEST(Lcores, UcAndUdOnEveryLcore) {
  Harness h(two_lcores());
  std::vector<Pair> ps = pairs_on_every_lcore(h, IBV_QPT_UC, 4);
  constexpr size_t kLen = 5000;
  Buffer src = h.buffer(h.a(), ps.size() * kLen, kRemoteAll);
  Buffer dst = h.buffer(h.b(), ps.size() * kLen, kRemoteAll, 0xEE);
  fill_pattern(src.bytes(0, ps.size() * kLen), 7);
  for (size_t i = 0; i < ps.size(); ++i) {
    ibv_sge w = src.sge(i * kLen, kLen);
    ibv_send_wr write = rdma_wr(IBV_WR_RDMA_WRITE, 10 + i, {&w, 1}, dst.addr(i * kLen), dst.rkey());
    ASSERT_EQ(post_send(ps[i].qa, write), 0);
  }
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(h.wait_wc(ps[i].scq_a).status, IBV_WC_SUCCESS);
  // UC: nothing acknowledges the data.  Every packet A sent taken at B,
  // then a query (the control path parks B's lcores after their turn)
  // before the bytes are read.
  EXPECT_TRUE(h.run_until([&] {
    return h.b().rnic->counters().get(RnicCtr::rx_req_pkts) >= h.a().rnic->counters().get(RnicCtr::req_pkts);
  }));
  for (const Pair& p : ps) EXPECT_EQ(qp_state(p.qb), IBV_QPS_RTS);
  EXPECT_EQ(first_diff(dst.bytes(0, ps.size() * kLen), src.bytes(0, ps.size() * kLen)), -1);

  // UD: one sender per lcore of A to one receiver per lcore of B.
  std::vector<Qp*> senders, receivers;
  std::vector<Cq*> scqs, rcqs;
  std::set<unsigned> sl, rl;
  for (int i = 0; i < 64 && (sl.size() < kLcores || rl.size() < kLcores); ++i) {
    Cq* sc = h.cq(h.a());
    Cq* rc = h.cq(h.b());
    Qp* s = h.qp(h.a(), IBV_QPT_UD, sc, sc);
    Qp* r = h.qp(h.b(), IBV_QPT_UD, rc, rc);
    ASSERT_EQ(h.ud_ready(s), 0);
    ASSERT_EQ(h.ud_ready(r), 0);
    sl.insert(s->engine().lcore());
    rl.insert(r->engine().lcore());
    senders.push_back(s);
    receivers.push_back(r);
    scqs.push_back(sc);
    rcqs.push_back(rc);
  }
  Ah* ah = h.ah(h.a(), h.b());
  Buffer ubuf = h.buffer(h.a(), 256, kRemoteAll);
  Buffer rbuf = h.buffer(h.b(), receivers.size() * (kGrhBytes + 256), kRemoteAll);
  for (size_t i = 0; i < receivers.size(); ++i) {
    ibv_sge r = rbuf.sge(i * (kGrhBytes + 256), kGrhBytes + 256);
    ASSERT_EQ(post_recv(receivers[i], 500 + i, {&r, 1}), 0);
  }
  for (size_t i = 0; i < senders.size(); ++i) {
    ibv_sge s = ubuf.sge(0, 100);
    ibv_send_wr wr = send_wr(IBV_WR_SEND, 600 + i, {&s, 1});
    wr.wr.ud.ah = &ah->ibv;
    wr.wr.ud.remote_qpn = receivers[i]->qpn().value();
    wr.wr.ud.remote_qkey = kUdQkey;
    ASSERT_EQ(post_send(senders[i], wr), 0);
  }
  for (size_t i = 0; i < senders.size(); ++i) {
    EXPECT_EQ(h.wait_wc(scqs[i]).status, IBV_WC_SUCCESS);
    const ibv_wc rw = h.wait_wc(rcqs[i]);
    EXPECT_EQ(rw.status, IBV_WC_SUCCESS);
    EXPECT_EQ(rw.wr_id, 500 + i);
    EXPECT_EQ(rw.byte_len, 100u + kGrhBytes);
    EXPECT_EQ(rw.src_qp, senders[i]->qpn().value());
  }
}

// QPs of both lcores complete to one CQ and take their receives from one
// SRQ: every WQE is consumed once, every completion arrives once.
TEST(Lcores, SharedCqAndSrqAcrossLcores) {
  Harness h(two_lcores());
  constexpr size_t kQps = 8;
  constexpr size_t kMsgs = 64;  // per QP
  Cq* scq = h.cq(h.a(), 4096);
  Cq* rcq = h.cq(h.b(), 4096);
  Srq* srq = h.srq(h.b(), kQps * kMsgs);
  ASSERT_NE(srq, nullptr);
  std::vector<Qp*> qa, qb;
  std::set<unsigned> lb;
  for (size_t i = 0; i < kQps; ++i) {
    qa.push_back(h.qp(h.a(), IBV_QPT_RC, scq, scq));
    qb.push_back(h.qp(h.b(), IBV_QPT_RC, rcq, rcq, QpCaps{}, srq));
    ASSERT_EQ(h.connect(qa.back(), qb.back()), 0);
    lb.insert(qb.back()->engine().lcore());
  }
  if (lb.size() < kLcores) GTEST_SKIP() << "all 8 of B's QPNs fell on one lcore (1 in 128)";
  Buffer rbuf = h.buffer(h.b(), kQps * kMsgs * 64, kRemoteAll);
  for (size_t i = 0; i < kQps * kMsgs; ++i) {
    ibv_sge r = rbuf.sge(i * 64, 64);
    ASSERT_EQ(post_srq_recv(srq, i, {&r, 1}), 0);
  }
  Buffer sbuf = h.buffer(h.a(), 64, kRemoteAll);
  for (size_t m = 0; m < kMsgs; ++m)
    for (size_t q = 0; q < kQps; ++q) {
      ibv_sge s = sbuf.sge(0, 32);
      ibv_send_wr wr = send_wr(IBV_WR_SEND, q * kMsgs + m, {&s, 1});
      ASSERT_EQ(post_send(qa[q], wr), 0);
    }
  const std::vector<ibv_wc> sw = h.wait_wcs(scq, kQps * kMsgs);
  const std::vector<ibv_wc> rw = h.wait_wcs(rcq, kQps * kMsgs);
  ASSERT_EQ(sw.size(), kQps * kMsgs);
  ASSERT_EQ(rw.size(), kQps * kMsgs);
  std::set<uint64_t> sent, taken;
  for (const ibv_wc& wc : sw) {
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(sent.insert(wc.wr_id).second) << "send " << wc.wr_id << " completed twice";
  }
  for (const ibv_wc& wc : rw) {
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(taken.insert(wc.wr_id).second) << "receive WQE " << wc.wr_id << " used twice";
  }
  EXPECT_EQ(taken.size(), kQps * kMsgs);
  EXPECT_TRUE(h.poll_cq(rcq).empty());
}

// A multicast group with UD members on both of B's lcores: each member
// gets one copy of each message.
TEST(Lcores, MulticastReachesMembersOnEveryLcore) {
  Harness h(two_lcores());
  const wire::Ipv6Addr group{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 239, 1, 2, 5};  // 239.1.2.5
  struct Member {
    Qp* qp;
    Cq* cq;
  };
  std::vector<Member> ms;
  std::set<unsigned> lc;
  for (int i = 0; i < 64 && (ms.size() < 4 || lc.size() < kLcores); ++i) {
    Cq* c = h.cq(h.b());
    Qp* q = h.qp(h.b(), IBV_QPT_UD, c, c);
    ASSERT_EQ(h.ud_ready(q), 0);
    ASSERT_EQ(h.b().rnic->attach_mcast(q, group), 0);
    lc.insert(q->engine().lcore());
    ms.push_back({q, c});
  }
  ASSERT_EQ(lc.size(), kLcores);
  Buffer rbuf = h.buffer(h.b(), ms.size() * 512, kRemoteAll);
  for (size_t i = 0; i < ms.size(); ++i) {
    ibv_sge r = rbuf.sge(i * 512, 512);
    ASSERT_EQ(post_recv(ms[i].qp, i, {&r, 1}), 0);
  }
  Cq* sc = h.cq(h.a());
  Qp* s = h.qp(h.a(), IBV_QPT_UD, sc, sc);
  ASSERT_EQ(h.ud_ready(s), 0);
  ibv_ah_attr at = h.ah_attr(h.a(), h.b());
  std::memcpy(at.grh.dgid.raw, group.data(), 16);
  int err = 0;
  Ah* ah = h.a().rnic->create_ah(h.a().pd, at, &err);
  ASSERT_NE(ah, nullptr) << std::strerror(err);
  Buffer sbuf = h.buffer(h.a(), 64, kRemoteAll);
  ibv_sge sg = sbuf.sge(0, 48);
  ibv_send_wr wr = send_wr(IBV_WR_SEND, 1, {&sg, 1});
  wr.wr.ud.ah = &ah->ibv;
  wr.wr.ud.remote_qpn = 0xFFFFFF;
  wr.wr.ud.remote_qkey = kUdQkey;
  ASSERT_EQ(post_send(s, wr), 0);
  EXPECT_EQ(h.wait_wc(sc).status, IBV_WC_SUCCESS);
  for (size_t i = 0; i < ms.size(); ++i) {
    SCOPED_TRACE("member on lcore " + std::to_string(ms[i].qp->engine().lcore()));
    const std::vector<ibv_wc> got = h.wait_wcs(ms[i].cq, 1);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(got[0].byte_len, 48u + kGrhBytes);
  }
  h.run_for(std::chrono::milliseconds(50));
  for (const Member& m : ms) EXPECT_TRUE(h.poll_cq(m.cq).empty()) << "a member got two copies";
  EXPECT_EQ(h.b().rnic->counters().get(RnicCtr::rx_mcast_pkts), 1u);
  EXPECT_EQ(h.b().rnic->counters().get(RnicCtr::rx_mcast_copies), ms.size());
}

// Control verbs on QPs of one lcore while QPs of both carry traffic: a
// QP moved to ERR flushes, a destroyed one is gone, the others finish.
TEST(Lcores, ControlVerbsWhileEveryLcoreCarriesTraffic) {
  Harness h(two_lcores());
  std::vector<Pair> ps = pairs_on_every_lcore(h, IBV_QPT_RC, 6);
  ASSERT_GE(ps.size(), 3u);
  constexpr size_t kLen = 65536;
  constexpr int kRounds = 20;
  Buffer src = h.buffer(h.a(), kLen, kRemoteAll);
  Buffer dst = h.buffer(h.b(), ps.size() * kLen, kRemoteAll);
  fill_pattern(src.bytes(0, kLen), 3);
  // The victims: one pair to ERR, one destroyed.
  Pair err_pair = ps[0];
  Pair gone_pair = ps[1];
  for (int round = 0; round < kRounds; ++round) {
    for (size_t i = 2; i < ps.size(); ++i) {
      ibv_sge w = src.sge(0, kLen);
      ibv_send_wr write = rdma_wr(IBV_WR_RDMA_WRITE, round, {&w, 1}, dst.addr(i * kLen), dst.rkey());
      ASSERT_EQ(post_send(ps[i].qa, write), 0);
    }
    if (round == kRounds / 2) {
      ibv_qp_attr attr{};
      attr.qp_state = IBV_QPS_ERR;
      EXPECT_EQ(err_pair.qa->modify(attr, IBV_QP_STATE), 0);
      EXPECT_EQ(h.a().rnic->destroy_qp(gone_pair.qa), 0);
      EXPECT_EQ(h.b().rnic->destroy_qp(gone_pair.qb), 0);
    }
    h.run_for(std::chrono::milliseconds(1));
  }
  for (size_t i = 2; i < ps.size(); ++i) {
    const std::vector<ibv_wc> wcs = h.wait_wcs(ps[i].scq_a, kRounds);
    ASSERT_EQ(wcs.size(), static_cast<size_t>(kRounds));
    for (const ibv_wc& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
    EXPECT_EQ(first_diff(dst.bytes(i * kLen, kLen), src.bytes(0, kLen)), -1);
  }
  EXPECT_EQ(qp_state(err_pair.qa), IBV_QPS_ERR);
  // Posted to the QP in ERR: flushed.
  ibv_sge w = src.sge(0, 8);
  ibv_send_wr write = rdma_wr(IBV_WR_RDMA_WRITE, 99, {&w, 1}, dst.addr(), dst.rkey());
  ASSERT_EQ(post_send(err_pair.qa, write), 0);
  const ibv_wc fw = h.wait_wc(err_pair.scq_a);
  EXPECT_EQ(fw.status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(fw.wr_id, 99u);
}

}  // namespace
}  // namespace uroce::rnic::testing
