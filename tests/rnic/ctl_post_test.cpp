// post_send / post_recv validation: the errnos of ibv_post_send(3) and
// ibv_post_recv(3), the first bad work request in *bad, and what a
// posted WQE holds.
#include "tests/common/raw_enum.hpp"
#include "tests/rnic/ctl_fixture.hpp"

namespace uroce::rnic::ctltest {
namespace {

struct Post : Ctl {
  std::vector<uint8_t> buf = std::vector<uint8_t>(8192, 0x5a);
  ibv_sge sge(uint32_t len, uint32_t off = 0) { return ibv_sge{reinterpret_cast<uint64_t>(buf.data() + off), len, 0x100}; }
  static ibv_send_wr wr(ibv_wr_opcode op, ibv_sge* s, int n, uint64_t id = 1) {
    ibv_send_wr w{};
    w.wr_id = id;
    w.opcode = op;
    w.sg_list = s;
    w.num_sge = n;
    w.send_flags = IBV_SEND_SIGNALED;
    return w;
  }
  int post(Qp* q, ibv_send_wr& w, const ibv_send_wr** bad = nullptr) {
    const ibv_send_wr* b = nullptr;
    const int rc = q->post_send(&w, bad ? bad : &b);
    return rc;
  }
  // The status a WR just taken will complete with unexecuted
  // (IBV_WC_SUCCESS: it runs).
  static ibv_wc_status last_post_error(const Qp* q) { return q->sq.slot(q->sq.tail() - 1).post_error; }
};

// A send posted before RTS is taken (0, as ConnectX) and dropped: it
// never enters the send queue and never completes; one counter says so.
TEST_F(Post, SendDroppedBeforeRts) {
  Qp* q = qp(IBV_QPT_RC);
  ibv_sge s = sge(8);
  ibv_send_wr w = wr(IBV_WR_SEND, &s, 1);
  const ibv_send_wr* bad = nullptr;
  EXPECT_EQ(post(q, w, &bad), 0);  // RESET
  EXPECT_EQ(bad, nullptr);
  ASSERT_EQ(to_init(q), 0);
  EXPECT_EQ(post(q, w), 0);
  ASSERT_EQ(to_rtr(q), 0);
  EXPECT_EQ(post(q, w), 0);
  EXPECT_EQ(q->sq.tail(), 0u);
  EXPECT_EQ(rnic->counters().get(RnicCtr::post_send_not_ready), 3u);
  // What the verbs refuse in any state is still refused.
  ibv_send_wr odd = w;
  uroce::testing::set_raw(odd.opcode, 99u);
  EXPECT_EQ(post(q, odd, &bad), EINVAL);
  EXPECT_EQ(bad, &odd);
  ASSERT_EQ(to_rts(q), 0);
  EXPECT_EQ(post(q, w), 0);
  EXPECT_EQ(q->sq.tail(), 1u);
  EXPECT_EQ(rnic->counters().get(RnicCtr::post_send_not_ready), 3u);
}

TEST_F(Post, OpcodesPerType) {
  Qp* rc = qp(IBV_QPT_RC);
  Qp* uc = qp(IBV_QPT_UC);
  Qp* ud = qp(IBV_QPT_UD);
  ready(rc);
  ready(uc);
  ready(ud);
  int err = 0;
  Ah* ah = rnic->create_ah(pd, ah_attr(), &err);
  ASSERT_NE(ah, nullptr);
  ibv_sge s = sge(8);
  // What a post of each opcode does on each QP type: runs (Run), is
  // taken and completes with IBV_WC_LOC_QP_OP_ERR unexecuted (Op: an
  // operation the QP's transport does not have, IBA 11.4.1.1 and table
  // 86; ConnectX takes it so), or is refused with EINVAL (Inval: no
  // opcode at all, or a WR the verbs themselves call malformed).
  enum Fate { Run, Op, Inval };
  struct Case {
    unsigned op;  // as the application wrote it (99: no opcode at all)
    Fate rc, uc, ud;
  };
  const Case cases[] = {
      {IBV_WR_SEND, Run, Run, Run},
      {IBV_WR_SEND_WITH_IMM, Run, Run, Run},
      {IBV_WR_RDMA_WRITE, Run, Run, Op},
      {IBV_WR_RDMA_WRITE_WITH_IMM, Run, Run, Op},
      {IBV_WR_RDMA_READ, Run, Op, Op},
      {IBV_WR_ATOMIC_CMP_AND_SWP, Run, Op, Op},
      {IBV_WR_ATOMIC_FETCH_AND_ADD, Run, Op, Op},
      {IBV_WR_LOCAL_INV, Run, Run, Op},        // memory windows: connected QPs (fails later: no such key)
      {IBV_WR_BIND_MW, Inval, Inval, Inval},  // no window named (bind_mw.mw NULL)
      {99, Inval, Inval, Inval},
  };
  const auto check = [&](Qp* q, ibv_send_wr& w, Fate f, const char* type, unsigned op) {
    const uint32_t before = q->sq.tail();
    const int got = post(q, w);
    if (f == Inval) {
      EXPECT_EQ(got, EINVAL) << type << " opcode " << op;
      EXPECT_EQ(q->sq.tail(), before) << type << " opcode " << op;
      return;
    }
    ASSERT_EQ(got, 0) << type << " opcode " << op;
    EXPECT_EQ(last_post_error(q), f == Run ? IBV_WC_SUCCESS : IBV_WC_LOC_QP_OP_ERR) << type << " opcode " << op;
  };
  for (const Case& c : cases) {
    ibv_send_wr w = wr(IBV_WR_SEND, &s, 1);
    uroce::testing::set_raw(w.opcode, c.op);
    check(rc, w, c.rc, "RC", c.op);
    check(uc, w, c.uc, "UC", c.op);
    w.wr.ud.ah = &ah->ibv;
    w.wr.ud.remote_qpn = 0x99;
    w.wr.ud.remote_qkey = 0x11111111;
    check(ud, w, c.ud, "UD", c.op);
  }
}

TEST_F(Post, SendLimits) {
  Qp* q = qp(IBV_QPT_RC);  // 8 WRs, 2 SGEs, 64 inline bytes
  ready(q);
  ibv_sge s[3] = {sge(8), sge(8, 8), sge(8, 16)};
  ibv_send_wr w = wr(IBV_WR_SEND, s, 3);
  const ibv_send_wr* bad = nullptr;
  EXPECT_EQ(post(q, w, &bad), EINVAL);  // num_sge > max_send_sge
  EXPECT_EQ(bad, &w);

  ibv_sge big = sge(65);
  w = wr(IBV_WR_SEND, &big, 1);
  w.send_flags |= IBV_SEND_INLINE;
  EXPECT_EQ(post(q, w), EINVAL);  // inline above max_inline_data
  ibv_sge in = sge(64);
  w = wr(IBV_WR_RDMA_READ, &in, 1);
  w.send_flags |= IBV_SEND_INLINE;
  EXPECT_EQ(post(q, w), EINVAL);  // nothing to inline in a READ

  ibv_sge huge{reinterpret_cast<uint64_t>(buf.data()), 0x80000000u, 1};
  ibv_sge more = sge(1);
  ibv_sge msg[2] = {huge, more};
  w = wr(IBV_WR_RDMA_WRITE, msg, 2);
  EXPECT_EQ(post(q, w), EINVAL);  // above max_msg_sz
  EXPECT_EQ(q->sq.tail(), 0u);

  // A chain that fills the SQ: the ninth WR is the bad one, ENOMEM; the
  // first eight are posted.
  std::vector<ibv_send_wr> chain(9);
  ibv_sge one = sge(8);
  for (size_t i = 0; i < chain.size(); ++i) {
    chain[i] = wr(IBV_WR_RDMA_WRITE, &one, 1, i);
    chain[i].wr.rdma.remote_addr = 0x1000;
    chain[i].wr.rdma.rkey = 0x1234;
    if (i + 1 < chain.size()) chain[i].next = &chain[i + 1];
  }
  EXPECT_EQ(q->post_send(chain.data(), &bad), ENOMEM);
  EXPECT_EQ(bad, &chain[8]);
  EXPECT_EQ(q->sq.tail(), 8u);
  EXPECT_TRUE(q->sq.full());
  const SendWqe& first = q->sq.slot(0);
  EXPECT_EQ(first.opcode, IBV_WR_RDMA_WRITE);
  EXPECT_EQ(first.remote_addr, 0x1000u);
  EXPECT_EQ(first.rkey, Rkey(0x1234));
  EXPECT_EQ(first.length, 8u);
  EXPECT_EQ(first.num_sge, 1u);
  EXPECT_EQ(first.post_error, IBV_WC_SUCCESS);

  // An atomic needs an 8-byte buffer (IBA 9.4.5): another length is
  // taken and completes with a local length error, unexecuted.
  Qp* a = qp(IBV_QPT_RC);
  ready(a);
  ibv_sge four = sge(4);
  w = wr(IBV_WR_ATOMIC_FETCH_AND_ADD, &four, 1);
  ASSERT_EQ(post(a, w), 0);
  EXPECT_EQ(last_post_error(a), IBV_WC_LOC_LEN_ERR);
  ibv_sge two[2] = {sge(8), sge(8, 8)};
  w = wr(IBV_WR_ATOMIC_CMP_AND_SWP, two, 2);
  ASSERT_EQ(post(a, w), 0);
  EXPECT_EQ(last_post_error(a), IBV_WC_LOC_LEN_ERR);
  ibv_sge eight = sge(8);
  w = wr(IBV_WR_ATOMIC_CMP_AND_SWP, &eight, 1);
  ASSERT_EQ(post(a, w), 0);
  EXPECT_EQ(last_post_error(a), IBV_WC_SUCCESS);
}

TEST_F(Post, InlineBytesAreCopied) {
  Qp* q = qp(IBV_QPT_RC);
  ready(q);
  for (size_t i = 0; i < 40; ++i) buf[i] = static_cast<uint8_t>(i);
  ibv_sge s[2] = {sge(24), sge(16, 24)};
  ibv_send_wr w = wr(IBV_WR_SEND_WITH_IMM, s, 2, 42);
  w.send_flags |= IBV_SEND_INLINE;
  w.imm_data = 0x01020304;
  ASSERT_EQ(post(q, w), 0);
  std::fill(buf.begin(), buf.begin() + 40, 0);  // the caller may reuse its buffer at once
  const SendWqe& e = q->sq.slot(0);
  EXPECT_EQ(e.wr_id, 42u);
  EXPECT_EQ(e.length, 40u);
  EXPECT_EQ(e.imm_data, 0x01020304u);
  for (size_t i = 0; i < 40; ++i) ASSERT_EQ(e.inline_data[i], i) << i;
}

TEST_F(Post, UdAddressHandleAndLength) {
  Qp* q = qp(IBV_QPT_UD);
  ready(q);
  int err = 0;
  Ah* ah = rnic->create_ah(pd, ah_attr(true), &err);
  ASSERT_NE(ah, nullptr);
  Pd* other = rnic->alloc_pd(&err);
  Ah* foreign = rnic->create_ah(other, ah_attr(), &err);
  ASSERT_NE(foreign, nullptr);

  // What the verbs allow to post but the QP cannot carry out is taken
  // and completes in error, unexecuted (ConnectX's behaviour): an AH of
  // another PD (IBA 10.2.2), a message longer than one packet (IBA 9.9).
  // No AH at all is a malformed WR: EINVAL.
  ibv_sge s = sge(4096);  // the port's MTU (4096 on a 9000-byte sim port)
  ibv_send_wr w = wr(IBV_WR_SEND, &s, 1, 5);
  w.wr.ud.ah = &foreign->ibv;
  ASSERT_EQ(post(q, w), 0);
  EXPECT_EQ(last_post_error(q), IBV_WC_LOC_QP_OP_ERR);
  w.wr.ud.ah = nullptr;
  const ibv_send_wr* bad = nullptr;
  EXPECT_EQ(post(q, w, &bad), EINVAL);
  EXPECT_EQ(bad, &w);
  w.wr.ud.ah = &ah->ibv;
  w.wr.ud.remote_qpn = 0x1234;
  w.wr.ud.remote_qkey = 0x11111111;
  ibv_sge too_long = sge(4097);
  ibv_send_wr w2 = w;
  w2.sg_list = &too_long;
  ASSERT_EQ(post(q, w2), 0);
  EXPECT_EQ(last_post_error(q), IBV_WC_LOC_LEN_ERR);
  ASSERT_EQ(post(q, w), 0);
  EXPECT_EQ(last_post_error(q), IBV_WC_SUCCESS);
  const uint32_t at = q->sq.tail() - 1;
  const SendWqe& e = q->sq.slot(at);
  EXPECT_EQ(e.remote_qpn, Qpn(0x1234));
  EXPECT_EQ(e.remote_qkey, 0x11111111u);
  EXPECT_EQ(e.ud_path.dgid, kPeerUla);
  EXPECT_FALSE(e.ud_path.ipv4);
  // The path is the WQE's own: destroying the AH now is fine.
  EXPECT_EQ(rnic->destroy_ah(ah), 0);
  EXPECT_EQ(q->sq.slot(at).ud_path.dgid, kPeerUla);
}

TEST_F(Post, RecvErrnos) {
  Qp* q = qp(IBV_QPT_RC);  // 8 WRs, 2 SGEs
  ibv_sge s[3] = {sge(8), sge(8, 8), sge(8, 16)};
  ibv_recv_wr w{};
  w.wr_id = 1;
  w.sg_list = s;
  w.num_sge = 1;
  const ibv_recv_wr* bad = nullptr;
  // RESET takes receives (as ConnectX and rxe; they wait for RTR).
  EXPECT_EQ(q->post_recv(&w, &bad), 0);
  EXPECT_EQ(q->rq.size(), 1u);
  ASSERT_EQ(to_init(q), 0);
  EXPECT_EQ(q->rq.size(), 1u) << "kept across RESET -> INIT";
  w.num_sge = 3;
  EXPECT_EQ(q->post_recv(&w, &bad), EINVAL);  // num_sge > max_recv_sge
  EXPECT_EQ(bad, &w);
  w.num_sge = 2;
  std::vector<ibv_recv_wr> chain(8, w);
  for (size_t i = 0; i + 1 < chain.size(); ++i) chain[i].next = &chain[i + 1];
  EXPECT_EQ(q->post_recv(chain.data(), &bad), ENOMEM);  // INIT takes receives; the eighth does not fit
  EXPECT_EQ(bad, &chain[7]);
  EXPECT_EQ(q->rq.size(), 8u);
  EXPECT_EQ(q->rq.front()->total_len, 8u);

  int err = 0;
  ibv_srq_init_attr si{};
  si.attr.max_wr = 4;
  si.attr.max_sge = 1;
  Srq* srq = rnic->create_srq(pd, si, &err);
  ASSERT_NE(srq, nullptr);
  Cq* c = cq();
  Qp* on_srq = qp(IBV_QPT_RC, c, c, srq);
  ASSERT_EQ(to_init(on_srq), 0);
  w.num_sge = 1;
  w.next = nullptr;
  EXPECT_EQ(on_srq->post_recv(&w, &bad), EINVAL);  // receives go to the SRQ

  w.num_sge = 2;
  EXPECT_EQ(srq->post_recv(&w, &bad), EINVAL);  // SRQ max_sge 1
  w.num_sge = 1;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(srq->post_recv(&w, &bad), 0);
  EXPECT_EQ(srq->post_recv(&w, &bad), ENOMEM);
}

}  // namespace
}  // namespace uroce::rnic::ctltest
