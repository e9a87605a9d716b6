// XRC (IBA annex A14) end to end over the sim wire: node A's XRC send QPs
// name, in every request, an SRQ of node B's domain; B's XRC receive QP
// takes the message from that SRQ and completes it on the SRQ's CQ.
//
//   delivery     SEND (+IMM) of every size into the SRQ each request names,
//                on that SRQ's CQ, with the receive QP's number; RNR while
//                the SRQ is empty, then delivery
//   many to one  two send QPs to two receive QPs sharing the domain's SRQs
//   memory       WRITE, READ and atomics under keys of the SRQ's PD; a key
//                of another PD is a remote access error
//   refusals     an SRQ of another domain, a basic SRQ, a destroyed one:
//                invalid request, the receive QP to ERR, counted
//   objects      domains by file (O_CREAT, O_EXCL), EBUSY while in use,
//                open_xrc_qp handles, what each XRC QP type refuses
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "tests/common/test_util.hpp"
#include "tests/rnic/harness.hpp"
#include "transport/rnic/limits.hpp"

namespace uroce::rnic::testing {
namespace {

constexpr int kRemoteAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_ATOMIC;

class Xrc : public ::testing::Test {
 protected:
  Harness h;

  Xrcd* xrcd(Node& n, uint64_t inode = 0) {
    int err = 0;
    Xrcd* x = n.rnic->open_xrcd(inode, true, false, &err);
    EXPECT_NE(x, nullptr) << std::strerror(err);
    return x;
  }
  Srq* xrc_srq(Node& n, Xrcd* x, Cq* cq, Pd* pd = nullptr, uint32_t max_wr = 64) {
    ibv_srq_init_attr init{};
    init.attr.max_wr = max_wr;
    init.attr.max_sge = 4;
    const Rnic::XrcSrq xrc{x, cq};
    int err = 0;
    Srq* s = n.rnic->create_srq(pd != nullptr ? pd : n.pd, init, &err, nullptr, &xrc);
    EXPECT_NE(s, nullptr) << std::strerror(err);
    return s;
  }
  Qp* send_qp(Node& n, Cq* scq) {
    ibv_qp_init_attr init{};
    init.qp_type = IBV_QPT_XRC_SEND;
    init.send_cq = reinterpret_cast<ibv_cq*>(scq);
    init.cap.max_send_wr = 256;
    init.cap.max_send_sge = 4;
    int err = 0;
    Qp* q = n.rnic->create_qp(n.pd, init, &err);
    EXPECT_NE(q, nullptr) << std::strerror(err);
    return q;
  }
  Qp* recv_qp(Node& n, Xrcd* x) {
    ibv_qp_init_attr init{};
    init.qp_type = IBV_QPT_XRC_RECV;
    int err = 0;
    Qp* q = n.rnic->create_qp(nullptr, init, &err, nullptr, x);
    EXPECT_NE(q, nullptr) << std::strerror(err);
    return q;
  }
  // A's send QP `s` to B's receive QP `r` (and back, for the responses).
  void connect(Qp* s, Qp* r, const ConnOpts& o = {}) {
    ASSERT_EQ(h.to_rts(s, h.a(), h.b(), r->qpn(), o.psn_a, o.psn_b, o), 0);
    ASSERT_EQ(h.to_rts(r, h.b(), h.a(), s->qpn(), o.psn_b, o.psn_a, o), 0);
  }
  static ibv_send_wr to_srq(ibv_send_wr wr, const Srq* srq) {
    wr.qp_type.xrc.remote_srqn = srq->number();
    return wr;
  }
};

TEST_F(Xrc, SendsLandInTheSrqEachRequestNamesAndCompleteOnItsCq) {
  Xrcd* x = xrcd(h.b());
  Cq* cq1 = h.cq(h.b());
  Cq* cq2 = h.cq(h.b());
  Srq* srq1 = xrc_srq(h.b(), x, cq1);
  Srq* srq2 = xrc_srq(h.b(), x, cq2);
  ASSERT_NE(srq1->number(), srq2->number());
  Cq* scq = h.cq(h.a());
  Qp* s = send_qp(h.a(), scq);
  Qp* r = recv_qp(h.b(), x);
  connect(s, r);

  const size_t sizes[] = {0, 1, 1023, 1024, 1025, 5000, 65536};
  constexpr size_t kSlot = 65536;
  Buffer src = h.buffer(h.a(), kSlot, IBV_ACCESS_LOCAL_WRITE);
  Buffer dst = h.buffer(h.b(), kSlot * std::size(sizes), IBV_ACCESS_LOCAL_WRITE);
  for (size_t i = 0; i < std::size(sizes); ++i) {
    const ibv_sge sge = dst.sge(i * kSlot, kSlot);
    ASSERT_EQ(post_srq_recv(i % 2 == 0 ? srq1 : srq2, 100 + i, {&sge, 1}), 0);
  }
  for (size_t i = 0; i < std::size(sizes); ++i) {
    fill_pattern(src.bytes(0, sizes[i]), i);
    ibv_sge sge = src.sge(0, sizes[i]);
    const bool imm = i == 3;
    ibv_send_wr wr = to_srq(send_wr(imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND, i, {&sge, 1}), i % 2 == 0 ? srq1 : srq2);
    wr.imm_data = htobe32(0xC0FFEE);
    ASSERT_EQ(post_send(s, wr), 0);
    const ibv_wc sw = h.wait_wc(scq);
    EXPECT_EQ(sw.status, IBV_WC_SUCCESS);
    EXPECT_EQ(sw.wr_id, i);
    const ibv_wc rw = h.wait_wc(i % 2 == 0 ? cq1 : cq2);
    EXPECT_EQ(rw.status, IBV_WC_SUCCESS);
    EXPECT_EQ(rw.wr_id, 100 + i);
    EXPECT_EQ(rw.opcode, IBV_WC_RECV);
    EXPECT_EQ(rw.byte_len, sizes[i]);
    EXPECT_EQ(rw.qp_num, r->qpn().value()) << "the receive QP that took it";
    EXPECT_EQ(rw.src_qp, s->qpn().value());
    EXPECT_EQ((rw.wc_flags & IBV_WC_WITH_IMM) != 0, imm);
    if (imm) {
      EXPECT_EQ(be32toh(rw.imm_data), 0xC0FFEEu);
    }
    std::vector<uint8_t> want(sizes[i]);
    fill_pattern(want, i);
    const std::span<const uint8_t> got = dst.bytes(i * kSlot, sizes[i]);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << "size " << sizes[i];
  }
  EXPECT_TRUE(h.poll_cq(cq1).empty());
  EXPECT_TRUE(h.poll_cq(cq2).empty());

  // An empty SRQ: RNR NAKs until a receive is posted, then delivery.
  ibv_sge sge = src.sge(0, 64);
  ibv_send_wr wr = to_srq(send_wr(IBV_WR_SEND, 77, {&sge, 1}), srq1);
  ASSERT_EQ(post_send(s, wr), 0);
  EXPECT_TRUE(h.collect_for(scq, std::chrono::milliseconds(20)).empty());
  EXPECT_GT(h.b().rnic->counters().get(RnicCtr::rnr_naks_sent), 0u);
  const ibv_sge rsge = dst.sge(0, 64);
  ASSERT_EQ(post_srq_recv(srq1, 777, {&rsge, 1}), 0);
  EXPECT_EQ(h.wait_wc(scq).status, IBV_WC_SUCCESS);
  EXPECT_EQ(h.wait_wc(cq1).wr_id, 777u);
  EXPECT_EQ(h.b().rnic->counters().get(RnicCtr::xrc_srq_refused), 0u);
}

TEST_F(Xrc, ManySendQpsShareTheDomainsSrqs) {
  Xrcd* x = xrcd(h.b());
  Cq* cq = h.cq(h.b());
  Srq* srq = xrc_srq(h.b(), x, cq, nullptr, 256);
  Cq* scq = h.cq(h.a());
  Qp* s1 = send_qp(h.a(), scq);
  Qp* s2 = send_qp(h.a(), scq);
  Qp* r1 = recv_qp(h.b(), x);
  Qp* r2 = recv_qp(h.b(), x);
  connect(s1, r1);
  connect(s2, r2);
  Buffer src = h.buffer(h.a(), 4096, IBV_ACCESS_LOCAL_WRITE, 0x5A);
  Buffer dst = h.buffer(h.b(), 256 * 4096, IBV_ACCESS_LOCAL_WRITE);
  constexpr int kEach = 40;
  for (int i = 0; i < 2 * kEach; ++i) {
    const ibv_sge sge = dst.sge(static_cast<size_t>(i) * 4096, 4096);
    ASSERT_EQ(post_srq_recv(srq, static_cast<uint64_t>(i), {&sge, 1}), 0);
  }
  for (int i = 0; i < kEach; ++i) {
    for (Qp* s : {s1, s2}) {
      ibv_sge sge = src.sge(0, 3000);
      ibv_send_wr wr = to_srq(send_wr(IBV_WR_SEND, static_cast<uint64_t>(i), {&sge, 1}), srq);
      ASSERT_EQ(post_send(s, wr), 0);
    }
  }
  const auto sent = h.wait_wcs(scq, 2 * kEach);
  ASSERT_EQ(sent.size(), size_t{2 * kEach});
  for (const ibv_wc& wc : sent) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  const auto got = h.wait_wcs(cq, 2 * kEach);
  ASSERT_EQ(got.size(), size_t{2 * kEach});
  int from_r1 = 0, from_r2 = 0;
  for (const ibv_wc& wc : got) {
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.byte_len, 3000u);
    if (wc.qp_num == r1->qpn().value()) ++from_r1;
    if (wc.qp_num == r2->qpn().value()) ++from_r2;
  }
  EXPECT_EQ(from_r1, kEach);
  EXPECT_EQ(from_r2, kEach);
}

TEST_F(Xrc, RdmaAndAtomicsUseKeysOfTheSrqsPd) {
  Xrcd* x = xrcd(h.b());
  Cq* cq = h.cq(h.b());
  Srq* srq = xrc_srq(h.b(), x, cq);
  Cq* scq = h.cq(h.a());
  Qp* s = send_qp(h.a(), scq);
  Qp* r = recv_qp(h.b(), x);
  connect(s, r);
  Buffer local = h.buffer(h.a(), 8192, IBV_ACCESS_LOCAL_WRITE);
  Buffer remote = h.buffer(h.b(), 8192, kRemoteAll);
  fill_pattern(local.bytes(0, 5000), 1);

  ibv_sge sge = local.sge(0, 5000);
  ibv_send_wr wr = to_srq(rdma_wr(IBV_WR_RDMA_WRITE, 1, {&sge, 1}, remote.addr(), remote.rkey()), srq);
  ASSERT_EQ(post_send(s, wr), 0);
  ASSERT_EQ(h.wait_wc(scq).status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(remote.data(), local.data(), 5000), 0);

  ibv_sge back = local.sge(4096, 4000);
  wr = to_srq(rdma_wr(IBV_WR_RDMA_READ, 2, {&back, 1}, remote.addr(100), remote.rkey()), srq);
  ASSERT_EQ(post_send(s, wr), 0);
  ASSERT_EQ(h.wait_wc(scq).status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(local.data() + 4096, remote.data() + 100, 4000), 0);

  std::memset(remote.data() + 8000, 0, 8);
  ibv_sge word = local.sge(8000, 8);
  wr = to_srq(atomic_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, 3, &word, remote.addr(8000), remote.rkey(), 5, 0), srq);
  ASSERT_EQ(post_send(s, wr), 0);
  ASSERT_EQ(h.wait_wc(scq).status, IBV_WC_SUCCESS);
  uint64_t now = 0;
  std::memcpy(&now, remote.data() + 8000, 8);
  EXPECT_EQ(now, 5u);
  EXPECT_TRUE(h.poll_cq(cq).empty()) << "RDMA consumes no receive";

  // A key of another PD of B's: the SRQ's PD is what counts.
  int err = 0;
  Pd* other = h.b().rnic->alloc_pd(&err);
  ASSERT_NE(other, nullptr);
  std::vector<uint8_t> mem(4096, 0x33);
  Mr* mr = h.b().rnic->reg_mr(other, mem.data(), mem.size(), reinterpret_cast<uint64_t>(mem.data()), kRemoteAll,
                              &err);
  ASSERT_NE(mr, nullptr);
  wr = to_srq(rdma_wr(IBV_WR_RDMA_WRITE, 4, {&sge, 1}, reinterpret_cast<uint64_t>(mem.data()), mr->rkey.value()),
              srq);
  sge.length = 100;
  ASSERT_EQ(post_send(s, wr), 0);
  EXPECT_EQ(h.wait_wc(scq).status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(mem[0], 0x33);
  EXPECT_EQ(qp_state(r), IBV_QPS_ERR);
}

// Each kind of SRQ an XRC request may not reach: the send completes with
// REM_INV_REQ_ERR, the receive QP goes to ERR, nothing is received.
TEST_F(Xrc, RequestsForSrqsOutsideTheDomainAreRefused) {
  Xrcd* x = xrcd(h.b());
  Xrcd* x2 = xrcd(h.b());
  Cq* cq = h.cq(h.b());
  Srq* other_domain = xrc_srq(h.b(), x2, cq);
  Srq* basic = h.srq(h.b(), 16);
  Srq* gone = xrc_srq(h.b(), x, cq);
  const uint32_t gone_number = gone->number();
  ASSERT_EQ(h.b().rnic->destroy_srq(gone), 0);
  Buffer dst = h.buffer(h.b(), 4096, IBV_ACCESS_LOCAL_WRITE);
  const ibv_sge rsge = dst.sge(0, 4096);
  ASSERT_EQ(post_srq_recv(other_domain, 1, {&rsge, 1}), 0);
  ASSERT_EQ(post_srq_recv(basic, 2, {&rsge, 1}), 0);

  struct Case {
    const char* what;
    uint32_t srqn;
  };
  const Case cases[] = {
      {"an SRQ of another domain", other_domain->number()},
      {"a basic SRQ", basic->number()},
      {"a destroyed SRQ", gone_number},
      {"no SRQ at all", 0},
      {"past every SRQ number", 0xFFFFFF},
  };
  Buffer src = h.buffer(h.a(), 64, IBV_ACCESS_LOCAL_WRITE);
  uint64_t refused = 0;
  for (const Case& c : cases) {
    Cq* scq = h.cq(h.a());
    Qp* s = send_qp(h.a(), scq);
    Qp* r = recv_qp(h.b(), x);
    connect(s, r);
    ibv_sge sge = src.sge(0, 64);
    ibv_send_wr wr = send_wr(IBV_WR_SEND, 9, {&sge, 1});
    wr.qp_type.xrc.remote_srqn = c.srqn;
    ASSERT_EQ(post_send(s, wr), 0) << c.what;
    EXPECT_EQ(h.wait_wc(scq).status, IBV_WC_REM_INV_REQ_ERR) << c.what;
    EXPECT_EQ(qp_state(r), IBV_QPS_ERR) << c.what;
    EXPECT_EQ(h.b().rnic->counters().get(RnicCtr::xrc_srq_refused), ++refused) << c.what;
  }
  EXPECT_TRUE(h.poll_cq(cq).empty()) << "nothing was received";
}

TEST_F(Xrc, DomainsAndTheirObjects) {
  Rnic& rn = *h.b().rnic;
  int err = 0;
  // A file's domain: opened again it is the same; O_EXCL refuses it then,
  // and without O_CREAT a file with none is refused (the kernel's EINVAL).
  Xrcd* f1 = rn.open_xrcd(42, true, false, &err);
  ASSERT_NE(f1, nullptr);
  EXPECT_EQ(rn.open_xrcd(42, true, false, &err), f1);
  EXPECT_EQ(rn.open_xrcd(42, false, false, &err), f1);
  EXPECT_EQ(rn.open_xrcd(42, true, true, &err), nullptr);
  EXPECT_EQ(err, EINVAL);
  EXPECT_EQ(rn.open_xrcd(43, false, false, &err), nullptr);
  EXPECT_EQ(err, EINVAL);
  Xrcd* anon = rn.open_xrcd(0, true, false, &err);
  ASSERT_NE(anon, nullptr);
  EXPECT_NE(anon, f1);
  EXPECT_EQ(rn.usage().xrcds, 2u);

  // An SRQ in it holds the last handle (EBUSY); the other handles go.
  Cq* cq = h.cq(h.b());
  Srq* srq = xrc_srq(h.b(), f1, cq);
  EXPECT_EQ(rn.close_xrcd(f1), 0);
  EXPECT_EQ(rn.close_xrcd(f1), 0);
  EXPECT_EQ(rn.close_xrcd(f1), EBUSY);
  EXPECT_EQ(rn.destroy_cq(cq), EBUSY) << "the XRC SRQ completes there";
  EXPECT_EQ(rn.dealloc_pd(h.b().pd), EBUSY);

  // XRC receive QPs: the domain only, no receive queue, no sends.
  const size_t qps_before = rn.usage().qps;
  Qp* r = recv_qp(h.b(), f1);
  ibv_qp_init_attr bad{};
  bad.qp_type = IBV_QPT_XRC_RECV;
  EXPECT_EQ(rn.create_qp(nullptr, bad, &err, nullptr, nullptr), nullptr);
  EXPECT_EQ(err, EINVAL);
  EXPECT_EQ(r->cap().max_send_wr, 0u);
  EXPECT_EQ(r->cap().max_recv_wr, 0u);
  Buffer b = h.buffer(h.b(), 64, IBV_ACCESS_LOCAL_WRITE);
  const ibv_sge sge = b.sge(0, 64);
  ASSERT_EQ(h.to_rts(r, h.b(), h.a(), Qpn(0x99), 0, 0, ConnOpts{}), 0);
  EXPECT_EQ(post_recv(r, 1, {&sge, 1}), EINVAL);
  ibv_sge ssge = sge;
  ibv_send_wr swr = send_wr(IBV_WR_SEND, 1, {&ssge, 1});
  EXPECT_EQ(post_send(r, swr), EINVAL);

  // Handles (ibv_open_qp): the QP stays until its last one goes; only a
  // receive QP of that domain opens.
  EXPECT_EQ(rn.open_xrc_qp(f1, r->qpn(), &err), r);
  EXPECT_EQ(rn.open_xrc_qp(anon, r->qpn(), &err), nullptr);
  EXPECT_EQ(err, EINVAL);
  EXPECT_EQ(rn.close_xrcd(f1), EBUSY);
  EXPECT_EQ(rn.destroy_qp(r), 0);
  EXPECT_EQ(test::in_loop(rn.engine(), [&] { return rn.qp_by_num(r->qpn()); }), r) << "one handle is left";
  EXPECT_EQ(rn.destroy_qp(r), 0);
  EXPECT_EQ(rn.usage().qps, qps_before);

  // XRC send QPs: a PD and a send CQ; no receive side, no IBA 1.5 opcodes,
  // no SEND with Invalidate (taken, completed with a local QP operation
  // error that moves the QP to ERR, so the next one is flushed).
  Cq* scq = h.cq(h.b());
  Qp* s = send_qp(h.b(), scq);
  EXPECT_EQ(s->cap().max_recv_wr, 0u);
  ASSERT_EQ(h.to_rts(s, h.b(), h.a(), Qpn(0x98), 0, 0, ConnOpts{}), 0);
  EXPECT_EQ(post_recv(s, 1, {&sge, 1}), EINVAL);
  for (const ibv_wr_opcode op : {IBV_WR_SEND_WITH_INV, IBV_WR_ATOMIC_WRITE}) {
    ibv_send_wr wr = send_wr(op, op, {&ssge, 1});
    EXPECT_EQ(post_send(s, wr), 0) << op;
  }
  const std::vector<ibv_wc> wcs = h.wait_wcs(scq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, uint64_t{IBV_WR_SEND_WITH_INV});
  EXPECT_EQ(wcs[0].status, IBV_WC_LOC_QP_OP_ERR) << wc_status_name(wcs[0].status);
  EXPECT_EQ(wcs[1].wr_id, uint64_t{IBV_WR_ATOMIC_WRITE});
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR) << wc_status_name(wcs[1].status);
  EXPECT_EQ(qp_state(s), IBV_QPS_ERR);
  EXPECT_EQ(rn.destroy_qp(s), 0);

  const uint32_t srqn = srq->number();
  EXPECT_EQ(test::in_loop(rn.engine(), [&] { return rn.srq_by_num(srqn); }), srq);
  EXPECT_EQ(rn.destroy_srq(srq), 0);
  EXPECT_EQ(test::in_loop(rn.engine(), [&] { return rn.srq_by_num(srqn); }), nullptr);
  EXPECT_EQ(rn.close_xrcd(f1), 0);
  EXPECT_EQ(rn.close_xrcd(anon), 0);
  EXPECT_EQ(rn.usage().xrcds, 0u);
  EXPECT_EQ(rn.close_xrcd(anon), EINVAL) << "already closed";
}

}  // namespace
}  // namespace uroce::rnic::testing
